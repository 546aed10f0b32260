# Tatoeba-style sentence retrieval (a cheap zero-shot check) for a final model, and the same
# check at every kept checkpoint of bilingual training (Figure 2-style curves).


include: "inputs/retrieval.smk"


rule retrieval:
    input:
        unpack(retrieval_inputs),
    output:
        "results/retrieval/{variant}_{lang}.tsv",
    params:
        settings=lambda wildcards: config["tasks"]["retrieval"].get("settings", {}),
    log:
        "logs/retrieval/{variant}_{lang}.log",
    benchmark:
        "results/benchmarks/retrieval/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/retrieval.py"


rule retrieval_checkpoint_curve:
    input:
        unpack(retrieval_inputs),
        trained="results/training/{variant}_{lang}.metrics.csv",
        source="results/models/source",
        init="results/init/{variant}_{lang}.safetensors",
        tokenizer="results/vocab/{lang}/tokenizer",
    output:
        "results/curves/{variant}_{lang}.tsv",
    params:
        settings=lambda wildcards: config["tasks"]["retrieval"].get("settings", {}),
        training=training_run_settings,
        checkpoints=lambda wildcards: f"{CHECKPOINTS}/{wildcards.variant}_{wildcards.lang}",
        source_lang=SOURCE_LANG,
    log:
        "logs/retrieval_checkpoint_curve/{variant}_{lang}.log",
    benchmark:
        "results/benchmarks/retrieval_checkpoint_curve/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/retrieval_checkpoint_curve.py"
