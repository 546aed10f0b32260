# Input functions and look-ups of the rules in rules/download.smk (kept apart: a rule file holds rules only).


def xnli_release_split(split):
    members = xnli_release_members(config.get("xnli_release"))
    if not members:
        raise ValueError("config: per-language XNLI 1.0 files need xnli_release (the XNLI-1.0.zip)")
    return local_input(members[split], "xnli_release")

