"""Initialisation from monolingual data only (RAMEN §2.1, eq. 3-4).

alpha comes from sparsemax over similarities of aligned subword vectors
(:mod:`ramen.alignment.monolingual`) instead of word alignment; the foreign rows and
output bias are then the same alpha mixtures of English parameters as in the
parallel route.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ramen.initializers.common import InitResult
from ramen.initializers.parallel import parallel_init


def monolingual_init(
    source_embeddings: torch.Tensor,
    source_bias: torch.Tensor,
    foreign_vocab: list[str],
    source_vocab: list[str],
    *,
    alpha,
    generator: torch.Generator,
    special_tokens: Sequence[str] | None = None,
) -> InitResult:
    """Foreign rows = alpha @ E_e with alpha = sparsemax over aligned word-vector similarities."""
    if alpha is None:
        raise ValueError("the 'monolingual' initialiser needs alpha from aligned word vectors "
                         "(ramen.alignment.monolingual.monolingual_alpha)")
    return parallel_init(source_embeddings, source_bias, foreign_vocab, source_vocab, alpha=alpha,
                         generator=generator, special_tokens=special_tokens)
