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

    Empty lines and lines that tokenise to nothing are skipped (``meta["skipped_lines"]``, 0-based).
    """
    dtype = id_dtype(len(tokenizer))
    offsets = [0]
    skipped = []
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        with open(tmp / "ids.bin", "wb") as ids_file:
            for line, ids in enumerate(encode_lines(tokenizer, read_lines(text_path))):
                if not ids:
                    skipped.append(line)
                    continue
                np.asarray(ids, dtype=dtype).tofile(ids_file)
                offsets.append(offsets[-1] + len(ids))
        np.save(tmp / "offsets.npy", np.asarray(offsets, dtype=np.int64))
        # The text lines without a sentence here, so that a line number of the text maps to a
        # sentence number of the stream (ramen.vocab.exclusions).
        meta = {"dtype": dtype.name, "vocab_size": len(tokenizer), "num_sentences": len(offsets) - 1,
                "num_tokens": offsets[-1], "source": str(text_path), "skipped_lines": skipped}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    return meta


def load_stream(data_dir: str | os.PathLike, exclude: str | os.PathLike | None = None) -> TokenStream:
    """Open an encoded corpus memory-mapped (read-only).

    ``exclude``: a ``.npy`` file of sentence numbers (ramen.vocab.exclusions) that the returned
    stream leaves out, as if they had been cut from the corpus.
    """
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
    stream = TokenStream(ids=ids, offsets=offsets, vocab_size=meta["vocab_size"])
    if exclude is None:
        return stream
    excluded = np.load(exclude, allow_pickle=False)
    if len(excluded) and (excluded.min() < 0 or excluded.max() >= stream.num_sentences):
        raise InputFormatError(exclude, None, f"sentence numbers outside the {stream.num_sentences} of {data_dir}",
                               "rebuild the exclusions of this language (they belong to another encoding)")
    return without_sentences(stream, excluded)


class KeptIds:
    """The token ids of a stream with some sentences cut out, indexed as if they were never there.

    Only the kept runs' boundaries are stored: the ids stay memory-mapped, and a slice that spans
    a cut joins the pieces on either side of it.
    """

    def __init__(self, ids: np.ndarray, starts: np.ndarray, stops: np.ndarray):
        self._ids = ids
        self._starts = starts
        self._bounds = np.concatenate([[0], np.cumsum(stops - starts)]).astype(np.int64)
        self.dtype = ids.dtype

    def __len__(self) -> int:
        return int(self._bounds[-1])

    def __getitem__(self, key: slice) -> np.ndarray:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("KeptIds supports contiguous slices only")
        start, stop, _ = key.indices(len(self))
        if start >= stop:
            return self._ids[0:0]
        first = int(np.searchsorted(self._bounds, start, side="right")) - 1
        last = int(np.searchsorted(self._bounds, stop, side="left"))
        pieces = []
        for run in range(first, last):
            low, high = max(start, self._bounds[run]), min(stop, self._bounds[run + 1])
            begin = self._starts[run] + low - self._bounds[run]
            pieces.append(self._ids[begin:begin + high - low])
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def without_sentences(stream: TokenStream, excluded: np.ndarray) -> TokenStream:
    """``stream`` without the sentences numbered ``excluded``: sentence numbers, offsets and token
    positions are those of a corpus that never had them, so every sampler reads it unchanged."""
    excluded = np.unique(np.asarray(excluded, dtype=np.int64))
    if not len(excluded):
        return stream
    offsets = stream.offsets
    kept = np.ones(stream.num_sentences, dtype=bool)
    kept[excluded] = False
    # Runs of kept sentences lie between excluded ones: [end of excluded i-1, start of excluded i).
    starts = np.concatenate([[0], offsets[excluded + 1]])
    stops = np.concatenate([offsets[excluded], [offsets[-1]]])
    nonempty = stops > starts
    starts, stops = starts[nonempty], stops[nonempty]
    # Each kept sentence moves back by the tokens of the excluded sentences before it.
    removed = np.cumsum(offsets[excluded + 1] - offsets[excluded])
    shift = np.concatenate([[0], removed])[np.searchsorted(excluded, np.flatnonzero(kept))]
    new_offsets = np.append(offsets[:-1][kept] - shift, offsets[-1] - removed[-1])
    return TokenStream(ids=KeptIds(stream.ids, starts, stops), offsets=new_offsets, vocab_size=stream.vocab_size)


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
