"""Foreign BPE vocabulary: truncation, equivalence with `fastbpe applybpe`, the saved tokenizer."""

from __future__ import annotations

import collections
import subprocess

import pytest

from ramen.vocab.bpe import (
    END_OF_WORD,
    build_tokenizer,
    build_vocabulary,
    count_symbols,
    find_fastbpe,
    learn_codes,
    pretokenize_lines,
    read_codes,
    train_foreign_tokenizer,
)
from ramen.errors import ConfigError
from ramen.io import read_lines, write_lines

from conftest import OTHER_SCRIPTS, SPECIAL_TOKENS, french_lines

ROLES = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
         "mask_token": "[MASK]"}


# --- build_vocabulary ---------------------------------------------------------------------------

SYMBOLS = collections.Counter({"a": 10, "b": 8, "c</w>": 6, "b</w>": 5, "d": 1})
MERGES = [("a", "b"), ("ab", "c</w>"), ("x", "y"), ("b", "b</w>"), ("ab", "b</w>"), ("a", "b")]


def _check_vocabulary(vocabulary, max_size):
    assert vocabulary.tokens[:len(SPECIAL_TOKENS)] == SPECIAL_TOKENS
    assert len(vocabulary.tokens) <= max_size
    assert len(set(vocabulary.tokens)) == len(vocabulary.tokens)
    known = set(vocabulary.tokens)
    for left, right in vocabulary.merges:
        assert left in known and right in known and left + right in known


def test_build_vocabulary_without_truncation():
    vocabulary = build_vocabulary(SYMBOLS, MERGES, SPECIAL_TOKENS, max_size=1000)
    _check_vocabulary(vocabulary, 1000)
    # Symbols by frequency, then merge results in merge order; the merge of unknown parts is skipped.
    assert vocabulary.tokens[len(SPECIAL_TOKENS):] == ["a", "b", "c</w>", "b</w>", "d", "ab", "abc</w>",
                                                      "bb</w>", "abb</w>"]
    assert ("x", "y") not in vocabulary.merges


def test_build_vocabulary_truncation_drops_latest_merges_first():
    full = build_vocabulary(SYMBOLS, MERGES, SPECIAL_TOKENS, max_size=1000)
    for max_size in range(len(SPECIAL_TOKENS) + 1, len(full.tokens) + 1):
        vocabulary = build_vocabulary(SYMBOLS, MERGES, SPECIAL_TOKENS, max_size=max_size)
        _check_vocabulary(vocabulary, max_size)
        assert len(vocabulary.tokens) == max_size
        # What is kept is always the earliest part: symbols before merges, early merges before late ones.
        assert vocabulary.tokens == full.tokens[:max_size]
        assert vocabulary.merges == full.merges[:len(vocabulary.merges)]
    assert build_vocabulary(SYMBOLS, MERGES, SPECIAL_TOKENS, max_size=len(SPECIAL_TOKENS) + 5).merges == []


def test_build_vocabulary_min_count_and_too_small():
    vocabulary = build_vocabulary(SYMBOLS, MERGES, SPECIAL_TOKENS, max_size=1000, min_symbol_count=2)
    assert "d" not in vocabulary.tokens
    _check_vocabulary(vocabulary, 1000)
    with pytest.raises(ConfigError) as error:
        build_vocabulary(SYMBOLS, MERGES, SPECIAL_TOKENS, max_size=len(SPECIAL_TOKENS))
    assert error.value.setting == "bpe.max_vocab_size"


# --- equivalence with fastBPE --------------------------------------------------------------------

def _as_fastbpe(tokens: list[str]) -> str:
    """HF ``ab``, ``c</w>`` is fastBPE's ``ab@@ c``."""
    return " ".join(t[:-len(END_OF_WORD)] if t.endswith(END_OF_WORD) else t + "@@" for t in tokens)


@pytest.mark.parametrize("lowercase", [True, False])
def test_tokenizer_segments_like_fastbpe_applybpe(tmp_path, lowercase):
    train_lines = french_lines(300, seed=1)
    # Unseen words made of seen characters are split into several pieces.
    test_lines = french_lines(150, seed=2) + ["", "Élève à l'école, naïf et très beau !",
                                               "Chanteurs forestières regardons l'hôtellerie"]
    train_pre, test_pre, codes = tmp_path / "train.pre", tmp_path / "test.pre", tmp_path / "codes"
    write_lines(train_pre, pretokenize_lines(train_lines, lowercase))
    write_lines(test_pre, pretokenize_lines(test_lines, lowercase))
    # Fewer merges than the corpus allows, so many words stay split and merge order matters.
    assert learn_codes(train_pre, 120, codes) == 120
    merges = read_codes(codes)
    vocabulary = build_vocabulary(count_symbols(read_lines(train_pre)), merges, SPECIAL_TOKENS,
                                  max_size=100_000, min_symbol_count=1)
    assert vocabulary.merges == merges  # nothing truncated, so the two must agree on every word
    tokenizer = build_tokenizer(vocabulary, ROLES, lowercase)

    applied = tmp_path / "test.bpe"
    subprocess.run([find_fastbpe(), "applybpe", str(applied), str(test_pre), str(codes)], check=True,
                   capture_output=True)
    expected = list(read_lines(applied))
    assert len(expected) == len(test_lines)
    assert sum(line.count("@@") for line in expected) > 200
    for line, want in zip(test_lines, expected):
        tokens = tokenizer.encode(line, add_special_tokens=False).tokens
        assert "[UNK]" not in tokens
        assert _as_fastbpe(tokens) == want, line


