# Input functions and look-ups of the rules in rules/sib200.smk (kept apart: a rule file holds rules only).


def sib200_classifier_dir(variant, lang):
    return f"results/sib200/classifiers/{variant}" if not is_transfer(variant) else \
        f"results/sib200/classifiers/{variant}_{lang}"


def sib200_classifier_inputs(wildcards):
    task = config["tasks"]["sib200"]
    if wildcards.name in VARIANTS and not is_transfer(wildcards.name):
        english = model_dir(wildcards.name, None, SOURCE_LANG)
    else:
        variant, lang = wildcards.name.rsplit("_", 1)
        english = model_dir(variant, lang, SOURCE_LANG)
    return {
        "english": english,
        "train": local_input(task["train"][SOURCE_LANG]),
        "dev": local_input(task["dev"][SOURCE_LANG]),
    }


def sib200_inputs(wildcards):
    task = config["tasks"]["sib200"]
    inputs = {
        "classifier": sib200_classifier_dir(wildcards.variant, wildcards.lang),
        "foreign": model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        "test": local_input(task["test"][wildcards.lang]),
        "decontamination": decontamination_checks(wildcards, ("sib200", "dev"), ("sib200", "test")),
    }
    if SOURCE_LANG in task["test"]:
        inputs["source_test"] = local_input(task["test"][SOURCE_LANG])
    return inputs

