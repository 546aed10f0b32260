"""The contract between a training objective and the training loop, for every source family.

:func:`ramen.training.trainer.train` optimises, checkpoints and exports a :class:`TrainingObjective`:
the module that holds a bilingual model (a masked LM's, ramen.modeling.bilingual, or a causal
LM's, ramen.modeling.causal) and its training data, draws each step's batches from (seed, step)
and returns one loss per stream. Every objective of the registry (ramen.objectives.OBJECTIVES)
is a subclass, masked and causal alike; the models carry no trainer hooks of their own.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping

import torch
from torch import nn


class TrainingObjective(nn.Module, abc.ABC):
    """What the training loop asks of an objective. Members without a body here must be given;
    the others have the defaults a bilingual model's objective usually wants."""

    name = "base"  # the objective's name in the registry and its progress bar
    model: nn.Module  # the bilingual model: ``languages``, ``parameter_groups()``, ``export_language()``

    @classmethod
    @abc.abstractmethod
    def build(cls, model: nn.Module, streams: Mapping, specials: Mapping, shape, settings,
              pairs=None) -> "TrainingObjective":
        """The objective training ``model`` on ``streams`` (encoded text per language), with the
        special token ids of each language, the batch shape and its ObjectiveSettings; ``pairs``:
        encoded translation pairs, for objectives that train on them."""

    @classmethod
    @abc.abstractmethod
    def for_export(cls, model: nn.Module, settings) -> "TrainingObjective":
        """The objective's modules without training data, to load a checkpoint into and export."""

    def stream_names(self) -> list[str]:
        """The losses it reports, one per stream (each language by default)."""
        return list(self.model.languages)

    def batch_key(self, stream: str) -> str:
        """The key of the batch a stream's loss comes from."""
        return stream

    def begin_step(self, step: int) -> None:
        """Called before each update's batches are drawn; batches depend only on (seed, step)."""

    @abc.abstractmethod
    def step_batches(self, step: int, micro: int) -> dict:
        """A micro-step's batches by key, drawn from (seed, step, micro)."""

    @abc.abstractmethod
    def forward(self, batches: Mapping) -> dict[str, torch.Tensor]:
        """A mean loss per stream."""

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by role (ramen.training.trainer.PARAMETER_GROUPS), for staged training."""
        return self.model.parameter_groups()

    def metrics(self) -> dict[str, str]:
        """Extra columns of the metrics file."""
        return {}

    @abc.abstractmethod
    def compile_encoder(self) -> None:
        """torch.compile the shared stack in place (parameter names and checkpoints unchanged)."""

    def export_language(self, lang: str, tokenizer, out_dir) -> None:
        """Save ``lang``'s side as a standard Hugging Face directory with its tokenizer."""
        self.model.export_language(lang, tokenizer, out_dir)
