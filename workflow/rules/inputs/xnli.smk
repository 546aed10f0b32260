# Input functions and look-ups of the rules in rules/xnli.smk (kept apart: a rule file holds rules only).


def nli_train_sources():
    """NLI training sources with local paths in place of download specs."""
    sources = []
    for index, entry in enumerate(config["tasks"]["xnli"]["train"]):
        path = local_input(entry, f"tasks.xnli.train[{index}]")
        rest = {key: value for key, value in entry.items() if key not in ("path", "url", "sha256", "member")}
        sources.append({"path": path, **rest})
    return sources


def xnli_inputs(wildcards):
    return {
        "english": model_dir(wildcards.variant, wildcards.lang, SOURCE_LANG),
        "foreign": model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        "train": [entry["path"] for entry in nli_train_sources()],
        "dev": local_input(config["tasks"]["xnli"]["dev"][wildcards.lang]),
        "decontamination": decontamination_checks(wildcards, ("xnli", "dev")),
    }


def xnli_test_inputs(wildcards):
    task = config["tasks"]["xnli"]
    inputs = {
        "classifier": f"results/xnli/classifiers/{wildcards.variant}_{wildcards.lang}",
        "foreign": model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        "test": local_input(task["test"][wildcards.lang]),
        "decontamination": decontamination_checks(wildcards, ("xnli", "test")),
    }
    if SOURCE_LANG in task.get("test", {}):
        inputs["source_test"] = local_input(task["test"][SOURCE_LANG])
    return inputs


def xnli_curve_inputs(wildcards):
    """Zero-shot XNLI at every kept checkpoint: the training run's starting files and the task data."""
    return {
        **checkpoint_run_inputs(wildcards),
        "train": [entry["path"] for entry in nli_train_sources()],
        "dev": local_input(config["tasks"]["xnli"]["dev"][wildcards.lang]),
        "test": local_input(config["tasks"]["xnli"]["test"][wildcards.lang]),
        "decontamination": decontamination_checks(wildcards, ("xnli", "dev"), ("xnli", "test")),
    }


def xnli_shared_inputs(wildcards):
    inputs = xnli_test_inputs(wildcards)
    return {
        **{key: value for key, value in inputs.items() if key != "classifier"},
        "classifiers": f"results/xnli/classifiers/{wildcards.variant}",
        "dev": local_input(config["tasks"]["xnli"]["dev"][wildcards.lang]),
        "decontamination": decontamination_checks(wildcards, ("xnli", "dev"), ("xnli", "test")),
    }

