"""BERT with a gated relative position bias in every self-attention (XLM-E, after WavLM).

Self-contained (torch and transformers only): the export copies this file next to
the weights and names its classes in config.json's ``auto_map``, so a model loads
without the package that trained it::

    AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=True)

For a head h with query q_i, key position j and a learnt bucketed relative-position
bias d_{i-j} (T5's bidirectional log buckets, one table shared by all layers as in
WavLM and XLM-E), each layer adds to the attention logits

    g_update = sigmoid(q_i . u),  g_reset = sigmoid(q_i . w)
    r~_{i-j} = s * g_reset * d_{i-j}
    r_{i-j}  = d_{i-j} + g_update * d_{i-j} + (1 - g_update) * r~_{i-j}

with u, w (head size) and the scalar s learnt per layer and head (WavLM, Chen et al.
2022; XLM-E, Chi et al. 2022, §3). BERT's absolute position embeddings stay.
d starts at zero, so a converted BERT computes exactly what it computed before.
Relative distances come from ``position_ids`` when given (a concatenated translation
pair whose positions restart on its second side), else from the sequence index.
"""

from __future__ import annotations

import math

import torch
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import BertConfig, initialization as init
from transformers.models.bert.modeling_bert import (
    ALL_ATTENTION_FUNCTIONS,
    BertEmbeddings,
    BertEncoder,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    BertOnlyMLMHead,
    BertPooler,
    BertPreTrainedModel,
    BertSelfAttention,
    eager_attention_forward,
)

# Attention implementations that take an additive float mask (the bias rides in it).
ADDITIVE_MASK_ATTENTION = ("eager", "sdpa")


@strict
class RamenBertConfig(BertConfig):
    """BertConfig plus the relative position buckets of the gated bias."""

    model_type = "ramen-bert"

    relative_position_buckets: int = 32
    relative_position_max_distance: int = 128


