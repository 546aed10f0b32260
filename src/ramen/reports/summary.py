"""Summary tables and plots for the Snakemake report."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path

from ramen.io import atomic_path

SUMMARY_COLUMNS = ("variant", "lang", "split", "accuracy", "n", "source")


def read_table(path: str | os.PathLike, delimiter: str = "\t") -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter=delimiter))


def summarise_xnli(result_paths: Sequence[str | os.PathLike]) -> list[dict]:
    """Test accuracy (and selected dev accuracy) of every variant, best test accuracy first."""
    rows = []
    for path in result_paths:
        for row in read_table(path):
            if row["split"] == "test" or row.get("selected") == "true":
                rows.append({"variant": row["variant"], "lang": row["lang"], "split": row["split"],
                             "accuracy": float(row["accuracy"]), "n": int(row["n"]), "source": Path(path).name})
    return sorted(rows, key=lambda r: (r["split"] != "test", r["lang"], -r["accuracy"]))


INIT_TIME_COLUMNS = ("job", "init", "vocabulary", "rows", "seconds")
INIT_TIME_HEADERS = ("variant_lang", "init", "vocabulary", "rows initialised", "seconds")


def init_time_rows(stats_paths: Sequence[Path]) -> list[dict]:
    """The initialiser and its wall time (``seconds``) of each init stats file (the init rule's
    ``<variant>_<lang>.json``); the rows it initialised: an extension's new rows, or every foreign row."""
    rows = []
    for path in stats_paths:
        stats = json.loads(Path(path).read_text(encoding="utf-8"))
        seconds = stats.get("seconds")  # stats written before the initialisers were timed have none
        rows.append({"job": Path(path).stem, "init": stats["method"], "vocabulary": stats.get("vocabulary", "replace"),
                     "rows": stats.get("new_rows", stats["rows"]), "seconds": "" if seconds is None else f"{seconds:.1f}"})
    return rows


def write_summary(rows: list[dict], path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=SUMMARY_COLUMNS, delimiter="\t")
            writer.writeheader()
            for row in rows:
                writer.writerow({**row, "accuracy": f"{row['accuracy']:.4f}"})


def plot_mlm_losses(metric_paths: Sequence[str | os.PathLike], out_png: str | os.PathLike) -> None:
    """One panel per training run: masked-LM loss per language against the update step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(Path(path).name.replace(".metrics.csv", ""), read_table(path, delimiter=",")) for path in metric_paths]
    # Runs of no update (a head warm-up of 0 steps, an initialisation alone) have no curve to draw.
    runs = [(name, rows) for name, rows in runs if rows] or runs[:1]
    fig, axes = plt.subplots(1, len(runs), figsize=(4.5 * len(runs), 3.5), squeeze=False)
    for axis, (name, rows) in zip(axes[0], runs):
        steps = [int(row["step"]) for row in rows]
        for column in [c for c in (rows[0] if rows else {}) if c.startswith("loss_")]:
            logged = [(step, float(row[column])) for step, row in zip(steps, rows) if row.get(column)]
            axis.plot([step for step, _ in logged], [value for _, value in logged], label=column[len("loss_"):])
        axis.set_title(name)
        axis.set_xlabel("update")
        axis.set_ylabel("training loss (masked-LM or next-token)")
        axis.grid(alpha=0.3)
        axis.legend()
    fig.tight_layout()
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
