"""Alignment counting, p(e|f) estimation, storage, and eflomal: a smoke test and its seed."""

from __future__ import annotations

import gzip
import random

import numpy as np
import pytest
import scipy.sparse as sp

from ramen.alignment.aligners import align_with_eflomal
from ramen.alignment.parallel import (
    count_links,
    load_alpha,
    read_links,
    save_alpha,
    translation_probabilities,
)
from ramen.errors import ConfigError, InputFormatError

V_F, V_E = 6, 5
FOREIGN = ["0 1 2", "3 4", "", "5 1"]
ENGLISH = ["0 1", "2 3 4", "", "4 0"]
FORWARD = ["0-0 1-1 2-1", "0-0 1-1", "", "0-0 1-1"]
REVERSE = ["0-0 1-1", "0-0 1-2", "", "1-1"]


def _dense(entries):
    out = np.zeros((V_F, V_E), dtype=np.int64)
    for (f, e), n in entries.items():
        out[f, e] = n
    return out


# Worked out by hand from the sentences and links above (f id, e id): count.
EXPECTED = {
    "forward": _dense({(0, 0): 1, (1, 1): 1, (2, 1): 1, (3, 2): 1, (4, 3): 1, (5, 4): 1, (1, 0): 1}),
    "reverse": _dense({(0, 0): 1, (1, 1): 1, (3, 2): 1, (4, 4): 1, (1, 0): 1}),
    "sum": _dense({(0, 0): 2, (1, 1): 2, (2, 1): 1, (3, 2): 2, (4, 3): 1, (4, 4): 1, (5, 4): 1, (1, 0): 2}),
    "intersection": _dense({(0, 0): 1, (1, 1): 1, (3, 2): 1, (1, 0): 1}),
}


def _write(path, lines, trailing_newline=True):
    text = "\n".join(lines) + ("\n" if trailing_newline else "")
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture()
def corpus(tmp_path):
    return {
        "foreign": _write(tmp_path / "fr.ids", FOREIGN),
        "english": _write(tmp_path / "en.ids", ENGLISH),
        "forward": _write(tmp_path / "fwd.links", FORWARD),
        "reverse": _write(tmp_path / "rev.links", REVERSE, trailing_newline=False),
    }


def _count(corpus, symmetrisation="sum", **kwargs):
    return count_links(
        corpus["foreign"], corpus["english"], [corpus["forward"], corpus["reverse"]],
        V_F, V_E, symmetrisation, **kwargs,
    )


@pytest.mark.parametrize("symmetrisation", ["sum", "intersection", "forward", "reverse"])
@pytest.mark.parametrize("chunk_lines", [1, 3, 50_000])
def test_counts_match_hand_computed(corpus, symmetrisation, chunk_lines):
    counts = _count(corpus, symmetrisation, chunk_lines=chunk_lines)
    assert sp.isspmatrix_csr(counts)
    assert counts.shape == (V_F, V_E)
    np.testing.assert_array_equal(counts.toarray(), EXPECTED[symmetrisation])


def test_counts_read_gzip(corpus, tmp_path):
    gz = tmp_path / "fr.ids.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(FOREIGN) + "\n")
    counts = count_links(gz, corpus["english"], [corpus["forward"]], V_F, V_E, "forward")
    np.testing.assert_array_equal(counts.toarray(), EXPECTED["forward"])


def test_read_links(corpus):
    assert list(read_links(corpus["forward"])) == [
        [(0, 0), (1, 1), (2, 1)], [(0, 0), (1, 1)], [], [(0, 0), (1, 1)],
    ]


@pytest.mark.parametrize("bad", ["0-0 1x1", "0-", "1", "0-1-2", "a-b", "-1-2", "0-0 3"])
def test_malformed_link_names_file_and_line(corpus, tmp_path, bad):
    links = _write(tmp_path / "bad.links", ["0-0", bad, "", "1-1"])
    with pytest.raises(InputFormatError) as info:
        count_links(corpus["foreign"], corpus["english"], [links], V_F, V_E, "forward")
    assert info.value.line == 2
    assert str(links) in str(info.value) and ":2:" in str(info.value)
    with pytest.raises(InputFormatError) as info:
        list(read_links(links))
    assert info.value.line == 2


