"""The embedding swap of zero-shot transfer, shared by every task that uses it.

A task model is fine-tuned on the source language with the source side's word-embedding table,
then evaluated on a foreign language with that side's table and tokenizer in its place; every
other parameter is shared. A causal LM pads with the pad id of the tokenizer in use (its EOS when
it has none: a foreign vocabulary numbers it differently and may have fewer rows than the
source id).

Two ways to swap: :func:`swap_embeddings` for a task model that holds a bare encoder as
``.encoder`` (the NLI classifier, the UD parser), reading only the table's tensor from the side's
weights; :func:`swap_input_table` for a Hugging Face task model (SIB-200's sequence classifier).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from torch import nn

from ramen.errors import ConfigError, RamenError
from ramen.families import FAMILIES, recognise
from ramen.modeling.weights import read_word_embeddings
from ramen.tasks.common import ensure_padding, load_encoder
from ramen.vocab.tokenizer import load_tokenizer

logger = logging.getLogger(__name__)


def is_causal(config) -> bool:
    """Whether a language side's config is of a family whose sides read left to right (its entry in
    ramen.families says)."""
    try:
        return FAMILIES[recognise(config.to_dict())].causal
    except ConfigError:  # a bare encoder of a type no LM mapping knows: not a decoder
        return False


def runs_causal_lm(model: nn.Module) -> bool:
    """Whether a task model (an NLI classifier, or the UD parser, which always runs an encoder and
    has no ``causal`` flag) runs a causal LM."""
    return getattr(model, "causal", False)


def decoder_pad_id(model: nn.Module, tokenizer) -> int | None:
    """The pad id a causal LM's batches use with ``tokenizer``'s table; None for an encoder."""
    return ensure_padding(tokenizer).pad_token_id if runs_causal_lm(model) else None


def word_embedding_name(encoder: nn.Module) -> str:
    """The parameter name of ``encoder``'s input word embeddings."""
    weight = encoder.get_input_embeddings().weight
    for name, param in encoder.named_parameters(remove_duplicate=False):
        if param is weight:
            return name
    raise RamenError(f"{type(encoder).__name__}: input embeddings are not a parameter of the encoder")


def set_word_embeddings(model: nn.Module, module: nn.Embedding, pad_id: int | None = None) -> None:
    """Install ``module`` as the input word embeddings of ``model.encoder`` (``pad_id``: a causal
    LM's, from :func:`decoder_pad_id` for the tokenizer of ``module``)."""
    model.encoder.set_input_embeddings(module)
    # Keep the config truthful so a saved model reloads with the right shape.
    model.encoder.config.vocab_size = module.num_embeddings
    if pad_id is not None:
        model.encoder.config.pad_token_id = pad_id


def embedding_module(model: nn.Module, embedding_dir: str | os.PathLike) -> nn.Embedding:
    """The word-embedding table of the language side in ``embedding_dir``, shaped and frozen as
    ``model``'s current one."""
    embedding_dir = Path(embedding_dir)
    old = model.word_embeddings()
    weight = read_word_embeddings(embedding_dir, word_embedding_name(model.encoder))
    if weight.ndim != 2 or weight.shape[1] != old.embedding_dim:
        width = weight.shape[-1] if weight.ndim else "?"
        raise RamenError(
            f"{embedding_dir}: word embeddings have width {width} but the task model's encoder "
            f"has hidden size {old.embedding_dim}; embeddings must come from a model transferred "
            "from the same source model"
        )
    padding_idx = old.padding_idx
    if padding_idx is not None and padding_idx >= weight.shape[0]:
        padding_idx = None
    return nn.Embedding.from_pretrained(
        weight.to(dtype=old.weight.dtype, device=old.weight.device),
        freeze=not old.weight.requires_grad,
        padding_idx=padding_idx,
    )


def check_tokenizer(tokenizer, module: nn.Embedding, model: nn.Module, directory: str | os.PathLike) -> None:
    """Refuse a tokenizer with more ids than ``module`` has rows; warn about an encoder whose pad id differs."""
    if len(tokenizer) > module.num_embeddings:
        raise RamenError(
            f"{directory}: tokenizer has {len(tokenizer)} tokens but the word-embedding table "
            f"has only {module.num_embeddings} rows"
        )
    pad = tokenizer.pad_token_id
    if pad is not None and pad != model.pad_token_id and not runs_causal_lm(model):
        # Harmless for BERT (pads are masked), but RoBERTa numbers positions by
        # skipping the encoder's pad id, so a real token with that id shifts them.
        logger.warning(
            "%s: tokenizer pad id %d differs from the encoder's pad id %d; encoders that "
            "derive positions from the pad id (RoBERTa) will misplace token %d",
            directory,
            pad,
            model.pad_token_id,
            model.pad_token_id,
        )


def side_table(model: nn.Module, side_dir: str | os.PathLike) -> tuple[nn.Embedding, object, int | None]:
    """The table, tokenizer and pad id of the language side in ``side_dir``, checked against ``model``
    but not installed (a task that swaps sides back and forth prepares each once)."""
    module = embedding_module(model, side_dir)
    tokenizer = load_tokenizer(side_dir)
    check_tokenizer(tokenizer, module, model, side_dir)
    return module, tokenizer, decoder_pad_id(model, tokenizer)


def swap_embeddings(model: nn.Module, embedding_dir: str | os.PathLike):
    """Replace the encoder's word embeddings with those of ``embedding_dir``.

    Only the word-embedding table changes; every other parameter is shared.
    Returns the tokenizer of ``embedding_dir``, which must be used with it.
    """
    module, tokenizer, pad_id = side_table(model, Path(embedding_dir))
    set_word_embeddings(model, module, pad_id)
    return tokenizer


def swap_input_table(model, side_dir: str | os.PathLike):
    """Put the input table of the language side in ``side_dir`` into a Hugging Face task ``model``;
    return its tokenizer (padding set, as the model's pad id now is).

    Only the input table changes: the body and the head fine-tuned on the source language stay.
    """
    side_dir = Path(side_dir)
    table = load_encoder(side_dir)[0].get_input_embeddings().weight.detach().clone()
    tokenizer = ensure_padding(load_tokenizer(side_dir))
    current = model.get_input_embeddings().weight
    if table.shape[1] != current.shape[1]:
        raise RamenError(f"{side_dir}: input table of width {table.shape[1]}, the classifier's is {current.shape[1]}; "
                         "was it trained from another source model?")
    if len(tokenizer) > table.shape[0]:
        raise RamenError(f"{side_dir}: the tokenizer has {len(tokenizer)} entries but the table {table.shape[0]} rows")
    model.set_input_embeddings(nn.Embedding.from_pretrained(table.to(current.dtype), freeze=True))
    model.config.pad_token_id = tokenizer.pad_token_id
    return tokenizer
