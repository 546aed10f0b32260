"""The checks the Snakefile makes while it builds the job graph, before any job runs: each names
the config setting at fault (ConfigError), so that a run does not fail hours in, in the first
job that reads a bad setting or file.

Every function takes the config as Snakemake holds it (the schema's defaults filled in) and no
Snakemake global, so that tests call them on a config dict; workflow/rules/common.smk calls them.
Read while the job graph is built: no torch here (the torch-free contract in pyproject.toml).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from ramen.data.checkpoint_headers import read_checkpoint, read_tokenizer
from ramen.data.input_checks import InputFile, check_inputs, missing_language_settings
from ramen.errors import ConfigError
from ramen.families import check_source
from ramen.initializers import INITIALIZERS, check_init_vocabulary, get_entry, names_for
from ramen.objectives import OBJECTIVES, uses_pairs
from ramen.workflow.config_lookups import (NON_TRANSFER_INITS, download_dir, fetches, is_transfer, local_input,
                                           pretrained_model_dir, requested_targets, requested_variants,
                                           source_model, trained_variants, variant_settings)
from ramen.workflow.memory_plans import Plans, check_memory_plans
from ramen.tasks import language_needs as task_language_needs
from ramen.tasks import task_files
from ramen.training.settings import check_training_sections
from ramen.glue import check_settings_together, resolve_model_path

# Where check_inputs remembers the files that passed (by size and time), so a second start skips them.
INPUT_CHECKS_CACHE = ".snakemake/ramen/input_checks.json"


def check_registry_names(variants: Mapping[str, Mapping]) -> None:
    """Each variant's initialiser and objective are registered, and its vocabulary one they serve."""
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


def language_needs(config: Mapping) -> dict[str, list[str]]:
    """Per language, the settings the requested targets read."""
    source_lang = config["source"]["lang"]
    source_needs, task_needs = task_language_needs(requested_targets(config), source_lang)
    needs = {source_lang: [f"corpora.{source_lang}", *source_needs]}
    needs_pairs = any(
        variant_settings(config, v)["init"] == "parallel" or uses_pairs(variant_settings(config, v)["objective"])
        for v in trained_variants(config)
    )
    for lang in config["languages"]:
        settings = [f"corpora.{lang}"] + ([f"parallel.{lang}"] if needs_pairs else [])
        needs[lang] = settings + [need.format(lang=lang) for need in task_needs]
    return needs


def run_input_files(config: Mapping) -> list[InputFile]:
    """Every external file of the configured languages, with the kind of check it gets."""
    source_lang = config["source"]["lang"]
    langs = [source_lang, *config["languages"]]
    items = []
    for lang in langs:
        for index, entry in enumerate(config["corpora"].get(lang, [])):
            setting = f"corpora.{lang}[{index}]"
            items.append(InputFile(setting, local_input(config, entry, setting),
                                   "wikipedia" if entry["format"] == "wikipedia" else "corpus"))

    def aligned(section, files):
        paths = {side: local_input(config, spec, f"{section}.{side}") for side, spec in files.items()}
        for side, path in paths.items():
            others = [other for other_side, other in paths.items() if other_side != side]
            items.append(InputFile(f"{section}.{side}", path, "lines", {"aligned_with": others[0] if others else None}))

    for lang in config["languages"]:
        if lang in config["parallel"]:
            aligned(f"parallel.{lang}", config["parallel"][lang])
    # Every file the registered tasks list (ramen.tasks.TaskFiles); "lines" files are line-aligned sides.
    for task_file in task_files(config["tasks"], source_lang):
        if task_file.owner not in langs:
            continue
        paths = {side: local_input(config, spec, task_file.settings[side]) for side, spec in task_file.sides.items()}
        for side, path in paths.items():
            others = [other for other_side, other in paths.items() if other_side != side]
            options = {"aligned_with": others[0] if others else None} if task_file.check == "lines" else task_file.options
            items.append(InputFile(task_file.settings[side], path, task_file.check, options))
    for lang, spec in config["monolingual"]["vectors"].items():
        if lang in langs:
            items.append(InputFile(f"monolingual.vectors.{lang}", local_input(config, spec), "vectors"))
    for lang, path in config["init_report"]["dictionaries"].items():
        if lang in langs:
            items.append(InputFile(f"init_report.dictionaries.{lang}", path, "dictionary"))
    # The peer initialisers' fastText models and WECHSEL's seed dictionaries.
    for section, kind in (("fasttext_models", "vectors"), ("wechsel_dictionaries", "dictionary")):
        for lang, spec in config["peers"][section].items():
            if lang in langs:
                setting = f"peers.{section}.{lang}"
                items.append(InputFile(setting, local_input(config, spec, setting), kind))
    return items


