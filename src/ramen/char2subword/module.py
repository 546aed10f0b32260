"""The char2subword module (Appendix A): characters -> one subword embedding.

Character embeddings plus sinusoidal positions pass through ``layers`` attention
layers of ``heads`` heads at width ``dim`` (d'); a linear map to the model width d,
max-pooling over characters and a LayerNorm give the embedding. The layers
normalise each component's input and add the *normalised* input back, as the
appendix writes it (X' = MHA(LN(X)) + LN(X); X_next = FFN(LN(X')) + LN(X')).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn

from ramen.errors import InputFormatError
from ramen.io import atomic_path

PAD, UNK, MASK = 0, 1, 2
SPECIAL_SYMBOLS = ("<pad>", "<unk>", "<mask>")
# Subword markers of the common tokenizer families; stripped, so that tables of different
# conventions (WordPiece "##", fastBPE "@@", "</w>", byte-level "Ġ", SentencePiece "▁") meet
# on the bare characters.
PREFIX_MARKERS = ("##", "Ġ", "▁")
SUFFIX_MARKERS = ("@@", "</w>")


def strip_markers(token: str) -> str:
    """The characters of a subword without its tokenizer's continuation or word-boundary marker."""
    for marker in PREFIX_MARKERS:
        if token.startswith(marker) and len(token) > len(marker):
            token = token[len(marker):]
            break
    for marker in SUFFIX_MARKERS:
        if token.endswith(marker) and len(token) > len(marker):
            token = token[: -len(marker)]
            break
    return token


class CharVocab:
    """Character ids: three reserved symbols (padding, unknown, mask), then characters."""

    def __init__(self, characters: Iterable[str]):
        self.characters = list(dict.fromkeys(c for c in characters if len(c) == 1))
        self.index = {c: i + len(SPECIAL_SYMBOLS) for i, c in enumerate(self.characters)}

    @classmethod
    def from_strings(cls, strings: Iterable[str], extra: str = "") -> CharVocab:
        """Every character of ``strings``, their other case, and ``extra`` (e.g. noise punctuation)."""
        seen: dict[str, None] = {}
        for text in strings:
            for c in text:
                seen.setdefault(c)
                for other in (c.upper(), c.lower()):
                    if len(other) == 1:
                        seen.setdefault(other)
        for c in extra:
            seen.setdefault(c)
        return cls(sorted(seen))

    def __len__(self) -> int:
        return len(SPECIAL_SYMBOLS) + len(self.characters)

    def ids(self, text: str) -> list[int]:
        return [self.index.get(c, UNK) for c in text]

    def encode(self, texts: Sequence[str], max_chars: int) -> torch.Tensor:
        """(n, width) character ids, padded with PAD; width = the longest text, at most ``max_chars``.

        An empty text becomes one UNK, so that every row has a character to pool.
        """
        rows = [self.ids(text)[:max_chars] or [UNK] for text in texts]
        width = max((len(row) for row in rows), default=1)
        out = torch.full((len(rows), width), PAD, dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        return out


@dataclass(frozen=True)
class ModuleConfig:
    output_dim: int  # d: the width of the embedding table it replaces
    dim: int = 256  # d': the character width throughout the attention layers
    layers: int = 2
    heads: int = 4
    max_chars: int = 32
    dropout: float = 0.0


def sinusoidal_positions(length: int, dim: int) -> torch.Tensor:
    """Vaswani et al.'s fixed encodings, (length, dim)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate[: dim // 2])
    return table


class AttentionLayer(nn.Module):
    """Multi-head attention then a GELU feed-forward (4 d'), each on a LayerNorm-ed input."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.attention_norm = nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.ffn_norm = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        normed = self.attention_norm(x)
        attended, _ = self.attention(normed, normed, normed, key_padding_mask=padding, need_weights=False)
        x = self.dropout(attended) + normed
        normed = self.ffn_norm(x)
        return self.dropout(self.ffn(normed)) + normed


class Char2Subword(nn.Module):
    """f_theta: (n, M) character ids -> (n, d) embeddings."""

    def __init__(self, config: ModuleConfig, chars: CharVocab):
        super().__init__()
        if config.dim % config.heads:
            raise ValueError(f"char2subword dim {config.dim} is not a multiple of heads {config.heads}")
        self.config = config
        self.chars = chars
        self.char_embeddings = nn.Embedding(len(chars), config.dim, padding_idx=PAD)
        self.register_buffer("positions", sinusoidal_positions(config.max_chars, config.dim), persistent=False)
        self.layers = nn.ModuleList(AttentionLayer(config.dim, config.heads, config.dropout)
                                    for _ in range(config.layers))
        self.projection = nn.Linear(config.dim, config.output_dim)
        self.norm = nn.LayerNorm(config.output_dim)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        char_ids = char_ids[:, : self.config.max_chars]
        padding = char_ids == PAD
        x = self.char_embeddings(char_ids) + self.positions[: char_ids.shape[1]]
        for layer in self.layers:
            x = layer(x, padding)
        projected = self.projection(x).masked_fill(padding[..., None], float("-inf"))
        return self.norm(projected.max(dim=1).values)

    def embed(self, texts: Sequence[str], bucket_rows: int = 64) -> torch.Tensor:
        """Embeddings of raw character strings (markers are the caller's business).

        Strings of similar length go through together in buckets of ``bucket_rows``, so that
        a long string does not pad a whole batch of short ones.
        """
        device = self.projection.weight.device
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        parts = [self(self.chars.encode([texts[i] for i in order[start : start + bucket_rows]],
                                        self.config.max_chars).to(device))
                 for start in range(0, len(order), bucket_rows)]
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
        return torch.cat(parts)[inverse.to(device)]

    @torch.inference_mode()
    def embed_all(self, texts: Sequence[str], batch_size: int = 1024) -> torch.Tensor:
        """Embeddings of many strings in batches, in evaluation mode, without gradients."""
        was_training = self.training
        self.eval()
        try:
            parts = [self.embed(texts[start : start + batch_size]).float().cpu()
                     for start in range(0, len(texts), batch_size)]
            return torch.cat(parts) if parts else torch.empty(0, self.config.output_dim)
        finally:
            self.train(was_training)


def save_module(module: Char2Subword, path: str | os.PathLike, **metadata) -> None:
    """Weights in safetensors; sizes, characters and ``metadata`` (JSON values) in its header."""
    from safetensors.torch import save_file

    header = {"config": json.dumps(asdict(module.config)), "characters": json.dumps(module.chars.characters)}
    header.update({key: json.dumps(value) for key, value in metadata.items()})
    state = {name: tensor.detach().cpu().contiguous() for name, tensor in module.state_dict().items()}
    with atomic_path(path) as tmp:
        save_file(state, str(tmp), metadata=header)


def load_module(path: str | os.PathLike) -> tuple[Char2Subword, dict]:
    """A saved module and the metadata saved with it."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as handle:
        header = handle.metadata() or {}
    if "config" not in header or "characters" not in header:
        raise InputFormatError(path, None, "not a char2subword module (no config in its header)",
                               "produce it with ramen.char2subword.module.save_module")
    config = ModuleConfig(**json.loads(header["config"]))
    module = Char2Subword(config, CharVocab(json.loads(header["characters"])))
    module.load_state_dict(load_file(str(path)))
    metadata = {key: json.loads(value) for key, value in header.items() if key not in ("config", "characters")}
    return module, metadata
