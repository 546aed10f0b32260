"""Training that survives being killed, and multi-process training that matches one process.

A run killed with SIGKILL between checkpoints and restarted gives exactly the losses
and weights of an uninterrupted run. Two torchrun processes (gloo on the CPU) started
by ramen.pipeline.launch, interrupted by SIGTERM and resumed, end where one process does, and
the exported Hugging Face models reload with the trained model's logits.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from ramen.objectives.base import ObjectiveSettings
from ramen.objectives.mlm import MaskedLM
from ramen.training.checkpoints import list_checkpoints, read_module

# Each test starts processes or runs for seconds: left to `make test`, out of `make test-fast`.
pytestmark = pytest.mark.slow

TRAIN_SCRIPT = '''
import sys, time
from pathlib import Path
import numpy as np, torch
from transformers import AutoTokenizer
from ramen.training import trainer as training
from ramen.training.batches import SpecialIds
from ramen.vocab.encode import TokenStream
from ramen.modeling.bilingual import BilingualMaskedLM, load_source_mlm
from ramen.objectives.mlm import masked_lm

SETTINGS = dict(steps=30, batch_size=4, seq_len=16, peak_lr=1e-3, init_lr=1e-5, warmup_steps=4, log_every=1,
                checkpoint_every=2, keep_last=2)


def build(source_dir, foreign_dir):
    specials = {"en": SpecialIds.from_tokenizer(AutoTokenizer.from_pretrained(source_dir)),
                "fr": SpecialIds.from_tokenizer(AutoTokenizer.from_pretrained(foreign_dir))}
    rng = np.random.default_rng(0)
    streams = {lang: TokenStream(ids=rng.integers(10, s.vocab_size, 2000).astype(np.uint16),
                                 offsets=np.arange(0, 2001, 10), vocab_size=s.vocab_size)
               for lang, s in specials.items()}
    size = specials["fr"].vocab_size
    generator = torch.Generator().manual_seed(7)
    foreign = {"fr": (torch.randn(size, 32, generator=generator) * 0.1, torch.zeros(size))}
    return BilingualMaskedLM(load_source_mlm(source_dir), "en", foreign), streams, specials


def run(source_dir, foreign_dir, out, step_delay=0.0):
    torch.set_num_threads(1)
    model, streams, specials = build(source_dir, foreign_dir)
    if step_delay:  # slows the run down so that it can be killed mid-way; results do not change
        schedule = training.TrainSettings.learning_rate
        training.TrainSettings.learning_rate = lambda self, step: (time.sleep(step_delay), schedule(self, step))[1]
    settings = training.TrainSettings(**SETTINGS)
    training.train(masked_lm(model, streams, specials, settings), settings, Path(out) / "checkpoints",
                   Path(out) / "metrics.csv", progress=False)
    return model


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
'''


def load_script(path: Path):
    spec = importlib.util.spec_from_file_location(f"train_script_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def metric_rows(path: Path, columns=("step", "lr", "loss_en", "loss_fr")) -> list[tuple]:
    with open(path, newline="") as handle:
        return [tuple(row[c] for c in columns) for row in csv.DictReader(handle)]


def wait_for(condition, process: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the process ended before {what}:\n{process.communicate()[1]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def stop(process: subprocess.Popen) -> None:
    """Kill a process left running by a failure, with torchrun's processes below it."""
    from ramen.pipeline.launch import child_processes

    if process.poll() is None:
        family, pending = [], [process.pid]
        while pending:
            pid = pending.pop()
            family.append(pid)
            pending.extend(child_processes(pid))
        for pid in reversed(family):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait()


