"""Optimisation shared by every loop: AdamW's parameter groups, the learning-rate schedules, and
:class:`Updates`, the update itself: the forward pass under the precision's autocast, fp16 loss
scaling, gradient accumulation over micro-batches of one batch, clipping, the optimiser and
schedule step.

The schedules themselves are functions of plain numbers in :mod:`ramen.training.schedules`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence

import torch
from torch import nn

from ramen.training.precision import autocast_dtype
from ramen.training.schedules import warmup_linear_decay


def decay_groups(parameters: Iterable[nn.Parameter], weight_decay: float) -> list[dict]:
    """AdamW parameter groups: weight decay on matrices, none on biases and norms."""
    decay, no_decay = [], []
    for param in parameters:
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def linear_warmup_decay(optimizer: torch.optim.Optimizer, warmup_ratio: float, total_steps: int):
    """:func:`warmup_linear_decay` over the first ``warmup_ratio`` of ``total_steps`` updates, as a
    schedule object of ``optimizer`` (the fine-tuning loops checkpoint its state)."""
    warmup = int(warmup_ratio * total_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_linear_decay(step, warmup, total_steps))


# --- the update --------------------------------------------------------------------------------

def fused_adam(device: str) -> bool:
    # The fused kernel exists for CUDA and (since torch 2.4) the CPU, where it is about 4x faster
    # than the per-tensor loop.
    return torch.device(device).type in ("cuda", "cpu")


def micro_batches(rows, parts: int) -> list:
    """``rows`` (a batch's indices, or its size) in ``parts`` nearly equal consecutive pieces;
    fewer when the batch has fewer rows."""
    rows = torch.arange(rows) if isinstance(rows, int) else rows
    count = max(1, min(parts, len(rows)))
    bounds = [len(rows) * index // count for index in range(count + 1)]
    return [rows[bounds[index]:bounds[index + 1]] for index in range(count)]


class Updates:
    """Optimiser updates: autocast at the precision, fp16 loss scaling, clipping, the optimiser and
    (when given) the schedule step.

    ``batch(rows, loss_of)`` makes one update from a batch in ``accumulation`` micro-batches:
    ``loss_of(part)`` is the mean loss of a part of the rows, weighted by ``share(part)`` (its
    share of the batch's rows unless given), so the accumulated gradient is the whole batch's.
    A batch in one piece takes exactly the steps of a plain ``loss.backward(); optimizer.step()``.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, *, scheduler=None, max_grad_norm: float | None = None,
                 accumulation: int = 1, precision: str = "fp32", device: str = "cpu",
                 parameters: Sequence[nn.Parameter] | None = None):
        self.optimizer, self.scheduler = optimizer, scheduler
        self.max_grad_norm, self.accumulation = max_grad_norm, accumulation
        self.parameters = list(parameters) if parameters is not None else [
            param for group in optimizer.param_groups for param in group["params"]]
        self.device_type = torch.device(device).type
        self.dtype = autocast_dtype(precision, device)
        self.scaler = torch.amp.GradScaler(self.device_type, enabled=self.dtype == torch.float16)

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self) -> None:
        """Unscale, clip, step the optimiser (skipped by the fp16 scaler on overflow) and schedule."""
        self.scaler.unscale_(self.optimizer)
        if self.max_grad_norm:
            nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None:
            self.scheduler.step()

    def batch(self, rows, loss_of: Callable, share: Callable | None = None) -> float:
        """One update from ``rows`` in micro-batches; the batch's mean loss."""
        parts = micro_batches(rows, self.accumulation)
        total = 0.0
        for part in parts:
            with self.autocast():
                loss = loss_of(part)
            if len(parts) > 1:
                loss = loss * (share(part) if share else len(part) / sum(len(p) for p in parts))
            self.backward(loss)
            total += float(loss.detach())
        self.step()
        return total

    def state_dict(self) -> dict:
        state = {"optimizer": self.optimizer.state_dict()}
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        if self.scaler.is_enabled():
            state["scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: Mapping) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler.is_enabled() and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
