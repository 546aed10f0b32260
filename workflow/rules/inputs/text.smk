# Input functions and look-ups of the rules in rules/text.smk (kept apart: a rule file holds rules only).


def wikipedia_name(path):
    return Path(path).name.split(".xml")[0]


def corpus_entries(lang):
    if lang not in config["corpora"]:
        raise ValueError(f"config: no corpora.{lang} entry; list the {lang} text files there")
    return config["corpora"][lang]


def monolingual_inputs(wildcards):
    """Prepared-text inputs: raw files, or WikiExtractor output for dumps."""
    return [source["path"] for source in monolingual_sources(wildcards.lang)]


def monolingual_sources(lang):
    sources = []
    for index, entry in enumerate(corpus_entries(lang)):
        path = local_input(entry, f"corpora.{lang}[{index}]")
        if entry["format"] == "wikipedia":
            path = f"results/text/wikiextractor/{wikipedia_name(path)}"
            sources.append({"path": path, "format": "wikiextractor"})
        else:
            sources.append({"path": path, "format": entry["format"]})
    return sources


def wikipedia_dump(wildcards):
    for entries in config["corpora"].values():
        for entry in entries:
            if entry["format"] == "wikipedia" and wikipedia_name(local_input(entry)) == wildcards.name:
                return local_input(entry)
    raise ValueError(f"config: no wikipedia corpus named '{wildcards.name}'")


def parallel_files(wildcards):
    if wildcards.lang not in config["parallel"]:
        raise ValueError(
            f"config: no parallel.{wildcards.lang} entry; the parallel initialiser needs "
            f"{SOURCE_LANG}-{wildcards.lang} parallel text"
        )
    pair = config["parallel"][wildcards.lang]
    return {
        "source": local_input(pair[SOURCE_LANG], f"parallel.{wildcards.lang}.{SOURCE_LANG}"),
        "foreign": local_input(pair[wildcards.lang], f"parallel.{wildcards.lang}.{wildcards.lang}"),
    }


def training_texts(text_lang, lang):
    """{name: (text, excluded digests)} of every training text in text_lang that models of lang read."""
    parallel = f"results/parallel/{SOURCE_LANG}-{lang}"
    texts = {}
    if text_lang == SOURCE_LANG:
        # One English text for every language; lang's own exclusions are left out of its batches.
        text = f"results/text/{SOURCE_LANG}/train.txt"
        texts["monolingual"] = (text, source_exclusions(lang, "excluded") or text.replace(".txt", ".excluded.npy"))
        side = SOURCE_LANG
    else:
        texts["monolingual"] = (f"results/text/{lang}/train.txt", f"results/text/{lang}/train.excluded.npy")
        side = lang
    if lang in config["parallel"]:
        texts["parallel"] = (f"{parallel}/train.{side}.txt", f"{parallel}/train.excluded.npy")
    return texts


def decontamination_texts(wildcards, what):
    """Training texts a check_decontamination job reads: their paths ("text"), their digests
    ("excluded"), or per evaluation file the names of its texts ("by_file")."""
    sides = evaluation_units()[(wildcards.task, wildcards.split, wildcards.owner)]
    per_file = {local_input(spec): training_texts(side, wildcards.lang) for side, spec in sides.items()}
    if what == "by_file":
        return per_file
    index = 0 if what == "text" else 1
    return sorted({pair[index] for texts in per_file.values() for pair in texts.values()})


def text_byte_budget(wildcards):
    """text.max_bytes of one language: one number for every language, or a mapping by language."""
    budget = config["text"].get("max_bytes")
    return budget.get(wildcards.lang) if isinstance(budget, dict) else budget


def own_evaluation_files(wildcards):
    """A language's own evaluation files in that language. Ancient: an edited file is checked
    again before it is scored (rule check_decontamination) instead of rebuilding the text."""
    return ancient(decontamination_files(wildcards.lang, [wildcards.lang]))


def pair_evaluation_files(wildcards):
    """Evaluation files a language pair's parallel text may contain: the target language's, in
    either language, and the source language's own."""
    files = decontamination_files(SOURCE_LANG, [SOURCE_LANG, wildcards.lang])
    return ancient(sorted({*files, *decontamination_files(wildcards.lang, [wildcards.lang])}))


def dump_language(name):
    """The language whose corpora list the Wikipedia dump named name."""
    return next(lang for lang, entries in config["corpora"].items() for entry in entries
                if entry["format"] == "wikipedia" and wikipedia_name(local_input(entry)) == name)
