"""Initialisation by character composition (char2subword): foreign rows from a module trained on English.

The module learns to compose each English subword's embedding from its characters;
run over the foreign subword strings (markers stripped the same way on both sides), it
gives every foreign subword a row in the English space, shared characters carrying
over. The output bias of a row is the English bias under softmax(ê Eᵀ), the
distribution the module's cross-entropy objective was trained on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ramen.initializers.common import InitResult, check_shapes, copy_special_tokens, random_rows


def composed_bias(embeddings: torch.Tensor, source_embeddings: torch.Tensor, source_bias: torch.Tensor,
                  chunk_rows: int = 2048) -> torch.Tensor:
    """softmax(ê Eᵀ) @ b_e for every row, in chunks (a full V_f x V_e matrix is not needed)."""
    out = torch.empty(len(embeddings), dtype=source_bias.dtype)
    table = source_embeddings.float()
    for start in range(0, len(embeddings), chunk_rows):
        probabilities = torch.softmax(embeddings[start : start + chunk_rows].float() @ table.T, dim=-1)
        out[start : start + chunk_rows] = (probabilities @ source_bias.float()).to(out.dtype)
    return out


def char2subword_init(
    source_embeddings: torch.Tensor,
    source_bias: torch.Tensor,
    foreign_vocab: list[str],
    source_vocab: list[str],
    *,
    alpha=None,
    generator: torch.Generator,
    special_tokens: Sequence[str] | None = None,
    module=None,
    sizes: Mapping | None = None,
    settings: Mapping | None = None,
) -> InitResult:
    """Foreign rows = module(characters of each foreign subword); special tokens copied from English.

    ``module``: a trained :class:`~ramen.char2subword.module.Char2Subword` (the workflow passes
    the English approximation). Without one, a module of ``sizes`` is trained here on the
    English table with ``settings`` (:class:`~ramen.char2subword.approximate.ApproximationSettings`
    keyword arguments). ``alpha`` is ignored; it is accepted to keep the common signature.
    """
    from ramen.char2subword.approximate import (
        ApproximationSettings,
        approximable_rows,
        approximate,
        new_module,
        subword_strings,
    )
    from ramen.initializers.common import DEFAULT_SPECIAL_TOKENS
    from ramen.glue import settings_from

    check_shapes(source_embeddings, source_bias, source_vocab)
    source_embeddings = source_embeddings.detach()
    source_bias = source_bias.detach()
    specials = DEFAULT_SPECIAL_TOKENS if special_tokens is None else tuple(special_tokens)
    if module is None:
        config = settings_from(ApproximationSettings, settings, "char2subword.approximation")
        english_strings = subword_strings(source_vocab)
        module = new_module(source_embeddings, english_strings, sizes or {}, config.seed)
        approximate(module, source_embeddings, english_strings, approximable_rows(source_vocab, specials), config,
                    progress=False)
    if module.config.output_dim != source_embeddings.shape[1]:
        raise ValueError(f"the char2subword module has width {module.config.output_dim} but the English table "
                         f"{source_embeddings.shape[1]}")
    n_f, dim = len(foreign_vocab), source_embeddings.shape[1]
    embeddings = random_rows(n_f, dim, generator, like=source_embeddings)
    bias = torch.zeros(n_f, dtype=source_bias.dtype)
    supported = torch.zeros(n_f, dtype=torch.bool)
    rows = torch.from_numpy(approximable_rows(foreign_vocab, specials))
    if len(rows):
        strings = subword_strings(foreign_vocab)
        composed = module.embed_all([strings[i] for i in rows.tolist()]).to(embeddings.dtype)
        embeddings[rows] = composed
        bias[rows] = composed_bias(composed, source_embeddings, source_bias)
        supported[rows] = True
    copied = copy_special_tokens(
        embeddings, bias, supported, source_embeddings, source_bias, foreign_vocab, source_vocab, specials
    )
    return InitResult(embeddings=embeddings, bias=bias, supported=supported, copied_special_tokens=copied)
