"""The paper's missing baseline (Table 3, "bilingual BERT from scratch"): nothing transferred.

The foreign table is an N(0, 1/d^2) draw without copied special tokens, and its
registry entry marks it ``from_scratch``: training re-draws the encoder and the
English table too, keeping only the source model's architecture and tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ramen.initializers.common import InitResult
from ramen.initializers.random import random_init


def scratch_init(
    source_embeddings: torch.Tensor,
    source_bias: torch.Tensor,
    foreign_vocab: list[str],
    source_vocab: list[str],
    *,
    alpha=None,
    generator: torch.Generator,
    special_tokens: Sequence[str] | None = None,
) -> InitResult:
    """Every row random, zero bias; ``alpha`` and ``special_tokens`` are ignored (common signature).

    Copying the English special-token rows would tie them to a table that training replaces.
    """
    return random_init(source_embeddings, source_bias, foreign_vocab, source_vocab, generator=generator,
                       special_tokens=[])
