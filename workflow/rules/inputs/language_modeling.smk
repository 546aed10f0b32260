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



def language_modeling_summary_inputs(wildcards):
    """Bits per byte of every variant of targets.bits_per_byte, and the same variants' results of
    the other tasks whose targets name them (none is run for the table alone)."""
    variants = target_variants("bits_per_byte")
    inputs = {
        "bits_per_byte": expand("results/language_modeling/{variant}_{lang}.tsv", variant=variants, lang=LANGUAGES),
        "continuations": expand(
            "results/language_modeling/{variant}_{lang}.continuations.tsv", variant=variants, lang=LANGUAGES
        ),
        "speed": expand("results/language_modeling/{variant}_{lang}.speed.tsv", variant=variants, lang=LANGUAGES),
    }
    for key, pattern in (
        ("sib200", "results/sib200/{variant}_{lang}.tsv"),
        ("retrieval", "results/retrieval/{variant}_{lang}.tsv"),
        ("xnli", "results/xnli/{variant}_{lang}.tsv"),
    ):
        also = [v for v in variants if v in target_variants(key)]
        inputs[key] = expand(pattern, variant=also, lang=LANGUAGES)
    return inputs


def language_modeling_summary_variants():
    """{variant: {"init", "updates", "source", "vocabulary", "output_init"}}: updates of bilingual
    training, None for a model used as it is; "source": the variant is the source model itself (the
    speed ratios' reference); "vocabulary": replace or extend, None for a model used as it is;
    "output_init": the rule of an extension's new output rows, None without an extension."""
    return {
        variant: {
            "init": variant_settings(variant)["init"],
            "updates": training_steps(variant) if is_transfer(variant) else None,
            "source": variant_settings(variant)["init"] == "none",
            "vocabulary": variant_settings(variant)["vocabulary"] if is_transfer(variant) else None,
            "output_init": variant_settings(variant)["output_init"] if extends_vocabulary(variant) else None,
        }
        for variant in target_variants("bits_per_byte")
    }


def held_out_text_names(section):
    """{language: file name} of tasks.language_modeling.<section>: the `text` column of the scores."""
    return {lang: os.path.basename(local_input(spec)) for lang, spec in config["tasks"]["language_modeling"][section].items()}
