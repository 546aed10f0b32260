"""A saved tokenizer loaded, and its vocabulary in id order: what every later stage reads a vocabulary with."""

from __future__ import annotations

import os

from ramen.errors import ConfigError, RamenError


def load_tokenizer(directory: str | os.PathLike):
    """The tokenizer saved in a model, vocabulary or classifier directory, or in a GGUF source
    (ramen.data.checkpoints): the one loader."""
    from transformers import AutoTokenizer

    from ramen.data.checkpoints import is_gguf_source, locate_source

    try:
        if is_gguf_source(directory):
            location = locate_source(directory)
            return AutoTokenizer.from_pretrained(location.directory, **location.load_kwargs())
        return AutoTokenizer.from_pretrained(directory)
    except (OSError, ValueError) as error:
        raise RamenError(f"{directory}: cannot load the tokenizer: {error}") from error


def ordered_vocab(tokenizer) -> list[str]:
    """Token strings in id order."""
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    tokens = [token for token, _ in by_id]
    if [index for _, index in by_id] != list(range(len(tokens))):
        raise ConfigError("tokenizer", f"{tokenizer.name_or_path}: token ids are not contiguous")
    return tokens
