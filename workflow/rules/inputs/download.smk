# Input functions and look-ups of the rules in rules/download.smk (kept apart: a rule file holds rules only).


def xnli_release_split(split):
    members = xnli_release_members(config.get("xnli_release"))
    if not members:
        raise ValueError("config: per-language XNLI 1.0 files need xnli_release (the XNLI-1.0.zip)")
    return local_input(members[split], "xnli_release")


def fetch_constraint(outputs):
    """A wildcard pattern matching exactly these download outputs (relative to DOWNLOAD_DIR)."""
    names = [path[len(DOWNLOAD_DIR) + 1:] for path in outputs]
    return "|".join(re.escape(name) for name in sorted(names)) or "(?!)"


def input_checks_for(path):
    """The checks of one file that a download rule produces, run when it arrives."""
    return [{"setting": item.setting, "path": item.path, "kind": item.kind, "options": item.options}
            for item in INPUT_FILES if item.path == path]
