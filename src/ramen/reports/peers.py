"""The peer comparison: every initialiser's figures in one table, before and after bilingual training.

One row per method: the init report's figures (coverage, mean support, lexicon
induction P@1/P@5 of the initial table), zero-shot XNLI accuracy and UD LAS of the
model at update 0 (the initialisation alone: a variant trained for 0 steps) and
after bilingual training, and sentence retrieval after training.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ramen.io import atomic_path, write_tsv
from ramen.reports.summary import read_table

COLUMNS = ("method", "init", "coverage", "support_size_mean", "p@1", "p@5", "xnli_update0", "xnli_trained",
           "las_update0", "las_trained", "retrieval_update0", "retrieval_trained")


def _test_value(path: str | os.PathLike, column: str) -> float | None:
    """The test-split value of ``column`` in a results TSV (percent); None when it has none."""
    for row in read_table(path):
        if row.get("split", "test") == "test" and row.get(column):
            return 100 * float(row[column])
    return None


def _result_path(paths: Sequence[str | os.PathLike], variant: str, lang: str) -> str | os.PathLike:
    name = f"{variant}_{lang}.tsv"
    for path in paths:
        if Path(path).name == name:
            return path
    raise ValueError(f"no result {name} among the inputs of the peer comparison")


def peer_rows(pairs: Mapping[str, str], lang: str, init_table: str | os.PathLike, *, xnli: Sequence,
              ud: Sequence, retrieval: Sequence) -> list[dict]:
    """One row per ``trained variant -> its update-0 variant`` entry of ``pairs``, in that order."""
    init = {row["variant"]: row for row in read_table(init_table)}
    rows = []
    for trained, untrained in pairs.items():
        if trained not in init:
            raise ValueError(f"{init_table} has no row for '{trained}'; add it to init_report.variants")
        figures = init[trained]

        def number(key):
            value = figures.get(key)
            return None if value in (None, "", "NA") else float(value)

        rows.append({
            "method": trained, "init": figures["init"], "coverage": number("coverage"),
            "support_size_mean": number("support_size_mean"), "p@1": number("p@1"), "p@5": number("p@5"),
            "xnli_update0": _test_value(_result_path(xnli, untrained, lang), "accuracy"),
            "xnli_trained": _test_value(_result_path(xnli, trained, lang), "accuracy"),
            "las_update0": _test_value(_result_path(ud, untrained, lang), "las"),
            "las_trained": _test_value(_result_path(ud, trained, lang), "las"),
            "retrieval_update0": _test_value(_result_path(retrieval, untrained, lang), "source_to_target"),
            "retrieval_trained": _test_value(_result_path(retrieval, trained, lang), "source_to_target"),
        })
    return rows


def write_peer_table(rows: Sequence[Mapping], path: str | os.PathLike) -> None:
    write_tsv(path, rows, COLUMNS, missing="NA", digits=4)


def plot_peers(rows: Sequence[Mapping], path: str | os.PathLike, title: str) -> None:
    """Three panels (XNLI, LAS, retrieval), a pair of bars per method: update 0 and trained."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    panels = (("xnli", "zero-shot XNLI accuracy (%)"), ("las", "zero-shot UD LAS (%)"),
              ("retrieval", "retrieval en→x P@1 (%)"))
    names = [row["method"] for row in rows]
    x = np.arange(len(rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6))
    for ax, (key, label) in zip(axes, panels):
        for offset, stage, colour in ((-0.2, "update0", "tab:gray"), (0.2, "trained", "tab:blue")):
            values = [row[f"{key}_{stage}"] for row in rows]
            ax.bar(x + offset, [v or 0.0 for v in values], width=0.4, color=colour,
                   label="update 0" if stage == "update0" else "trained")
            for xi, value in zip(x + offset, values):
                ax.annotate("NA" if value is None else f"{value:.1f}", (xi, value or 0.0), ha="center",
                            va="bottom", fontsize=7)
        ax.set_xticks(x, names, rotation=30)
        ax.set_title(label, fontsize=10)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
