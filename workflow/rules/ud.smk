# UD dependency parsing with a biaffine parser: zero-shot (train on the source language's
# treebank, test on the target's) and supervised (the target's own train/dev/test, Table 4).


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
        "benchmarks/ud_zero_shot/{variant}_{lang}.tsv"
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
        "benchmarks/ud_supervised/{variant}_{lang}.tsv"
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
        "benchmarks/ud_checkpoint_curve/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/ud_checkpoint_curve.py"