def test_link_past_sentence_end(corpus, tmp_path):
    links = _write(tmp_path / "far.links", ["0-0", "0-2 2-0", "", "1-1"])
    with pytest.raises(InputFormatError, match="past the sentence end") as info:
        count_links(corpus["foreign"], corpus["english"], [links], V_F, V_E, "forward", chunk_lines=3)
    assert info.value.line == 2 and info.value.path == str(links)


def test_token_id_outside_vocabulary(corpus):
    with pytest.raises(InputFormatError, match="outside the vocabulary") as info:
        count_links(corpus["foreign"], corpus["english"], [corpus["forward"]], V_F, 4, "forward")
    assert info.value.path == str(corpus["english"]) and info.value.line == 2


def test_non_integer_token(corpus, tmp_path):
    ids = _write(tmp_path / "words.ids", ["0 1 2", "3 four", "", "5 1"])
    with pytest.raises(InputFormatError) as info:
        count_links(ids, corpus["english"], [corpus["forward"]], V_F, V_E, "forward")
    assert info.value.path == str(ids) and info.value.line == 2


@pytest.mark.parametrize("chunk_lines", [2, 50_000])
def test_line_count_mismatch(corpus, tmp_path, chunk_lines):
    short = _write(tmp_path / "short.links", FORWARD[:2])
    with pytest.raises(InputFormatError, match="no counterpart") as info:
        count_links(corpus["foreign"], corpus["english"], [short], V_F, V_E, "forward", chunk_lines=chunk_lines)
    assert info.value.line == 3
    assert str(short) in str(info.value)


def test_unknown_symmetrisation(corpus):
    with pytest.raises(ConfigError, match="symmetrisation"):
        _count(corpus, "grow-diag")
    with pytest.raises(ConfigError, match="needs 2 link files"):
        count_links(corpus["foreign"], corpus["english"], [corpus["forward"]], V_F, V_E, "intersection")


def test_probabilities_rows_sum_to_one_and_stay_sparse(corpus):
    counts = _count(corpus, "sum")
    probs = translation_probabilities(counts, min_prob=0.0)
    assert sp.isspmatrix_csr(probs)
    assert probs.nnz == counts.nnz
    sums = np.asarray(probs.sum(axis=1)).ravel()
    np.testing.assert_allclose(sums, 1.0)  # every foreign id has a link here
    dense = EXPECTED["sum"] / EXPECTED["sum"].sum(axis=1, keepdims=True)
    np.testing.assert_allclose(probs.toarray(), dense)


def test_threshold_drops_small_entries_and_renormalises():
    counts = sp.csr_matrix(np.array([[80, 15, 5, 0], [0, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 7]]))
    probs = translation_probabilities(counts, min_prob=0.1)
    np.testing.assert_allclose(
        probs.toarray(),
        [[80 / 95, 15 / 95, 0, 0], [0, 0, 0, 0], [0.5, 0.5, 0, 0], [0, 0, 0, 1]],
    )
    assert probs.nnz == 5
    assert np.diff(probs.indptr)[1] == 0  # the row without counts stays empty


def test_save_and_load_alpha_roundtrip(tmp_path):
    alpha = sp.random(30, 20, density=0.1, format="csr", random_state=0)
    path = tmp_path / "sub" / "alpha.bin"  # no .npz suffix: the file must land here exactly
    save_alpha(path, alpha)
    assert path.is_file()
    assert sorted(p.name for p in path.parent.iterdir()) == ["alpha.bin"]
    loaded = load_alpha(path)
    assert sp.isspmatrix_csr(loaded)
    np.testing.assert_array_equal(loaded.toarray(), alpha.toarray())
    save_alpha(tmp_path / "alpha.npz", alpha)
    assert (tmp_path / "alpha.npz").is_file() and not (tmp_path / "alpha.npz.npz").exists()


def test_load_alpha_rejects_other_files(tmp_path):
    bogus = tmp_path / "bogus.npz"
    bogus.write_text("not a matrix")
    with pytest.raises(InputFormatError):
        load_alpha(bogus)


