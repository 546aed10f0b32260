"""How ramen.pipeline.launch starts several training processes: torchrun on one node; on several,
srun starting one torchrun per node of a SLURM allocation; and the signals it passes on.

The commands are built by pure functions, checked here without SLURM or torchrun; a real two-node
run is tests/integration/test_slurm_multinode.py.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from ramen.errors import ConfigError
from ramen.pipeline import launch as launcher
from ramen.pipeline.launch import TORCHRUN, launch, launch_command, main, run_torchrun, srun_environment

JOB = Path("/shared/checkpoints/ramen_fr/job.json")
IN_SLURM = {"SLURM_JOB_ID": "4242", "PATH": "/usr/bin"}


def torchrun_options(arguments: list[str]):
    """torchrun's arguments as torchrun itself reads them (its own parser): what it will do, whatever
    the order they come in."""
    from torch.distributed.run import get_args_parser

    return get_args_parser().parse_args(arguments)


def srun_options(arguments: list[str]) -> dict[str, str | bool]:
    """srun's options (all written --name or --name=value) by name."""
    assert all(argument.startswith("--") for argument in arguments), arguments
    return {name: value or True for name, _, value in (argument[2:].partition("=") for argument in arguments)}


def runs_the_job(options, job: Path = JOB) -> bool:
    """Whether torchrun's processes each run this module on the job file."""
    return options.module and options.training_script == "ramen.pipeline.launch" and options.training_script_args == [
        str(job)]


def test_one_node_runs_torchrun_standalone():
    command = launch_command(JOB, 4, 1, {})
    assert tuple(command[:len(TORCHRUN)]) == TORCHRUN
    options = torchrun_options(command[len(TORCHRUN):])
    assert options.standalone and options.nproc_per_node == "4" and options.nnodes == "1:1"
    assert runs_the_job(options)


def test_several_nodes_run_one_torchrun_per_node_under_srun_meeting_at_the_rendezvous():
    command = launch_command(JOB, 4, 3, IN_SLURM, endpoint="gpu-node-07:29411", cpus_per_node=16)
    assert command[0] == "srun"
    agent = command.index(sys.executable)
    # One task per node, all of them, each with the node's CPUs; one failing stops the rest; inside
    # the step Snakemake's job already runs in.
    assert srun_options(command[1:agent]) == {"overlap": True, "nodes": "3", "ntasks": "3", "ntasks-per-node": "1",
                                               "cpus-per-task": "16", "kill-on-bad-exit": "1"}
    # Each task is ramen's torchrun wrapper (it relays signals), given torchrun's arguments.
    assert command[agent:agent + 4] == [sys.executable, "-m", "ramen.pipeline.launch", "--torchrun"]
    options = torchrun_options(command[agent + 4:])
    assert not options.standalone and options.nnodes == "3" and options.nproc_per_node == "4"
    assert (options.rdzv_backend, options.rdzv_endpoint, options.rdzv_id) == ("c10d", "gpu-node-07:29411", "4242")
    assert runs_the_job(options)


def test_srun_leaves_the_cpus_to_the_allocation_when_no_thread_count_is_given():
    command = launch_command(JOB, 1, 2, IN_SLURM, endpoint="node1:29500")
    assert not [argument for argument in command if argument.startswith("--cpus-per-task")]


@pytest.mark.parametrize("setting", ["training", "head_warmup"])
def test_several_nodes_outside_slurm_name_the_setting(setting):
    with pytest.raises(ConfigError, match=rf"'{setting}\.nodes'.*outside SLURM.*profiles/slurm") as error:
        launch_command(JOB, 1, 2, {"PATH": "/usr/bin"}, endpoint="here:29500", setting=setting)
    assert error.value.setting == f"{setting}.nodes"


