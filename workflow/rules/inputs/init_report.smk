# Input functions and look-ups of the rules in rules/init_report.smk (kept apart: a rule file holds rules only).


def init_report_variants():
    """Variants of the init report: those of the targets whose registry entry says init_report (the
    headline task's) whose foreign embeddings are initialised, and init_report.variants."""
    extra = config["init_report"]["variants"]
    # An update-0 variant of the peer comparison has the same initial table as its trained one.
    untrained = set(config["peer_report"]["variants"].values())
    reported = [v for task in TASKS.values() for key, target in task.targets.items() if target.init_report
                for v in target_variants(key)]
    # An extended vocabulary's tables hold the source's rows too: they are compared on the decoder's page.
    return [v for v in dict.fromkeys([*reported, *extra])
            if is_transfer(v) and v not in untrained and not extends_vocabulary(v)]


def peer_results(task):
    """The results of a task for every variant the peer comparison names, trained and at update 0."""
    pairs = config["peer_report"]["variants"]
    return [f"results/{task}/{v}_{{lang}}.tsv" for v in dict.fromkeys([*pairs, *pairs.values()])]
