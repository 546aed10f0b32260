"""Subword-tokenise text once, for alignment and for memory-mapped LM training data.

Training reads token ids from a flat binary file through ``numpy.memmap``, so a
corpus of any size costs no RAM and no tokenisation during training.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ramen.errors import InputFormatError
from ramen.io import atomic_path, read_lines

BATCH_LINES = 2000


def batched(lines: Iterable[str], size: int = BATCH_LINES) -> Iterator[list[str]]:
    batch = []
    for line in lines:
        batch.append(line)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def encode_lines(tokenizer, lines: Iterable[str]) -> Iterator[list[int]]:
    """Token ids of each line, without special tokens, batched through the fast tokenizer."""
    for batch in batched(lines):
        encoded = tokenizer(batch, add_special_tokens=False, return_attention_mask=False,
                            return_token_type_ids=False)
        yield from encoded["input_ids"]


def write_id_lines(tokenizer, text_path: str | os.PathLike, out_path: str | os.PathLike) -> int:
    """One line of space-separated token ids per input line (the aligner's input)."""
    count = 0
    with atomic_path(out_path) as tmp:
        with open(tmp, "w", encoding="utf-8") as out:
            for ids in encode_lines(tokenizer, read_lines(text_path)):
                out.write(" ".join(map(str, ids)))
                out.write("\n")
                count += 1
    return count


@dataclass
class TokenStream:
    """A memory-mapped corpus: ``ids`` concatenated, sentence ``i`` is ids[offsets[i]:offsets[i+1]]."""

    ids: np.ndarray
    offsets: np.ndarray
    vocab_size: int

    @property
    def num_sentences(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])


def id_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.uint32)


def encode_corpus(tokenizer, text_path: str | os.PathLike, out_dir: str | os.PathLike) -> dict:
    """Tokenise a text file into ``ids.bin``, ``offsets.npy`` and ``meta.json`` under ``out_dir``.

    Empty lines and lines that tokenise to nothing are skipped.
    """
    dtype = id_dtype(len(tokenizer))
    offsets = [0]
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        with open(tmp / "ids.bin", "wb") as ids_file:
            for ids in encode_lines(tokenizer, read_lines(text_path)):
                if not ids:
                    continue
                np.asarray(ids, dtype=dtype).tofile(ids_file)
                offsets.append(offsets[-1] + len(ids))
        np.save(tmp / "offsets.npy", np.asarray(offsets, dtype=np.int64))
        meta = {"dtype": dtype.name, "vocab_size": len(tokenizer), "num_sentences": len(offsets) - 1,
                "num_tokens": offsets[-1], "source": str(text_path)}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    return meta


def load_stream(data_dir: str | os.PathLike) -> TokenStream:
    """Open an encoded corpus memory-mapped (read-only)."""
    data_dir = Path(data_dir)
    meta_path = data_dir / "meta.json"
    if not meta_path.exists():
        raise InputFormatError(data_dir, None, "no meta.json: not an encoded corpus",
                               "produce it with ramen.vocab.encode.encode_corpus")
    meta = json.loads(meta_path.read_text())
    offsets = np.load(data_dir / "offsets.npy")
    if meta["num_tokens"] == 0:
        raise InputFormatError(meta.get("source", data_dir), None, "the corpus has no tokens",
                               "check the corpus configuration for this language")
    ids = np.memmap(data_dir / "ids.bin", dtype=np.dtype(meta["dtype"]), mode="r",
                    shape=(meta["num_tokens"],))
    return TokenStream(ids=ids, offsets=offsets, vocab_size=meta["vocab_size"])


def _read_id_line(line: str, path, number: int, vocab_size: int) -> list[int]:
    try:
        ids = [int(token) for token in line.split()]
    except ValueError:
        raise InputFormatError(path, number, "a token id is not an integer",
                               "produce the file with ramen.vocab.encode.write_id_lines") from None
    if any(not 0 <= token < vocab_size for token in ids):
        raise InputFormatError(path, number, f"a token id lies outside the vocabulary of {vocab_size}",
                               "encode both sides with the tokenizers the model uses")
    return ids


def encode_id_pairs(source_path: str | os.PathLike, foreign_path: str | os.PathLike, out_dir: str | os.PathLike,
                    source_vocab: int, foreign_vocab: int) -> dict:
    """Line-aligned id files (write_id_lines) -> ``out_dir/source`` and ``out_dir/foreign`` token streams
    whose sentence i is pair i. Pairs with an empty side are skipped, so the streams stay aligned."""
    sides = {"source": (source_path, source_vocab), "foreign": (foreign_path, foreign_vocab)}
    offsets = {side: [0] for side in sides}
    skipped = 0
    with atomic_path(out_dir) as tmp:
        files = {}
        for side, (_, vocab) in sides.items():
            (tmp / side).mkdir(parents=True)
            files[side] = open(tmp / side / "ids.bin", "wb")
        try:
            lines = zip(read_lines(source_path), read_lines(foreign_path), strict=True)
            for number, (source_line, foreign_line) in enumerate(lines, start=1):
                ids = {"source": _read_id_line(source_line, source_path, number, source_vocab),
                       "foreign": _read_id_line(foreign_line, foreign_path, number, foreign_vocab)}
                if not ids["source"] or not ids["foreign"]:
                    skipped += 1
                    continue
                for side, values in ids.items():
                    np.asarray(values, dtype=id_dtype(sides[side][1])).tofile(files[side])
                    offsets[side].append(offsets[side][-1] + len(values))
        except ValueError as error:
            if "zip()" not in str(error):
                raise
            raise InputFormatError(foreign_path, None, f"not line-aligned with {source_path}",
                                   "give both sides of the parallel text with one sentence per line") from None
        finally:
            for handle in files.values():
                handle.close()
        meta = {"pairs": len(offsets["source"]) - 1, "skipped_empty": skipped}
        for side, (path, vocab) in sides.items():
            np.save(tmp / side / "offsets.npy", np.asarray(offsets[side], dtype=np.int64))
            (tmp / side / "meta.json").write_text(json.dumps(
                {"dtype": id_dtype(vocab).name, "vocab_size": vocab, "num_sentences": len(offsets[side]) - 1,
                 "num_tokens": offsets[side][-1], "source": str(path)}, indent=2))
        (tmp / "pairs.json").write_text(json.dumps(meta, indent=2))
    return meta
