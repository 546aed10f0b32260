"""Masked-LM training on the core's step loop: schedule, batches and masking, resume and pruning,
signals, frozen groups, precision, logs, shares."""

from __future__ import annotations

import csv
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ramen.vocab.encode import TokenStream
from ramen.modeling.bilingual import IGNORE_INDEX, BilingualMaskedLM, load_source_mlm
from ramen.objectives.mlm import masked_lm
from ramen.training.batches import SpecialIds, make_batch, step_rng
from ramen.training.checkpoints import (
    checkpoint_name,
    list_checkpoints,
    load_latest_state,
    prune_checkpoints,
    read_module,
    read_object,
)
from ramen.training.distributed import prepare_step
from ramen.training.trainer import TrainSettings, train

SPECIAL = SpecialIds(cls=2, sep=3, pad=0, mask=4, all_special=[0, 1, 2, 3, 4], vocab_size=200)
FIRST_ORDINARY = 5


def random_stream(seed: int, sentences: int, vocab_size: int, first: int = FIRST_ORDINARY) -> TokenStream:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 20, size=sentences)
    ids = rng.integers(first, vocab_size, size=int(lengths.sum())).astype(np.uint16)
    return TokenStream(ids=ids, offsets=np.concatenate([[0], np.cumsum(lengths)]), vocab_size=vocab_size)


# --- learning rate ------------------------------------------------------------------------------

def test_learning_rate_warmup_then_inverse_sqrt():
    settings = TrainSettings(steps=100, batch_size=1, peak_lr=1e-3, init_lr=1e-6, warmup_steps=40)
    assert settings.learning_rate(0) == pytest.approx(1e-6)
    warmup = [settings.learning_rate(step) for step in range(41)]
    assert all(a < b for a, b in zip(warmup, warmup[1:]))
    assert settings.learning_rate(40) == pytest.approx(1e-3)
    for step in (41, 90, 160, 1000):
        assert settings.learning_rate(step) == pytest.approx(1e-3 * (40 / step) ** 0.5)
    assert settings.learning_rate(160) == pytest.approx(0.5e-3)
    no_warmup = TrainSettings(steps=10, batch_size=1, peak_lr=1e-3, warmup_steps=0)
    assert no_warmup.learning_rate(1) == pytest.approx(1e-3)


# --- batches and masking ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stream():
    return random_stream(0, sentences=300, vocab_size=SPECIAL.vocab_size)


def test_make_batch_layout(stream):
    seq_len = 32
    batch = make_batch(stream, SPECIAL, step_rng(0, 1, 0), 2000, seq_len, 0.15)
    input_ids, attention, labels = (t.numpy() for t in (batch.input_ids, batch.attention_mask, batch.labels))
    assert input_ids.shape == attention.shape == labels.shape == (2000, seq_len)
    original = np.where(labels != IGNORE_INDEX, labels, input_ids)
    lengths = attention.sum(axis=1) - 2
    assert lengths.min() >= 1 and lengths.max() == seq_len - 2
    assert (lengths < seq_len - 2).any()  # windows running into the end of the corpus are padded
    starts = stream.offsets[:-1]
    for row, length in enumerate(lengths):
        assert original[row, 0] == SPECIAL.cls
        body = original[row, 1:1 + length]
        assert np.all(body >= FIRST_ORDINARY)
        assert original[row, 1 + length] == SPECIAL.sep
        assert np.all(original[row, 2 + length:] == SPECIAL.pad)
        assert np.all(attention[row, :2 + length] == 1) and np.all(attention[row, 2 + length:] == 0)
        # The body is the corpus read from a sentence start.
        if row < 50:
            assert any(np.array_equal(stream.ids[s:s + length], body) for s in starts)


