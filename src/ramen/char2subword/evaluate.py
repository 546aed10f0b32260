"""How well a module reproduces a table: accuracy and neighbour precision (Table 2).

Prec@k is the overlap between the k nearest table rows (cosine) of the true embedding
e_i and those of the module's ê_i, divided by k; the row itself counts as e_i's first
neighbour. The average precision is the mean of Prec@1 ... Prec@K. The accuracy is
the share of ê_i whose highest-scoring row (ê_i · Eᵀ, the cross-entropy's logits) is i.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch.nn import functional as F

from ramen.io import write_tsv as write_table


@torch.no_grad()
def neighbour_precision(predicted: torch.Tensor, table: torch.Tensor, rows: torch.Tensor, max_k: int = 15,
                        chunk_rows: int = 1024) -> dict[str, float]:
    """acc, p@1 ... p@max_k and ap of predictions (n, d) for table rows ``rows`` (n,)."""
    table = table.float()
    unit = F.normalize(table, dim=-1)
    correct = 0
    overlap = torch.zeros(max_k, dtype=torch.float64)
    for start in range(0, len(rows), chunk_rows):
        chunk = rows[start : start + chunk_rows]
        guess = predicted[start : start + chunk_rows].float()
        correct += int(((guess @ table.T).argmax(dim=-1) == chunk).sum())
        true = (unit[chunk] @ unit.T).topk(max_k, dim=-1).indices
        found = (F.normalize(guess, dim=-1) @ unit.T).topk(max_k, dim=-1).indices
        for k in range(1, max_k + 1):
            hits = (true[:, :k, None] == found[:, None, :k]).any(dim=-1).sum(dim=-1)
            overlap[k - 1] += (hits.double() / k).sum()
    n = max(len(rows), 1)
    precision = (overlap / n).tolist()
    result = {"acc": correct / n, **{f"p@{k}": precision[k - 1] for k in range(1, max_k + 1)}}
    result["ap"] = float(np.mean(precision))
    return result


def evaluation_rows(rows: np.ndarray, count: int | None, seed: int) -> np.ndarray:
    """A seeded sample of ``count`` rows (all when None or larger); the same for every stage."""
    if count is None or count >= len(rows):
        return np.asarray(rows)
    return np.sort(np.random.default_rng(seed).choice(rows, size=count, replace=False))


def evaluate_module(module, table: torch.Tensor, strings: Sequence[str], rows: np.ndarray, *, max_k: int = 15,
                    noise_seed: int = 0, operations: Sequence[str], noise_min_length: int = 5) -> dict[str, float]:
    """Clean precision over ``rows`` and, over the rows long enough for noise, precision with one edit each."""
    from ramen.char2subword.noise import noise_string

    index = torch.from_numpy(np.asarray(rows, dtype=np.int64))
    clean = neighbour_precision(module.embed_all([strings[i] for i in rows]), table, index, max_k)
    long_rows = [i for i in rows if len(strings[i]) >= noise_min_length]
    rng = random.Random(noise_seed)
    noisy_texts = [noise_string(strings[i], rng, operations, noise_min_length) for i in long_rows]
    noisy = neighbour_precision(module.embed_all(noisy_texts), table, torch.tensor(long_rows, dtype=torch.long), max_k)
    return {**clean, "rows": len(rows), "noisy_rows": len(long_rows), "noisy_acc": noisy["acc"],
            "noisy_p@1": noisy["p@1"], f"noisy_p@{max_k}": noisy[f"p@{max_k}"], "noisy_ap": noisy["ap"]}


def precision_columns(max_k: int) -> list[str]:
    return ["table", "stage", "losses", "noise_share", "rows", "acc", "p@1", "p@5", f"p@{max_k}", "ap",
            "noisy_rows", "noisy_acc", "noisy_p@1", f"noisy_p@{max_k}", "noisy_ap"]


def write_tsv(rows: Sequence[Mapping], columns: Sequence[str], path: str | os.PathLike) -> None:
    write_table(path, rows, columns, missing="NA", digits=4)
