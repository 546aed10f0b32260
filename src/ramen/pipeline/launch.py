"""Run a training stage in this process or, for several GPUs, under torchrun.

The workflow's scripts call :func:`launch`. With one process (``gpus: 1``, ``nodes: 1``) it calls
the stage function directly. With more, it writes the job (stage, arguments, settings) to
``<checkpoint_dir>/job.json`` and runs torchrun on it. On one node:

    python -m torch.distributed.run --standalone --nproc_per_node G -m ramen.pipeline.launch JOB.json

On several, inside a SLURM allocation of that many nodes, srun starts one torchrun per node, and
they meet at a rendezvous on this host (:func:`launch_command`):

    srun --overlap --nodes N --ntasks N --ntasks-per-node 1 ... python -m ramen.pipeline.launch --torchrun \\
        --nnodes N --nproc_per_node G --rdzv_backend c10d --rdzv_endpoint HOST:PORT --rdzv_id SLURM_JOB_ID \\
        -m ramen.pipeline.launch JOB.json

The G × N processes each run :func:`main` on the same job; ``ramen.training.trainer.train``
(the core's step loop) then joins the process group and splits every step's batch between them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ramen.errors import ConfigError
from ramen.io import atomic_path
from ramen.registry import Entry, FunctionContract, Registry
from ramen.training.loops import TrainingInterrupted
from ramen.training.trainer import TrainSettings
from ramen.glue import settings_from

log = logging.getLogger(__name__)



class Stage(Protocol):
    """A training stage as :func:`run_stage` calls it: the job's arguments and the validated settings."""

    def __call__(self, *, settings: TrainSettings, **arguments: Any) -> None: ...


@dataclass(frozen=True)
class StageEntry(Entry):
    contract = FunctionContract(Stage)

    function: str  # "module:name"

    @property
    def target(self) -> str:
        return self.function


STAGES: Registry[StageEntry] = Registry("training stage", "stage", {
    "train_bilingual": StageEntry("ramen.pipeline.train:train_bilingual"),
    "warmup_head": StageEntry("ramen.pipeline.train:warmup_head"),
})
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
TORCHRUN = (sys.executable, "-m", "torch.distributed.run")
# What srun keeps of its caller's SLURM variables. Inside a job step (the SLURM executor runs each
# rule under `srun -n1`) the others describe that one-node step, and srun would read them as options.
SRUN_KEPT_VARIABLES = frozenset({"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CONF", "SLURM_CLUSTER_NAME",
                                 "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST"})


def run_stage(job: Mapping) -> None:
    """Call a stage function with the job's arguments and validated settings."""
    # A job file names its stage, not the config: an unknown one is a bug, not a ConfigError.
    if job["stage"] not in STAGES:
        raise ValueError(f"unknown stage '{job['stage']}'; known: {sorted(STAGES)}")
    function = STAGES[job["stage"]].load()
    settings = settings_from(TrainSettings, dict(job["settings"]), job.get("setting", "training"))
    function(**job["arguments"], settings=settings)


