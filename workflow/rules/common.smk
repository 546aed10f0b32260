# Config look-ups and input functions shared by every rule file.
import re
from pathlib import Path

from ramen.initializers import get_entry
from ramen.inputs import fetch_jobs, resolve

SOURCE_LANG = config["source"]["lang"]
LANGUAGES = list(config["languages"])
VARIANTS = config["variants"]
CHECKPOINTS = config.get("checkpoint_dir", "results/checkpoints")

# --- External inputs: every file in the config is a local path or where to fetch it
# (ramen.inputs); downloads land under download_dir (rules/download.smk).
DOWNLOAD_DIR = config.get("download_dir", "results/downloads").rstrip("/")


def local_input(spec, setting="input"):
    """The local path of a config value that names a file (a path or a download)."""
    return resolve(spec, DOWNLOAD_DIR, setting)


def xnli_release_members():
    """The XNLI 1.0 dev/test files inside the release archive (when the config names one)."""
    release = config.get("xnli_release")
    if not release:
        return {}
    release = {"path": release} if isinstance(release, str) else release
    return {split: {**release, "member": f"XNLI-1.0/xnli.{split}.tsv"} for split in ("dev", "test")}


def xnli_release_split(split):
    if not config.get("xnli_release"):
        raise ValueError("config: per-language XNLI 1.0 files need xnli_release (the XNLI-1.0.zip)")
    return local_input(xnli_release_members()[split], "xnli_release")


FETCH = fetch_jobs({**config, "xnli_release": xnli_release_members()}, DOWNLOAD_DIR)


def fetch_constraint(outputs):
    """A wildcard pattern matching exactly these download outputs (relative to DOWNLOAD_DIR)."""
    names = [path[len(DOWNLOAD_DIR) + 1:] for path in outputs]
    return "|".join(re.escape(name) for name in sorted(names)) or "(?!)"


SOURCE_MODEL = local_input(config["source"]["model"], "source.model")


def source_model_input():
    """The source model as a rule input when it is downloaded; a local model is a setting."""
    return SOURCE_MODEL if SOURCE_MODEL in FETCH.models else []


def nli_train_sources():
    """NLI training sources with local paths in place of download specs."""
    sources = []
    for index, entry in enumerate(config["tasks"]["xnli"]["train"]):
        path = local_input(entry, f"tasks.xnli.train[{index}]")
        rest = {key: value for key, value in entry.items() if key not in ("path", "url", "sha256", "member")}
        sources.append({"path": path, **rest})
    return sources


def variant_settings(variant):
    if variant not in VARIANTS:
        raise ValueError(
            f"config: unknown variant '{variant}'; defined variants: {sorted(VARIANTS)}"
        )
    return VARIANTS[variant]


def is_transfer(variant):
    """False for baselines that use an existing model unchanged (the source model, or a
    multilingual checkpoint such as mBERT)."""
    return variant_settings(variant)["init"] not in ("none", "pretrained")


def model_dir(variant, lang, side):
    """The Hugging Face directory of one language side of a variant's model."""
    if variant_settings(variant)["init"] == "pretrained":
        return pretrained_model_dir(variant)
    if not is_transfer(variant):
        return "results/models/source_mlm"
    return f"results/models/{variant}_{lang}/{side}"


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


def evaluation_files():
    """Every evaluation file; their sentences are removed from all training text."""
    files = []
    for task in config["tasks"].values():
        for split in ("dev", "test"):
            files.extend(local_input(spec) for spec in task.get(split, {}).values())
        for treebanks in task.get("supervised", {}).values():
            files.extend(local_input(spec) for split, spec in treebanks.items() if split in ("dev", "test"))
        for pair in task.get("pairs", {}).values():
            files.extend(local_input(spec) for spec in pair.values())
    return sorted(set(files))


def tokenizer_dir(lang):
    if lang == SOURCE_LANG:
        return "results/models/source_mlm"
    return f"results/vocab/{lang}/tokenizer"


def encode_tokenizer(wildcards):
    """English is encoded with the source tokenizer (a config value, not a rule output)."""
    if wildcards.lang == SOURCE_LANG:
        return []
    return tokenizer_dir(wildcards.lang)


