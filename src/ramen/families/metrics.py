"""What every family's training stage hands its rule: the metrics kept beside the checkpoints."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ramen.io import atomic_path


def finish_training(rows: list[dict], live_metrics: Path, metrics_out: str | os.PathLike) -> None:
    """Copy the metrics kept beside the checkpoints to the rule's output (a header only for 0 steps)."""
    with atomic_path(metrics_out) as tmp:
        if live_metrics.exists():
            shutil.copyfile(live_metrics, tmp)
        else:
            tmp.write_text("step,lr\n")
