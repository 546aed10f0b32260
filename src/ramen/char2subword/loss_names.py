"""The approximation losses by name: what the workflow reads while it builds the job graph.

Kept apart from ``losses`` so that reading a config does not import torch.
"""

from __future__ import annotations

from collections.abc import Mapping

from ramen.errors import ConfigError

LOSSES = ("ce", "cos", "l2", "nbr")


def losses_name(weights: Mapping[str, float]) -> str:
    """"ce+cos+l2+nbr": the switched-on losses in a fixed order (file names, table rows)."""
    return "+".join(name for name in LOSSES if weights.get(name, 0) > 0)


def losses_from_name(name: str, weights: Mapping[str, float]) -> dict[str, float]:
    """The weights of the losses a name switches on (their configured weight, or 1 when switched off there)."""
    chosen = name.split("+")
    unknown = [loss for loss in chosen if loss not in LOSSES]
    if unknown:
        raise ConfigError("char2subword.table2", f"unknown losses {unknown}", f"choose from {list(LOSSES)}")
    return {loss: (weights.get(loss) or 1.0) if loss in chosen else 0.0 for loss in LOSSES}
