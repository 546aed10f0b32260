"""Scores along bilingual training: export each kept checkpoint and evaluate it (Figure 2).

Checkpoints of a run live under ``<checkpoint_dir>/<variant>_<lang>/<fingerprint>/step-N``
(:mod:`ramen.train`); the fingerprint is recomputed from the same settings and
starting files the training rule used, so only checkpoints of the current run
are read. Step 0 is the initialisation itself, before any update.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from safetensors.torch import load_file, load_model

from ramen.errors import RamenError
from ramen.model import BilingualMaskedLM, load_source_mlm
from ramen.train import TrainSettings, list_checkpoints, run_fingerprint
from ramen.transfer import load_tokenizer
from ramen.workflow import settings_from


def run_checkpoints(checkpoint_dir: str | os.PathLike, settings: Mapping, source_mlm_dir: str | os.PathLike,
                    init_path: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, directory) of every kept checkpoint of the run that these settings and inputs define."""
    fingerprint = run_fingerprint(settings_from(TrainSettings, dict(settings), "training"), [source_mlm_dir, init_path])
    run_dir = Path(checkpoint_dir) / fingerprint
    found = list_checkpoints(run_dir)
    if not found:
        raise RamenError(
            f"{run_dir}: no checkpoints of this training run (set training.checkpoint_every and keep_every, "
            "then retrain)")
    return found


def exported_sides(source_mlm_dir: str | os.PathLike, init_path: str | os.PathLike,
                   foreign_tokenizer_dir: str | os.PathLike, lang: str, steps: list[tuple[int, Path]],
                   source_lang: str = "en") -> Iterator[tuple[int, Mapping[str, str]]]:
    """For step 0 and each checkpoint: (step, {language: exported Hugging Face directory}).

    The directories are temporary; use them before asking for the next step.
    """
    tokenizers = {source_lang: load_tokenizer(source_mlm_dir), lang: load_tokenizer(foreign_tokenizer_dir)}
    initial = load_file(str(init_path))
    for step, path in [(0, None), *steps]:
        model = BilingualMaskedLM(load_source_mlm(source_mlm_dir), source_lang,
                                  {lang: (initial["embeddings"], initial["bias"])})
        if path is not None:
            load_model(model, str(path / "model.safetensors"))
        with tempfile.TemporaryDirectory(prefix="ramen-checkpoint-") as tmp:
            out = {side: str(Path(tmp) / side) for side in (source_lang, lang)}
            for side, directory in out.items():
                model.export_language(side, tokenizers[side], directory)
            yield step, out


def run_sides(checkpoint_dir: str | os.PathLike, training: Mapping, source_mlm_dir: str | os.PathLike,
              init_path: str | os.PathLike, foreign_tokenizer_dir: str | os.PathLike, lang: str,
              source_lang: str = "en") -> Iterator[tuple[int, Mapping[str, str]]]:
    """Exported sides of step 0 and of every kept checkpoint of the run these inputs define."""
    steps = run_checkpoints(checkpoint_dir, training, source_mlm_dir, init_path)
    return exported_sides(source_mlm_dir, init_path, foreign_tokenizer_dir, lang, steps, source_lang)


def checkpoint_curve(evaluate: Callable[[Mapping[str, str]], dict], sides: Iterator[tuple[int, Mapping[str, str]]]
                     ) -> list[dict]:
    """Rows ``{"step": ..., **evaluate(directories)}`` for every exported step."""
    return [{"step": step, **evaluate(directories)} for step, directories in sides]
