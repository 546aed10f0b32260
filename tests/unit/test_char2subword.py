"""char2subword: the module, the four losses, the six noise operations and character masking."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from ramen.char2subword.losses import (
    approximation_loss,
    cosine_loss,
    cross_entropy_loss,
    l2_loss,
    nearest_rows,
    neighbour_loss,
)
from ramen.char2subword.masking import choose_tokens, corrupt_characters
from ramen.char2subword.module import (
    MASK,
    PAD,
    Char2Subword,
    CharVocab,
    ModuleConfig,
    load_module,
    save_module,
    strip_markers,
)
from ramen.char2subword.noise import (
    KEYBOARD_NEIGHBOURS,
    OPERATIONS,
    drop,
    mistype,
    noise_string,
    noise_text,
    punct,
    repeat,
    swap,
    toggle,
)
from ramen.errors import ConfigError
from ramen.modeling.bilingual import IGNORE_INDEX


def _module(dim=8, output_dim=6, max_chars=12):
    torch.manual_seed(0)
    chars = CharVocab.from_strings(["chat", "chien", "maison"], extra="-.")
    return Char2Subword(ModuleConfig(output_dim=output_dim, dim=dim, layers=2, heads=2, max_chars=max_chars), chars)


# --------------------------------------------------------------------------- module


def test_strip_markers_of_every_convention():
    assert [strip_markers(t) for t in ["##ing", "ing@@", "ing</w>", "Ġthe", "▁le", "##", "chat"]] == \
        ["ing", "ing", "ing", "the", "le", "##", "chat"]


def test_char_vocab_covers_other_case_and_marks_unknown():
    chars = CharVocab.from_strings(["ab"])
    ids = chars.encode(["aB", "z", ""], max_chars=4)
    assert ids.shape == (3, 2)
    assert ids[0, 1] == chars.index["B"]
    assert ids[1, 0] == 1 and ids[1, 1] == PAD  # unknown character, then padding
    assert ids[2, 0] == 1  # an empty string still has one symbol to pool


def test_module_output_shape_layer_norm_and_padding_invariance():
    module = _module().eval()
    out = module.embed(["chat", "maison"])
    assert out.shape == (2, 6)
    assert torch.allclose(out.mean(-1), torch.zeros(2), atol=1e-5)  # the final LayerNorm (fresh affine)
    alone = module.embed(["chat"])
    assert torch.allclose(out[0], alone[0], atol=1e-5)  # padding next to a shorter word changes nothing
    assert not torch.allclose(module.embed(["chat"]), module.embed(["tach"]))  # order matters (positions)


def test_module_is_pre_layernorm_with_normalised_residual():
    module = _module().eval()
    layer = module.layers[0]
    x = torch.randn(1, 3, 8)
    padding = torch.zeros(1, 3, dtype=torch.bool)
    normed = layer.attention_norm(x)
    attended, _ = layer.attention(normed, normed, normed, need_weights=False)
    middle = attended + normed
    expected = layer.ffn(layer.ffn_norm(middle)) + layer.ffn_norm(middle)
    assert torch.allclose(layer(x, padding), expected, atol=1e-6)


def test_module_round_trip(tmp_path):
    module = _module()
    save_module(module, tmp_path / "m.safetensors", stage="approx")
    loaded, meta = load_module(tmp_path / "m.safetensors")
    assert meta == {"stage": "approx"}
    assert loaded.config == module.config and loaded.chars.characters == module.chars.characters
    assert torch.allclose(loaded.embed_all(["chien"]), module.embed_all(["chien"]))


def test_module_rejects_heads_not_dividing_width():
    with pytest.raises(ValueError, match="multiple"):
        Char2Subword(ModuleConfig(output_dim=4, dim=6, heads=4), CharVocab("ab"))


# --------------------------------------------------------------------------- losses


def test_cosine_and_l2_losses():
    target = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert cosine_loss(target * 3, target) == pytest.approx(0.0, abs=1e-6)  # scale-free
    assert cosine_loss(-target, target) == pytest.approx(2.0)
    assert l2_loss(target, target) == 0
    assert l2_loss(target * 3, target) == pytest.approx((2.0 + 4.0) / 2)  # magnitude counts


def test_neighbour_loss_compares_distances_to_the_neighbours():
    target = torch.tensor([[1.0, 0.0]])
    neighbours = torch.tensor([[[1.0, 1.0], [0.0, 1.0]]])
    assert neighbour_loss(target * 5, target, neighbours) == pytest.approx(0.0, abs=1e-6)
    rotated = torch.tensor([[0.0, 1.0]])
    # cosines to the neighbours: target (0.707, 0), prediction (0.707, 1): MSE = 1/2
    assert neighbour_loss(rotated, target, neighbours) == pytest.approx(0.5, abs=1e-5)


def test_cross_entropy_loss_prefers_the_own_row():
    table = torch.eye(4) * 5
    rows = torch.tensor([0, 2])
    assert cross_entropy_loss(table[rows], table, rows) < cross_entropy_loss(table[[1, 3]], table, rows)


def test_nearest_rows_with_and_without_self():
    table = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    assert nearest_rows(table, 1, chunk_rows=3).squeeze(1).tolist() == [1, 0, 3, 2]
    assert nearest_rows(table, 1, include_self=True).squeeze(1).tolist() == [0, 1, 2, 3]


def test_approximation_loss_switches():
    torch.manual_seed(0)
    table = torch.randn(6, 3)
    rows = torch.tensor([0, 1])
    predicted = torch.randn(2, 3)
    neighbours = nearest_rows(table, 2)
    total, parts = approximation_loss(predicted, table, rows, {"ce": 1, "cos": 0, "l2": 2, "nbr": 1}, neighbours)
    assert set(parts) == {"ce", "l2", "nbr"}
    assert float(total) == pytest.approx(parts["ce"] + 2 * parts["l2"] + parts["nbr"], rel=1e-5)
    with pytest.raises(ValueError, match="no approximation loss"):
        approximation_loss(predicted, table, rows, {"ce": 0})
    with pytest.raises(ValueError, match="nearest rows"):
        approximation_loss(predicted, table, rows, {"nbr": 1})


# --------------------------------------------------------------------------- noise


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_each_operation_is_deterministic_under_a_seed_and_changes_one_character(name):
    op = OPERATIONS[name]
    words = ["business", "maison", "Garçon"]
    first = [op(w, random.Random(7)) for w in words]
    assert first == [op(w, random.Random(7)) for w in words]
    changed = [op("business", random.Random(seed)) for seed in range(20)]
    assert any(c != "business" for c in changed)
    for new in changed:
        assert abs(len(new) - len("business")) <= 1


def test_operations_do_what_table_1_says():
    rng = random.Random(3)
    for _ in range(20):
        typed = mistype("house", rng)
        diff = [(a, b) for a, b in zip("house", typed) if a != b]
        assert len(diff) == 1 and diff[0][1] in KEYBOARD_NEIGHBOURS[diff[0][0]]
        assert sorted(swap("house", rng)) == sorted("house")
        assert len(repeat("house", rng)) == 6 and set(repeat("house", rng)) == set("house")
        dropped = drop("house", rng)
        assert len(dropped) == 4 and all(c in "house" for c in dropped)
        toggled = toggle("house", rng)
        assert toggled.lower() == "house" and sum(c.isupper() for c in toggled) == 1
        marked = punct("house", rng)
        assert len(marked) == 6 and marked.replace(marked[[i for i, c in enumerate(marked) if c not in "house"][0]], "", 1) == "house"
    assert mistype("123", rng) == "123"  # no key with QWERTY neighbours
    assert toggle("123", rng) == "123"


def test_noise_only_long_strings_and_text_rate():
    rng = random.Random(0)
    assert noise_string("chat", rng) == "chat"  # four characters: left alone
    assert noise_string("maison", random.Random(1), ["drop"]) in {"aison", "mison", "mason", "maion", "maisn", "maiso"}
    text = "le chien mange beaucoup de choses aujourd'hui"
    assert noise_text(text, random.Random(5), rate=0.0) == text
    full = noise_text(text, random.Random(5), rate=1.0)
    assert full == noise_text(text, random.Random(5), rate=1.0)
    kept = [a for a, b in zip(text.split(), full.split()) if a == b]
    assert {"le", "de"} <= set(kept) and len(full.split()) == len(text.split())
    assert full != text


# --------------------------------------------------------------------------- masking


def test_choose_tokens_rate_and_at_least_one_per_row():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 100, size=(200, 40))
    maskable = np.ones_like(ids, dtype=bool)
    maskable[:, 0] = maskable[:, -1] = False
    chosen, labels = choose_tokens(ids, maskable, rng, 0.15)
    assert not chosen[:, 0].any() and not chosen[:, -1].any()
    assert chosen.sum(axis=1).min() >= 1
    assert 0.13 < chosen[maskable].mean() < 0.18
    assert (labels[chosen] == ids[chosen]).all() and (labels[~chosen] == IGNORE_INDEX).all()
    rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(1)
    assert np.array_equal(choose_tokens(ids, maskable, rng_a, 0.15)[0], choose_tokens(ids, maskable, rng_b, 0.15)[0])


def test_corrupt_characters_80_10_10_and_padding_untouched():
    chars = torch.randint(3, 30, (400, 12))
    chars[:, 9:] = PAD
    out = corrupt_characters(chars, torch.Generator().manual_seed(0), vocab_size=30)
    assert (out[:, 9:] == PAD).all()
    real = chars != PAD
    masked = (out == MASK) & real
    same = (out == chars) & real
    assert 0.77 < masked[real].float().mean() < 0.83
    # kept: the 10% left alone plus random draws that hit the same character
    assert 0.08 < same[real].float().mean() < 0.14
    assert ((out >= 3) | (out == MASK) | (out == PAD)).all()
    again = corrupt_characters(chars, torch.Generator().manual_seed(0), vocab_size=30)
    assert torch.equal(out, again)


def test_approximation_settings_validate():
    from ramen.char2subword.approximate import ApproximationSettings

    with pytest.raises(ConfigError, match="losses"):
        ApproximationSettings(losses={"ce": 0.0})
    with pytest.raises(ConfigError, match="operations"):
        ApproximationSettings(operations=["shout"])
