"""`make gpu-check`'s workflow part on the CPU: the demo's train_bilingual run by Snakemake, killed with
SIGKILL (Snakemake and the trainer), resumed by rerunning Snakemake and compared with an uninterrupted
run, then trained with ``training.gpus: 2`` (torchrun, gloo) — at a small size, ``device: cpu``."""

from __future__ import annotations

import pytest

from ramen.reports import gpu_check, gpu_resume
from ramen.reports.results_pages import Stamp

pytestmark = pytest.mark.integration


def small(config: dict) -> None:
    config["text"]["max_sentences"] = 3000
    config["bpe"]["merges"] = 300
    config["head_warmup"].update(steps=3, batch_size=4, seq_len=16, warmup_steps=1, log_every=1)
    config["training"].update(batch_size=2, seq_len=16, warmup_steps=2, log_every=1)


def test_the_demo_job_killed_resumed_and_on_two_processes(tmp_path):
    runs = gpu_resume.demo_runs(tmp_path / "demo", "cpu", "fp32", steps=20, checkpoint_every=5, gpus=(1, 2),
                               cores=2, config_edit=small)
    report = gpu_check.run_checks("cpu", "cpu (test)", tmp_path, [], runs, kill_after=5, timeout=900)
    assert not report.errors, "\n\n".join(report.errors.values())
    resume = report.resume
    assert 5 <= resume["killed_at"] < 20 and resume["resumed_from"] == resume["killed_at"]
    assert resume["identical"], resume  # on the CPU a resumed run is the uninterrupted one, bit for bit
    assert resume["logged_steps"] == 20 and resume["tensors"] > 20
    ddp = report.ddp
    assert ddp["logged_steps"] == 20 and ddp["first_tokens_per_s"] > 0 and ddp["second_tokens_per_s"] > 0
    page = "\n".join(gpu_check.render(report, Stamp.now("test")))
    assert "every check passed" in page and "**Bit-identical**" in page and "| tokens/s, two GPUs |" in page
