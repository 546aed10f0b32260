"""The paper's Tables 1-4 with this workflow's results beside them, and Figure 2-style curves.

Paper numbers come from ``workflow/resources/paper/tables.tsv`` (table, task, metric,
model, init, lang, value, where). A variant is placed beside a paper row when
the settings match in kind: ``init: parallel`` beside RAMEN-base+BERT with
parallel-data initialisation (Tables 1, 2), ``init: monolingual`` beside it
initialised from fastText vectors (Tables 1-3), ``init: random`` beside the
``rnd`` rows (Table 3), ``init: pretrained`` beside mBERT (Tables 1, 2, 4);
supervised parsing of a transferred variant beside RAMEN-base+BERT of Table 4
(the paper initialised those from fastText vectors). ``init: none`` (the
untransferred source model) has no paper counterpart and is listed alone.
The scale (source model, training updates, data) may still differ: the
report says which config produced the numbers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ramen.io import atomic_path
from ramen.reports.summary import read_table

LANGS = ("fr", "vi", "zh", "ru", "ar", "hi", "avg")
TABLES = {
    1: ("xnli", "Table 1: zero-shot XNLI test accuracy (%)"),
    2: ("ud", "Table 2: zero-shot UD parsing, LAS (%), punctuation excluded"),
    3: ("xnli+ud", "Table 3: random initialisation (rnd) against aligned vectors (vec) and training from scratch (scr)"),
    4: ("ud_supervised", "Table 4: supervised UD parsing, LAS (%)"),
}
# (table, task) -> which paper row a variant of each init kind is compared with: (model, init)
MATCHES = {
    (1, "xnli"): {"parallel": ("RAMEN base + BERT", "parallel"), "monolingual": ("RAMEN base + BERT", "monolingual"),
                  "pretrained": ("mBERT", "-")},
    (2, "ud"): {"parallel": ("RAMEN base + BERT", "parallel"), "monolingual": ("RAMEN base + BERT", "monolingual"),
                "pretrained": ("mBERT", "-")},
    (3, "xnli"): {"random": ("RAMEN base + BERT", "random"), "monolingual": ("RAMEN base + BERT", "monolingual"),
                  "scratch": ("bilingual BERT from scratch", "scratch")},
    (3, "ud"): {"random": ("RAMEN base + BERT", "random"), "monolingual": ("RAMEN base + BERT", "monolingual"),
                "scratch": ("bilingual BERT from scratch", "scratch")},
    (4, "ud_supervised"): {"parallel": ("RAMEN base + BERT", "monolingual"), "pretrained": ("mBERT", "-")},
}
COMPARISON_COLUMNS = ("table", "task", "lang", "variant", "init", "ours", "paper_model", "paper_init", "paper",
                      "difference")


def read_paper_tables(path: str | os.PathLike) -> list[dict]:
    rows = read_table(path)
    for row in rows:
        row["table"] = int(row["table"])
        row["value"] = float(row["value"])
    return rows


def our_scores(result_paths: Sequence[str | os.PathLike]) -> list[dict]:
    """Test scores in percent from results TSVs: XNLI accuracy, UD LAS (zero-shot or supervised).

    Each row: task, variant (as in the file name), lang, value.
    """
    scores = []
    for path in result_paths:
        path = Path(path)
        variant = path.stem.rsplit("_", 1)[0]
        for row in read_table(path):
            if row["split"] != "test":
                continue
            if row["task"] == "xnli":
                task, value = "xnli", row["accuracy"]
            elif row["task"] == "ud":
                task, value = ("ud_supervised" if row["mode"] == "supervised" else "ud"), row["las"]
            else:
                continue
            if value:
                scores.append({"task": task, "variant": variant, "lang": row["lang"], "value": 100 * float(value)})
    return scores


def compare(paper: Sequence[Mapping], ours: Sequence[Mapping], variant_inits: Mapping[str, str]) -> list[dict]:
    """One row per (table, our score) with the matching paper value where the setting matches."""
    lookup = {(r["table"], r["task"], r["model"], r["init"], r["lang"]): r["value"] for r in paper}
    rows = []
    for score in ours:
        init = variant_inits.get(score["variant"], "")
        tables = [(table, by_init) for (table, task), by_init in MATCHES.items() if task == score["task"]]
        matched = [(table, by_init[init]) for table, by_init in tables if init in by_init]
        if not matched:  # no paper counterpart (e.g. the source baseline): listed in the task's first table
            matched = [(tables[0][0], None)]
        for table, match in matched:
            paper_value = lookup.get((table, score["task"], *match, score["lang"])) if match else None
            rows.append({
                "table": table, "task": score["task"], "lang": score["lang"], "variant": score["variant"],
                "init": init, "ours": score["value"], "paper_model": match[0] if match else "",
                "paper_init": match[1] if match else "", "paper": paper_value,
                "difference": score["value"] - paper_value if paper_value is not None else None,
            })
    return sorted(rows, key=lambda r: (r["table"], r["task"], r["variant"], r["lang"]))


def _number(value) -> str:
    return "" if value is None else f"{value:.1f}"


def write_comparison(rows: Sequence[Mapping], path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write("\t".join(COMPARISON_COLUMNS) + "\n")
            for row in rows:
                cells = [_number(row[c]) if c in ("ours", "paper", "difference") else str(row[c])
                         for c in COMPARISON_COLUMNS]
                handle.write("\t".join(cells) + "\n")


def markdown_tables(paper: Sequence[Mapping], comparison: Sequence[Mapping], setting: str,
                    extra_sections: Sequence[tuple[str, str]] = ()) -> str:
    """Tables 1-4 laid out as in the paper (rows: models; columns: languages), ours added below."""
    lines = ["# The paper's tables beside this workflow's results", "",
             f"Our rows: {setting}", "",
             "Paper numbers: workflow/resources/paper/tables.tsv (typed from the paper). `ours` rows compare with the "
             "paper row named in brackets; languages we did not evaluate are left empty.", ""]
    header = "| model | init | " + " | ".join(LANGS) + " |"
    rule = "|---|---|" + "---|" * len(LANGS)
    for table, (_, title) in TABLES.items():
        lines += [f"## {title}", "", header, rule]
        paper_rows: dict[tuple, dict] = {}
        for row in paper:
            if row["table"] == table:
                key = (row["task"], row["model"], row["init"]) if table == 3 else (row["model"], row["init"])
                paper_rows.setdefault(key, {})[row["lang"]] = row["value"]
        for key, values in paper_rows.items():
            name = f"{key[0]}: {key[1]}" if table == 3 else key[0]
            lines.append(f"| {name} | {key[-1]} | " + " | ".join(_number(values.get(lang)) for lang in LANGS) + " |")
        ours: dict[tuple, dict] = {}
        for row in comparison:
            if row["table"] == table:
                against = f" (vs {row['paper_model']}, {row['paper_init']})" if row["paper_model"] else " (no paper row)"
                prefix = f"{row['task']}: " if table == 3 else ""
                ours.setdefault((prefix + f"**ours: {row['variant']}**" + against, row["init"]), {})[row["lang"]] = \
                    row["ours"]
        for (name, init), values in ours.items():
            lines.append(f"| {name} | {init} | " + " | ".join(_number(values.get(lang)) for lang in LANGS) + " |")
        lines.append("")
    for title, body in extra_sections:
        lines += [f"## {title}", "", body, ""]
    return "\n".join(lines)


def plot_curves(curve_paths: Sequence[str | os.PathLike], out_png: str | os.PathLike) -> None:
    """Figure 2-style: retrieval accuracy against bilingual-training updates, one line per run and direction."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(6, 3.8))
    for path in curve_paths:
        rows = read_table(path)
        if not rows:
            continue
        name = Path(path).stem
        steps = [int(row["step"]) for row in rows]
        axis.plot(steps, [100 * float(r["source_to_target"]) for r in rows], marker="o", label=f"{name} en→x")
        axis.plot(steps, [100 * float(r["target_to_source"]) for r in rows], marker="s", linestyle="--",
                  label=f"{name} x→en")
    save_curve_figure(fig, axis, "retrieval accuracy (%)", out_png)


def plot_task_curves(curve_paths: Sequence[str | os.PathLike], column: str, ylabel: str,
                     out_png: str | os.PathLike) -> None:
    """Figure 2: a zero-shot score (``column``, a fraction) against bilingual-training updates, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(6, 3.8))
    for path in curve_paths:
        rows = read_table(path)
        if rows:
            axis.plot([int(row["step"]) for row in rows], [100 * float(row[column]) for row in rows],
                      marker="o", label=Path(path).stem)
    save_curve_figure(fig, axis, ylabel, out_png)


def save_curve_figure(fig, axis, ylabel: str, out_png: str | os.PathLike) -> None:
    """Label a curve against bilingual-training updates and write it atomically as PNG."""
    import matplotlib.pyplot as plt

    axis.set_xlabel("bilingual training updates")
    axis.set_ylabel(ylabel)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
