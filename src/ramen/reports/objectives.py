"""The objective x init ablation: a grid of zero-shot XNLI accuracy and UD LAS, objectives as rows
and initialisers as columns."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ramen.errors import ConfigError
from ramen.io import atomic_path
from ramen.objectives import OBJECTIVES
from ramen.reports.paper import our_scores

OBJECTIVE_ORDER = tuple(OBJECTIVES)  # the registry's order
INIT_ORDER = ("parallel", "monolingual", "char2subword", "random")
SCORES = (("xnli", "xnli"), ("ud", "las"))  # (task, column suffix)


def init_columns(init: str) -> list[str]:
    return [f"{init}_{suffix}" for _, suffix in SCORES]


def ablation_table(variants: Mapping[str, Mapping[str, str]], xnli_paths: Sequence[str | os.PathLike],
                   ud_paths: Sequence[str | os.PathLike]) -> tuple[list[str], list[dict]]:
    """The objective x init grid: (columns, rows), one row per objective and language, and per
    initialiser its variant's XNLI test accuracy and UD test LAS (%).

    ``variants`` maps a variant to {"row": its objective label, "init": ...}; a cell no variant
    fills, or a score a result file lacks, is left empty. Two variants in one cell are an error:
    the grid could show only one of them.
    """
    scores = {(s["task"], s["variant"], s["lang"]): s["value"] for s in our_scores([*xnli_paths, *ud_paths])}
    langs = sorted({lang for _, _, lang in scores})
    inits = sorted({kind["init"] for kind in variants.values()},
                   key=lambda init: (INIT_ORDER.index(init) if init in INIT_ORDER else len(INIT_ORDER), init))
    cells: dict[tuple[str, str, str], str] = {}
    for variant, kind in variants.items():
        for lang in langs:
            cell = (kind["row"], lang, kind["init"])
            if cell in cells:
                raise ConfigError("targets.ablation", f"variants '{cells[cell]}' and '{variant}' both train "
                                  f"objective '{cell[0]}' from init '{cell[2]}'",
                                  "list only one of them in targets.ablation")
            cells[cell] = variant
    labels = {kind["row"] for kind in variants.values()}
    order = sorted(labels, key=lambda label: (objective_rank(label), label))
    rows = []
    for lang in langs:
        for label in order:
            row = {"objective": label, "lang": lang}
            for init in inits:
                variant = cells.get((label, lang, init))
                for (task, suffix), column in zip(SCORES, init_columns(init)):
                    value = scores.get((task, variant, lang)) if variant else None
                    row[column] = "" if value is None else f"{value:.1f}"
            row["variants"] = " ".join(cells[(label, lang, init)] for init in inits if (label, lang, init) in cells)
            rows.append(row)
    return ["objective", "lang", *(c for init in inits for c in init_columns(init)), "variants"], rows


def row_label(objective: str, gated: bool, focal: bool) -> str:
    """A variant's row in the grid: its objective, ``+grpb`` with the gated relative position bias,
    `` + focal`` when it trains with focal loss."""
    return objective + ("+grpb" if gated else "") + (" + focal" if focal else "")


def objective_rank(label: str) -> int:
    """Rows follow OBJECTIVE_ORDER by the objective a label starts with (``tlm-da + focal``: tlm-da;
    ``trtd+grpb``: trtd, after the plain one)."""
    name = label.split(" ")[0].split("+")[0]
    return OBJECTIVE_ORDER.index(name) if name in OBJECTIVE_ORDER else len(OBJECTIVE_ORDER)


def plot_ablation(columns: Sequence[str], rows: Sequence[Mapping], out_png: str | os.PathLike) -> None:
    """XNLI accuracy and UD LAS side by side: per objective (and language) one bar per initialiser;
    an empty cell draws no bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    inits = [column[: -len("_xnli")] for column in columns if column.endswith("_xnli")]
    langs = {row["lang"] for row in rows}
    labels = [row["objective"] if len(langs) == 1 else f"{row['objective']} ({row['lang']})" for row in rows]
    positions = np.arange(len(rows))
    width = 0.8 / max(len(inits), 1)
    fig, axes = plt.subplots(1, len(SCORES), figsize=(4 + 1.2 * len(rows), 3.8), squeeze=False)
    for axis, (task, suffix), ylabel in zip(axes[0], SCORES, ("XNLI test accuracy (%)", "UD test LAS (%)")):
        for index, init in enumerate(inits):
            values = [float(row[f"{init}_{suffix}"]) if row[f"{init}_{suffix}"] else np.nan for row in rows]
            axis.bar(positions + (index - (len(inits) - 1) / 2) * width, values, width, label=f"init {init}")
        axis.set_xticks(positions, labels, rotation=30, ha="right", fontsize=8)
        axis.set_ylabel(ylabel)
        axis.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
