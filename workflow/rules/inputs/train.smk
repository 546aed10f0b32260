# Input functions and look-ups of the rules in rules/train.smk (kept apart: a rule file holds rules only).


def pairs_input(wildcards):
    """Encoded translation pairs, for objectives that train on them."""
    if not uses_pairs(variant_objective(wildcards.variant)):
        return []
    if wildcards.lang not in config["parallel"]:
        raise ValueError(
            f"config: variant '{wildcards.variant}' trains on translation pairs but there is no "
            f"parallel.{wildcards.lang} entry"
        )
    return f"results/encoded/pairs/{SOURCE_LANG}-{wildcards.lang}"
