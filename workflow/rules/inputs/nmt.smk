# Input functions and look-ups of the rules in rules/nmt.smk (kept apart: a rule file holds rules only).


def nmt_settings():
    return config["tasks"]["nmt"]["settings"]


def nmt_foreign(wildcards):
    """The non-source language of a direction (the data of en-fr serves both en->fr and fr->en)."""
    pair = {wildcards.src, wildcards.tgt}
    if SOURCE_LANG not in pair or len(pair) != 2:
        raise ValueError(
            f"NMT direction {wildcards.src}-{wildcards.tgt}: one side must be the source language "
            f"'{SOURCE_LANG}' and the other a foreign one"
        )
    return (pair - {SOURCE_LANG}).pop()


def nmt_split_file(split, lang):
    files = config["tasks"]["nmt"].get(split, {})
    if lang not in files:
        raise ValueError(f"config: tasks.nmt.{split} has no '{lang}' file; add one sentence per line")
    return files[lang]


def nmt_data_dir(wildcards):
    return f"results/nmt/data/{SOURCE_LANG}-{nmt_foreign(wildcards)}"


def nmt_train_file(foreign, lang):
    """tasks.nmt.train when given (e.g. the paper's IWSLT data), else the prepared `parallel` text."""
    given = config["tasks"]["nmt"].get("train", {})
    if given:
        if lang not in given:
            raise ValueError(f"config: tasks.nmt.train has no '{lang}' file; add one sentence per line")
        return given[lang]
    return f"results/parallel/{SOURCE_LANG}-{foreign}/train.{lang}.txt"


def nmt_train_text(wildcards, lang):
    return nmt_train_file(nmt_foreign(wildcards), lang)


def nmt_bert_dir(wildcards):
    """The frozen BERT: the variant's model of the source-side language."""
    return model_dir(wildcards.variant, nmt_foreign(wildcards), wildcards.src)


def nmt_arms():
    return ["fused"] + list(nmt_settings()["ablations"])


def nmt_table_targets():
    return [f"results/nmt/{name}.tsv" for name in config["targets"].get("nmt", [])]

