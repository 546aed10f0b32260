"""The learning-rate schedules of every loop, each one function of plain numbers (the step and the
schedule's settings) and torch-free, so a loop that sets the rate per step, one that multiplies a
base rate (``torch.optim.lr_scheduler.LambdaLR``) and the settings checked while the job graph is
built all get the same values."""

from __future__ import annotations

import math


def inverse_sqrt(step: int, peak: float, warmup: int, init: float = 0.0) -> float:
    """Linear warm-up from ``init`` to ``peak`` over ``warmup`` steps, then ``peak·sqrt(warmup/step)``
    (fairseq's inverse_sqrt; RAMEN §3.3). ``warmup`` 0: ``peak·sqrt(1/step)`` from the first step."""
    if warmup > 0 and step < warmup:
        return init + (peak - init) * step / warmup
    return peak * math.sqrt(max(warmup, 1) / max(step, 1))


def warmup_cosine(step: int, warmup: int, total: int) -> float:
    """A factor of the base rate: linear warm-up to 1 over ``warmup`` steps (counted from step 0,
    as ``LambdaLR`` counts), then cosine decay to 0 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def warmup_linear_decay(step: int, warmup: int, total: int) -> float:
    """A factor of the base rate: linear warm-up from 0 over ``warmup`` steps, then linear decay to 0
    at ``total``."""
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))
