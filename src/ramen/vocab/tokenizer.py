"""A saved tokenizer loaded, and its vocabulary in id order: what every later stage reads a vocabulary with."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ramen.errors import InputFormatError, RamenError

# The class name that Hugging Face's generic fast tokenizer writes into tokenizer_config.json
# (every tokenizer ramen saves is one), under its transformers 5 and 4 names.
GENERIC_FAST_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})


def is_generic_fast_tokenizer(directory: str | os.PathLike) -> bool:
    """True for a directory holding tokenizer.json whose tokenizer_config.json names the generic
    fast class: AutoTokenizer would pick that very class."""
    directory = Path(directory)
    try:
        config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(config, dict) and config.get("tokenizer_class") in GENERIC_FAST_CLASSES
            and (directory / "tokenizer.json").is_file())


def load_tokenizer(directory: str | os.PathLike):
    """The tokenizer saved in a model, vocabulary or classifier directory, or in a GGUF source
    (ramen.data.checkpoints): the one loader."""
    from ramen.data.checkpoints import is_gguf_source, locate_source

    try:
        if is_gguf_source(directory):
            from transformers import AutoTokenizer

            location = locate_source(directory)
            return AutoTokenizer.from_pretrained(location.directory, **location.load_kwargs())
        if is_generic_fast_tokenizer(directory):
            # The class by name: AutoTokenizer's model-type lookup imports torch (about 2 CPU-s per
            # process), which the text-encoding jobs otherwise never need.
            from transformers import PreTrainedTokenizerFast

            return PreTrainedTokenizerFast.from_pretrained(directory)
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(directory)
    except (OSError, ValueError) as error:
        raise RamenError(f"{directory}: cannot load the tokenizer: {error}") from error


def ordered_vocab(tokenizer) -> list[str]:
    """Token strings in id order."""
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    tokens = [token for token, _ in by_id]
    if [index for _, index in by_id] != list(range(len(tokens))):
        # A file problem, not a setting: name the tokenizer.
        raise InputFormatError(tokenizer.name_or_path, None, "token ids are not contiguous")
    return tokens
