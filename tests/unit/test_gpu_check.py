"""`make gpu-check` on the CPU: everything but the CUDA calls.

The throughput figures and their projection on a tiny model, the kill-and-resume orchestration on
a real (tiny) train_bilingual job started through ramen.pipeline.launch, the comparison that tells
identical runs from different ones, the page and its index row, the Snakemake job the GPU runs
(dry run), and the exit without a GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from ramen.reports import gpu_check, gpu_resume, gpu_throughput
from ramen.reports.results_pages import Stamp

TINY = gpu_throughput.Shape("tiny", dict(vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=64), per_language=2, updates=120_000, seq_len=16,
                       foreign_vocab=200)
STAMP = Stamp(command="make gpu-check", commit="0123abc", date="2026-12-03 09:00 UTC", machine="a test machine")


def test_without_a_gpu_it_says_so_writes_nothing_and_fails(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "gpu.md"
    assert gpu_check.main(["--out", str(out), "--workdir", str(tmp_path / "work")]) == gpu_check.NO_GPU_EXIT != 0
    error = capsys.readouterr().err
    assert "no CUDA GPU" in error and str(out) in error
    assert not out.exists() and not (tmp_path / "work").exists()


def test_projected_hours_are_the_paper_updates_at_the_measured_rate():
    assert gpu_throughput.projected_hours(120_000, 0.3) == pytest.approx(10.0)
    assert gpu_throughput.projected_hours(300_000, 1.2) == pytest.approx(100.0)
    assert [(s.name, s.per_language, s.seq_len, s.updates) for s in gpu_throughput.paper_shapes()] == \
        [("base", 56, 256, 120_000), ("large", 12, 256, 300_000)]


def test_throughput_row_of_a_tiny_model_on_the_cpu(tmp_path):
    row = gpu_throughput.measure_shape(TINY, "cpu", tmp_path, steps=2, warmup=1, sentences=500)
    assert row["step_s"] > 0 and row["bare_step_s"] > 0 and row["tokens_per_s"] > 0
    assert 0 <= row["data_wait"] <= 1
    assert row["tokens_per_update"] == 2 * 2 * 16
    assert row["hours"] == pytest.approx(120_000 * row["step_s"] / 3600)
    assert row["ratio"] == pytest.approx(row["step_s"] / row["bare_step_s"])
    assert row["peak_memory"] is None and row["bare_peak_memory"] is None  # GPU memory only
    line = gpu_throughput.throughput_line(row)
    assert "BERT-tiny ours: 2 en + 2 fr x 16" in line and "120,000 updates" in line


# --- kill and resume -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def training_inputs(tmp_path_factory, tiny_source_dir, foreign_tokenizer_dir, french_corpus):
    """train_bilingual's inputs: the tiny source model, an initial foreign table and encoded corpora."""
    from transformers import AutoTokenizer

    from ramen.vocab.encode import encode_corpus

    root = tmp_path_factory.mktemp("gpu_check_inputs")
    size = len(AutoTokenizer.from_pretrained(foreign_tokenizer_dir))
    generator = torch.Generator().manual_seed(3)
    save_file({"embeddings": torch.randn(size, 32, generator=generator) * 0.1, "bias": torch.zeros(size)},
              str(root / "init.safetensors"))
    encode_corpus(AutoTokenizer.from_pretrained(tiny_source_dir), french_corpus, root / "encoded_en")
    encode_corpus(AutoTokenizer.from_pretrained(foreign_tokenizer_dir), french_corpus, root / "encoded_fr")
    return {"source": tiny_source_dir, "init": root / "init.safetensors", "tokenizer": foreign_tokenizer_dir,
            "en": root / "encoded_en", "fr": root / "encoded_fr"}


def launch_run(inputs: dict, out: Path, steps: int = 60, checkpoint_every: int = 5) -> gpu_resume.TrainingRun:
    """The tiny train_bilingual job as the workflow's script starts it (ramen.pipeline.launch), on the CPU."""
    out.mkdir(parents=True, exist_ok=True)
    job = {"stage": "train_bilingual", "setting": "training",
           "arguments": {"source_dir": str(inputs["source"]),
                         "foreign": {"fr": {"init": str(inputs["init"]), "tokenizer": str(inputs["tokenizer"])}},
                         "data_dirs": {"en": str(inputs["en"]), "fr": str(inputs["fr"])},
                         "out_dirs": {"en": str(out / "model_en"), "fr": str(out / "model_fr")},
                         "checkpoint_dir": str(out / "checkpoints"), "metrics_out": str(out / "metrics.csv"),
                         "source_lang": "en", "device": "cpu"},
           "settings": {"steps": steps, "batch_size": 4, "seq_len": 16, "peak_lr": 1e-3, "init_lr": 1e-5,
                        "warmup_steps": 4, "log_every": 1, "checkpoint_every": checkpoint_every, "threads": 1}}
    (out / "job.json").write_text(json.dumps(job))
    return gpu_resume.TrainingRun("tiny", [sys.executable, "-m", "ramen.pipeline.launch", str(out / "job.json")],
                                 out / "checkpoints", [out / "metrics.csv", out / "model_en", out / "model_fr"],
                                 env={"OMP_NUM_THREADS": "1"})


