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


def test_fvt_rows_are_the_means_of_their_pieces_and_a_source_token_is_one_piece():
    torch.manual_seed(2)
    source_vocab = [*SPECIALS, "a", "b", "c", "d"]
    emb, bias = torch.randn(len(source_vocab), 5), torch.randn(len(source_vocab))
    foreign = ["x", "<|endoftext|>", "b", "y", "z"]
    pieces = [(2, 3, 5), (), (3,), (4, 4, 2), ()]
    result = INITIALIZERS["fvt"](emb, bias, foreign, source_vocab, generator=_gen(), special_tokens=SPECIALS,
                                 pieces=pieces)
    torch.testing.assert_close(result.embeddings[0], emb[[2, 3, 5]].mean(0))
    assert result.bias[0].item() == pytest.approx(bias[[2, 3, 5]].mean().item(), abs=1e-6)
    torch.testing.assert_close(result.embeddings[1], emb[0])  # special token copied by string
    torch.testing.assert_close(result.embeddings[2], emb[3])  # a source token: its own row
    torch.testing.assert_close(result.embeddings[3], emb[[4, 4, 2]].mean(0))  # a repeated piece counts twice
    assert result.supported.tolist() == [True, True, True, True, False]  # no pieces: the random draw
    output = torch.randn(len(source_vocab), 3)
    rows, _, _ = apply_mixture(result.mixture, output, generator=_gen())
    torch.testing.assert_close(rows[0], output[[2, 3, 5]].mean(0))


def test_weighted_pieces_lean_on_the_last_piece_for_input_rows_and_the_first_for_output_rows():
    from ramen.initializers.pieces import toward_first, toward_last

    for count in (1, 2, 3, 5):
        last, first = toward_last(count), toward_first(count)
        assert last.sum() == pytest.approx(1) and first.sum() == pytest.approx(1)
        assert np.all(np.diff(last) > 0) and np.all(np.diff(first) < 0)
        assert last[-1] > 0.5 or count == 1
    np.testing.assert_allclose(toward_last(3), [1 / 7, 2 / 7, 4 / 7])
    torch.manual_seed(3)
    source_vocab = [*SPECIALS, "a", "b", "c"]
    emb, bias = torch.randn(len(source_vocab), 4), torch.randn(len(source_vocab))
    result = INITIALIZERS["weighted_pieces"](emb, bias, ["abc"], source_vocab, generator=_gen(),
                                             special_tokens=SPECIALS, pieces=[(2, 3, 4)])
    torch.testing.assert_close(result.embeddings[0], (emb[2] + 2 * emb[3] + 4 * emb[4]) / 7)
    output = torch.randn(len(source_vocab), 4)
    rows, _, _ = apply_mixture(result.output_mixture, output, generator=_gen())
    torch.testing.assert_close(rows[0], (4 * output[2] + 2 * output[3] + output[4]) / 7)
    assert result.bias[0].item() == pytest.approx(((4 * bias[2] + 2 * bias[3] + bias[4]) / 7).item(), abs=1e-6)


def test_parallel_fvt_mixes_the_alignment_and_the_subword_mean_by_its_weight():
    torch.manual_seed(4)
    source_vocab = [*SPECIALS, "a", "b", "c", "d"]
    emb, bias = torch.randn(len(source_vocab), 4), torch.randn(len(source_vocab))
    alpha = sp.csr_matrix(np.array([[0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0, 0, 0, .5, 0, .5]]))
    pieces = [(4, 5), (2, 3), ()]

    def rows(weight):
        return INITIALIZERS["parallel_fvt"](emb, bias, ["f", "g", "h"], source_vocab, alpha=alpha, generator=_gen(),
                                            special_tokens=SPECIALS, pieces=pieces, alignment_weight=weight)

    result = rows(0.25)
    torch.testing.assert_close(result.embeddings[0], 0.25 * emb[2] + 0.75 * emb[[4, 5]].mean(0))
    torch.testing.assert_close(result.embeddings[1], emb[[2, 3]].mean(0))  # not aligned: the subword mean
    torch.testing.assert_close(result.embeddings[2], emb[[3, 5]].mean(0))  # no pieces: the alignment mixture
    assert result.bias[0].item() == pytest.approx((0.25 * bias[2] + 0.75 * bias[[4, 5]].mean()).item(), abs=1e-6)
    torch.testing.assert_close(rows(1.0).embeddings[0], emb[2])
    torch.testing.assert_close(rows(0.0).embeddings[0], emb[[4, 5]].mean(0))
    with pytest.raises(ValueError, match="alignment_weight"):
        rows(1.5)


