"""Translation language modelling: masked-LM on concatenated translation pairs, alternating with
monolingual masked-LM batches.

``tlm`` runs a pair through the encoder's usual (mixed) attention, as XLM does;
``tlm-da`` through decomposed attention (Guo et al., eq. 5; ramen.objectives.attention).
Monolingual batches always use the plain encoder, which is what is exported.
"""

from __future__ import annotations

import torch

from ramen.objectives.attention import cross_lingual_layers, decomposed_encode
from ramen.objectives.base import Objective, PairBatch


class TranslationLM(Objective):
    name = "tlm"

    def pair_hidden(self, pair: PairBatch) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encode_pair(self.model.mlm.base_model, pair)

    def pair_losses(self, pair: PairBatch) -> dict[str, torch.Tensor]:
        source_hidden, foreign_hidden = self.pair_hidden(pair)
        source, foreign = self.model.source_lang, self.foreign_lang
        return {f"pair_{source}": self.masked_loss(f"pair_{source}", source, source_hidden, pair.source.labels),
                f"pair_{foreign}": self.masked_loss(f"pair_{foreign}", foreign, foreign_hidden, pair.foreign.labels)}


class DecomposedTranslationLM(TranslationLM):
    """TLM whose pairs pass intra-lingual then cross-lingual attention in every layer."""

    name = "tlm-da"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Built after the model is in place: CA blocks start as copies of each layer's FFN and LayerNorms.
        self.cross_attention = cross_lingual_layers(self.model.mlm.base_model, self.settings.decomposed_share)

    def pair_hidden(self, pair: PairBatch) -> tuple[torch.Tensor, torch.Tensor]:
        encoder = self.model.mlm.base_model
        embeds, positions, attention, side = self.pair_inputs(pair)
        hidden = decomposed_encode(encoder, self.cross_attention, embeds, positions, attention, side)
        return hidden.split([pair.source.input_ids.shape[1], pair.foreign.input_ids.shape[1]], dim=1)