def test_learn_codes_with_more_merges_than_pairs(tmp_path):
    # fastBPE exits 0 and pads the codes with zero-count repeats; learn_codes keeps only real merges.
    corpus = tmp_path / "tiny.txt"
    write_lines(corpus, ["ab ab abc", "abd xy"])
    codes = tmp_path / "codes"
    learned = learn_codes(corpus, 1000, codes)
    assert 0 < learned < 1000
    lines = list(read_lines(codes))
    assert len(lines) == learned
    pairs = [tuple(line.split()[:2]) for line in lines]
    assert len(set(pairs)) == len(pairs)
    assert all(int(line.split()[2]) > 0 for line in lines)
    # The codes must be usable by fastBPE itself (it aborts on duplicated pairs).
    result = subprocess.run([find_fastbpe(), "applybpe", str(tmp_path / "out"), str(corpus), str(codes)],
                            capture_output=True)
    assert result.returncode == 0, result.stderr
    assert list(read_lines(tmp_path / "out")) == ["ab ab abc", "abd xy"]


def test_learn_codes_failure_names_the_setting(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ConfigError) as error:
        learn_codes(empty, 10, tmp_path / "codes")
    assert error.value.setting == "bpe.merges"
    assert not (tmp_path / "codes").exists()


# --- train_foreign_tokenizer ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def foreign(foreign_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(foreign_tokenizer_dir)


@pytest.fixture(scope="module")
def source(tiny_source_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_source_dir)


def test_foreign_tokenizer_special_tokens_and_size(foreign, source):
    for role in ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token"):
        assert getattr(foreign, role) == getattr(source, role)
        assert foreign.convert_tokens_to_ids(getattr(foreign, role)) < len(SPECIAL_TOKENS)
    assert len(foreign) <= len(source)
    assert foreign.model_max_length == source.model_max_length
    special = foreign.convert_tokens_to_ids(SPECIAL_TOKENS)
    assert foreign("[MASK] chat", add_special_tokens=False)["input_ids"][0] == special[4]


def test_foreign_tokenizer_keeps_accents_while_lowercasing(foreign, source):
    assert source.tokenize("Élève")[0].startswith("e")  # the uncased source strips accents
    tokens = foreign.tokenize("Élève")
    assert tokens[0].startswith("é")
    assert "".join(tokens).replace(END_OF_WORD, "") == "élève"
    assert foreign.tokenize("ÉCOLE") == foreign.tokenize("école")


def test_foreign_tokenizer_pair_encoding(foreign):
    encoded = foreign("le chat mange", "la maison")
    ids, types = encoded["input_ids"], encoded["token_type_ids"]
    cls, sep = foreign.cls_token_id, foreign.sep_token_id
    first = foreign("le chat mange", add_special_tokens=False)["input_ids"]
    second = foreign("la maison", add_special_tokens=False)["input_ids"]
    assert ids == [cls, *first, sep, *second, sep]
    assert types == [0] * (len(first) + 2) + [1] * (len(second) + 1)


@pytest.fixture(scope="module")
def multiscript(tmp_path_factory, tiny_source_dir):
    from transformers import AutoTokenizer

    work = tmp_path_factory.mktemp("multiscript")
    lines = french_lines(100, seed=3)
    for phrase in OTHER_SCRIPTS.values():
        lines += [phrase, f"{phrase} . {phrase}"]
    corpus = work / "corpus.txt"
    write_lines(corpus, lines)
    stats = train_foreign_tokenizer(corpus, tiny_source_dir, work / "tokenizer", work / "codes", merges=200,
                                    max_vocab_size=5000, lowercase=None, min_symbol_count=1)
    assert stats["vocab_size"] <= 5000
    return AutoTokenizer.from_pretrained(work / "tokenizer")


def test_chinese_characters_are_separate_tokens(multiscript):
    tokens = multiscript.tokenize(OTHER_SCRIPTS["chinese"])
    assert [t.replace(END_OF_WORD, "") for t in tokens] == list(OTHER_SCRIPTS["chinese"])


@pytest.mark.parametrize("script", ["devanagari", "arabic", "cyrillic", "vietnamese", "chinese"])
def test_other_scripts_round_trip(multiscript, script):
    text = OTHER_SCRIPTS[script]
    ids = multiscript(text, add_special_tokens=False)["input_ids"]
    assert multiscript.unk_token_id not in ids
    decoded = multiscript.decode(ids)
    assert "".join(decoded.split()) == "".join(text.lower().split())
