"""The mean baseline of vocabulary replacement in LLMs: every new row the mean of the English rows.

Every foreign row (and output bias) is the mean over all English rows, so the model starts
from its average token; special tokens are copied from English. With an untied output
layer the same rule builds the output rows (:func:`~ramen.initializers.common.apply_mixture`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ramen.initializers.common import InitResult, Mixture, check_shapes, mixture_result, special_copies


def mean_init(
    source_embeddings: torch.Tensor,
    source_bias: torch.Tensor,
    foreign_vocab: list[str],
    source_vocab: list[str],
    *,
    alpha=None,
    generator: torch.Generator,
    special_tokens: Sequence[str] | None = None,
) -> InitResult:
    """All rows the English mean, bias the mean English bias; ``alpha`` is ignored (common signature)."""
    check_shapes(source_embeddings, source_bias, source_vocab)
    n_f = len(foreign_vocab)
    mixture = Mixture(shape=(n_f, len(source_vocab)), mean_rows=np.ones(n_f, dtype=bool),
                      special=special_copies(foreign_vocab, source_vocab, special_tokens))
    return mixture_result(mixture, source_embeddings, source_bias, generator=generator)
