# Input functions and look-ups of the rules in rules/sib200.smk (kept apart: a rule file holds rules only).


# The classifier fine-tuned on the source model as the head warm-up saved it, shared by every
# variant whose English side that is.
SOURCE_CLASSIFIER = "source"


def sib200_classifier_dir(variant, lang):
    """The classifier a variant's SIB-200 reads, named by the English model it fine-tunes: the source
    model's (init none, or an initialisation alone: no bilingual update, so the English side is the
    source's), a pretrained checkpoint's (by variant), else the variant's English side for lang."""
    if english_side_is_source(variant):
        return f"results/sib200/classifiers/{SOURCE_CLASSIFIER}"
    if not is_transfer(variant):
        return f"results/sib200/classifiers/{variant}"
    return f"results/sib200/classifiers/{variant}_{lang}"


def sib200_classifier_inputs(wildcards):
    task = config["tasks"]["sib200"]
    if wildcards.name == SOURCE_CLASSIFIER:
        english = "results/models/source"
    elif wildcards.name in VARIANTS and not is_transfer(wildcards.name):
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


def english_side_is_source(variant):
    """Whether a variant's English side is the source model as the head warm-up saved it: init none,
    or a transfer variant trained for no update whose initialiser re-draws nothing (not scratch) and
    that keeps the source's tokenizer (an extended vocabulary reads English with its own)."""
    init = variant_settings(variant)["init"]
    if init == "pretrained":
        return False
    if not is_transfer(variant):
        return True
    return training_steps(variant) == 0 and not init_entry(variant).from_scratch and not extends_vocabulary(variant)