def test_make_batch_masking_rates(stream):
    batch = make_batch(stream, SPECIAL, step_rng(0, 2, 0), 2000, 32, 0.15)
    input_ids, attention, labels = (t.numpy() for t in (batch.input_ids, batch.attention_mask, batch.labels))
    chosen = labels != IGNORE_INDEX
    lengths = attention.sum(axis=1) - 2
    positions = np.arange(input_ids.shape[1])[None, :]
    maskable = (positions >= 1) & (positions <= lengths[:, None])
    assert not np.any(chosen & ~maskable)  # never [CLS], [SEP] or padding
    assert np.all(chosen.sum(axis=1) >= 1)
    assert 0.13 < chosen.sum() / maskable.sum() < 0.18
    assert np.all(input_ids[~chosen] == np.where(labels != IGNORE_INDEX, labels, input_ids)[~chosen])

    replaced = input_ids[chosen]
    target = labels[chosen]
    as_mask = replaced == SPECIAL.mask
    kept = replaced == target
    randomised = ~as_mask & ~kept
    assert 0.76 < as_mask.mean() < 0.84
    assert 0.07 < kept.mean() < 0.13
    assert 0.07 < randomised.mean() < 0.13
    assert np.all(replaced[randomised] >= FIRST_ORDINARY)  # random replacements are never special tokens


def test_batches_are_seeded_by_seed_and_step(stream):
    def batch(seed, step):
        return make_batch(stream, SPECIAL, step_rng(seed, step, 0), 8, 32, 0.15)

    same, again = batch(0, 5), batch(0, 5)
    for a, b in zip((same.input_ids, same.attention_mask, same.labels), (again.input_ids, again.attention_mask,
                                                                         again.labels)):
        assert torch.equal(a, b)
    assert not torch.equal(batch(0, 6).labels, same.labels)
    assert not torch.equal(batch(1, 5).labels, same.labels)


def test_step_batches_give_every_language_the_same_count(stream):
    settings = TrainSettings(steps=10, batch_size=8, seq_len=16, grad_accumulation=2)
    objective = masked_lm(toy_model(), {"en": stream, "fr": stream}, {"en": SPECIAL, "fr": SPECIAL}, settings)
    batches = objective.step_batches(step=3, micro=0)
    assert set(batches) == {"en", "fr"}
    assert [b.input_ids.shape for b in batches.values()] == [(4, 16), (4, 16)]
    # Each language and micro-step draws its own sentences and masks.
    assert not torch.equal(batches["en"].labels, batches["fr"].labels)
    other_micro = objective.step_batches(step=3, micro=1)
    assert not torch.equal(other_micro["en"].labels, batches["en"].labels)


# --- training loop ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def language_data(tiny_source_dir, foreign_tokenizer_dir):
    from transformers import AutoTokenizer

    specials, streams = {}, {}
    for seed, (lang, path) in enumerate([("en", tiny_source_dir), ("fr", foreign_tokenizer_dir)]):
        special = SpecialIds.from_tokenizer(AutoTokenizer.from_pretrained(path))
        specials[lang] = special
        streams[lang] = random_stream(seed, 200, special.vocab_size, first=max(special.all_special) + 1)
    return streams, specials


def new_model(source_dir, foreign_size) -> BilingualMaskedLM:
    generator = torch.Generator().manual_seed(7)
    foreign = {"fr": (torch.randn(foreign_size, 32, generator=generator) * 0.1, torch.zeros(foreign_size))}
    return BilingualMaskedLM(load_source_mlm(source_dir), "en", foreign)


def settings(**overrides) -> TrainSettings:
    values = dict(steps=6, batch_size=4, seq_len=16, peak_lr=1e-3, init_lr=1e-5, warmup_steps=2, log_every=1)
    values.update(overrides)
    return TrainSettings(**values)


def toy_model() -> BilingualMaskedLM:
    """A model for drawing batches (a masked-LM objective holds one); it is never run."""
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=SPECIAL.vocab_size, hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                        intermediate_size=8)
    return BilingualMaskedLM(BertForMaskedLM(config), "en", {"fr": (torch.zeros(SPECIAL.vocab_size, 8),
                                                                    torch.zeros(SPECIAL.vocab_size))})


