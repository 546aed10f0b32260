# Input functions and look-ups of the rules in rules/ud.smk (kept apart: a rule file holds rules only).


def ud_task():
    if "ud" not in config["tasks"]:
        raise ValueError("config: no tasks.ud section; add treebank paths there to evaluate parsing")
    return config["tasks"]["ud"]


def ud_treebank(split, lang):
    try:
        return local_input(ud_task()[split][lang], f"tasks.ud.{split}.{lang}")
    except KeyError:
        raise ValueError(f"config: no tasks.ud.{split}.{lang} treebank; add its CoNLL-U path") from None


def ud_zero_shot_inputs(wildcards):
    return {
        "english": model_dir(wildcards.variant, wildcards.lang, SOURCE_LANG),
        "foreign": model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        "train": ud_treebank("train", SOURCE_LANG),
        "dev": ud_treebank("dev", wildcards.lang),
        "test": ud_treebank("test", wildcards.lang),
        "decontamination": decontamination_checks(wildcards, ("ud", "dev"), ("ud", "test")),
    }


def ud_supervised_inputs(wildcards):
    treebanks = ud_task().get("supervised", {}).get(wildcards.lang)
    if not treebanks:
        raise ValueError(
            f"config: no tasks.ud.supervised.{wildcards.lang} entry; give its train, dev and test treebanks"
        )
    treebanks = {split: local_input(spec, f"tasks.ud.supervised.{wildcards.lang}.{split}") for split, spec in treebanks.items()}
    return {
        "foreign": model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        **treebanks,
        "decontamination": decontamination_checks(wildcards, ("ud_supervised", "dev"), ("ud_supervised", "test")),
    }


def ud_supervised_settings():
    return {**ud_task()["settings"], **ud_task().get("supervised_settings", {})}


def ud_curve_inputs(wildcards):
    """Zero-shot parsing at every kept checkpoint: the training run's starting files and the treebanks."""
    return {
        **checkpoint_run_inputs(wildcards),
        "train": ud_treebank("train", SOURCE_LANG),
        "dev": ud_treebank("dev", wildcards.lang),
        "test": ud_treebank("test", wildcards.lang),
        "decontamination": decontamination_checks(wildcards, ("ud", "dev"), ("ud", "test")),
    }

