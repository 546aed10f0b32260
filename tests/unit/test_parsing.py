"""Tree decoding and attachment scores."""

import itertools

import numpy as np
import pytest

from ramen.data.conllu import Sentence
from ramen.tasks.parsing.decode import decode_mst, is_tree, tree_score
from ramen.tasks.parsing.metrics import attachment_counts, attachment_scores


def all_trees(words: int):
    for heads in itertools.product(range(words + 1), repeat=words):
        candidate = np.array([-1, *heads])
        if is_tree(candidate):
            yield candidate


def test_is_tree_rejects_cycles_self_loops_and_two_roots():
    assert is_tree([-1, 0, 1, 1])
    assert not is_tree([-1, 0, 3, 2])  # 2 <-> 3
    assert not is_tree([-1, 0, 2])  # self-loop
    assert not is_tree([-1, 0, 0])  # two root children
    assert not is_tree([-1, 2, 1])  # no root child at all


@pytest.mark.parametrize("words", [1, 2, 3, 4])
def test_decoding_finds_the_best_tree_by_brute_force(words):
    rng = np.random.default_rng(words)
    trees = list(all_trees(words))
    for _ in range(30):
        scores = rng.normal(size=(words + 1, words + 1))
        heads = decode_mst(scores)
        assert is_tree(heads)
        best = max(tree_score(scores, tree) for tree in trees)
        assert tree_score(scores, heads) == pytest.approx(best)


def test_decoding_always_yields_a_tree_even_for_adversarial_scores():
    rng = np.random.default_rng(7)
    for words in (2, 5, 9, 17, 30):
        for _ in range(10):
            scores = rng.normal(size=(words + 1, words + 1))
            scores[1:, 0] += 5.0  # every word wants the root
            scores[np.arange(1, words + 1), np.arange(1, words + 1)] = 10.0  # and itself
            heads = decode_mst(scores)
            assert is_tree(heads) and heads[0] == -1 and len(heads) == words + 1


def test_decoding_keeps_a_non_projective_best_tree():
    # Arcs 1 <- 3 and 2 <- 4 cross; every other arc scores far lower.
    scores = np.full((5, 5), -10.0)
    scores[4, 0] = scores[1, 4] = scores[3, 1] = scores[2, 4] = 5.0
    heads = decode_mst(scores)
    assert heads.tolist() == [-1, 4, 4, 1, 0]


def sentence(upos, heads, deprels):
    return Sentence(forms=tuple("w" * len(upos)), upos=tuple(upos), heads=tuple(heads), deprels=tuple(deprels))


def test_attachment_scores_by_hand_with_punctuation_excluded():
    gold = [
        sentence(["PRON", "VERB", "NOUN", "PUNCT"], [2, 0, 2, 2], ["nsubj", "root", "obj", "punct"]),
        sentence(["NOUN", "ADP", "PUNCT"], [0, 1, 1], ["root", "case", "punct"]),
    ]
    heads = [[2, 0, 1, 1], [0, 3, 1]]
    deprels = [["nsubj", "root", "obj", "punct"], ["root", "case", "punct"]]
    scores = attachment_scores(gold, heads, deprels)
    # Non-punctuation words: 5; heads right: w1, w2 of s1 and w1 of s2 -> 3; labels also right for them.
    assert (scores["words"], scores["words_all"], scores["sentences"]) == (5, 7, 2)
    assert scores["uas"] == pytest.approx(3 / 5) and scores["las"] == pytest.approx(3 / 5)
    # All words: the final punctuation of s2 is attached right, that of s1 is not.
    assert scores["uas_all"] == pytest.approx(4 / 7) and scores["las_all"] == pytest.approx(4 / 7)


def test_las_compares_universal_relations_and_needs_the_right_head():
    gold = sentence(["NOUN", "NOUN", "VERB"], [3, 3, 0], ["obl:mod", "nsubj", "root"])
    counts = attachment_counts(gold, [3, 3, 0], ["obl", "obj", "root"])
    assert (counts["uas_correct"], counts["las_correct"]) == (3, 2)  # obl:mod == obl; nsubj != obj
    counts = attachment_counts(gold, [2, 3, 0], ["obl:mod", "nsubj", "root"])
    assert (counts["uas_correct"], counts["las_correct"]) == (2, 2)  # a right label on a wrong head
    with pytest.raises(ValueError, match="3 gold words"):
        attachment_counts(gold, [0], ["root"])
