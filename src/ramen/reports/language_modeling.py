"""One table and one plot per run for causal-LM variants: bits per byte of held-out foreign and
English text (the retention check), tokens per line, and the zero-shot scores of the same
variants (SIB-200, retrieval, XNLI) where the run asked for them.

Bits per byte is the one language-model measure that compares different tokenizers fairly, so the
untransferred source (its own tokenizer) sits in the same columns as every transferred variant.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ramen.io import atomic_path, write_tsv
from ramen.reports.summary import read_table

SUMMARY_COLUMNS = ("variant", "lang", "init", "updates", "bits_per_byte", "bits_per_byte_other",
                   "bits_per_byte_source", "bits_per_byte_source_other", "tokens_per_line",
                   "tokens_per_line_source", "sib200", "sib200_source", "retrieval", "xnli")


def _variant_lang(path: str | os.PathLike, variants: Sequence[str]) -> tuple[str, str]:
    """(variant, lang) of a result file named ``<variant>_<lang>.tsv``; variant names may hold '-' but no '_'."""
    stem = Path(path).name.removesuffix(".tsv")
    variant, _, lang = stem.rpartition("_")
    if variant not in variants:
        raise ValueError(f"{path}: not a result file of the variants {list(variants)}")
    return variant, lang


def _by_variant_lang(paths: Sequence[str | os.PathLike], variants: Sequence[str]) -> dict[tuple[str, str], list[dict]]:
    return {_variant_lang(path, variants): read_table(path) for path in paths}


def summary_rows(variants: Mapping[str, Mapping], source_lang: str, *,
                 bits_per_byte: Sequence[str | os.PathLike], texts: Mapping[str, str],
                 other_texts: Mapping[str, str] | None = None, sib200: Sequence[str | os.PathLike] = (),
                 retrieval: Sequence[str | os.PathLike] = (), xnli: Sequence[str | os.PathLike] = ()) -> list[dict]:
    """One row per variant and target language.

    ``variants``: name -> {"init": ..., "updates": bilingual updates, None for a model used as
    it is}. ``texts`` / ``other_texts``: language -> file name of its held-out text (the ``text``
    column of a bits-per-byte table) and of its second held-out set (e.g. FLORES). Result files are
    ``<variant>_<lang>.tsv``; scores left empty where a variant was not evaluated on a task.
    """
    other_texts = other_texts or {}
    names = list(variants)
    scores = _by_variant_lang(bits_per_byte, names)
    sib = _by_variant_lang(sib200, names)
    found = _by_variant_lang(retrieval, names)
    nli = _by_variant_lang(xnli, names)

    def bpb(rows, lang, text, column="bits_per_byte"):
        hits = [row[column] for row in rows if row["lang"] == lang and row["text"] == text]
        if len(hits) > 1:
            raise ValueError(f"several bits-per-byte rows of {lang} text {text}")
        return float(hits[0]) if hits else None

    rows = []
    for (variant, lang), lm in scores.items():
        row = {"variant": variant, "lang": lang, "init": variants[variant]["init"],
               "updates": variants[variant].get("updates"),
               "bits_per_byte": bpb(lm, lang, texts[lang]),
               "bits_per_byte_other": bpb(lm, lang, other_texts[lang]) if lang in other_texts else None,
               "bits_per_byte_source": bpb(lm, source_lang, texts[source_lang]) if source_lang in texts else None,
               "bits_per_byte_source_other": (bpb(lm, source_lang, other_texts[source_lang])
                                              if source_lang in other_texts else None),
               "tokens_per_line": bpb(lm, lang, texts[lang], "tokens_per_line"),
               "tokens_per_line_source": (bpb(lm, source_lang, texts[source_lang], "tokens_per_line")
                                          if source_lang in texts else None)}
        if row["bits_per_byte"] is None:
            raise ValueError(f"bits per byte of {variant}_{lang}: no row for {lang} text {texts[lang]}")
        tests = {r["lang"]: float(r["accuracy"]) for r in sib.get((variant, lang), []) if r["split"] == "test"}
        row["sib200"], row["sib200_source"] = tests.get(lang), tests.get(source_lang)
        final = [r for r in found.get((variant, lang), []) if not r.get("step")]
        if final:
            # Both directions' precision@1, averaged: one figure per variant.
            row["retrieval"] = (float(final[0]["source_to_target"]) + float(final[0]["target_to_source"])) / 2
        tested = [float(r["accuracy"]) for r in nli.get((variant, lang), []) if r["split"] == "test"]
        row["xnli"] = tested[0] if tested else None
        rows.append(row)
    order = {name: index for index, name in enumerate(names)}
    return sorted(rows, key=lambda row: (row["lang"], order[row["variant"]]))


def write_summary(rows: Sequence[Mapping], path: str | os.PathLike) -> int:
    return write_tsv(path, rows, SUMMARY_COLUMNS, digits=4)


CONTINUATION_COLUMNS = ("lang", "prompt", "variant", "continuation")


def gather_continuations(paths: Sequence[str | os.PathLike], out: str | os.PathLike) -> int:
    """Every variant's continuations in one table, grouped by language and prompt so that the
    variants' answers to one prompt sit together."""
    rows = [row for path in paths for row in read_table(path)]
    order = {variant: index for index, variant in enumerate(dict.fromkeys(row["variant"] for row in rows))}
    rows.sort(key=lambda row: (row["lang"], row["prompt"], order[row["variant"]]))
    return write_tsv(out, rows, CONTINUATION_COLUMNS)


