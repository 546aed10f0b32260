"""BERT-fused NMT: drop-net, masks, incremental decoding, warm start, beam search, data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ramen.nmt.data import EncodedText, NmtTokenizer, learn_vocabulary, token_batches
from ramen.nmt.evaluate import corpus_bleu
from ramen.errors import ConfigError
from ramen.nmt.model import NmtModelConfig, TransformerNmt, drop_net, warm_start
from ramen.nmt.pipeline import model_config
from ramen.nmt.search import SearchSettings, beam_search
from ramen.training.checkpoints import list_checkpoints
from ramen.nmt.train import (
    NmtTrainSettings,
    ParallelData,
    make_batch,
    make_optimizer,
    train,
    translation_loss,
)

PAD, BOS, EOS = 0, 1, 2
BERT_DIM = 12


def tiny_config(**overrides) -> NmtModelConfig:
    values = dict(vocab_size=20, pad_id=PAD, layers=2, dim=16, ffn_dim=32, heads=2, dropout=0.0,
                  max_positions=64, bert_dim=BERT_DIM)
    return NmtModelConfig(**{**values, **overrides})


def fused_model(**overrides) -> TransformerNmt:
    torch.manual_seed(0)
    return TransformerNmt(tiny_config(**overrides))


def test_drop_net_at_inference_is_the_mean_of_both_attentions_eq1():
    model = fused_model()
    layer = model.encoder_layers[0].eval()
    states, bert = torch.randn(2, 5, 16), torch.randn(2, 7, BERT_DIM)
    padding, bert_padding = torch.zeros(2, 5, dtype=torch.bool), torch.zeros(2, 7, dtype=torch.bool)
    mean = 0.5 * (layer.self_attn(states, states, padding) + layer.bert_attn(states, bert, bert_padding))
    expected = layer.ffn_norm(layer.attn_norm(states + mean) + layer.ffn(layer.attn_norm(states + mean)))
    torch.testing.assert_close(layer(states, padding, bert, bert_padding), expected)


def test_drop_net_in_training_uses_one_branch_at_a_time_with_rate_one():
    picked = {"first": 0, "second": 0}
    torch.manual_seed(0)
    for _ in range(400):
        out = drop_net(lambda: torch.tensor(1.0), lambda: torch.tensor(3.0), rate=1.0, training=True)
        picked["first" if out == 1.0 else "second"] += 1
        assert out in (1.0, 3.0)
    assert 150 < picked["first"] < 250  # each branch about half the time
    assert drop_net(lambda: torch.tensor(1.0), lambda: torch.tensor(3.0), rate=0.0, training=True) == 2.0
    assert drop_net(lambda: torch.tensor(1.0), lambda: torch.tensor(3.0), rate=1.0, training=False) == 2.0


def test_decoder_is_causal_and_ignores_source_padding():
    model = fused_model().eval()
    source = torch.tensor([[5, 6, 7, EOS, PAD, PAD]])
    bert, bert_padding = torch.randn(1, 4, BERT_DIM), torch.zeros(1, 4, dtype=torch.bool)
    target = torch.tensor([[BOS, 8, 9, 10, 11]])
    changed_future = torch.tensor([[BOS, 8, 9, 13, 14]])
    logits = model(source, target, bert, bert_padding)
    torch.testing.assert_close(logits[:, :3], model(source, changed_future, bert, bert_padding)[:, :3])
    assert not torch.allclose(logits[:, 3:], model(source, changed_future, bert, bert_padding)[:, 3:])
    unpadded = model(source[:, :4], target, bert, bert_padding)
    torch.testing.assert_close(logits, unpadded, atol=1e-5, rtol=1e-5)


def test_incremental_decoding_equals_full_decoding():
    model = fused_model().eval()
    source = torch.tensor([[5, 6, 7, EOS], [8, 9, EOS, PAD]])
    bert, bert_padding = torch.randn(2, 4, BERT_DIM), torch.tensor([[False] * 4, [False, False, False, True]])
    target = torch.tensor([[BOS, 8, 9, 10], [BOS, 11, 12, 13]])
    memory, memory_padding = model.encode(source, bert, bert_padding)
    full = model.decode(target, memory, memory_padding, bert, bert_padding)
    cache = model.start_cache(memory, bert)
    for position in range(target.shape[1]):
        step = model.decode_step(target[:, position:position + 1], position, cache, memory_padding, bert_padding)
        torch.testing.assert_close(step, full[:, position], atol=1e-5, rtol=1e-5)


def test_warm_start_loads_every_plain_tensor_and_leaves_only_bert_attention_new():
    torch.manual_seed(1)
    plain = TransformerNmt(tiny_config(bert_dim=None))
    fused = fused_model()
    before = {name: value.clone() for name, value in fused.state_dict().items()}
    loaded = warm_start(fused, plain.state_dict())
    assert loaded == sorted(plain.state_dict())
    after = fused.state_dict()
    new = sorted(set(after) - set(loaded))
    assert new and all(".bert_attn." in name for name in new)
    assert len(new) == 2 * 2 * 8  # encoder + decoder, 2 layers, q/k/v/out weight and bias
    for name in loaded:
        torch.testing.assert_close(after[name], plain.state_dict()[name])
    for name in new:
        torch.testing.assert_close(after[name], before[name])
    with pytest.raises(ValueError, match="does not match"):
        warm_start(fused_model(), TransformerNmt(tiny_config(bert_dim=None, ffn_dim=48)).state_dict())


def test_ablations_remove_exactly_one_side_of_the_bert_attention():
    no_enc = fused_model(bert_encoder_attention=False)
    no_dec = fused_model(bert_decoder_attention=False)
    assert all(layer.bert_attn is None for layer in no_enc.encoder_layers)
    assert all(layer.bert_attn is not None for layer in no_enc.decoder_layers)
    assert all(layer.bert_attn is not None for layer in no_dec.encoder_layers)
    assert all(layer.bert_attn is None for layer in no_dec.decoder_layers)


def test_inverse_sqrt_schedule():
    settings = NmtTrainSettings(peak_lr=1e-3, init_lr=0.0, warmup_steps=100)
    assert settings.learning_rate(50) == pytest.approx(5e-4)
    assert settings.learning_rate(100) == pytest.approx(1e-3)
    assert settings.learning_rate(400) == pytest.approx(5e-4)


def test_token_batches_cover_every_pair_once_within_the_budget():
    rng = np.random.default_rng(0)
    source, target = rng.integers(1, 30, 500), rng.integers(1, 30, 500)
    for order_rng in (None, np.random.default_rng(1)):
        batches = token_batches(source, target, 120, order_rng)
        assert sorted(np.concatenate(batches).tolist()) == list(range(500))
        for batch in batches:
            assert len(batch) == 1 or np.maximum(source, target)[batch].max() * len(batch) <= 120


def copy_data(count: int, rng: np.random.Generator) -> EncodedText:
    rows = [np.append(rng.integers(3, 13, rng.integers(3, 7)), EOS).astype(np.int32) for _ in range(count)]
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    return EncodedText(ids=np.concatenate(rows), offsets=offsets)


def test_beam_search_learns_a_toy_copy_task():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = copy_data(2000, np.random.default_rng(0))
    train = ParallelData(source=data, target=data)
    model = TransformerNmt(tiny_config(vocab_size=13, dim=64, ffn_dim=128, heads=4, bert_dim=None))
    settings = NmtTrainSettings(max_tokens=512, peak_lr=3e-3, warmup_steps=50, weight_decay=0.0, seed=0)
    optimizer = make_optimizer(model, settings)
    batches = token_batches(data.lengths(), data.lengths() + 1, settings.max_tokens, np.random.default_rng(0))
    model.train()
    for step in range(1, 301):
        for group in optimizer.param_groups:
            group["lr"] = settings.learning_rate(step)
        batch = make_batch(train, batches[step % len(batches)], PAD, BOS)
        loss, tokens = translation_loss(model, batch, None, 0.0, "cpu")
        optimizer.zero_grad()
        (loss / tokens).backward()
        optimizer.step()
    test = copy_data(100, np.random.default_rng(1))
    source = torch.nn.utils.rnn.pad_sequence([torch.from_numpy(test[i].astype(np.int64)) for i in range(100)],
                                             batch_first=True, padding_value=PAD)
    best = beam_search(model, source, BOS, EOS, SearchSettings(beam=5, length_penalty=1.0))
    hypotheses = [" ".join(map(str, ids)) for ids in best]
    references = [" ".join(map(str, test[i][:-1])) for i in range(100)]
    assert corpus_bleu(hypotheses, references) >= 95


def test_beam_search_prefers_the_higher_scoring_sequence_and_respects_the_length_limit():
    model = fused_model(bert_dim=None).eval()
    source = torch.tensor([[5, 6, EOS], [7, EOS, PAD]])
    settings = SearchSettings(beam=3, max_len_a=0.0, max_len_b=4)
    best = beam_search(model, source, BOS, EOS, settings)
    assert all(len(ids) <= 4 for ids in best)
    greedy = beam_search(model, source, BOS, EOS, SearchSettings(beam=1, max_len_a=0.0, max_len_b=4))

    def score(row, ids):
        target = torch.tensor([[BOS] + ids])
        memory, padding = model.encode(source[row:row + 1])
        log_probs = torch.log_softmax(model.decode(target, memory, padding), -1)[0]
        wanted = ids + ([EOS] if len(ids) < 4 else [])
        total = sum(float(log_probs[i, token].detach()) for i, token in enumerate(wanted))
        return total / len(wanted)

    for row in range(2):
        assert score(row, best[row]) >= score(row, greedy[row]) - 1e-5


def test_vocabulary_round_trip(tmp_path):
    english = ["A man in a red shirt is riding a bike.", "Two dogs play in the snow, don't they?"] * 20
    french = ["Un homme en chemise rouge fait du vélo.", "Deux chiens jouent dans la neige, n'est-ce pas ?"] * 20
    (tmp_path / "en.txt").write_text("\n".join(english) + "\n")
    (tmp_path / "fr.txt").write_text("\n".join(french) + "\n")
    stats = learn_vocabulary(tmp_path / "en.txt", tmp_path / "fr.txt", "en", "fr", 40, tmp_path / "vocab")
    assert stats["merges_learned"] == 40
    tokenizer = NmtTokenizer(tmp_path / "vocab")
    for lines, lang in ((english[:2], "en"), (french[:2], "fr")):
        encoded = tokenizer.encode(lines, lang)
        assert all(ids[-1] == tokenizer.eos_id and tokenizer.unk_id not in ids for ids in encoded)
        assert [tokenizer.decode(ids, lang) for ids in encoded] == lines


def test_resumed_training_matches_an_uninterrupted_run(tmp_path, caplog):
    data = copy_data(200, np.random.default_rng(2))
    train_data = ParallelData(source=data, target=data)
    dev = ParallelData(source=copy_data(20, np.random.default_rng(3)), target=copy_data(20, np.random.default_rng(3)))
    settings = NmtTrainSettings(steps=4, max_tokens=64, warmup_steps=2, log_every=1, eval_every=4,
                                checkpoint_every=2, seed=3)

    def run(name, settings):
        torch.manual_seed(0)
        model = TransformerNmt(tiny_config(vocab_size=13, dropout=0.1, bert_dim=None))
        rows = train(model, train_data, dev, None, settings, tmp_path / name, tmp_path / f"{name}.csv", BOS)
        return model, rows

    whole, whole_rows = run("whole", settings)
    run("parts", NmtTrainSettings(**{**settings.__dict__, "steps": 2}))
    assert [step for step, _ in list_checkpoints(tmp_path / "parts")] == [2]
    with caplog.at_level("INFO", logger="ramen"):  # the resume is logged by ramen.training.checkpoints
        resumed, resumed_rows = run("parts", settings)
    assert "(step 2)" in caplog.text
    for name, value in whole.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], value)
    assert [float(row["train_loss"]) for row in resumed_rows] == [row["train_loss"] for row in whole_rows]


def test_model_sizes_are_parsed_with_their_full_key_path():
    class Vocabulary:
        pad_id = 1

        def __len__(self):
            return 40

    config = model_config({"layers": 2, "dim": 16, "ffn_dim": 32, "heads": 2, "dropout": "0.1"}, Vocabulary())
    assert (config.vocab_size, config.pad_id, config.layers, config.dropout) == (40, 1, 2, 0.1)
    with pytest.raises(ConfigError, match="'tasks.nmt.settings.model.layer': unknown setting"):
        model_config({"layer": 2}, Vocabulary())
    with pytest.raises(ConfigError, match="'tasks.nmt.settings.model.bert_dim': unknown setting"):
        model_config({"bert_dim": 8}, Vocabulary())  # set by the fusion arm, not the config
    with pytest.raises(ConfigError, match="'tasks.nmt.settings.model.dim': 'wide' is not an integer"):
        model_config({"dim": "wide"}, Vocabulary())
