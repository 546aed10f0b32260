# Input functions and look-ups of the rules in rules/init.smk (kept apart: a rule file holds rules only).


def init_input_paths(variant, lang):
    """The file of each kind of initialiser input (ramen.initializers.InitializerEntry.inputs) for a
    variant's language; None for an optional input the config leaves out. Those that depend on the
    foreign tokens are built over the variant's vocabulary (vocabulary_wildcard)."""
    vocabulary = vocabulary_wildcard(variant)
    return {
        "parallel_alpha": f"results/align/{SOURCE_LANG}-{lang}{vocabulary}/alpha.npz",
        "monolingual_alpha": f"results/monolingual/{SOURCE_LANG}-{lang}{vocabulary}/alpha.npz",
        "char_module": c2s_module_path("source", config["char2subword"]["init_stage"]),
        "source_fasttext": fasttext_model(SOURCE_LANG),
        "foreign_fasttext": fasttext_model(lang),
        "wechsel_dictionary": optional_input(config["peers"]["wechsel_dictionaries"], lang,
                                             "peers.wechsel_dictionaries"),
        "token_vectors": f"results/peers/{lang}{vocabulary}/token_fasttext.vec",
        # The foreign training text encoded as the variant trains on it.
        "foreign_encoded": encoded_text(variant, lang, lang),
    }


def optional_input(section, lang, setting):
    spec = section.get(lang)
    return local_input(spec, f"{setting}.{lang}") if spec else None


def init_inputs(wildcards):
    """The source model, the foreign tokenizer and the inputs the initialiser's registry entry declares."""
    paths = init_input_paths(wildcards.variant, wildcards.lang)
    inputs = {"source": "results/models/source", "tokenizer": foreign_tokenizer(wildcards.variant, wildcards.lang)}
    inputs.update({kind: paths[kind] for kind in init_entry(wildcards.variant).inputs if paths[kind]})
    return inputs


def init_settings(variant):
    """The settings of a variant's initialiser: the peers section its registry entry names."""
    section = init_entry(variant).settings
    return dict(config["peers"][section]) if section else {}


def fasttext_model(lang):
    """A fastText .bin model of a language: peers.fasttext_models, else the one trained on its corpus."""
    return optional_input(config["peers"]["fasttext_models"], lang, "peers.fasttext_models") or \
        f"results/monolingual/{lang}/fasttext.bin"
