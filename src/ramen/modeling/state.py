"""Moving weights from one model into another of a different class without losing any: every
converted or exported model is filled through :func:`load_every_weight`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import nn


def load_every_weight(target: nn.Module, state: Mapping[str, torch.Tensor], what: str,
                      filled_elsewhere: Iterable[str] = ()) -> None:
    """``target.load_state_dict(state, strict=False)``, refused when it would lose weights: a key of
    ``state`` that ``target`` has no place for, or a parameter of ``target`` left unfilled other than
    ``filled_elsewhere`` (new parameters, tied ones, those the caller sets itself). ``what`` names
    the operation in the error."""
    missing, unexpected = target.load_state_dict(state, strict=False)
    left_out = set(missing) - set(filled_elsewhere)
    if left_out or unexpected:
        raise RuntimeError(f"{what} would lose weights: missing {sorted(left_out)}, unexpected {sorted(unexpected)}")
