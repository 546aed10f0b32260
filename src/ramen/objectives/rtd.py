"""Replaced-token detection (ELECTRA; multilingual and translation RTD of "XLM-E: Cross-lingual Language Model
Pre-training via ELECTRA").

A smaller generator, trained with masked-LM, fills the masked positions with
tokens sampled from its predictions; the discriminator (the bilingual model's
encoder, the one exported and evaluated) predicts for every token whether it is
the original. Loss: L_G + lambda * L_D. The generator shares the embedding
tables, positions and embedding LayerNorm with the discriminator, as in ELECTRA,
and starts from the discriminator's first layers (the pretrained encoder's; XLM-E
trains both from scratch). ``rtd`` trains on monolingual text, ``trtd`` also on
concatenated translation pairs, alternating as the TLM objectives do.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from ramen.errors import ConfigError
from ramen.modeling.bilingual import IGNORE_INDEX, MaskedBatch
from ramen.objectives.base import Objective, PairBatch, output_scale


def original_ids(batch: MaskedBatch) -> torch.Tensor:
    """The uncorrupted input: the labels at masked positions, the input elsewhere."""
    return torch.where(batch.labels != IGNORE_INDEX, batch.labels, batch.input_ids)


def corrupt(batch: MaskedBatch, sampled: torch.Tensor) -> torch.Tensor:
    """The discriminator's input: the original with the generator's samples at masked positions."""
    corrupted = original_ids(batch).clone()
    corrupted[batch.labels != IGNORE_INDEX] = sampled
    return corrupted


def replaced_labels(batch: MaskedBatch, corrupted: torch.Tensor) -> torch.Tensor:
    """1.0 where a token differs from the original, 0.0 where it is the original (also where the
    generator sampled the original token back)."""
    return (corrupted != original_ids(batch)).float()


def build_generator(encoder: nn.Module, layers: int, rescale: bool) -> nn.Module:
    """An encoder of the first ``layers`` layers of ``encoder`` whose embedding module is ``encoder``'s."""
    config = copy.deepcopy(encoder.config)
    config.num_hidden_layers = layers
    generator = type(encoder)(config, add_pooling_layer=False)
    generator.embeddings = encoder.embeddings
    generator.encoder.layer = nn.ModuleList(copy.deepcopy(layer) for layer in encoder.encoder.layer[:layers])
    if rescale:
        with torch.no_grad():
            for number, layer in enumerate(generator.encoder.layer, start=1):
                layer.attention.output.dense.weight.mul_(output_scale(number))
                layer.output.dense.weight.mul_(output_scale(number))
    return generator


class ReplacedTokenDetection(Objective):
    name = "rtd"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        encoder = self.model.mlm.base_model
        depth = encoder.config.num_hidden_layers
        layers = self.settings.rtd.generator_layers or max(1, depth // 3)
        if not 1 <= layers <= depth:
            raise ConfigError("objectives.rtd.generator_layers", f"{layers} is not within 1..{depth}",
                              "give a generator smaller than the discriminator")
        self.generator = build_generator(encoder, layers, self.settings.rtd.rescale_init)
        self.generator_head = copy.deepcopy(self.model.head_transform)
        self.generator_bias = nn.ParameterDict({lang: nn.Parameter(self.model.output_bias(lang).detach().clone())
                                                for lang in self.model.languages})
        self.discriminator_head = nn.Linear(encoder.config.hidden_size, 1)

    def generate(self, lang: str, hidden: torch.Tensor, batch: MaskedBatch, stream: str):
        """The generator's masked-LM loss and its sampled tokens at the masked positions."""
        positions = batch.labels != IGNORE_INDEX
        logits = F.linear(self.generator_head(hidden[positions]), self.model.input_embeddings(lang).weight,
                          self.generator_bias[lang])
        loss = self.focal(stream, logits, batch.labels[positions], self.step)
        sampled = torch.multinomial(F.softmax(logits.detach().float(), dim=-1), 1).squeeze(1)
        return loss, sampled

    def detection_loss(self, hidden: torch.Tensor, batch: MaskedBatch, corrupted: torch.Tensor) -> torch.Tensor:
        """Binary cross-entropy of replaced/original over every real token."""
        logits = self.discriminator_head(hidden).squeeze(-1)
        real = batch.attention_mask.bool()
        return F.binary_cross_entropy_with_logits(logits[real].float(), replaced_labels(batch, corrupted)[real])

    def monolingual_losses(self, batches):
        generated = self.encode_monolingual(self.generator, batches)
        losses, corrupted = {}, {}
        for lang, batch in batches.items():
            losses[lang], sampled = self.generate(lang, generated[lang], batch, lang)
            corrupted[lang] = corrupt(batch, sampled)
        hidden = self.encode_monolingual(self.model.mlm.base_model, batches, inputs=corrupted)
        weight = self.settings.rtd.weight
        return {lang: losses[lang] + weight * self.detection_loss(hidden[lang], batch, corrupted[lang])
                for lang, batch in batches.items()}

    def pair_losses(self, pair: PairBatch):
        source, foreign = self.model.source_lang, self.foreign_lang
        sides = {source: pair.source, foreign: pair.foreign}
        generated = dict(zip(sides, self.encode_pair(self.generator, pair)))
        losses, corrupted = {}, {}
        for lang, batch in sides.items():
            losses[lang], sampled = self.generate(lang, generated[lang], batch, f"pair_{lang}")
            corrupted[lang] = corrupt(batch, sampled)
        hidden = dict(zip(sides, self.encode_pair(self.model.mlm.base_model, pair, source_ids=corrupted[source],
                                                  foreign_ids=corrupted[foreign])))
        weight = self.settings.rtd.weight
        return {f"pair_{lang}": losses[lang] + weight * self.detection_loss(hidden[lang], batch, corrupted[lang])
                for lang, batch in sides.items()}


class TranslationReplacedTokenDetection(ReplacedTokenDetection):
    name = "trtd"
