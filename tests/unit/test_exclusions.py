"""One encoded English text for every target language; each language's evaluation sentences are
left out when its batches are drawn."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ramen.data.decontamination import key_digests, read_digests, write_digests
from ramen.data.text.keys import evaluation_keys, sentence_key
from ramen.errors import InputFormatError
from ramen.io import write_lines
from ramen.vocab.encode import TokenStream, encode_corpus, load_stream, without_sentences
from ramen.vocab.exclusions import stream_sentences, write_exclusions

from conftest import french_lines


@pytest.fixture(scope="module")
def tokenizer(foreign_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(foreign_tokenizer_dir)


def flat(stream: TokenStream) -> list[int]:
    return stream.ids[0:stream.num_tokens].tolist()


def sentences(stream: TokenStream) -> list[list[int]]:
    return [stream.ids[stream.offsets[i]:stream.offsets[i + 1]].tolist() for i in range(stream.num_sentences)]


def small_stream(lengths: list[int]) -> TokenStream:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return TokenStream(ids=np.arange(offsets[-1], dtype=np.uint16), offsets=offsets, vocab_size=1000)


@pytest.mark.parametrize("excluded", [[0], [4], [1, 2], [0, 4], [0, 1, 2, 3], [2, 2, 0]])
def test_a_stream_without_sentences_is_the_stream_that_never_had_them(excluded):
    lengths = [3, 1, 4, 1, 5]
    stream = small_stream(lengths)
    kept = [i for i in range(len(lengths)) if i not in excluded]
    expected = [sentences(stream)[i] for i in kept]
    view = without_sentences(stream, np.array(excluded))
    assert view.num_sentences == len(kept) and view.num_tokens == sum(lengths[i] for i in kept)
    assert sentences(view) == expected
    whole = [token for sentence in expected for token in sentence]
    assert flat(view) == whole and len(view.ids) == len(whole)
    # Any window, across the cuts too, reads what the uncut corpus would hold there.
    for start in range(len(whole) + 1):
        for stop in range(start, len(whole) + 3):
            assert view.ids[start:stop].tolist() == whole[start:stop]


def test_no_evaluation_sentence_of_a_language_reaches_its_training_batches(tmp_path, tokenizer):
    from ramen.training.batches import sample_blocks

    text = french_lines(400, seed=11)
    pairs = {"fr": [text[5], text[200], text[399]], "ru": [text[0], text[201]]}
    text[300] = "   "  # a line the encoding skips shifts the sentence numbers after it
    text[310] = pairs["fr"][1].upper() + " "  # the same sentence key, written differently
    write_lines(tmp_path / "train.txt", text)
    encode_corpus(tokenizer, tmp_path / "train.txt", tmp_path / "encoded")
    write_digests(tmp_path / "train.excluded.npy", key_digests(["an english test sentence"]))
    streams = {}
    for lang, evaluation in pairs.items():
        write_lines(tmp_path / f"tatoeba.{lang}-eng.eng", evaluation)
        stats = write_exclusions(tmp_path / "train.txt", tmp_path / "encoded", tmp_path / "train.excluded.npy",
                                 [tmp_path / f"tatoeba.{lang}-eng.eng"], tmp_path / f"{lang}.sentences.npy",
                                 tmp_path / f"{lang}.excluded.npy")
        assert stats["excluded_sentences"] == {"fr": 4, "ru": 2}[lang]
        digests = read_digests(tmp_path / f"{lang}.excluded.npy")
        assert np.isin(key_digests(evaluation_keys([tmp_path / f"tatoeba.{lang}-eng.eng"])), digests).all()
        assert np.isin(key_digests(["an english test sentence"]), digests).all()
        streams[lang] = load_stream(tmp_path / "encoded", exclude=tmp_path / f"{lang}.sentences.npy")

    def ids(line):
        return tokenizer(line, add_special_tokens=False)["input_ids"]

    for lang, stream in streams.items():
        # The stream is the encoding of the text without the language's evaluation sentences...
        keys = evaluation_keys([tmp_path / f"tatoeba.{lang}-eng.eng"])
        kept = [ids(line) for line in text if sentence_key(line) not in keys and ids(line)]
        assert sentences(stream) == kept
        # ...and the training sampler's windows never hold one of them.
        other = "ru" if lang == "fr" else "fr"
        seen_other = False
        rng = np.random.default_rng(0)
        for _ in range(20):
            for window in sample_blocks(stream, rng, 32, 48):
                window = window[window >= 0].tolist()
                text_of_window = " ".join(map(str, window))
                for sentence in pairs[lang]:
                    assert " ".join(map(str, ids(sentence))) not in text_of_window
                seen_other |= any(" ".join(map(str, ids(s))) in text_of_window for s in pairs[other])
        assert seen_other  # another language's evaluation sentences stay in this one's English


def test_an_encoding_of_another_text_is_refused(tmp_path, tokenizer):
    write_lines(tmp_path / "train.txt", french_lines(30, seed=2))
    encode_corpus(tokenizer, tmp_path / "train.txt", tmp_path / "encoded")
    assert json.loads((tmp_path / "encoded" / "meta.json").read_text())["skipped_lines"] == []
    assert stream_sentences(tmp_path / "encoded", np.array([3, 7]), 30).tolist() == [3, 7]
    with pytest.raises(InputFormatError, match="not the encoding of this text.*forcerun"):
        stream_sentences(tmp_path / "encoded", np.array([3]), 31)
    np.save(tmp_path / "far.npy", np.array([30]))
    with pytest.raises(InputFormatError, match="outside the 30"):
        load_stream(tmp_path / "encoded", exclude=tmp_path / "far.npy")
