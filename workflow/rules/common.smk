# Config look-ups and input functions that several rule files use; those of one rule file are in
# rules/inputs/<that file>, which it includes.
import functools
import json
import os
import re
import sys
from pathlib import Path

from ramen.errors import ConfigError
from ramen.families import check_source
from ramen.data.input_checks import InputFile, check_inputs, missing_language_settings
from ramen.initializers import INITIALIZERS, check_init_vocabulary, get_entry, names_for
from ramen.data.inputs import fetch_jobs, resolve
from ramen.objectives import OBJECTIVES, objective_params, uses_pairs
from ramen.training import memory
from ramen.training.settings import TrainSettings, check_training_sections
from ramen.workflow import check_settings_together, settings_from
from ramen.tasks import TASKS, check_task_config, requested_files, table_targets, task_files
from ramen.tasks import evaluation_units as task_evaluation_units
from ramen.tasks import language_needs as task_language_needs

SOURCE_LANG = config["source"]["lang"]
LANGUAGES = list(config["languages"])
VARIANTS = config["variants"]
# Initialisers and objectives are named by their registries (ramen.initializers.INITIALIZERS,
# ramen.objectives.OBJECTIVES), not by a schema enum: registering one is all it takes.
NON_TRANSFER_INITS = ("none", "pretrained")


def check_registry_names(variants):
    for name, settings in variants.items():
        init = settings["init"]
        if init not in INITIALIZERS and init not in NON_TRANSFER_INITS:
            raise ConfigError(f"variants.{name}.init", f"unknown initialiser {init!r}",
                              f"valid names: {', '.join([*INITIALIZERS, *NON_TRANSFER_INITS])}")
        objective = settings["objective"]
        if objective not in OBJECTIVES:
            raise ConfigError(f"variants.{name}.objective", f"unknown objective {objective!r}",
                              f"valid names: {', '.join(OBJECTIVES)}")
        vocabulary = settings["vocabulary"]
        if init in NON_TRANSFER_INITS:
            if vocabulary == "extend":
                raise ConfigError(f"variants.{name}.vocabulary", f"init '{init}' builds no new rows, which an "
                                  "extended vocabulary needs", "choose an initialiser of the new rows ("
                                  f"{', '.join(names_for('extend'))}), or vocabulary: replace")
            continue
        check_init_vocabulary(init, vocabulary, setting=f"variants.{name}.init")
        if vocabulary == "replace" and settings["output_init"] != "input":
            raise ConfigError(f"variants.{name}.output_init", f"'{settings['output_init']}' chooses the new "
                              "output rows of an extension; a replaced vocabulary's follow its input rows",
                              "leave output_init out, or use vocabulary: extend")


check_registry_names(VARIANTS)
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
    if variant not in VARIANTS:
        raise ValueError(
            f"config: unknown variant '{variant}'; defined variants: {sorted(VARIANTS)}"
        )
    return VARIANTS[variant]


def is_transfer(variant):
    """False for baselines that use an existing model unchanged (the source model, or a
    multilingual checkpoint such as mBERT)."""
    return variant_settings(variant)["init"] not in NON_TRANSFER_INITS


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


def foreign_tokenizer(variant, lang):
    """The foreign tokenizer a variant's tables are built for: its own vocabulary, or the source's
    extended with foreign tokens (rule extend_vocabulary)."""
    return f"results/vocab/{lang}/extended" if extends_vocabulary(variant) else tokenizer_dir(lang)


def encoded_text(variant, lang, side):
    """A side's training text encoded as a variant reads it: with its language's tokenizer, or, for an
    extended vocabulary, every side with the one extended tokenizer (rule encode_extended)."""
    if extends_vocabulary(variant):
        return f"results/encoded/extended/{lang}/{side}"
    return f"results/encoded/{side}"


def training_settings(section):
    """A training section of the config as TrainSettings keyword arguments."""
    return dict(config[section])