@pytest.mark.slow
def test_a_killed_and_resumed_job_is_compared_bit_for_bit_with_an_uninterrupted_one(training_inputs, tmp_path):
    run = launch_run(training_inputs, tmp_path / "job")
    result = gpu_resume.kill_and_resume(run, tmp_path / "work", kill_after=5, timeout=300)
    assert 5 <= result["killed_at"] < 60, "killed between its first checkpoint and its end"
    assert result["resumed_from"] == result["killed_at"]
    assert result["identical"] and result["identical_weights"] and result["identical_losses"]
    assert result["max_weight_difference"] == 0 and result["max_loss_difference"] == 0
    assert result["logged_steps"] == 60 and result["tensors"] > 10
    assert "repeat" not in result  # identical: no second uninterrupted run needed
    # The uninterrupted run's outputs stay in place, the resumed run's beside them.
    assert all(path.exists() for path in run.outputs)
    assert len(list((tmp_path / "work" / "resumed").iterdir())) == 3

    report = gpu_check.Report(device="cpu (test)", resume=result, ddp_skipped="one GPU visible",
                              settings={"steps": 2, "warmup": 1, "kill_after": 5}, seconds=12.0)
    report.throughput.append(gpu_throughput.measure_shape(TINY, "cpu", tmp_path / "tiny", steps=1, warmup=1,
                                                     sentences=300))
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "README.md").write_text("# Measured results\n\n| page | sections with results |\n"
                                                    "|---|---|\n| [Demo results](demo.md) | 3 of 7 |\n")
    page = gpu_check.write_page(report, STAMP, tmp_path / "results" / "gpu.md").read_text()
    assert page.startswith("# GPU check\n\nGenerated by `make gpu-check` at commit `0123abc`")
    assert "Device: cpu (test)." in page and "every check passed" in page
    assert "| BERT-tiny | 2 + 2 x 16 |" in page and "| 120,000 |" in page
    assert f"| killed after the checkpoint of update | {result['killed_at']} |" in page
    assert "**Bit-identical**" in page and "Not run: one GPU visible." in page
    index = (tmp_path / "results" / "README.md").read_text()
    assert "| [Demo results](demo.md) | 3 of 7 |" in index and index.count("(gpu.md)") == 1
    gpu_check.write_page(report, STAMP, tmp_path / "results" / "gpu.md")
    assert (tmp_path / "results" / "README.md").read_text().count("(gpu.md)") == 1
    # `make results-pages` rewrites the index and keeps the GPU page's row.
    from ramen.reports.results_pages import write_pages

    write_pages(tmp_path / "none", tmp_path / "none", tmp_path / "results", STAMP)
    assert "| [GPU check](gpu.md) | all checks passed" in (tmp_path / "results" / "README.md").read_text()


