"""What every evaluation task shares: loading a language side's encoder, thread limits, seeded
subsets and the result tables."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ramen.modeling.architectures import register_architectures
from ramen.modeling.weights import quiet_transformers
from ramen.errors import RamenError
from ramen.io import write_tsv


# Tried in order: SDPA attention is much faster on CPU; the pooler is unused
# by our pooling, so it is dropped where the architecture allows it.
ENCODER_OPTIONS = (
    {"attn_implementation": "sdpa", "add_pooling_layer": False},
    {"attn_implementation": "sdpa"},
    {"add_pooling_layer": False},
    {},
)


def load_encoder(model_dir: str | os.PathLike) -> tuple[nn.Module, dict]:
    from transformers import AutoModel

    register_architectures()
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise RamenError(f"{model_dir}: not a model directory (no config.json)")
    last_error: Exception | None = None
    with quiet_transformers():
        for options in ENCODER_OPTIONS:
            try:
                encoder = AutoModel.from_pretrained(model_dir, dtype=torch.float32, **options)
                return encoder, dict(options)
            except (TypeError, ValueError) as error:
                last_error = error
    raise RamenError(f"{model_dir}: cannot load the encoder: {last_error}") from last_error


def encoder_from_config(config, options: Mapping[str, Any]) -> nn.Module:
    from transformers import AutoModel

    register_architectures()
    with quiet_transformers():
        try:
            return AutoModel.from_config(config, dtype=torch.float32, **options)
        except (TypeError, ValueError):
            # SDPA may be unavailable in this environment; weights are the same either way.
            rest = {k: v for k, v in options.items() if k != "attn_implementation"}
            return AutoModel.from_config(config, dtype=torch.float32, **rest)


def ensure_padding(tokenizer):
    """Pad on the right, with EOS when the tokenizer has no pad token (most decoders)."""
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise RamenError(f"{getattr(tokenizer, 'name_or_path', 'tokenizer')}: no pad and no EOS token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@contextlib.contextmanager
def torch_threads(threads: int | None):
    """Use ``threads`` intra-op threads inside the block, then restore."""
    if not threads:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def subsample(examples: Sequence, limit: int | None, seed: int) -> list:
    """A seeded subset of ``limit`` items in their original order (all of them without a limit)."""
    if limit is None or limit >= len(examples):
        return list(examples)
    generator = torch.Generator().manual_seed(seed)
    keep = sorted(torch.randperm(len(examples), generator=generator)[:limit].tolist())
    return [examples[i] for i in keep]


def write_table(path: str | os.PathLike, rows: Iterable[Mapping], columns: Sequence[str]) -> int:
    """A task's results table: a TSV with a header (missing values empty), written atomically."""
    return write_tsv(path, rows, columns)
