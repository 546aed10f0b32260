"""The decoder page of the results (``docs/results/decoder.md``): causal-LM variants moved to French
and Greek by ``make demo-decoder``, the extension initialisers side by side, the extension's goals,
continuations and time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ramen.reports.page_tables import (Page, Section, init_times, markdown_table, number_cell, percent,
                                       rule_benchmarks, tsv_rows)

_DEMO = "`make demo-decoder` (results/decoder-demo/results/"


def _one_decimal(value: str) -> str:
    return number_cell(value, 1)


def _speed_cell(row: Mapping) -> str:
    """Median bytes per second and the slowest–fastest pass."""
    median, low, high = (row.get(column, "") for column in ("bytes_per_second", "bytes_per_second_min",
                                                             "bytes_per_second_max"))
    if median in ("", None):
        return ""
    spread = f" ({float(low):.1f}–{float(high):.1f})" if low not in ("", None) and high not in ("", None) else ""
    return f"{float(median):.1f}{spread}"


_SUMMARY_COLUMNS = (
    ("variant", "variant", str), ("lang", "lang", str), ("init", "init", str),
    ("vocabulary", "vocabulary", str), ("output_init", "output rows", str), ("updates", "updates", str),
    ("bits_per_byte", "bits/byte X", number_cell), ("bits_per_byte_other", "bits/byte X (other)", number_cell),
    ("bits_per_byte_source", "bits/byte en", number_cell),
    ("bits_per_byte_source_other", "bits/byte en (other)", number_cell),
    ("tokens_per_line", "tokens/line X", _one_decimal), ("tokens_per_line_source", "tokens/line en", _one_decimal),
    ("sib200", "SIB-200 X (%)", percent), ("sib200_source", "SIB-200 en (%)", percent),
    ("retrieval", "retrieval (%)", percent), ("xnli", "XNLI X (%)", percent),
    ("speed", "generation bytes/s X (spread)", None),
    ("bytes_per_second_source", "generation bytes/s en", _one_decimal),
)


def decoder_summary(paths: list[Path]) -> list[str]:
    rows = [{column: _speed_cell(row) if shown is None else shown(row.get(column, ""))
             for column, _, shown in _SUMMARY_COLUMNS} for row in tsv_rows(paths)]
    # A column no variant was measured on (e.g. XNLI when the run did not ask for it) is left out.
    kept = [(column, header) for column, header, _ in _SUMMARY_COLUMNS if any(row[column] != "" for row in rows)]
    return markdown_table([column for column, _ in kept], rows, [header for _, header in kept])


def _sources(rows: Sequence[Mapping]) -> dict[str, Mapping]:
    return {row["lang"]: row for row in rows if row.get("init") == "none"}


# The extension's goals (docs/decoders.md): (label, column, how the variant's value compares with the
# source's, the bound, whether the ratio must be at most or at least the bound), after training and
# at update 0 (the initialisation alone).
TRAINED_GOALS = (
    ("bits/byte X (other) ≤ 0.95× source", "bits_per_byte_other", "ratio", 0.95, "at most"),
    ("bits/byte X ≤ 0.6× source", "bits_per_byte", "ratio", 0.6, "at most"),
    ("bits/byte en ≤ +1 %", "bits_per_byte_source", "ratio", 1.01, "at most"),
    ("bits/byte en (other) ≤ +1 %", "bits_per_byte_source_other", "ratio", 1.01, "at most"),
    ("bytes/token X ≥ 1.5× source", "tokens_per_line", "inverse", 1.5, "at least"),
    ("generation bytes/s X ≥ 1.3× source", "bytes_per_second", "ratio", 1.3, "at least"),
)
UPDATE_0_GOALS = (
    ("bits/byte X (other) ≤ 1.10× source", "bits_per_byte_other", "ratio", 1.10, "at most"),
    ("bits/byte en ≤ +0.5 %", "bits_per_byte_source", "ratio", 1.005, "at most"),
    ("bits/byte en (other) ≤ +0.5 %", "bits_per_byte_source_other", "ratio", 1.005, "at most"),
)


def _goal_cell(value: str, reference: str, how: str, bound: float, side: str) -> str:
    if value in ("", None) or reference in ("", None) or not float(reference) or not float(value):
        return ""
    ratio = float(value) / float(reference) if how == "ratio" else float(reference) / float(value)
    met = ratio <= bound if side == "at most" else ratio >= bound
    return f"{ratio:.2f}× {'met' if met else 'not met'}"


def _goals(paths: list[Path], goals, trained: bool) -> list[str]:
    rows = tsv_rows(paths)
    sources = _sources(rows)
    if not sources:
        return ["No untransferred source in this run: the goals compare every variant with it.", ""]
    goals = [goal for goal in goals if any(row.get(goal[1], "") != "" for row in rows)]
    table = []
    for row in rows:
        source = sources.get(row["lang"])
        if source is None or row is source or (row.get("updates") in ("", "0", None)) == trained:
            continue
        cells = {"variant": row["variant"], "lang": row["lang"], "vocabulary": row.get("vocabulary", "")}
        for label, column, how, bound, side in goals:
            cells[label] = _goal_cell(row.get(column, ""), source.get(column, ""), how, bound, side)
        table.append(cells)
    return markdown_table(["variant", "lang", "vocabulary", *(goal[0] for goal in goals)], table)


def extension_goals(paths: list[Path]) -> list[str]:
    """Each trained variant against its language's source, on the extension's goals: the ratio and whether it is met."""
    return _goals(paths, TRAINED_GOALS, trained=True)


def update_0_goals(paths: list[Path]) -> list[str]:
    """Each variant at update 0 against its language's source, on the goals of the initialisation alone."""
    return _goals(paths, UPDATE_0_GOALS, trained=False)


