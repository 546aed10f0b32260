# Input functions and look-ups of the rules in rules/objectives.smk (kept apart: a rule file holds rules only).
from ramen.objectives import gated_relative_position
from ramen.reports.objectives import row_label
from ramen.tasks import checkpoint_targets


def ablation_inputs(wildcards):
    variants = target_variants("ablation")
    return {
        "xnli": [f"results/xnli/{v}_{lang}.tsv" for v in variants for lang in LANGUAGES],
        "ud": [f"results/ud/{v}_{lang}.tsv" for v in variants for lang in LANGUAGES],
    }


def ablation_row(variant):
    """A variant's row in the objective x init table: its objective, + grpb with the gated relative
    position bias, marked when it trains with focal loss."""
    name = variant_objective(variant)
    gated = gated_relative_position(name, config.get("objectives"), variant_settings(variant).get("objectives"))
    focal = objective_settings(variant).get("focal", {}).get("enabled")
    return row_label(name, gated, bool(focal))
