"""Bilingual lexicon induction (BLI) as a quality measure of an initialised foreign embedding table.

Before any training, a good initialisation puts a foreign word near its English
translations in the English input-embedding space.  Each dictionary word is
represented by the mean of its subword embeddings (English words with the
source tokenizer and table, foreign words with the foreign tokenizer and the
initialised table; words containing the unknown token are skipped).  Every
foreign word of the dictionary retrieves from the English words of the
dictionary by cosine or CSLS; P@k is the share of foreign words with a gold
translation among their k best.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ramen.alignment.procrustes import nearest_neighbours


def word_vectors(words: Sequence[str], tokenize: Callable[[str], Sequence[str]], table: np.ndarray,
                 vocab_index: dict[str, int], unknown: str | None) -> tuple[np.ndarray, list[bool]]:
    """Unit-length mean subword embedding of each word; False where the word cannot be represented."""
    out = np.zeros((len(words), table.shape[1]), dtype=np.float32)
    usable = []
    for w, word in enumerate(words):
        tokens = list(tokenize(word))
        ids = [vocab_index.get(token) for token in tokens]
        ok = bool(tokens) and None not in ids and unknown not in tokens
        if ok:
            out[w] = table[ids].mean(axis=0)
        usable.append(ok)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    out /= np.maximum(norms, 1e-8)
    return out, usable


@dataclass
class BliResult:
    pairs: int
    queries: int
    candidates: int
    precision: dict  # {"p@1": ..., "p@5": ...}


def lexicon_induction(pairs: Sequence[tuple[str, str]], *, english: tuple, foreign: tuple, retrieval: str = "csls",
                      k: int = 10, ranks: Sequence[int] = (1, 5)) -> BliResult:
    """P@k of retrieving English translations of the dictionary's foreign words.

    ``english`` and ``foreign`` are ``(tokenize, table, vocab_index, unknown_token)``.
    """
    english_words = sorted({e for e, _ in pairs})
    foreign_words = sorted({f for _, f in pairs})
    english_vectors, english_ok = word_vectors(english_words, *english)
    foreign_vectors, foreign_ok = word_vectors(foreign_words, *foreign)
    english_keep = [i for i, ok in enumerate(english_ok) if ok]
    english_row = {english_words[i]: r for r, i in enumerate(english_keep)}
    gold: dict[str, set[int]] = collections.defaultdict(set)
    for e, f in pairs:
        if e in english_row:
            gold[f].add(english_row[e])
    queries = [i for i, ok in enumerate(foreign_ok) if ok and foreign_words[i] in gold]
    if not queries or not english_keep:
        return BliResult(len(pairs), 0, len(english_keep), {f"p@{r}": None for r in ranks})
    found = nearest_neighbours(foreign_vectors[queries], english_vectors[english_keep], retrieval=retrieval,
                               k=k, top=max(ranks))
    precision = {}
    for r in ranks:
        hits = [bool(gold[foreign_words[q]] & set(found[n, :r].tolist())) for n, q in enumerate(queries)]
        precision[f"p@{r}"] = float(np.mean(hits))
    return BliResult(len(pairs), len(queries), len(english_keep), precision)
