# Config look-ups and input functions that several rule files use; those of one rule file are in
# rules/inputs/<that file>, which it includes.
import functools
import json
import os
import re
from pathlib import Path

from ramen.errors import ConfigError
from ramen.initializers import get_entry
from ramen.data.inputs import fetch_jobs, resolve
from ramen.objectives import objective_params, uses_pairs
from ramen.workflow import config_lookups, graph_checks, memory_plans
from ramen.tasks import TASKS, check_task_config, requested_files, table_targets
from ramen.tasks import evaluation_units as task_evaluation_units

SOURCE_LANG = config["source"]["lang"]
LANGUAGES = list(config["languages"])
VARIANTS = config["variants"]
# Initialisers and objectives are named by their registries (ramen.initializers.INITIALIZERS,
# ramen.objectives.OBJECTIVES), not by a schema enum: registering one is all it takes.
graph_checks.check_registry_names(VARIANTS)
CHECKPOINTS = config["checkpoint_dir"]

# --- External inputs: every file in the config is a local path or where to fetch it
# (ramen.data.inputs); downloads land under download_dir (rules/download.smk).
DOWNLOAD_DIR = config["download_dir"].rstrip("/")


def local_input(spec, setting="input"):
    """The local path of a config value that names a file (a path or a download)."""
    return resolve(spec, DOWNLOAD_DIR, setting)


FETCH = fetch_jobs(config, DOWNLOAD_DIR)


SOURCE_MODEL = local_input(config["source"]["model"], "source.model")


def source_model_input():
    """The source model as a rule input when it is downloaded; a local model is a setting."""
    return SOURCE_MODEL if SOURCE_MODEL in FETCH.models else []


def variant_settings(variant):
    return config_lookups.variant_settings(config, variant)


def is_transfer(variant):
    """False for baselines that use an existing model unchanged (the source model, or a
    multilingual checkpoint such as mBERT)."""
    return config_lookups.is_transfer(config, variant)


def training_steps(variant):
    """The bilingual updates a transfer variant trains for: its own training.steps, else the run's."""
    return {**training_settings("training"), **variant_settings(variant).get("training", {})}["steps"]


# The variants whose model does not depend on the target language are fine-tuned once per task
# and evaluated on every language (rules finetune_xnli_shared, ud_parser_shared).
SHARED_VARIANTS = "|".join(re.escape(v) for v in VARIANTS if not is_transfer(v)) or "(?!)"


def model_dir(variant, lang, side):
    """The Hugging Face directory of one language side of a variant's model."""
    if variant_settings(variant)["init"] == "pretrained":
        return pretrained_model_dir(variant)
    if not is_transfer(variant):
        return "results/models/source"
    return f"results/models/{variant}_{lang}/{side}"


def evaluation_units():
    """Every evaluation file, grouped by what it evaluates: {(task, split, owner): {file lang: spec}}.

    The task registry (ramen.tasks.TASKS) declares which files of each task's config section
    exist. The owner is the language whose models a file evaluates: a target language, or the
    source language for its own files (e.g. tasks.xnli.test.en). The English side of a pair file
    (retrieval pairs, NMT dev/test) belongs to the foreign language of the pair.
    """
    return EVALUATION_UNITS


EVALUATION_UNITS = task_evaluation_units(config["tasks"], SOURCE_LANG)


def decontamination_files(text_lang, owners):
    """Local paths of the evaluation files in text_lang whose owner is one of owners."""
    files = []
    for (task, split, owner), sides in evaluation_units().items():
        if owner in owners and text_lang in sides:
            files.append(local_input(sides[text_lang], f"tasks.{task}.{split}.{owner}"))
    return sorted(set(files))


def has_source_side_evaluation(lang):
    """Whether a target language owns English evaluation files (retrieval or NMT pairs)."""
    return bool(decontamination_files(SOURCE_LANG, [lang]))


def source_exclusions(lang, what="sentences"):
    """The English sentences a target language's models never draw (rule source_exclusions), when
    it owns English evaluation files: their numbers in the shared encoding ("sentences"), or the
    digests of everything its English text is cleaned of ("excluded"). [] when it owns none."""
    if has_source_side_evaluation(lang):
        return f"results/exclusions/{lang}/{SOURCE_LANG}.{what}.npy"
    return []


def decontamination_check(task, split, owner, lang):
    """The check that a unit's evaluation files are not in the training text of lang's models."""
    return f"results/decontamination/{lang}/{task}.{split}.{owner}.json"


