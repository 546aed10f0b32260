"""Language-adaptive focal loss (Guo et al., "Learning Multilingual Representation for Natural
Language Understanding with Enhanced Cross-Lingual Supervision", eq. 7).

Masked-token cross-entropy is re-weighted by alpha * (1 - p_t)^gamma_l, where
gamma_l is 0 (plain cross-entropy) for a stream until that stream is learnt well:
its cross-entropy is at most ``loss_threshold`` and the step is at least
``min_step``. A stream is one language of one data type (monolingual text, or one
side of translation pairs); once switched it stays switched. The step each stream
switched at is a buffer of the module, so checkpoints carry it and a resumed run
re-weights exactly as an uninterrupted one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

log = logging.getLogger(__name__)


@dataclass
class FocalSettings:
    enabled: bool = False
    alpha: float = 0.25
    gamma: float = 2.0
    loss_threshold: float = 5.0  # L_T
    min_step: int = 0  # S


def focal_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, gamma: float, alpha: float) -> torch.Tensor:
    """Mean of alpha * (1 - p_t)^gamma * CE over the rows (Lin et al.'s focal loss for classification)."""
    log_probs = F.log_softmax(logits.float(), dim=-1).gather(1, targets[:, None]).squeeze(1)
    weight = alpha * (1.0 - log_probs.exp()).pow(gamma)
    return (weight * -log_probs).mean()


class AdaptiveFocal(nn.Module):
    """Per-stream switch from cross-entropy to focal loss."""

    def __init__(self, streams: Sequence[str], settings: FocalSettings):
        super().__init__()
        self.streams = list(streams)
        self.settings = settings
        # 0: not switched; else the step it switched at (steps count from 1).
        self.register_buffer("switched_at", torch.zeros(len(self.streams), dtype=torch.long))

    def switched(self) -> dict[str, int]:
        return {stream: int(step) for stream, step in zip(self.streams, self.switched_at.tolist()) if step}

    def forward(self, stream: str, logits: torch.Tensor, targets: torch.Tensor, step: int) -> torch.Tensor:
        cross_entropy = F.cross_entropy(logits.float(), targets)
        if not self.settings.enabled:
            return cross_entropy
        index = self.streams.index(stream)
        if not self.switched_at[index] and step >= self.settings.min_step:
            mean = _mean_over_processes(cross_entropy.detach())
            if mean <= self.settings.loss_threshold:
                self.switched_at[index] = step
                log.info("stream %s switches to focal loss at step %d (cross-entropy %.4f <= %g)",
                         stream, step, mean, self.settings.loss_threshold)
        if self.switched_at[index]:
            return focal_cross_entropy(logits, targets, self.settings.gamma, self.settings.alpha)
        return cross_entropy


def _mean_over_processes(value: torch.Tensor) -> float:
    """The batch's mean over every process, so that all of them switch at the same step."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        value = value.clone()
        dist.all_reduce(value)
        value /= dist.get_world_size()
    return float(value)
