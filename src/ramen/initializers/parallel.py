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

from ramen.initializers.common import InitResult, Mixture, check_shapes, mixture_result, special_copies


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

    mixture = Mixture(shape=(n_f, n_e), weights=alpha,
                      special=special_copies(foreign_vocab, source_vocab, special_tokens))
    return mixture_result(mixture, source_embeddings, source_bias, generator=generator)