def init_input_paths(lang):
    """The file of each kind of initialiser input (ramen.initializers.InitializerEntry.inputs) for a
    language; None for an optional input the config leaves out."""
    return {
        "parallel_alpha": f"results/align/{SOURCE_LANG}-{lang}/alpha.npz",
        "monolingual_alpha": f"results/monolingual/{SOURCE_LANG}-{lang}/alpha.npz",
        "char_module": c2s_module_path("source", config["char2subword"]["init_stage"]),
        "source_fasttext": fasttext_model(SOURCE_LANG),
        "foreign_fasttext": fasttext_model(lang),
        "wechsel_dictionary": optional_input(config["peers"]["wechsel_dictionaries"], lang,
                                             "peers.wechsel_dictionaries"),
        "token_vectors": f"results/peers/{lang}/token_fasttext.vec",
    }


def optional_input(section, lang, setting):
    spec = section.get(lang)
    return local_input(spec, f"{setting}.{lang}") if spec else None


def init_entry(variant):
    return get_entry(variant_settings(variant)["init"], setting=f"variants.{variant}.init")


def init_inputs(wildcards):
    """The source model, the foreign tokenizer and the inputs the initialiser's registry entry declares."""
    paths = init_input_paths(wildcards.lang)
    inputs = {"source": "results/models/source_mlm", "tokenizer": tokenizer_dir(wildcards.lang)}
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


def xnli_inputs(wildcards):
    return {
        "english": model_dir(wildcards.variant, wildcards.lang, SOURCE_LANG),
        "foreign": model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        "train": [entry["path"] for entry in nli_train_sources()],
        "dev": local_input(config["tasks"]["xnli"]["dev"][wildcards.lang]),
    }


def xnli_test_inputs(wildcards):
    task = config["tasks"]["xnli"]
    inputs = {
        "classifier": f"results/xnli/classifiers/{wildcards.variant}_{wildcards.lang}",
        "foreign": model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        "test": local_input(task["test"][wildcards.lang]),
    }
    if SOURCE_LANG in task.get("test", {}):
        inputs["source_test"] = local_input(task["test"][SOURCE_LANG])
    return inputs


def training_settings(section):
    """A training section of the config as TrainSettings keyword arguments."""
    return dict(config[section])


def target_variants(task="xnli"):
    """The variants `rule all` evaluates on a task; "all" means every variant in the config."""
    requested = config["targets"].get(task, [])
    return list(VARIANTS) if requested == "all" else list(requested)


def trained_variants():
    variants = {v for task in config["targets"] for v in target_variants(task)}
    return [v for v in VARIANTS if v in variants and is_transfer(v)]


def all_targets():
    targets = [
        f"results/xnli/{variant}_{lang}.tsv"
        for variant in target_variants()
        for lang in LANGUAGES
    ]
    targets += ["results/report/xnli_summary.tsv", "results/report/mlm_loss.png"]
    targets += [f"results/report/init_{lang}.tsv" for lang in LANGUAGES if lang in config["init_report"]["dictionaries"]]
    if config["peer_report"]["variants"]:
        targets += [f"results/report/peers_{lang}.tsv" for lang in LANGUAGES]
    targets += evaluation_targets()
    return targets


# Monolingual initialisation route and the init report.


def word_vectors(lang):
    """The configured pretrained .vec/.bin file of a language, else fastText trained on its corpus."""
    pretrained = (config["monolingual"].get("vectors") or {}).get(lang)
    if pretrained:
        return local_input(pretrained, f"monolingual.vectors.{lang}")
    return f"results/monolingual/{lang}/fasttext.vec"


def init_report_variants():
    """Variants of the init report: the evaluated ones whose foreign embeddings are initialised, and
    init_report.variants."""
    extra = config["init_report"].get("variants", [])
    # An update-0 variant of the peer comparison has the same initial table as its trained one.
    untrained = set(config["peer_report"]["variants"].values())
    return [v for v in dict.fromkeys([*target_variants("xnli"), *extra]) if is_transfer(v) and v not in untrained]


# --- Pretrained baselines (mBERT), UD parsing, retrieval and the paper report ---


