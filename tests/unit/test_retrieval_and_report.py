"""Sentence retrieval accuracy, and the paper comparison report."""

import pytest

torch = pytest.importorskip("torch")

from ramen.errors import ConfigError, InputFormatError  # noqa: E402
from ramen.reports.paper import compare, markdown_tables, our_scores, read_paper_tables  # noqa: E402
from ramen.tasks import retrieval  # noqa: E402
from ramen.tasks.ud import results_row as ud_row  # noqa: E402
from ramen.tasks.ud import write_results as write_ud  # noqa: E402
from ramen.tasks.xnli import accuracy_report, results_row, write_results_tsv  # noqa: E402

PAPER = "workflow/resources/paper/tables.tsv"


def unit(rows):
    return torch.nn.functional.normalize(torch.tensor(rows, dtype=torch.float32), dim=-1)


def test_retrieval_accuracy_both_directions_by_hand():
    source = unit([[1, 0, 0], [0, 1, 0], [0, 0, 1]])
    target = unit([[1, 0.3, 0], [0, 0, 1], [0, 0.1, 1]])
    forward, backward = retrieval.retrieval_accuracy(source, target, chunk=2)
    # source->target: s0->t0 right, s1->t0 wrong, s2->t1 wrong: 1/3.
    # target->source: t0->s0 right, t1->s2 wrong, t2->s2 right: 2/3.
    assert (forward, backward) == (pytest.approx(1 / 3), pytest.approx(2 / 3))
    with pytest.raises(ValueError, match="equal"):
        retrieval.retrieval_accuracy(source, target[:2])


def test_retrieval_of_a_model_with_itself_is_perfect(tiny_source_dir):
    sentences = ["the cat is on the mat", "she was a teacher", "they and we", "the old dog", "red house"]
    settings = retrieval.RetrievalSettings(layer=-1, max_length=16, batch_size=2)
    scores = retrieval.evaluate_retrieval(tiny_source_dir, tiny_source_dir, sentences, sentences, settings)
    assert scores["source_to_target"] == scores["target_to_source"] == 1.0 and scores["pairs"] == 5
    with pytest.raises(ConfigError, match="layer"):
        retrieval.embed(tiny_source_dir, sentences, retrieval.RetrievalSettings(layer=9))


def test_read_pairs_checks_alignment(tmp_path):
    (tmp_path / "a").write_text("one\ntwo\n")
    (tmp_path / "b").write_text("un\n")
    with pytest.raises(InputFormatError, match="1 lines but"):
        retrieval.read_pairs(tmp_path / "a", tmp_path / "b")
    (tmp_path / "b").write_text("un\n\n")
    with pytest.raises(InputFormatError, match=":2: empty sentence"):
        retrieval.read_pairs(tmp_path / "a", tmp_path / "b")


def test_paper_tables_hold_the_printed_numbers():
    rows = read_paper_tables(PAPER)
    value = {(r["table"], r["task"], r["model"], r["init"], r["lang"]): r["value"] for r in rows}
    assert value[1, "xnli", "mBERT", "-", "fr"] == 73.8
    assert value[1, "xnli", "RAMEN base + BERT", "parallel", "fr"] == 75.1
    assert value[2, "ud", "RAMEN base + BERT", "parallel", "fr"] == 77.0
    assert value[3, "ud", "RAMEN base + BERT", "random", "fr"] == 71.0
    assert value[4, "ud_supervised", "mBERT", "-", "avg"] == 84.6
    assert len(rows) == 7 * (13 + 9 + 6 + 5)


def test_comparison_places_variants_beside_matching_rows(tmp_path):
    xnli_path = tmp_path / "ramen_fr.tsv"
    write_results_tsv(xnli_path, [results_row(accuracy_report([0, 1], [0, 0]), variant="ramen", lang="fr",
                                              split="test")])
    ud_path = tmp_path / "ud" / "rnd_fr.tsv"
    scores = {"las": 0.25, "uas": 0.5, "las_all": 0.2, "uas_all": 0.4, "words": 4, "sentences": 1}
    write_ud(ud_path, [ud_row(scores, variant="rnd", lang="fr", split="test", mode="zero-shot"),
                       ud_row(scores, variant="rnd", lang="fr", split="dev", mode="zero-shot")])
    source_path = tmp_path / "ud" / "source_fr.tsv"
    write_ud(source_path, [ud_row(scores, variant="source", lang="fr", split="test", mode="zero-shot")])
    ours = our_scores([xnli_path, ud_path, source_path])
    assert [(s["task"], s["variant"], s["value"]) for s in ours] == [
        ("xnli", "ramen", 50.0), ("ud", "rnd", 25.0), ("ud", "source", 25.0)]
    paper = read_paper_tables(PAPER)
    rows = compare(paper, ours, {"ramen": "parallel", "rnd": "random", "source": "none"})
    placed = {(r["table"], r["variant"]): (r["paper"], r["difference"]) for r in rows}
    assert placed == {(1, "ramen"): (75.1, pytest.approx(50.0 - 75.1)), (3, "rnd"): (71.0, pytest.approx(-46.0)),
                      (2, "source"): (None, None)}
    text = markdown_tables(paper, rows, "demo")
    assert "| **ours: ramen** (vs RAMEN base + BERT, parallel) | parallel | 50.0 |" in text
    assert "## Table 4" in text