def test_a_difference_is_found_and_named(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for directory in (first, second):
        directory.mkdir()
        save_file({"w": torch.ones(3)}, str(directory / "model.safetensors"))
        (directory / "metrics.csv").write_text("step,loss_en\n1,2.5\n2,2.25\n")
    same = gpu_resume.compare_outputs([first / "metrics.csv", first], [second / "metrics.csv", second])
    assert same["identical"] and same["tensors"] == 1
    save_file({"w": torch.tensor([1.0, 1.0, 1.0 + 2 ** -10])}, str(second / "model.safetensors"))
    (second / "metrics.csv").write_text("step,loss_en\n1,2.5\n2,2.26\n")
    differs = gpu_resume.compare_outputs([first / "metrics.csv", first], [second / "metrics.csv", second])
    assert not differs["identical"] and not differs["identical_weights"] and not differs["identical_losses"]
    assert differs["max_weight_difference"] == pytest.approx(2 ** -10)
    assert differs["max_loss_difference"] == pytest.approx(0.01)

    report = gpu_check.Report(device="cpu", settings={"steps": 1, "warmup": 1, "kill_after": 5},
                              resume={**differs, "killed_at": 5, "resumed_from": 5, "killed_s": 1, "resumed_s": 1,
                                      "uninterrupted_s": 1, "repeat": same})
    page = "\n".join(gpu_check.render(report, STAMP))
    assert "**Not bit-identical.**" in page and "two uninterrupted runs were identical" in page


@pytest.mark.slow
def test_a_job_that_ends_before_the_kill_fails_the_check(training_inputs, tmp_path):
    run = launch_run(training_inputs, tmp_path / "job", steps=3, checkpoint_every=0)
    with pytest.raises(gpu_resume.CheckFailed, match="before its checkpoint at step 5"):
        gpu_resume.kill_and_resume(run, tmp_path / "work", kill_after=5, timeout=300)


def test_a_failed_check_is_on_the_page_and_the_others_still_run(tmp_path):
    broken = gpu_resume.TrainingRun("broken", [sys.executable, "-c", "raise SystemExit('no inputs here')"],
                                   tmp_path / "checkpoints", [tmp_path / "metrics.csv"])
    from ramen.reports.gpu_scale import TINY_SHAPE

    report = gpu_check.run_checks("cpu", "cpu (test)", tmp_path, [TINY], {1: broken, 2: broken}, steps=1, warmup=1,
                                  sentences=300, kill_after=5, timeout=60, scale_shape=TINY_SHAPE, scale_seq_len=16)
    assert [row["model"] for row in report.throughput] == ["tiny"]
    assert [row["step"] for row in report.scale] == ["sharded (FSDP, world size 1)", "LoRA", "NF4 + LoRA"]
    assert list(report.errors) == ["kill and resume"] and not report.passed
    assert "no inputs here" in report.errors["kill and resume"]  # the end of the job's log
    page = "\n".join(gpu_check.render(report, STAMP))
    assert "some checks failed" in page and "**kill and resume failed:**" in page
    assert "Not run: the one-GPU run it is compared with failed." in page
    assert "a sharded update and a LoRA update beside the memory plan" in page and "LoRA |" in page


@pytest.mark.slow
def test_the_gpu_job_is_the_demo_workflow_train_bilingual(tmp_path):
    import yaml

    runs = gpu_resume.demo_runs(tmp_path / "demo", "cuda", "bf16", gpus=(1, 2), cores=2)
    one, two = runs[1], runs[2]
    config = yaml.safe_load(Path(one.command[one.command.index("--configfile") + 1]).read_text())
    assert config["device"] == "cuda" and config["training"]["precision"] == "bf16"
    assert config["training"]["gpus"] == 1 and config["training"]["checkpoint_every"] == 100
    assert yaml.safe_load(Path(two.command[two.command.index("--configfile") + 1]).read_text())["training"]["gpus"] == 2
    assert one.outputs[0] == (tmp_path / "demo" / "results/training/rnd_fr.metrics.csv").resolve()
    assert one.checkpoints == (tmp_path / "demo" / "results/checkpoints/rnd_fr").resolve()
    # The plan Snakemake makes of it (dry run, on the CPU config): the inputs, then the training job.
    cpu = gpu_resume.demo_runs(tmp_path / "cpu", "cpu", "fp32", cores=2)[1]
    full = planned_rules([*cpu.command, "-n"], cpu.env)
    inputs = planned_rules([*cpu.command, "--omit-from", "train_bilingual", "-n"], cpu.env)
    assert full == inputs | {"train_bilingual"}
    assert {"warmup_head", "init_foreign", "learn_bpe"} <= inputs and "train_bilingual" not in inputs


def planned_rules(command: list[str], env: dict) -> set[str]:
    """The rules of a Snakemake dry run's job table."""
    import os

    plan = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env})
    assert plan.returncode == 0, plan.stderr[-3000:]
    table = plan.stdout.split("Job stats:", 1)[1].split("total", 1)[0]
    return {line.split()[0] for line in table.splitlines()[3:] if line.strip()}


def test_safetensors_in_bf16_are_compared_too(tmp_path):
    save_file({"w": torch.ones(2, dtype=torch.bfloat16)}, str(tmp_path / "a.safetensors"))
    tensors = gpu_resume.output_tensors([tmp_path / "a.safetensors"])
    assert list(tensors) == ["0/a.safetensors:w"] and np.array_equal(tensors["0/a.safetensors:w"], np.ones(2))
    assert load_file(str(tmp_path / "a.safetensors"))["w"].dtype == torch.bfloat16
