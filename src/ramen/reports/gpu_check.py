"""`make gpu-check`: does ramen's GPU path work on this machine, and how fast is it?

One command, a few minutes on one GPU, writes ``docs/results/gpu.md`` with the command, commit,
date, machine and device, and three checks:

1. **Throughput at the paper's shapes** (the GPU section of ``benchmarks/bench_train_step.py``):
   the bilingual training loop on BERT-base (56 + 56 sequences of 256 tokens) and BERT-large
   (12 + 12), random weights, every parameter trained, ``precision: auto``: seconds per update,
   tokens/s, the share of the update spent waiting for data, peak GPU memory, the hours the
   paper's 120k / 300k updates would take at that rate, and a bare ``BertForMaskedLM`` update on
   as many sequences, for scale.
2. **Kill and resume**: the demo config's ``train_bilingual`` (variant ``rnd``, French) run by
   the workflow itself with ``device: cuda`` and ``precision: bf16``, killed with SIGKILL (the
   whole process group: Snakemake and the trainer) after its first checkpoint, resumed by
   rerunning Snakemake, and compared with an uninterrupted run on the same inputs: the metrics
   file and every exported tensor, bit for bit.
3. **Two GPUs** (when two are visible): the same job with ``training.gpus: 2`` (torchrun through
   ``ramen.pipeline.launch``), compared with the one-GPU run.

A check that fails is reported on the page with its error and the command exits 1; on a machine
without a CUDA GPU it writes nothing and exits 2.

    python -m ramen.reports.gpu_check [--out docs/results/gpu.md] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ramen.io import write_lines

REPO = Path(__file__).resolve().parents[3]
FOREIGN_SPECIAL = dict(cls=2, sep=3, pad=0, mask=4, all_special=[0, 1, 2, 3, 4])
GIB = 1024 ** 3
NO_GPU_EXIT = 2


# --- throughput at the paper's shapes ------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    """A model shape and batch of the paper: ``per_language`` sequences of ``seq_len`` tokens per
    language and update, ``updates`` in the paper's run."""

    name: str
    config: Mapping  # transformers.BertConfig arguments
    per_language: int
    updates: int
    seq_len: int = 256
    foreign_vocab: int = 32_000  # §3.1: the foreign vocabularies have 32k subwords


def paper_shapes() -> list[Shape]:
    """BERT-base (56 + 56 x 256, 120k updates) and BERT-large (12 + 12 x 256, 300k updates), §3.1."""
    return [Shape("base", {}, 56, 120_000),
            Shape("large", dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                intermediate_size=4096), 12, 300_000)]


def projected_hours(updates: int, seconds_per_update: float) -> float:
    return updates * seconds_per_update / 3600


def synthetic_stream(directory: Path, name: str, vocab_size: int, first_id: int, seed: int,
                     sentences: int = 20_000):
    """A corpus of random ids on disk, read through numpy.memmap as training reads encoded corpora."""
    from ramen.vocab.encode import TokenStream

    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 40, size=sentences)
    path = Path(directory) / f"{name}.bin"
    rng.integers(first_id, vocab_size, size=int(lengths.sum())).astype(np.uint16).tofile(path)
    ids = np.memmap(path, dtype=np.uint16, mode="r")
    return TokenStream(ids=ids, offsets=np.concatenate([[0], np.cumsum(lengths)]), vocab_size=vocab_size)


