"""One fine-tuning shared by every target language, its epoch selected per language.

A model that does not depend on the target language (the untransferred source model, mBERT) is
fine-tuned once per task. Model selection stays what it is for a bilingual model, the epoch with
the best score on the target language's dev set; so the shared run keeps every epoch's model
(``epoch-<n>/`` under its output directory, listed in ``epochs.json``) and each language's
evaluation scores its own dev set on each of them and tests the best.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from ramen.errors import RamenError
from ramen.io import atomic_path

INDEX = "epochs.json"


def epoch_name(epoch: int) -> str:
    return f"epoch-{epoch}"


class EpochKeeper:
    """Collects each epoch's saved model while a run trains; :meth:`publish` writes them all as the
    run's output. They are staged under the run's checkpoint directory when it has one, so a
    resumed run keeps the epochs finished before the kill."""

    def __init__(self, out_dir: str | os.PathLike, run_dir: str | os.PathLike | None):
        out_dir = Path(out_dir)
        self.staging = Path(run_dir) / "epochs" if run_dir else out_dir.parent / f".{out_dir.name}.epochs"
        self.staging.mkdir(parents=True, exist_ok=True)
        self.out_dir = out_dir

    def path(self, epoch: int) -> Path:
        """Where to save the model of ``epoch`` (written atomically by the caller's save)."""
        return self.staging / epoch_name(epoch)

    def saved(self, epoch: int, step: int, train_loss: float) -> None:
        """Record that the model of ``epoch`` is saved, after ``step`` updates."""
        row = {"epoch": epoch, "step": step, "train_loss": train_loss}
        with atomic_path(self.staging / f"{epoch_name(epoch)}.json") as tmp:
            tmp.write_text(json.dumps(row), encoding="utf-8")

    def publish(self, epochs: int, meta: Mapping) -> None:
        """Move the models of epochs 1..``epochs`` into the output directory with an index
        (``meta``, what the run was, and one ``{"epoch", "step", "train_loss"}`` row per epoch)."""
        done = [epoch for epoch in range(1, epochs + 1) if (self.staging / f"{epoch_name(epoch)}.json").is_file()]
        missing = sorted(set(range(1, epochs + 1)) - set(done))
        if missing:
            raise RamenError(f"{self.staging}: no saved model of epoch(s) {missing}; delete the directory and rerun")
        epochs = [json.loads((self.staging / f"{epoch_name(epoch)}.json").read_text(encoding="utf-8"))
                  for epoch in done]
        with atomic_path(self.out_dir) as tmp:
            tmp.mkdir()
            for row in epochs:
                shutil.move(str(self.path(row["epoch"])), str(tmp / epoch_name(row["epoch"])))
            (tmp / INDEX).write_text(json.dumps({**meta, "epochs": epochs}, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(self.staging, ignore_errors=True)


def read_epochs(run_dir: str | os.PathLike) -> dict:
    """The index of a shared run's output: its meta and ``epochs`` rows."""
    path = Path(run_dir) / INDEX
    if not path.is_file():
        raise RamenError(f"{run_dir}: not the output of a shared fine-tuning (no {INDEX})")
    return json.loads(path.read_text(encoding="utf-8"))


def select_epoch(run_dir: str | os.PathLike, score: Callable[[Path], tuple[float, dict]]) -> tuple[Path, list[dict]]:
    """Score every epoch's model of a shared run (``score(model_dir)`` -> (value, dev row)) and
    return the best one's directory and the dev rows, the best marked ``selected``; the earliest
    of equal scores wins, as in a run that selects while it trains."""
    epochs = read_epochs(run_dir)["epochs"]
    if not epochs:
        raise RamenError(f"{run_dir}: the shared run kept no epoch")
    rows, best, best_value = [], 0, None
    for index, epoch in enumerate(epochs):
        value, row = score(Path(run_dir) / epoch_name(epoch["epoch"]))
        rows.append({**row, "epoch": epoch["epoch"], "step": epoch["step"], "train_loss": epoch["train_loss"],
                     "selected": False})
        if best_value is None or value > best_value:
            best, best_value = index, value
    rows[best]["selected"] = True
    return Path(run_dir) / epoch_name(epochs[best]["epoch"]), rows
