"""Tests for the NLI readers and writer."""

from __future__ import annotations

import pytest

from ramen.errors import ConfigError, InputFormatError
from ramen.data.nli_data import (
    LABELS,
    NliExample,
    read_nli,
    read_sick,
    read_xnli_tsv,
    write_nli_tsv,
)

SICK_HEADER = (
    "pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\tentailment_AB\t"
    "entailment_BA\tsentence_A_original\tsentence_B_original\tsentence_A_dataset\t"
    "sentence_B_dataset\tSemEval_set"
)


def sick_row(pair_id: int, a: str, b: str, label: str, split: str) -> str:
    return f"{pair_id}\t{a}\t{b}\t{label}\t4.5\tA_x_B\tB_x_A\t{a}\t{b}\tFLICKR\tFLICKR\t{split}"


def write(path, lines, newline="\n"):
    path.write_text(newline.join(lines) + newline, encoding="utf-8")
    return path


def test_labels_order_is_fixed():
    assert LABELS == ("entailment", "neutral", "contradiction")


def test_read_xnli_tsv_reads_pairs_labels_and_keeps_accents(tmp_path):
    path = write(
        tmp_path / "x.tsv",
        [
            "premise\thypothesis\tlabel\tgenre",
            "Il a dit « maman ».\tIl n'a rien dit.\tcontradiction\tfacetoface",
            "Un été chaud.\tIl fait chaud.\tentailment\tfiction",
            "",
            "Le chat dort.\tLe chat est noir.\tNeutral\tfiction",
        ],
    )
    examples = read_xnli_tsv(path)
    assert examples == [
        NliExample("Il a dit « maman ».", "Il n'a rien dit.", 2),
        NliExample("Un été chaud.", "Il fait chaud.", 0),
        NliExample("Le chat dort.", "Le chat est noir.", 1),
    ]
    assert examples[0].label_name == "contradiction"


def test_read_xnli_tsv_genre_is_optional_and_contradictory_is_accepted(tmp_path):
    path = write(tmp_path / "x.tsv", ["premise\thypothesis\tlabel", "A.\tB.\tcontradictory"])
    assert read_xnli_tsv(path) == [NliExample("A.", "B.", 2)]


def test_read_xnli_tsv_missing_column_names_line_1(tmp_path):
    path = write(tmp_path / "x.tsv", ["premise\tlabel\tgenre", "A.\tneutral\tfiction"])
    with pytest.raises(InputFormatError, match="hypothesis") as caught:
        read_xnli_tsv(path)
    assert caught.value.line == 1
    assert caught.value.path == str(path)


def test_read_xnli_tsv_wrong_field_count_names_line(tmp_path):
    path = write(
        tmp_path / "x.tsv",
        ["premise\thypothesis\tlabel\tgenre", "A.\tB.\tneutral\tfiction", "C.\tD.\tneutral"],
    )
    with pytest.raises(InputFormatError, match="expected 4 tab-separated fields.*found 3") as caught:
        read_xnli_tsv(path)
    assert caught.value.line == 3
    assert f"{path}:3" in str(caught.value)


def test_read_xnli_tsv_unknown_label_names_line(tmp_path):
    path = write(
        tmp_path / "x.tsv",
        ["premise\thypothesis\tlabel\tgenre", "A.\tB.\tneutral\tf", "C.\tD.\tmaybe\tf"],
    )
    with pytest.raises(InputFormatError, match="unknown label 'maybe'") as caught:
        read_xnli_tsv(path)
    assert caught.value.line == 3


def test_read_xnli_tsv_empty_hypothesis_and_empty_file(tmp_path):
    path = write(tmp_path / "x.tsv", ["premise\thypothesis\tlabel", "A.\t \tneutral"])
    with pytest.raises(InputFormatError, match="empty hypothesis") as caught:
        read_xnli_tsv(path)
    assert caught.value.line == 2
    empty = tmp_path / "empty.tsv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(InputFormatError, match="empty"):
        read_xnli_tsv(empty)


def test_read_sick_filters_splits_and_handles_crlf(tmp_path):
    path = write(
        tmp_path / "SICK.txt",
        [
            SICK_HEADER,
            sick_row(1, "A dog runs", "An animal runs", "ENTAILMENT", "TRAIN"),
            sick_row(2, "A man sings", "A man is silent", "CONTRADICTION", "TEST"),
            sick_row(3, "A cat sleeps", "A cat is black", "NEUTRAL", "TRIAL"),
            sick_row(4, "Kids play", "Nobody plays", "CONTRADICTION", "TRAIN"),
        ],
        newline="\r\n",
    )
    assert read_sick(path) == [
        NliExample("A dog runs", "An animal runs", 0),
        NliExample("Kids play", "Nobody plays", 2),
    ]
    assert [e.premise for e in read_sick(path, splits=("trial", "TEST"))] == ["A man sings", "A cat sleeps"]


