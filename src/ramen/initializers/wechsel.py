"""WECHSEL (Minixhofer, Paischer and Rekabsaz, NAACL 2022): subword embeddings through aligned fastText.

* the two languages' fastText word vectors are aligned by an orthogonal map:
  Procrustes on a bilingual dictionary when one is given (as the paper does), else
  the monolingual route's identical-string seed and refinement (:mod:`ramen.alignment.procrustes`);
* every subword of each vocabulary gets a vector from fastText's character n-grams
  of its string (markers stripped), the foreign ones mapped into the English space;
* each foreign row is the mixture of the English rows of its ``neighbors`` most
  cosine-similar English subwords, weighted by softmax(cosine / temperature)
  (paper: 10 neighbours, temperature 0.1); the output bias is mixed alike.

Subwords whose string has no n-gram in the model (a zero vector) stay random.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch

from ramen.alignment.procrustes import AlignSettings, align_vectors, normalise_embeddings
from ramen.initializers.common import DEFAULT_SPECIAL_TOKENS, InitResult, normalise_tokens
from ramen.initializers.parallel import parallel_init

logger = logging.getLogger(__name__)

# Foreign rows of the similarity matrix per step.
CHUNK_ROWS = 2048


def subword_vectors(model, vocab: Sequence[str], special_tokens: Sequence[str] | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Unit-length fastText vectors of every token's string and which tokens got a non-zero one.

    ``model`` is anything with ``get_word_vector(str)`` (a fastText model); special
    tokens get none.
    """
    specials = set(DEFAULT_SPECIAL_TOKENS if special_tokens is None else special_tokens)
    vectors = None
    for i, (token, text) in enumerate(zip(vocab, normalise_tokens(vocab))):
        if token in specials:
            continue
        vector = np.asarray(model.get_word_vector(text), dtype=np.float32)
        if vectors is None:
            vectors = np.zeros((len(vocab), len(vector)), dtype=np.float32)
        vectors[i] = vector
    if vectors is None:
        raise ValueError("the vocabulary holds only special tokens")
    norms = np.linalg.norm(vectors, axis=1)
    present = norms > 0
    vectors[present] /= norms[present, None]
    return vectors, present


def topk_softmax(foreign: np.ndarray, english: np.ndarray, *, k: int, temperature: float,
                 foreign_rows: np.ndarray | None = None, english_columns: np.ndarray | None = None,
                 chunk_rows: int = CHUNK_ROWS) -> sp.csr_matrix:
    """(V_f, V_e) CSR weights: per selected foreign row, softmax(cos / temperature) over its k best English columns.

    Rows must be unit length. Rows not selected stay empty; columns not allowed get no weight.
    """
    if k < 1:
        raise ValueError(f"WECHSEL needs at least one neighbour, got neighbors={k}")
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    n_f, n_e = len(foreign), len(english)
    rows = np.arange(n_f) if foreign_rows is None else np.flatnonzero(foreign_rows)
    columns = np.arange(n_e) if english_columns is None else np.flatnonzero(english_columns)
    if not len(columns):
        raise ValueError("no English subword has a vector to mix from")
    k = min(k, len(columns))
    keys = torch.from_numpy(np.ascontiguousarray(english[columns].T, dtype=np.float32))
    indices, data = [], []
    for start in range(0, len(rows), chunk_rows):
        chunk = rows[start : start + chunk_rows]
        similarities = torch.from_numpy(foreign[chunk].astype(np.float32)) @ keys
        top = torch.topk(similarities, k, dim=1)
        weights = torch.softmax(top.values.double() / temperature, dim=1)
        indices.append(columns[top.indices.numpy()])
        data.append(weights.numpy())
    counts = np.zeros(n_f, dtype=np.int64)
    counts[rows] = k
    indptr = np.concatenate(([0], np.cumsum(counts)))
    if not indices:
        return sp.csr_matrix((n_f, n_e), dtype=np.float64)
    weights = sp.csr_matrix((np.concatenate(data).ravel(), np.concatenate(indices).ravel(), indptr), shape=(n_f, n_e))
    weights.sort_indices()
    return weights


