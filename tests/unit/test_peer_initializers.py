"""Peer initialisers (WECHSEL, FOCUS, overlap, scratch) on hand-made tables: invariants of each method."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ramen.initializers import INITIALIZERS
from ramen.initializers.common import bare_string, initialisation_stats
from ramen.initializers.focus import focus_weights
from ramen.initializers.overlap import shared_tokens
from ramen.initializers.wechsel import subword_vectors, topk_softmax, word_alignment

D = 4
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SOURCE_VOCAB = [*SPECIALS, "le", "##le", "cat", "##s", "table", "house"]
# fastBPE-style foreign tokens: "</w>" ends a word.
FOREIGN_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "le</w>", "table</w>", "chat</w>", "s</w>",
                 "maison</w>", "ch", "rare</w>"]


def _source():
    torch.manual_seed(0)
    return torch.randn(len(SOURCE_VOCAB), D), torch.randn(len(SOURCE_VOCAB))


def _gen():
    return torch.Generator().manual_seed(0)


def test_bare_string_strips_each_convention_once():
    assert [bare_string(t) for t in ("##le", "le</w>", "Ġle", "▁le", "le", "##", "</w>")] == \
        ["le", "le", "le", "le", "le", "##", "</w>"]


def test_shared_tokens_prefer_the_unmarked_english_piece_and_skip_specials():
    pairs = dict(shared_tokens(FOREIGN_VOCAB, SOURCE_VOCAB, SPECIALS))
    assert pairs == {5: SOURCE_VOCAB.index("le"), 6: SOURCE_VOCAB.index("table"), 8: SOURCE_VOCAB.index("##s")}


def test_overlap_copies_exact_matches_and_keeps_random_rows_elsewhere():
    emb, bias = _source()
    result = INITIALIZERS["overlap"](emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, generator=_gen(), special_tokens=SPECIALS)
    rnd = INITIALIZERS["random"](emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, generator=_gen(), special_tokens=SPECIALS)
    for f, e in shared_tokens(FOREIGN_VOCAB, SOURCE_VOCAB, SPECIALS):
        assert torch.equal(result.embeddings[f], emb[e]) and result.bias[f] == bias[e]
    for f in (7, 9, 10, 11):  # chat, maison, ch, rare: no English spelling
        assert torch.equal(result.embeddings[f], rnd.embeddings[f]) and not result.supported[f]
    assert result.copied_special_tokens == tuple(SPECIALS)
    assert initialisation_stats(result)["support_size_mean"] == 1.0


def _token_vectors():
    rng = np.random.default_rng(0)
    vectors = {token: rng.normal(size=3).astype(np.float32) for token in FOREIGN_VOCAB if token != "rare</w>"}
    vectors["chat</w>"] = vectors["le</w>"] + 0.01  # chat is nearly le: its mixture is nearly le's row
    return vectors


def test_focus_copies_shared_rows_and_mixes_the_others_from_them():
    emb, bias = _source()
    vectors = _token_vectors()
    weights = focus_weights(FOREIGN_VOCAB, SOURCE_VOCAB, vectors, SPECIALS)
    sums = np.asarray(weights.sum(axis=1)).ravel()
    shared = dict(shared_tokens(FOREIGN_VOCAB, SOURCE_VOCAB, SPECIALS))
    for f, token in enumerate(FOREIGN_VOCAB):
        expected = 0.0 if token in SPECIALS or token == "rare</w>" else 1.0
        assert sums[f] == pytest.approx(expected, abs=1e-5), token
    # Mixtures only draw on English rows of shared tokens.
    assert set(weights[[7, 9, 10]].indices) <= set(shared.values())
    result = INITIALIZERS["focus"](emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, generator=_gen(), special_tokens=SPECIALS,
                                   token_vectors=vectors)
    for f, e in shared.items():
        assert torch.equal(result.embeddings[f], emb[e])
    mixed = torch.from_numpy(weights[7].toarray().astype(np.float32)) @ emb
    torch.testing.assert_close(result.embeddings[7], mixed[0])
    assert weights[7, SOURCE_VOCAB.index("le")] > 0.5
    assert not result.supported[11]  # no auxiliary vector: random


def test_topk_softmax_keeps_k_entries_that_sum_to_one():
    rng = np.random.default_rng(1)
    foreign = rng.normal(size=(7, 5))
    english = rng.normal(size=(20, 5))
    foreign /= np.linalg.norm(foreign, axis=1, keepdims=True)
    english /= np.linalg.norm(english, axis=1, keepdims=True)
    rows = np.ones(7, dtype=bool)
    rows[3] = False
    weights = topk_softmax(foreign, english, k=4, temperature=0.1, foreign_rows=rows)
    assert list(np.diff(weights.indptr)) == [4, 4, 4, 0, 4, 4, 4]
    np.testing.assert_allclose(np.asarray(weights.sum(axis=1)).ravel()[rows], 1.0, rtol=1e-6)
    similarities = foreign @ english.T
    for i in np.flatnonzero(rows):
        assert set(weights[i].indices) == set(np.argsort(-similarities[i])[:4])
        best = int(np.argmax(similarities[i]))
        assert weights[i, best] == weights[i].max()
    cooler = topk_softmax(foreign, english, k=4, temperature=1.0, foreign_rows=rows)
    assert cooler.max() < weights.max()  # a higher temperature flattens the mixture


class FakeFastText:
    """get_word_vector over character trigrams, like fastText's n-grams; words in frequency order."""

    def __init__(self, words, rotation=None, seed=0):
        self.words = list(words)
        self.rotation = rotation
        self.grams: dict[str, np.ndarray] = {}
        self.rng = np.random.default_rng(seed)

    def get_word_vector(self, word):
        padded = f"<{word}>"
        grams = [padded[i : i + 3] for i in range(len(padded) - 2)]
        for gram in grams:
            if gram not in self.grams:
                self.grams[gram] = self.rng.normal(size=8)
        vector = np.mean([self.grams[g] for g in grams], axis=0) if grams else np.zeros(8)
        return vector @ self.rotation if self.rotation is not None else vector