def check_model_paths(config: Mapping) -> None:
    """Every model the run reads, checked from its metadata and file headers (ramen.families): a
    local directory that is not there, a family ramen does not transfer, missing or truncated
    weights, a tokenizer without the tokens its family needs, or a variant whose objective trains
    another family (or whose initialiser draws a model the family does not offer) fails here, not
    in the first job that reads it. Snapshots still to be downloaded ({hf: ...}) are checked once
    their rule has fetched them."""
    source, downloaded = source_model(config)
    if not downloaded:
        source = resolve_model_path(config["source"]["model"], "source.model")
    if os.path.exists(source):
        transfers = [v for v in config["variants"] if is_transfer(config, v)]
        settings = {v: variant_settings(config, v) for v in transfers}
        objectives = {f"variants.{v}.objective": settings[v]["objective"] for v in transfers}
        scratch = tuple(f"variants.{v}.init" for v in transfers
                        if get_entry(settings[v]["init"], setting=f"variants.{v}.init").from_scratch)
        extended = tuple(f"variants.{v}.vocabulary" for v in transfers if settings[v]["vocabulary"] == "extend")
        check_source(source, "source.model", objectives, {name: e.family for name, e in OBJECTIVES.items()}, scratch,
                     extended)
        check_context_token(config, source)
    for variant in requested_variants(config):
        if variant_settings(config, variant)["init"] == "pretrained":
            path = pretrained_model_dir(config, variant)
            if os.path.exists(path):
                check_source(path, f"variants.{variant}.model")


def check_context_token(config: Mapping, source: str) -> None:
    """The language-modelling task's context token, a string of the source's vocabulary: every
    vocabulary built from the source keeps its special tokens by string, so a token the source
    lacks would be refused only by the scoring job, after training (a config copied from another
    source's names that source's token)."""
    task = (config.get("tasks") or {}).get("language_modeling") or {}
    token = (task.get("settings") or {}).get("context_token")
    if token is None:
        return
    tokenizer = read_tokenizer(read_checkpoint(source, "source.model"), "source.model")
    if tokenizer.vocabulary is not None and token not in tokenizer.vocabulary:
        named = sorted(set(tokenizer.specials.values()))
        raise ConfigError("tasks.language_modeling.settings.context_token",
                          f"{token!r} is not a token of the source ({tokenizer.file})",
                          f"name one of its special tokens {named}, or null for its BOS")


def check_aligner(config: Mapping) -> None:
    """The seeded eflomal build, when a requested variant's initialiser reads word alignments: an
    unseeded one would be refused only by the align job, after the text jobs before it."""
    # Imported here: only a run that aligns needs it, and it looks for the eflomal binary.
    from ramen.alignment.eflomal_build import seeded_eflomal_binary

    aligned = [v for v in requested_variants(config) if is_transfer(config, v) and "parallel_alpha" in
               get_entry(variant_settings(config, v)["init"], setting=f"variants.{v}.init").inputs]
    if aligned and config["alignment"]["aligner"] == "eflomal":
        seeded_eflomal_binary()


def check_run_inputs(config: Mapping, input_files: list[InputFile], memory_plans: Callable[[], Plans],
                     cache: str | os.PathLike | None = INPUT_CHECKS_CACHE) -> None:
    """Fail before any job with the setting, file and line of a missing setting or a bad input.
    Files still to be downloaded are checked when they arrive.

    ``input_files``: run_input_files(config), which rule input_checks' download waits also read.
    ``memory_plans`` makes the training jobs' plans (ramen.workflow.memory_plans.memory_plans):
    called only after the training sections have passed their checks, whose messages are the
    clearer; common.smk's caches them for rule memory_plan.
    """
    missing_language_settings(config, language_needs(config))
    variants = config["variants"]
    # The checks a training job runs when it starts, by the full key of each setting.
    check_training_sections(config["head_warmup"], {}, "head_warmup")
    check_settings_together(config)
    check_training_sections(config["training"], {v: variants[v].get("training") for v in variants
                                                 if is_transfer(config, v)})
    check_model_paths(config)
    check_memory_plans(config, memory_plans())
    check_aligner(config)
    pending = check_inputs(input_files, cache=cache)
    downloads = set(fetches(config).outputs())
    absent = [item for item in pending
              if item.path not in downloads and not item.path.startswith(f"{download_dir(config)}/")]
    if absent:
        item = absent[0]
        raise ConfigError(item.setting, f"no file at {item.path}", "fix the path, or fetch the file first")