def target_variants(task):
    """The variants `rule all` evaluates on a task; "all" means every variant in the config."""
    requested = config["targets"].get(task, [])
    return list(VARIANTS) if requested == "all" else list(requested)


def trained_variants():
    variants = {v for task in config["targets"] for v in target_variants(task)}
    return [v for v in VARIANTS if v in variants and is_transfer(v)]


def requested_targets():
    """{targets key: variants} with "all" expanded."""
    return {key: target_variants(key) for key in config["targets"]}


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
    from ramen.errors import RamenError
    from ramen.workflow import resolve_model_path

    spec = variant_settings(variant).get("model")
    if isinstance(spec, dict):  # {hf: <model id>}: a snapshot that rule download_model fetches
        return local_input(spec, f"variants.{variant}.model")
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


# --- Inputs checked while the job graph is built (ramen.data.input_checks) ---


def language_needs():
    """Per language, the settings the requested targets read."""
    source_needs, task_needs = task_language_needs(requested_targets(), SOURCE_LANG)
    needs = {SOURCE_LANG: [f"corpora.{SOURCE_LANG}", *source_needs]}
    needs_pairs = any(
        variant_settings(v)["init"] == "parallel" or uses_pairs(variant_objective(v))
        for v in trained_variants()
    )
    for lang in LANGUAGES:
        settings = [f"corpora.{lang}"] + ([f"parallel.{lang}"] if needs_pairs else [])
        needs[lang] = settings + [need.format(lang=lang) for need in task_needs]
    return needs


def run_input_files():
    """Every external file of the configured languages, with the kind of check it gets."""
    langs = [SOURCE_LANG, *LANGUAGES]
    items = []
    for lang in langs:
        for index, entry in enumerate(config["corpora"].get(lang, [])):
            setting = f"corpora.{lang}[{index}]"
            items.append(InputFile(setting, local_input(entry, setting), "wikipedia" if entry["format"] == "wikipedia" else "corpus"))

    def aligned(section, files):
        paths = {side: local_input(spec, f"{section}.{side}") for side, spec in files.items()}
        for side, path in paths.items():
            others = [other for other_side, other in paths.items() if other_side != side]
            items.append(InputFile(f"{section}.{side}", path, "lines", {"aligned_with": others[0] if others else None}))

    for lang in LANGUAGES:
        if lang in config["parallel"]:
            aligned(f"parallel.{lang}", config["parallel"][lang])
    tasks = config["tasks"]
    # Every file the registered tasks list (ramen.tasks.TaskFiles); "lines" files are line-aligned sides.
    for task_file in task_files(tasks, SOURCE_LANG):
        if task_file.owner not in langs:
            continue
        paths = {side: local_input(spec, task_file.settings[side]) for side, spec in task_file.sides.items()}
        for side, path in paths.items():
            others = [other for other_side, other in paths.items() if other_side != side]
            options = {"aligned_with": others[0] if others else None} if task_file.check == "lines" else task_file.options
            items.append(InputFile(task_file.settings[side], path, task_file.check, options))
    for lang, spec in config["monolingual"]["vectors"].items():
        if lang in langs:
            items.append(InputFile(f"monolingual.vectors.{lang}", local_input(spec), "vectors"))
    for lang, path in config["init_report"]["dictionaries"].items():
        if lang in langs:
            items.append(InputFile(f"init_report.dictionaries.{lang}", path, "dictionary"))
    # The peer initialisers' fastText models and WECHSEL's seed dictionaries.
    for section, kind in (("fasttext_models", "vectors"), ("wechsel_dictionaries", "dictionary")):
        for lang, spec in config["peers"][section].items():
            if lang in langs:
                setting = f"peers.{section}.{lang}"
                items.append(InputFile(setting, local_input(spec, setting), kind))
    return items


def requested_variants():
    """Every variant a target of the run names (a table target by its {variant}_{src}-{tgt} tables)."""
    tables = table_targets()
    named = [v for key in config["targets"] if key not in tables for v in target_variants(key)]
    named += [name.rsplit("_", 1)[0] for key in tables for name in config["targets"].get(key, [])]
    return [v for v in dict.fromkeys(named) if v in VARIANTS]