def launch(stage: str, arguments: Mapping, settings: Mapping, setting: str = "training", threads: int = 0) -> None:
    """Run ``stage`` with ``settings.gpus`` processes on each of ``settings.nodes`` nodes; ``threads``
    CPU threads per node are shared among its processes.

    ``arguments`` are the stage function's keyword arguments (JSON-serialisable,
    with a ``checkpoint_dir``); ``settings`` is the config section, validated here.
    """
    validated = settings_from(TrainSettings, dict(settings), setting)
    gpus, nodes = validated.gpus, validated.nodes
    values = {**settings, "threads": max(1, threads // gpus) if threads else settings.get("threads", 0)}
    if validated.processes > 1:
        values["distributed"] = True
    job = {"stage": stage, "setting": setting, "arguments": dict(arguments), "settings": values}
    if validated.processes == 1:
        run_stage(job)
        return
    job_path = Path(arguments["checkpoint_dir"]) / "job.json"
    # The rendezvous is hosted where its port was found free: here, on the allocation's first node.
    endpoint = f"{socket.gethostname()}:{free_port()}" if nodes > 1 else None
    command = launch_command(job_path, gpus, nodes, os.environ, endpoint=endpoint, cpus_per_node=threads,
                             setting=setting)
    with atomic_path(job_path) as tmp:
        tmp.write_text(json.dumps(job, indent=2))
    if nodes == 1:
        returncode = run_torchrun(command)
    else:
        log.info("starting torchrun on %d nodes: %s", nodes, " ".join(command))
        returncode = run_torchrun(command, relays_signals=True, env=srun_environment(os.environ))
    if returncode != 0:
        runner = "torchrun" if nodes == 1 else f"srun (torchrun on {nodes} nodes)"
        raise TrainingInterrupted(f"{runner} exited with status {returncode}; the log above has each process's "
                                  f"error, and a rerun resumes from the checkpoints in {arguments['checkpoint_dir']}")


def check_nodes(nodes: int, environ: Mapping[str, str], setting: str = "training") -> None:
    """Several nodes need a SLURM allocation of them to start torchrun on each (srun)."""
    if nodes > 1 and "SLURM_JOB_ID" not in environ:
        raise ConfigError(f"{setting}.nodes", f"{nodes} nodes, but this job runs outside SLURM (no SLURM_JOB_ID), "
                          "where only one node's GPUs can be used",
                          f"run the workflow with --profile profiles/slurm, which asks for the nodes, or set "
                          f"{setting}.nodes: 1 and {setting}.gpus to this machine's GPUs")


def torchrun_arguments(job_path: Path, gpus: int, nodes: int = 1, endpoint: str | None = None,
                       rendezvous_id: str | None = None) -> list[str]:
    """torchrun's arguments for one node's ``gpus`` processes of the job: alone (``--standalone``),
    or one of ``nodes`` torchruns meeting at ``endpoint`` (host:port) under ``rendezvous_id``."""
    if nodes == 1:
        placement = ["--standalone", f"--nproc_per_node={gpus}"]
    else:
        placement = [f"--nnodes={nodes}", f"--nproc_per_node={gpus}", "--rdzv_backend=c10d",
                     f"--rdzv_endpoint={endpoint}", f"--rdzv_id={rendezvous_id}"]
    return [*placement, "-m", "ramen.pipeline.launch", str(job_path)]


def launch_command(job_path: Path, gpus: int, nodes: int, environ: Mapping[str, str], endpoint: str | None = None,
                   cpus_per_node: int = 0, setting: str = "training") -> list[str]:
    """The command that runs the job's ``gpus`` × ``nodes`` processes: torchrun on one node; on several,
    srun starting one torchrun per node of the SLURM allocation (``environ`` names it), which meet
    at ``endpoint``; ``cpus_per_node``: the CPUs each node's torchrun and its processes get."""
    if nodes == 1:
        return [*TORCHRUN, *torchrun_arguments(job_path, gpus)]
    check_nodes(nodes, environ, setting)
    # --overlap: the Snakemake step this runs in already holds the first node's CPUs and GPUs.
    # --kill-on-bad-exit: a node that fails stops the others instead of leaving them waiting on it.
    srun = ["srun", "--overlap", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
            *([f"--cpus-per-task={cpus_per_node}"] if cpus_per_node else []), "--kill-on-bad-exit=1"]
    node = torchrun_arguments(job_path, gpus, nodes, endpoint, environ["SLURM_JOB_ID"])
    return [*srun, sys.executable, "-m", "ramen.pipeline.launch", "--torchrun", *node]


def srun_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the enclosing job step's SLURM settings (see SRUN_KEPT_VARIABLES)."""
    return {name: value for name, value in environ.items()
            if not name.startswith(("SLURM_", "SRUN_", "SBATCH_")) or name in SRUN_KEPT_VARIABLES}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


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


def run_torchrun(command: list[str], relays_signals: bool = False, env: Mapping[str, str] | None = None) -> int:
    """Run torchrun, passing SIGTERM/SIGUSR1/SIGINT on to its training processes as SIGUSR1.

    The training processes answer SIGUSR1 by checkpointing and exiting.
    torchrun itself inherits SIGUSR1 ignored, so a signal that reaches every
    process (SLURM's --signal) leaves it waiting for them; torchrun answers
    SIGTERM by killing its workers after 30 seconds, which the checkpoint of a
    large model may not survive. ``relays_signals``: ``command`` passes signals on
    to the training processes itself (srun, to its tasks on every node), so it
    gets the SIGUSR1.
    """
    previous = {sig: signal.getsignal(sig) for sig in FORWARDED_SIGNALS}
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        # A session of its own: a terminal's Ctrl-C reaches this process only, which passes it on.
        process = subprocess.Popen(command, start_new_session=True, stdout=_fileno(sys.stdout),
                                   stderr=_fileno(sys.stderr), env=env)
    finally:
        signal.signal(signal.SIGUSR1, previous[signal.SIGUSR1])

    def forward(signum, frame):
        log.warning("received signal %d: asking the training processes to checkpoint and stop", signum)
        # torchrun starts each worker in a session of its own, so they are found by parent id.
        for pid in [process.pid] if relays_signals else child_processes(process.pid):
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
    """One torchrun process: run the job file's stage. With ``--torchrun``: one node's torchrun of
    a multi-node job, run as :func:`launch` runs its own (srun starts one on each node)."""
    parser = argparse.ArgumentParser(description="Run one process of a multi-GPU training job.")
    parser.add_argument("job", type=Path, nargs="?", help="job.json written by ramen.pipeline.launch.launch")
    parser.add_argument("--torchrun", nargs=argparse.REMAINDER, metavar="ARGUMENTS",
                        help="run torchrun with these arguments, ignoring SIGUSR1 and passing SIGTERM, SIGUSR1 "
                             "and SIGINT on to its processes as SIGUSR1")
    args = parser.parse_args(argv)
    if args.torchrun is not None:
        sys.exit(run_torchrun([*TORCHRUN, *args.torchrun]))
    if args.job is None:
        parser.error("give a job file, or --torchrun with torchrun's arguments")
    rank = int(os.environ.get("RANK", "0"))
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format=f"%(asctime)s rank {rank} %(levelname)s %(name)s: %(message)s")
    # Every process says where it runs, so that the log of a multi-node job shows its placement.
    log.setLevel(logging.INFO)
    log.info("process %d of %s on node %s (local rank %s)", rank, os.environ.get("WORLD_SIZE", "1"),
             os.environ.get("SLURMD_NODENAME") or socket.gethostname(), os.environ.get("LOCAL_RANK", "0"))
    try:
        run_stage(json.loads(args.job.read_text()))
    finally:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
