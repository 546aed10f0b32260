"""Fast Vocabulary Transfer (FVT, Gee et al. 2022): each foreign row the mean of its pieces' rows.

The source tokenizer segments each foreign token (``pieces``: its source ids, from
:mod:`ramen.initializers.pieces`); its row and output bias are the means of those pieces' source
rows and biases. A token that is a source token is one piece, so its row is copied. Special tokens
are copied by string; a token with no pieces keeps the N(0, 1/d^2) draw of ``random``. With an
untied output layer the same means build the output rows
(:func:`~ramen.initializers.common.apply_mixture`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ramen.initializers.common import InitResult, Mixture, check_shapes, mixture_result, special_copies
from ramen.initializers.pieces import piece_weights, uniform


def fvt_init(
    source_embeddings: torch.Tensor,
    source_bias: torch.Tensor,
    foreign_vocab: list[str],
    source_vocab: list[str],
    *,
    alpha=None,
    generator: torch.Generator,
    special_tokens: Sequence[str] | None = None,
    pieces: Sequence[Sequence[int]],
) -> InitResult:
    """Rows and biases the means of the pieces'; ``alpha`` is ignored (common signature)."""
    check_shapes(source_embeddings, source_bias, source_vocab)
    weights = piece_weights(pieces, len(source_vocab), uniform)
    mixture = Mixture(shape=(len(foreign_vocab), len(source_vocab)), weights=weights,
                      special=special_copies(foreign_vocab, source_vocab, special_tokens))
    result = mixture_result(mixture, source_embeddings, source_bias, generator=generator)
    result.weights = weights
    return result