def _times(value) -> str:
    return "" if value in ("", None) else f"{float(value):.2f}×"


_CHOICE_COLUMNS = (
    ("lang", "lang"), ("init", "init"), ("output_init", "output rows"),
    ("u0_bits_per_byte", "u0: X"), ("u0_bits_per_byte_other", "u0: X (other)"),
    ("u0_bits_per_byte_source", "u0: en"), ("u0_bits_per_byte_source_other", "u0: en (other)"),
    ("bits_per_byte", "trained: X"), ("bits_per_byte_other", "trained: X (other)"),
    ("bits_per_byte_source", "trained: en"), ("bits_per_byte_source_other", "trained: en (other)"),
    ("tokens", "tokens/line X (source)"), ("speed", "generation X ×source (spread)"), ("u0_speedup", "u0 generation"),
)


def _choice_cells(row: Mapping) -> dict:
    cells = {column: _times(row.get(column)) for column, _ in _CHOICE_COLUMNS if "bits_per_byte" in column
             or column == "u0_speedup"}
    cells.update(lang=row["lang"], init=row["init"], output_init=row.get("output_init", ""))
    if row.get("tokens_per_line") not in ("", None):
        cells["tokens"] = f"{float(row['tokens_per_line']):.1f} ({float(row['tokens_per_line_source_model']):.1f})"
    if row.get("speedup") not in ("", None):
        spread = (f" ({float(row['speedup_min']):.2f}–{float(row['speedup_max']):.2f})"
                  if row.get("speedup_min") not in ("", None) else "")
        cells["speed"] = f"{float(row['speedup']):.2f}×{spread}"
    return cells


def _ratio_text(row: Mapping, column: str) -> str:
    value = row.get(column)
    return "not measured" if value in ("", None) else f"{float(value):.2f}×"


def choice_verdicts(rows: Sequence[Mapping]) -> list[str]:
    """Per language: the best extension initialiser after training, and whether RAMEN's combination
    (``parallel_fvt``) beats the subword mean (``fvt``) it builds on, said plainly either way."""
    lines = []
    for lang in dict.fromkeys(row["lang"] for row in rows):
        here = [row for row in rows if row["lang"] == lang]
        trained = [row for row in here if row.get("bits_per_byte_other") not in ("", None)]
        if trained:
            best = min(trained, key=lambda row: float(row["bits_per_byte_other"]))
            lines.append(f"- **{lang}**: best after training on the second held-out set: `{best['init']}` "
                         f"(output rows `{best.get('output_init', '')}`), at {_ratio_text(best, 'bits_per_byte_other')} "
                         f"the source's bits per byte there, {_ratio_text(best, 'bits_per_byte')} in-domain and "
                         f"{_ratio_text(best, 'bits_per_byte_source_other')} on English (other).")
        mean = [row for row in trained if row["init"] == "fvt"]
        combined = [row for row in trained if row["init"] == "parallel_fvt"]
        if mean and combined:
            fvt = min(mean, key=lambda row: float(row["bits_per_byte_other"]))
            ours = min(combined, key=lambda row: float(row["bits_per_byte_other"]))
            wins = [label for label, column in (("the second held-out set", "bits_per_byte_other"),
                                                ("in-domain", "bits_per_byte"))
                    if float(ours[column]) < float(fvt[column])]
            verdict = (f"beats the subword mean on {' and '.join(wins)}" if wins
                       else "does **not** beat the subword mean on either held-out set")
            lines.append(f"- **{lang}**: RAMEN's combination (`parallel_fvt`) {verdict}: "
                         f"{_ratio_text(ours, 'bits_per_byte_other')} / {_ratio_text(ours, 'bits_per_byte')} "
                         f"against `fvt`'s {_ratio_text(fvt, 'bits_per_byte_other')} / "
                         f"{_ratio_text(fvt, 'bits_per_byte')} (second held-out set / in-domain).")
    return lines + [""] if lines else []