def _word_for_word(directory, n_words=40, n_pairs=200):
    """Foreign id k always translates English id k + 100; word order is shuffled."""
    rng = random.Random(1)
    weights = [1.0 / (k + 1) for k in range(n_words)]  # Zipf-like frequencies
    foreign_lines, english_lines = [], []
    for _ in range(n_pairs):
        words = rng.choices(range(n_words), weights=weights, k=rng.randint(4, 9))
        english = [w + 100 for w in words]
        rng.shuffle(english)
        foreign_lines.append(" ".join(map(str, words)))
        english_lines.append(" ".join(map(str, english)))
    return _write(directory / "fr.ids", foreign_lines), _write(directory / "en.ids", english_lines), foreign_lines


def test_eflomal_recovers_word_for_word_translations(tmp_path):
    n_words = 40
    fr, en, foreign_lines = _word_for_word(tmp_path, n_words)
    fwd, rev = tmp_path / "out" / "fwd.links", tmp_path / "out" / "rev.links"

    align_with_eflomal(fr, en, fwd, rev, iterations_scale=0.5, threads=1)

    assert len(list(read_links(fwd))) == len(list(read_links(rev))) == 200
    counts = count_links(fr, en, [fwd, rev], n_words, n_words + 100, "sum")
    probs = translation_probabilities(counts)
    frequency = np.bincount([int(w) for line in foreign_lines for w in line.split()], minlength=n_words)
    frequent = np.flatnonzero(frequency >= 20)
    assert len(frequent) >= 10
    best = np.asarray(probs[frequent].argmax(axis=1)).ravel()
    correct = np.mean(best == frequent + 100)
    assert correct >= 0.9, f"only {correct:.0%} of frequent tokens aligned to their translation"


def test_eflomal_rejects_unequal_line_counts(tmp_path):
    fr = _write(tmp_path / "fr.ids", ["1 2", "3"])
    en = _write(tmp_path / "en.ids", ["1 2"])
    with pytest.raises(InputFormatError) as info:
        align_with_eflomal(fr, en, tmp_path / "f", tmp_path / "r")
    assert info.value.line == 2 and info.value.path == str(fr)
    assert not (tmp_path / "f").exists()


def test_tabs_and_crlf_are_accepted(corpus, tmp_path):
    links = tmp_path / "crlf.links"
    links.write_bytes("\r\n".join(["0-0\t1-1  2-1", "0-0 1-1", "", "0-0 1-1"]).encode() + b"\r\n")
    counts = count_links(corpus["foreign"], corpus["english"], [links], V_F, V_E, "forward")
    np.testing.assert_array_equal(counts.toarray(), EXPECTED["forward"])


def _links(tmp_path, fr, en, name, **settings):
    fwd, rev = tmp_path / name / "fwd.links", tmp_path / name / "rev.links"
    align_with_eflomal(fr, en, fwd, rev, iterations_scale=0.2, **settings)
    return fwd.read_bytes(), rev.read_bytes()


def test_eflomal_links_are_fixed_by_the_seed_whatever_the_threads(tmp_path):
    fr, en, _ = _word_for_word(tmp_path)
    first = _links(tmp_path, fr, en, "first", seed=7, threads=1)
    assert _links(tmp_path, fr, en, "again", seed=7, threads=1) == first
    # Three samplers on two threads: which thread runs which sampler varies, the links do not.
    assert _links(tmp_path, fr, en, "threads", seed=7, threads=2) == first
    other = _links(tmp_path, fr, en, "other", seed=8, threads=1)
    assert other[0] != first[0] and other[1] != first[1]
    # The forward and reverse models draw different streams from one seed, and both are aligned.
    assert len(first[0].splitlines()) == len(first[1].splitlines()) == 200


def test_eflomal_seed_out_of_range_is_refused(tmp_path):
    fr, en, _ = _word_for_word(tmp_path, n_pairs=5)
    with pytest.raises(ConfigError, match="alignment.seed"):
        align_with_eflomal(fr, en, tmp_path / "f", tmp_path / "r", seed=-1)


def test_eflomal_build_that_ignores_seeds_is_refused(tmp_path, unseeded_eflomal):
    """The PyPI build: its binary never reads EFLOMAL_SEED."""
    fr, en, _ = _word_for_word(tmp_path, n_pairs=5)
    with pytest.raises(ConfigError) as info:
        align_with_eflomal(fr, en, tmp_path / "f", tmp_path / "r")
    assert info.value.setting == "alignment.seed"
    assert "make install" in str(info.value) and "tools/install_eflomal.sh" in str(info.value)
    assert not (tmp_path / "f").exists()