def pretrained_model_dir(variant):
    """The checkpoint of an `init: pretrained` variant; a clear error when it is not there."""
    from ramen.errors import RamenError
    from ramen.workflow import resolve_model_path

    spec = variant_settings(variant).get("model")
    if not spec:
        problem = "has init: pretrained but no model"
    else:
        try:
            return resolve_model_path(spec, setting=f"variants.{variant}.model")
        except RamenError as error:
            problem = str(error)
    raise ValueError(
        f"config: variant '{variant}' needs a multilingual checkpoint: {problem}. Set "
        f"variants.{variant}.model to a local Hugging Face directory (e.g. a snapshot of "
        f"bert-base-multilingual-cased), or leave '{variant}' out of targets."
    )


def ud_task():
    if "ud" not in config["tasks"]:
        raise ValueError("config: no tasks.ud section; add treebank paths there to evaluate parsing")
    return config["tasks"]["ud"]


def ud_treebank(split, lang):
    try:
        return local_input(ud_task()[split][lang], f"tasks.ud.{split}.{lang}")
    except KeyError:
        raise ValueError(f"config: no tasks.ud.{split}.{lang} treebank; add its CoNLL-U path") from None


def ud_zero_shot_inputs(wildcards):
    return {
        "english": model_dir(wildcards.variant, wildcards.lang, SOURCE_LANG),
        "foreign": model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        "train": ud_treebank("train", SOURCE_LANG),
        "dev": ud_treebank("dev", wildcards.lang),
        "test": ud_treebank("test", wildcards.lang),
    }


def ud_supervised_inputs(wildcards):
    treebanks = ud_task().get("supervised", {}).get(wildcards.lang)
    if not treebanks:
        raise ValueError(
            f"config: no tasks.ud.supervised.{wildcards.lang} entry; give its train, dev and test treebanks"
        )
    treebanks = {split: local_input(spec, f"tasks.ud.supervised.{wildcards.lang}.{split}") for split, spec in treebanks.items()}
    return {"foreign": model_dir(wildcards.variant, wildcards.lang, wildcards.lang), **treebanks}


def ud_supervised_settings():
    return {**ud_task()["settings"], **ud_task().get("supervised_settings", {})}


def evaluation_targets():
    """UD, retrieval and checkpoint-curve outputs the `targets` section asks for, and the paper report."""
    targets = []
    for variant in target_variants("ud"):
        targets += [f"results/ud/{variant}_{lang}.tsv" for lang in LANGUAGES]
    for variant in target_variants("ud_supervised"):
        targets += [f"results/ud/supervised/{variant}_{lang}.tsv" for lang in LANGUAGES]
    for variant in target_variants("retrieval"):
        targets += [f"results/retrieval/{variant}_{lang}.tsv" for lang in LANGUAGES]
    if target_variants("curves"):
        targets.append("results/report/curves.png")
    if target_variants("xnli_curves"):
        targets.append("results/report/xnli_curves.png")
    if target_variants("ud_curves"):
        targets.append("results/report/ud_curves.png")
    if target_variants("ud") or target_variants("ud_supervised"):
        targets.append("results/report/paper_tables.md")
    if target_variants("ablation"):
        targets.append("results/report/objective_ablation.tsv")
    return targets


def retrieval_inputs(wildcards):
    pairs = config["tasks"].get("retrieval", {}).get("pairs", {})
    if wildcards.lang not in pairs:
        raise ValueError(
            f"config: no tasks.retrieval.pairs.{wildcards.lang} entry; give line-aligned "
            f"{SOURCE_LANG} and {wildcards.lang} files"
        )
    return {
        "english": model_dir(wildcards.variant, wildcards.lang, SOURCE_LANG),
        "foreign": model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        "source_text": local_input(pairs[wildcards.lang][SOURCE_LANG]),
        "target_text": local_input(pairs[wildcards.lang][wildcards.lang]),
    }


def paper_report_results():
    """Every requested XNLI and UD result the paper tables can show."""
    paths = [f"results/xnli/{v}_{lang}.tsv" for v in target_variants("xnli") for lang in LANGUAGES]
    paths += [f"results/ud/{v}_{lang}.tsv" for v in target_variants("ud") for lang in LANGUAGES]
    paths += [f"results/ud/supervised/{v}_{lang}.tsv" for v in target_variants("ud_supervised") for lang in LANGUAGES]
    return paths


