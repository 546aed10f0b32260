"""Initialisation from parallel data (RAMEN §2.1, eq. 1-2).

Each foreign row is the mixture E_f[i] = sum_j alpha[i, j] E_e[j] with
alpha[i, j] = p(e_j | f_i) from word alignment; the output bias is mixed the
same way.  Rows without alignment support keep an N(0, 1/d^2) draw and zero
bias; special tokens are copied from English.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch

from ramen.initializers.common import InitResult, check_shapes, copy_special_tokens, random_rows

# Rows of alpha multiplied per step; bounds the float32 temporaries to ~rows x d.
ROW_CHUNK = 4096


def parallel_init(
    source_embeddings: torch.Tensor,
    source_bias: torch.Tensor,
    foreign_vocab: list[str],
    source_vocab: list[str],
    *,
    alpha,
    generator: torch.Generator,
    special_tokens: Sequence[str] | None = None,
) -> InitResult:
    """Foreign rows = alpha @ E_e and bias = alpha @ b_e where alpha has support."""
    check_shapes(source_embeddings, source_bias, source_vocab)
    if alpha is None:
        raise ValueError("the 'parallel' initialiser needs alpha = p(e|f) from word alignment")
    alpha = sp.csr_matrix(alpha)
    n_f, n_e = len(foreign_vocab), len(source_vocab)
    if alpha.shape != (n_f, n_e):
        raise ValueError(
            f"alpha has shape {alpha.shape} but the vocabularies need ({n_f}, {n_e}); "
            "was it estimated with other vocabularies?"
        )
    if alpha.nnz and alpha.data.min() < 0:
        raise ValueError("alpha has negative entries; expected probabilities p(e|f)")
    row_sums = np.asarray(alpha.sum(axis=1)).ravel()
    has_support = np.diff(alpha.indptr) > 0
    off = np.flatnonzero(has_support & (np.abs(row_sums - 1.0) > 1e-3))
    if len(off):
        raise ValueError(
            f"alpha row {int(off[0])} ({foreign_vocab[off[0]]!r}) sums to {row_sums[off[0]]:.4f}, "
            "expected 1; pass probabilities (translation_probabilities), not counts"
        )

    source_embeddings = source_embeddings.detach()
    source_bias = source_bias.detach()
    dim = source_embeddings.shape[1]
    # Drawn for every row, so a seed gives the same random rows as random_init.
    embeddings = random_rows(n_f, dim, generator, like=source_embeddings)
    bias = torch.zeros(n_f, dtype=source_bias.dtype, device=source_bias.device)

    table = source_embeddings.cpu().float().numpy()
    alpha32 = alpha.astype(np.float32)
    rows = np.flatnonzero(has_support)
    for start in range(0, len(rows), ROW_CHUNK):
        idx = rows[start : start + ROW_CHUNK]
        mixed = np.asarray(alpha32[idx] @ table)
        embeddings[torch.from_numpy(idx).to(embeddings.device)] = torch.from_numpy(mixed).to(
            device=embeddings.device, dtype=embeddings.dtype
        )
    mixed_bias = alpha @ source_bias.cpu().double().numpy()
    bias_rows = torch.from_numpy(rows).to(bias.device)
    bias[bias_rows] = torch.from_numpy(mixed_bias[rows]).to(device=bias.device, dtype=bias.dtype)

    supported = torch.from_numpy(has_support.copy())
    copied = copy_special_tokens(
        embeddings, bias, supported, source_embeddings, source_bias, foreign_vocab, source_vocab, special_tokens
    )
    return InitResult(embeddings=embeddings, bias=bias, supported=supported, copied_special_tokens=copied)
