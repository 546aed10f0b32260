"""Sparsemax over a similarity matrix, row chunk by row chunk (RAMEN eq. 3).

``alpha = sparsemax(t * F Eᵀ)`` for |V_f| x |V_e| vocabularies would be a dense
matrix of several GiB; it is computed here ``chunk_rows`` rows at a time and
kept as a sparse CSR matrix, so only one chunk of similarities ever exists.

Sparsemax (Martins & Astudillo, 2016) of a row z is ``max(z - tau, 0)`` where
tau is fixed by the sorted values: with z_(1) >= z_(2) >= ..., the support
size is the largest s with ``1 + s z_(s) > z_(1) + ... + z_(s)`` and
``tau = (z_(1) + ... + z_(s) - 1) / s``.  Only the largest values matter, and
the support of a similarity row is tiny (a few entries out of tens of
thousands), so rather than sorting whole rows this takes the ``k`` largest per
row (``torch.topk``) and solves on those.  The condition above is monotone in
s, so when the support found is smaller than k it is the exact support; rows
whose support fills all k are solved again with a larger k (up to a full sort).
The result equals full sparsemax.
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp
import torch
from tqdm import tqdm

logger = logging.getLogger(__name__)

# The first top-k tried per row; support sizes of similarity rows are usually below it.
INITIAL_K = 32
CHUNK_ROWS = 2048


def _threshold_on_sorted(top: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tau and support size of sparsemax for rows whose leading values are ``top`` (sorted descending)."""
    positions = torch.arange(1, top.shape[1] + 1, device=top.device, dtype=top.dtype)
    cumulative = top.cumsum(dim=1)
    in_support = 1 + positions * top > cumulative
    support = in_support.sum(dim=1)
    tau = (cumulative.gather(1, (support - 1).unsqueeze(1)).squeeze(1) - 1) / support.to(top.dtype)
    return tau, support


def sparsemax_threshold(z: torch.Tensor, k: int = INITIAL_K) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact sparsemax threshold tau (r,) and support size (r,) of each row of ``z`` (r, n).

    Rows must be finite where they matter: ``-inf`` marks entries that can never
    be in the support (at least one entry per row must be finite).
    """
    n = z.shape[1]
    k = min(max(k, 1), n)
    tau = torch.empty(z.shape[0], dtype=z.dtype, device=z.device)
    support = torch.empty(z.shape[0], dtype=torch.long, device=z.device)
    pending = torch.arange(z.shape[0], device=z.device)
    while len(pending):
        rows = z[pending] if len(pending) < z.shape[0] else z
        top = torch.topk(rows, k, dim=1, sorted=True).values if k < n else torch.sort(rows, dim=1, descending=True).values
        # -inf entries never belong to the support; keep them out of the cumulative sums.
        top = torch.where(torch.isfinite(top), top, torch.finfo(top.dtype).min / 4)
        row_tau, row_support = _threshold_on_sorted(top)
        tau[pending] = row_tau
        support[pending] = row_support
        if k == n:
            break
        pending = pending[row_support == k]
        k = min(4 * k, n)
    return tau, support


def sparsemax(z: torch.Tensor, k: int = INITIAL_K) -> torch.Tensor:
    """Dense sparsemax of each row of ``z`` (r, n); equal to the full-sort definition."""
    tau, _ = sparsemax_threshold(z, k)
    return torch.clamp(z - tau.unsqueeze(1), min=0)


def sparsemax_rows_sparse(z: torch.Tensor, k: int = INITIAL_K) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sparsemax of each row of ``z`` as CSR parts (indptr, indices, data) without a dense result.

    The support of a row whose support is smaller than k lies within its top k,
    so only the few other rows are compared against their threshold in full.
    """
    k = min(max(k, 1), z.shape[1])
    top = torch.topk(z, k, dim=1, sorted=True)
    values = torch.where(torch.isfinite(top.values), top.values, torch.finfo(z.dtype).min / 4)
    tau, support = _threshold_on_sorted(values)
    rows_parts, cols_parts, data_parts = [], [], []
    inside = (support < k) if k < z.shape[1] else torch.ones_like(support, dtype=torch.bool)
    keep = (top.values > tau.unsqueeze(1)) & inside.unsqueeze(1)
    rows, slots = keep.nonzero(as_tuple=True)
    rows_parts.append(rows)
    cols_parts.append(top.indices[rows, slots])
    data_parts.append(top.values[rows, slots] - tau[rows])
    wide = torch.nonzero(~inside, as_tuple=True)[0]
    if len(wide):
        wide_tau, _ = sparsemax_threshold(z[wide], 4 * k)
        wide_rows, wide_cols = (z[wide] > wide_tau.unsqueeze(1)).nonzero(as_tuple=True)
        rows_parts.append(wide[wide_rows])
        cols_parts.append(wide_cols)
        data_parts.append(z[wide[wide_rows], wide_cols] - wide_tau[wide_rows])
    rows = torch.cat(rows_parts)
    order = torch.argsort(rows * z.shape[1] + torch.cat(cols_parts))
    counts = torch.bincount(rows, minlength=z.shape[0]).numpy()
    indptr = np.concatenate(([0], np.cumsum(counts)))
    return indptr, torch.cat(cols_parts)[order].numpy(), torch.cat(data_parts)[order].numpy()