def decontamination_checks(wildcards, *units):
    """Checks of the given (task, split) units for the wildcards' language, and of the source
    language's own files of the same units when the config has them."""
    lang = wildcards.lang
    checks = []
    for task, split in units:
        for owner in (lang, SOURCE_LANG):
            if (task, split, owner) in evaluation_units():
                checks.append(decontamination_check(task, split, owner, lang))
    return checks


# --- Tokenizers, initialisers, training sections and targets ---


def tokenizer_dir(lang):
    if lang == SOURCE_LANG:
        return "results/models/source"
    return f"results/vocab/{lang}/tokenizer"


def init_entry(variant):
    return get_entry(variant_settings(variant)["init"], setting=f"variants.{variant}.init")


def extends_vocabulary(variant):
    """Whether a variant extends the source's tokenizer (`vocabulary: extend`) rather than replacing it."""
    return variant_settings(variant)["vocabulary"] == "extend"


# The {vocabulary} wildcard of the files built over a language's foreign tokens (rules encode_parallel,
# align, translation_probabilities, monolingual_alpha, focus_fasttext): "" for the language's own
# vocabulary (`vocabulary: replace`, the paths as they always were), ".extended" for the source's
# tokenizer extended with its tokens (`vocabulary: extend`). Rule encode_monolingual names the
# language too (".extended-<lang>"): it also encodes English with that language's extended tokenizer.
EXTENDED = ".extended"


def vocabulary_wildcard(variant):
    """The {vocabulary} wildcard of a variant's foreign-token files."""
    return EXTENDED if extends_vocabulary(variant) else ""


def vocabulary_tokenizer(lang, vocabulary):
    """The foreign tokenizer a {vocabulary} wildcard names: the language's own, or the source's
    extended with its tokens (rule extend_vocabulary)."""
    return f"results/vocab/{lang}/extended" if vocabulary else tokenizer_dir(lang)


def foreign_tokenizer(variant, lang):
    """The foreign tokenizer a variant's tables are built for: its own vocabulary, or the source's
    extended with foreign tokens (rule extend_vocabulary)."""
    return vocabulary_tokenizer(lang, vocabulary_wildcard(variant))


def encoded_text(variant, lang, side):
    """A side's training text encoded as a variant reads it, by rule encode_monolingual. With its language's
    tokenizer, or, for an extended vocabulary, every side with lang's one extended tokenizer."""
    if extends_vocabulary(variant):
        return f"results/encoded/{side}{EXTENDED}-{lang}"
    return f"results/encoded/{side}"


def training_settings(section):
    """A training section of the config as TrainSettings keyword arguments."""
    return dict(config[section])


def target_variants(task):
    """The variants `rule all` evaluates on a task; "all" means every variant in the config."""
    return config_lookups.target_variants(config, task)


def trained_variants():
    return config_lookups.trained_variants(config)


def requested_targets():
    """{targets key: variants} with "all" expanded."""
    return config_lookups.requested_targets(config)


# Target keys of the workflow's own reports; every other key belongs to a task (ramen.tasks.TASKS).
REPORT_TARGETS = {"ablation": "results/report/objective_ablation.tsv"}
check_task_config(config["tasks"], config["targets"], REPORT_TARGETS)


def all_targets():
    targets = ["results/report/mlm_loss.png"]
    targets += [f"results/report/init_{lang}.tsv" for lang in LANGUAGES if lang in config["init_report"]["dictionaries"]]
    if config["peer_report"]["variants"]:
        targets += [f"results/report/peers_{lang}.tsv" for lang in LANGUAGES]
    targets += evaluation_targets()
    return targets


# The word vectors of the monolingual initialisation route (rules/alpha_monolingual.smk, and the
# text preparation that waits for their check).


def word_vectors(lang):
    """The configured pretrained .vec/.bin file of a language, else fastText trained on its corpus."""
    pretrained = config["monolingual"]["vectors"].get(lang)
    if pretrained:
        return local_input(pretrained, f"monolingual.vectors.{lang}")
    return f"results/monolingual/{lang}/fasttext.vec"


def vectors_checked(lang):
    """The full check of a language's configured .vec file (by rule check_vectors); only the first
    rows are read while the job graph is built."""
    pretrained = config["monolingual"]["vectors"].get(lang)
    if pretrained and re.search(r"\.vec(\.gz)?$", word_vectors(lang)):
        return f"results/checks/vectors/{lang}.json"
    return []


def full_input_checks():
    """The input checks of the run that are jobs (too long for the job graph): every configured
    .vec file of every language, read in full."""
    return sorted({check for lang in [SOURCE_LANG, *LANGUAGES] for check in [vectors_checked(lang)] if check})


