"""Attachment scores: UAS and LAS as the CoNLL 2018 shared task defines them, punctuation aside.

CoNLL 2018 (``conll18_ud_eval.py``) aligns system and gold words and scores
LAS as F1 over words; with gold tokenisation, as here, every word aligns and
F1 equals accuracy over words. A word is correct for UAS when its head is
right, and for LAS when, in addition, the universal part of its relation is
right (``obl:mod`` and ``obl`` match). One difference, following the paper
(Table 2: "punctuation are removed during the evaluation"): words whose gold
UPOS is ``PUNCT`` are not counted in ``uas`` and ``las``. ``uas_all`` and
``las_all`` count every word, exactly as CoNLL 2018 does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ramen.data.conllu import Sentence, universal_relation

PUNCTUATION_UPOS = "PUNCT"


def attachment_counts(gold: Sentence, heads: Sequence[int], deprels: Sequence[str]) -> dict[str, int]:
    """Counts for one sentence: words, heads right, heads and relations right, with and without punctuation."""
    if len(heads) != len(gold) or len(deprels) != len(gold):
        raise ValueError(f"sentence at line {gold.line}: {len(gold)} gold words, "
                         f"{len(heads)} predicted heads, {len(deprels)} predicted relations")
    counts = dict.fromkeys(("words", "uas_correct", "las_correct", "words_all", "uas_all_correct",
                            "las_all_correct"), 0)
    for index in range(len(gold)):
        head_right = heads[index] == gold.heads[index]
        label_right = head_right and (universal_relation(deprels[index])
                                      == universal_relation(gold.deprels[index]))
        counts["words_all"] += 1
        counts["uas_all_correct"] += head_right
        counts["las_all_correct"] += label_right
        if gold.upos[index] != PUNCTUATION_UPOS:
            counts["words"] += 1
            counts["uas_correct"] += head_right
            counts["las_correct"] += label_right
    return counts


def attachment_scores(gold: Iterable[Sentence], heads: Iterable[Sequence[int]],
                      deprels: Iterable[Sequence[str]]) -> dict:
    """UAS/LAS (punctuation excluded) and UAS/LAS over all words for a treebank."""
    totals: dict[str, int] = {}
    sentences = 0
    for sentence, sentence_heads, sentence_deprels in zip(gold, heads, deprels, strict=True):
        for key, value in attachment_counts(sentence, sentence_heads, sentence_deprels).items():
            totals[key] = totals.get(key, 0) + value
        sentences += 1

    def ratio(correct: str, total: str) -> float | None:
        return totals[correct] / totals[total] if totals.get(total) else None

    return {
        "uas": ratio("uas_correct", "words"),
        "las": ratio("las_correct", "words"),
        "uas_all": ratio("uas_all_correct", "words_all"),
        "las_all": ratio("las_all_correct", "words_all"),
        "words": totals.get("words", 0),
        "words_all": totals.get("words_all", 0),
        "sentences": sentences,
    }
