"""A Transformer NMT model, optionally with a frozen BERT fused into every layer.

BERT-fused NMT (Zhu et al., ICLR 2020): the source sentence is also read by a
frozen BERT, whose last-layer states H_B are attended to by every encoder layer
(eq. 1: h = ½·(attn_S(h, H_E) + attn_B(h, H_B))) and every decoder layer (eq. 2:
s = ½·(attn_B(s, H_B) + attn_E(s, H_E))). Drop-net (eq. 3–4) trains each layer,
for a whole batch, with only one of the two attentions with probability p_net/2
each; inference uses the expectation, which is eq. 1–2.

Layers are post-norm like fairseq's ``transformer`` (the paper's code base), so a
plain model's parameters load into a fused one unchanged: the fused layers only
add ``bert_attn`` modules.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class NmtModelConfig:
    vocab_size: int
    pad_id: int
    layers: int = 6
    dim: int = 512
    ffn_dim: int = 1024
    heads: int = 4
    dropout: float = 0.3
    max_positions: int = 1024
    # BERT fusion: bert_dim None is the plain Transformer.
    bert_dim: int | None = None
    bert_encoder_attention: bool = True
    bert_decoder_attention: bool = True
    drop_net: float = 1.0

    def to_dict(self) -> dict:
        return asdict(self)


def sinusoidal_positions(count: int, dim: int) -> torch.Tensor:
    """The fixed sine/cosine position table of Vaswani et al. (sin half, then cos half)."""
    half = dim // 2
    frequencies = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
    angles = torch.arange(count, dtype=torch.float32)[:, None] * frequencies[None, :]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if dim % 2:
        table = torch.cat([table, torch.zeros(count, 1)], dim=1)
    return table


def drop_net(first: Callable[[], torch.Tensor], second: Callable[[], torch.Tensor], rate: float,
             training: bool) -> torch.Tensor:
    """Eq. 3–4: one branch alone w.p. rate/2 each, their mean otherwise; the mean at inference.

    Branches are callables so the one a training step drops is never computed.
    """
    if training and rate > 0:
        draw = float(torch.rand(()))
        if draw < rate / 2:
            return first()
        if draw > 1 - rate / 2:
            return second()
    return 0.5 * (first() + second())


class Attention(nn.Module):
    """Multi-head attention; keys and values may come from a space of another width (BERT)."""

    def __init__(self, dim: int, heads: int, key_dim: int | None = None):
        super().__init__()
        if dim % heads:
            raise ValueError(f"model dim {dim} is not divisible by {heads} heads")
        key_dim = key_dim or dim
        self.heads = heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(key_dim, dim)
        self.value = nn.Linear(key_dim, dim)
        self.out = nn.Linear(dim, dim)
        for linear in (self.query, self.key, self.value, self.out):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def _split(self, states: torch.Tensor) -> torch.Tensor:
        batch, length, dim = states.shape
        return states.view(batch, length, self.heads, dim // self.heads).transpose(1, 2)

    def keys_values(self, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected keys and values, split into heads (cached once per sentence when decoding)."""
        return self._split(self.key(keys)), self._split(self.value(keys))

    def attend(self, queries: torch.Tensor, keys_values: tuple[torch.Tensor, torch.Tensor],
               key_padding: torch.Tensor | None, causal: bool = False) -> torch.Tensor:
        """``key_padding`` is True at padded key positions; ``causal`` hides later positions."""
        (k, v), q = keys_values, self._split(self.query(queries))
        allowed = None
        if key_padding is not None:
            allowed = ~key_padding[:, None, None, :]
        if causal:
            lower = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
            allowed = lower if allowed is None else allowed & lower
        mixed = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        batch, _, length, _ = mixed.shape
        return self.out(mixed.transpose(1, 2).reshape(batch, length, -1))

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, key_padding: torch.Tensor | None,
                causal: bool = False) -> torch.Tensor:
        return self.attend(queries, self.keys_values(keys), key_padding, causal)


