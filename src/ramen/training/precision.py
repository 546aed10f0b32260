"""Numeric precision of a training loop: the autocast dtype a ``precision`` setting (auto, fp32, bf16,
fp16; checked by :func:`ramen.training.settings.check_precision`) means on a device. fp16's loss scaling is part of the update
(:class:`ramen.training.optimisation.Updates`)."""

from __future__ import annotations

import torch

from ramen.training.settings import resolved_precision


def autocast_dtype(precision: str, device: str) -> torch.dtype | None:
    """The autocast dtype for a precision setting on a device (None: plain fp32), as
    :func:`ramen.training.settings.resolved_precision` decides it with this machine's GPU."""
    cuda = device.startswith("cuda") and torch.cuda.is_available()
    # Asked only for a CUDA device: the question initialises CUDA.
    resolved = resolved_precision(precision, device, bf16_supported=cuda and torch.cuda.is_bf16_supported())
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[resolved]
