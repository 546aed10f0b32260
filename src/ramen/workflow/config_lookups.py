"""Config look-ups that the job-graph checks (ramen.workflow.graph_checks) and the memory plan
(ramen.workflow.memory_plans) share: which variants a run trains and reads, and where its source
model is. Each takes the config as Snakemake holds it, the schema's defaults filled in;
workflow/rules/common.smk has the rules' own look-ups.

Read while the job graph is built: no torch here (the torch-free contract in pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Mapping

from ramen.data.inputs import FetchJobs, fetch_jobs, resolve
from ramen.errors import RamenError
from ramen.tasks import table_targets
from ramen.glue import resolve_model_path

# Baselines that use an existing model unchanged; every other init is a registered initialiser.
NON_TRANSFER_INITS = ("none", "pretrained")


def download_dir(config: Mapping) -> str:
    return config["download_dir"].rstrip("/")


def local_input(config: Mapping, spec, setting: str = "input") -> str:
    """The local path of a config value that names a file (a path or a download)."""
    return resolve(spec, download_dir(config), setting)


def fetches(config: Mapping) -> FetchJobs:
    """What the download rules fetch for this config (rules/download.smk)."""
    return fetch_jobs(config, download_dir(config))


def source_model(config: Mapping) -> tuple[str, bool]:
    """The source model's local path, and whether rule download_model has still to fetch it there."""
    path = local_input(config, config["source"]["model"], "source.model")
    return path, path in fetches(config).models


def variant_settings(config: Mapping, variant: str) -> Mapping:
    if variant not in config["variants"]:
        raise ValueError(f"config: unknown variant '{variant}'; defined variants: {sorted(config['variants'])}")
    return config["variants"][variant]


def is_transfer(config: Mapping, variant: str) -> bool:
    """False for baselines that use an existing model unchanged (the source model, or a
    multilingual checkpoint such as mBERT)."""
    return variant_settings(config, variant)["init"] not in NON_TRANSFER_INITS


def target_variants(config: Mapping, key: str) -> list[str]:
    """The variants `rule all` evaluates for a targets key; "all" means every variant in the config."""
    requested = config["targets"].get(key, [])
    return list(config["variants"]) if requested == "all" else list(requested)


def requested_targets(config: Mapping) -> dict[str, list[str]]:
    """{targets key: variants} with "all" expanded."""
    return {key: target_variants(config, key) for key in config["targets"]}


def trained_variants(config: Mapping) -> list[str]:
    """The transfer variants some target names, in config order."""
    named = {v for key in config["targets"] for v in target_variants(config, key)}
    return [v for v in config["variants"] if v in named and is_transfer(config, v)]


def requested_variants(config: Mapping) -> list[str]:
    """Every variant a target of the run names (a table target by its {variant}_{src}-{tgt} tables)."""
    tables = table_targets()
    named = [v for key in config["targets"] if key not in tables for v in target_variants(config, key)]
    named += [name.rsplit("_", 1)[0] for key in tables for name in config["targets"].get(key, [])]
    return [v for v in dict.fromkeys(named) if v in config["variants"]]


def pretrained_model_dir(config: Mapping, variant: str) -> str:
    """The checkpoint of an `init: pretrained` variant; a clear error when it is not there."""
    spec = variant_settings(config, variant).get("model")
    if isinstance(spec, dict):  # {hf: <model id>}: a snapshot that rule download_model fetches
        return local_input(config, spec, f"variants.{variant}.model")
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
