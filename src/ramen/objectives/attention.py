"""Decomposed attention (Guo et al., "Learning Multilingual Representation for Natural Language
Understanding with Enhanced Cross-Lingual Supervision", eq. 5) over the layers of a BERT-family encoder.

A translation pair runs as one concatenated sequence. Every layer first applies
intra-lingual attention (IA): the layer itself, with its Q/K/V projections, where
each token attends only to tokens of its own language. Then cross-lingual
attention (CA): each token's IA output queries the other language's IA outputs
directly, without Q/K/V (or output) projections, followed by a feed-forward
network and LayerNorms of its own (or, with ``share``, the layer's own ones:
DA-share, whose parameter count equals the plain encoder's).
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F


def decomposed_masks(side: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Boolean (batch, query, key) masks: IA keys are real tokens of the query's own language,
    CA keys real tokens of the other language. ``side`` holds each position's language (0/1)."""
    real_key = attention_mask.bool()[:, None, :]
    same = side[:, :, None] == side[:, None, :]
    return same & real_key, ~same & real_key


def _split_heads(hidden: torch.Tensor, heads: int) -> torch.Tensor:
    batch, length, width = hidden.shape
    return hidden.view(batch, length, heads, width // heads).transpose(1, 2)


def _merge_heads(hidden: torch.Tensor) -> torch.Tensor:
    batch, heads, length, size = hidden.shape
    return hidden.transpose(1, 2).reshape(batch, length, heads * size)


def intra_lingual(layer: nn.Module, hidden: torch.Tensor, mask: torch.Tensor, dropout: float,
                  position_bias: torch.Tensor | None = None) -> torch.Tensor:
    """The BERT layer itself (attention, output projection, LayerNorm, FFN) under an IA mask; with
    ``position_bias`` (d of a gated relative position bias) the layer's gated bias joins the logits."""
    attention = layer.attention.self
    heads = attention.num_attention_heads
    query, key, value = (_split_heads(projection(hidden), heads)
                         for projection in (attention.query, attention.key, attention.value))
    mask = mask[:, None]
    if position_bias is not None:
        bias = attention.gated_bias(query, position_bias).to(query.dtype)
        mask = bias.masked_fill(~mask, torch.finfo(bias.dtype).min)
    context = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout)
    attended = layer.attention.output(_merge_heads(context), hidden)
    return layer.output(layer.intermediate(attended), attended)


class CrossLingualAttention(nn.Module):
    """CA after a layer's IA: projection-free attention, then LayerNorm, FFN and LayerNorm."""

    def __init__(self, layer: nn.Module, share: bool):
        super().__init__()
        own = (lambda module: module) if share else copy.deepcopy
        self.heads = layer.attention.self.num_attention_heads
        self.attention_norm = own(layer.attention.output.LayerNorm)
        self.attention_dropout = nn.Dropout(layer.attention.output.dropout.p)
        self.intermediate = own(layer.intermediate)
        self.output = own(layer.output)  # dense, dropout, LayerNorm(x + residual)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor, dropout: float) -> torch.Tensor:
        states = _split_heads(hidden, self.heads)
        context = F.scaled_dot_product_attention(states, states, states, attn_mask=mask[:, None], dropout_p=dropout)
        attended = self.attention_norm(hidden + self.attention_dropout(_merge_heads(context)))
        return self.output(self.intermediate(attended), attended)


def cross_lingual_layers(encoder: nn.Module, share: bool) -> nn.ModuleList:
    """One CA block per layer of ``encoder`` (a BERT-family base model)."""
    return nn.ModuleList(CrossLingualAttention(layer, share) for layer in encoder.encoder.layer)


def decomposed_encode(encoder: nn.Module, cross: nn.ModuleList, inputs_embeds: torch.Tensor,
                      position_ids: torch.Tensor, attention_mask: torch.Tensor, side: torch.Tensor) -> torch.Tensor:
    """Last hidden states of a concatenated translation pair under decomposed attention."""
    hidden = encoder.embeddings(inputs_embeds=inputs_embeds, position_ids=position_ids)
    intra_mask, cross_mask = decomposed_masks(side, attention_mask)
    dropout = encoder.config.attention_probs_dropout_prob if encoder.training else 0.0
    position_bias = None
    if hasattr(encoder.encoder, "position_bias"):  # ramen-bert: relative distances from the restarting positions
        position_bias = encoder.encoder.position_bias(position_ids, hidden.shape[1], hidden.device)
    for layer, block in zip(encoder.encoder.layer, cross):
        hidden = intra_lingual(layer, hidden, intra_mask, dropout, position_bias)
        hidden = block(hidden, cross_mask, dropout)
    return hidden
