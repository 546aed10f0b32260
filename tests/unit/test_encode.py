"""Token ids to memory-mapped training data and to aligner input lines."""

from __future__ import annotations

import numpy as np
import pytest

from ramen.vocab.encode import BATCH_LINES, encode_corpus, id_dtype, load_stream, write_id_lines
from ramen.errors import InputFormatError
from ramen.io import write_lines

from conftest import french_lines


@pytest.fixture(scope="module")
def tokenizer(foreign_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(foreign_tokenizer_dir)


@pytest.fixture(scope="module")
def lines():
    # More lines than one tokeniser batch, with empty and whitespace-only lines scattered in.
    text = french_lines(BATCH_LINES + 300, seed=5)
    for index in (0, 7, BATCH_LINES - 1, BATCH_LINES, len(text) - 1):
        text[index] = "" if index % 2 else "   "
    return text


def test_encode_corpus_round_trip(tmp_path, tokenizer, lines):
    corpus = tmp_path / "corpus.txt"
    write_lines(corpus, lines)
    meta = encode_corpus(tokenizer, corpus, tmp_path / "encoded")
    stream = load_stream(tmp_path / "encoded")

    expected = [ids for ids in (tokenizer(line, add_special_tokens=False)["input_ids"] for line in lines) if ids]
    assert len(expected) == len(lines) - 5
    assert stream.num_sentences == meta["num_sentences"] == len(expected)
    assert stream.num_tokens == meta["num_tokens"] == sum(map(len, expected))
    assert stream.ids.dtype == np.uint16 and isinstance(stream.ids, np.memmap)
    assert stream.vocab_size == len(tokenizer)
    assert stream.offsets[0] == 0 and np.all(np.diff(stream.offsets) > 0)
    for index, ids in enumerate(expected):
        assert stream.ids[stream.offsets[index]:stream.offsets[index + 1]].tolist() == ids
    assert not any(path.name.startswith(".") for path in tmp_path.iterdir())  # no temporary left behind


def test_id_dtype_widens_for_large_vocabularies():
    assert id_dtype(65_536) == np.uint16
    assert id_dtype(65_537) == np.uint32


def test_write_id_lines_keeps_one_line_per_input(tmp_path, tokenizer, lines):
    corpus = tmp_path / "corpus.txt"
    write_lines(corpus, lines)
    out = tmp_path / "ids.txt"
    assert write_id_lines(tokenizer, corpus, out) == len(lines)
    written = out.read_text().split("\n")
    assert written[-1] == "" and len(written) - 1 == len(lines)  # aligned with the text line by line
    for line, ids in zip(lines, written):
        assert [int(i) for i in ids.split()] == tokenizer(line, add_special_tokens=False)["input_ids"]


def test_load_stream_rejects_an_empty_corpus(tmp_path, tokenizer):
    corpus = tmp_path / "empty.txt"
    write_lines(corpus, ["", "  ", ""])
    meta = encode_corpus(tokenizer, corpus, tmp_path / "encoded")
    assert meta["num_tokens"] == 0
    with pytest.raises(InputFormatError, match="no tokens"):
        load_stream(tmp_path / "encoded")
    with pytest.raises(InputFormatError, match="meta.json"):
        load_stream(tmp_path / "missing")
