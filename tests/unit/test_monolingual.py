"""Monolingual route: sparsemax alpha, word-vector files, Procrustes, eq. 4 subword vectors."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from ramen.alignment.procrustes import (
    AlignSettings,
    SeedFilter,
    align_vectors,
    identical_seed,
    nearest_neighbours,
    normalise_embeddings,
    procrustes,
    subword_vectors,
)
from ramen.errors import ConfigError, InputFormatError
from ramen.alignment.monolingual import settings_from_config
from ramen.alignment.sparsemax import sparsemax, sparsemax_alpha, sparsemax_threshold
from ramen.alignment.vectors import FastTextSettings, train_fasttext
from ramen.data.vectors import WordVectors, load_vectors, read_vec, write_vec


def brute_force_sparsemax(row: np.ndarray) -> np.ndarray:
    """Martins & Astudillo (2016), Algorithm 1, with a full sort."""
    z = np.sort(row)[::-1].astype(np.float64)
    cumulative = np.cumsum(z)
    k = np.arange(1, len(z) + 1)
    support = k[1 + k * z > cumulative].max()
    tau = (cumulative[support - 1] - 1) / support
    return np.maximum(row - tau, 0)


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, 100.0])
def test_sparsemax_equals_brute_force_reference(scale):
    generator = torch.Generator().manual_seed(1)
    z = torch.randn(64, 300, generator=generator, dtype=torch.float64) * scale
    # Small k forces the enlarge-and-retry path for the wide supports of small scales.
    ours = sparsemax(z, k=2).numpy()
    expected = np.stack([brute_force_sparsemax(row) for row in z.numpy()])
    np.testing.assert_allclose(ours, expected, atol=1e-12)
    np.testing.assert_allclose(ours.sum(axis=1), 1.0, atol=1e-9)


def test_sparsemax_equals_entmax_package():
    import entmax

    z = torch.randn(32, 500, generator=torch.Generator().manual_seed(2)) * 5
    np.testing.assert_allclose(sparsemax(z).numpy(), entmax.sparsemax(z, dim=1).numpy(), atol=1e-6)


def test_sparsemax_handles_ties_and_masked_entries():
    z = torch.tensor([[1.0, 1.0, 1.0, float("-inf")], [5.0, float("-inf"), 0.0, 0.0]])
    tau, support = sparsemax_threshold(z, k=1)
    assert support.tolist() == [3, 1]
    np.testing.assert_allclose(sparsemax(z, k=1).numpy(), [[1 / 3, 1 / 3, 1 / 3, 0], [1, 0, 0, 0]], atol=1e-7)


def test_sparsemax_alpha_is_sparse_exact_and_chunk_independent():
    generator = torch.Generator().manual_seed(3)
    foreign = torch.nn.functional.normalize(torch.randn(50, 16, generator=generator), dim=1)
    english = torch.nn.functional.normalize(torch.randn(70, 16, generator=generator), dim=1)
    rows = torch.ones(50, dtype=torch.bool)
    rows[[3, 7]] = False
    columns = torch.ones(70, dtype=torch.bool)
    columns[:5] = False
    alpha = sparsemax_alpha(foreign, english, temperature=8.0, foreign_rows=rows, english_columns=columns,
                            chunk_rows=7, k=2, progress=False)
    again = sparsemax_alpha(foreign, english, temperature=8.0, foreign_rows=rows, english_columns=columns,
                            chunk_rows=50, progress=False)
    assert alpha.shape == (50, 70)
    assert (alpha != again).nnz == 0
    sums = np.asarray(alpha.sum(axis=1)).ravel()
    np.testing.assert_allclose(sums[rows.numpy()], 1.0, atol=1e-5)
    assert sums[3] == 0 and sums[7] == 0
    assert alpha[:, :5].nnz == 0
    scores = (8.0 * foreign @ english.t()).double().numpy()
    scores[:, :5] = -np.inf
    expected = np.stack([brute_force_sparsemax(row) for row in scores])
    np.testing.assert_allclose(alpha.toarray()[rows.numpy()], expected[rows.numpy()], atol=1e-5)
    assert alpha.nnz < 0.5 * rows.sum().item() * 65


def test_sparsemax_alpha_rejects_mismatched_dimensions():
    with pytest.raises(ValueError, match="same dimension"):
        sparsemax_alpha(torch.zeros(3, 4), torch.zeros(5, 6), progress=False)
    with pytest.raises(ValueError, match="empty"):
        sparsemax_alpha(torch.zeros(3, 4), torch.zeros(0, 4), progress=False)


# --------------------------------------------------------------------------- word-vector files


def _write(path, text: bytes):
    path.write_bytes(text)
    return path


def test_read_vec_round_trip_with_normalisation_and_gzip(tmp_path):
    vectors = WordVectors(["Paris", "paris", "chat"], np.arange(9, dtype=np.float32).reshape(3, 3))
    write_vec(tmp_path / "v.vec", vectors)
    loaded = read_vec(tmp_path / "v.vec", normalise=str.lower)
    assert loaded.words == ["paris", "chat"]  # the first, most frequent spelling wins
    np.testing.assert_allclose(loaded.vectors, vectors.vectors[[0, 2]])
    with gzip.open(tmp_path / "v.vec.gz", "wb") as handle:
        handle.write((tmp_path / "v.vec").read_bytes())
    assert load_vectors(tmp_path / "v.vec.gz", max_words=2).words == ["Paris", "paris"]


@pytest.mark.parametrize(
    "content, line, problem",
    [
        (b"2 3\nchat 1 2 3\nchien 1 2\n", 3, "2 values, the header says 3"),
        (b"3 3\nchat 1 2 3\nchien 1 2 3\n", 4, "ends after 2 of 3 vectors"),
        (b"2 3\nchat 1 2 3\nchien 1 2", 3, "ends in the middle of a line"),
        (b"2 3\nchat 1 2 3\nch\xe9ri 1 2 3\n", 3, "not valid UTF-8"),
        (b"chat 1 2 3\n", 1, "is not 'count dimension'"),
        (b"0 3\n", 1, "holds no vectors"),
        (b"1 3\nchat 1 x 3\n", 2, "not a number"),
    ],
)
def test_bad_vec_files_fail_naming_file_and_line(tmp_path, content, line, problem):
    path = _write(tmp_path / "bad.vec", content)
    with pytest.raises(InputFormatError, match=problem) as error:
        read_vec(path)
    assert error.value.path == str(path) and error.value.line == line


def test_a_vocabulary_with_no_usable_word_fails_naming_the_file(tmp_path):
    path = _write(tmp_path / "en.vec", b"2 2\n1999 1 2\n2000 3 4\n")
    with pytest.raises(InputFormatError, match="no usable words") as error:
        read_vec(path, normalise=lambda word: word if word.isalpha() else "")
    assert error.value.path == str(path)


def test_vectors_of_the_wrong_dimension_fail_naming_the_file(tmp_path):
    path = _write(tmp_path / "fr.vec", b"1 3\nchat 1 2 3\n")
    with pytest.raises(InputFormatError, match="dimension 3, expected 300") as error:
        load_vectors(path, expected_dim=300)
    assert str(path) in str(error.value)


def test_fasttext_trains_and_bin_models_load(tmp_path):
    corpus = tmp_path / "words.txt"
    rng = np.random.default_rng(0)
    vocabulary = [f"mot{i}" for i in range(30)]
    corpus.write_text("\n".join(" ".join(rng.choice(vocabulary, 12)) for _ in range(300)) + "\n")
    settings = FastTextSettings(dim=8, epoch=1, min_count=1)
    assert train_fasttext(corpus, tmp_path / "out.vec", settings) == 30
    loaded = read_vec(tmp_path / "out.vec", expected_dim=8)
    assert set(loaded.words) == set(vocabulary) and np.isfinite(loaded.vectors).all()
    with pytest.raises(InputFormatError, match="empty corpus"):
        train_fasttext(_write(tmp_path / "empty.txt", b""), tmp_path / "x.vec", settings)
    import fasttext

    fasttext.train_unsupervised(str(corpus), model="skipgram", dim=5, epoch=1, minCount=1, bucket=200_000,
                                thread=1, verbose=0).save_model(str(tmp_path / "model.bin"))
    assert load_vectors(tmp_path / "model.bin", words=["mot1", "unseen"]).vectors.shape == (2, 5)
    with pytest.raises(InputFormatError, match="dimension 5, expected 8") as error:
        load_vectors(tmp_path / "model.bin", words=["mot1"], expected_dim=8)
    assert str(tmp_path / "model.bin") in str(error.value)
    with pytest.raises(InputFormatError, match="not a fastText .bin model") as error:
        load_vectors(_write(tmp_path / "junk.bin", b"not a model"), words=["a"])
    assert str(tmp_path / "junk.bin") in str(error.value)


# --------------------------------------------------------------------------- alignment


def test_procrustes_recovers_a_rotation():
    rng = np.random.default_rng(0)
    rotation, _ = np.linalg.qr(rng.normal(size=(20, 20)))
    source = rng.normal(size=(200, 20)).astype(np.float32)
    mapping = procrustes(source, source @ rotation + rng.normal(scale=1e-3, size=(200, 20)))
    np.testing.assert_allclose(mapping, rotation, atol=1e-3)
    np.testing.assert_allclose(mapping @ mapping.T, np.eye(20), atol=1e-5)


def test_identical_seed_drops_short_words_numbers_and_rank_mismatches():
    foreign = ["de", "les", "table", "2019", "...", "piano", "rare"]
    english = ["the", "of", "table", "piano", "2019", "..."] + [f"w{i}" for i in range(40)] + ["les", "rare"]
    pairs = identical_seed(foreign, english, SeedFilter(min_length=3, max_log_rank_ratio=1.0))
    assert [foreign[i] for i, _ in pairs] == ["table", "piano"]


def test_alignment_with_refinement_recovers_a_hidden_translation():
    rng = np.random.default_rng(1)
    n, d = 300, 24
    english = normalise_embeddings(rng.normal(size=(n, d)))
    rotation, _ = np.linalg.qr(rng.normal(size=(d, d)))
    permutation = rng.permutation(n)
    permutation[:40] = np.arange(40)  # the frequent words keep their rank in both languages
    foreign = (english[permutation] @ rotation.T).astype(np.float32)
    english_words = [f"e{i}" for i in range(n)]
    foreign_words = [f"f{i}" for i in range(n)]
    for i in range(0, 40):  # identical strings for the frequent words
        foreign_words[i] = english_words[i] = f"shared{i}"
    settings = AlignSettings(seed_filter=SeedFilter(min_length=1), refine_iterations=2, csls_k=5)
    alignment = align_vectors(foreign, english, foreign_words, english_words, settings)
    assert len(alignment.seed_pairs) == 40 and alignment.held_out_p1 == 1.0
    unrelated = normalise_embeddings(rng.normal(size=(n, d)))
    assert align_vectors(unrelated, english, foreign_words, english_words, settings).held_out_p1 < 0.5
    found = nearest_neighbours(foreign @ alignment.mapping, english, retrieval="csls", k=5)[:, 0]
    assert (found == permutation).mean() > 0.95
    assert alignment.history[-1]["pairs"] > 200


def test_subword_vectors_follow_eq_4():
    vocab = ["[UNK]", "chat", "##s", "chien", "orphan"]
    tokens = {"chat": ["chat"], "chats": ["chat", "##s"], "chiens": ["chien", "##s"]}
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    table, mask = subword_vectors(["chat", "chats", "chiens"], vectors, np.array([0.5, 0.1, 0.2]),
                                  tokens.__getitem__, vocab)
    np.testing.assert_allclose(table[1], (0.5 * vectors[0] + 0.1 * vectors[1]) / 0.6, rtol=1e-6)
    np.testing.assert_allclose(table[2], (0.1 * vectors[1] + 0.2 * vectors[2]) / 0.3, rtol=1e-6)
    np.testing.assert_allclose(table[3], vectors[2], rtol=1e-6)
    assert mask.tolist() == [False, True, True, True, False] and not table[4].any()


def test_monolingual_settings_from_config_reject_unknown_keys():
    settings = settings_from_config({"top_words": 10, "seed_min_length": 2, "retrieval": "cosine",
                                     "temperature": 3.0})
    assert settings.top_words == 10 and settings.align.seed_filter.min_length == 2
    assert settings.align.retrieval == "cosine" and settings.temperature == 3.0
    with pytest.raises(ConfigError, match="'monolingual.top_word': unknown setting"):
        settings_from_config({"top_word": 10})
    with pytest.raises(ConfigError, match="monolingual.retrieval"):
        settings_from_config({"retrieval": "dot"})
    # Typed by the one settings parser, and named as the flat section spells the key.
    with pytest.raises(ConfigError, match="'monolingual.seed_min_length': 'two' is not an integer"):
        settings_from_config({"seed_min_length": "two"})
    with pytest.raises(ConfigError, match="'monolingual.refine_words': 2.5 is not an integer"):
        settings_from_config({"refine_words": 2.5})


def test_monolingual_alpha_from_pretrained_vec_files(tmp_path):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from ramen.alignment.monolingual import MonolingualSettings, monolingual_alpha, pretokenize_corpus

    rng = np.random.default_rng(4)
    shared = [f"name{i:02d}" for i in range(40)]  # identical strings: the seed
    english_only = ["cat", "dog", "house", "car", "tree", "river"]
    french_only = ["chat", "chien", "maison", "voiture", "arbre", "rivière"]

    def tokenizer(words):
        vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
        backend = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
        backend.normalizer = normalizers.Lowercase()
        backend.pre_tokenizer = pre_tokenizers.Whitespace()
        return PreTrainedTokenizerFast(tokenizer_object=backend, cls_token="[CLS]", sep_token="[SEP]",
                                       pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]")

    english_words, french_words = shared + english_only, shared + french_only
    english_vectors = rng.normal(size=(len(english_words), 16)).astype(np.float32)
    rotation, _ = np.linalg.qr(rng.normal(size=(16, 16)))
    french_vectors = (english_vectors @ rotation).astype(np.float32)  # chat = rotated cat, and so on
    # Published files are cased and sorted by frequency; the words are lowercased like the tokenizers do.
    write_vec(tmp_path / "en.vec", WordVectors([w.capitalize() for w in english_words], english_vectors))
    write_vec(tmp_path / "fr.vec", WordVectors(french_words, french_vectors))
    for lang, words in (("en", english_words), ("fr", french_words)):
        # Zipf-like counts in list order, so frequency ranks agree across the languages.
        lines = [" ".join([word] * max(1, 200 // (rank + 1))) for rank, word in enumerate(words)]
        (tmp_path / f"{lang}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    source, foreign = tokenizer(english_words), tokenizer(french_words)
    pretokenize_corpus(tmp_path / "en.txt", source, tmp_path / "en.words")
    pretokenize_corpus(tmp_path / "fr.txt", foreign, tmp_path / "fr.words")
    settings = MonolingualSettings(temperature=20.0, align=AlignSettings(refine_iterations=1, csls_k=3))
    alpha, stats = monolingual_alpha(tmp_path / "en.vec", tmp_path / "fr.vec", tmp_path / "en.words",
                                     tmp_path / "fr.words", source, foreign, settings,
                                     source_vocab=ordered(source), foreign_vocab=ordered(foreign))
    assert alpha.shape == (len(foreign), len(source)) and stats["seed_pairs"] == 40
    assert stats["seed_held_out_p1"] == 1.0
    sums = np.asarray(alpha.sum(axis=1)).ravel()
    assert np.allclose(sums[5:], 1.0, atol=1e-5) and not sums[:5].any()  # special tokens have no vector
    source_vocab, foreign_vocab = ordered(source), ordered(foreign)
    for french, english in zip(french_only, english_only):
        row = alpha[foreign_vocab.index(french)].toarray().ravel()
        assert source_vocab[int(row.argmax())] == english and row.max() > 0.5
    write_vec(tmp_path / "small.vec", WordVectors(french_words, french_vectors[:, :8]))
    with pytest.raises(InputFormatError, match="small.vec:1: vectors have dimension 8, expected 16"):
        monolingual_alpha(tmp_path / "en.vec", tmp_path / "small.vec", tmp_path / "en.words", tmp_path / "fr.words",
                          source, foreign, settings, source_vocab=source_vocab, foreign_vocab=foreign_vocab)


def ordered(tokenizer):
    from ramen.vocab.tokenizer import ordered_vocab

    return ordered_vocab(tokenizer)


def test_a_spurious_fasttext_nan_is_tried_again_and_a_lasting_one_is_raised():
    from ramen.alignment.vectors import _train_unsupervised

    class Flaky:
        def __init__(self, failures):
            self.failures, self.calls = failures, 0

        def train_unsupervised(self, path, **options):
            self.calls += 1
            if self.calls <= self.failures:
                raise RuntimeError("Encountered NaN.")
            return (path, options)

    once = Flaky(1)
    assert _train_unsupervised(once, "c.txt", dim=8) == ("c.txt", {"dim": 8}) and once.calls == 2
    always = Flaky(5)
    with pytest.raises(RuntimeError, match="NaN"):
        _train_unsupervised(always, "c.txt", dim=8)
    assert always.calls == 3
