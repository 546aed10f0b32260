# Input functions and look-ups of the rules in rules/vocab.smk (kept apart: a rule file holds rules only).


def encode_tokenizer(wildcards):
    """The tokenizer a text is encoded with (rule encode_monolingual). For {vocabulary} ".extended-<lang>",
    that language's extended tokenizer, whichever side; else the side's own, English's being the source
    tokenizer (a config value, not a rule output)."""
    if wildcards.vocabulary:
        return vocabulary_tokenizer(wildcards.vocabulary.removeprefix(f"{EXTENDED}-"), EXTENDED)
    if wildcards.side == SOURCE_LANG:
        return []
    return tokenizer_dir(wildcards.side)
