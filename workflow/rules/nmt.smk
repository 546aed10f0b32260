# BERT-fused NMT (Zhu et al., 2020): a plain Transformer, then BERT-fused models warm-started
# from it (the full model and its ablations), and a BLEU / decoding-time table per direction.
# `make demo-nmt` builds the tables named in targets.nmt; results/nmt/{variant}_{src}-{tgt}.tsv
# uses the variant's model of language {src} as the frozen BERT.


include: "inputs/nmt.smk"


wildcard_constraints:
    src=r"[a-z]{2,3}",
    tgt=r"[a-z]{2,3}",
    variant=r"[A-Za-z0-9-]+",
    arm=r"fused|no-dropnet|no-bert-enc|no-bert-dec",


rule nmt_data:
    input:
        checks=input_checks_passed,  # tasks.nmt.train files need no prepared text
        train_source=lambda wildcards: nmt_train_file(wildcards.lang, SOURCE_LANG),
        train_foreign=lambda wildcards: nmt_train_file(wildcards.lang, wildcards.lang),
        dev_source=lambda wildcards: nmt_split_file("dev", SOURCE_LANG),
        dev_foreign=lambda wildcards: nmt_split_file("dev", wildcards.lang),
        test_source=lambda wildcards: nmt_split_file("test", SOURCE_LANG),
        test_foreign=lambda wildcards: nmt_split_file("test", wildcards.lang),
        decontamination=lambda wildcards: decontamination_checks(wildcards, ("nmt", "dev"), ("nmt", "test")),
    output:
        directory(f"results/nmt/data/{SOURCE_LANG}-{{lang}}"),
    params:
        merges=lambda wildcards: nmt_settings()["bpe_merges"],
        source_lang=SOURCE_LANG,
    log:
        "logs/nmt_data/{lang}.log",
    benchmark:
        "results/benchmarks/nmt_data/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/nmt_data.py"


rule nmt_train_plain:
    input:
        data=nmt_data_dir,
    output:
        model=directory("results/nmt/plain/{src}-{tgt}"),
        metrics="results/nmt/training/plain_{src}-{tgt}.metrics.csv",
    params:
        model=lambda wildcards: nmt_settings()["model"],
        training=lambda wildcards: nmt_settings()["plain"],
        checkpoints=lambda wildcards: f"{CHECKPOINTS}/nmt/plain_{wildcards.src}-{wildcards.tgt}",
        device=config["device"],
    log:
        "logs/nmt_train_plain/{src}-{tgt}.log",
    benchmark:
        "results/benchmarks/nmt_train_plain/{src}-{tgt}.tsv"
    threads: config["threads"]["train"]
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/nmt_train_plain.py"


rule nmt_train_fused:
    input:
        data=nmt_data_dir,
        plain="results/nmt/plain/{src}-{tgt}",
        plain_metrics="results/nmt/training/plain_{src}-{tgt}.metrics.csv",
        bert=nmt_bert_dir,
        train_text=lambda wildcards: nmt_train_text(wildcards, wildcards.src),
        dev_text=lambda wildcards: nmt_split_file("dev", wildcards.src),
    output:
        model=directory("results/nmt/fused/{variant}_{src}-{tgt}/{arm}"),
        metrics="results/nmt/training/{variant}_{src}-{tgt}.{arm}.metrics.csv",
    params:
        p_net=lambda wildcards: nmt_settings()["p_net"],
        training=lambda wildcards: nmt_settings()["fused"],
        checkpoints=lambda wildcards: (
            f"{CHECKPOINTS}/nmt/{wildcards.variant}_{wildcards.src}-{wildcards.tgt}.{wildcards.arm}"
        ),
        device=config["device"],
    log:
        "logs/nmt_train_fused/{variant}_{src}-{tgt}.{arm}.log",
    benchmark:
        "results/benchmarks/nmt_train_fused/{variant}_{src}-{tgt}.{arm}.tsv"
    threads: config["threads"]["train"]
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/nmt_train_fused.py"


rule nmt_evaluate:
    input:
        data=nmt_data_dir,
        plain="results/nmt/plain/{src}-{tgt}",
        plain_metrics="results/nmt/training/plain_{src}-{tgt}.metrics.csv",
        fused=lambda wildcards: expand(
            "results/nmt/fused/{variant}_{src}-{tgt}/{arm}", arm=nmt_arms(), allow_missing=True
        ),
        fused_metrics=lambda wildcards: expand(
            "results/nmt/training/{variant}_{src}-{tgt}.{arm}.metrics.csv", arm=nmt_arms(), allow_missing=True
        ),
        bert=nmt_bert_dir,
        source=lambda wildcards: nmt_split_file("test", wildcards.src),
        reference=lambda wildcards: nmt_split_file("test", wildcards.tgt),
    output:
        table="results/nmt/{variant}_{src}-{tgt}.tsv",
        translations=directory("results/nmt/translations/{variant}_{src}-{tgt}"),
    params:
        arms=lambda wildcards: nmt_arms(),
        search=lambda wildcards: nmt_settings()["search"],
        batch_size=lambda wildcards: nmt_settings()["eval_batch_size"],
        device=config["device"],
    log:
        "logs/nmt_evaluate/{variant}_{src}-{tgt}.log",
    benchmark:
        "results/benchmarks/nmt_evaluate/{variant}_{src}-{tgt}.tsv"
    # Plain and fused models are timed one after another in this job, with the same threads.
    threads: config["threads"]["evaluate"]
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/nmt_evaluate.py"


rule summarise_nmt:
    input:
        nmt_table_targets(),
    output:
        report(
            "results/report/nmt_summary.tsv",
            caption="../report/nmt_summary.rst",
            category="BERT-fused NMT",
        ),
    log:
        "logs/summarise_nmt/summary.log",
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/summarise_nmt.py"


localrules:
    summarise_nmt,
    nmt_all,


rule nmt_all:
    input:
        nmt_table_targets(),
        "results/report/nmt_summary.tsv",
