"""The approximation objectives of §3.1: cosine, L2, neighbour MSE and cross-entropy against the table.

``predicted`` and ``target`` are (n, d); ``table`` is the frozen (V, d) embedding table
and ``rows`` the (n,) table rows the predictions stand for.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch.nn import functional as F

from ramen.char2subword.loss_names import LOSSES  # noqa: F401 (the losses this module defines)


def cosine_loss(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cosine distance 1 - cos(e, ê): keeps the angular arrangement of the table."""
    return (1.0 - F.cosine_similarity(predicted, target, dim=-1)).mean()


def l2_loss(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean Euclidean distance ||e - ê||: keeps the magnitudes the upper layers expect."""
    return (predicted - target).norm(dim=-1).mean()


def neighbour_loss(predicted: torch.Tensor, target: torch.Tensor, neighbours: torch.Tensor) -> torch.Tensor:
    """MSE between the cosine distances of e to its k nearest table rows and those of ê to the same rows.

    ``neighbours``: (n, k, d), the rows nearest to each target (see :func:`nearest_rows`).
    """
    unit_neighbours = F.normalize(neighbours, dim=-1)
    target_cos = torch.einsum("nkd,nd->nk", unit_neighbours, F.normalize(target, dim=-1))
    predicted_cos = torch.einsum("nkd,nd->nk", unit_neighbours, F.normalize(predicted, dim=-1))
    return F.mse_loss(predicted_cos, target_cos)


def cross_entropy_loss(predicted: torch.Tensor, table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """-log softmax(ê Eᵀ)[row]: ê must map back to its own subword through the frozen table."""
    return F.cross_entropy(predicted @ table.T, rows)


@torch.no_grad()
def nearest_rows(table: torch.Tensor, k: int, chunk_rows: int = 4096, include_self: bool = False) -> torch.Tensor:
    """(V, k) indices of each row's k nearest rows by cosine, computed in chunks of rows."""
    unit = F.normalize(table.float(), dim=-1)
    out = torch.empty(len(table), k, dtype=torch.long)
    for start in range(0, len(table), chunk_rows):
        similarity = unit[start : start + chunk_rows] @ unit.T
        if not include_self:
            own = torch.arange(start, min(start + chunk_rows, len(table)))
            similarity[own - start, own] = float("-inf")
        out[start : start + chunk_rows] = similarity.topk(k, dim=-1).indices
    return out


def approximation_loss(predicted: torch.Tensor, table: torch.Tensor, rows: torch.Tensor, weights: Mapping[str, float],
                       neighbours: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The weighted sum of the switched-on objectives (weight > 0) and each one's value."""
    target = table[rows]
    parts: dict[str, torch.Tensor] = {}
    if weights.get("ce", 0) > 0:
        parts["ce"] = cross_entropy_loss(predicted, table, rows)
    if weights.get("cos", 0) > 0:
        parts["cos"] = cosine_loss(predicted, target)
    if weights.get("l2", 0) > 0:
        parts["l2"] = l2_loss(predicted, target)
    if weights.get("nbr", 0) > 0:
        if neighbours is None:
            raise ValueError("the neighbour loss needs the nearest rows of the table")
        parts["nbr"] = neighbour_loss(predicted, target, table[neighbours[rows]])
    if not parts:
        raise ValueError(f"no approximation loss is switched on: give one of {LOSSES} a positive weight")
    total = sum(weights[name] * value for name, value in parts.items())
    return total, {name: float(value.detach()) for name, value in parts.items()}