def run(tiny_source_dir, language_data, directory: Path, model=None, **overrides):
    """Masked-LM training of ``model`` (a new one by default), RAMEN's objective; the model and the rows."""
    streams, specials = language_data
    model = model or new_model(tiny_source_dir, specials["fr"].vocab_size)
    values = settings(**overrides)
    rows = train(masked_lm(model, streams, specials, values), values, directory / "checkpoints",
                 directory / "metrics.csv", progress=False)
    return model, rows


def read_losses(path: Path) -> list[tuple]:
    with open(path, newline="") as handle:
        return [(row["step"], row["lr"], row["loss_en"], row["loss_fr"]) for row in csv.DictReader(handle)]


def assert_same_parameters(a: torch.nn.Module, b: torch.nn.Module):
    state_a, state_b = a.state_dict(), b.state_dict()
    assert state_a.keys() == state_b.keys()
    for name in state_a:
        assert torch.equal(state_a[name], state_b[name]), name


def test_resume_equals_uninterrupted_training(tiny_source_dir, language_data, tmp_path):
    straight, _ = run(tiny_source_dir, language_data, tmp_path / "straight")

    run(tiny_source_dir, language_data, tmp_path / "resumed", steps=3)
    assert [step for step, _ in list_checkpoints(tmp_path / "resumed" / "checkpoints")] == [3]
    resumed, _ = run(tiny_source_dir, language_data, tmp_path / "resumed")

    assert_same_parameters(straight, resumed)
    losses = read_losses(tmp_path / "straight" / "metrics.csv")
    assert [row[0] for row in losses] == [str(step) for step in range(1, 7)]
    assert read_losses(tmp_path / "resumed" / "metrics.csv") == losses
    assert len({row[2] for row in losses}) > 1  # the loss moves, so the comparison means something