class FeedForward(nn.Module):
    def __init__(self, dim: int, ffn_dim: int, dropout: float):
        super().__init__()
        self.fc1 = nn.Linear(dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, dim)
        self.dropout = nn.Dropout(dropout)
        for linear in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc2(F.relu(self.fc1(states))))


class EncoderLayer(nn.Module):
    def __init__(self, config: NmtModelConfig, fuse_bert: bool):
        super().__init__()
        self.config = config
        self.self_attn = Attention(config.dim, config.heads)
        self.bert_attn = Attention(config.dim, config.heads, config.bert_dim) if fuse_bert else None
        self.attn_norm = nn.LayerNorm(config.dim)
        self.ffn = FeedForward(config.dim, config.ffn_dim, config.dropout)
        self.ffn_norm = nn.LayerNorm(config.dim)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, states, padding, bert_states=None, bert_padding=None):
        def self_attention():
            return self.dropout(self.self_attn(states, states, padding))

        if self.bert_attn is None:
            attended = self_attention()
        else:
            def bert_attention():
                return self.dropout(self.bert_attn(states, bert_states, bert_padding))

            attended = drop_net(self_attention, bert_attention, self.config.drop_net, self.training)
        states = self.attn_norm(states + attended)
        return self.ffn_norm(states + self.ffn(states))


class DecoderLayer(nn.Module):
    def __init__(self, config: NmtModelConfig, fuse_bert: bool):
        super().__init__()
        self.config = config
        self.self_attn = Attention(config.dim, config.heads)
        self.self_attn_norm = nn.LayerNorm(config.dim)
        self.encoder_attn = Attention(config.dim, config.heads)
        self.bert_attn = Attention(config.dim, config.heads, config.bert_dim) if fuse_bert else None
        self.cross_attn_norm = nn.LayerNorm(config.dim)
        self.ffn = FeedForward(config.dim, config.ffn_dim, config.dropout)
        self.ffn_norm = nn.LayerNorm(config.dim)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, states, padding, memory, memory_padding, bert_states=None, bert_padding=None):
        states = self.self_attn_norm(states + self.dropout(self.self_attn(states, states, padding, causal=True)))
        return self._cross_and_ffn(
            states,
            lambda: self.encoder_attn(states, memory, memory_padding),
            None if self.bert_attn is None else lambda: self.bert_attn(states, bert_states, bert_padding),
        )

    def _cross_and_ffn(self, states, encoder_attention, bert_attention):
        def encoder_branch():
            return self.dropout(encoder_attention())

        if bert_attention is None:
            attended = encoder_branch()
        else:
            def bert_branch():
                return self.dropout(bert_attention())

            attended = drop_net(bert_branch, encoder_branch, self.config.drop_net, self.training)
        states = self.cross_attn_norm(states + attended)
        return self.ffn_norm(states + self.ffn(states))

    def step(self, states, cache: dict, memory_padding, bert_padding=None):
        """One new position per row (inference). ``cache`` holds this layer's self-attention keys
        and values of earlier positions and the projected encoder and BERT states."""
        new_keys, new_values = self.self_attn.keys_values(states)
        if "self" in cache:
            new_keys = torch.cat([cache["self"][0], new_keys], dim=2)
            new_values = torch.cat([cache["self"][1], new_values], dim=2)
        cache["self"] = (new_keys, new_values)
        states = self.self_attn_norm(states + self.self_attn.attend(states, cache["self"], None))
        return self._cross_and_ffn(
            states,
            lambda: self.encoder_attn.attend(states, cache["memory"], memory_padding),
            None if self.bert_attn is None else lambda: self.bert_attn.attend(states, cache["bert"], bert_padding),
        )


