"""Aligning foreign word vectors to English ones without parallel data (RAMEN §2.1, §3.2).

* the seed dictionary is the words spelled identically in both languages,
  filtered: words without a letter (numbers, punctuation), very short words,
  and words whose frequency ranks differ a lot between the two languages (a
  French function word such as "les" or "de" also occurs in English text, but
  far down the English frequency list) are dropped;
* an orthogonal map W (Procrustes: W = U Vᵀ from the SVD of X_fᵀ X_e) sends
  the foreign vectors into the English space;
* optional refinement: the dictionary is rebuilt from mutual nearest neighbours
  (cosine or CSLS) among the most frequent words and W refitted;
* subword vectors follow eq. 4: the vector of subword s is the average of the
  vectors of the words that contain s, weighted by their unigram probability.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

logger = logging.getLogger(__name__)

# Rows of the similarity matrix computed per step in nearest-neighbour searches.
SEARCH_CHUNK = 4096


def normalise_embeddings(vectors: np.ndarray) -> np.ndarray:
    """Unit length, mean-centred, unit length again (the usual preprocessing for Procrustes)."""
    out = np.asarray(vectors, dtype=np.float32).copy()
    out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-8)
    out -= out.mean(axis=0, keepdims=True)
    out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-8)
    return out


def procrustes(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The orthogonal W (d, d) minimising ||source W - target||_F."""
    if source.shape != target.shape or source.ndim != 2:
        raise ValueError(f"Procrustes needs two (n, d) arrays of one shape, got {source.shape} and {target.shape}")
    if source.shape[0] == 0:
        raise ValueError("Procrustes needs at least one dictionary pair")
    u, _, vt = np.linalg.svd(source.T.astype(np.float64) @ target.astype(np.float64))
    return (u @ vt).astype(np.float32)


@dataclass(frozen=True)
class SeedFilter:
    """Which identical strings may seed the map."""

    min_length: int = 3
    max_log_rank_ratio: float = 1.0   # |ln(rank_f / rank_e)| at most this (1.0: within a factor e)
    require_letter: bool = True


def identical_seed(foreign_words: Sequence[str], english_words: Sequence[str],
                   seed_filter: SeedFilter = SeedFilter()) -> list[tuple[int, int]]:
    """(foreign index, English index) pairs of identically spelled words that pass the filter.

    Both word lists are ordered by frequency (index = rank - 1).
    """
    english_rank = {word: i for i, word in enumerate(english_words)}
    pairs = []
    for i, word in enumerate(foreign_words):
        j = english_rank.get(word)
        if j is None or len(word) < seed_filter.min_length:
            continue
        if seed_filter.require_letter and not any(ch.isalpha() for ch in word):
            continue
        if abs(math.log((i + 1) / (j + 1))) > seed_filter.max_log_rank_ratio:
            continue
        pairs.append((i, j))
    return pairs


def _top_mean_similarity(queries: np.ndarray, keys: np.ndarray, k: int) -> np.ndarray:
    """Mean cosine of each query to its k nearest keys (CSLS's neighbourhood density)."""
    out = np.empty(len(queries), dtype=np.float32)
    k = min(k, len(keys))
    for start in range(0, len(queries), SEARCH_CHUNK):
        sims = queries[start : start + SEARCH_CHUNK] @ keys.T
        top = np.partition(sims, -k, axis=1)[:, -k:]
        out[start : start + SEARCH_CHUNK] = top.mean(axis=1)
    return out


def nearest_neighbours(queries: np.ndarray, keys: np.ndarray, *, retrieval: str = "csls", k: int = 10,
                       top: int = 1) -> np.ndarray:
    """Indices (n_queries, top) of the best keys for each query, best first.

    Rows must be unit length.  ``retrieval`` is "cosine" or "csls"
    (2 cos(x, y) - r(x) - r(y), with r the mean cosine to the k nearest
    neighbours in the other language; Lample et al. 2018).
    """
    if retrieval not in ("cosine", "csls"):
        raise ValueError(f"retrieval must be 'cosine' or 'csls', got {retrieval!r}")
    top = min(top, len(keys))
    key_penalty = _top_mean_similarity(keys, queries, k) if retrieval == "csls" else None
    out = np.empty((len(queries), top), dtype=np.int64)
    for start in range(0, len(queries), SEARCH_CHUNK):
        scores = queries[start : start + SEARCH_CHUNK] @ keys.T
        if key_penalty is not None:
            # r(query) shifts a whole row equally and does not change its ranking.
            scores = 2 * scores - key_penalty[None, :]
        best = np.argpartition(-scores, top - 1, axis=1)[:, :top] if top < scores.shape[1] else \
            np.tile(np.arange(scores.shape[1]), (scores.shape[0], 1))
        order = np.argsort(-np.take_along_axis(scores, best, axis=1), axis=1)
        out[start : start + SEARCH_CHUNK] = np.take_along_axis(best, order, axis=1)
    return out


def mutual_nearest_pairs(foreign: np.ndarray, english: np.ndarray, *, retrieval: str = "csls",
                         k: int = 10) -> list[tuple[int, int]]:
    """Pairs (i, j) where English j is the best match of foreign i and vice versa."""
    forward = nearest_neighbours(foreign, english, retrieval=retrieval, k=k)[:, 0]
    backward = nearest_neighbours(english, foreign, retrieval=retrieval, k=k)[:, 0]
    return [(i, int(j)) for i, j in enumerate(forward) if backward[j] == i]


@dataclass(frozen=True)
class AlignSettings:
    """Identical-string Procrustes with optional refinement."""

    seed_filter: SeedFilter = SeedFilter()
    refine_iterations: int = 3
    refine_words: int = 20_000      # most frequent words of each language searched for new pairs
    retrieval: str = "csls"
    csls_k: int = 10


