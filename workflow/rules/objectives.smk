# Training objectives on translation pairs (variants.<name>.objective) and the objective x init table.


include: "inputs/objectives.smk"


for _task in checkpoint_targets():
    for _variant in target_variants(_task):
        if not is_transfer(_variant):
            raise ValueError(
                f"config: targets.{_task} lists '{_variant}', whose init "
                f"'{variant_settings(_variant)['init']}' trains no bilingual model and so has no "
                "checkpoints; remove it from the checkpoint curves"
            )
        if init_entry(_variant).from_scratch:
            raise ValueError(
                f"config: targets.{_task} lists '{_variant}', which trains from scratch; the checkpoint "
                "curves rebuild the pretrained model around each checkpoint and do not cover it"
            )


rule encode_pairs:
    input:
        source=f"results/align/{SOURCE_LANG}-{{lang}}/ids.{SOURCE_LANG}",
        foreign=f"results/align/{SOURCE_LANG}-{{lang}}/ids.{{lang}}",
        tokenizer="results/vocab/{lang}/tokenizer",
        source_model=source_model_input(),
    output:
        directory(f"results/encoded/pairs/{SOURCE_LANG}-{{lang}}"),
    params:
        source_model=config["source"]["model"],
    log:
        "logs/encode_pairs/{lang}.log",
    benchmark:
        "results/benchmarks/encode_pairs/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/encode_pairs.py"


rule objective_ablation:
    input:
        unpack(ablation_inputs),
    output:
        table=report(
            "results/report/objective_ablation.tsv",
            caption="../report/objective_ablation.rst",
            category="Training objectives",
        ),
        plot=report(
            "results/report/objective_ablation.png",
            caption="../report/objective_ablation_plot.rst",
            category="Training objectives",
        ),
    params:
        variants=lambda wildcards: {
            v: {"row": ablation_row(v), "init": variant_settings(v)["init"]} for v in target_variants("ablation")
        },
    log:
        "logs/objective_ablation/table.log",
    benchmark:
        "results/benchmarks/objective_ablation/table.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/objective_ablation.py"