def test_corrupt_latest_checkpoint_falls_back_to_the_previous(tiny_source_dir, language_data, tmp_path, caplog):
    first, _ = run(tiny_source_dir, language_data, tmp_path, steps=3, checkpoint_every=1, keep_last=3)
    checkpoints = tmp_path / "checkpoints"
    assert [step for step, _ in list_checkpoints(checkpoints)] == [1, 2, 3]
    weights = checkpoints / checkpoint_name(3) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])

    with caplog.at_level(logging.INFO, logger="ramen.training"):
        again, _ = run(tiny_source_dir, language_data, tmp_path, steps=3, checkpoint_every=1, keep_last=3)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and checkpoint_name(3) in r.getMessage()]
    assert warnings, caplog.text
    assert any("step 2" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
    assert_same_parameters(first, again)  # step 3 redone from step 2 gives the same weights
    assert [row[0] for row in read_losses(tmp_path / "metrics.csv")] == ["1", "2", "3"]

    # Without any readable checkpoint, training starts from scratch.
    for _, path in list_checkpoints(checkpoints):
        (path / "state.json").write_text("{")
    model = new_model(tiny_source_dir, language_data[1]["fr"].vocab_size)
    assert load_latest_state(checkpoints, lambda path, state: read_module(path, "model", model)) is None
    rerun, _ = run(tiny_source_dir, language_data, tmp_path, steps=3, checkpoint_every=1, keep_last=3)
    assert_same_parameters(first, rerun)


SIGTERM_SCRIPT = """
import logging, sys
from pathlib import Path
import numpy as np, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from ramen.vocab.encode import TokenStream
from ramen.modeling.bilingual import BilingualMaskedLM, load_source_mlm
from ramen.objectives.mlm import masked_lm
from ramen.training.batches import SpecialIds
from ramen.training.trainer import TrainSettings, train

logging.basicConfig(level=logging.INFO)
source_dir, foreign_dir, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
specials = {"en": SpecialIds.from_tokenizer(AutoTokenizer.from_pretrained(source_dir)),
            "fr": SpecialIds.from_tokenizer(AutoTokenizer.from_pretrained(foreign_dir))}
rng = np.random.default_rng(0)
streams = {lang: TokenStream(ids=rng.integers(10, s.vocab_size, 2000).astype(np.uint16),
                             offsets=np.arange(0, 2001, 10), vocab_size=s.vocab_size)
           for lang, s in specials.items()}
size = specials["fr"].vocab_size
model = BilingualMaskedLM(load_source_mlm(source_dir), "en", {"fr": (torch.randn(size, 32), torch.zeros(size))})
settings = TrainSettings(steps=1_000_000, batch_size=2, seq_len=16, warmup_steps=10, log_every=1)
train(masked_lm(model, streams, specials, settings), settings, out / "checkpoints", out / "metrics.csv",
      progress=False)
"""


@pytest.mark.slow
def test_sigterm_checkpoints_and_fails(tiny_source_dir, foreign_tokenizer_dir, tmp_path):
    script = tmp_path / "train_forever.py"
    script.write_text(textwrap.dedent(SIGTERM_SCRIPT))
    metrics, checkpoints = tmp_path / "metrics.csv", tmp_path / "checkpoints"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, str(script), str(tiny_source_dir), str(foreign_tokenizer_dir),
                                str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 300  # a guard against hanging; slow under load
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "no training step was logged"
            time.sleep(0.05)
        assert not list_checkpoints(checkpoints)  # no periodic checkpoints: only the signal makes one
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode != 0
    assert "TrainingInterrupted" in stderr and "received signal" in stderr
    saved = list_checkpoints(checkpoints)
    with open(metrics, newline="") as handle:
        last_logged = int(list(csv.DictReader(handle))[-1]["step"])
    assert [step for step, _ in saved] == [last_logged]
    assert (saved[0][1] / "model.safetensors").stat().st_size > 0


def parameters_by_group(model: BilingualMaskedLM) -> dict[str, list[torch.Tensor]]:
    return {group: [p.detach().clone() for p in params] for group, params in model.parameter_groups().items()}


def changed(before: list[torch.Tensor], after: list[torch.nn.Parameter]) -> list[bool]:
    return [not torch.equal(b, a.detach()) for b, a in zip(before, after)]


def test_only_the_trained_groups_change(tiny_source_dir, language_data, tmp_path):
    model = new_model(tiny_source_dir, language_data[1]["fr"].vocab_size)
    before = parameters_by_group(model)
    run(tiny_source_dir, language_data, tmp_path / "head", model=model, steps=2, train=["head"])
    after = model.parameter_groups()
    assert all(changed(before["head"], after["head"]))
    for group in ("encoder", "source_embeddings", "foreign_embeddings"):
        assert not any(changed(before[group], after[group])), group

    model = new_model(tiny_source_dir, language_data[1]["fr"].vocab_size)
    before = parameters_by_group(model)
    run(tiny_source_dir, language_data, tmp_path / "default", model=model, steps=2)
    after = model.parameter_groups()
    assert not any(changed(before["source_embeddings"], after["source_embeddings"]))
    assert all(changed(before["foreign_embeddings"], after["foreign_embeddings"]))
    assert sum(changed(before["encoder"], after["encoder"])) > len(after["encoder"]) // 2


# --- checkpoint pruning -------------------------------------------------------------------------

@pytest.mark.parametrize("keep_last, keep_every, expected", [
    (2, 4, [4, 8, 9, 10]),
    (3, 0, [8, 9, 10]),
    (0, 5, [5, 10]),  # keep_last below 1 still keeps the newest
    (1, 3, [3, 6, 9, 10]),
])
def test_prune_checkpoints(tmp_path, keep_last, keep_every, expected):
    for step in range(1, 11):
        (tmp_path / checkpoint_name(step)).mkdir()
    (tmp_path / "step-notanumber").mkdir()
    prune_checkpoints(tmp_path, keep_last, keep_every)
    assert [step for step, _ in list_checkpoints(tmp_path)] == expected
    assert (tmp_path / "step-notanumber").exists()


# --- precision, compilation, logs, several processes ---------------------------------------------

def test_new_settings_are_validated():
    from ramen.errors import ConfigError

    with pytest.raises(ConfigError, match="training.precision"):
        settings(precision="fp8")
    with pytest.raises(ConfigError, match="training.gpus"):
        settings(gpus=0)
    with pytest.raises(ConfigError, match="training.grad_accumulation"):
        settings(batch_size=6, grad_accumulation=4)
    with pytest.raises(ConfigError, match="training.gpus"):
        settings(batch_size=6, grad_accumulation=2, gpus=2)
    assert settings(batch_size=8, grad_accumulation=2, gpus=2).gpus == 2


def test_autocast_dtype():
    from ramen.training.precision import autocast_dtype

    assert autocast_dtype("auto", "cpu") is None
    assert autocast_dtype("fp32", "cuda") is None
    assert autocast_dtype("bf16", "cpu") is torch.bfloat16
    assert autocast_dtype("fp16", "cuda:1") is torch.float16


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_resume_equals_uninterrupted(tiny_source_dir, language_data, tmp_path, precision):
    # CPU autocast exercises the same code path as a GPU; fp16 also checkpoints its loss scale.
    straight, _ = run(tiny_source_dir, language_data, tmp_path / "straight", precision=precision)
    run(tiny_source_dir, language_data, tmp_path / "resumed", steps=3, precision=precision)
    updates = read_object(tmp_path / "resumed" / "checkpoints" / checkpoint_name(3), "updates")
    assert ("scaler" in updates) == (precision == "fp16")
    resumed, _ = run(tiny_source_dir, language_data, tmp_path / "resumed", precision=precision)
    assert_same_parameters(straight, resumed)
    losses = read_losses(tmp_path / "straight" / "metrics.csv")
    assert read_losses(tmp_path / "resumed" / "metrics.csv") == losses
    assert all(np.isfinite(float(row[2])) for row in losses)


def test_compile_wraps_the_encoder_in_place(tiny_source_dir, language_data, tmp_path, monkeypatch):
    compiled = []
    real_compile = torch.compile

    def eager_compile(target, *args, **kwargs):  # the wiring, without a C++ toolchain's compile time
        compiled.append(target)
        return real_compile(target, backend="eager")

    monkeypatch.setattr(torch, "compile", eager_compile)
    plain, _ = run(tiny_source_dir, language_data, tmp_path / "plain")
    assert not compiled
    model, _ = run(tiny_source_dir, language_data, tmp_path / "compiled", compile=True)
    assert len(compiled) == 1
    assert model.state_dict().keys() == plain.state_dict().keys()  # checkpoints keep their names
    for a, b in zip(read_losses(tmp_path / "plain" / "metrics.csv"),
                    read_losses(tmp_path / "compiled" / "metrics.csv")):
        assert a[:2] == b[:2]
        assert float(a[2]) == pytest.approx(float(b[2]), abs=1e-4)


def test_metrics_columns_and_tensorboard(tiny_source_dir, language_data, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, rows = run(tiny_source_dir, language_data, tmp_path, steps=4, log_every=2)
    assert [row["step"] for row in rows] == [2, 4]
    assert set(rows[0]) == {"step", "lr", "loss_en", "loss_fr", "tokens_per_s", "step_s", "data_wait"}
    assert all(row["tokens_per_s"] > 0 and row["step_s"] > 0 and 0 <= row["data_wait"] <= 1 for row in rows)
    events = EventAccumulator(str(tmp_path / "checkpoints" / "tensorboard"))
    events.Reload()
    assert {"loss/en", "loss/fr", "lr", "tokens_per_s", "data_wait"} <= set(events.Tags()["scalars"])
    logged = events.Scalars("loss/fr")
    assert [e.step for e in logged] == [2, 4]
    assert [round(e.value, 4) for e in logged] == [round(row["loss_fr"], 4) for row in rows]


def test_metrics_written_by_an_older_version_gain_the_new_columns(tmp_path):
    from ramen.training.metrics import append_metrics

    path = tmp_path / "metrics.csv"
    path.write_text("step,lr,loss_en\n1,0.1,5.0\n")
    append_metrics(path, {"step": 2, "lr": 0.2, "loss_en": 4.0, "data_wait": 0.01}, first=False)
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows == [{"step": "1", "lr": "0.1", "loss_en": "5.0", "data_wait": ""},
                    {"step": "2", "lr": "0.2", "loss_en": "4.0", "data_wait": "0.01"}]


def test_resuming_with_other_batch_settings_warns(tiny_source_dir, language_data, tmp_path, caplog):
    run(tiny_source_dir, language_data, tmp_path, steps=2)
    with caplog.at_level(logging.WARNING, logger="ramen.training"):
        run(tiny_source_dir, language_data, tmp_path, steps=3, batch_size=2)
    assert any("batch_size" in r.getMessage() for r in caplog.records), caplog.text


def test_process_shares_partition_the_batch_and_weight_the_mean(stream):
    values = settings(batch_size=8, grad_accumulation=2)
    objective = masked_lm(toy_model(), {"en": stream, "fr": stream}, {"en": SPECIAL, "fr": SPECIAL}, values)
    whole = prepare_step(objective.step_batches, 5, accumulation=2)
    shares = [prepare_step(objective.step_batches, 5, accumulation=2, rank=rank, world=2) for rank in range(2)]
    assert len(whole) == 2 and all(len(share) == 2 for share in shares)
    for micro in range(2):
        for lang in ("en", "fr"):
            full = whole[micro].batches[lang]
            parts = [share[micro].batches[lang] for share in shares]
            assert [p.input_ids.shape[0] for p in parts] == [2, 2]
            assert torch.equal(torch.stack([p.labels for p in parts], dim=1).flatten(0, 1), full.labels)
            # Per-token losses: the weighted mean of the shares' means is the whole batch's mean.
            token_loss = torch.rand(full.labels.shape, generator=torch.Generator().manual_seed(micro))
            masked = full.labels != IGNORE_INDEX
            share_means = [token_loss[rank::2][masked[rank::2]].mean() for rank in range(2)]
            weights = [share[micro].weights[lang] for share in shares]
            combined = sum(w * m for w, m in zip(weights, share_means)) / 2
            torch.testing.assert_close(combined, token_loss[masked].mean())
        assert whole[micro].tokens == shares[0][micro].tokens == shares[1][micro].tokens


def test_prefetched_batches_equal_direct_ones(stream):
    from ramen.training.loops import Prefetcher

    objective = masked_lm(toy_model(), {"en": stream, "fr": stream}, {"en": SPECIAL, "fr": SPECIAL},
                          settings(batch_size=4))

    def make(step):
        return prepare_step(objective.step_batches, step)

    with Prefetcher(make, 3, 6) as prefetcher:
        for step in range(3, 7):
            got, expected = prefetcher.get(step), make(step)
            for a, b in zip(got, expected):
                for lang in ("en", "fr"):
                    assert torch.equal(a.batches[lang].labels, b.batches[lang].labels)
                    assert torch.equal(a.batches[lang].input_ids, b.batches[lang].input_ids)


def test_torchrun_without_distributed_setting_is_an_error(tiny_source_dir, language_data, tmp_path, monkeypatch):
    from ramen.errors import ConfigError

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="training.distributed"):
        run(tiny_source_dir, language_data, tmp_path, steps=1)


def test_run_fingerprint_separates_trajectories_but_not_lengths(tmp_path):
    from ramen.training.trainer import TrainSettings, run_fingerprint

    start = tmp_path / "init.bin"
    start.write_bytes(b"weights")
    base = TrainSettings(steps=10, batch_size=4)
    same = run_fingerprint(base, [start])
    assert run_fingerprint(TrainSettings(steps=500, batch_size=4, log_every=1), [start]) == same
    assert run_fingerprint(TrainSettings(steps=10, batch_size=4, peak_lr=3e-4), [start]) != same
    start.write_bytes(b"other weights")
    assert run_fingerprint(base, [start]) != same


# --- any objective ---------------------------------------------------------------------------------

class ToyBatch:
    """A regression batch: what the core asks of a batch (apply, targets, tokens)."""

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor):
        self.inputs, self.values = inputs, targets

    def apply(self, function) -> "ToyBatch":
        return ToyBatch(function(self.inputs), function(self.values))

    def targets(self) -> int:
        return len(self.values)

    def tokens(self) -> int:
        return len(self.values)