def check_model_paths():
    """Every model the run reads, checked from its metadata and file headers (ramen.families): a
    local directory that is not there, a family ramen does not transfer, missing or truncated
    weights, a tokenizer without the tokens its family needs, or a variant whose objective trains
    another family (or whose initialiser draws a model the family does not offer) fails here, not in the first job that reads it. Snapshots still to be
    downloaded ({hf: ...}) are checked once their rule has fetched them."""
    from ramen.workflow import resolve_model_path

    source = SOURCE_MODEL
    if SOURCE_MODEL not in FETCH.models:
        source = resolve_model_path(config["source"]["model"], "source.model")
    if os.path.exists(source):
        transfers = [v for v in VARIANTS if is_transfer(v)]
        objectives = {f"variants.{v}.objective": variant_objective(v) for v in transfers}
        scratch = tuple(f"variants.{v}.init" for v in transfers if init_entry(v).from_scratch)
        extended = tuple(f"variants.{v}.vocabulary" for v in transfers if extends_vocabulary(v))
        check_source(source, "source.model", objectives, {name: e.family for name, e in OBJECTIVES.items()}, scratch,
                     extended)
    for variant in requested_variants():
        if variant_settings(variant)["init"] == "pretrained":
            path = pretrained_model_dir(variant)
            if os.path.exists(path):
                check_source(path, f"variants.{variant}.model")


def check_aligner():
    """The seeded eflomal build, when a requested variant's initialiser reads word alignments: an
    unseeded one would be refused only by the align job, after the text jobs before it."""
    from ramen.alignment.eflomal_build import seeded_eflomal_binary

    aligned = [v for v in requested_variants() if is_transfer(v)
               and "parallel_alpha" in get_entry(variant_settings(v)["init"], setting=f"variants.{v}.init").inputs]
    if aligned and config["alignment"]["aligner"] == "eflomal":
        seeded_eflomal_binary()


def check_run_inputs():
    """Fail before any job with the setting, file and line of a missing setting or a bad input.
    Files still to be downloaded are checked when they arrive."""
    missing_language_settings(config, language_needs())
    # The checks a training job runs when it starts, by the full key of each setting.
    check_training_sections(config["head_warmup"], {}, "head_warmup")
    check_settings_together(config)
    check_training_sections(config["training"], {v: VARIANTS[v].get("training") for v in VARIANTS if is_transfer(v)})
    check_model_paths()
    check_memory_plans()
    check_aligner()
    pending = check_inputs(INPUT_FILES, cache=".snakemake/ramen/input_checks.json")
    downloads = set(FETCH.outputs())
    absent = [item for item in pending if item.path not in downloads and not item.path.startswith(f"{DOWNLOAD_DIR}/")]
    if absent:
        item = absent[0]
        raise ConfigError(item.setting, f"no file at {item.path}", "fix the path, or fetch the file first")


INPUT_FILES = run_input_files()


# --- The memory plan of the training jobs (ramen.training.memory; rule memory_plan writes it) ---

PREPARED_SOURCE = "results/models/source"


def source_header():
    """The source's config.json as the training jobs read it, and the file it comes from; or
    None and why it cannot be read yet."""
    from ramen.data.checkpoint_headers import read_checkpoint
    from ramen.workflow import resolve_model_path

    downloaded = SOURCE_MODEL in FETCH.models
    source = SOURCE_MODEL if downloaded else resolve_model_path(config["source"]["model"], "source.model")
    why = "the source is still to be downloaded (rule download_model)"
    # A GGUF header does not say whether the output layer is tied: rule warmup_head's saved source does.
    for path in (source, PREPARED_SOURCE):
        if os.path.exists(path):
            read = read_checkpoint(path, "source.model")
            if read.gguf_metadata is None:
                return read.config, str(read.config_file)
            why = f"a GGUF file's header does not say whether the output layer is tied (until rule warmup_head has saved {PREPARED_SOURCE})"
    shipped = config["resources"]["source_config"]
    if shipped:
        # A relative path not in the working directory is the repository's (the recipes' shipped files).
        if not os.path.isabs(shipped) and not os.path.exists(shipped):
            shipped = os.path.join(os.path.dirname(workflow.basedir), shipped)
        try:
            return json.loads(Path(shipped).read_text(encoding="utf-8")), shipped
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise ConfigError("resources.source_config", f"{shipped} cannot be read as JSON ({error})",
                              "give the source's config.json") from None
    return None, f"{why}: give its config.json as resources.source_config to plan now"


