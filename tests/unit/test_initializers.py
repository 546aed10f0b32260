"""Foreign embedding initialisers: alpha mixtures, random rows, special tokens, registry."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from ramen.alignment.parallel import count_links, translation_probabilities
from ramen.errors import ConfigError
from ramen.initializers import INITIALIZERS, check_init_vocabulary, get_entry
from ramen.initializers.common import DEFAULT_SPECIAL_TOKENS, InitResult, initialisation_stats

D = 6
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SOURCE_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "dog", "house", "##s"]
# "[MASK]" sits at a different index than in English; "<extra>" exists only here.
FOREIGN_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "le", "chat", "chien", "maison", "[MASK]", "<extra>", "rare"]


def _toy():
    torch.manual_seed(0)
    emb = torch.randn(len(SOURCE_VOCAB), D)
    bias = torch.randn(len(SOURCE_VOCAB))
    dense = np.zeros((len(FOREIGN_VOCAB), len(SOURCE_VOCAB)))
    dense[4, 5] = 1.0  # le -> the
    dense[5, [6, 9]] = [0.75, 0.25]  # chat -> cat, ##s
    dense[6, [7, 5, 9]] = [0.5, 0.3, 0.2]  # chien
    dense[7, 8] = 1.0  # maison -> house
    dense[0, 6] = 1.0  # a special token with alignment support: the copy must win
    # rows 9 ("<extra>") and 10 ("rare") have no support
    return emb, bias, dense


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_parallel_rows_and_bias_equal_alpha_times_english():
    emb, bias, dense = _toy()
    result = get_entry("parallel").load()(
        emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, alpha=sp.csr_matrix(dense), generator=_gen(), special_tokens=SPECIALS
    )
    assert isinstance(result, InitResult)
    assert result.embeddings.shape == (len(FOREIGN_VOCAB), D)
    assert result.embeddings.dtype == emb.dtype and result.bias.shape == (len(FOREIGN_VOCAB),)
    expected = dense @ emb.double().numpy()
    expected_bias = dense @ bias.double().numpy()
    for row in [4, 5, 6, 7]:
        np.testing.assert_allclose(result.embeddings[row].numpy(), expected[row], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(result.bias[row].item(), expected_bias[row], rtol=1e-5, atol=1e-6)
    assert result.supported.dtype == torch.bool
    assert result.supported.tolist() == [True] * 9 + [False, False]


def test_special_tokens_copied_exactly_by_string():
    emb, bias, dense = _toy()
    for name in ["random", "parallel"]:
        result = INITIALIZERS[name](
            emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, alpha=sp.csr_matrix(dense), generator=_gen(), special_tokens=SPECIALS
        )
        for tok in SPECIALS:
            f, e = FOREIGN_VOCAB.index(tok), SOURCE_VOCAB.index(tok)
            assert torch.equal(result.embeddings[f], emb[e]), (name, tok)
            assert torch.equal(result.bias[f], bias[e]), (name, tok)
            assert bool(result.supported[f])
        assert set(result.copied_special_tokens) == set(SPECIALS)
        # a bracketed token that is not an English token is not copied
        assert not bool(result.supported[FOREIGN_VOCAB.index("<extra>")])


def test_default_special_tokens_are_the_bert_ones():
    emb, bias, dense = _toy()
    result = INITIALIZERS["random"](emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, alpha=None, generator=_gen())
    assert set(result.copied_special_tokens) == set(DEFAULT_SPECIAL_TOKENS)
    none = INITIALIZERS["random"](emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, alpha=None, generator=_gen(), special_tokens=[])
    assert none.copied_special_tokens == () and not none.supported.any()


def test_random_init_zero_bias_and_only_specials_supported():
    emb, bias, _ = _toy()
    result = INITIALIZERS["random"](emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, alpha=None, generator=_gen(), special_tokens=SPECIALS)
    special_rows = {FOREIGN_VOCAB.index(t) for t in SPECIALS}
    for row in range(len(FOREIGN_VOCAB)):
        assert bool(result.supported[row]) == (row in special_rows)
        if row not in special_rows:
            assert result.bias[row].item() == 0.0


@pytest.mark.parametrize("name", ["random", "parallel"])
def test_random_rows_have_std_one_over_d_and_are_seeded(name):
    n_f, n_e, d = 4000, 50, 64
    emb, bias = torch.randn(n_e, d), torch.randn(n_e)
    foreign = [f"f{i}" for i in range(n_f)]
    source = [f"e{i}" for i in range(n_e)]
    alpha = sp.csr_matrix((n_f, n_e))  # no support anywhere
    init = INITIALIZERS[name]
    a = init(emb, bias, foreign, source, alpha=alpha, generator=_gen(7), special_tokens=[])
    values = a.embeddings.numpy().ravel()
    assert abs(values.std() - 1.0 / d) < 0.03 / d
    assert abs(values.mean()) < 0.01 / d
    assert not a.supported.any() and not a.bias.any()
    b = init(emb, bias, foreign, source, alpha=alpha, generator=_gen(7), special_tokens=[])
    c = init(emb, bias, foreign, source, alpha=alpha, generator=_gen(8), special_tokens=[])
    assert torch.equal(a.embeddings, b.embeddings)
    assert not torch.equal(a.embeddings, c.embeddings)


def test_parallel_random_rows_match_random_init_for_same_seed():
    emb, bias, dense = _toy()
    rnd = INITIALIZERS["random"](emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, alpha=None, generator=_gen(3), special_tokens=SPECIALS)
    par = INITIALIZERS["parallel"](
        emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, alpha=sp.csr_matrix(dense), generator=_gen(3), special_tokens=SPECIALS
    )
    unsupported = ~par.supported
    assert unsupported.sum() == 2
    assert torch.equal(par.embeddings[unsupported], rnd.embeddings[unsupported])


def test_parallel_rejects_bad_alpha():
    emb, bias, dense = _toy()
    init = INITIALIZERS["parallel"]
    with pytest.raises(ValueError, match="needs alpha"):
        init(emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, alpha=None, generator=_gen())
    with pytest.raises(ValueError, match="shape"):
        init(emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, alpha=sp.csr_matrix(dense[:, :-1]), generator=_gen())
    with pytest.raises(ValueError, match="sums to"):
        init(emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, alpha=sp.csr_matrix(dense * 3), generator=_gen())
    with pytest.raises(ValueError, match="bias"):
        init(emb, bias[:-1], FOREIGN_VOCAB, SOURCE_VOCAB, alpha=sp.csr_matrix(dense), generator=_gen())


def test_unknown_initializer_names_setting_and_choices():
    with pytest.raises(ConfigError) as info:
        check_init_vocabulary("fasttext", "replace", setting="variants.bert_fr.init")
    message = str(info.value)
    assert "variants.bert_fr.init" in message and "'fasttext'" in message
    assert "parallel" in message and "random" in message
    assert info.value.setting == "variants.bert_fr.init"
    assert get_entry("random") is INITIALIZERS["random"]


def test_initialisation_stats():
    emb, bias, dense = _toy()
    alpha = sp.csr_matrix(dense)
    result = INITIALIZERS["parallel"](emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, alpha=alpha, generator=_gen(), special_tokens=SPECIALS)
    stats = initialisation_stats(result, alpha)
    json.dumps(stats)  # goes into a report as is
    assert stats["rows"] == 11 and stats["dim"] == D
    assert stats["supported_rows"] == 9 and stats["random_rows"] == 2
    assert stats["aligned_rows"] == 5
    assert stats["support_size_mean"] == pytest.approx((1 + 2 + 3 + 1 + 1) / 5)
    assert stats["support_size_max"] == 3
    assert stats["top_prob_mean"] == pytest.approx((1 + 0.75 + 0.5 + 1 + 1) / 5)
    assert stats["supported_share"] == pytest.approx(9 / 11)
    random_stats = initialisation_stats(INITIALIZERS["random"](emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, alpha=None, generator=_gen()))
    assert random_stats["aligned_rows"] == 0


def test_counts_to_embeddings_end_to_end(tmp_path):
    (tmp_path / "f").write_text("4 5\n6 5\n7\n")
    (tmp_path / "e").write_text("5 6\n7 6\n8\n")
    (tmp_path / "l").write_text("0-0 1-1\n0-0 1-1\n0-0\n")
    counts = count_links(tmp_path / "f", tmp_path / "e", [tmp_path / "l"], len(FOREIGN_VOCAB), len(SOURCE_VOCAB), "forward")
    alpha = translation_probabilities(counts)
    emb, bias, _ = _toy()
    result = INITIALIZERS["parallel"](emb, bias, FOREIGN_VOCAB, SOURCE_VOCAB, alpha=alpha, generator=_gen(), special_tokens=SPECIALS)
    np.testing.assert_allclose(result.embeddings[4].numpy(), emb[5].numpy(), rtol=1e-6)  # le -> the
    np.testing.assert_allclose(result.embeddings[7].numpy(), emb[8].numpy(), rtol=1e-6)  # maison -> house
    np.testing.assert_allclose(result.embeddings[5].numpy(), emb[6].numpy(), rtol=1e-6)  # chat -> cat


def test_every_registry_entry_resolves_to_a_function_and_the_registry_imports_no_torch():
    import subprocess
    import sys

    for name, entry in INITIALIZERS.items():
        assert callable(entry.load()), name
    # The Snakefile reads the registries while the job graph is built: no torch there.
    probe = ("import sys, ramen.initializers, ramen.objectives, ramen.data.input_checks, ramen.data.inputs, "
             "ramen.reports.objectives, ramen.glue, ramen.config_errors; "
             "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
