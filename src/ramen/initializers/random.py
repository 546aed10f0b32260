"""Random initialisation: the paper's 'rnd' baseline (§5, Table 3)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ramen.initializers.common import InitResult, check_shapes, copy_special_tokens, random_rows


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
    source_embeddings = source_embeddings.detach()
    source_bias = source_bias.detach()
    n_f, dim = len(foreign_vocab), source_embeddings.shape[1]
    embeddings = random_rows(n_f, dim, generator, like=source_embeddings)
    bias = torch.zeros(n_f, dtype=source_bias.dtype, device=source_bias.device)
    supported = torch.zeros(n_f, dtype=torch.bool)
    copied = copy_special_tokens(
        embeddings, bias, supported, source_embeddings, source_bias, foreign_vocab, source_vocab, special_tokens
    )
    return InitResult(embeddings=embeddings, bias=bias, supported=supported, copied_special_tokens=copied)
