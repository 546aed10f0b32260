"""Pieces every results page is made of: its sections, markdown tables and cells, and the tables
several pages share (Snakemake's per-rule benchmark files, the initialisers' times)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ramen.reports.summary import INIT_TIME_COLUMNS, INIT_TIME_HEADERS, init_time_rows, read_table


@dataclass
class Section:
    """One table of a page: where its inputs are (globs under one of the roots of write_pages), what
    produces them, and how its rows are made from them."""

    title: str
    patterns: Sequence[str]
    produced_by: str
    # None: the inputs are images, copied into a folder beside the page (named like it) and shown.
    render: Callable[[list[Path]], list[str]] | None
    root: str = "results"
    note: str = ""


@dataclass
class Page:
    name: str
    title: str
    intro: str
    sections: list[Section] = field(default_factory=list)


def markdown_table(columns: Sequence[str], rows: Sequence[Mapping], headers: Sequence[str] | None = None) -> list[str]:
    headers = list(headers or columns)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(column, "")).replace("|", "\\|") for column in columns) + " |")
    return lines


def percent(value: str) -> str:
    """A fraction cell as a percentage with one decimal; empty stays empty."""
    return "" if value in ("", None) else f"{100 * float(value):.1f}"


def number_cell(value: str, digits: int = 2) -> str:
    return "" if value in ("", None) else f"{float(value):.{digits}f}"


def tsv_rows(paths: Sequence[Path]) -> list[dict]:
    return [row for path in paths for row in read_table(path)]


def number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):  # Snakemake writes NA where it could not measure
        return 0.0


_RULE_COLUMNS = ("rule", "jobs", "s", "s_max", "cpu_time", "max_rss")


def rule_benchmarks(paths: list[Path]) -> list[str]:
    """Snakemake's per-job benchmark files summed per rule: wall and CPU seconds, peak RSS (MB)."""
    per_rule: dict[str, dict] = {}
    for path in paths:
        for row in read_table(path):
            rule = per_rule.setdefault(path.parent.name, {"rule": path.parent.name, "jobs": 0, "s": 0.0,
                                                          "s_max": 0.0, "cpu_time": 0.0, "max_rss": 0.0})
            rule["jobs"] += 1
            seconds = number(row.get("s"))
            rule["s"] += seconds
            rule["s_max"] = max(rule["s_max"], seconds)
            rule["cpu_time"] += number(row.get("cpu_time"))
            rule["max_rss"] = max(rule["max_rss"], number(row.get("max_rss")))
    rows = [{**r, **{c: f"{r[c]:.1f}" for c in ("s", "s_max", "cpu_time", "max_rss")}}
            for r in sorted(per_rule.values(), key=lambda r: -r["s"])]
    return markdown_table(_RULE_COLUMNS, rows, ["rule", "jobs", "wall s (sum)", "wall s (longest job)",
                                                "CPU s (sum)", "peak RSS MB"])


def init_times(paths: list[Path]) -> list[str]:
    return markdown_table(INIT_TIME_COLUMNS, init_time_rows(paths), INIT_TIME_HEADERS)