def input_checks_passed(wildcards=None):
    """What every job that trains waits for, the output of rule input_checks, which gathers all
    of the run's full input checks whatever the job's language: a bad row of one language's .vec
    stops the run before the English head warm-up or any fastText. Ancient: a check run again (a
    language added) does not rerun the jobs that waited for the earlier ones."""
    return ancient("results/checks/inputs.json") if full_input_checks() else []


# --- Pretrained baselines (mBERT) and the targets of rule all ---
# Each task's own input functions live in its rule file (ramen.tasks.TASKS names it).


def pretrained_model_dir(variant):
    """The checkpoint of an `init: pretrained` variant; a clear error when it is not there."""
    return config_lookups.pretrained_model_dir(config, variant)


def evaluation_targets():
    """The results and reports the `targets` section asks for: each registered task's (ramen.tasks)
    and the workflow's own reports."""
    targets = requested_files(requested_targets(), LANGUAGES)
    targets += [path for key, path in REPORT_TARGETS.items() if target_variants(key)]
    return targets


def checkpoint_run_inputs(wildcards):
    """The files that identify a variant's training run, whose kept checkpoints a curve evaluates."""
    return {
        "trained": f"results/training/{wildcards.variant}_{wildcards.lang}.metrics.csv",
        "source": "results/models/source",
        "init": f"results/init/{wildcards.variant}_{wildcards.lang}.safetensors",
        "tokenizer": tokenizer_dir(wildcards.lang),
    }


# --- char2subword modules (rules/char2subword.smk; init: char2subword reads one) ---
# A table is "source" (the English table) or "{variant}_{lang}" (a transferred language side).


def c2s_main_losses():
    """The file-name form of the main approximation's losses, e.g. "ce+cos+l2+nbr"."""
    from ramen.char2subword.loss_names import losses_name

    return losses_name(config["char2subword"]["approximation"]["losses"])


def c2s_module_path(table, stage):
    """The module of a stage: approx (first approximation), pretrained, final (approximated again)."""
    if stage == "approx":
        return f"results/char2subword/{table}/approx.{c2s_main_losses()}.safetensors"
    return f"results/char2subword/{table}/{stage}.safetensors"


# --- Inputs checked and training jobs planned while the job graph is built
# (ramen.workflow.graph_checks, ramen.workflow.memory_plans) ---


@functools.cache
def training_memory_plans():
    """Made once per start: the check below and rule memory_plan's table read the same plans. A
    relative resources.source_config may name one of the repository's shipped files."""
    return memory_plans.memory_plans(config, os.path.dirname(workflow.basedir))


def memory_plan_rows():
    """The plans as the rows of results/config/memory_plan.tsv."""
    return memory_plans.memory_plan_rows(config, training_memory_plans())


def check_run_inputs():
    """Fail before any job with the setting, file and line of a missing setting or a bad input."""
    graph_checks.check_run_inputs(config, INPUT_FILES, training_memory_plans)


INPUT_FILES = graph_checks.run_input_files(config)


# --- Training objectives (variants.<name>.objective) ---


def variant_objective(variant):
    return variant_settings(variant)["objective"]


def objective_settings(variant):
    """{"name": the variant's objective, the settings of the objectives section it reads}."""
    return objective_params(
        variant_objective(variant), config.get("objectives"), variant_settings(variant).get("objectives")
    )


def training_run_settings(wildcards):
    """The settings that define a variant's training run: its training rule's params, which the
    checkpoint curves read too, to find that run's checkpoints and export them as it does."""
    return {
        **training_settings("training"),
        **variant_settings(wildcards.variant).get("training", {}),
        "objective": objective_settings(wildcards.variant),
        # init: scratch re-draws the encoder and the English table before training.
        **({"from_scratch": True} if init_entry(wildcards.variant).from_scratch else {}),
    }


def gpu_resources(settings):
    """A training rule's resources: settings["gpus"] torchrun processes (GPUs) on each of
    settings["nodes"] nodes (ramen.pipeline.launch); ``settings`` maps the job's wildcards to its
    training settings. The SLURM plugin turns gpu into --gpus, which counts a job's GPUs on all its
    nodes together, so several nodes ask per node instead: --gres=gpu:G (profiles/slurm/README.md)."""

    def nodes(wildcards):
        return settings(wildcards)["nodes"]

    def gpu(wildcards):
        return settings(wildcards)["gpus"] if nodes(wildcards) == 1 else 0

    def gres(wildcards):
        return f"gpu:{settings(wildcards)['gpus']}" if nodes(wildcards) > 1 else None

    return {"nodes": nodes, "gpu": gpu, "gres": gres}
