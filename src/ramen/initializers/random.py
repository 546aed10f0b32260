"""Random initialisation: the paper's 'rnd' baseline (§5, Table 3)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ramen.initializers.common import InitResult, Mixture, check_shapes, mixture_result, special_copies


def random_init(
    source_embeddings: torch.Tensor,
    source_bias: torch.Tensor,
    foreign_vocab: list[str],
    source_vocab: list[str],
    *,
    alpha=None,
    generator: torch.Generator,
    special_tokens: Sequence[str] | None = None,
) -> InitResult:
    """All rows from N(0, 1/d^2), zero bias; special tokens copied from English.

    ``alpha`` is ignored; it is accepted to keep the common signature.
    """
    check_shapes(source_embeddings, source_bias, source_vocab)
    mixture = Mixture(shape=(len(foreign_vocab), len(source_vocab)),
                      special=special_copies(foreign_vocab, source_vocab, special_tokens))
    return mixture_result(mixture, source_embeddings, source_bias, generator=generator)
