# Zero-shot XNLI: fine-tune on English NLI, select on the target dev set, test on the target.


include: "inputs/xnli.smk"


rule finetune_xnli:
    input:
        unpack(xnli_inputs),
    output:
        directory("results/xnli/classifiers/{variant}_{lang}"),
    params:
        train_sources=nli_train_sources(),
        settings=config["tasks"]["xnli"]["settings"],
        checkpoints=lambda wildcards: f"{CHECKPOINTS}/xnli/{wildcards.variant}_{wildcards.lang}",
        checkpoint_every=config["task_checkpoint_every"],
    log:
        "logs/finetune_xnli/{variant}_{lang}.log",
    benchmark:
        "results/benchmarks/finetune_xnli/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/finetune_xnli.py"


rule evaluate_xnli:
    input:
        unpack(xnli_test_inputs),
    output:
        scores="results/xnli/{variant}_{lang}.tsv",
        predictions="results/xnli/{variant}_{lang}.predictions.tsv",
    params:
        eval_batch_size=config["tasks"]["xnli"]["settings"]["eval_batch_size"],
        source_lang=SOURCE_LANG,
    log:
        "logs/evaluate_xnli/{variant}_{lang}.log",
    benchmark:
        "results/benchmarks/evaluate_xnli/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/evaluate_xnli.py"


# Figure 2: zero-shot XNLI at initialisation (step 0) and at every checkpoint the bilingual
# training kept (training.keep_every); one English fine-tuning per checkpoint.
rule xnli_checkpoint_curve:
    input:
        unpack(xnli_curve_inputs),
    output:
        "results/curves/xnli/{variant}_{lang}.tsv",
    params:
        train_sources=nli_train_sources(),
        settings=config["tasks"]["xnli"]["settings"],
        training=training_run_settings,
        checkpoints=lambda wildcards: f"{CHECKPOINTS}/{wildcards.variant}_{wildcards.lang}",
        source_lang=SOURCE_LANG,
    log:
        "logs/xnli_checkpoint_curve/{variant}_{lang}.log",
    benchmark:
        "results/benchmarks/xnli_checkpoint_curve/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/xnli_checkpoint_curve.py"


# A model shared by every target language (the source model, mBERT: init none or pretrained) is
# fine-tuned once and keeps every epoch's classifier; each language selects its epoch on its own
# dev set, as a run of its own would (ramen.tasks.epochs).
rule finetune_xnli_shared:
    input:
        english=lambda wildcards: model_dir(wildcards.variant, None, SOURCE_LANG),
        checks=input_checks_passed,  # a pretrained checkpoint reads no prepared text
        train=[entry["path"] for entry in nli_train_sources()],
    output:
        directory("results/xnli/classifiers/{variant}"),
    wildcard_constraints:
        variant=SHARED_VARIANTS,
    params:
        train_sources=nli_train_sources(),
        settings=config["tasks"]["xnli"]["settings"],
        checkpoints=lambda wildcards: f"{CHECKPOINTS}/xnli/{wildcards.variant}",
        checkpoint_every=config["task_checkpoint_every"],
    log:
        "logs/finetune_xnli_shared/{variant}.log",
    benchmark:
        "results/benchmarks/finetune_xnli_shared/{variant}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/finetune_xnli_shared.py"


rule evaluate_xnli_shared:
    input:
        unpack(xnli_shared_inputs),
    output:
        scores="results/xnli/{variant}_{lang}.tsv",
        predictions="results/xnli/{variant}_{lang}.predictions.tsv",
    wildcard_constraints:
        variant=SHARED_VARIANTS,
    params:
        eval_batch_size=config["tasks"]["xnli"]["settings"]["eval_batch_size"],
        source_lang=SOURCE_LANG,
    log:
        "logs/evaluate_xnli_shared/{variant}_{lang}.log",
    benchmark:
        "results/benchmarks/evaluate_xnli_shared/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/evaluate_xnli_shared.py"


ruleorder: evaluate_xnli_shared > evaluate_xnli
