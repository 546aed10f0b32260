# char2subword (docs/char2subword.md): approximate a table with a character-level module, pre-train
# it with the model frozen, approximate again; measure neighbour precision (Table 2, Figure 4) and
# zero-shot XNLI on a noised test set in table, full and hybrid mode. `make demo-char2subword`.


include: "inputs/char2subword.smk"


wildcard_constraints:
    table=r"source|[A-Za-z0-9-]+_[a-z]{2,3}",
    losses=r"[a-z0-9]+(\+[a-z0-9]+)*",


localrules:
    char2subword_all,


# Its tables and variants are looked up only when a run asks for it: a config without them still runs.
rule char2subword_all:
    input:
        lambda wildcards: c2s_targets(),


rule c2s_approximate:
    input:
        model=lambda wildcards: c2s_table_parts(wildcards.table)[0],
        data=lambda wildcards: f"results/encoded/{c2s_table_parts(wildcards.table)[1]}",
    output:
        module="results/char2subword/{table}/approx.{losses}.safetensors",
        metrics="results/char2subword/{table}/approx.{losses}.metrics.tsv",
    params:
        sizes=config["char2subword"]["module"],
        settings=lambda wildcards: {
            **config["char2subword"]["approximation"],
            "losses": c2s_losses_weights(wildcards.losses),
        },
        checkpoints=lambda wildcards, output: f"{CHECKPOINTS}/char2subword/{wildcards.table}/{Path(output.module).name}",
        checkpoint_every=config["task_checkpoint_every"],
    log:
        "logs/c2s_approximate/{table}.{losses}.log",
    benchmark:
        "results/benchmarks/c2s_approximate/{table}.{losses}.tsv"
    threads: config["threads"]["train"]
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/c2s_approximate.py"


rule c2s_pretrain:
    input:
        module=lambda wildcards: c2s_module_path(wildcards.table, "approx"),
        model=lambda wildcards: c2s_table_parts(wildcards.table)[0],
        data=lambda wildcards: f"results/encoded/{c2s_table_parts(wildcards.table)[1]}",
    output:
        module="results/char2subword/{table}/pretrained.safetensors",
        metrics="results/char2subword/{table}/pretrained.metrics.tsv",
    params:
        settings=config["char2subword"]["pretraining"],
        checkpoints=lambda wildcards, output: f"{CHECKPOINTS}/char2subword/{wildcards.table}/{Path(output.module).name}",
        checkpoint_every=config["task_checkpoint_every"],
    log:
        "logs/c2s_pretrain/{table}.log",
    benchmark:
        "results/benchmarks/c2s_pretrain/{table}.tsv"
    threads: config["threads"]["train"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/c2s_pretrain.py"


# Figure 4: "Approx. -> Pre-training -> Approx.": the pre-trained module approximates the table again.
rule c2s_reapproximate:
    input:
        start="results/char2subword/{table}/pretrained.safetensors",
        model=lambda wildcards: c2s_table_parts(wildcards.table)[0],
        data=lambda wildcards: f"results/encoded/{c2s_table_parts(wildcards.table)[1]}",
    output:
        module="results/char2subword/{table}/final.safetensors",
        metrics="results/char2subword/{table}/final.metrics.tsv",
    params:
        sizes=config["char2subword"]["module"],
        settings={
            **config["char2subword"]["approximation"],
            **config["char2subword"]["reapproximation"],
        },
        checkpoints=lambda wildcards, output: f"{CHECKPOINTS}/char2subword/{wildcards.table}/{Path(output.module).name}",
        checkpoint_every=config["task_checkpoint_every"],
    log:
        "logs/c2s_reapproximate/{table}.log",
    benchmark:
        "results/benchmarks/c2s_reapproximate/{table}.tsv"
    threads: config["threads"]["train"]
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/c2s_approximate.py"


rule c2s_precision:
    input:
        model=lambda wildcards: c2s_table_parts(wildcards.table)[0],
        data=lambda wildcards: f"results/encoded/{c2s_table_parts(wildcards.table)[1]}",
        table2=lambda wildcards: [
            f"results/char2subword/{wildcards.table}/approx.{losses}.safetensors" for losses in c2s_table2_losses()
        ],
        pretrained="results/char2subword/{table}/pretrained.safetensors",
        final="results/char2subword/{table}/final.safetensors",
    output:
        report(
            "results/char2subword/{table}/precision.tsv",
            caption="../report/char2subword_precision.rst",
            category="char2subword",
        ),
    params:
        table2=c2s_table2_losses(),
        main=c2s_main_losses(),
        evaluation=config["char2subword"]["evaluation"],
        sizes=config["char2subword"]["module"],
        noise={
            key: config["char2subword"]["approximation"][key]
            for key in ("noise_share", "operations", "noise_min_length", "seed", "max_rows")
        },
    log:
        "logs/c2s_precision/{table}.log",
    benchmark:
        "results/benchmarks/c2s_precision/{table}.tsv"
    threads: config["threads"]["evaluate"]
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/c2s_precision.py"


rule c2s_noisy_xnli:
    input:
        classifier="results/xnli/classifiers/{variant}_{lang}",
        foreign=lambda wildcards: model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        test=lambda wildcards: local_input(config["tasks"]["xnli"]["test"][wildcards.lang]),
        modules=lambda wildcards: [
            c2s_module_path(f"{wildcards.variant}_{wildcards.lang}", stage)
            for stage in config["char2subword"]["noisy_xnli"]["stages"]
        ],
    output:
        report(
            "results/char2subword/xnli/{variant}_{lang}.tsv",
            caption="../report/char2subword_xnli.rst",
            category="char2subword",
        ),
    params:
        settings=config["char2subword"]["noisy_xnli"],
        eval_batch_size=config["tasks"]["xnli"]["settings"]["eval_batch_size"],
    log:
        "logs/c2s_noisy_xnli/{variant}_{lang}.log",
    benchmark:
        "results/benchmarks/c2s_noisy_xnli/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/c2s_noisy_xnli.py"
