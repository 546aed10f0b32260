"""Next-token prediction on packed windows of each language: the objective of a bilingual causal LM
(ramen.modeling.causal) built from a decoder source.

Each step draws, for every language, windows of ``seq_len`` tokens starting at random sentence
starts (BOS first, EOS after every sentence: ramen.modeling.causal.packed_windows) from
(seed, step, language, micro-step), with the same batch shares as the masked-LM objectives
(equal, or p ~ m^alpha with ``objectives.sampling_alpha``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import torch

from ramen.errors import ConfigError
from ramen.modeling.causal import BilingualCausalLM, CausalBatch, packed_windows
from ramen.objectives.base import BatchShape, ObjectiveSettings, language_shares
from ramen.objectives.contract import TrainingObjective
from ramen.training.batches import step_rng
from ramen.vocab.encode import TokenStream

log = logging.getLogger(__name__)


class CausalLanguageModeling(TrainingObjective):
    """The training objective of :class:`BilingualCausalLM` (a table per language, or one
    extended vocabulary): a mean next-token loss per language."""

    name = "clm"

    def __init__(self, model: BilingualCausalLM, streams: Mapping[str, TokenStream],
                 specials: Mapping[str, Mapping[str, int]], shape: BatchShape | None,
                 settings: ObjectiveSettings | None = None):
        super().__init__()
        if not isinstance(model, BilingualCausalLM):
            raise ConfigError("variants.*.objective", "objective 'clm' trains a causal LM, the source is a "
                              f"{type(model).__name__}", "use a decoder source, or a masked-LM objective")
        self.model = model
        self.streams, self.specials, self.shape = dict(streams), dict(specials), shape
        self.settings = settings or ObjectiveSettings()
        for lang in self.streams:
            if "eos" not in self.specials.get(lang, {}):
                # Every side's tokenizer takes its special tokens from the source's (ramen.vocab.byte_bpe).
                raise ConfigError("source.model", f"{lang}'s tokenizer has no EOS token",
                                  "a causal LM's windows separate sentences with EOS: use a source whose tokenizer "
                                  "has one")
        self._counts = {}
        if self.streams:
            self._counts = language_shares({lang: s.num_tokens for lang, s in self.streams.items()},
                                           shape.batch_size * len(self.streams), self.settings.sampling_alpha,
                                           self.settings.source_share)
            log.info("objective clm: windows per batch %s", self._counts)

    @classmethod
    def build(cls, model: BilingualCausalLM, streams, specials, shape: BatchShape, settings: ObjectiveSettings,
              pairs=None) -> "CausalLanguageModeling":
        if pairs is not None:
            raise ConfigError("variants.*.objective", "objective 'clm' trains on monolingual text only")
        return cls(model, streams, specials, shape, settings)

    @classmethod
    def for_export(cls, model: BilingualCausalLM, settings: ObjectiveSettings) -> "CausalLanguageModeling":
        return cls(model, {}, {}, None, settings)

    # --- what the training loop asks (ramen.objectives.contract); the rest are its defaults ---

    def step_batches(self, step: int, micro: int) -> dict[str, CausalBatch]:
        accumulation = self.shape.grad_accumulation
        batches = {}
        for index, (lang, stream) in enumerate(self.streams.items()):
            ids = self.specials[lang]
            batches[lang] = packed_windows(
                stream.offsets, stream.ids, step_rng(self.shape.seed, step, index * 1000 + micro),
                max(1, self._counts[lang] // accumulation), self.shape.seq_len,
                bos=ids.get("bos"), eos=ids["eos"], pad=ids.get("pad", ids["eos"]))
        return batches

    def forward(self, batches: Mapping[str, CausalBatch]) -> dict[str, torch.Tensor]:
        return self.model(batches)

    def compile_encoder(self) -> None:
        """torch.compile the shared stack in place (parameter names and checkpoints stay as they are)."""
        self.model.lm.base_model.compile()
