# Input functions and look-ups of the rules in rules/retrieval.smk (kept apart: a rule file holds rules only).


def retrieval_inputs(wildcards):
    pairs = config["tasks"].get("retrieval", {}).get("pairs", {})
    if wildcards.lang not in pairs:
        raise ValueError(
            f"config: no tasks.retrieval.pairs.{wildcards.lang} entry; give line-aligned "
            f"{SOURCE_LANG} and {wildcards.lang} files"
        )
    return {
        "english": model_dir(wildcards.variant, wildcards.lang, SOURCE_LANG),
        "foreign": model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        "source_text": local_input(pairs[wildcards.lang][SOURCE_LANG]),
        "target_text": local_input(pairs[wildcards.lang][wildcards.lang]),
        "decontamination": decontamination_checks(wildcards, ("retrieval", "pairs")),
    }