def test_read_sick_errors(tmp_path):
    path = write(tmp_path / "SICK.txt", [SICK_HEADER, sick_row(1, "A", "B", "MAYBE", "TRAIN")])
    with pytest.raises(InputFormatError, match="unknown label") as caught:
        read_sick(path)
    assert caught.value.line == 2
    with pytest.raises(ConfigError, match="splits"):
        read_sick(path, splits=["DEV"])
    no_split = write(
        tmp_path / "bad.txt", ["pair_ID\tsentence_A\tsentence_B\tentailment_label", "1\tA\tB\tNEUTRAL"]
    )
    with pytest.raises(InputFormatError, match="SemEval_set") as caught:
        read_sick(no_split)
    assert caught.value.line == 1


def test_read_nli_dispatches_on_format(tmp_path):
    xnli = write(tmp_path / "x.tsv", ["premise\thypothesis\tlabel", "A.\tB.\tneutral"])
    sick = write(
        tmp_path / "SICK.txt",
        [SICK_HEADER, sick_row(1, "A", "B", "NEUTRAL", "TRAIN"), sick_row(2, "C", "D", "ENTAILMENT", "TEST")],
    )
    assert read_nli({"path": str(xnli), "format": "xnli"}) == [NliExample("A.", "B.", 1)]
    assert read_nli({"path": sick, "format": "sick"}) == [NliExample("A", "B", 1)]
    assert read_nli({"path": sick, "format": "sick", "splits": ["TEST"]}) == [NliExample("C", "D", 0)]
    with pytest.raises(ConfigError, match="format"):
        read_nli({"path": xnli, "format": "snli"})
    with pytest.raises(ConfigError, match="splits"):
        read_nli({"path": xnli, "format": "xnli", "splits": ["TRAIN"]})


def test_write_nli_tsv_round_trips_and_rejects_tabs(tmp_path):
    examples = [NliExample("Ça va ?", "Oui.", 0), NliExample("Il pleut.", "Il fait beau.", 2)]
    out = tmp_path / "sub" / "nli.tsv"
    assert write_nli_tsv(out, examples) == 2
    assert out.read_text(encoding="utf-8").splitlines()[0] == "premise\thypothesis\tlabel"
    assert read_xnli_tsv(out) == examples
    with pytest.raises(ValueError, match="tab"):
        write_nli_tsv(tmp_path / "bad.tsv", [NliExample("a\tb", "c", 0)])
    assert not (tmp_path / "bad.tsv").exists()
    with pytest.raises(ValueError, match="label"):
        write_nli_tsv(tmp_path / "bad.tsv", [NliExample("a", "c", 3)])


XNLI_RELEASE_HEADER = (
    "language\tgold_label\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
    "sentence2_parse\tsentence1\tsentence2\tpromptID\tpairID\tgenre\n"
)


def test_xnli_release_language_cuts_one_language_in_the_project_format(tmp_path):
    from ramen.data.nli_data import read_xnli_tsv, xnli_release_language

    release = tmp_path / "xnli.dev.tsv"
    release.write_text(
        XNLI_RELEASE_HEADER
        + "en\tentailment\t\t\t\t\tA man sleeps.\tSomeone sleeps.\t1\t1\tfiction\n"
        + "fr\tcontradiction\t\t\t\t\tUn homme dort.\tPersonne ne dort.\t1\t1\tfiction\n"
        + "fr\tneutral\t\t\t\t\tIl fait beau à Noël.\tIl neige.\t2\t2\tfiction\n"
        + "zh\tneutral\t\t\t\t\t我爱你。\t你好。\t2\t2\tfiction\n",
        encoding="utf-8",
    )
    out = tmp_path / "xnli.dev.fr.tsv"
    assert xnli_release_language(release, "fr", out) == 2
    assert [(e.premise, e.hypothesis, e.label_name) for e in read_xnli_tsv(out)] == [
        ("Un homme dort.", "Personne ne dort.", "contradiction"),
        ("Il fait beau à Noël.", "Il neige.", "neutral"),
    ]
    with pytest.raises(InputFormatError, match="no pair in language 'sw'"):
        xnli_release_language(release, "sw", tmp_path / "xnli.dev.sw.tsv")
    assert not (tmp_path / "xnli.dev.sw.tsv").exists()


def test_read_nli_multinli_skips_pairs_without_gold_label(tmp_path):
    train = tmp_path / "multinli_1.0_train.txt"
    train.write_text(
        "gold_label\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse\t"
        "sentence1\tsentence2\tpromptID\tpairID\tgenre\tlabel1\n"
        "neutral\t\t\t\t\tConceptually cream skimming has two dimensions.\tProduct and geography matter.\t1\t1e\tgov\tneutral\n"
        "-\t\t\t\t\tNo majority here.\tNone.\t2\t2e\tgov\tneutral\n"
        "entailment\t\t\t\t\tYou know during the season.\tYou lose the things.\t3\t3e\ttelephone\tentailment\n",
        encoding="utf-8",
    )
    examples = read_nli({"path": str(train), "format": "multinli"})
    assert [e.label_name for e in examples] == ["neutral", "entailment"]
    assert examples[1].premise == "You know during the season."
