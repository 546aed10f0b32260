"""Weighted pieces (after AdaptiVocab, Nakash et al. 2025, and EEVE, Kim et al. 2024): a new
token's input row leans on its last piece, its output row on its first.

Reading a word cut into pieces, the source model has seen the whole word only at its last piece,
so the input row mixes the pieces' input rows with weights growing toward the last; predicting
the word, the source model first predicts its first piece, so the output rows (and the output
bias) mix the pieces' output rows with weights falling from the first. The weights are those of
:mod:`ramen.initializers.pieces` (``toward_last``, ``toward_first``: halving per piece away from
the favoured end). A tied head has one row per token: there it is the input row. The output
mixture is the result's ``output_mixture``, which the pipeline applies to untied output rows.
Offered for an extension, whose new tokens are made of pieces the model keeps and reads beside them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ramen.initializers.common import (
    InitResult,
    Mixture,
    apply_mixture,
    check_shapes,
    mixture_result,
    special_copies,
)
from ramen.initializers.pieces import piece_weights, toward_first, toward_last


def weighted_pieces_init(
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
    """Input rows toward the last piece, output bias toward the first; ``alpha`` is ignored."""
    check_shapes(source_embeddings, source_bias, source_vocab)
    shape = (len(foreign_vocab), len(source_vocab))
    special = special_copies(foreign_vocab, source_vocab, special_tokens)
    weights = piece_weights(pieces, len(source_vocab), toward_last)
    output = Mixture(shape=shape, weights=piece_weights(pieces, len(source_vocab), toward_first), special=special)
    result = mixture_result(Mixture(shape=shape, weights=weights, special=special), source_embeddings, source_bias,
                            generator=generator)
    _, result.bias, _ = apply_mixture(output, source_embeddings, source_bias, generator=generator)
    result.weights, result.output_mixture = weights, output
    return result
