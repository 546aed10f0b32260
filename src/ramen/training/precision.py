"""Numeric precision of a training loop: the autocast dtype a ``precision`` setting (auto, fp32, bf16,
fp16; checked by :func:`ramen.training.settings.check_precision`) means on a device. fp16's loss scaling is part of the update
(:class:`ramen.training.optimisation.Updates`)."""

from __future__ import annotations

import torch


def autocast_dtype(precision: str, device: str) -> torch.dtype | None:
    """The autocast dtype for a precision setting on a device (None: plain fp32)."""
    if precision == "auto":
        cuda = device.startswith("cuda") and torch.cuda.is_available()
        precision = "bf16" if cuda and torch.cuda.is_bf16_supported() else "fp32"
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