def word_alignment(source_model, foreign_model, *, align_words: int, refine_iterations: int,
                   dictionary: Sequence[tuple[str, str]] | None = None) -> np.ndarray:
    """The orthogonal (d, d) map of foreign fastText vectors into the English ones.

    Fitted on the ``align_words`` most frequent words of each model (``model.words``,
    frequency order): on the pairs of ``dictionary`` (english, foreign) found among
    them when given, else on identical strings; then ``refine_iterations`` refits on
    mutual nearest neighbours.
    """
    # "</s>" is fastText's end-of-line marker, not a word.
    english_words = [w for w in source_model.words if w != "</s>"][:align_words]
    foreign_words = [w for w in foreign_model.words if w != "</s>"][:align_words]
    english = normalise_embeddings(np.stack([source_model.get_word_vector(w) for w in english_words]))
    foreign = normalise_embeddings(np.stack([foreign_model.get_word_vector(w) for w in foreign_words]))
    if english.shape[1] != foreign.shape[1]:
        raise ValueError(f"the fastText models have dimensions {english.shape[1]} (English) and {foreign.shape[1]}; "
                         "WECHSEL needs models of one size")
    seed = None
    if dictionary is not None:
        english_row = {w: i for i, w in enumerate(english_words)}
        foreign_row = {w: i for i, w in enumerate(foreign_words)}
        seed = list(dict.fromkeys((foreign_row[f], english_row[e]) for e, f in dictionary
                                  if e in english_row and f in foreign_row))
    alignment = align_vectors(foreign, english, foreign_words, english_words,
                              AlignSettings(refine_iterations=refine_iterations), seed=seed)
    logger.info("WECHSEL alignment: %d seed pairs, held-out P@1 %s, refinement %s", len(alignment.seed_pairs),
                alignment.held_out_p1, alignment.history)
    return alignment.mapping


def wechsel_weights(source_model, foreign_model, foreign_vocab: Sequence[str], source_vocab: Sequence[str], *,
                    neighbors: int = 10, temperature: float = 0.1, align_words: int = 50_000,
                    refine_iterations: int = 3, dictionary: Sequence[tuple[str, str]] | None = None,
                    special_tokens: Sequence[str] | None = None) -> sp.csr_matrix:
    """The (V_f, V_e) WECHSEL weights: top-``neighbors`` softmax over aligned subword vectors."""
    mapping = word_alignment(source_model, foreign_model, align_words=align_words,
                             refine_iterations=refine_iterations, dictionary=dictionary)
    english, english_present = subword_vectors(source_model, source_vocab, special_tokens)
    foreign, foreign_present = subword_vectors(foreign_model, foreign_vocab, special_tokens)
    foreign = foreign @ mapping
    foreign /= np.maximum(np.linalg.norm(foreign, axis=1, keepdims=True), 1e-8)
    logger.info("WECHSEL: %d of %d foreign and %d of %d English subwords have n-gram vectors",
                foreign_present.sum(), len(foreign_vocab), english_present.sum(), len(source_vocab))
    return topk_softmax(foreign, english, k=neighbors, temperature=temperature, foreign_rows=foreign_present,
                        english_columns=english_present)


def wechsel_init(
    source_embeddings: torch.Tensor,
    source_bias: torch.Tensor,
    foreign_vocab: list[str],
    source_vocab: list[str],
    *,
    alpha=None,
    generator: torch.Generator,
    special_tokens: Sequence[str] | None = None,
    source_model,
    foreign_model,
    dictionary: Sequence[tuple[str, str]] | None = None,
    neighbors: int = 10,
    temperature: float = 0.1,
    align_words: int = 50_000,
    refine_iterations: int = 3,
) -> InitResult:
    """WECHSEL rows and biases from two fastText models (``get_word_vector``, ``words``); ``alpha`` is ignored."""
    weights = wechsel_weights(source_model, foreign_model, foreign_vocab, source_vocab, neighbors=neighbors,
                              temperature=temperature, align_words=align_words,
                              refine_iterations=refine_iterations, dictionary=dictionary,
                              special_tokens=special_tokens)
    result = parallel_init(source_embeddings, source_bias, foreign_vocab, source_vocab, alpha=weights,
                           generator=generator, special_tokens=special_tokens)
    result.weights = weights
    return result