@dataclass
class Alignment:
    mapping: np.ndarray                 # (d, d): foreign vectors @ mapping lie in the English space
    seed_pairs: list[tuple[int, int]]
    dictionary: list[tuple[int, int]]   # the pairs the final map was fitted on
    history: list[dict]
    held_out_p1: float | None = None    # P@1 on seed pairs left out of the first fit (None: too few pairs)


# Below this held-out seed P@1 the alignment is reported as not working.
WEAK_ALIGNMENT_P1 = 0.1


def seed_held_out_precision(foreign: np.ndarray, english: np.ndarray, seed: Sequence[tuple[int, int]],
                            settings: AlignSettings) -> float | None:
    """P@1 of every 5th seed pair under a Procrustes map fitted on the other pairs.

    Retrieval is among the ``refine_words`` most frequent English words (and the
    held-out targets).  Identical strings are easier than average words, so this
    is an upper-side sanity check: a low value means the vectors do not align.
    """
    held_out, fit = list(seed[::5]), [pair for n, pair in enumerate(seed) if n % 5]
    if len(held_out) < 5 or len(fit) < 10:
        return None
    mapping = procrustes(foreign[[i for i, _ in fit]], english[[j for _, j in fit]])
    candidates = sorted(set(range(min(settings.refine_words, len(english)))) | {j for _, j in held_out})
    found = nearest_neighbours(foreign[[i for i, _ in held_out]] @ mapping, english[candidates],
                               retrieval=settings.retrieval, k=settings.csls_k)[:, 0]
    return float(np.mean([candidates[f] == j for f, (_, j) in zip(found, held_out)]))


def align_vectors(foreign: np.ndarray, english: np.ndarray, foreign_words: Sequence[str],
                  english_words: Sequence[str], settings: AlignSettings = AlignSettings(),
                  seed: Sequence[tuple[int, int]] | None = None) -> Alignment:
    """Fit an orthogonal map from normalised foreign vectors to normalised English vectors.

    ``seed``: (foreign index, English index) pairs of a bilingual dictionary; without
    it, the filtered identical strings seed the map.
    """
    if foreign.shape[1] != english.shape[1]:
        raise ValueError(f"foreign vectors have dimension {foreign.shape[1]}, English {english.shape[1]}")
    if seed is None:
        seed = identical_seed(foreign_words, english_words, settings.seed_filter)
        if not seed:
            raise ValueError("no identical strings pass the seed filter; the two vocabularies share no usable words")
    elif not seed:
        raise ValueError("no pair of the bilingual dictionary has a vector in both languages")
    seed = list(seed)
    logger.info("seed dictionary: %d pairs, e.g. %s", len(seed),
                ", ".join(foreign_words[i] for i, _ in seed[:15]))
    held_out_p1 = seed_held_out_precision(foreign, english, seed, settings)
    logger.info("held-out P@1 of the identical-string seed (every 5th pair, map fitted on the rest): %s",
                "NA" if held_out_p1 is None else f"{held_out_p1:.3f}")
    if held_out_p1 is not None and held_out_p1 < WEAK_ALIGNMENT_P1:
        logger.warning("the word vectors barely align (held-out seed P@1 %.3f < %.2f): the corpora are probably too "
                       "small for the monolingual route; give pretrained vectors (monolingual.vectors) or more text",
                       held_out_p1, WEAK_ALIGNMENT_P1)
    dictionary = seed
    history = [{"iteration": 0, "pairs": len(seed)}]
    mapping = procrustes(foreign[[i for i, _ in seed]], english[[j for _, j in seed]])
    n_f = min(settings.refine_words, len(foreign))
    n_e = min(settings.refine_words, len(english))
    for iteration in range(1, settings.refine_iterations + 1):
        pairs = mutual_nearest_pairs(foreign[:n_f] @ mapping, english[:n_e], retrieval=settings.retrieval,
                                     k=settings.csls_k)
        if not pairs:
            logger.warning("refinement %d found no mutual nearest neighbours; keeping the previous map", iteration)
            break
        dictionary = pairs
        mapping = procrustes(foreign[[i for i, _ in pairs]], english[[j for _, j in pairs]])
        history.append({"iteration": iteration, "pairs": len(pairs)})
        logger.info("refinement %d: %d mutual nearest neighbours (%s)", iteration, len(pairs), settings.retrieval)
    return Alignment(mapping=mapping, seed_pairs=seed, dictionary=dictionary, history=history,
                     held_out_p1=held_out_p1)


def subword_vectors(words: Sequence[str], vectors: np.ndarray, probabilities: np.ndarray,
                    tokenize: Callable[[str], Sequence[str]], vocab: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 4: e_s = sum over words w containing s of p(w) / n_s * e_w, n_s = sum of those p(w).

    Returns (vocabulary-sized (V, d) float32 table, bool mask of subwords that got a vector).
    """
    index = {token: i for i, token in enumerate(vocab)}
    rows, cols, weights = [], [], []
    for w, (word, prob) in enumerate(zip(words, probabilities)):
        if prob <= 0:
            continue
        for token in set(tokenize(word)):
            s = index.get(token)
            if s is not None:
                rows.append(s)
                cols.append(w)
                weights.append(prob)
    membership = sp.csr_matrix((np.asarray(weights, dtype=np.float64), (rows, cols)),
                               shape=(len(vocab), len(words)))
    totals = np.asarray(membership.sum(axis=1)).ravel()
    has_vector = totals > 0
    scale = np.divide(1.0, totals, out=np.zeros_like(totals), where=has_vector)
    table = np.asarray(sp.diags(scale) @ membership @ vectors.astype(np.float64), dtype=np.float32)
    return table, has_vector