def test_tokens_are_cut_into_the_source_tokenizer_s_pieces(tmp_path):
    """Byte-level tokens go through the source's BPE as bytes (half a character included); tokens
    of another convention as their characters without the marker."""
    from tiny_decoder import build_byte_tokenizer_dir

    from ramen.initializers.pieces import segment_tokens
    from ramen.vocab.tokenizer import load_tokenizer, ordered_vocab

    tokenizer = load_tokenizer(build_byte_tokenizer_dir(tmp_path / "source", bos=False))
    vocab = ordered_vocab(tokenizer)
    foreign = [*SPECIALS, *BYTES, "Ġmatelas", "ĠÃ©t", "Ã"]
    pieces = segment_tokens(foreign, tokenizer, SPECIALS)
    assert pieces[:2] == [(), ()]
    for token, ids in zip(foreign[2:], pieces[2:]):
        assert "".join(vocab[index] for index in ids) == token
    assert len(pieces[-3]) > 1 and pieces[-1] == (vocab.index("Ã"),)
    marked = segment_tokens(["matelas</w>", "##mat", "[PAD]"], tokenizer, ["[PAD]"])
    assert tokenizer.decode(list(marked[0])) == "matelas" and tokenizer.decode(list(marked[1])) == "mat"
    assert marked[2] == ()


def test_each_initialiser_declares_the_vocabularies_it_serves():
    from ramen.errors import ConfigError
    from ramen.initializers import check_init_vocabulary, names_for

    assert {"fvt", "parallel", "mean", "scratch"} <= set(names_for("replace"))
    assert {"weighted_pieces", "parallel_fvt"}.isdisjoint(names_for("replace"))
    assert {"fvt", "weighted_pieces", "parallel_fvt", "mean"} <= set(names_for("extend"))
    assert "scratch" not in names_for("extend")
    with pytest.raises(ConfigError, match=r"'variants\.x\.init': initialiser 'weighted_pieces' does not serve "
                                          r"vocabulary: replace .*choose one of: random, parallel"):
        check_init_vocabulary("weighted_pieces", "replace", setting="variants.x.init")


def test_fvt_initialises_a_replaced_decoder_vocabulary_through_the_init_rule(tmp_path):
    """Each foreign row the mean of the source rows of pieces that spell the token; special tokens
    copied by string. An extension's rules are refused for a replaced vocabulary."""
    from conftest import french_lines
    from safetensors.torch import load_file
    from tiny_decoder import SPECIALS as DECODER_SPECIALS
    from tiny_decoder import build_byte_tokenizer_dir, build_tiny_decoder_dir
    from transformers import AutoModelForCausalLM

    from ramen.errors import ConfigError
    from ramen.pipeline.initialise import initialise_foreign
    from ramen.vocab.tokenizer import load_tokenizer, ordered_vocab

    source = build_tiny_decoder_dir(tmp_path / "source")
    foreign = build_byte_tokenizer_dir(tmp_path / "foreign", lines=french_lines(60), vocab_size=320)
    stats = initialise_foreign("fvt", source, foreign, {}, 0, tmp_path / "init.safetensors", tmp_path / "init.json")
    rows = load_file(str(tmp_path / "init.safetensors"))["embeddings"]
    table = AutoModelForCausalLM.from_pretrained(source).get_input_embeddings().weight.detach()
    source_tokenizer = load_tokenizer(source)
    source_vocab, foreign_vocab = ordered_vocab(source_tokenizer), ordered_vocab(load_tokenizer(foreign))
    model = source_tokenizer.backend_tokenizer.model
    for row, token in enumerate(foreign_vocab):
        if token in DECODER_SPECIALS:
            torch.testing.assert_close(rows[row], table[source_vocab.index(token)])
            continue
        pieces = [piece.id for piece in model.tokenize(token)]
        assert "".join(source_vocab[index] for index in pieces) == token
        torch.testing.assert_close(rows[row], table[pieces].mean(0))
    assert stats["supported_rows"] == len(foreign_vocab)
    with pytest.raises(ConfigError, match="output_init.*use output_init: input, or vocabulary: extend"):
        initialise_foreign("fvt", source, foreign, {}, 0, tmp_path / "x.safetensors", tmp_path / "x.json",
                           output_init="mean")
    with pytest.raises(ConfigError, match="'weighted_pieces' does not serve vocabulary: replace"):
        initialise_foreign("weighted_pieces", source, foreign, {}, 0, tmp_path / "x.safetensors", tmp_path / "x.json")