def training_key(section, variant=None, override=None):
    """The full config key of a training setting: the variant's where its override sets it."""
    def key(name):
        return f"variants.{variant}.training.{name}" if name in (override or {}) else f"{section}.{name}"

    return key


def training_jobs():
    """[(rule_name, job, settings as config values, setting key, vocabulary or None, output_init)] of
    every training job."""
    jobs = [("warmup_head", "source", config["head_warmup"], training_key("head_warmup"), None, "input")]
    for variant in trained_variants():
        settings = variant_settings(variant)
        override = settings.get("training") or {}
        for lang in LANGUAGES:
            jobs.append(("train_bilingual", f"{variant}_{lang}", {**config["training"], **override},
                         training_key("training", variant, override), settings["vocabulary"],
                         settings["output_init"]))
    return jobs


@functools.cache
def memory_plans():
    """[(rule_name, job, settings, plan or None, the plan at other settings, setting key, note)] of each
    training job; a masked LM's head warm-up among them when it trains."""
    header, where = source_header()
    try:
        shape = memory.SourceShape.from_config(header) if header is not None else None
    except memory.NoShape as problem:
        shape, where = None, f"{where}: {problem}"
    plans = []
    for rule_name, job, values, key, vocabulary, output_init in training_jobs():
        settings = settings_from(TrainSettings, values, "head_warmup" if rule_name == "warmup_head" else "training")
        if rule_name == "warmup_head" and not (shape is not None and shape.masked and settings.steps):
            continue  # a causal LM's warm-up only saves the source
        if shape is None:
            plans.append((rule_name, job, settings, None, None, key, where))
            continue
        rows = memory.foreign_vocabulary_rows(shape, vocabulary, config["bpe"]) if vocabulary else None

        def plan_for(changed, rows=rows, vocabulary=vocabulary or "replace", output_init=output_init):
            return memory.plan_job(shape, changed, foreign_rows=rows, vocabulary=vocabulary, device=config["device"],
                                   limit_gb=config["resources"]["gpu_memory_gb"], output_init=output_init)

        plans.append((rule_name, job, settings, plan_for(settings), plan_for, key, f"from {where}"))
    return plans


def memory_plan_rows():
    """The plan as the rows of results/config/memory_plan.tsv."""
    model = config["source"]["model"]
    source = model["hf"] if isinstance(model, dict) else str(model)
    return [memory.plan_row(rule_name, job, source, settings, plan, config["device"], note)
            for rule_name, job, settings, plan, _, _, note in memory_plans()]


def check_memory_plans():
    """Show every training job's plan; refuse one above resources.gpu_memory_gb, naming the settings
    that would make it fit."""
    rows = memory_plan_rows()
    shapes = ", ".join(dict.fromkeys(row["note"] for row in rows if row["total_gib"]))
    if rows:
        print(f"Memory per GPU in GiB{f', shapes {shapes}' if shapes else ''} (ramen.training.memory; "
              "`snakemake results/config/memory_plan.tsv` writes the table):", *memory.format_rows(rows), sep="\n",
              file=sys.stderr)
    for rule_name, job, settings, plan, plan_for, key, _ in memory_plans():
        if plan is not None:
            memory.check_plan(f"{rule_name} {job}", plan, plan_for, settings, key)


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
