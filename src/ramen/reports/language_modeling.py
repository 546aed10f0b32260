"""One table and one plot per run for causal-LM variants: bits per byte of held-out foreign and
English text (the retention check), tokens per line, and the zero-shot scores of the same
variants (SIB-200, retrieval, XNLI) where the run asked for them, then generation speed: bytes
of greedily decoded text per second, foreign and English, and each as a ratio to the source
model's on the same language (``speedup``), where the source variant is in the run.

Bits per byte is the one language-model measure that compares different tokenizers fairly, so the
untransferred source (its own tokenizer) sits in the same columns as every transferred variant.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ramen.io import atomic_path, write_tsv
from ramen.reports.summary import read_table

SUMMARY_COLUMNS = ("variant", "lang", "init", "vocabulary", "output_init", "updates", "bits_per_byte",
                   "bits_per_byte_other", "bits_per_byte_source", "bits_per_byte_source_other", "tokens_per_line",
                   "tokens_per_line_source", "sib200", "sib200_source", "retrieval", "xnli",
                   "bytes_per_second", "bytes_per_second_min", "bytes_per_second_max", "bytes_per_second_source",
                   "speedup", "speedup_source")


def _variant_lang(path: str | os.PathLike, variants: Sequence[str], suffix: str = ".tsv") -> tuple[str, str]:
    """(variant, lang) of a result file named ``<variant>_<lang><suffix>``; variant names may hold '-' but no '_'."""
    stem = Path(path).name.removesuffix(suffix)
    variant, _, lang = stem.rpartition("_")
    if variant not in variants:
        raise ValueError(f"{path}: not a result file of the variants {list(variants)}")
    return variant, lang


def _by_variant_lang(paths: Sequence[str | os.PathLike], variants: Sequence[str],
                     suffix: str = ".tsv") -> dict[tuple[str, str], list[dict]]:
    return {_variant_lang(path, variants, suffix): read_table(path) for path in paths}


def _bytes_per_second(rows: Sequence[Mapping], lang: str, column: str = "bytes_per_second") -> float | None:
    """Bytes per second of greedy decoding of ``lang`` in one speed file (None: not measured); ``column``
    ``bytes_per_second_min`` / ``_max``: the slowest / fastest pass (a file without them: the one pass)."""
    hits = [float(row.get(column) or row["bytes_per_second"]) for row in rows if row["lang"] == lang]
    if len(hits) > 1:
        raise ValueError(f"several speed rows of {lang}")
    return hits[0] if hits else None


def _ratio(value: float | None, reference: float | None) -> float | None:
    return value / reference if value is not None and reference else None


def summary_rows(variants: Mapping[str, Mapping], source_lang: str, *,
                 bits_per_byte: Sequence[str | os.PathLike], texts: Mapping[str, str],
                 other_texts: Mapping[str, str] | None = None, sib200: Sequence[str | os.PathLike] = (),
                 retrieval: Sequence[str | os.PathLike] = (), xnli: Sequence[str | os.PathLike] = (),
                 speed: Sequence[str | os.PathLike] = ()) -> list[dict]:
    """One row per variant and target language.

    ``variants``: name -> {"init": ..., "updates": bilingual updates, None for a model used as
    it is, "source": true for the source model itself, "vocabulary": replace or extend (absent:
    the source's own), "output_init": the rule of an extension's new output rows (absent: none)}. ``texts`` / ``other_texts``: language ->
    file name of its held-out text (the ``text`` column of a bits-per-byte table) and of its second
    held-out set (e.g. FLORES). Result files are ``<variant>_<lang>.tsv``, speed files
    ``<variant>_<lang>.speed.tsv``; scores left empty where a variant was not evaluated on a task.
    ``speedup`` (``speedup_source``): bytes per second of the target language's (English) text over
    the source variant's in the job of the same target language; empty without a source variant.
    """
    other_texts = other_texts or {}
    names = list(variants)
    scores = _by_variant_lang(bits_per_byte, names)
    sib = _by_variant_lang(sib200, names)
    found = _by_variant_lang(retrieval, names)
    nli = _by_variant_lang(xnli, names)
    timed = _by_variant_lang(speed, names, ".speed.tsv")
    sources = [name for name in names if variants[name].get("source")]
    if len(sources) > 1:
        raise ValueError(f"several source variants: {sources}")

    def bpb(rows, lang, text, column="bits_per_byte"):
        hits = [row[column] for row in rows if row["lang"] == lang and row["text"] == text]
        if len(hits) > 1:
            raise ValueError(f"several bits-per-byte rows of {lang} text {text}")
        return float(hits[0]) if hits else None

    rows = []
    for (variant, lang), lm in scores.items():
        row = {"variant": variant, "lang": lang, "init": variants[variant]["init"],
               "vocabulary": variants[variant].get("vocabulary"), "output_init": variants[variant].get("output_init"),
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
        fast = timed.get((variant, lang), [])
        row["bytes_per_second"] = _bytes_per_second(fast, lang)
        row["bytes_per_second_min"] = _bytes_per_second(fast, lang, "bytes_per_second_min")
        row["bytes_per_second_max"] = _bytes_per_second(fast, lang, "bytes_per_second_max")
        row["bytes_per_second_source"] = _bytes_per_second(fast, source_lang)
        reference = timed.get((sources[0], lang), []) if sources else []
        row["speedup"] = _ratio(row["bytes_per_second"], _bytes_per_second(reference, lang))
        row["speedup_source"] = _ratio(row["bytes_per_second_source"], _bytes_per_second(reference, source_lang))
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


def _same_start(row: Mapping, other: Mapping) -> bool:
    """Whether two rows start from the same initialisation: language, initialiser, vocabulary and
    output-row rule (two variants may differ in the output rule alone)."""
    return all(row.get(key) == other.get(key) for key in ("lang", "init", "vocabulary", "output_init"))


def initialisation_pairs(rows: Sequence[Mapping]) -> list[tuple[Mapping, Mapping]]:
    """(update 0, trained) rows of the same initialisation (``_same_start``): the arrows of the plot."""
    pairs = []
    for trained in rows:
        if not trained["updates"]:
            continue
        starts = [row for row in rows if _same_start(row, trained) and row["updates"] == 0]
        if len(starts) == 1:
            pairs.append((starts[0], trained))
    return pairs


# "Which initialiser should I use?": every extension initialiser of the run (with its output-row
# rule), at update 0 and trained, each figure a ratio to the untransferred source's on the same text.
CHOICE_COLUMNS = ("lang", "init", "output_init", "variant", "variant_u0",
                  "u0_bits_per_byte", "u0_bits_per_byte_other", "u0_bits_per_byte_source",
                  "u0_bits_per_byte_source_other",
                  "bits_per_byte", "bits_per_byte_other", "bits_per_byte_source", "bits_per_byte_source_other",
                  "tokens_per_line", "tokens_per_line_source_model", "speedup", "speedup_min", "speedup_max",
                  "u0_speedup")
_RATIOS = ("bits_per_byte", "bits_per_byte_other", "bits_per_byte_source", "bits_per_byte_source_other")


def initialiser_rows(rows: Sequence[Mapping]) -> list[dict]:
    """One row per language and extension initialisation (initialiser and output-row rule) of the
    summary ``rows``: bits per byte of the foreign and English text of both held-out sets at update 0
    (``u0_``) and after training, each over the source's; tokens per foreign line (and the source's);
    generation speed over the source's median (``speedup``; ``_min`` / ``_max``: the variant's slowest
    and fastest pass over the source's median). Best first: the trained second held-out set (FLORES),
    then update 0's; languages without a source row are left out (nothing to compare with)."""
    def ratio(value, reference):
        return _ratio(None if value is None else float(value), None if reference is None else float(reference))

    table = []
    for lang in dict.fromkeys(row["lang"] for row in rows):
        here = [row for row in rows if row["lang"] == lang]
        source = next((row for row in here if row.get("updates") is None and row.get("vocabulary") is None
                       and row.get("init") == "none"), None)
        if source is None:
            continue
        extended = [row for row in here if row.get("vocabulary") == "extend"]
        starts = {}
        for row in extended:
            key = (row["init"], row.get("output_init"))
            entry = starts.setdefault(key, {"lang": lang, "init": row["init"], "output_init": row.get("output_init")})
            which = "u0" if not row["updates"] else "trained"
            if which in entry:
                raise ValueError(f"{lang}: two {which} variants of init {key[0]}, output_init {key[1]}: "
                                 f"{entry[which]['variant']} and {row['variant']}")
            entry[which] = row
        for entry in starts.values():
            start, trained = entry.pop("u0", None), entry.pop("trained", None)
            either = trained or start
            out = {**entry, "variant": trained["variant"] if trained else None,
                   "variant_u0": start["variant"] if start else None,
                   "tokens_per_line": either["tokens_per_line"],
                   "tokens_per_line_source_model": source["tokens_per_line"]}
            for column in _RATIOS:
                out[f"u0_{column}"] = ratio(start[column], source[column]) if start else None
                out[column] = ratio(trained[column], source[column]) if trained else None
            reference = source.get("bytes_per_second")
            for column, measured in (("speedup", "bytes_per_second"), ("speedup_min", "bytes_per_second_min"),
                                     ("speedup_max", "bytes_per_second_max")):
                out[column] = ratio(trained.get(measured), reference) if trained else None
            out["u0_speedup"] = ratio(start.get("bytes_per_second"), reference) if start else None
            table.append(out)

    def rank(row):
        trained, start = row["bits_per_byte_other"], row["u0_bits_per_byte_other"]
        return (row["lang"], trained is None, trained or 0.0, start is None, start or 0.0)

    return sorted(table, key=rank)


