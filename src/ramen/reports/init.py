"""The initialisation report: coverage, alpha support and lexicon induction per variant (TSV and plot)."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ramen.data.dictionaries import read_dictionary
from ramen.reports.bli import lexicon_induction
from ramen.io import atomic_path, write_tsv

logger = logging.getLogger(__name__)

COLUMNS = ("variant", "init", "rows", "coverage", "aligned_share", "support_size_mean", "bli_pairs", "bli_queries",
           "bli_candidates", "p@1", "p@5", "p@1_cosine")


def _tokenizer_view(tokenizer, table: np.ndarray):
    from ramen.alignment.monolingual import subword_tokenize
    from ramen.vocab.tokenizer import ordered_vocab

    index = {token: i for i, token in enumerate(ordered_vocab(tokenizer))}
    # Every variant and retrieval looks up the same dictionary words.
    return functools.lru_cache(maxsize=None)(subword_tokenize(tokenizer)), table, index, tokenizer.unk_token


def init_report_rows(variants: Sequence[dict], source_dir, foreign_tokenizer_dir, dictionary_path, *,
                     csls_k: int = 10) -> list[dict]:
    """One row per ``{"variant", "init", "embeddings", "stats"}`` entry (safetensors and JSON of the init rule)."""
    from safetensors.torch import load_file

    from ramen.modeling.bilingual import BilingualMaskedLM, load_source_mlm
    from ramen.vocab.tokenizer import load_tokenizer

    pairs = read_dictionary(dictionary_path)
    source_tokenizer = load_tokenizer(source_dir)
    foreign_tokenizer = load_tokenizer(foreign_tokenizer_dir)
    english_table = BilingualMaskedLM(load_source_mlm(source_dir), "source").input_embeddings("source")
    english = _tokenizer_view(source_tokenizer, english_table.weight.detach().float().numpy())
    rows = []
    for entry in variants:
        stats = json.loads(Path(entry["stats"]).read_text(encoding="utf-8"))
        table = load_file(entry["embeddings"])["embeddings"].float().numpy()
        foreign = _tokenizer_view(foreign_tokenizer, table)
        csls = lexicon_induction(pairs, english=english, foreign=foreign, retrieval="csls", k=csls_k)
        cosine = lexicon_induction(pairs, english=english, foreign=foreign, retrieval="cosine", ranks=(1,))
        rows.append({
            "variant": entry["variant"], "init": entry["init"], "rows": stats["rows"],
            "coverage": stats["supported_share"], "aligned_share": stats["aligned_share"],
            "support_size_mean": stats["support_size_mean"], "bli_pairs": csls.pairs, "bli_queries": csls.queries,
            "bli_candidates": csls.candidates, "p@1": csls.precision["p@1"], "p@5": csls.precision["p@5"],
            "p@1_cosine": cosine.precision["p@1"],
        })
        logger.info("%s: coverage %.3f, P@1 %s, P@5 %s (%d queries)", entry["variant"], stats["supported_share"],
                    csls.precision["p@1"], csls.precision["p@5"], csls.queries)
    return rows


def write_report_tsv(rows: Sequence[dict], path) -> None:
    write_tsv(path, rows, COLUMNS, missing="NA", digits=4)


def plot_report(rows: Sequence[dict], path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("coverage", "rows with support"), ("support_size_mean", "mean support size of alpha"),
              ("p@1", "lexicon induction P@1 (CSLS)"), ("p@5", "lexicon induction P@5 (CSLS)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    names = [row["variant"] for row in rows]
    for ax, (key, label) in zip(axes, panels):
        values = [row[key] if row[key] is not None else 0.0 for row in rows]
        ax.bar(names, values, color="tab:blue")
        ax.set_title(label, fontsize=10)
        for x, (value, row) in enumerate(zip(values, rows)):
            ax.annotate("NA" if row[key] is None else f"{value:.3g}", (x, value), ha="center", va="bottom", fontsize=8)
        ax.tick_params(axis="x", labelrotation=30)
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