def checkpoint_run_inputs(wildcards):
    """The files that identify a variant's training run, whose kept checkpoints a curve evaluates."""
    return {
        "trained": f"results/training/{wildcards.variant}_{wildcards.lang}.metrics.csv",
        "source_mlm": "results/models/source_mlm",
        "init": f"results/init/{wildcards.variant}_{wildcards.lang}.safetensors",
        "tokenizer": tokenizer_dir(wildcards.lang),
    }


def ud_curve_inputs(wildcards):
    """Zero-shot parsing at every kept checkpoint: the training run's starting files and the treebanks."""
    return {
        **checkpoint_run_inputs(wildcards),
        "train": ud_treebank("train", SOURCE_LANG),
        "dev": ud_treebank("dev", wildcards.lang),
        "test": ud_treebank("test", wildcards.lang),
    }


def xnli_curve_inputs(wildcards):
    """Zero-shot XNLI at every kept checkpoint: the training run's starting files and the task data."""
    return {
        **checkpoint_run_inputs(wildcards),
        "train": [entry["path"] for entry in nli_train_sources()],
        "dev": local_input(config["tasks"]["xnli"]["dev"][wildcards.lang]),
        "test": local_input(config["tasks"]["xnli"]["test"][wildcards.lang]),
    }


# --- BERT-fused NMT ---


def nmt_settings():
    return config["tasks"]["nmt"].get("settings", {})


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
    return ["fused"] + list(nmt_settings().get("ablations", ["no-dropnet", "no-bert-enc", "no-bert-dec"]))


def nmt_table_targets():
    return [f"results/nmt/{name}.tsv" for name in config["targets"].get("nmt", [])]


# --- char2subword (rules/char2subword.smk) ---
# A table is "source" (the English table) or "{variant}_{lang}" (a transferred language side).


def c2s_tables():
    """Every table of char2subword.tables: "source", or each language's table of a variant."""
    tables = []
    for name in config["char2subword"]["tables"]:
        if name == "source":
            tables.append("source")
        elif is_transfer(name):
            tables += [f"{name}_{lang}" for lang in LANGUAGES]
        else:
            raise ValueError(f"config: char2subword.tables: '{name}' is neither 'source' nor a transferred variant")
    return tables


def c2s_table_parts(table):
    """(model directory, language) of a table name."""
    if table == "source":
        return "results/models/source_mlm", SOURCE_LANG
    match = re.fullmatch(r"(.+)_([a-z]{2,3})", table)
    if not match or match.group(1) not in VARIANTS:
        raise ValueError(f"char2subword: '{table}' names no table; use 'source' or '<variant>_<lang>'")
    variant, lang = match.groups()
    return model_dir(variant, lang, lang), lang


def c2s_main_losses():
    """The file-name form of the main approximation's losses, e.g. "ce+cos+l2+nbr"."""
    from ramen.char2subword.pipeline import losses_name

    return losses_name(config["char2subword"]["approximation"]["losses"])


def c2s_module_path(table, stage):
    """The module of a stage: approx (first approximation), pretrained, final (approximated again)."""
    if stage == "approx":
        return f"results/char2subword/{table}/approx.{c2s_main_losses()}.safetensors"
    return f"results/char2subword/{table}/{stage}.safetensors"


def c2s_table2_losses():
    return list(dict.fromkeys(["+".join(l for l in ("ce", "cos", "l2", "nbr") if l in combination)
                               for combination in config["char2subword"]["table2"]]))


def c2s_targets():
    """The precision table of every configured table and the noisy-XNLI table of every configured variant."""
    targets = [f"results/char2subword/{table}/precision.tsv" for table in c2s_tables()]
    targets += [f"results/char2subword/xnli/{variant}_{lang}.tsv"
                for variant in config["char2subword"]["noisy_xnli"]["variants"] for lang in LANGUAGES]
    return targets


def c2s_losses_weights(name):
    """The loss weights of an approximation run named by its losses (Table 2)."""
    from ramen.char2subword.pipeline import losses_from_name

    return losses_from_name(name, config["char2subword"]["approximation"]["losses"])
