"""Initialisers on byte-level (decoder) vocabularies: token normalisation, the mean baseline and
mixtures applied to an untied output layer."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from ramen.initializers import INITIALIZERS
from ramen.initializers.common import (
    BYTE_CHARACTERS,
    Mixture,
    apply_mixture,
    is_byte_level,
    normalise_tokens,
    token_text,
)
from ramen.initializers.overlap import shared_tokens

BYTES = sorted(BYTE_CHARACTERS, key=BYTE_CHARACTERS.get)  # the 256 single-byte tokens in byte order
SPECIALS = ["<|endoftext|>", "<|im_start|>"]


def _byte_vocab(extra):
    return [*SPECIALS, *BYTES, *extra]


def _gen():
    return torch.Generator().manual_seed(0)


def test_byte_level_tokens_decode_to_their_characters_and_lose_the_word_marker():
    assert token_text("Ġthe", byte_level=True) == "the"
    assert token_text("Ċ", byte_level=True) == "\n"
    assert token_text("ĠÃ©tÃ©", byte_level=True) == "été"  # UTF-8 bytes of "été" as byte characters
    assert token_text("Ġ", byte_level=True) == " "  # a lone space stays a space
    assert token_text("Ã", byte_level=True) == "\ufffd"  # half a character matches no real token
    assert [token_text(t) for t in ("##le", "▁le", "le</w>", "<0x41>", "le")] == ["le", "le", "le", "A", "le"]


def test_byte_level_is_detected_from_the_vocabulary_not_from_one_token():
    assert is_byte_level(_byte_vocab(["Ġthe"]))
    assert not is_byte_level(["[PAD]", "Ġthe", "the", "##s"])
    # The same string means different text in the two conventions.
    assert normalise_tokens(_byte_vocab(["Ã©t"]))[-1] == "ét"
    assert normalise_tokens(["[PAD]", "Ã©t"])[-1] == "Ã©t"


def test_overlap_matches_byte_level_foreign_tokens_to_wordpiece_and_byte_level_english():
    foreign = _byte_vocab(["ĠÃ©tÃ©", "Ġmaison", "Ġthe", "the"])
    wordpiece = ["[PAD]", "[CLS]", "été", "##été", "maison", "the"]
    pairs = dict(shared_tokens(foreign, wordpiece, SPECIALS + ["[PAD]", "[CLS]"]))
    n = len(SPECIALS) + 256
    assert pairs[n] == wordpiece.index("été") and pairs[n + 1] == wordpiece.index("maison")
    english_bytes = _byte_vocab(["the", "Ġthe", "ĠÃ©tÃ©"])
    pairs = dict(shared_tokens(foreign, english_bytes, SPECIALS))
    # Two byte-level vocabularies: the same string is the same piece, word start or not.
    assert pairs[n + 2] == english_bytes.index("Ġthe") and pairs[n + 3] == english_bytes.index("the")
    assert pairs[n] == english_bytes.index("ĠÃ©tÃ©")
    assert all(foreign[f] not in SPECIALS for f in pairs)


def test_mean_init_rows_and_bias_are_the_english_mean_and_specials_are_copied():
    torch.manual_seed(0)
    source_vocab = [*SPECIALS, "a", "b", "c"]
    emb, bias = torch.randn(len(source_vocab), 5), torch.randn(len(source_vocab))
    foreign = ["x", "<|endoftext|>", "y", "z"]
    result = INITIALIZERS["mean"](emb, bias, foreign, source_vocab, generator=_gen(), special_tokens=SPECIALS)
    for row in (0, 2, 3):
        torch.testing.assert_close(result.embeddings[row], emb.mean(0))
        assert result.bias[row].item() == pytest.approx(bias.mean().item(), abs=1e-6)
    torch.testing.assert_close(result.embeddings[1], emb[0])
    assert result.bias[1].item() == bias[0].item()
    assert result.supported.all() and result.copied_special_tokens == ("<|endoftext|>",)


@pytest.mark.parametrize("name", ["parallel", "random", "mean", "overlap"])
def test_the_mixture_of_an_init_rebuilds_its_table_and_builds_an_untied_output_layer(name):
    torch.manual_seed(1)
    source_vocab = [*SPECIALS, "a", "b", "c", "d"]
    foreign = ["<|im_start|>", "a", "e", "f", "g"]
    emb, bias = torch.randn(len(source_vocab), 6), torch.randn(len(source_vocab))
    alpha = sp.csr_matrix(np.array([[0, 0, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0], [0, 0, .25, .75, 0, 0],
                                    [0, 0, 0, 0, .5, .5], [0, 0, 0, 0, 0, 0]], dtype=float))
    result = INITIALIZERS[name](emb, bias, foreign, source_vocab, alpha=alpha, generator=_gen(),
                                special_tokens=SPECIALS)
    rows, mixed_bias, supported = apply_mixture(result.mixture, emb, bias, generator=_gen())
    torch.testing.assert_close(rows, result.embeddings)
    torch.testing.assert_close(mixed_bias, result.bias)
    assert supported.tolist() == result.supported.tolist()
    # An output layer of another width, without a bias: the same weights over its rows.
    output = torch.randn(len(source_vocab), 3)
    out_rows, out_bias, _ = apply_mixture(result.mixture, output, None, generator=_gen())
    assert out_bias is None and out_rows.shape == (len(foreign), 3)
    torch.testing.assert_close(out_rows[0], output[1])  # <|im_start|> copied by string
    if name == "parallel":
        torch.testing.assert_close(out_rows[2], 0.25 * output[2] + 0.75 * output[3])
    if name == "mean":
        torch.testing.assert_close(out_rows[4], output.mean(0))


def test_apply_mixture_rejects_a_matrix_of_another_vocabulary():
    mixture = Mixture(shape=(3, 4), mean_rows=np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="4 English rows"):
        apply_mixture(mixture, torch.zeros(5, 2), generator=_gen())
    with pytest.raises(ValueError, match="bias"):
        apply_mixture(mixture, torch.zeros(4, 2), torch.zeros(3), generator=_gen())