def write_initialiser_table(rows: Sequence[Mapping], path: str | os.PathLike) -> int:
    return write_tsv(path, rows, CHOICE_COLUMNS, digits=4)


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
            # extended vocabularies filled orange, replaced ones blue, the source black
            colour = {"extend": "tab:orange", "replace": "tab:blue"}.get(row.get("vocabulary"), "black")
            axis.scatter(row["bits_per_byte"], y, marker=marker, s=90 if marker == "*" else 45, zorder=3, color=colour)
            axis.annotate(row["variant"], (row["bits_per_byte"], y), textcoords="offset points", xytext=(5, 4),
                          fontsize=8)
        for start, trained in initialisation_pairs(here):
            if start["bits_per_byte_source"] is None or trained["bits_per_byte_source"] is None:
                continue
            axis.annotate("", xy=(trained["bits_per_byte"], trained["bits_per_byte_source"]),
                          xytext=(start["bits_per_byte"], start["bits_per_byte_source"]),
                          arrowprops={"arrowstyle": "->", "color": "0.45", "lw": 1.0})
        axis.set_title(f"{lang}: held-out text (square: update 0, circle: trained, star: source;\n"
                       "blue: vocabulary replaced, orange: extended)", fontsize=9)
        axis.set_xlabel(f"bits per byte, {lang} (lower is better)")
        axis.set_ylabel(f"bits per byte, {source_lang} (retention; lower is better)")
        axis.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
