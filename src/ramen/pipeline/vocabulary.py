"""The foreign vocabulary of the source's family: fastBPE for a masked LM (ramen.vocab.bpe), a
byte-level BPE for a causal LM (ramen.vocab.byte_bpe), whose tokenizer must encode and decode
every string exactly."""

from __future__ import annotations

import os
from pathlib import Path

from ramen.io import atomic_path
from ramen.modeling.sources import DECODER, source_family

BYTE_ALPHABET = 256  # a byte-level BPE starts from the 256 bytes; each merge adds one token


def learn_foreign_vocabulary(text_path: str | os.PathLike, source_dir: str | os.PathLike,
                             tokenizer_out: str | os.PathLike, codes_out: str | os.PathLike, *, merges: int,
                             max_vocab_size: int | None, lowercase: bool | None, min_symbol_count: int) -> dict:
    """Learn the foreign tokenizer for ``source_dir``'s family; the summary figures.

    For a causal LM the vocabulary holds the 256 bytes and ``merges`` merges (at most
    ``max_vocab_size`` entries when given), the source's special tokens and chat template kept;
    ``codes_out`` then only says where the merges are (in the tokenizer's tokenizer.json).
    """
    if source_family(source_dir) != DECODER:
        from ramen.vocab.bpe import train_foreign_tokenizer

        return train_foreign_tokenizer(text_path, source_dir, tokenizer_out, codes_out, merges=merges,
                                       max_vocab_size=max_vocab_size, lowercase=lowercase,
                                       min_symbol_count=min_symbol_count)
    from ramen.vocab.byte_bpe import train_byte_bpe

    size = BYTE_ALPHABET + merges
    if max_vocab_size is not None:
        size = min(size, max_vocab_size)
    stats = train_byte_bpe(text_path, source_dir, tokenizer_out, vocab_size=size, min_frequency=min_symbol_count)
    with atomic_path(codes_out) as tmp:
        Path(tmp).write_text("# byte-level BPE: its merges are in tokenizer/tokenizer.json\n")
    return {"kind": "byte-level", **stats}
