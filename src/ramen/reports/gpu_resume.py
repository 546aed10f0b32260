"""The GPU check's kill and resume (:mod:`ramen.reports.gpu_check`): a training job as a command,
killed with SIGKILL after a checkpoint, resumed, and compared bit for bit with an uninterrupted
run; and the demo's ``train_bilingual`` run by Snakemake as such a job."""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]


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
