"""FOCUS (Dobler and de Melo, EMNLP 2023): overlapping tokens copied, the others mixed from them.

* tokens both vocabularies spell alike (:func:`~ramen.initializers.overlap.shared_tokens`)
  copy their English embedding and output bias;
* every other foreign token with an auxiliary vector is a sparsemax mixture of the shared
  tokens' English rows, weighted by the cosine similarities of auxiliary vectors: fastText
  trained on the foreign corpus tokenised with the foreign tokenizer, one vector per token
  (rule ``focus_fasttext``), so the similarities are between foreign tokens;
* tokens without an auxiliary vector (too rare for fastText's ``min_count``) stay random.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import scipy.sparse as sp
import torch

from ramen.initializers.common import DEFAULT_SPECIAL_TOKENS, InitResult
from ramen.initializers.overlap import one_hot, shared_tokens
from ramen.initializers.parallel import parallel_init
from ramen.alignment.sparsemax import sparsemax_alpha


def _vector_table(tokens: Sequence[str], token_vectors: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Unit-length auxiliary vectors of ``tokens`` and which of them have a non-zero one."""
    dim = len(next(iter(token_vectors.values())))
    table = np.zeros((len(tokens), dim), dtype=np.float32)
    for i, token in enumerate(tokens):
        vector = token_vectors.get(token)
        if vector is not None:
            table[i] = vector
    norms = np.linalg.norm(table, axis=1)
    present = norms > 0
    table[present] /= norms[present, None]
    return table, present


def focus_weights(foreign_vocab: Sequence[str], source_vocab: Sequence[str], token_vectors: Mapping[str, np.ndarray],
                  special_tokens: Sequence[str] | None = None,
                  pairs: Sequence[tuple[int, int]] | None = None) -> sp.csr_matrix:
    """The (V_f, V_e) weights of FOCUS: one-hot rows for shared tokens, sparsemax rows for the others.

    ``pairs``: the (foreign row, English row) shared tokens; default
    :func:`~ramen.initializers.overlap.shared_tokens`. Shared tokens without an
    auxiliary vector are still copied but are no anchor of a mixture; rows of tokens
    without a vector, and special tokens, are empty.
    """
    if not token_vectors:
        raise ValueError("FOCUS needs auxiliary vectors of the foreign tokens; none were given")
    shape = (len(foreign_vocab), len(source_vocab))
    pairs = shared_tokens(foreign_vocab, source_vocab, special_tokens) if pairs is None else list(pairs)
    copied = one_hot(pairs, shape)
    shared_rows = {f for f, _ in pairs}
    specials = set(DEFAULT_SPECIAL_TOKENS if special_tokens is None else special_tokens)
    table, present = _vector_table(foreign_vocab, token_vectors)
    anchors = [(f, e) for f, e in pairs if present[f]]
    new = np.asarray([f for f, token in enumerate(foreign_vocab)
                      if f not in shared_rows and token not in specials and present[f]], dtype=np.int64)
    if not anchors or not len(new):
        return copied
    anchor_rows = np.asarray([f for f, _ in anchors])
    anchor_english = np.asarray([e for _, e in anchors])
    mixture = sparsemax_alpha(torch.from_numpy(table[new]), torch.from_numpy(table[anchor_rows]), progress=False)
    mixture = mixture.tocoo()
    # Two anchors with the same English row (French "le" and "le</w>") add up there.
    mixed = sp.csr_matrix((mixture.data, (new[mixture.row], anchor_english[mixture.col])), shape=shape)
    return (copied + mixed).tocsr()


def focus_init(
    source_embeddings: torch.Tensor,
    source_bias: torch.Tensor,
    foreign_vocab: list[str],
    source_vocab: list[str],
    *,
    alpha=None,
    generator: torch.Generator,
    special_tokens: Sequence[str] | None = None,
    token_vectors: Mapping[str, np.ndarray],
) -> InitResult:
    """FOCUS rows and biases (mixtures of English parameters); ``alpha`` is ignored (common signature)."""
    weights = focus_weights(foreign_vocab, source_vocab, token_vectors, special_tokens)
    result = parallel_init(source_embeddings, source_bias, foreign_vocab, source_vocab, alpha=weights,
                           generator=generator, special_tokens=special_tokens)
    result.weights = weights
    return result