def test_launch_refuses_several_nodes_outside_slurm_before_writing_the_job(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    started = []
    monkeypatch.setattr(launcher, "run_stage", started.append)
    monkeypatch.setattr(launcher, "run_torchrun", lambda *args, **kwargs: started.append(args))
    with pytest.raises(ConfigError, match="'training.nodes'"):
        launch("train_bilingual", {"checkpoint_dir": str(tmp_path / "checkpoints")},
               {"steps": 4, "batch_size": 4, "nodes": 2}, threads=2)
    assert started == [] and not (tmp_path / "checkpoints").exists()


def test_launch_starts_srun_on_the_allocation(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_NTASKS", "1")  # the enclosing one-task job step's
    calls = []
    monkeypatch.setattr(launcher, "run_torchrun", lambda command, **options: calls.append((command, options)) or 0)
    launch("train_bilingual", {"checkpoint_dir": str(tmp_path)}, {"steps": 4, "batch_size": 4, "nodes": 2}, threads=3)
    ((command, options),) = calls
    assert command[:3] == ["srun", "--overlap", "--nodes=2"] and "--cpus-per-task=3" in command
    assert "--rdzv_id=77" in command and "--nproc_per_node=1" in command
    assert options["relays_signals"] is True
    assert options["env"]["SLURM_JOB_ID"] == "77" and "SLURM_NTASKS" not in options["env"]
    job = (tmp_path / "job.json").read_text()
    assert '"distributed": true' in job and '"threads": 3' in job


def test_srun_gets_the_job_but_not_the_enclosing_steps_options():
    environ = {"SLURM_JOB_ID": "9", "SLURM_JOBID": "9", "SLURM_CONF": "/etc/slurm/slurm.conf",
               "SLURM_NTASKS": "1", "SLURM_NNODES": "1", "SLURM_CPUS_PER_TASK": "8", "SLURM_STEP_ID": "0",
               "SLURM_JOB_NODELIST": "node1", "SRUN_CPUS_PER_TASK": "8", "SBATCH_PARTITION": "gpu",
               "PATH": "/usr/bin", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert srun_environment(environ) == {
        "SLURM_JOB_ID": "9", "SLURM_JOBID": "9", "SLURM_CONF": "/etc/slurm/slurm.conf",
        "PATH": "/usr/bin", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "0,1"}


def test_a_node_agent_runs_torchrun_with_the_given_arguments(monkeypatch):
    commands = []
    monkeypatch.setattr(launcher, "run_torchrun", lambda command: commands.append(command) or 3)
    arguments = ["--nnodes=2", "--nproc_per_node=1", "--rdzv_endpoint=h:1", "-m", "ramen.pipeline.launch", "j.json"]
    with pytest.raises(SystemExit) as exit_status:
        main(["--torchrun", *arguments])
    assert exit_status.value.code == 3
    assert commands == [[*TORCHRUN, *arguments]]


def test_without_a_job_or_torchrun_arguments_the_module_says_what_it_needs(capsys):
    with pytest.raises(SystemExit):
        main([])
    assert "give a job file, or --torchrun" in capsys.readouterr().err


# Reports the SIGUSR1 disposition it inherited, then waits for SIGUSR1: exit status 5 once it has it.
CHILD = """
import signal, sys, time
from pathlib import Path
ignored = signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN
signal.signal(signal.SIGUSR1, lambda *_: sys.exit(5))
Path(sys.argv[1]).write_text("ignored" if ignored else "default")
time.sleep(60)
"""


@pytest.mark.slow  # starts processes
@pytest.mark.parametrize("relays_signals", [True, False])
def test_sigterm_reaches_the_training_processes_as_sigusr1(tmp_path, relays_signals):
    """srun relays signals itself: it gets SIGUSR1 directly. torchrun does not: its children get it."""
    ready = tmp_path / "ready"
    child = [sys.executable, "-c", CHILD, str(ready)]
    # torchrun stand-in: a parent whose child is the training process, as torchrun's workers are.
    parent = [sys.executable, "-c", f"import subprocess, sys; sys.exit(subprocess.call({child!r}))"]

    def terminate_once_ready():
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    handlers = {sig: signal.getsignal(sig) for sig in launcher.FORWARDED_SIGNALS}
    sender = threading.Thread(target=terminate_once_ready)
    sender.start()
    try:
        returncode = run_torchrun(child if relays_signals else parent, relays_signals=relays_signals)
    finally:
        sender.join()
    assert returncode == 5
    # Started with SIGUSR1 ignored (torchrun must outlive a SIGUSR1 sent to every process of a job).
    assert ready.read_text() == "ignored"
    assert {sig: signal.getsignal(sig) for sig in launcher.FORWARDED_SIGNALS} == handlers
