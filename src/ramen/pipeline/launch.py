"""Run a training stage in this process or, for several GPUs on one node, under torchrun.

The workflow's scripts call :func:`launch`. With ``gpus: 1`` it calls the stage
function directly. With more, it writes the job (stage, arguments, settings) to
``<checkpoint_dir>/job.json`` and runs

    python -m torch.distributed.run --standalone --nproc_per_node N -m ramen.pipeline.launch JOB.json

whose N processes each run :func:`main` on the same job; ``ramen.training.trainer.train``
(the core's step loop) then joins the process group and splits every step's batch between them.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from ramen.io import atomic_path
from ramen.training.loops import TrainingInterrupted
from ramen.training.trainer import TrainSettings
from ramen.workflow import settings_from

log = logging.getLogger(__name__)

STAGES = {
    "train_bilingual": "ramen.pipeline.train:train_bilingual",
    "warmup_head": "ramen.pipeline.train:warmup_head",
}
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


def run_stage(job: Mapping) -> None:
    """Call a stage function with the job's arguments and validated settings."""
    if job["stage"] not in STAGES:
        raise ValueError(f"unknown stage '{job['stage']}'; known: {sorted(STAGES)}")
    module, _, name = STAGES[job["stage"]].partition(":")
    function = getattr(importlib.import_module(module), name)
    settings = settings_from(TrainSettings, dict(job["settings"]), job.get("setting", "training"))
    function(**job["arguments"], settings=settings)


def launch(stage: str, arguments: Mapping, settings: Mapping, setting: str = "training", threads: int = 0) -> None:
    """Run ``stage`` with ``settings.gpus`` processes; ``threads`` CPU threads are shared among them.

    ``arguments`` are the stage function's keyword arguments (JSON-serialisable,
    with a ``checkpoint_dir``); ``settings`` is the config section, validated here.
    """
    gpus = settings_from(TrainSettings, dict(settings), setting).gpus
    values = {**settings, "threads": max(1, threads // gpus) if threads else settings.get("threads", 0)}
    if gpus > 1:
        values["distributed"] = True
    job = {"stage": stage, "setting": setting, "arguments": dict(arguments), "settings": values}
    if gpus == 1:
        run_stage(job)
        return
    job_path = Path(arguments["checkpoint_dir"]) / "job.json"
    with atomic_path(job_path) as tmp:
        tmp.write_text(json.dumps(job, indent=2))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
               "-m", "ramen.pipeline.launch", str(job_path)]
    returncode = run_torchrun(command)
    if returncode != 0:
        raise TrainingInterrupted(f"torchrun exited with status {returncode}; the log above has each process's "
                                  f"error, and a rerun resumes from the checkpoints in {arguments['checkpoint_dir']}")


def _fileno(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def child_processes(pid: int) -> list[int]:
    """Process ids whose parent is ``pid`` (Linux /proc; empty elsewhere)."""
    children = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            # Fields after the command name, which may itself hold spaces and parentheses.
            parent = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid:
            children.append(int(entry.name))
    return children


def run_torchrun(command: list[str]) -> int:
    """Run torchrun, passing SIGTERM/SIGUSR1/SIGINT on to its training processes as SIGUSR1.

    The training processes answer SIGUSR1 by checkpointing and exiting.
    torchrun itself inherits SIGUSR1 ignored, so a signal that reaches every
    process (SLURM's --signal) leaves it waiting for them; torchrun answers
    SIGTERM by killing its workers after 30 seconds, which the checkpoint of a
    large model may not survive.
    """
    previous = {sig: signal.getsignal(sig) for sig in FORWARDED_SIGNALS}
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        # A session of its own: a terminal's Ctrl-C reaches this process only, which passes it on.
        process = subprocess.Popen(command, start_new_session=True, stdout=_fileno(sys.stdout),
                                   stderr=_fileno(sys.stderr))
    finally:
        signal.signal(signal.SIGUSR1, previous[signal.SIGUSR1])

    def forward(signum, frame):
        log.warning("received signal %d: asking the training processes to checkpoint and stop", signum)
        # torchrun starts each worker in a session of its own, so they are found by parent id.
        for pid in child_processes(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGUSR1)

    try:
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, forward)
    except ValueError:  # not in the main thread: signals stay with the caller
        pass
    try:
        return process.wait()
    finally:
        for sig, handler in previous.items():
            try:
                signal.signal(sig, handler)
            except ValueError:
                pass
        if process.poll() is None:  # left by an exception: torchrun stops its workers on SIGTERM
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def main(argv: list[str] | None = None) -> None:
    """One torchrun process: run the job file's stage."""
    parser = argparse.ArgumentParser(description="Run one process of a multi-GPU training job.")
    parser.add_argument("job", type=Path, help="job.json written by ramen.pipeline.launch.launch")
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format=f"%(asctime)s rank {rank} %(levelname)s %(name)s: %(message)s")
    try:
        run_stage(json.loads(args.job.read_text()))
    finally:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
