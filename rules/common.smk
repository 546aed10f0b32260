# Config look-ups and input functions shared by every rule file.
import re
from pathlib import Path

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
    """False for baselines that use the source model on foreign text unchanged."""
    return variant_settings(variant)["init"] != "none"


def model_dir(variant, lang, side):
    """The Hugging Face directory of one language side of a variant's model."""
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


def init_inputs(wildcards):
    inputs = {
        "source": "results/models/source_mlm",
        "tokenizer": tokenizer_dir(wildcards.lang),
    }
    if variant_settings(wildcards.variant)["init"] == "parallel":
        inputs["alpha"] = f"results/align/{SOURCE_LANG}-{wildcards.lang}/alpha.npz"
    if variant_settings(wildcards.variant)["init"] == "monolingual":
        inputs["alpha"] = f"results/monolingual/{SOURCE_LANG}-{wildcards.lang}/alpha.npz"
    return inputs


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


def target_variants():
    """The variants `rule all` evaluates; "all" means every variant in the config."""
    requested = config["targets"]["xnli"]
    return list(VARIANTS) if requested == "all" else list(requested)


def trained_variants():
    return [v for v in target_variants() if is_transfer(v)]


def all_targets():
    targets = [
        f"results/xnli/{variant}_{lang}.tsv"
        for variant in target_variants()
        for lang in LANGUAGES
    ]
    targets += ["results/report/xnli_summary.tsv", "results/report/mlm_loss.png"]
    targets += [f"results/report/init_{lang}.tsv" for lang in LANGUAGES if lang in config["init_report"]["dictionaries"]]
    return targets


# Monolingual initialisation route and the init report.


def word_vectors(lang):
    """The configured pretrained .vec/.bin file of a language, else fastText trained on its corpus."""
    pretrained = (config["monolingual"].get("vectors") or {}).get(lang)
    return pretrained or f"results/monolingual/{lang}/fasttext.vec"


def init_report_variants():
    """Variants of the init report: the evaluated ones whose foreign embeddings are initialised."""
    return [v for v in target_variants() if is_transfer(v)]
