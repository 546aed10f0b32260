# Zero-shot SIB-200 topic classification: fine-tune on the source language's topics, test each
# target language with its own input table (and the source language's test with the English one,
# when the config lists it).


def sib200_inputs(wildcards):
    task = config["tasks"]["sib200"]
    inputs = {
        "english": model_dir(wildcards.variant, wildcards.lang, SOURCE_LANG),
        "foreign": model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        "train": local_input(task["train"][SOURCE_LANG]),
        "dev": local_input(task["dev"][SOURCE_LANG]),
        "test": local_input(task["test"][wildcards.lang]),
        "decontamination": decontamination_checks(wildcards, ("sib200", "dev"), ("sib200", "test")),
    }
    if SOURCE_LANG in task["test"]:
        inputs["source_test"] = local_input(task["test"][SOURCE_LANG])
    return inputs


rule sib200:
    input:
        unpack(sib200_inputs),
    output:
        scores="results/sib200/{variant}_{lang}.tsv",
        classifier=directory("results/sib200/classifiers/{variant}_{lang}"),
    params:
        settings=lambda wildcards: config["tasks"]["sib200"]["settings"],
        source_lang=SOURCE_LANG,
        checkpoints=lambda wildcards: f"{CHECKPOINTS}/sib200/{wildcards.variant}_{wildcards.lang}",
        checkpoint_every=config["task_checkpoint_every"],
    log:
        "logs/sib200/{variant}_{lang}.log",
    benchmark:
        "benchmarks/sib200/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/sib200.py"
