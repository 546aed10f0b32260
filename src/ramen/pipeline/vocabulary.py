"""The foreign vocabulary, the rule ``learn_bpe`` calls: learned as the source's family learns it
(ramen.families: fastBPE for a masked LM, ramen.vocab.bpe; a byte-level BPE for a causal LM,
ramen.vocab.byte_bpe, whose tokenizer encodes and decodes every string exactly)."""

from __future__ import annotations

import os

from ramen.families import check_vocabulary, source_entry, source_family


def learn_foreign_vocabulary(text_path: str | os.PathLike, source_dir: str | os.PathLike,
                             tokenizer_out: str | os.PathLike, codes_out: str | os.PathLike, *, merges: int,
                             max_vocab_size: int | None, lowercase: bool | None, min_symbol_count: int) -> dict:
    """Learn the foreign tokenizer for ``source_dir``'s family; the summary figures."""
    learn = source_entry(source_dir).load("learn_vocabulary")
    return learn(text_path, source_dir, tokenizer_out, codes_out, merges=merges, max_vocab_size=max_vocab_size,
                 lowercase=lowercase, min_symbol_count=min_symbol_count)


def extend_foreign_vocabulary(text_path: str | os.PathLike, source_dir: str | os.PathLike,
                              tokenizer_out: str | os.PathLike, *, new_tokens: int, min_frequency: int,
                              source_text: str | os.PathLike | None = None, keep_lines: int = 0) -> dict:
    """The source's tokenizer extended with foreign tokens, as its family extends one (rule
    extend_vocabulary; ``vocabulary: extend``), leaving the words of the first ``keep_lines`` lines
    of ``source_text`` as the source encodes them; the summary figures."""
    entry = source_entry(source_dir)
    check_vocabulary(source_family(source_dir), "extend", "variants.*.vocabulary", f" {source_dir}")
    return entry.load("extend_vocabulary")(text_path, source_dir, tokenizer_out, new_tokens=new_tokens,
                                           min_frequency=min_frequency, keep_text=source_text,
                                           keep_lines=keep_lines)