def test_sigkill_then_restart_equals_uninterrupted(tiny_source_dir, foreign_tokenizer_dir, tmp_path, caplog):
    script = tmp_path / "train_script.py"
    script.write_text(TRAIN_SCRIPT)
    killed = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, str(script), str(tiny_source_dir), str(foreign_tokenizer_dir),
                                str(killed), "0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    try:
        wait_for(lambda: any(step >= 4 for step, _ in list_checkpoints(killed / "checkpoints")), process, 120,
                 "a checkpoint at step 4")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        stop(process)
    assert process.returncode == -signal.SIGKILL
    reached = list_checkpoints(killed / "checkpoints")[-1][0]
    assert 4 <= reached < 30, "the run was not killed mid-way"

    module = load_script(script)
    with caplog.at_level(logging.INFO, logger="ramen.training"):
        restarted = module.run(tiny_source_dir, foreign_tokenizer_dir, killed)
    resumed_from = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resumed from")]
    assert resumed_from and f"(step {reached})" in resumed_from[0]  # checkpoints are written atomically
    straight = module.run(tiny_source_dir, foreign_tokenizer_dir, tmp_path / "straight")

    rows = metric_rows(tmp_path / "straight" / "metrics.csv")
    assert [int(row[0]) for row in rows] == list(range(1, 31))
    assert metric_rows(killed / "metrics.csv") == rows
    assert len({row[3] for row in rows}) > 10
    for name, value in straight.state_dict().items():
        assert torch.equal(value, restarted.state_dict()[name]), name


# --- several processes ---------------------------------------------------------------------------

LAUNCH_SCRIPT = '''
import json, logging, sys
from ramen.pipeline.launch import launch

logging.basicConfig(level=logging.INFO)
job = json.loads(open(sys.argv[1]).read())
launch(job["stage"], job["arguments"], job["settings"])
'''