def initialisation_pairs(rows: Sequence[Mapping]) -> list[tuple[Mapping, Mapping]]:
    """(update 0, trained) rows of the same initialiser and language: the arrows of the plot."""
    pairs = []
    for trained in rows:
        if not trained["updates"]:
            continue
        starts = [row for row in rows if row["lang"] == trained["lang"] and row["init"] == trained["init"]
                  and row["updates"] == 0]
        if len(starts) == 1:
            pairs.append((starts[0], trained))
    return pairs


def plot_summary(rows: Sequence[Mapping], source_lang: str, out_png: str | os.PathLike) -> None:
    """Per target language: bits per byte of foreign text against that of English text, each
    initialiser's update-0 point joined to its trained point; lower-left is better on both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    langs = list(dict.fromkeys(row["lang"] for row in rows))
    fig, axes = plt.subplots(1, len(langs), figsize=(5.2 * len(langs), 4.4), squeeze=False)
    for axis, lang in zip(axes[0], langs):
        here = [row for row in rows if row["lang"] == lang]
        for row in here:
            english = row["bits_per_byte_source"]
            y = english if english is not None else 0.0
            marker = "*" if row["updates"] is None else ("o" if row["updates"] else "s")
            axis.scatter(row["bits_per_byte"], y, marker=marker, s=90 if marker == "*" else 45, zorder=3)
            axis.annotate(row["variant"], (row["bits_per_byte"], y), textcoords="offset points", xytext=(5, 4),
                          fontsize=8)
        for start, trained in initialisation_pairs(here):
            if start["bits_per_byte_source"] is None or trained["bits_per_byte_source"] is None:
                continue
            axis.annotate("", xy=(trained["bits_per_byte"], trained["bits_per_byte_source"]),
                          xytext=(start["bits_per_byte"], start["bits_per_byte_source"]),
                          arrowprops={"arrowstyle": "->", "color": "0.45", "lw": 1.0})
        axis.set_title(f"{lang}: held-out text (square: update 0, circle: trained, star: source)", fontsize=9)
        axis.set_xlabel(f"bits per byte, {lang} (lower is better)")
        axis.set_ylabel(f"bits per byte, {source_lang} (retention; lower is better)")
        axis.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
