"""Initialisation by vocabulary overlap: the baseline the embedding-transfer papers report against.

A foreign token whose characters, without the tokenizers' word-boundary markers,
spell an English token copies that token's embedding and output bias; every other
row stays an N(0, 1/d^2) draw with zero bias (the same draw as ``random``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch

from ramen.initializers.common import DEFAULT_SPECIAL_TOKENS, InitResult, normalise_tokens
from ramen.initializers.parallel import parallel_init


def shared_tokens(foreign_vocab: Sequence[str], source_vocab: Sequence[str],
                  special_tokens: Sequence[str] | None = None) -> list[tuple[int, int]]:
    """(foreign row, English row) of every foreign token that both vocabularies spell alike.

    A foreign token whose string is an English token matches it; otherwise tokens are compared
    by :func:`~ramen.initializers.common.normalise_tokens` (byte-level characters decoded,
    word-boundary markers dropped). When several English tokens share the characters
    (WordPiece ``le`` and ``##le``), the one that spells them without a marker wins: a foreign
    marker of another convention says nothing about the English piece's position (fastBPE
    marks word ends, WordPiece word insides). Special tokens are left
    to :func:`~ramen.initializers.copy_special_tokens`.
    """
    specials = set(DEFAULT_SPECIAL_TOKENS if special_tokens is None else special_tokens)
    english: dict[str, int] = {}
    for e, (token, bare) in enumerate(zip(source_vocab, normalise_tokens(source_vocab))):
        if token in specials:
            continue
        if bare not in english or (token == bare and source_vocab[english[bare]] != bare):
            english[bare] = e
    verbatim = {token: e for e, token in reversed(list(enumerate(source_vocab))) if token not in specials}
    pairs = []
    for f, (token, bare) in enumerate(zip(foreign_vocab, normalise_tokens(foreign_vocab))):
        if token in specials:
            continue
        # The same string in both (two byte-level vocabularies: "Ġle" and "Ġle") is the same
        # piece in the same position; only across conventions do the bare characters decide.
        e = verbatim.get(token, english.get(bare))
        if e is not None:
            pairs.append((f, e))
    return pairs


def one_hot(pairs: Sequence[tuple[int, int]], shape: tuple[int, int]) -> sp.csr_matrix:
    """A (V_f, V_e) CSR matrix with a 1 at each (foreign row, English row) pair."""
    rows = np.fromiter((f for f, _ in pairs), dtype=np.int64, count=len(pairs))
    cols = np.fromiter((e for _, e in pairs), dtype=np.int64, count=len(pairs))
    return sp.csr_matrix((np.ones(len(pairs), dtype=np.float32), (rows, cols)), shape=shape)


def overlap_init(
    source_embeddings: torch.Tensor,
    source_bias: torch.Tensor,
    foreign_vocab: list[str],
    source_vocab: list[str],
    *,
    alpha=None,
    generator: torch.Generator,
    special_tokens: Sequence[str] | None = None,
) -> InitResult:
    """Shared tokens copied from English, the rest random; ``alpha`` is ignored (common signature)."""
    weights = one_hot(shared_tokens(foreign_vocab, source_vocab, special_tokens),
                      (len(foreign_vocab), len(source_vocab)))
    result = parallel_init(source_embeddings, source_bias, foreign_vocab, source_vocab, alpha=weights,
                           generator=generator, special_tokens=special_tokens)
    result.weights = weights
    return result
