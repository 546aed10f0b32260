# Zero-shot XNLI: fine-tune on English NLI, select on the target dev set, test on the target.


rule finetune_xnli:
    input:
        unpack(xnli_inputs),
    output:
        directory("results/xnli/classifiers/{variant}_{lang}"),
    params:
        train_sources=nli_train_sources(),
        settings=config["tasks"]["xnli"]["settings"],
    log:
        "logs/finetune_xnli/{variant}_{lang}.log",
    benchmark:
        "benchmarks/finetune_xnli/{variant}_{lang}.tsv"
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
        "results/xnli/{variant}_{lang}.tsv",
    params:
        eval_batch_size=config["tasks"]["xnli"]["settings"].get("eval_batch_size", 128),
    log:
        "logs/evaluate_xnli/{variant}_{lang}.log",
    benchmark:
        "benchmarks/evaluate_xnli/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/evaluate_xnli.py"
