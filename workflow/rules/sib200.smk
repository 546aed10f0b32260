# Zero-shot SIB-200 topic classification: a classifier fine-tuned on the source language's topics
# (epoch chosen on its dev set), then each target language tested with its own input table, and the
# source language's test, when the config lists it, with the English one.
# The classifier of a model shared by every target language depends on no target language, so it is
# fine-tuned once: results/sib200/classifiers/source for the source model (init none, and every
# variant's initialisation alone, whose English side is the source's), .../{variant} for a pretrained
# checkpoint; a trained variant's English side differs per language: .../{variant}_{lang}.


include: "inputs/sib200.smk"


rule sib200_classifier:
    input:
        unpack(sib200_classifier_inputs),
        checks=input_checks_passed,  # a pretrained checkpoint reads no prepared text
    output:
        directory("results/sib200/classifiers/{name}"),
    params:
        settings=lambda wildcards: config["tasks"]["sib200"]["settings"],
        checkpoints=lambda wildcards: f"{CHECKPOINTS}/sib200/{wildcards.name}",
        checkpoint_every=config["task_checkpoint_every"],
    log:
        "logs/sib200_classifier/{name}.log",
    benchmark:
        "results/benchmarks/sib200_classifier/{name}.tsv"
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
        "results/benchmarks/sib200/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/sib200.py"
