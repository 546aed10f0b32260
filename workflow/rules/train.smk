# Bilingual masked-LM fine-tuning; each language's side is exported as a Hugging Face model.


include: "inputs/train.smk"


rule train_bilingual:
    input:
        source="results/models/source",
        init="results/init/{variant}_{lang}.safetensors",
        tokenizer=lambda wildcards: foreign_tokenizer(wildcards.variant, wildcards.lang),
        source_data=lambda wildcards: encoded_text(wildcards.variant, wildcards.lang, SOURCE_LANG),
        source_exclusions=lambda wildcards: source_exclusions(wildcards.lang),
        foreign_data=lambda wildcards: encoded_text(wildcards.variant, wildcards.lang, wildcards.lang),
        pairs=pairs_input,
    output:
        source=directory(f"results/models/{{variant}}_{{lang}}/{SOURCE_LANG}"),
        foreign=directory("results/models/{variant}_{lang}/{lang}"),
        metrics="results/training/{variant}_{lang}.metrics.csv",
    params:
        # With the training objective (ramen.objectives; RAMEN's is mlm).
        settings=training_run_settings,
        checkpoints=lambda wildcards: f"{CHECKPOINTS}/{wildcards.variant}_{wildcards.lang}",
        device=config["device"],
        source_lang=SOURCE_LANG,
        vocabulary=lambda wildcards: variant_settings(wildcards.variant)["vocabulary"],
    log:
        "logs/train_bilingual/{variant}_{lang}.log",
    benchmark:
        "results/benchmarks/train_bilingual/{variant}_{lang}.tsv"
    threads: config["threads"]["train"]
    resources:
        **gpu_resources(training_run_settings),
    # The longest chain of every run (training, then each task's fine-tuning and evaluation): started
    # before the jobs that can wait, so two trainings share the cores instead of one trailing alone.
    priority: 10
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/train_bilingual.py"


# Each exported side also as one GGUF file for llama.cpp, Ollama and LM Studio (decoder sources:
# llama, mistral, qwen2, qwen3): `snakemake results/gguf/{variant}_{lang}/{side}/model.gguf`, or
# `snakemake gguf_all` for every side of the trained variants. Quantising the f16 file is llama.cpp's
# job (llama-quantize). An architecture without a writer is refused while the job graph is built.
rule export_gguf:
    input:
        unpack(gguf_export_inputs),
    output:
        gguf="results/gguf/{variant}_{lang}/{side}/model.gguf",
    params:
        dtype=config["gguf"]["dtype"],
        # gguf.pre, else the source's own pre-tokenizer (source.model)
        pre=config["gguf"]["pre"],
        source_model=config["source"]["model"],
    log:
        "logs/export_gguf/{variant}_{lang}/{side}.log",
    benchmark:
        "results/benchmarks/export_gguf/{variant}_{lang}/{side}.tsv"
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/export_gguf.py"


rule gguf_all:
    input:
        gguf_all_targets,