@pytest.fixture(scope="module")
def bilingual_inputs(tmp_path_factory, tiny_source_dir, foreign_tokenizer_dir, french_corpus):
    """train_bilingual's inputs: a dropout-free source (processes draw their own dropout masks),
    an initial foreign table and encoded corpora."""
    from transformers import AutoTokenizer

    from ramen.vocab.encode import encode_corpus

    root = tmp_path_factory.mktemp("bilingual_inputs")
    source = root / "source"
    shutil.copytree(tiny_source_dir, source)
    config = json.loads((source / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (source / "config.json").write_text(json.dumps(config))
    size = len(AutoTokenizer.from_pretrained(foreign_tokenizer_dir))
    generator = torch.Generator().manual_seed(3)
    save_file({"embeddings": torch.randn(size, 32, generator=generator) * 0.1, "bias": torch.zeros(size)},
              str(root / "init.safetensors"))
    encode_corpus(AutoTokenizer.from_pretrained(source), french_corpus, root / "encoded_en")
    encode_corpus(AutoTokenizer.from_pretrained(foreign_tokenizer_dir), french_corpus, root / "encoded_fr")
    return {"source": source, "init": root / "init.safetensors", "tokenizer": foreign_tokenizer_dir,
            "en": root / "encoded_en", "fr": root / "encoded_fr"}


def job_arguments(inputs: dict, out: Path) -> dict:
    return {
        "source_dir": str(inputs["source"]),
        "foreign": {"fr": {"init": str(inputs["init"]), "tokenizer": str(inputs["tokenizer"])}},
        "data_dirs": {"en": str(inputs["en"]), "fr": str(inputs["fr"])},
        "out_dirs": {"en": str(out / "model_en"), "fr": str(out / "model_fr")},
        "checkpoint_dir": str(out / "checkpoints"),
        "metrics_out": str(out / "metrics.csv"),
        "source_lang": "en",
        "device": "cpu",
    }


def job_settings(**overrides) -> dict:
    values = dict(steps=6, batch_size=8, grad_accumulation=2, seq_len=16, peak_lr=1e-3, init_lr=1e-5,
                  warmup_steps=2, log_every=1, threads=1)
    values.update(overrides)
    return values


def masked_lm_logits(model_dir: Path, input_ids: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        return model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits


def test_two_processes_interrupted_and_resumed_match_one_process(bilingual_inputs, tmp_path):
    from ramen.pipeline.launch import launch
    from ramen.modeling.bilingual import BilingualMaskedLM, load_source_mlm

    script = tmp_path / "launch_script.py"
    script.write_text(textwrap.dedent(LAUNCH_SCRIPT))
    pair = tmp_path / "pair"
    job = tmp_path / "job.json"
    # The schedule does not depend on `steps`: a long run stopped at step k continues as one of k + 3.
    job.write_text(json.dumps({"stage": "train_bilingual", "arguments": job_arguments(bilingual_inputs, pair),
                               "settings": job_settings(steps=1_000_000, gpus=2)}))
    process = subprocess.Popen([sys.executable, str(script), str(job)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: any(len(path.read_text().splitlines()) >= 3
                             for path in pair.glob("checkpoints/*/metrics.csv")), process, 240, "two logged steps")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        stop(process)
    assert process.returncode != 0
    assert "received signal" in stderr and "TrainingInterrupted" in stderr, stderr[-3000:]
    live_metrics = run_dir(pair) / "metrics.csv"
    saved = [step for step, _ in list_checkpoints(run_dir(pair))]
    assert len(saved) == 1 and saved[0] >= 2
    stopped = saved[0]
    assert int(metric_rows(live_metrics)[-1][0]) == stopped  # both processes stopped at the same step

    steps = stopped + 3
    launch("train_bilingual", job_arguments(bilingual_inputs, pair), job_settings(steps=steps, gpus=2))
    single = tmp_path / "single"
    launch("train_bilingual", job_arguments(bilingual_inputs, single), job_settings(steps=steps))

    pair_rows, single_rows = metric_rows(pair / "metrics.csv"), metric_rows(single / "metrics.csv")
    assert [row[:2] for row in pair_rows] == [row[:2] for row in single_rows] \
        == [(str(step), row[1]) for step, row in zip(range(1, steps + 1), single_rows)]
    np.testing.assert_allclose(np.array([row[2:] for row in pair_rows], dtype=float),
                               np.array([row[2:] for row in single_rows], dtype=float), atol=3e-5)
    # Equal up to float rounding: the processes' gradients are summed in another order.
    final = checkpoint_weights(pair, steps), checkpoint_weights(single, steps)
    assert final[0].keys() == final[1].keys()
    for name in final[0]:
        torch.testing.assert_close(final[0][name], final[1][name], rtol=1e-4, atol=1e-5, msg=name)

    # The exported models reload with the trained bilingual model's logits.
    init = load_file(str(bilingual_inputs["init"]))
    model = BilingualMaskedLM(load_source_mlm(bilingual_inputs["source"]), "en",
                              {"fr": (init["embeddings"], init["bias"])})
    read_module(run_dir(pair) / f"step-{steps:08d}", "model", MaskedLM.for_export(model, ObjectiveSettings()))
    model.eval()
    input_ids = torch.tensor([[2, 20, 30, 40, 50, 3]])
    for lang in ("en", "fr"):
        with torch.no_grad():
            hidden = model.encode({lang: _batch(input_ids)})[lang]
            ours = model.masked_logits(lang, hidden, torch.ones_like(input_ids, dtype=torch.bool))
        exported = masked_lm_logits(pair / f"model_{lang}", input_ids)[0]
        torch.testing.assert_close(exported, ours, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(masked_lm_logits(single / f"model_{lang}", input_ids)[0], ours,
                                   rtol=1e-3, atol=1e-3)


def run_dir(out: Path) -> Path:
    """The one run directory (named by its settings fingerprint) under a job's checkpoint dir."""
    runs = [path for path in (out / "checkpoints").iterdir() if path.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def checkpoint_weights(out: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir(out) / f"step-{step:08d}" / "model.safetensors"))


def _batch(input_ids: torch.Tensor):
    from ramen.modeling.bilingual import IGNORE_INDEX, MaskedBatch

    return MaskedBatch(input_ids, torch.ones_like(input_ids), torch.full_like(input_ids, IGNORE_INDEX))