def sparsemax_alpha(
    foreign: torch.Tensor,
    english: torch.Tensor,
    *,
    temperature: float = 1.0,
    foreign_rows: torch.Tensor | None = None,
    english_columns: torch.Tensor | None = None,
    chunk_rows: int = CHUNK_ROWS,
    k: int = INITIAL_K,
    progress: bool = True,
) -> sp.csr_matrix:
    """``sparsemax(temperature * foreign @ englishᵀ)`` as a (V_f, V_e) float32 CSR matrix.

    ``foreign_rows`` (bool, V_f) selects the rows to compute; the others stay
    empty (no support).  ``english_columns`` (bool, V_e) selects the columns
    that may receive probability.  Each row with support sums to 1.
    """
    if foreign.dim() != 2 or english.dim() != 2 or foreign.shape[1] != english.shape[1]:
        raise ValueError(
            f"foreign {tuple(foreign.shape)} and English {tuple(english.shape)} vectors need the same dimension"
        )
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    n_f, n_e = foreign.shape[0], english.shape[0]
    if n_e == 0:
        raise ValueError("the English vocabulary is empty")
    # Columns that may not receive probability are left out of the product and indices mapped back.
    columns = torch.arange(n_e)
    if english_columns is not None:
        if not bool(english_columns.any()):
            raise ValueError("no English column may receive probability (english_columns is all False)")
        columns = torch.nonzero(english_columns, as_tuple=True)[0]
    english_t = (english[columns].float() * temperature).t().contiguous()
    column_ids = columns.numpy()
    rows_wanted = torch.arange(n_f) if foreign_rows is None else torch.nonzero(foreign_rows, as_tuple=True)[0]
    index_parts, data_parts = [], []
    counts = np.zeros(n_f, dtype=np.int64)
    for start in tqdm(range(0, len(rows_wanted), chunk_rows), desc="sparsemax alpha", unit="chunk",
                      disable=not progress):
        rows = rows_wanted[start : start + chunk_rows]
        scores = foreign[rows].float() @ english_t
        indptr, indices, data = sparsemax_rows_sparse(scores, k)
        counts[rows.numpy()] = np.diff(indptr)
        index_parts.append(column_ids[indices])
        data_parts.append(data.astype(np.float32))
    # Rows were computed in increasing order, so concatenation is already CSR order.
    indptr = np.concatenate(([0], np.cumsum(counts)))
    indices = np.concatenate(index_parts) if index_parts else np.zeros(0, dtype=np.int64)
    data = np.concatenate(data_parts) if data_parts else np.zeros(0, dtype=np.float32)
    alpha = sp.csr_matrix((data, indices, indptr), shape=(n_f, n_e))
    logger.info("sparsemax alpha: %d x %d, %d rows computed, %d non-zeros", n_f, n_e, len(rows_wanted), alpha.nnz)
    return alpha
