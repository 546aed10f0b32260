# Input functions and look-ups of the rules in rules/paper_report.smk (kept apart: a rule file holds rules only).


def paper_report_results():
    """Every requested XNLI and UD result the paper tables can show."""
    paths = [f"results/xnli/{v}_{lang}.tsv" for v in target_variants("xnli") for lang in LANGUAGES]
    paths += [f"results/ud/{v}_{lang}.tsv" for v in target_variants("ud") for lang in LANGUAGES]
    paths += [f"results/ud/supervised/{v}_{lang}.tsv" for v in target_variants("ud_supervised") for lang in LANGUAGES]
    return paths

