"""Weights read from a saved model directory without building the model where possible, and
the quiet loading of a language side whose MLM head goes unused."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

import torch

from ramen.errors import RamenError
from ramen.modeling.architectures import register_architectures


@contextlib.contextmanager
def quiet_transformers():
    """Silence load reports: the MLM head of a language side is expected to be unused."""
    from transformers.utils import logging as hf_logging

    old = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(old)


def read_word_embeddings(
    embedding_dir: str | os.PathLike, name: str = "embeddings.word_embeddings.weight"
) -> torch.Tensor:
    """Return the input word-embedding matrix stored in a model directory.

    Reads just that tensor from safetensors when possible (a language side
    may carry a large MLM head that is not needed); otherwise loads the model.
    ``name`` is the parameter name inside the bare encoder; checkpoints of
    task models prefix it (``bert.``, ``roberta.``), so suffixes match too.
    """
    from safetensors import safe_open

    embedding_dir = Path(embedding_dir)
    if not (embedding_dir / "config.json").is_file():
        raise RamenError(f"{embedding_dir}: not a model directory (no config.json)")

    def pick(keys: Iterable[str]) -> str | None:
        found = [k for k in keys if k == name or k.endswith("." + name)]
        return min(found, key=len) if found else None

    single = embedding_dir / "model.safetensors"
    index = embedding_dir / "model.safetensors.index.json"
    shard = key = None
    if single.is_file():
        with safe_open(str(single), framework="pt") as handle:
            key = pick(handle.keys())
        shard = single
    elif index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        key = pick(weight_map)
        shard = embedding_dir / weight_map[key] if key else None
    if key is not None:
        with safe_open(str(shard), framework="pt") as handle:
            return handle.get_tensor(key).to(torch.float32)

    from transformers import AutoModelForMaskedLM

    register_architectures()
    with quiet_transformers():
        model = AutoModelForMaskedLM.from_pretrained(embedding_dir, dtype=torch.float32)
    return model.get_input_embeddings().weight.detach().clone()
