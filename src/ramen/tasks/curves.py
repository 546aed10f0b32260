"""Scores along bilingual training: export each kept checkpoint and evaluate it (Figure 2).

Checkpoints of a run live under ``<checkpoint_dir>/<variant>_<lang>/<fingerprint>/step-N``
(:func:`ramen.training.trainer.run_fingerprint`); the fingerprint is recomputed from the same
settings, training objective and starting files the training rule used, so only checkpoints of
the current run are read. Step 0 is the initialisation itself, before any update.

A checkpoint holds the training objective's module (:mod:`ramen.objectives`); each is loaded
into that module and exported by it, as its training's own export does: language embeddings
folded into the tables, RTD's discriminator and decomposed attention's plain encoder exported.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file

from ramen.errors import RamenError
from ramen.modeling.bilingual import BilingualMaskedLM, load_source_mlm
from ramen.objectives import get_objective, split_spec
from ramen.training.checkpoints import list_checkpoints
from ramen.training.settings import LoraSettings
from ramen.training.sharding import read_checkpoint_model
from ramen.training.trainer import TrainSettings, run_fingerprint
from ramen.vocab.tokenizer import load_tokenizer
from ramen.glue import settings_from


def run_checkpoints(checkpoint_dir: str | os.PathLike, settings: Mapping, source_dir: str | os.PathLike,
                    init_path: str | os.PathLike, objective: Mapping | None = None,
                    from_scratch: bool = False) -> list[tuple[int, Path]]:
    """(step, directory) of every kept checkpoint of the run that these settings, objective (the
    training rule's) and inputs define."""
    name, values = split_spec(objective)
    run = {"name": name, **values, **({"from_scratch": True} if from_scratch else {})}
    fingerprint = run_fingerprint(settings_from(TrainSettings, dict(settings), "training"), [source_dir, init_path],
                                  run)
    run_dir = Path(checkpoint_dir) / fingerprint
    found = list_checkpoints(run_dir)
    if not found:
        raise RamenError(
            f"{run_dir}: no checkpoints of this training run (set training.checkpoint_every and keep_every, "
            "then retrain)")
    return found


def trained_module(model: BilingualMaskedLM, objective: Mapping | None) -> torch.nn.Module:
    """The module a run trains and checkpoints: the objective's module around the model (without
    training data: it only loads and exports)."""
    from ramen.objectives.base import ObjectiveSettings

    name, values = split_spec(objective)
    return get_objective(name).for_export(model, ObjectiveSettings.from_config(values))


def exported_sides(source_dir: str | os.PathLike, init_path: str | os.PathLike,
                   foreign_tokenizer_dir: str | os.PathLike, lang: str, steps: list[tuple[int, Path]],
                   source_lang: str = "en", objective: Mapping | None = None, lora: LoraSettings | None = None,
                   seed: int = 0) -> Iterator[tuple[int, Mapping[str, str]]]:
    """For step 0 and each checkpoint: (step, {language: exported Hugging Face directory}).

    The directories are temporary; use them before asking for the next step. ``lora``: the
    adapters of a run that trains them (its checkpoints hold them; the export merges them).
    """
    tokenizers = {source_lang: load_tokenizer(source_dir), lang: load_tokenizer(foreign_tokenizer_dir)}
    initial = load_file(str(init_path))
    for step, path in [(0, None), *steps]:
        model = BilingualMaskedLM(load_source_mlm(source_dir), source_lang,
                                  {lang: (initial["embeddings"], initial["bias"])})
        trained = trained_module(model, objective)
        if lora is not None:
            trained.model.add_adapters(**dataclasses.asdict(lora), seed=seed)
        if path is not None:
            try:
                read_checkpoint_model(path, trained)
            except RuntimeError as error:
                name, _ = split_spec(objective)
                raise RamenError(f"{path}: not a checkpoint of this '{name}' training run ({error})") from None
        with tempfile.TemporaryDirectory(prefix="ramen-checkpoint-") as tmp:
            out = {side: str(Path(tmp) / side) for side in (source_lang, lang)}
            for side, directory in out.items():
                trained.export_language(side, tokenizers[side], directory)
            yield step, out


def run_sides(checkpoint_dir: str | os.PathLike, training: Mapping, source_dir: str | os.PathLike,
              init_path: str | os.PathLike, foreign_tokenizer_dir: str | os.PathLike, lang: str,
              source_lang: str = "en") -> Iterator[tuple[int, Mapping[str, str]]]:
    """Exported sides of step 0 and of every kept checkpoint of the run these inputs define.

    ``training`` is the training rule's settings, with its ``objective`` (and ``from_scratch``) entry."""
    settings = dict(training)
    objective = settings.pop("objective", None)
    from_scratch = settings.pop("from_scratch", False)
    steps = run_checkpoints(checkpoint_dir, settings, source_dir, init_path, objective, from_scratch)
    parsed = settings_from(TrainSettings, settings, "training")
    return exported_sides(source_dir, init_path, foreign_tokenizer_dir, lang, steps, source_lang, objective,
                          lora=parsed.lora if parsed.uses_lora else None, seed=parsed.seed)


def checkpoint_curve(evaluate: Callable[[Mapping[str, str]], dict], sides: Iterator[tuple[int, Mapping[str, str]]]
                     ) -> list[dict]:
    """Rows ``{"step": ..., **evaluate(directories)}`` for every exported step."""
    return [{"step": step, **evaluate(directories)} for step, directories in sides]
