# Input functions and look-ups of the rules in rules/train.smk (kept apart: a rule file holds rules only).

from ramen.workflow import gguf_checks


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


def gguf_export_inputs(wildcards):
    """The exported side and a downloaded source; the GGUF settings and the source checked first,
    while the job graph is built (ramen.workflow.gguf_checks), so no training runs for a file that
    cannot be written."""
    gguf_checks.check_gguf_export(config)
    if not is_transfer(wildcards.variant) or wildcards.side not in (SOURCE_LANG, wildcards.lang):
        raise ValueError(
            f"config: results/gguf/{wildcards.variant}_{wildcards.lang}/{wildcards.side}/model.gguf names no "
            f"trained side: a transfer variant's side is {SOURCE_LANG} or the target language"
        )
    return {"model": f"results/models/{wildcards.variant}_{wildcards.lang}/{wildcards.side}",
            "source_model": source_model_input()}


def gguf_all_targets(wildcards):
    """Both sides of every trained variant and language, as GGUF files."""
    return [
        f"results/gguf/{variant}_{lang}/{side}/model.gguf"
        for variant in config_lookups.trained_variants(config)
        for lang in config["languages"]
        for side in (SOURCE_LANG, lang)
    ]