def bilingual_model(source, foreign_vocab: int, lang: str = "fr"):
    """``source`` (a masked LM) with a random ``foreign_vocab``-row foreign table beside English."""
    import torch

    from ramen.modeling.bilingual import BilingualMaskedLM

    hidden = source.config.hidden_size
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(foreign_vocab, hidden, generator=generator) * source.config.initializer_range
    return BilingualMaskedLM(source, "en", {lang: (table, torch.zeros(foreign_vocab))})


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def reset_peak_memory(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_memory(device: str) -> float | None:
    """Peak GPU memory allocated since :func:`reset_peak_memory`, in bytes (None on the CPU)."""
    import torch

    return float(torch.cuda.max_memory_allocated()) if device.startswith("cuda") else None


def masked_lm(model, streams, specials, settings):
    """RAMEN's masked-LM objective on ``model``, as train_bilingual trains a variant without ``objective``."""
    from ramen.objectives import DEFAULT_OBJECTIVE, get_objective
    from ramen.objectives.base import BatchShape, ObjectiveSettings

    return get_objective(DEFAULT_OBJECTIVE).build(model, streams, specials, BatchShape.of(settings),
                                                  ObjectiveSettings())


def loop_timing(model, streams, specials, settings, warmup: int, device: str, directory: Path) -> dict:
    """Seconds per update, tokens/s and data-wait share of the training loop (masked-LM on ``model``)
    after ``warmup`` updates."""
    from ramen.training.trainer import train

    rows = train(masked_lm(model, streams, specials, settings), settings, directory / "checkpoints",
                 directory / "metrics.csv", device=device, progress=False)
    timed = [row for row in rows if row["step"] > warmup] or rows[-1:]
    seconds = sum(row["step_s"] for row in timed)
    return {"step_s": seconds / len(timed),
            "tokens_per_s": float(np.mean([row["tokens_per_s"] for row in timed])),
            "data_wait": sum(row["data_wait"] * row["step_s"] for row in timed) / seconds}


def bare_step_fn(bare, stream, special, batch: int, seq_len: int, device: str, precision: str = "auto"):
    """One update of a bare Hugging Face masked LM on ``batch`` sequences (its own loss over the whole
    vocabulary at every position, every parameter trained); returns the seconds spent making the batch."""
    import torch

    from ramen.training.optimisation import fused_adam
    from ramen.training.precision import autocast_dtype
    from ramen.training.batches import make_batch, step_rng

    params = [p for p in bare.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4, fused=fused_adam(device))
    dtype = autocast_dtype(precision, device)

    def step(index: int) -> float:
        start = time.perf_counter()
        masked = make_batch(stream, special, step_rng(0, index, 0), batch, seq_len, 0.15)
        data = time.perf_counter() - start
        inputs = {"input_ids": masked.input_ids.to(device), "attention_mask": masked.attention_mask.to(device),
                  "labels": masked.labels.to(device)}
        with torch.autocast(device.split(":")[0], dtype=dtype, enabled=dtype is not None):
            loss = bare(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return data

    return step


def time_interleaved(steps_by_name: Mapping[str, Callable[[int], float]], warmup: int, steps: int,
                     device: str = "cpu") -> dict[str, tuple[float, float]]:
    """Median seconds per step and data share for each step function, run in turn.

    Taking turns exposes every variant to the same background load; the median drops the steps a
    burst of it lands on.
    """
    for index in range(warmup):
        for step in steps_by_name.values():
            step(index + 1)
    synchronize(device)
    times = {name: [] for name in steps_by_name}
    data = {name: [] for name in steps_by_name}
    for index in range(warmup, warmup + steps):
        for name, step in steps_by_name.items():
            start = time.perf_counter()
            data[name].append(step(index + 1))
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return {name: (float(np.median(times[name])), float(np.sum(data[name]) / np.sum(times[name])))
            for name in steps_by_name}


def measure_shape(shape: Shape, device: str, workdir: Path, steps: int = 20, warmup: int = 2,
                  sentences: int = 200_000, compile: bool = False) -> dict:
    """The training loop and a bare BertForMaskedLM update at ``shape`` on ``device``: one row of the page."""
    import torch
    from transformers import AutoModelForMaskedLM, BertConfig

    from ramen.training.batches import SpecialIds
    from ramen.training.trainer import PARAMETER_GROUPS, TrainSettings

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    config = BertConfig(**shape.config)
    english = SpecialIds(**FOREIGN_SPECIAL, vocab_size=config.vocab_size)
    foreign = SpecialIds(**FOREIGN_SPECIAL, vocab_size=shape.foreign_vocab)
    specials = {"en": english, "fr": foreign}
    streams = {"en": synthetic_stream(workdir, "en", english.vocab_size, 5, 0, sentences),
               "fr": synthetic_stream(workdir, "fr", foreign.vocab_size, 5, 1, sentences)}

    torch.manual_seed(0)
    model = bilingual_model(AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa"), shape.foreign_vocab)
    settings = TrainSettings(steps=warmup + steps, batch_size=shape.per_language, seq_len=shape.seq_len,
                             train=list(PARAMETER_GROUPS), log_every=1, warmup_steps=4000, compile=compile)
    reset_peak_memory(device)
    # torch.compile spends its first updates compiling: they are left out as well.
    timing = loop_timing(model, streams, specials, settings, warmup + (3 if compile else 0), device,
                         workdir / "loop")
    ours_peak = peak_memory(device)
    del model
    reset_peak_memory(device)

    torch.manual_seed(0)
    bare = AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa").to(device).train()
    sequences = 2 * shape.per_language
    bare_time, _ = time_interleaved({"bare": bare_step_fn(bare, streams["en"], english, sequences, shape.seq_len,
                                                          device)}, warmup, steps, device)["bare"]
    bare_peak = peak_memory(device)
    del bare
    reset_peak_memory(device)
    return {"model": shape.name, "per_language": shape.per_language, "seq_len": shape.seq_len,
            "tokens_per_update": sequences * shape.seq_len, "step_s": timing["step_s"],
            "tokens_per_s": timing["tokens_per_s"], "data_wait": timing["data_wait"], "peak_memory": ours_peak,
            "updates": shape.updates, "hours": projected_hours(shape.updates, timing["step_s"]),
            "bare_step_s": bare_time, "bare_peak_memory": bare_peak, "ratio": timing["step_s"] / bare_time}


def throughput_line(row: Mapping) -> str:
    """A measured row as the benchmark script prints it."""
    memory = "" if row["peak_memory"] is None else f", peak memory {row['peak_memory'] / GIB:.1f} GiB"
    bare_memory = "" if row["bare_peak_memory"] is None else f", peak memory {row['bare_peak_memory'] / GIB:.1f} GiB"
    return (f"BERT-{row['model']} ours: {row['per_language']} en + {row['per_language']} fr x {row['seq_len']}, all "
            f"parameters: {row['step_s']:.3f} s/update, {row['tokens_per_s']:.0f} tokens/s, data wait "
            f"{row['data_wait']:.1%}{memory}; {row['updates']:,} updates ~ {row['hours']:.1f} h\n"
            f"BERT-{row['model']} bare BertForMaskedLM {2 * row['per_language']} x {row['seq_len']}: "
            f"{row['bare_step_s']:.3f} s/update{bare_memory}; ratio ours/bare {row['ratio']:.2f}")


# --- kill and resume -------------------------------------------------------------------------------

@dataclass
class TrainingRun:
    """A training job as a command: what it writes, where its checkpoints go, how to run it again.

    ``command`` runs the job to the end, resuming from ``checkpoints`` (a directory of runs, each a
    directory of ``step-*`` checkpoints) when there are any; ``outputs`` are the files and
    directories it writes at the end; ``logs``, the files the job writes its own log to (a rule's
    log), beside what the command prints.
    """

    name: str
    command: list[str]
    checkpoints: Path
    outputs: list[Path]
    env: Mapping[str, str] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)


def latest_checkpoint(root: Path) -> int:
    """The highest checkpointed step under ``root`` (a directory of run directories); 0 when none."""
    from ramen.training.checkpoints import list_checkpoints

    steps = [step for run in Path(root).glob("*") if run.is_dir() for step, _ in list_checkpoints(run)]
    return max(steps, default=0)


def clear(run: TrainingRun) -> None:
    """Remove a run's outputs and checkpoints: the next start trains from the beginning."""
    for path in [*run.outputs, run.checkpoints]:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def start(run: TrainingRun, log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as handle:
        # A session of its own: the kill reaches the job's whole process group (Snakemake, the trainer).
        return subprocess.Popen(run.command, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **run.env})


def finish(run: TrainingRun, log: Path, timeout: float) -> None:
    process = start(run, log)
    try:
        returncode = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(process)
        raise CheckFailed(f"{run.name} did not finish within {timeout:.0f} s; its log: {log}", [log, *run.logs]) \
            from None
    if returncode != 0:
        raise CheckFailed(f"{run.name} exited with status {returncode}; its log: {log}", [log, *run.logs])


def kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


class CheckFailed(RuntimeError):
    """A check that did not pass; ``logs``: the files whose ends tell why."""

    def __init__(self, message: str, logs: Sequence[Path] | Path = ()):
        super().__init__(message)
        self.logs = [logs] if isinstance(logs, Path) else list(logs)


def stash(run: TrainingRun, directory: Path) -> list[Path]:
    """Move a run's outputs under ``directory`` (keeping their names); return their new paths."""
    directory.mkdir(parents=True, exist_ok=True)
    moved = []
    for index, path in enumerate(run.outputs):
        target = directory / f"{index}-{path.name}"
        shutil.move(str(path), target)
        moved.append(target)
    return moved


def output_tensors(paths: Sequence[Path]) -> dict[str, np.ndarray]:
    """Every tensor of every ``*.safetensors`` file under ``paths``, keyed by output index, file and name."""
    from safetensors.numpy import load_file
    import torch
    from safetensors.torch import load_file as load_torch

    tensors = {}
    for index, path in enumerate(paths):
        files = sorted(Path(path).rglob("*.safetensors")) if Path(path).is_dir() else \
            ([Path(path)] if Path(path).suffix == ".safetensors" else [])
        for file in files:
            label = f"{index}/{file.relative_to(path).as_posix() if Path(path).is_dir() else file.name}"
            try:
                values = load_file(str(file))
            except (TypeError, ValueError):  # bf16 has no numpy dtype: compare its bits as float32
                values = {k: v.to(torch.float32).numpy() for k, v in load_torch(str(file)).items()}
            tensors.update({f"{label}:{name}": value for name, value in values.items()})
    return tensors


def metric_rows(paths: Sequence[Path]) -> list[dict]:
    rows = []
    for path in paths:
        if Path(path).suffix == ".csv":
            with open(path, newline="", encoding="utf-8") as handle:
                rows += list(csv.DictReader(handle))
    return rows


def loss_columns(rows: Sequence[Mapping]) -> list[str]:
    return [name for name in (rows[0] if rows else {}) if name.startswith("loss")]


def compare_outputs(first: Sequence[Path], second: Sequence[Path]) -> dict:
    """Bit-for-bit comparison of two runs' outputs: tensors and logged losses, with the largest gaps."""
    ours, theirs = output_tensors(first), output_tensors(second)
    if ours.keys() != theirs.keys():
        raise CheckFailed(f"the two runs exported different tensors: {sorted(ours.keys() ^ theirs.keys())[:5]}")
    if not ours:
        raise CheckFailed(f"no safetensors file under {[str(p) for p in first]}: nothing to compare")
    weight_gap = max(float(np.max(np.abs(ours[k].astype(np.float64) - theirs[k].astype(np.float64)), initial=0.0))
                     for k in ours)
    identical = all(ours[k].dtype == theirs[k].dtype and ours[k].tobytes() == theirs[k].tobytes() for k in ours)
    rows_a, rows_b = metric_rows(first), metric_rows(second)
    columns = loss_columns(rows_a)
    if [row["step"] for row in rows_a] != [row["step"] for row in rows_b]:
        raise CheckFailed("the two runs logged different steps: "
                          f"{[row['step'] for row in rows_a][-3:]} and {[row['step'] for row in rows_b][-3:]}")
    loss_gap = max((abs(float(a[c]) - float(b[c])) for a, b in zip(rows_a, rows_b) for c in columns
                    if a[c] != "" and b[c] != ""), default=0.0)
    same_losses = all(a[c] == b[c] for a, b in zip(rows_a, rows_b) for c in columns)
    final = {c: rows_a[-1][c] for c in columns} if rows_a else {}
    return {"tensors": len(ours), "identical": identical and same_losses, "identical_weights": identical,
            "identical_losses": same_losses, "max_weight_difference": weight_gap, "max_loss_difference": loss_gap,
            "logged_steps": len(rows_a), "final_losses": final}


def kill_and_resume(run: TrainingRun, workdir: Path, kill_after: int, timeout: float = 600,
                    poll_s: float = 0.01, repeat: bool = True) -> dict:
    """Run ``run`` until a checkpoint at step >= ``kill_after`` exists, SIGKILL its process group,
    rerun it to the end (it resumes), then run it again uninterrupted from nothing and compare.
    With ``repeat``, a resumed run that differs is followed by a second uninterrupted run, whose
    difference from the first is the device's own run-to-run variation."""
    workdir = Path(workdir)
    clear(run)
    log = workdir / f"{run.name}.killed.log"
    process = start(run, log)
    started = time.monotonic()
    try:
        while latest_checkpoint(run.checkpoints) < kill_after:
            if process.poll() is not None:
                raise CheckFailed(f"{run.name} ended (status {process.returncode}) before its checkpoint at step "
                                  f"{kill_after}; its log: {log}", [log, *run.logs])
            if time.monotonic() - started > timeout:
                raise CheckFailed(f"no checkpoint at step {kill_after} within {timeout:.0f} s; its log: {log}",
                                  [log, *run.logs])
            time.sleep(poll_s)
        finished = process.poll() is not None
    finally:
        kill_group(process)
    killed_at = latest_checkpoint(run.checkpoints)
    if finished or any(path.exists() for path in run.outputs):
        raise CheckFailed(f"{run.name} finished before it could be killed (a checkpoint every few updates, "
                          "or more steps, leaves time for the kill); its log: " + str(log), [log, *run.logs])
    first_seconds = time.monotonic() - started

    resume_log = workdir / f"{run.name}.resumed.log"
    started = time.monotonic()
    finish(run, resume_log, timeout)
    resume_seconds = time.monotonic() - started
    # The trainer logs where it resumed from: to the command's output, or to the rule's log under Snakemake.
    text = "\n".join(path.read_text(encoding="utf-8", errors="replace") for path in [resume_log, *run.logs]
                     if path.exists())
    resumed_from = next((int(line.rsplit("(step ", 1)[1].split(")")[0]) for line in text.splitlines()
                         if "resumed from" in line and "(step " in line), None)
    if resumed_from is None:
        raise CheckFailed(f"the rerun of {run.name} did not resume from a checkpoint (no 'resumed from' line in "
                          f"{', '.join(str(p) for p in [resume_log, *run.logs])})", [resume_log, *run.logs])
    resumed = stash(run, workdir / "resumed")

    clear(run)
    started = time.monotonic()
    finish(run, workdir / f"{run.name}.uninterrupted.log", timeout)
    straight_seconds = time.monotonic() - started
    result = {"killed_at": killed_at, "resumed_from": resumed_from, "killed_s": first_seconds,
              "resumed_s": resume_seconds, "uninterrupted_s": straight_seconds,
              **compare_outputs(resumed, run.outputs)}
    if repeat and not result["identical"]:
        # Is the difference the resume's, or does the device differ from itself? A second
        # uninterrupted run tells them apart.
        straight = stash(run, workdir / "uninterrupted")
        clear(run)
        finish(run, workdir / f"{run.name}.repeated.log", timeout)
        result["repeat"] = compare_outputs(straight, run.outputs)
    return result


def compare_runs(first: TrainingRun, second: TrainingRun, workdir: Path, timeout: float = 600) -> dict:
    """Run ``second`` (``first`` has its outputs in place) and compare the two runs' outputs."""
    kept = stash(first, Path(workdir) / first.name)
    clear(second)
    started = time.monotonic()
    finish(second, Path(workdir) / f"{second.name}.log", timeout)
    seconds = time.monotonic() - started
    comparison = compare_outputs(kept, second.outputs)
    rates = {}
    for name, paths in (("first", kept), ("second", second.outputs)):
        rows = metric_rows(paths)[1:]  # the first logged window holds the warm-up
        rates[f"{name}_tokens_per_s"] = float(np.mean([float(r["tokens_per_s"]) for r in rows])) if rows else None
    return {"seconds": seconds, **rates, **comparison}


# --- the demo's training job through the workflow ---------------------------------------------------

def demo_config(repo: Path, device: str, precision: str, steps: int, checkpoint_every: int, gpus: int = 1) -> dict:
    """The demo config (config/config.yaml) with the GPU check's training settings."""
    import yaml

    config = yaml.safe_load((Path(repo) / "config" / "config.yaml").read_text(encoding="utf-8"))
    config["device"] = device
    config["training"].update(precision=precision, steps=steps, checkpoint_every=checkpoint_every, keep_every=0,
                              gpus=gpus)
    return config


def demo_runs(workdir: Path, device: str, precision: str = "bf16", steps: int = 300, checkpoint_every: int = 100,
              gpus: Sequence[int] = (1,), variant: str = "rnd", lang: str = "fr", cores: int | None = None,
              repo: Path = REPO, config_edit: Callable[[dict], None] | None = None) -> dict[int, TrainingRun]:
    """``train_bilingual`` of the demo's ``variant``/``lang`` run by Snakemake in ``workdir``, per GPU count.

    The working directory links the repository's ``resources/`` (the demo's relative paths), so
    its ``results/`` are its own. ``config_edit`` changes the config further (the tests shrink it).
    """
    import yaml

    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if not (workdir / "resources").exists():
        (workdir / "resources").symlink_to(Path(repo).resolve() / "resources")
    snakemake = Path(sys.executable).parent / "snakemake"
    runs = {}
    for count in gpus:
        config = demo_config(repo, device, precision, steps, checkpoint_every, count)
        if config_edit is not None:
            config_edit(config)
        path = workdir / f"config.gpus{count}.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        target = f"results/training/{variant}_{lang}.metrics.csv"
        checkpoints = workdir / config.get("checkpoint_dir", "results/checkpoints") / f"{variant}_{lang}"
        runs[count] = TrainingRun(
            name=f"train_bilingual-{variant}_{lang}-{count}gpu",
            # --nolock and --rerun-incomplete: a SIGKILLed Snakemake leaves its lock and an incomplete
            # output behind, which a user clears the same way after a crash.
            command=[str(snakemake), "--snakefile", str(Path(repo) / "workflow" / "Snakefile"), "--directory",
                     str(workdir), "--configfile", str(path), "--cores", str(cores or os.cpu_count() or 1),
                     "--nolock", "--rerun-incomplete", target],
            checkpoints=checkpoints,
            outputs=[workdir / target, workdir / f"results/models/{variant}_{lang}/{config['source']['lang']}",
                     workdir / f"results/models/{variant}_{lang}/{lang}"],
            env={"HF_HUB_OFFLINE": "1"},
            logs=[workdir / f"logs/train_bilingual/{variant}_{lang}.log"],
        )
    return runs


def prepare(run: TrainingRun, workdir: Path, timeout: float = 600) -> float:
    """Build everything ``run`` needs (Snakemake, stopping before ``train_bilingual``); the seconds it took."""
    started = time.monotonic()
    prerequisites = TrainingRun(f"{run.name}.inputs", [*run.command, "--omit-from", "train_bilingual"],
                                run.checkpoints, [], run.env)
    finish(prerequisites, Path(workdir) / "inputs.log", timeout)
    return time.monotonic() - started


# --- the device and the page ----------------------------------------------------------------------

def no_gpu_message(out: str | os.PathLike) -> str:
    import torch

    build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
    return (f"gpu-check: torch {torch.__version__} ({build}) sees no CUDA GPU on this machine, so nothing was "
            f"measured and {out} was left as it was. Run it on a machine with an NVIDIA GPU and a CUDA build of "
            f"torch {torch.__version__.split('+')[0]} in .venv (pytorch.org lists the install command).")


def describe_device() -> str:
    import torch

    count = torch.cuda.device_count()
    props = torch.cuda.get_device_properties(0)
    bf16 = "bf16 supported" if torch.cuda.is_bf16_supported() else "no bf16"
    return (f"{props.name} x {count} ({props.total_memory / GIB:.0f} GiB each), CUDA {torch.version.cuda}, "
            f"torch {torch.__version__}, {bf16}")


@dataclass
class Report:
    device: str
    throughput: list[dict] = field(default_factory=list)
    resume: dict | None = None
    ddp: dict | None = None
    ddp_skipped: str = ""
    inputs_s: float | None = None
    errors: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    settings: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.errors


def run_checks(device: str, description: str, workdir: Path, shapes: Sequence[Shape], runs: Mapping[int, TrainingRun],
               steps: int = 20, warmup: int = 2, sentences: int = 200_000, kill_after: int = 100,
               timeout: float = 600) -> Report:
    """Every check; a failing one is recorded in ``Report.errors`` and the others still run."""
    started = time.monotonic()
    workdir = Path(workdir)
    report = Report(device=description, settings={"steps": steps, "warmup": warmup, "kill_after": kill_after})
    for shape in shapes:
        try:
            row = measure_shape(shape, device, workdir / "throughput" / shape.name, steps, warmup, sentences)
            print(throughput_line(row), flush=True)
            report.throughput.append(row)
        except Exception as error:  # the other checks still tell what works
            report.errors[f"throughput, BERT-{shape.name}"] = describe_error(error)
            reset_peak_memory(device)
    one = runs[1]
    try:
        report.inputs_s = prepare(one, workdir, timeout)
        report.resume = kill_and_resume(one, workdir / "resume", kill_after, timeout)
        print(f"kill and resume: {'bit-identical' if report.resume['identical'] else 'differs'} "
              f"(largest weight difference {report.resume['max_weight_difference']:.3g})", flush=True)
    except Exception as error:
        report.errors["kill and resume"] = describe_error(error)
    if 2 not in runs:
        report.ddp_skipped = "one GPU visible"
    elif report.resume is None:
        report.ddp_skipped = "the one-GPU run it is compared with failed"
    else:
        try:
            report.ddp = compare_runs(one, runs[2], workdir / "ddp", timeout)
            print(f"two GPUs: largest loss difference {report.ddp['max_loss_difference']:.3g}", flush=True)
        except Exception as error:
            report.errors["two GPUs"] = describe_error(error)
    report.seconds = time.monotonic() - started
    return report


def describe_error(error: Exception) -> str:
    text = "".join(traceback.format_exception_only(type(error), error)).strip()
    for log in getattr(error, "logs", []):
        if Path(log).exists():
            # Progress bars rewrite one line with carriage returns: only its last state is kept.
            lines = [line.rsplit("\r", 1)[-1] for line in
                     Path(log).read_text(encoding="utf-8", errors="replace").splitlines()]
            text += f"\n\nThe end of {Path(log).name}:\n\n" + "\n".join(lines[-25:])
    return text


def _gib(value: float | None) -> str:
    return "" if value is None else f"{value / GIB:.1f}"


def render(report: Report, stamp) -> list[str]:
    """The page's lines: the stamp, the device, one section per check (or its error)."""
    from ramen.reports.results_pages import markdown_table

    verdict = "every check passed" if report.passed else "some checks failed (below)"
    lines = ["# GPU check", "", f"{stamp.sentence()} Do not edit: rerun the command to refresh this page.", "",
             f"Device: {report.device}. The checks took {report.seconds:.0f} s; {verdict}.", "",
             "## Training throughput at the paper's shapes", "",
             "The bilingual training loop (`ramen.training.trainer.train`, batches made in a background thread) on "
             "random weights and random token ids: every parameter trained, `precision: auto`, 32k-row foreign "
             f"table, median of {report.settings['steps']} updates after {report.settings['warmup']} warm-up ones. "
             "The bare `BertForMaskedLM` update trains the same encoder on as many sequences with its own loss "
             "(logits over the whole vocabulary at every position). Projected hours: the paper's updates (§3.1) at "
             "this rate, one GPU. The same figures as `python benchmarks/bench_train_step.py --no-cpu`.", ""]
    rows = [{"model": f"BERT-{row['model']}", "batch": f"{row['per_language']} + {row['per_language']} x "
             f"{row['seq_len']}", "s": f"{row['step_s']:.3f}", "tokens": f"{row['tokens_per_s']:,.0f}",
             "wait": f"{100 * row['data_wait']:.1f}", "peak": _gib(row["peak_memory"]),
             "updates": f"{row['updates']:,}", "hours": f"{row['hours']:.1f}", "bare": f"{row['bare_step_s']:.3f}",
             "bare_peak": _gib(row["bare_peak_memory"]), "ratio": f"{row['ratio']:.2f}"} for row in report.throughput]
    if rows:
        lines += markdown_table(("model", "batch", "s", "tokens", "wait", "peak", "updates", "hours", "bare",
                                 "bare_peak", "ratio"), rows,
                                ["model", "batch (en + fr x tokens)", "s/update", "tokens/s", "data wait (%)",
                                 "peak memory (GiB)", "paper updates", "projected hours", "bare BertForMaskedLM "
                                 "s/update", "bare peak memory (GiB)", "ours / bare"]) + [""]
    lines += _errors(report, "throughput")

    lines += ["## Kill and resume", "",
              "The demo config's `train_bilingual` (variant `rnd`, French) run by Snakemake with `device` and "
              "`training.precision` as below, killed with SIGKILL (Snakemake and the trainer) once a checkpoint at "
              f"update {report.settings['kill_after']} or later exists, resumed by rerunning Snakemake, then run "
              "again uninterrupted on the same inputs. Compared: the metrics file's losses and every tensor of the "
              "exported models, bit for bit.", ""]
    if report.inputs_s is not None:
        lines += [f"The job's inputs (text, vocabulary, encodings, head warm-up, initialisation) took "
                  f"{report.inputs_s:.0f} s.", ""]
    if report.resume:
        r = report.resume
        lines += markdown_table(("what", "value"), [
            {"what": "killed after the checkpoint of update", "value": r["killed_at"]},
            {"what": "resumed from update", "value": r["resumed_from"]},
            {"what": "losses logged", "value": r["logged_steps"]},
            {"what": "final losses", "value": ", ".join(f"{k} {v}" for k, v in r["final_losses"].items())},
            {"what": "tensors compared", "value": r["tensors"]},
            {"what": "largest weight difference", "value": f"{r['max_weight_difference']:.3g}"},
            {"what": "largest logged-loss difference", "value": f"{r['max_loss_difference']:.3g}"},
            {"what": "seconds: killed run, resume, uninterrupted run",
             "value": f"{r['killed_s']:.0f}, {r['resumed_s']:.0f}, {r['uninterrupted_s']:.0f}"},
        ]) + [""]
        if r["identical"]:
            lines += ["**Bit-identical**: the resumed run ends with exactly the weights and losses of the "
                      "uninterrupted one.", ""]
        else:
            lines += ["**Not bit-identical.** Every random choice of the trainer is drawn from (seed, update) and "
                      "the optimiser state is checkpointed, so on the CPU a resumed run is identical to an "
                      "uninterrupted one (tests/unit/test_train_resume.py). On a GPU some kernels (atomic adds in "
                      "the embedding backward pass, the reduction order cuBLAS picks) sum in an order that may "
                      "change from run to run."]
            repeat = r.get("repeat")
            if repeat is None:
                lines += [""]
            elif repeat["identical"]:
                lines += ["Here two uninterrupted runs were identical, so the difference comes from the resume: "
                          "a bug to report.", ""]
            else:
                within = r["max_weight_difference"] <= 10 * repeat["max_weight_difference"]
                lines += [f"Here two uninterrupted runs differ too (largest weight difference "
                          f"{repeat['max_weight_difference']:.3g}, logged loss {repeat['max_loss_difference']:.3g}): "
                          + ("that is the device's own run-to-run variation, and the resumed run differs by no more "
                             "than its order of magnitude." if within else
                             "the resumed run differs far more than that: a bug to report."), ""]
    lines += _errors(report, "kill and resume")

    lines += ["## Two GPUs (DDP)", ""]
    if report.ddp:
        d = report.ddp
        lines += ["The same job with `training.gpus: 2` (torchrun through `ramen.pipeline.launch`, each GPU half "
                  "of every batch) beside the one-GPU uninterrupted run. Not bit-identical by design: the "
                  "gradients are summed across GPUs in another order.", ""]
        lines += markdown_table(("what", "value"), [
            {"what": "tokens/s, one GPU", "value": _rate(d["first_tokens_per_s"])},
            {"what": "tokens/s, two GPUs", "value": _rate(d["second_tokens_per_s"])},
            {"what": "largest logged-loss difference", "value": f"{d['max_loss_difference']:.3g}"},
            {"what": "largest weight difference", "value": f"{d['max_weight_difference']:.3g}"},
            {"what": "final losses, two GPUs", "value": ", ".join(f"{k} {v}" for k, v in d["final_losses"].items())},
            {"what": "seconds", "value": f"{d['seconds']:.0f}"},
        ]) + [""]
    elif report.ddp_skipped:
        lines += [f"Not run: {report.ddp_skipped}.", ""]
    lines += _errors(report, "two GPUs")
    return lines


def _rate(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


def _errors(report: Report, prefix: str) -> list[str]:
    lines = []
    for name, text in report.errors.items():
        if name.startswith(prefix):
            lines += [f"**{name} failed:**", "", "```", *text.splitlines(), "```", ""]
    return lines


def write_page(report: Report, stamp, out: str | os.PathLike) -> Path:
    """Write the page atomically and give it its row in the results index beside it."""
    out = Path(out)
    write_lines(out, ["\n".join(render(report, stamp)).rstrip("\n")])
    index = out.parent / "README.md"
    if index.exists():
        row = (f"| [GPU check]({out.name}) | {'all' if report.passed else 'not all'} checks passed, "
               f"{stamp.date} |")
        lines = index.read_text(encoding="utf-8").rstrip("\n").splitlines()
        lines = [line for line in lines if f"]({out.name})" not in line] + [row]
        write_lines(index, ["\n".join(lines)])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ramen.reports.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/results/gpu.md")
    parser.add_argument("--workdir", type=Path, help="scratch directory (default: a temporary one, removed after)")
    parser.add_argument("--steps", type=int, default=20, help="timed updates per paper shape")
    parser.add_argument("--models", nargs="+", default=["base", "large"], choices=["base", "large"])
    parser.add_argument("--command", default="make gpu-check", help="the command to stamp on the page")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print(no_gpu_message(args.out), file=sys.stderr)
        return NO_GPU_EXIT
    from ramen.reports.results_pages import Stamp

    stamp = Stamp.now(args.command, REPO)
    with tempfile.TemporaryDirectory(prefix="ramen-gpu-check-") as tmp:
        workdir = args.workdir or Path(tmp)
        gpus = (1, 2) if torch.cuda.device_count() >= 2 else (1,)
        runs = demo_runs(workdir / "demo", "cuda", "bf16", gpus=gpus)
        shapes = [shape for shape in paper_shapes() if shape.name in args.models]
        report = run_checks("cuda", describe_device(), workdir, shapes, runs, steps=args.steps)
    print(write_page(report, stamp, args.out))
    return 0 if report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