def test_wechsel_alignment_recovers_a_rotation_from_identical_strings():
    words = [f"{a}{b}{c}" for a in "abcdefg" for b in "hijklm" for c in "nopq"]
    english = FakeFastText(words, seed=3)
    rotation = np.linalg.qr(np.random.default_rng(4).normal(size=(8, 8)))[0]
    foreign = FakeFastText(words, rotation=rotation)
    foreign.grams = english.grams  # same n-gram table, seen through a rotation
    mapping = word_alignment(english, foreign, align_words=len(words), refine_iterations=0)
    np.testing.assert_allclose(mapping, rotation.T, atol=1e-4)


def test_wechsel_rows_are_softmax_mixtures_of_k_english_rows():
    emb, bias = _source()
    words = ["le", "table", "cat", "house", "maison", "chat", "les", "tables", "cats", "houses", "bleu", "rouge"]
    english = FakeFastText(words, seed=5)
    foreign = FakeFastText(words)
    foreign.grams = english.grams
    result = INITIALIZERS["wechsel"](emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, generator=_gen(), special_tokens=SPECIALS,
                                     source_model=english, foreign_model=foreign, neighbors=3, temperature=0.1,
                                     refine_iterations=0)
    weights = result.weights
    vectors, present = subword_vectors(foreign, FOREIGN_VOCAB, SPECIALS)
    assert present.sum() == len(FOREIGN_VOCAB) - len(SPECIALS)
    for f in np.flatnonzero(present):
        assert weights[f].nnz == 3 and weights[f].sum() == pytest.approx(1.0, abs=1e-6)
        expected = torch.from_numpy(weights[f].toarray().astype(np.float32)) @ emb
        torch.testing.assert_close(result.embeddings[f], expected[0])
        assert not set(weights[f].indices) & set(range(len(SPECIALS)))  # special tokens are never mixed in
    # "table</w>" has the very string of an English subword: it is its own best neighbour.
    table = FOREIGN_VOCAB.index("table</w>")
    assert weights[table].toarray().argmax() == SOURCE_VOCAB.index("table")


