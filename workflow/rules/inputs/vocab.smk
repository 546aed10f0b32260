# Input functions and look-ups of the rules in rules/vocab.smk (kept apart: a rule file holds rules only).


def encode_tokenizer(wildcards):
    """English is encoded with the source tokenizer (a config value, not a rule output)."""
    if wildcards.lang == SOURCE_LANG:
        return []
    return tokenizer_dir(wildcards.lang)
