"""Training that survives being killed: XNLI fine-tuning, UD parser training and char2subword's
approximation and NMT training, SIGKILLed between checkpoints and restarted, end with exactly the
weights (and dev history or metrics) of an uninterrupted run. (Bilingual training: test_train_resume.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file  # noqa: E402

from ramen.tasks import nli, ud  # noqa: E402
from ramen.training.checkpoints import list_checkpoints  # noqa: E402

# Each test starts processes or runs for seconds: left to `make test`, out of `make test-fast`.
pytestmark = pytest.mark.slow

CHILD = textwrap.dedent('''
    import json, logging, sys, time
    from dataclasses import dataclass
    from pathlib import Path

    import torch

    from ramen.data.conllu import read_conllu
    from ramen.tasks import ud, xnli
    from ramen.training import loops
    from ramen.training.checkpoints import remove_run

    @dataclass
    class Pair:
        premise: str
        hypothesis: str
        label: int

    task, model_dir, data, out, checkpoints, delay = sys.argv[1:7]
    logging.basicConfig(level=logging.INFO)
    torch.set_num_threads(1)
    if float(delay):  # slows the run down so that it can be killed mid-way; results do not change
        for loop in (loops.EpochLoop, loops.StepLoop):
            def slowed(self, *args, _update=loop.update, **kwargs):
                time.sleep(float(delay))
                return _update(self, *args, **kwargs)
            loop.update = slowed
    if task == "xnli":
        pairs = [Pair(*row) for row in json.loads(Path(data).read_text())]
        settings = xnli.NliSettings(epochs=3, batch_size=8, learning_rate=1e-3, seed=7, threads=1,
                                    freeze_embeddings=False, dropout=0.1)
        xnli.finetune(model_dir, pairs, {"en": (None, pairs[:16])}, settings, out, progress=False,
                      checkpoint_dir=checkpoints, checkpoint_every=3)
    elif task == "xnli-shared":  # once for every language: every epoch's classifier kept, no dev set
        pairs = [Pair(*row) for row in json.loads(Path(data).read_text())]
        settings = xnli.NliSettings(epochs=3, batch_size=8, learning_rate=1e-3, seed=7, threads=1,
                                    freeze_embeddings=False, dropout=0.1)
        xnli.finetune(model_dir, pairs, None, settings, out, progress=False, checkpoint_dir=checkpoints,
                      checkpoint_every=3, keep_epochs=True)
    elif task == "nmt":
        import csv
        import numpy as np
        from safetensors.torch import save_file
        from ramen.nmt.data import EncodedText
        from ramen.nmt.model import NmtModelConfig, TransformerNmt
        from ramen.nmt.train import NmtTrainSettings, ParallelData, train
        rng = np.random.default_rng(2)  # a copy task: 60 rows of 3-6 tokens and EOS (2)
        rows = [np.append(rng.integers(3, 13, rng.integers(3, 7)), 2).astype(np.int32) for _ in range(60)]
        text = EncodedText(ids=np.concatenate(rows), offsets=np.concatenate([[0], np.cumsum([len(r) for r in rows])]))
        pairs = ParallelData(source=text, target=text)
        torch.manual_seed(0)
        model = TransformerNmt(NmtModelConfig(vocab_size=13, pad_id=0, layers=1, dim=16, ffn_dim=32, heads=2,
                                              dropout=0.1, max_positions=64, bert_dim=None))
        settings = NmtTrainSettings(steps=16, max_tokens=64, warmup_steps=4, log_every=1, eval_every=4,
                                    checkpoint_every=3, seed=3)
        Path(out).mkdir(parents=True, exist_ok=True)  # the metrics log lives here from the start
        train(model, pairs, pairs, None, settings, checkpoints, Path(out) / "metrics.csv", 1)
        save_file(model.state_dict(), str(Path(out) / "model.safetensors"))
        with open(Path(out) / "metrics.csv", newline="") as handle:  # as logged, without the timings
            logged = [{key: row[key] for key in ("step", "train_loss", "dev_loss")} for row in csv.DictReader(handle)]
        (Path(out) / "metrics.json").write_text(json.dumps({"dev_history": logged}))
    elif task == "c2s":
        from safetensors.torch import save_file
        from ramen.char2subword.approximate import ApproximationSettings, approximate, new_module
        words = ["cat", "dog", "house", "garden", "mouse", "tree", "river", "stone", "bread", "water", "light", "night"]
        table = torch.randn(len(words), 16, generator=torch.Generator().manual_seed(0))
        module = new_module(table, words, {"dim": 16, "layers": 1, "heads": 2, "max_chars": 12}, seed=0)
        settings = ApproximationSettings(steps=16, batch_size=4, learning_rate=0.01, warmup_steps=2, top_k=2,
                                         log_every=1)
        rows = approximate(module, table, words, torch.arange(len(words)).numpy(), settings, progress=False,
                           checkpoint_dir=checkpoints, checkpoint_every=3)
        Path(out).mkdir(parents=True)
        save_file(module.state_dict(), str(Path(out) / "module.safetensors"))
        (Path(out) / "metrics.json").write_text(json.dumps({"dev_history": rows}))
        remove_run(Path(checkpoints))  # as ramen.char2subword.pipeline does once the module is saved
    else:
        sentences = list(read_conllu(data))
        settings = ud.UdSettings(epochs=4, batch_size=2, learning_rate=1e-3, head_learning_rate=5e-3,
                                 dropout=0.2, arc_dim=32, relation_dim=16, relations="full", threads=1,
                                 finetune_encoder=True)
        ud.train_parser(model_dir, sentences, (None, sentences), settings, out, dev_lang="en", progress=False,
                        checkpoint_dir=checkpoints, checkpoint_every=3)
''')


def child(tmp_path: Path, task: str, model_dir: Path, data: Path, name: str, delay: float = 0.0) -> subprocess.Popen:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return subprocess.Popen([sys.executable, str(script), task, str(model_dir), str(data), str(tmp_path / name / "out"),
                             str(tmp_path / name / "checkpoints"), str(delay)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})


def finished(process: subprocess.Popen) -> str:
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]
    return stderr


def checkpoint_steps(directory: Path) -> list[int]:
    """The checkpoints under ``directory`` itself or one fingerprint directory below it."""
    # Not the hidden directories of a checkpoint still being written (ramen.io.atomic_path).
    runs = [directory, *(run for run in directory.glob("*") if not run.name.startswith("."))] \
        if directory.exists() else []
    return [step for run in runs for step, _ in list_checkpoints(run)]


def kill_after_checkpoint(process: subprocess.Popen, checkpoints: Path, step: int) -> None:
    """SIGKILL ``process`` once a checkpoint at update ``step`` or later is under ``checkpoints``."""
    try:
        deadline = time.monotonic() + 300
        while not any(reached >= step for reached in checkpoint_steps(checkpoints)):
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline, f"no checkpoint past update {step} within 300 s"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def killed_and_restarted_equals_uninterrupted(tmp_path, task, model_dir, data, weights, meta, total_steps,
                                              keeps_last: bool = False):
    reference = child(tmp_path, task, model_dir, data, "reference")
    killed = child(tmp_path, task, model_dir, data, "killed", delay=0.5)
    checkpoints = tmp_path / "killed" / "checkpoints"
    kill_after_checkpoint(killed, checkpoints, 4)
    reached = max(checkpoint_steps(checkpoints))
    assert 4 <= reached < total_steps, "the run was not killed mid-way"
    assert not (tmp_path / "killed" / "out" / weights).exists()
    log = finished(child(tmp_path, task, model_dir, data, "killed"))
    assert "resumed from" in log and f"step-{reached:08d}" in log, log[-3000:]
    finished(reference)

    a = load_file(str(tmp_path / "reference" / "out" / weights))
    b = load_file(str(tmp_path / "killed" / "out" / weights))
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    history = [json.loads((tmp_path / run / "out" / meta).read_text())["dev_history"] for run in ("reference", "killed")]
    assert history[0] == history[1] and len(history[0]) >= 3
    # Once the output is written, its checkpoints are gone (NMT keeps the last: more steps continue it).
    left = checkpoint_steps(checkpoints)
    assert (max(left) == total_steps) if keeps_last else left == []


def test_xnli_finetuning_killed_then_restarted_equals_uninterrupted(tiny_source_dir, tmp_path):
    import random

    rng = random.Random(3)
    words = ["the", "cat", "dog", "was", "on", "mat", "big", "small", "red"]
    pairs = [[" ".join(rng.choices(words, k=5)), " ".join(rng.choices(words, k=3)), rng.randrange(3)]
             for _ in range(40)]
    data = tmp_path / "pairs.json"
    data.write_text(json.dumps(pairs))
    killed_and_restarted_equals_uninterrupted(tmp_path, "xnli", tiny_source_dir, data, nli.WEIGHTS_NAME,
                                              nli.META_NAME, total_steps=15)


def test_ud_parser_training_killed_then_restarted_equals_uninterrupted(tiny_source_dir, tmp_path):
    from test_ud import TREEBANK, write_treebank

    data = write_treebank(tmp_path / "tiny.conllu", TREEBANK)
    killed_and_restarted_equals_uninterrupted(tmp_path, "ud", tiny_source_dir, data, ud.WEIGHTS_NAME, ud.META_NAME,
                                              total_steps=16)


def test_char2subword_approximation_killed_then_restarted_equals_uninterrupted(tmp_path):
    killed_and_restarted_equals_uninterrupted(tmp_path, "c2s", tmp_path, tmp_path, "module.safetensors",
                                              "metrics.json", total_steps=16)


def test_nmt_training_killed_then_restarted_equals_uninterrupted(tmp_path):
    killed_and_restarted_equals_uninterrupted(tmp_path, "nmt", tmp_path, tmp_path, "model.safetensors",
                                              "metrics.json", total_steps=16, keeps_last=True)


def test_a_shared_xnli_finetuning_killed_after_an_epoch_keeps_every_epoch(tiny_source_dir, tmp_path):
    """The classifiers of epochs finished before the kill survive it (they are staged under the
    run's checkpoints): the restarted run publishes all of them, equal to an uninterrupted run's."""
    import random

    rng = random.Random(4)
    words = ["the", "cat", "dog", "was", "on", "mat", "big", "small", "red"]
    pairs = [[" ".join(rng.choices(words, k=5)), " ".join(rng.choices(words, k=3)), rng.randrange(3)]
             for _ in range(40)]
    data = tmp_path / "pairs.json"
    data.write_text(json.dumps(pairs))
    reference = child(tmp_path, "xnli-shared", tiny_source_dir, data, "reference")
    killed = child(tmp_path, "xnli-shared", tiny_source_dir, data, "killed", delay=0.5)
    checkpoints = tmp_path / "killed" / "checkpoints"
    kill_after_checkpoint(killed, checkpoints, 6)  # 5 updates an epoch: past the first
    assert 6 <= max(checkpoint_steps(checkpoints)) < 15 and not (tmp_path / "killed" / "out").exists()
    assert "resumed from" in finished(child(tmp_path, "xnli-shared", tiny_source_dir, data, "killed"))
    finished(reference)
    for epoch in (1, 2, 3):
        a, b = (load_file(str(tmp_path / run / "out" / f"epoch-{epoch}" / nli.WEIGHTS_NAME))
                for run in ("reference", "killed"))
        assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a), epoch
    index = [json.loads((tmp_path / run / "out" / "epochs.json").read_text()) for run in ("reference", "killed")]
    assert index[0] == index[1] and [row["step"] for row in index[0]["epochs"]] == [5, 10, 15]
    assert checkpoint_steps(checkpoints) == []