class TransformerNmt(nn.Module):
    """Encoder-decoder Transformer with one embedding table shared by both sides and the output layer.

    The vocabulary is a joint source-target BPE, so sharing the table is the
    natural choice (fairseq's ``share_all_embeddings``).
    """

    def __init__(self, config: NmtModelConfig):
        super().__init__()
        self.config = config
        fused = config.bert_dim is not None
        self.embed_tokens = nn.Embedding(config.vocab_size, config.dim, padding_idx=config.pad_id)
        nn.init.normal_(self.embed_tokens.weight, mean=0.0, std=config.dim ** -0.5)
        with torch.no_grad():
            self.embed_tokens.weight[config.pad_id].zero_()
        self.register_buffer("positions", sinusoidal_positions(config.max_positions, config.dim), persistent=False)
        self.embed_scale = math.sqrt(config.dim)
        self.dropout = nn.Dropout(config.dropout)
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(config, fused and config.bert_encoder_attention) for _ in range(config.layers)
        )
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(config, fused and config.bert_decoder_attention) for _ in range(config.layers)
        )

    def embed(self, ids: torch.Tensor, first_position: int = 0) -> torch.Tensor:
        last = first_position + ids.shape[1]
        if last > self.config.max_positions:
            raise ValueError(f"sequence of {last} tokens exceeds max_positions={self.config.max_positions}")
        return self.dropout(self.embed_scale * self.embed_tokens(ids) + self.positions[first_position:last])

    def encode(self, source_ids, bert_states=None, bert_padding=None):
        """Encoder states and the source padding mask (True at padding)."""
        padding = source_ids.eq(self.config.pad_id)
        states = self.embed(source_ids)
        for layer in self.encoder_layers:
            states = layer(states, padding, bert_states, bert_padding)
        return states, padding

    def decode(self, target_ids, memory, memory_padding, bert_states=None, bert_padding=None):
        """Next-token logits at every target position (teacher forcing)."""
        padding = target_ids.eq(self.config.pad_id)
        states = self.embed(target_ids)
        for layer in self.decoder_layers:
            states = layer(states, padding, memory, memory_padding, bert_states, bert_padding)
        return F.linear(states, self.embed_tokens.weight)

    def start_cache(self, memory, bert_states=None) -> list[dict]:
        """Per decoder layer: the encoder and BERT states projected to keys and values once."""
        return [
            {"memory": layer.encoder_attn.keys_values(memory),
             **({"bert": layer.bert_attn.keys_values(bert_states)} if layer.bert_attn is not None else {})}
            for layer in self.decoder_layers
        ]

    def decode_step(self, last_ids, position: int, cache: list[dict], memory_padding, bert_padding=None):
        """Next-token logits after one more target token per row (``last_ids``: [rows, 1]).

        Equals ``decode(...)[:, -1]`` on the whole prefix, at the cost of one position.
        """
        states = self.embed(last_ids, first_position=position)
        for layer, layer_cache in zip(self.decoder_layers, cache):
            states = layer.step(states, layer_cache, memory_padding, bert_padding)
        return F.linear(states[:, -1], self.embed_tokens.weight)

    def forward(self, source_ids, target_input_ids, bert_states=None, bert_padding=None):
        memory, memory_padding = self.encode(source_ids, bert_states, bert_padding)
        return self.decode(target_input_ids, memory, memory_padding, bert_states, bert_padding)


def warm_start(fused: TransformerNmt, plain_state: Mapping[str, torch.Tensor]) -> list[str]:
    """Copy a trained plain model into a fused one; the BERT attentions keep their random init.

    Returns the names loaded. Anything else missing or left over is an error:
    the two models must share everything but the ``bert_attn`` modules.
    """
    expected = fused.state_dict()
    missing = sorted(name for name in set(expected) - set(plain_state) if ".bert_attn." not in name)
    unexpected = sorted(set(plain_state) - set(expected))
    reshaped = sorted(name for name in set(plain_state) & set(expected)
                      if plain_state[name].shape != expected[name].shape)
    if missing or unexpected or reshaped:
        raise ValueError(
            f"the plain NMT model does not match the fused one: missing {missing[:5]}, unexpected "
            f"{unexpected[:5]}, other shapes {reshaped[:5]}; train both with the same model settings"
        )
    fused.load_state_dict(plain_state, strict=False)
    return sorted(plain_state)
