# Input functions and look-ups of the rules in rules/objectives.smk (kept apart: a rule file holds rules only).


def ablation_inputs(wildcards):
    variants = target_variants("ablation")
    return {
        "xnli": [f"results/xnli/{v}_{lang}.tsv" for v in variants for lang in LANGUAGES],
        "ud": [f"results/ud/{v}_{lang}.tsv" for v in variants for lang in LANGUAGES],
    }