def extension_initialisers(paths: list[Path]) -> list[str]:
    rows = tsv_rows(paths)
    return choice_verdicts(rows) + markdown_table([column for column, _ in _CHOICE_COLUMNS],
                                                  [_choice_cells(row) for row in rows],
                                                  [header for _, header in _CHOICE_COLUMNS])


def continuations(paths: list[Path]) -> list[str]:
    return markdown_table(("lang", "prompt", "variant", "continuation"), tsv_rows(paths))


def decoder_page() -> Page:
    summary = f"{_DEMO}report/language_modeling.tsv)"
    return Page("decoder", "Decoder transfer", "SmolLM2-135M, a causal LM, moved to French and to Greek on the "
                "bundled data (`make demo-decoder`, `config/demo-decoder.yaml`, docs/decoders.md): each extension "
                "initialiser at update 0 (the initialisation alone) and the leading two after the same bilingual "
                "next-token training, extending the source's vocabulary (`-ext`: one model for both languages), "
                "beside the untransferred source with its own tokenizer. Bits per byte compares tokenizers fairly; "
                "lower is better. `X` is the target language; French `X` is Multi30k captions (the training "
                "domain) and `(other)` FLORES sentences from SIB-200's test split; Greek trains on SIB-200's 701 "
                "training sentences, so its `X` is SIB-200's dev split and `(other)` its test split, both FLORES.", [
                    Section("Which initialiser should I use?", ["report/extension_initialisers.tsv"],
                            f"{_DEMO}report/extension_initialisers.tsv)", extension_initialisers, root="decoder",
                            note="Ratios to the untransferred source's bits per byte on the same text (below 1: "
                                 "better), at update 0 (`u0`) and after training; best first. Generation: greedy "
                                 "bytes per second over the source's median, with the variant's slowest and fastest "
                                 "pass (`tasks.language_modeling.settings.speed_repeats` passes over "
                                 "`speed_prompts` held-out lines)."),
                    Section("Goals of the extension, after training", ["report/language_modeling.tsv"], summary,
                            extension_goals, root="decoder",
                            note="Each trained variant against its language's untransferred source (ratio of the "
                                 "variant's figure to the source's; bytes per token: the source's tokens per line "
                                 "over the variant's, on the same lines)."),
                    Section("Goals of the initialisation (update 0)", ["report/language_modeling.tsv"], summary,
                            update_0_goals, root="decoder"),
                    Section("Bits per byte and zero-shot scores", ["report/language_modeling.tsv"], summary,
                            decoder_summary, root="decoder",
                            note="`en` columns: English text read by the English side, the retention check. "
                                 "Generation: median bytes per second (slowest–fastest pass)."),
                    Section("Foreign against English bits per byte", ["report/language_modeling.png"],
                            f"{_DEMO}report/language_modeling.png)", None, root="decoder"),
                    Section("Training loss", ["report/mlm_loss.png"], f"{_DEMO}report/mlm_loss.png)", None,
                            root="decoder"),
                    Section("Greedy continuations", ["report/continuations.tsv"], f"{_DEMO}report/continuations.tsv)",
                            continuations, root="decoder"),
                    Section("Time per rule", ["*/*.tsv"], f"{_DEMO}benchmarks/)", rule_benchmarks,
                            root="decoder_benchmarks",
                            note="Sums over the jobs of each rule; jobs that ran side by side share the cores."),
                    Section("Time per initialiser", ["init/*.json"], f"{_DEMO}init/<variant>_<lang>.json)",
                            init_times, root="decoder",
                            note="Each variant's initialiser alone (`seconds` of its init stats), summed over "
                                 "resumed runs."),
                ])