def relative_position_bucket(relative_position: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bidirectional buckets of ``relative_position`` (key index minus query index).

    Half of the buckets for each sign; within a half, distances below a quarter of
    ``num_buckets`` get a bucket each, longer ones share logarithmically wider buckets
    up to ``max_distance``, beyond which all fall into the last bucket.
    """
    half = num_buckets // 2
    buckets = (relative_position > 0).long() * half
    distance = relative_position.abs()
    max_exact = half // 2
    scaled = torch.log(distance.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    far = (max_exact + (scaled * (half - max_exact)).long()).clamp(max=half - 1)
    return buckets + torch.where(distance < max_exact, distance, far)


def additive_mask(bias: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """One float mask holding the bias and the padding mask (boolean or additive)."""
    if attention_mask is None:
        return bias
    if attention_mask.dtype == torch.bool:
        return bias.masked_fill(~attention_mask, torch.finfo(bias.dtype).min)
    return bias + attention_mask.to(bias.dtype)


class RamenBertSelfAttention(BertSelfAttention):
    """BERT self-attention whose logits get the gated relative position bias."""

    def __init__(self, config, is_causal=False, layer_idx=None):
        super().__init__(config, is_causal=is_causal, layer_idx=layer_idx)
        heads, size = self.num_attention_heads, self.attention_head_size
        self.gate_update = nn.Parameter(torch.zeros(heads, size))  # u
        self.gate_reset = nn.Parameter(torch.zeros(heads, size))  # w
        self.gate_scale = nn.Parameter(torch.ones(heads))  # s

    def gated_bias(self, query: torch.Tensor, position_bias: torch.Tensor) -> torch.Tensor:
        """r of every (head, query, key): ``query`` (batch, heads, q, size), ``position_bias`` d (., heads, q, k)."""
        update = torch.sigmoid(torch.einsum("bhqd,hd->bhq", query, self.gate_update))
        reset = torch.sigmoid(torch.einsum("bhqd,hd->bhq", query, self.gate_reset))
        scale = self.gate_scale[None, :, None]
        # d + g_update d + (1 - g_update) s g_reset d, factored
        factor = 1 + update + (1 - update) * scale * reset
        return factor[..., None] * position_bias

    def forward(self, hidden_states, attention_mask=None, cache=None, relative_position_bias=None, **kwargs):
        if cache is not None:
            raise ValueError("RamenBertSelfAttention is an encoder attention: no key/value cache")
        implementation = self.config._attn_implementation
        if implementation not in ADDITIVE_MASK_ATTENTION:
            raise ValueError(f"the gated relative position bias needs attn_implementation in "
                             f"{ADDITIVE_MASK_ATTENTION}, not {implementation!r}")
        shape = (*hidden_states.shape[:-1], -1, self.attention_head_size)
        query = self.query(hidden_states).view(*shape).transpose(1, 2)
        key = self.key(hidden_states).view(*shape).transpose(1, 2)
        value = self.value(hidden_states).view(*shape).transpose(1, 2)
        if relative_position_bias is not None:
            bias = self.gated_bias(query, relative_position_bias).to(query.dtype)
            attention_mask = additive_mask(bias, attention_mask)
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
        output, weights = attention(self, query, key, value, attention_mask,
                                    dropout=self.dropout.p if self.training else 0.0, scaling=self.scaling, **kwargs)
        return output.reshape(*hidden_states.shape[:-1], -1).contiguous(), weights


class RamenBertEncoder(BertEncoder):
    """BERT's layers with gated self-attention, and the relative position table d they share."""

    def __init__(self, config):
        super().__init__(config)
        for index, layer in enumerate(self.layer):
            layer.attention.self = RamenBertSelfAttention(config, layer_idx=index)
        # (bucket, head), indexed directly so that no generic Embedding initialisation touches it
        self.relative_attention_bias = nn.Parameter(
            torch.zeros(config.relative_position_buckets, config.num_attention_heads))

    def position_bias(self, position_ids: torch.Tensor | None, length: int, device) -> torch.Tensor:
        """d for every (head, query, key): (batch or 1, heads, length, length)."""
        positions = torch.arange(length, device=device)[None] if position_ids is None else position_ids
        relative = positions[:, None, :] - positions[:, :, None]
        buckets = relative_position_bucket(relative, self.config.relative_position_buckets,
                                           self.config.relative_position_max_distance)
        return self.relative_attention_bias[buckets].permute(0, 3, 1, 2)

    def forward(self, hidden_states, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None,
                cache=None, use_cache=None, **kwargs):
        bias = self.position_bias(kwargs.get("position_ids"), hidden_states.shape[1], hidden_states.device)
        return super().forward(hidden_states, attention_mask, encoder_hidden_states, encoder_attention_mask,
                               cache=cache, use_cache=use_cache, relative_position_bias=bias, **kwargs)


class RamenBertPreTrainedModel(BertPreTrainedModel):
    config_class = RamenBertConfig
    config: RamenBertConfig
    _supports_flash_attn = False
    _supports_flex_attn = False

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, RamenBertEncoder):
            init.zeros_(module.relative_attention_bias)
        elif isinstance(module, RamenBertSelfAttention):
            init.normal_(module.gate_update, std=self.config.initializer_range)
            init.normal_(module.gate_reset, std=self.config.initializer_range)
            init.ones_(module.gate_scale)


class RamenBertModel(RamenBertPreTrainedModel, BertModel):
    def __init__(self, config: RamenBertConfig, add_pooling_layer: bool = True):
        RamenBertPreTrainedModel.__init__(self, config)
        self.config = config
        self.gradient_checkpointing = False
        self.embeddings = BertEmbeddings(config)
        self.encoder = RamenBertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.post_init()


class RamenBertForMaskedLM(RamenBertPreTrainedModel, BertForMaskedLM):
    def __init__(self, config: RamenBertConfig):
        RamenBertPreTrainedModel.__init__(self, config)
        self.bert = RamenBertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()


class RamenBertForSequenceClassification(RamenBertPreTrainedModel, BertForSequenceClassification):
    def __init__(self, config: RamenBertConfig):
        RamenBertPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.config = config
        self.bert = RamenBertModel(config)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


class RamenBertForTokenClassification(RamenBertPreTrainedModel, BertForTokenClassification):
    def __init__(self, config: RamenBertConfig):
        RamenBertPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.bert = RamenBertModel(config, add_pooling_layer=False)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


# The Auto class each model class stands for (config.json's auto_map, and registration).
AUTO_CLASSES = {
    "AutoModel": RamenBertModel,
    "AutoModelForMaskedLM": RamenBertForMaskedLM,
    "AutoModelForSequenceClassification": RamenBertForSequenceClassification,
    "AutoModelForTokenClassification": RamenBertForTokenClassification,
}
