# UD dependency parsing with a biaffine parser: zero-shot (train on the source language's
# treebank, test on the target's) and supervised (the target's own train/dev/test, Table 4).


include: "inputs/ud.smk"


rule ud_zero_shot:
    input:
        unpack(ud_zero_shot_inputs),
    output:
        scores="results/ud/{variant}_{lang}.tsv",
        predictions="results/ud/{variant}_{lang}.conllu",
        parser=directory("results/ud/parsers/{variant}_{lang}"),
    params:
        settings=lambda wildcards: ud_task()["settings"],
        checkpoints=lambda wildcards: f"{CHECKPOINTS}/ud/{wildcards.variant}_{wildcards.lang}",
        checkpoint_every=config["task_checkpoint_every"],
    log:
        "logs/ud_zero_shot/{variant}_{lang}.log",
    benchmark:
        "results/benchmarks/ud_zero_shot/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/ud_zero_shot.py"


rule ud_supervised:
    input:
        unpack(ud_supervised_inputs),
    output:
        scores="results/ud/supervised/{variant}_{lang}.tsv",
        predictions="results/ud/supervised/{variant}_{lang}.conllu",
        parser=directory("results/ud/supervised/parsers/{variant}_{lang}"),
    params:
        settings=lambda wildcards: ud_supervised_settings(),
        checkpoints=lambda wildcards: f"{CHECKPOINTS}/ud/supervised/{wildcards.variant}_{wildcards.lang}",
        checkpoint_every=config["task_checkpoint_every"],
    log:
        "logs/ud_supervised/{variant}_{lang}.log",
    benchmark:
        "results/benchmarks/ud_supervised/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/ud_supervised.py"


# Figure 2: zero-shot parsing at initialisation (step 0) and at every checkpoint the bilingual
# training kept (training.keep_every); one parser trained per checkpoint.
rule ud_checkpoint_curve:
    input:
        unpack(ud_curve_inputs),
    output:
        "results/curves/ud/{variant}_{lang}.tsv",
    params:
        settings=lambda wildcards: ud_task()["settings"],
        training=training_run_settings,
        checkpoints=lambda wildcards: f"{CHECKPOINTS}/{wildcards.variant}_{wildcards.lang}",
        source_lang=SOURCE_LANG,
    log:
        "logs/ud_checkpoint_curve/{variant}_{lang}.log",
    benchmark:
        "results/benchmarks/ud_checkpoint_curve/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/ud_checkpoint_curve.py"


# A model shared by every target language (the source model, mBERT: init none or pretrained)
# trains one English parser and keeps every epoch's; each language selects its epoch on its own
# dev treebank, as a run of its own would (ramen.tasks.epochs).
rule ud_parser_shared:
    input:
        english=lambda wildcards: model_dir(wildcards.variant, None, SOURCE_LANG),
        checks=input_checks_passed,  # a pretrained checkpoint reads no prepared text
        train=lambda wildcards: ud_treebank("train", SOURCE_LANG),
    output:
        directory("results/ud/parsers/{variant}"),
    wildcard_constraints:
        variant=SHARED_VARIANTS,
    params:
        settings=lambda wildcards: ud_task()["settings"],
        checkpoints=lambda wildcards: f"{CHECKPOINTS}/ud/{wildcards.variant}",
        checkpoint_every=config["task_checkpoint_every"],
    log:
        "logs/ud_parser_shared/{variant}.log",
    benchmark:
        "results/benchmarks/ud_parser_shared/{variant}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/ud_parser_shared.py"


rule ud_zero_shot_shared:
    input:
        parsers="results/ud/parsers/{variant}",
        foreign=lambda wildcards: model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        dev=lambda wildcards: ud_treebank("dev", wildcards.lang),
        test=lambda wildcards: ud_treebank("test", wildcards.lang),
        decontamination=lambda wildcards: decontamination_checks(wildcards, ("ud", "dev"), ("ud", "test")),
    output:
        scores="results/ud/{variant}_{lang}.tsv",
        predictions="results/ud/{variant}_{lang}.conllu",
    wildcard_constraints:
        variant=SHARED_VARIANTS,
    log:
        "logs/ud_zero_shot_shared/{variant}_{lang}.log",
    benchmark:
        "results/benchmarks/ud_zero_shot_shared/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/ud_zero_shot_shared.py"


ruleorder: ud_zero_shot_shared > ud_zero_shot
