"""RAMEN's initialiser of an extension's new rows: the alignment mixture and the subword mean together.

For a new token f with alignment support (alpha = p(e|f) from the parallel text encoded with the
extended tokenizer, as ``parallel`` reads it) and pieces (its segmentation by the source
tokenizer, as ``fvt`` reads it), the row mixes both:

    E_f = w * sum_e alpha[f, e] E_e + (1 - w) * mean of E over f's pieces,   w = alignment_weight

A token without alignment support gets the subword mean alone, one without pieces the alignment
mixture alone, one with neither the N(0, 1/d^2) draw of ``random``. Both parts are mixtures of
source rows, so the whole is one: the output bias, and untied output rows, are built with the same
weights. The alignment mixture brings what the token means (French " maison" toward " house");
the subword mean keeps the row where the model reads the same text today, cut into the source's
pieces, and covers the tokens the alignment never saw. ``alignment_weight`` 1 is "alignment where
aligned, the subword mean elsewhere"; 0 is ``fvt``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch

from ramen.initializers.common import InitResult
from ramen.initializers.parallel import parallel_init
from ramen.initializers.pieces import piece_weights, uniform


def combined_weights(alpha, subword: sp.csr_matrix, alignment_weight: float) -> sp.csr_matrix:
    """Per row: ``alignment_weight`` x alpha + the rest x subword mean where both have support,
    whichever has support otherwise."""
    if not 0.0 <= alignment_weight <= 1.0:
        raise ValueError(f"alignment_weight is {alignment_weight}, expected a share between 0 and 1")
    alpha = sp.csr_matrix(alpha)
    aligned = np.diff(alpha.indptr) > 0
    segmented = np.diff(subword.indptr) > 0
    share = np.where(aligned & segmented, alignment_weight, aligned.astype(float))
    combined = (sp.diags(share) @ alpha + sp.diags(1.0 - share) @ subword).tocsr()
    combined.eliminate_zeros()
    return combined


def parallel_fvt_init(
    source_embeddings: torch.Tensor,
    source_bias: torch.Tensor,
    foreign_vocab: list[str],
    source_vocab: list[str],
    *,
    alpha,
    generator: torch.Generator,
    special_tokens: Sequence[str] | None = None,
    pieces: Sequence[Sequence[int]],
    alignment_weight: float = 0.5,
) -> InitResult:
    """Rows and biases of the combined weights (checked as ``parallel`` checks alpha)."""
    if alpha is None:
        raise ValueError("the 'parallel_fvt' initialiser needs alpha = p(e|f) from word alignment")
    subword = piece_weights(pieces, len(source_vocab), uniform)
    if sp.csr_matrix(alpha).shape != subword.shape:
        raise ValueError(f"alpha has shape {sp.csr_matrix(alpha).shape} but the vocabularies need {subword.shape}; "
                         "was it estimated with other vocabularies?")
    weights = combined_weights(alpha, subword, alignment_weight)
    result = parallel_init(source_embeddings, source_bias, foreign_vocab, source_vocab, alpha=weights,
                           generator=generator, special_tokens=special_tokens)
    result.weights = weights
    return result
