# English MLM head warm-up, then the foreign embedding table and output bias of each variant.


include: "inputs/init.smk"


rule warmup_head:
    input:
        data=f"results/encoded/{SOURCE_LANG}",
        source_model=source_model_input(),
    output:
        model=directory("results/models/source"),
        metrics="results/training/source.metrics.csv",
    params:
        source_model=config["source"]["model"],
        settings=training_settings("head_warmup"),
        checkpoints=f"{CHECKPOINTS}/source",
        device=config["device"],
    log:
        "logs/warmup_head/source.log",
    benchmark:
        "results/benchmarks/warmup_head/source.tsv"
    threads: config["threads"]["train"]
    resources:
        **gpu_resources(lambda wildcards: training_settings("head_warmup")),
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/warmup_head.py"


rule init_foreign:
    input:
        unpack(init_inputs),
    output:
        embeddings="results/init/{variant}_{lang}.safetensors",
        stats="results/init/{variant}_{lang}.json",
    params:
        method=lambda wildcards: variant_settings(wildcards.variant)["init"],
        seed=lambda wildcards: variant_settings(wildcards.variant)["seed"],
        settings=lambda wildcards: init_settings(wildcards.variant),
        vocabulary=lambda wildcards: variant_settings(wildcards.variant)["vocabulary"],
        output_init=lambda wildcards: variant_settings(wildcards.variant)["output_init"],
        # Where an initialiser that fits rows in a loop (distill) resumes from after a kill; derived from the
        # output, so no existing init job reruns for it (it changes no result).
        checkpoints=lambda wildcards, output: f"{CHECKPOINTS}/init/{Path(output.embeddings).stem}",
    log:
        "logs/init_foreign/{variant}_{lang}.log",
    benchmark:
        "results/benchmarks/init_foreign/{variant}_{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/init_foreign.py"


# FOCUS's auxiliary vectors: fastText on the foreign corpus tokenised with the foreign tokenizer (the
# language's own, or, {vocabulary} ".extended", the source's extended).
rule focus_fasttext:
    input:
        text="results/text/{lang}/train.txt",
        tokenizer=lambda wildcards: vocabulary_tokenizer(wildcards.lang, wildcards.vocabulary),
    output:
        vectors="results/peers/{lang}{vocabulary}/token_fasttext.vec",
    params:
        settings=config["peers"]["focus"]["fasttext"],
    log:
        "logs/focus_fasttext/{lang}{vocabulary}.log",
    benchmark:
        "results/benchmarks/focus_fasttext/{lang}{vocabulary}.tsv"
    threads: config["peers"]["focus"]["fasttext"]["threads"]
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/focus_fasttext.py"

