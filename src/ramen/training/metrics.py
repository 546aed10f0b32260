"""Metric logs of the training loops: a CSV log (the record) and, when installed, tensorboard."""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ramen.io import atomic_path


def write_metrics(path: str | os.PathLike, rows: Sequence[Mapping]) -> None:
    """Rewrite a metric log with ``rows`` (none: remove it), atomically."""
    path = Path(path)
    if not rows:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[-1]), restval="")
            writer.writeheader()
            writer.writerows({key: row.get(key, "") for key in rows[-1]} for row in rows)


def append_metrics(path: str | os.PathLike, row: Mapping, first: bool) -> None:
    """Add a row to a CSV log (a new log when ``first``); a log with other columns is rewritten."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new_file = first or not path.exists()
    if not new_file:
        with open(path, newline="") as handle:
            header = next(csv.reader(handle), [])
        if header != list(row):  # a log begun by an older version: rewrite it with the new columns
            with open(path, newline="") as handle:
                rows = list(csv.DictReader(handle))
            write_metrics(path, [*rows, row])
            return
    with open(path, "w" if new_file else "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        if new_file:
            writer.writeheader()
        writer.writerow(row)


def tensorboard_writer(directory: Path, start: int):
    """A SummaryWriter under ``directory`` when tensorboard is installed (the CSV log is the record)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    # purge_step hides events a killed run logged after the checkpoint it is resumed from.
    return SummaryWriter(log_dir=str(directory), purge_step=start + 1 if start else None)


def log_scalars(writer, row: Mapping) -> None:
    """Every number of a metric row; ``loss_<stream>`` as ``loss/<stream>`` (an empty cell: not trained yet)."""
    step = int(row["step"])
    for key, value in row.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        writer.add_scalar(f"loss/{key[len('loss_'):]}" if key.startswith("loss_") else key, value, step)
    writer.flush()
