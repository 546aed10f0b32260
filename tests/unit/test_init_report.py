"""Lexicon induction of initialised embeddings and the init report files."""

from __future__ import annotations

import numpy as np
import pytest

from ramen.data.dictionaries import read_dictionary
from ramen.reports.bli import lexicon_induction
from ramen.errors import InputFormatError
from ramen.reports.init import plot_report, write_report_tsv

ENGLISH_VOCAB = ["[UNK]", "cat", "dog", "house", "car", "##s"]
FOREIGN_VOCAB = ["[UNK]", "chat", "chien", "maison", "voiture"]
PAIRS = [("cat", "chat"), ("dog", "chien"), ("house", "maison"), ("car", "voiture"), ("cats", "chats")]


def _view(vocab, table, pieces=None):
    index = {t: i for i, t in enumerate(vocab)}
    pieces = pieces or {}
    return (lambda word: pieces.get(word, [word if word in index else "[UNK]"])), table, index, "[UNK]"


def test_lexicon_induction_scores_a_known_table():
    rng = np.random.default_rng(0)
    english_table = rng.normal(size=(len(ENGLISH_VOCAB), 16)).astype(np.float32)
    english = _view(ENGLISH_VOCAB, english_table, {"cats": ["cat", "##s"]})
    # chat, chien, maison copy their English rows; voiture gets the row of "house" (a wrong translation).
    foreign_table = english_table[[0, 1, 2, 3, 3]]
    result = lexicon_induction(PAIRS, english=english, foreign=_view(FOREIGN_VOCAB, foreign_table), retrieval="cosine")
    assert result.queries == 4  # "chats" is unknown to the foreign vocabulary and skipped
    assert result.candidates == 5
    assert result.precision["p@1"] == pytest.approx(3 / 4)  # voiture retrieves "house"
    assert result.precision["p@5"] == 1.0
    shuffled = lexicon_induction(PAIRS, english=english, foreign=_view(FOREIGN_VOCAB, foreign_table[[0, 4, 3, 2, 1]]))
    assert shuffled.precision["p@1"] < result.precision["p@1"]


def test_dictionary_errors_name_file_and_line(tmp_path):
    good = tmp_path / "dict.tsv"
    good.write_text("cat\tchat\n\ndog\tchien\n")
    assert read_dictionary(good) == [("cat", "chat"), ("dog", "chien")]
    bad = tmp_path / "bad.tsv"
    bad.write_text("cat\tchat\ndog chien\n")
    with pytest.raises(InputFormatError, match="bad.tsv:2"):
        read_dictionary(bad)
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n")
    with pytest.raises(InputFormatError, match="no pairs"):
        read_dictionary(empty)


def test_report_table_and_plot_are_written(tmp_path):
    rows = [{"variant": "ramen", "init": "parallel", "rows": 10, "coverage": 0.8, "aligned_share": 0.7,
             "support_size_mean": 4.0, "bli_pairs": 5, "bli_queries": 4, "bli_candidates": 5, "p@1": 0.5,
             "p@5": 1.0, "p@1_cosine": 0.5},
            {"variant": "rnd", "init": "random", "rows": 10, "coverage": 0.1, "aligned_share": 0.0,
             "support_size_mean": None, "bli_pairs": 5, "bli_queries": 4, "bli_candidates": 5, "p@1": 0.0,
             "p@5": 0.25, "p@1_cosine": 0.0}]
    write_report_tsv(rows, tmp_path / "init.tsv")
    lines = (tmp_path / "init.tsv").read_text().splitlines()
    assert lines[0].split("\t")[:4] == ["variant", "init", "rows", "coverage"]
    assert lines[2].split("\t")[5] == "NA" and lines[1].split("\t")[9] == "0.5000"
    plot_report(rows, tmp_path / "init.png", "test")
    assert (tmp_path / "init.png").read_bytes()[:4] == b"\x89PNG"
