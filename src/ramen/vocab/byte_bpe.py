"""Foreign vocabulary for a decoder source: a byte-level BPE learned with Hugging Face `tokenizers`.

Byte-level means every string encodes and decodes exactly (no unknown token, no normaliser
that would change the text): the 256 bytes are the initial alphabet and merges are learned on
the foreign corpus. The source tokenizer's added tokens (BOS, EOS, PAD, chat markers, ...) are
kept by string, first in the vocabulary and in their source order; its post-processor (a BOS
it prepends) is remapped to the new ids, and its chat template is copied verbatim. The result
is a standard tokenizer directory that ``AutoTokenizer.from_pretrained`` loads.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

from ramen.data.checkpoint_headers import BYTE_ALPHABET
from ramen.errors import ConfigError, InputFormatError
from ramen.io import atomic_path, read_lines
from ramen.vocab.bpe import remap_post_processor
from ramen.vocab.tokenizer import load_tokenizer

ROLES = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


def source_added_tokens(source) -> list[AddedToken]:
    """The source tokenizer's added tokens in id order, with their flags (special, stripping, ...)."""
    decoder = getattr(source, "added_tokens_decoder", {}) or {}
    added = []
    for _, token in sorted(decoder.items()):
        added.append(AddedToken(str(token.content), single_word=token.single_word, lstrip=token.lstrip,
                                rstrip=token.rstrip, normalized=False, special=token.special))
    return added


def build_byte_bpe(lines: Iterable[str], added: list[AddedToken], *, vocab_size: int,
                   min_frequency: int = 2) -> Tokenizer:
    """Learn a byte-level BPE of ``vocab_size`` entries (added tokens and the 256 bytes included)."""
    floor = BYTE_ALPHABET + len(added) + 1
    if vocab_size < floor:
        # vocab_size is min(256 + bpe.merges, bpe.max_vocab_size) (learn_byte_vocabulary).
        raise ConfigError("bpe.max_vocab_size", f"{vocab_size} entries leave no room for merges",
                          f"allow at least {floor} (with bpe.merges at least {floor - BYTE_ALPHABET}): the 256 "
                          f"bytes, {len(added)} special tokens of the source and one merge")
    if min_frequency < 1:
        raise ConfigError("bpe.min_symbol_count", f"must be >= 1, got {min_frequency}")
    tokenizer = Tokenizer(BPE())
    # No normaliser: decoding must give back exactly the text that was encoded.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=added,
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(lines, trainer)
    return tokenizer


def train_byte_bpe(corpus_path: str | os.PathLike, source_dir: str | os.PathLike, out_dir: str | os.PathLike, *,
                   vocab_size: int, min_frequency: int = 2) -> dict:
    """Learn the foreign byte-level BPE on ``corpus_path`` and save it as a tokenizer directory.

    ``source_dir`` holds the source model's tokenizer (its special tokens, post-processor and
    chat template are kept). Returns summary figures for the rule's stats file.
    """
    source = load_tokenizer(source_dir)  # a GGUF source too
    if not getattr(source, "is_fast", False):
        raise ConfigError("source.model", f"{source_dir}: the source tokenizer has no fast (tokenizers) backend",
                          "use a model directory with a tokenizer.json")
    lines = [line for line in read_lines(corpus_path) if line.strip()]
    if not lines:
        raise InputFormatError(corpus_path, None, "no text to learn a vocabulary from",
                               "check the corpus rule's output")
    added = source_added_tokens(source)
    tokenizer = build_byte_bpe(lines, added, vocab_size=vocab_size, min_frequency=min_frequency)
    token_to_id = tokenizer.get_vocab()
    missing = [token.content for token in added if token.content not in token_to_id]
    if missing:  # the trainer puts special tokens first; anything else is a bug worth stopping for
        raise RuntimeError(f"special tokens {missing} missing from the learned vocabulary")
    backend = getattr(source, "backend_tokenizer", None)
    if backend is not None and backend.post_processor is not None:
        try:
            tokenizer.post_processor = remap_post_processor(backend, token_to_id)
        except KeyError as error:
            raise ConfigError("source.model", f"{source_dir}: the source tokenizer's template names {error}, "
                              "which is not one of its added tokens", "use a tokenizer whose template tokens "
                              "are special tokens") from None
    wrapped = fast_tokenizer_like(tokenizer, source)
    with atomic_path(out_dir) as tmp:
        wrapped.save_pretrained(tmp)
    return {"vocab_size": tokenizer.get_vocab_size(), "requested_vocab_size": vocab_size,
            "special_tokens": len(added), "lines": len(lines),
            "tokens_per_line": sum(len(e.ids) for e in tokenizer.encode_batch(lines, add_special_tokens=False))
            / len(lines)}


def fast_tokenizer_like(tokenizer: Tokenizer, source):
    """``tokenizer`` as a generic fast tokenizer with the source's special-token roles, maximum
    length, input names and chat template: what save_pretrained writes as a standard directory."""
    from transformers import PreTrainedTokenizerFast

    roles = {role: str(getattr(source, role)) for role in ROLES if getattr(source, role, None)}
    extra = [str(token) for token in (getattr(source, "extra_special_tokens", None) or [])]
    if extra:
        roles["extra_special_tokens"] = extra
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=source.model_max_length,
                                      model_input_names=list(source.model_input_names), **roles)
    if getattr(source, "chat_template", None):
        wrapped.chat_template = source.chat_template
    return wrapped


def check_round_trip(tokenizer_dir: str | os.PathLike, texts: Iterable[str]) -> list[str]:
    """The texts that do not decode back to themselves (empty for a byte-level tokenizer)."""
    tokenizer = load_tokenizer(tokenizer_dir)
    return [text for text in texts
            if tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) != text]


def learn_byte_vocabulary(text_path: str | os.PathLike, source_dir: str | os.PathLike,
                          tokenizer_out: str | os.PathLike, codes_out: str | os.PathLike, *, merges: int,
                          max_vocab_size: int | None, lowercase: bool | None, min_symbol_count: int) -> dict:
    """A causal LM's foreign vocabulary with the arguments of every family's (rule learn_bpe): the
    256 bytes and ``merges`` merges (at most ``max_vocab_size`` entries when given), the source's
    special tokens and chat template kept; the text is never lowercased (``lowercase`` is unused).
    ``codes_out`` only says where the merges are (in the tokenizer's tokenizer.json)."""
    size = BYTE_ALPHABET + merges
    if max_vocab_size is not None:
        size = min(size, max_vocab_size)
    stats = train_byte_bpe(text_path, source_dir, tokenizer_out, vocab_size=size, min_frequency=min_symbol_count)
    with atomic_path(codes_out) as tmp:
        Path(tmp).write_text("# byte-level BPE: its merges are in tokenizer/tokenizer.json\n")
    return {"kind": "byte-level", **stats}
