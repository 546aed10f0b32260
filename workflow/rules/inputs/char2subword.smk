# Input functions and look-ups of the rules in rules/char2subword.smk (kept apart: a rule file holds rules only).
# A table is "source" (the English table) or "{variant}_{lang}" (a transferred language side).


def c2s_tables():
    """Every table of char2subword.tables: "source", or each language's table of a variant."""
    tables = []
    for index, name in enumerate(config["char2subword"]["tables"]):
        if name == "source":
            tables.append("source")
        elif name in VARIANTS and is_transfer(name):
            tables += [f"{name}_{lang}" for lang in LANGUAGES]
        else:
            raise ConfigError(f"char2subword.tables[{index}]", f"'{name}' is neither 'source' nor a transferred "
                              f"variant (variants: {', '.join(VARIANTS)})",
                              "name a variant of `variants` whose init transfers, or 'source'")
    return tables


def c2s_table_parts(table):
    """(model directory, language) of a table name."""
    if table == "source":
        return "results/models/source", SOURCE_LANG
    match = re.fullmatch(r"(.+)_([a-z]{2,3})", table)
    if not match or match.group(1) not in VARIANTS:
        raise ValueError(f"char2subword: '{table}' names no table; use 'source' or '<variant>_<lang>'")
    variant, lang = match.groups()
    return model_dir(variant, lang, lang), lang


def c2s_table2_losses():
    return list(dict.fromkeys(["+".join(l for l in ("ce", "cos", "l2", "nbr") if l in combination)
                               for combination in config["char2subword"]["table2"]]))


def c2s_targets():
    """The precision table of every configured table and the noisy-XNLI table of every configured variant."""
    targets = [f"results/char2subword/{table}/precision.tsv" for table in c2s_tables()]
    for index, variant in enumerate(config["char2subword"]["noisy_xnli"]["variants"]):
        if variant not in VARIANTS:
            raise ConfigError(f"char2subword.noisy_xnli.variants[{index}]", f"'{variant}' names no variant "
                              f"(variants: {', '.join(VARIANTS)})", "name one of them, or remove it")
        targets += [f"results/char2subword/xnli/{variant}_{lang}.tsv" for lang in LANGUAGES]
    return targets


def c2s_losses_weights(name):
    """The loss weights of an approximation run named by its losses (Table 2)."""
    from ramen.char2subword.loss_names import losses_from_name

    return losses_from_name(name, config["char2subword"]["approximation"]["losses"])
