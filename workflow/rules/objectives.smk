# Training objectives on translation pairs (variants.<name>.objective) and the objective x init table.
from ramen.objective_config import PAIR_OBJECTIVES, gated_relative_position, objective_params


def variant_objective(variant):
    return variant_settings(variant).get("objective", "mlm")


def objective_settings(variant):
    """The objective settings a variant's training reads ({} for plain masked-LM)."""
    return objective_params(
        variant_objective(variant), config.get("objectives"), variant_settings(variant).get("objectives")
    )


def training_run_settings(wildcards):
    """The settings that define a variant's training run: its training rule's params, which the
    checkpoint curves read too, to find that run's checkpoints and export them as it does."""
    objective = objective_settings(wildcards.variant)
    return {
        **training_settings("training"),
        **variant_settings(wildcards.variant).get("training", {}),
        # Absent for RAMEN's plain masked-LM, so its runs (and checkpoints) stay as they are.
        **({"objective": objective} if objective else {}),
        # init: scratch re-draws the encoder and the English table before training.
        **({"from_scratch": True} if init_entry(wildcards.variant).from_scratch else {}),
    }


for _task in ("curves", "xnli_curves", "ud_curves"):
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


def pairs_input(wildcards):
    """Encoded translation pairs, for objectives that train on them."""
    if variant_objective(wildcards.variant) not in PAIR_OBJECTIVES:
        return []
    if wildcards.lang not in config["parallel"]:
        raise ValueError(
            f"config: variant '{wildcards.variant}' trains on translation pairs but there is no "
            f"parallel.{wildcards.lang} entry"
        )
    return f"results/encoded/pairs/{SOURCE_LANG}-{wildcards.lang}"


def ablation_row(variant):
    """A variant's row in the objective x init table: its objective, + grpb with the gated relative
    position bias, marked when it trains with focal loss."""
    name = variant_objective(variant)
    gated = gated_relative_position(name, config.get("objectives"), variant_settings(variant).get("objectives"))
    focal = objective_settings(variant).get("focal", {}).get("enabled")
    return name + ("+grpb" if gated else "") + (" + focal" if focal else "")


def ablation_inputs(wildcards):
    variants = target_variants("ablation")
    return {
        "xnli": [f"results/xnli/{v}_{lang}.tsv" for v in variants for lang in LANGUAGES],
        "ud": [f"results/ud/{v}_{lang}.tsv" for v in variants for lang in LANGUAGES],
    }


rule encode_pairs:
    input:
        source=f"results/align/{SOURCE_LANG}-{{lang}}/ids.{SOURCE_LANG}",
        foreign=f"results/align/{SOURCE_LANG}-{{lang}}/ids.{{lang}}",
        tokenizer="results/vocab/{lang}/tokenizer",
        source_model=source_model_input(),
    output:
        directory(f"results/encoded/pairs/{SOURCE_LANG}-{{lang}}"),
    params:
        source_model=SOURCE_MODEL,
    log:
        "logs/encode_pairs/{lang}.log",
    benchmark:
        "benchmarks/encode_pairs/{lang}.tsv"
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
        "benchmarks/objective_ablation/table.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/objective_ablation.py"
