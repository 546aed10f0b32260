"""MLM training: schedule, batches and masking, checkpoint resume and pruning, signals, frozen groups."""

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

from ramen.encode import TokenStream
from ramen.model import IGNORE_INDEX, BilingualMaskedLM, load_source_mlm
from ramen.train import (
    SpecialIds,
    TrainSettings,
    checkpoint_name,
    learning_rate,
    list_checkpoints,
    make_batch,
    prune_checkpoints,
    resume_latest,
    step_batches,
    step_rng,
    train,
)

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
    assert learning_rate(0, settings) == pytest.approx(1e-6)
    warmup = [learning_rate(step, settings) for step in range(41)]
    assert all(a < b for a, b in zip(warmup, warmup[1:]))
    assert learning_rate(40, settings) == pytest.approx(1e-3)
    for step in (41, 90, 160, 1000):
        assert learning_rate(step, settings) == pytest.approx(1e-3 * (40 / step) ** 0.5)
    assert learning_rate(160, settings) == pytest.approx(0.5e-3)
    no_warmup = TrainSettings(steps=10, batch_size=1, peak_lr=1e-3, warmup_steps=0)
    assert learning_rate(1, no_warmup) == pytest.approx(1e-3)


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
    streams = {"en": stream, "fr": stream}
    batches = step_batches(streams, {"en": SPECIAL, "fr": SPECIAL}, settings, step=3, micro=0)
    assert set(batches) == {"en", "fr"}
    assert [b.input_ids.shape for b in batches.values()] == [(4, 16), (4, 16)]
    # Each language and micro-step draws its own sentences and masks.
    assert not torch.equal(batches["en"].labels, batches["fr"].labels)
    other_micro = step_batches(streams, {"en": SPECIAL, "fr": SPECIAL}, settings, step=3, micro=1)
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


def run(tiny_source_dir, language_data, directory: Path, model=None, **overrides):
    streams, specials = language_data
    model = model or new_model(tiny_source_dir, specials["fr"].vocab_size)
    rows = train(model, streams, specials, settings(**overrides), directory / "checkpoints",
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

    with caplog.at_level(logging.INFO, logger="ramen.train"):
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
    optimizer = torch.optim.AdamW(model.parameters())
    assert resume_latest(checkpoints, model, optimizer) == 0


SIGTERM_SCRIPT = """
import logging, sys
from pathlib import Path
import numpy as np, torch
torch.set_num_threads(1)
from transformers import AutoTokenizer
from ramen.encode import TokenStream
from ramen.model import BilingualMaskedLM, load_source_mlm
from ramen.train import SpecialIds, TrainSettings, train

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
train(model, streams, specials, settings, out / "checkpoints", out / "metrics.csv", progress=False)
"""


def test_sigterm_checkpoints_and_fails(tiny_source_dir, foreign_tokenizer_dir, tmp_path):
    script = tmp_path / "train_forever.py"
    script.write_text(textwrap.dedent(SIGTERM_SCRIPT))
    metrics, checkpoints = tmp_path / "metrics.csv", tmp_path / "checkpoints"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, str(script), str(tiny_source_dir), str(foreign_tokenizer_dir),
                                str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
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
    prune_checkpoints(tmp_path, settings(keep_last=keep_last, keep_every=keep_every))
    assert [step for step, _ in list_checkpoints(tmp_path)] == expected
    assert (tmp_path / "step-notanumber").exists()
