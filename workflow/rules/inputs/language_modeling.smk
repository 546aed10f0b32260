# Input functions and look-ups of the rules in rules/language_modeling.smk (kept apart: a rule file holds rules only).


def language_modeling_inputs(wildcards):
    task = config["tasks"]["language_modeling"]
    texts, other = task["text"], task["other_text"]
    inputs = {
        "english": model_dir(wildcards.variant, wildcards.lang, SOURCE_LANG),
        "foreign": model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        "text": local_input(texts[wildcards.lang]),
        "decontamination": decontamination_checks(wildcards, ("language_modeling", "text"),
                                                  ("language_modeling", "other_text")),
    }
    if SOURCE_LANG in texts:
        inputs["source_text"] = local_input(texts[SOURCE_LANG])
    if wildcards.lang in other:
        inputs["other_text"] = local_input(other[wildcards.lang])
    if SOURCE_LANG in other:
        inputs["source_other_text"] = local_input(other[SOURCE_LANG])
    return inputs