def test_scratch_is_all_random_and_marked_from_scratch():
    emb, bias = _source()
    result = INITIALIZERS["scratch"](emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, generator=_gen(), special_tokens=SPECIALS)
    assert not result.supported.any() and result.copied_special_tokens == ()
    assert INITIALIZERS["scratch"].from_scratch and not INITIALIZERS["random"].from_scratch
    assert float(result.embeddings.std()) == pytest.approx(1 / D, rel=0.5)


class SplitTokenizer:
    """Characters pairs as tokens, the last one of a word marked with </w>."""

    def tokenize(self, line):
        tokens = []
        for word in line.split():
            pieces = [word[i : i + 2] for i in range(0, len(word), 2)]
            pieces[-1] += "</w>"
            tokens += pieces
        return tokens

    def get_vocab(self):
        return {"ch": 0, "at</w>": 1, "le</w>": 2, "absent</w>": 3}


def test_token_fasttext_keeps_vocabulary_tokens_with_markers(tmp_path):
    from ramen.alignment.vectors import FastTextSettings, train_token_fasttext
    from ramen.data.vectors import read_vec

    corpus = tmp_path / "text.txt"
    corpus.write_text("le chat\n" * 200, encoding="utf-8")
    settings = FastTextSettings(dim=8, epoch=2, min_count=2, bucket=1000, model="cbow", neg=5)
    count = train_token_fasttext(corpus, SplitTokenizer(), tmp_path / "out" / "tokens.vec", settings)
    vectors = read_vec(tmp_path / "out" / "tokens.vec")
    assert count == 3 and sorted(vectors.words) == ["at</w>", "ch", "le</w>"]  # "absent</w>" never occurs


def test_peer_rows_pair_each_method_with_its_update_zero_run(tmp_path):
    from ramen.io import write_tsv
    from ramen.reports.peers import COLUMNS, peer_rows, write_peer_table

    write_tsv(tmp_path / "init_fr.tsv", [{"variant": "focus", "init": "focus", "coverage": 0.5,
                                          "support_size_mean": 3.0, "p@1": 0.1, "p@5": 0.2}],
              ("variant", "init", "coverage", "support_size_mean", "p@1", "p@5"))
    for variant, accuracy, las in (("focus", 0.45, 0.3), ("focus-u0", 0.40, 0.2)):
        write_tsv(tmp_path / f"xnli_{variant}" / f"{variant}_fr.tsv",
                  [{"split": "dev", "accuracy": 0.99}, {"split": "test", "accuracy": accuracy}], ("split", "accuracy"))
        write_tsv(tmp_path / f"ud_{variant}" / f"{variant}_fr.tsv", [{"split": "test", "las": las}], ("split", "las"))
        write_tsv(tmp_path / f"ret_{variant}" / f"{variant}_fr.tsv", [{"source_to_target": 0.1}], ("source_to_target",))
    paths = {task: [tmp_path / f"{task}_{v}" / f"{v}_fr.tsv" for v in ("focus", "focus-u0")] for task in ("xnli", "ud", "ret")}
    rows = peer_rows({"focus": "focus-u0"}, "fr", tmp_path / "init_fr.tsv", xnli=paths["xnli"], ud=paths["ud"],
                     retrieval=paths["ret"])
    assert rows[0]["xnli_update0"] == pytest.approx(40.0) and rows[0]["xnli_trained"] == pytest.approx(45.0)
    assert rows[0]["las_update0"] == pytest.approx(20.0) and rows[0]["coverage"] == 0.5
    write_peer_table(rows, tmp_path / "peers.tsv")
    assert (tmp_path / "peers.tsv").read_text().splitlines()[0].split("\t") == list(COLUMNS)
    with pytest.raises(ValueError, match="init_report.variants"):
        peer_rows({"wechsel": "wechsel-u0"}, "fr", tmp_path / "init_fr.tsv", xnli=[], ud=[], retrieval=[])
