"""The memory plan of the run's training jobs while the job graph is built (ramen.training.memory):
shown before any job, written by rule memory_plan to results/config/memory_plan.tsv, and a job
above resources.gpu_memory_gb refused naming the settings that would make it fit.

Every function takes the config as Snakemake holds it (the schema's defaults filled in) and no
Snakemake global; workflow/rules/common.smk calls them. No torch here (pyproject.toml's
torch-free contract): the Snakefile reads this module on every start.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from ramen.data.checkpoint_headers import read_checkpoint
from ramen.errors import ConfigError
from ramen.workflow.config_lookups import source_model, trained_variants, variant_settings
from ramen.training import memory
from ramen.training.memory_advice import check_plan
from ramen.training.settings import TrainSettings
from ramen.glue import resolve_model_path, settings_from

# The source as rule warmup_head saves it: it says whether a GGUF source's output layer is tied.
PREPARED_SOURCE = "results/models/source"


class TrainingJob(NamedTuple):
    rule: str
    job: str
    values: Mapping  # the job's training settings as config values
    key: Callable[[str], str]  # a setting's name -> its full config key
    vocabulary: str | None  # None for the head warm-up, which keeps the source's
    output_init: str
    objective: str | None = None  # the variant's: some keep every block gathered (memory.BLOCKS_RUN_IN_PARTS)


class JobPlan(NamedTuple):
    rule: str
    job: str
    settings: TrainSettings
    plan: memory.Plan | None  # None when the source's shapes cannot be read yet (note says why)
    plan_for: Callable[[TrainSettings], memory.Plan] | None  # the plan at other settings
    key: Callable[[str], str]
    note: str


Plans = list[JobPlan]


def source_header(config: Mapping, repo_dir: str | os.PathLike) -> tuple[dict | None, str]:
    """The source's config.json as the training jobs read it, and the file it comes from; or
    None and why it cannot be read yet. ``repo_dir``: where a relative resources.source_config
    not in the working directory is looked for (the recipes' shipped files)."""
    located, downloaded = source_model(config)
    source = located if downloaded else resolve_model_path(config["source"]["model"], "source.model")
    why = "the source is still to be downloaded (rule download_model)"
    # A GGUF header does not say whether the output layer is tied: rule warmup_head's saved source does.
    for path in (source, PREPARED_SOURCE):
        if os.path.exists(path):
            read = read_checkpoint(path, "source.model")
            if read.gguf_metadata is None:
                return read.config, str(read.config_file)
            why = ("a GGUF file's header does not say whether the output layer is tied (until rule warmup_head "
                   f"has saved {PREPARED_SOURCE})")
    shipped = config["resources"]["source_config"]
    if shipped:
        if not os.path.isabs(shipped) and not os.path.exists(shipped):
            shipped = os.path.join(repo_dir, shipped)
        try:
            return json.loads(Path(shipped).read_text(encoding="utf-8")), shipped
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise ConfigError("resources.source_config", f"{shipped} cannot be read as JSON ({error})",
                              "give the source's config.json") from None
    return None, f"{why}: give its config.json as resources.source_config to plan now"


def training_key(section: str, variant: str | None = None, override: Mapping | None = None) -> Callable[[str], str]:
    """The full config key of a training setting: the variant's where its override sets it."""
    def key(name):
        return f"variants.{variant}.training.{name}" if name in (override or {}) else f"{section}.{name}"

    return key


def training_jobs(config: Mapping) -> list[TrainingJob]:
    """Every training job of the run: the head warm-up, then each trained variant and language."""
    jobs = [TrainingJob("warmup_head", "source", config["head_warmup"], training_key("head_warmup"), None, "input")]
    for variant in trained_variants(config):
        settings = variant_settings(config, variant)
        override = settings.get("training") or {}
        for lang in config["languages"]:
            jobs.append(TrainingJob("train_bilingual", f"{variant}_{lang}", {**config["training"], **override},
                                    training_key("training", variant, override), settings["vocabulary"],
                                    settings["output_init"], settings.get("objective")))
    return jobs


def memory_plans(config: Mapping, repo_dir: str | os.PathLike) -> Plans:
    """The plan of each training job; a masked LM's head warm-up among them when it trains."""
    header, where = source_header(config, repo_dir)
    try:
        shape = memory.SourceShape.from_config(header) if header is not None else None
    except memory.NoShape as problem:
        shape, where = None, f"{where}: {problem}"
    plans = []
    for job in training_jobs(config):
        settings = settings_from(TrainSettings, job.values, "head_warmup" if job.rule == "warmup_head" else "training")
        if job.rule == "warmup_head" and not (shape is not None and shape.masked and settings.steps):
            continue  # a causal LM's warm-up only saves the source
        if shape is None:
            plans.append(JobPlan(job.rule, job.job, settings, None, None, job.key, where))
            continue
        if settings.uses_lora:  # by the key that sets it (a variant's lora replaces the whole section's)
            memory.check_lora_targets(shape, settings.lora.target_modules, f"{job.key('lora')}.target_modules")
        rows = memory.foreign_vocabulary_rows(shape, job.vocabulary, config["bpe"]) if job.vocabulary else None

        def plan_for(changed, rows=rows, vocabulary=job.vocabulary or "replace", output_init=job.output_init,
                     objective=job.objective):
            return memory.plan_job(shape, changed, foreign_rows=rows, vocabulary=vocabulary, device=config["device"],
                                   limit_gb=config["resources"]["gpu_memory_gb"], output_init=output_init,
                                   objective=objective)

        plans.append(JobPlan(job.rule, job.job, settings, plan_for(settings), plan_for, job.key, f"from {where}"))
    return plans


def memory_plan_rows(config: Mapping, plans: Plans) -> list[dict[str, str]]:
    """The plans as the rows of results/config/memory_plan.tsv."""
    model = config["source"]["model"]
    source = model["hf"] if isinstance(model, dict) else str(model)
    return [memory.plan_row(p.rule, p.job, source, p.settings, p.plan, config["device"], p.note) for p in plans]


def check_memory_plans(config: Mapping, plans: Plans) -> None:
    """Show every training job's plan on stderr; refuse one above resources.gpu_memory_gb, naming
    the settings that would make it fit."""
    rows = memory_plan_rows(config, plans)
    shapes = ", ".join(dict.fromkeys(row["note"] for row in rows if row["total_gib"]))
    if rows:
        print(f"Memory per GPU in GiB{f', shapes {shapes}' if shapes else ''} (ramen.training.memory; "
              "`snakemake results/config/memory_plan.tsv` writes the table):", *memory.format_rows(rows), sep="\n",
              file=sys.stderr)
    for p in plans:
        if p.plan is not None:
            check_plan(f"{p.rule} {p.job}", p.plan, p.plan_for, p.settings, p.key)