class ToyObjective(torch.nn.Module):
    """No masked LM, no BERT: a dropout regression with two streams that alternate, as an objective
    of another model family would plug into the trainer."""

    name = "toy"

    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5))
        self.head = torch.nn.Linear(8, 1)
        self.steps_begun = []

    def stream_names(self) -> list[str]:
        return ["odd", "even"]

    def batch_key(self, stream: str) -> str:
        return stream

    def begin_step(self, step: int) -> None:
        self.steps_begun.append(step)

    def step_batches(self, step: int, micro: int) -> dict:
        rng = step_rng(0, step, micro)
        inputs = torch.from_numpy(rng.normal(size=(4, 4)).astype(np.float32))
        return {"odd" if step % 2 else "even": ToyBatch(inputs, inputs.sum(dim=1, keepdim=True))}

    def forward(self, batches: dict) -> dict:
        return {key: torch.nn.functional.mse_loss(self.head(self.encoder(batch.inputs)), batch.values)
                for key, batch in batches.items()}

    def parameter_groups(self) -> dict:
        return {"encoder": list(self.encoder.parameters()), "head": list(self.head.parameters()),
                "source_embeddings": [], "foreign_embeddings": []}

    def metrics(self) -> dict:
        return {}


def test_the_trainer_runs_any_objective_and_resumes_it_exactly(tmp_path):
    values = dict(steps=6, batch_size=4, grad_accumulation=2, peak_lr=1e-2, warmup_steps=0, log_every=1,
                  train=["encoder", "head"])
    torch.manual_seed(0)
    straight = ToyObjective()
    start = {name: tensor.clone() for name, tensor in straight.state_dict().items()}
    rows = train(straight, TrainSettings(**values), tmp_path / "a" / "ckpt", tmp_path / "a" / "m.csv", progress=False)
    assert straight.steps_begun == [1, 2, 3, 4, 5, 6]
    assert rows[0]["loss_even"] == "" and rows[1]["loss_even"] != ""  # a stream not trained yet: no value
    assert rows[2]["loss_even"] == rows[1]["loss_even"]  # an alternating stream keeps its latest loss

    first = ToyObjective()
    first.load_state_dict(start)
    train(first, TrainSettings(**{**values, "steps": 3}), tmp_path / "b" / "ckpt", tmp_path / "b" / "m.csv",
          progress=False)
    resumed = ToyObjective()
    resumed.load_state_dict(start)  # overwritten by the checkpoint of step 3
    resumed_rows = train(resumed, TrainSettings(**values), tmp_path / "b" / "ckpt", tmp_path / "b" / "m.csv",
                         progress=False)
    assert resumed.steps_begun == [4, 5, 6]
    assert [row["step"] for row in resumed_rows] == list(range(1, 7))
    assert [row["loss_odd"] for row in resumed_rows] == [row["loss_odd"] for row in rows]
    assert_same_parameters(straight, resumed)
    assert not torch.equal(start["head.weight"], straight.state_dict()["head.weight"])
