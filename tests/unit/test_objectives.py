"""Training objectives: decomposed-attention masks and parameter counts, focal loss, RTD labels,
pair encoding, batch mixing, and a few real training steps of every objective."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F
from transformers import BertConfig, BertForMaskedLM

from ramen.vocab.encode import TokenStream, encode_id_pairs, load_stream
from ramen.errors import InputFormatError
from ramen.modeling.bilingual import IGNORE_INDEX, BilingualMaskedLM, MaskedBatch
from ramen.objectives import OBJECTIVES, get_objective
from ramen.objectives.base import BatchShape, ObjectiveSettings, PairedStreams
from ramen.objectives.attention import cross_lingual_layers, decomposed_encode, decomposed_masks
from ramen.objectives.base import PAIRS, language_shares
from ramen.objectives.focal import AdaptiveFocal, FocalSettings, focal_cross_entropy
from ramen.objectives.rtd import corrupt, replaced_labels
from ramen.training.batches import SpecialIds
from ramen.training.trainer import TrainSettings, train

VOCAB = {"en": 60, "fr": 50}
SPECIALS = {lang: SpecialIds(cls=2, sep=3, pad=0, mask=4, all_special=[0, 1, 2, 3, 4], vocab_size=size)
            for lang, size in VOCAB.items()}


def stream(seed: int, sentences: int, vocab: int) -> TokenStream:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 9, size=sentences)
    ids = rng.integers(5, vocab, size=int(lengths.sum())).astype(np.uint16)
    return TokenStream(ids=ids, offsets=np.concatenate([[0], np.cumsum(lengths)]), vocab_size=vocab)


def tiny_model(layers: int = 2, hidden: int = 16, seed: int = 0) -> BilingualMaskedLM:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=VOCAB["en"], hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=64)
    mlm = BertForMaskedLM(config)
    return BilingualMaskedLM(mlm, "en", {"fr": (torch.randn(VOCAB["fr"], hidden), torch.zeros(VOCAB["fr"]))})


def build(name: str, settings: ObjectiveSettings | None = None, layers: int = 2, hidden: int = 16):
    model = tiny_model(layers, hidden)
    streams = {"en": stream(1, 40, VOCAB["en"]), "fr": stream(2, 30, VOCAB["fr"])}
    pairs = PairedStreams(stream(3, 25, VOCAB["en"]), stream(3, 25, VOCAB["fr"]))
    shape = BatchShape(batch_size=4, seq_len=12, mask_prob=0.15, seed=0)
    return get_objective(name)(model, streams, SPECIALS, shape, settings or ObjectiveSettings(), pairs)


def parameter_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())  # shared parameters count once


# --- decomposed attention -------------------------------------------------------------------------

def test_intra_lingual_mask_sees_own_language_and_cross_lingual_only_the_other():
    side = torch.tensor([[0, 0, 0, 1, 1]])
    attention = torch.tensor([[1, 1, 0, 1, 1]])  # position 2: padding of the English side
    intra, cross = decomposed_masks(side, attention)
    for query in range(5):
        for key in range(5):
            real = bool(attention[0, key])
            assert intra[0, query, key] == (side[0, query] == side[0, key] and real)
            assert cross[0, query, key] == (side[0, query] != side[0, key] and real)
    assert not (intra & cross).any()


def test_decomposed_attention_isolates_languages_without_cross_attention():
    # With CA's attention removed, a foreign token's output must not depend on the English side:
    # changing English inputs leaves the foreign outputs unchanged, and the reverse.
    objective = build("tlm-da")
    objective.eval()
    encoder = objective.model.mlm.base_model
    pair = objective.step_batches(step=2, micro=0)[PAIRS]
    embeds, positions, attention, side = objective.pair_inputs(pair)
    full = decomposed_encode(encoder, objective.cross_attention, embeds, positions, attention, side)
    changed = embeds.clone()
    changed[:, : pair.source.input_ids.shape[1]] += 1.0
    after = decomposed_encode(encoder, objective.cross_attention, changed, positions, attention, side)
    foreign = slice(pair.source.input_ids.shape[1], None)
    assert not torch.allclose(full[:, foreign], after[:, foreign])  # CA carries English into French
    for block in objective.cross_attention:  # a CA that attends nowhere: only IA remains
        block.forward = lambda hidden, mask, dropout: hidden
    isolated = decomposed_encode(encoder, objective.cross_attention, embeds, positions, attention, side)
    isolated_after = decomposed_encode(encoder, objective.cross_attention, changed, positions, attention, side)
    torch.testing.assert_close(isolated[:, foreign], isolated_after[:, foreign])


def test_decomposed_attention_parameter_counts_relate_as_in_table_5():
    hidden, ffn = 16, 32
    per_layer_ca = (hidden * ffn + ffn) + (ffn * hidden + hidden) + 2 * (2 * hidden)  # FFN + two LayerNorms
    extra = {}
    for layers in (6, 12):  # MINI and BASE depths
        mixed = build("tlm", layers=layers, hidden=hidden)
        decomposed = build("tlm-da", layers=layers, hidden=hidden)
        shared = build("tlm-da", ObjectiveSettings(decomposed_share=True), layers=layers, hidden=hidden)
        extra[layers] = parameter_count(decomposed) - parameter_count(mixed)
        assert extra[layers] == layers * per_layer_ca  # CA adds no Q/K/V, only FFN and LayerNorm
        assert parameter_count(shared) == parameter_count(mixed)  # DA-share matches MA exactly
    assert extra[12] == 2 * extra[6]  # 161.7 - 154.9 = 2 x (117.8 - 114.4) M in Table 5


def test_cross_lingual_layers_share_or_copy_the_layer_modules():
    encoder = tiny_model().mlm.base_model
    shared = cross_lingual_layers(encoder, share=True)
    copied = cross_lingual_layers(encoder, share=False)
    layer = encoder.encoder.layer[0]
    assert shared[0].intermediate is layer.intermediate and shared[0].output is layer.output
    assert copied[0].intermediate is not layer.intermediate
    torch.testing.assert_close(copied[0].output.dense.weight, layer.output.dense.weight)


# --- focal loss -------------------------------------------------------------------------------------

def test_focal_loss_is_cross_entropy_at_gamma_zero():
    logits = torch.randn(7, 11, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([0, 3, 10, 5, 5, 1, 2])
    torch.testing.assert_close(focal_cross_entropy(logits, targets, gamma=0.0, alpha=1.0),
                               F.cross_entropy(logits, targets))


def test_focal_loss_matches_a_hand_computation():
    logits = torch.tensor([[math.log(3.0), 0.0], [0.0, 0.0]])  # p_t = 0.75 and 0.5
    targets = torch.tensor([0, 1])
    expected = (0.25 * 0.25 ** 2 * -math.log(0.75) + 0.25 * 0.5 ** 2 * -math.log(0.5)) / 2
    assert focal_cross_entropy(logits, targets, gamma=2.0, alpha=0.25).item() == pytest.approx(expected)


def test_adaptive_focal_switches_per_stream_only_below_threshold_and_after_min_step():
    focal = AdaptiveFocal(["en", "fr"], FocalSettings(enabled=True, loss_threshold=1.0, min_step=5))
    easy = (torch.tensor([[10.0, 0.0]]), torch.tensor([0]))  # CE ~ 0
    hard = (torch.tensor([[0.0, 10.0]]), torch.tensor([0]))  # CE ~ 10
    assert focal("en", *easy, step=4).item() == pytest.approx(F.cross_entropy(*easy).item())  # before S
    assert focal("fr", *hard, step=6).item() == pytest.approx(F.cross_entropy(*hard).item())  # above L_T
    assert focal.switched() == {}
    focal("en", *easy, step=6)
    assert focal.switched() == {"en": 6}
    # Once switched, a stream stays switched, even when its loss rises again.
    assert focal("en", *hard, step=7).item() == pytest.approx(focal_cross_entropy(*hard, 2.0, 0.25).item())
    assert focal.switched() == {"en": 6}
    assert "switched_at" in focal.state_dict()  # checkpoints carry the switch


# --- replaced-token detection ------------------------------------------------------------------------

def test_rtd_labels_treat_a_sampled_original_token_as_original():
    batch = MaskedBatch(input_ids=torch.tensor([[2, 4, 7, 4, 3]]), attention_mask=torch.ones(1, 5, dtype=torch.long),
                        labels=torch.tensor([[IGNORE_INDEX, 9, IGNORE_INDEX, 11, IGNORE_INDEX]]))
    sampled = torch.tensor([9, 12])  # the original back at position 1, a replacement at position 3
    corrupted = corrupt(batch, sampled)
    assert corrupted.tolist() == [[2, 9, 7, 12, 3]]
    assert replaced_labels(batch, corrupted).tolist() == [[0.0, 0.0, 0.0, 1.0, 0.0]]


def test_rtd_generator_is_smaller_and_shares_the_embeddings():
    objective = build("rtd", ObjectiveSettings(), layers=6)
    assert len(objective.generator.encoder.layer) == 2
    assert objective.generator.embeddings is objective.model.mlm.base_model.embeddings
    rescaled = build("rtd", ObjectiveSettings.from_config({"rtd": {"generator_layers": 2, "rescale_init": True}}))
    plain = build("rtd", ObjectiveSettings.from_config({"rtd": {"generator_layers": 2}}))
    ratio = rescaled.generator.encoder.layer[1].output.dense.weight / plain.generator.encoder.layer[1].output.dense.weight
    torch.testing.assert_close(ratio, torch.full_like(ratio, 1 / math.sqrt(4)))


# --- batches and mixing ----------------------------------------------------------------------------

def test_pair_objectives_alternate_monolingual_and_translation_batches():
    objective = build("tlm")
    assert set(objective.step_batches(step=1, micro=0)) == {"en", "fr"}
    pair = objective.step_batches(step=2, micro=0)[PAIRS]
    assert pair.source.input_ids.shape[0] == pair.foreign.input_ids.shape[0] == 4
    assert (pair.source.input_ids[:, 0] == 2).all() and (pair.foreign.input_ids[:, 0] == 2).all()
    assert pair.source.targets() > 0 and pair.foreign.targets() > 0
    assert int(pair.foreign.input_ids.max()) < VOCAB["fr"]
    assert set(build("mlm").step_batches(step=2, micro=0)) == {"en", "fr"}


def test_a_source_share_sets_the_first_language_s_part_of_each_batch():
    # objectives.source_share: e.g. a quarter English, whatever the sizes and sampling_alpha
    assert language_shares({"en": 1000, "fr": 10}, 32, None, 0.25) == {"en": 8, "fr": 24}
    assert language_shares({"en": 1000, "fr": 10}, 32, 0.7, 0.25) == {"en": 8, "fr": 24}
    assert language_shares({"en": 10, "fr": 10}, 8, None, 0.01) == {"en": 1, "fr": 7}  # at least one each


def test_language_shares_follow_size_to_the_alpha():
    assert language_shares({"en": 1000, "fr": 10}, 32, None) == {"en": 16, "fr": 16}
    shares = language_shares({"en": 1000, "fr": 10}, 32, 0.7)
    assert sum(shares.values()) == 32
    expected = 32 * 1000 ** 0.7 / (1000 ** 0.7 + 10 ** 0.7)
    assert abs(shares["en"] - expected) < 1
    assert language_shares({"en": 10 ** 9, "fr": 1}, 8, 1.0)["fr"] == 1  # every language keeps a row


def test_encode_id_pairs_keeps_lines_aligned_and_skips_empty_sides(tmp_path):
    (tmp_path / "ids.en").write_text("5 6 7\n\n8 9\n10\n")
    (tmp_path / "ids.fr").write_text("11 12\n13\n\n14 15 16\n")
    meta = encode_id_pairs(tmp_path / "ids.en", tmp_path / "ids.fr", tmp_path / "pairs", 60, 50)
    assert meta == {"pairs": 2, "skipped_empty": 2}
    source, foreign = load_stream(tmp_path / "pairs" / "source"), load_stream(tmp_path / "pairs" / "foreign")
    assert source.ids[source.offsets[1]:source.offsets[2]].tolist() == [10]
    assert foreign.ids[foreign.offsets[1]:foreign.offsets[2]].tolist() == [14, 15, 16]
    (tmp_path / "short.fr").write_text("11\n")
    with pytest.raises(InputFormatError, match="line-aligned"):
        encode_id_pairs(tmp_path / "ids.en", tmp_path / "short.fr", tmp_path / "bad", 60, 50)
    (tmp_path / "big.fr").write_text("11\n12\n99\n13\n")
    with pytest.raises(InputFormatError, match="outside the vocabulary"):
        encode_id_pairs(tmp_path / "ids.en", tmp_path / "big.fr", tmp_path / "bad", 60, 50)


# --- training and export ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(name for name, entry in OBJECTIVES.items() if entry.family == "masked-lm"))
def test_every_objective_trains_and_logs_its_streams(tmp_path, name):
    # The masked-LM objectives; clm trains a causal LM (tests/unit/test_decoder_training.py).
    settings = ObjectiveSettings(focal=FocalSettings(enabled=True, loss_threshold=100.0, min_step=3))
    objective = build(name, settings)
    train_settings = TrainSettings(steps=4, batch_size=4, seq_len=12, peak_lr=1e-3, warmup_steps=0,
                                   log_every=2, train=["encoder", "head", "foreign_embeddings"])
    before = {n: p.detach().clone() for n, p in objective.named_parameters()}
    train(objective, train_settings, tmp_path / "ckpt", tmp_path / "m.csv",
          progress=False)
    rows = list(csv.DictReader(open(tmp_path / "m.csv")))
    expected = {"loss_en", "loss_fr"} | ({"loss_pair_en", "loss_pair_fr"} if objective.uses_pairs else set())
    assert expected <= set(rows[0])
    assert all(math.isfinite(float(rows[-1][column])) for column in expected)
    assert rows[0]["focal"] == "" and "en@3" in rows[-1]["focal"]  # every stream switches at S = 3
    changed = {n for n, p in objective.named_parameters() if not torch.equal(p, before[n])}
    assert any(n.startswith("model.mlm.bert.encoder") for n in changed)
    if objective.language_embeddings is not None:
        assert "language_embeddings.weight" in changed


def test_export_folds_language_embeddings_without_changing_predictions(tmp_path, tiny_source_dir):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from ramen.modeling.bilingual import load_source_mlm

    tokenizer = AutoTokenizer.from_pretrained(tiny_source_dir)
    model = BilingualMaskedLM(load_source_mlm(tiny_source_dir), "en",
                              {"fr": (torch.randn(len(tokenizer), 32), torch.zeros(len(tokenizer)))})
    size = len(tokenizer)
    specials = {lang: SpecialIds.from_tokenizer(tokenizer) for lang in ("en", "fr")}
    objective = get_objective("tlm")(model, {"en": stream(1, 20, size), "fr": stream(2, 20, size)}, specials,
                                     BatchShape(4, 12, 0.15, 0), ObjectiveSettings(),
                                     PairedStreams(stream(3, 10, size), stream(4, 10, size)))
    with torch.no_grad():
        objective.language_embeddings.weight.normal_()
    objective.eval()
    ids = torch.tensor([[specials["fr"].cls, 20, 21, 22, specials["fr"].sep]])
    batch = MaskedBatch(ids, torch.ones_like(ids), torch.full_like(ids, IGNORE_INDEX))
    with torch.no_grad():
        hidden = objective.encode_monolingual(model.mlm.base_model, {"fr": batch})["fr"]
        expected = F.log_softmax(model.masked_logits("fr", hidden, torch.ones_like(ids, dtype=torch.bool)), -1)
    table = model.input_embeddings("fr").weight.detach().clone()
    objective.export_language("fr", tokenizer, tmp_path / "fr")
    torch.testing.assert_close(model.input_embeddings("fr").weight, table)  # the trained table is unchanged
    exported = AutoModelForMaskedLM.from_pretrained(tmp_path / "fr").eval()
    with torch.no_grad():
        got = F.log_softmax(exported(input_ids=ids).logits[0], -1)
    torch.testing.assert_close(got, expected[: ids.shape[1]], atol=1e-4, rtol=1e-4)


def test_a_resumed_pair_objective_logs_no_zero_for_a_stream_it_has_not_trained_yet(tmp_path):
    objective = build("tlm")
    settings = TrainSettings(steps=5, batch_size=4, seq_len=12, peak_lr=1e-3, warmup_steps=0, log_every=1,
                             checkpoint_every=4)
    train(objective, settings, tmp_path / "ckpt", tmp_path / "m.csv", progress=False)
    first = list(csv.DictReader(open(tmp_path / "m.csv")))
    assert first[0]["loss_pair_en"] == ""  # step 1 trains monolingual text only
    resumed = build("tlm")
    settings.steps = 6
    train(resumed, settings, tmp_path / "ckpt", tmp_path / "m.csv", progress=False)
    rows = list(csv.DictReader(open(tmp_path / "m.csv")))
    assert [row["step"] for row in rows] == ["1", "2", "3", "4", "5", "6"]
    # Step 5 (monolingual) after resuming from step 4 repeats step 4's pair losses.
    assert rows[4]["loss_pair_en"] == rows[3]["loss_pair_en"] != ""
    assert float(rows[5]["loss_pair_en"]) > 0


def test_every_registered_objective_fulfils_the_one_training_contract():
    """Masked and causal objectives alike: the training loop asks the same members of each, and the
    bilingual models carry no trainer hooks."""
    import inspect

    from ramen.modeling.bilingual import BilingualMaskedLM
    from ramen.modeling.causal import BilingualCausalLM
    from ramen.objectives.contract import TrainingObjective

    families = set()
    for name, entry in OBJECTIVES.items():
        cls = entry.load()
        assert issubclass(cls, TrainingObjective) and not inspect.isabstract(cls), name
        families.add(entry.family)
    assert families == {"masked-lm", "causal-lm"}
    hooks = ("step_batches", "begin_step", "batch_key", "stream_names", "metrics")
    for model in (BilingualMaskedLM, BilingualCausalLM):
        assert not [hook for hook in hooks if hasattr(model, hook)], model.__name__
