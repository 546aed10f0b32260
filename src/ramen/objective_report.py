"""The objective x init ablation: zero-shot XNLI accuracy and UD LAS of each variant."""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping, Sequence

from ramen.io import atomic_path
from ramen.paper_report import our_scores

ABLATION_COLUMNS = ("objective", "init", "variant", "lang", "xnli_accuracy", "ud_las")
OBJECTIVE_ORDER = ("mlm", "tlm", "tlm-da", "rtd", "trtd")


def ablation_table(variants: Mapping[str, Mapping[str, str]], xnli_paths: Sequence[str | os.PathLike],
                   ud_paths: Sequence[str | os.PathLike]) -> list[dict]:
    """One row per variant and language: its objective, init, XNLI test accuracy and UD test LAS (%).

    ``variants`` maps a variant to {"objective": ..., "init": ...}; a missing score is left empty.
    """
    scores = {(s["task"], s["variant"], s["lang"]): s["value"] for s in our_scores([*xnli_paths, *ud_paths])}
    langs = sorted({lang for _, _, lang in scores})
    rows = []
    for variant, kind in variants.items():
        for lang in langs:
            xnli, las = scores.get(("xnli", variant, lang)), scores.get(("ud", variant, lang))
            if xnli is None and las is None:
                continue
            rows.append({"objective": kind["objective"], "init": kind["init"], "variant": variant, "lang": lang,
                         "xnli_accuracy": "" if xnli is None else f"{xnli:.1f}",
                         "ud_las": "" if las is None else f"{las:.1f}"})
    order = {name: index for index, name in enumerate(OBJECTIVE_ORDER)}
    # an objective with options ("trtd+grpb") right after the plain one
    return sorted(rows, key=lambda r: (r["lang"], r["init"], order.get(r["objective"].split("+")[0], len(order)),
                                       r["objective"], r["variant"]))


def write_ablation(rows: Sequence[Mapping], path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=ABLATION_COLUMNS, delimiter="\t")
            writer.writeheader()
            writer.writerows(rows)
