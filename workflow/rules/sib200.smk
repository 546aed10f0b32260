# Zero-shot SIB-200 topic classification: a classifier fine-tuned on the source language's topics
# (epoch chosen on its dev set), then each target language tested with its own input table, and the
# source language's test, when the config lists it, with the English one.
# The classifier of a model shared by every target language (init none or pretrained) depends on no
# target language, so it is fine-tuned once: results/sib200/classifiers/{variant}; a transferred
# variant's English side differs per language: results/sib200/classifiers/{variant}_{lang}.


def sib200_classifier_dir(variant, lang):
    return f"results/sib200/classifiers/{variant}" if not is_transfer(variant) else \
        f"results/sib200/classifiers/{variant}_{lang}"


def sib200_classifier_inputs(wildcards):
    task = config["tasks"]["sib200"]
    if wildcards.name in VARIANTS and not is_transfer(wildcards.name):
        english = model_dir(wildcards.name, None, SOURCE_LANG)
    else:
        variant, lang = wildcards.name.rsplit("_", 1)
        english = model_dir(variant, lang, SOURCE_LANG)
    return {
        "english": english,
        "train": local_input(task["train"][SOURCE_LANG]),
        "dev": local_input(task["dev"][SOURCE_LANG]),
    }


def sib200_inputs(wildcards):
    task = config["tasks"]["sib200"]
    inputs = {
        "classifier": sib200_classifier_dir(wildcards.variant, wildcards.lang),
        "foreign": model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        "test": local_input(task["test"][wildcards.lang]),
        "decontamination": decontamination_checks(wildcards, ("sib200", "dev"), ("sib200", "test")),
    }
    if SOURCE_LANG in task["test"]:
        inputs["source_test"] = local_input(task["test"][SOURCE_LANG])
    return inputs


rule sib200_classifier:
    input:
        unpack(sib200_classifier_inputs),
    output:
        directory("results/sib200/classifiers/{name}"),
    params:
        settings=lambda wildcards: config["tasks"]["sib200"]["settings"],
        checkpoints=lambda wildcards: f"{CHECKPOINTS}/sib200/{wildcards.name}",
        checkpoint_every=config["task_checkpoint_every"],
    log:
        "logs/sib200_classifier/{name}.log",
    benchmark:
        "benchmarks/sib200_classifier/{name}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/sib200_classifier.py"


rule sib200:
    input:
        unpack(sib200_inputs),
    output:
        "results/sib200/{variant}_{lang}.tsv",
    params:
        settings=lambda wildcards: config["tasks"]["sib200"]["settings"],
        source_lang=SOURCE_LANG,
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
