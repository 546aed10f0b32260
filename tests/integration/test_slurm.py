"""The tiny integration DAG through a real SLURM cluster on this machine, compared with a local run.

tools/slurm/start.sh installs and starts the cluster (root needed); the workflow runs with
``--profile profiles/slurm --profile profiles/slurm-local-test``. Outside CI the cluster tests
skip when SLURM cannot be set up here; with CI=true they fail instead.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import yaml

from test_workflow import (CLUSTER_OVERLAY, REPO, SNAKEMAKE, SPINE_TARGET, copy_of_spine, make_workdir,
                           overlay_threads, planned_jobs)

pytestmark = pytest.mark.integration

SCRIPTS = REPO / "tools" / "slurm"
PROFILE = REPO / "profiles" / "slurm"
OVERLAY = CLUSTER_OVERLAY
JOBCOMP_LOG = Path("/var/log/slurm/jobcomp.log")  # JobCompLoc in tools/slurm/start.sh
NODES = ("localhost", "localhost2")  # the test cluster's nodes (tools/slurm/common.sh)
TARGET = SPINE_TARGET  # one variant's XNLI result: every rule of the spine, its GPU rules included
TARGET_GPU_RULES = {"warmup_head", "train_bilingual", "finetune_xnli", "evaluate_xnli"}
GPU_RULES = TARGET_GPU_RULES | {"ud_zero_shot"}
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
RUN_TIMEOUT_S = 3600


def skip_outside_ci(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason} (CI is set: the SLURM test must run, not skip)")
    pytest.skip(reason)


def node_accepts_jobs() -> bool:
    """Every node of the test cluster accepts jobs."""
    if shutil.which("sinfo") is None:
        return False
    try:
        result = subprocess.run(["sinfo", "-h", "-N", "-n", ",".join(NODES), "-o", "%N %T"],
                                capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return False
    states = dict(line.split() for line in result.stdout.splitlines() if line.strip())
    return result.returncode == 0 and set(states) == set(NODES) and \
        set(states.values()) <= {"idle", "mixed", "allocated", "completing"}


# Test sessions that use the cluster at the same time (pytest -n 2 runs two) count themselves
# here: the last one out stops the cluster, if a test started it.
CLUSTER_USERS = Path("/tmp/ramen-test-slurm.users")


@contextlib.contextmanager
def cluster_users():
    """The users record {"users": n, "started": bool}, read and rewritten under an exclusive lock."""
    with open(CLUSTER_USERS.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = json.loads(CLUSTER_USERS.read_text()) if CLUSTER_USERS.exists() else {"users": 0, "started": False}
        yield record
        CLUSTER_USERS.write_text(json.dumps(record))


# Session-wide: once SLURM is installed, every Snakemake start asks the controller for its
# configuration (the SLURM executor plugin does, whichever executor runs), and with the controller
# stopped that takes 9 s; so the cluster stays up until the test session ends.
@pytest.fixture(scope="session")
def slurm_cluster():
    if os.geteuid() != 0:
        skip_outside_ci("needs root: tools/slurm/start.sh installs slurm-wlm and munge and starts their daemons")
    with cluster_users() as record:
        if record["users"] and not node_accepts_jobs():  # left by a session that ended abruptly
            record.update(users=0, started=False)
        first = record["users"] == 0
        already_running = node_accepts_jobs() if first else not record["started"]
        try:
            started = subprocess.run([str(SCRIPTS / "start.sh")], capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired:
            pytest.fail("tools/slurm/start.sh did not finish within 30 minutes")
        if started.returncode != 0 and first and not already_running:  # whichever daemons did start
            subprocess.run([str(SCRIPTS / "stop.sh")], capture_output=True, timeout=300)
        if started.returncode == 77:
            skip_outside_ci(f"SLURM cannot be set up here: {started.stderr.strip()[-2000:]}")
        assert started.returncode == 0, (started.stdout + started.stderr)[-5000:]
        record.update(users=record["users"] + 1, started=not already_running)
    yield
    with cluster_users() as record:
        record["users"] -= 1
        stop = record["users"] == 0 and record["started"]  # a cluster someone else started stays
    if stop:
        stopped = subprocess.run([str(SCRIPTS / "stop.sh")], capture_output=True, text=True, timeout=300)
        assert stopped.returncode == 0, stopped.stderr


def snakemake(workdir: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Runs Snakemake in workdir (the SLURM plugin keeps its logs under the current directory);
    ``env`` adds to the environment (offline for the hub unless it says otherwise)."""
    if "--configfile" not in args:
        # After the targets (it takes several values), before a "--" that ends the options.
        end = args.index("--") if "--" in args else len(args)
        args = (*args[:end], "--configfile", str(workdir / "config.yaml"), *args[end:])
    process = subprocess.Popen(
        [str(SNAKEMAKE), "--snakefile", str(REPO / "workflow" / "Snakefile"), "--directory", str(workdir), *args],
        cwd=workdir, env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)  # Snakemake then cancels its SLURM jobs
        try:
            output, _ = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        pytest.fail(f"snakemake {' '.join(args)} ran past {RUN_TIMEOUT_S} s:\n{output[-5000:]}")
    assert process.returncode == 0, output[-8000:]
    return output


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """TARGET run locally at the SLURM run's threads: the session's shared spine run."""
    workdir = copy_of_spine(tmp_path_factory, "local")
    return workdir, (workdir / "spine.log").read_text()


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster, tmp_path_factory):
    workdir = make_workdir(tmp_path_factory.mktemp("slurm"))
    output = snakemake(workdir, TARGET, "--profile", str(PROFILE), "--profile", str(OVERLAY))
    return workdir, output


def planned_resources(workdir: Path, *args: str) -> dict[str, dict[str, str]]:
    """Rule -> the resources a dry run gives its jobs."""
    resources, rule = {}, None
    for line in snakemake(workdir, "-n", *args).splitlines():
        header = re.match(r"^(?:local)?rule (\w+):$", line)
        if header:
            rule = header.group(1)
        elif rule and line.strip().startswith("resources: "):
            pairs = line.strip().removeprefix("resources: ").split(", ")
            resources[rule] = dict(pair.split("=", 1) for pair in pairs)
    return resources


def test_the_profile_sends_exactly_the_gpu_rules_to_the_gpu_partition(tmp_path_factory):
    workdir = make_workdir(tmp_path_factory.mktemp("dry_run"))
    plain = planned_resources(workdir, "--cores", "2")
    cluster = planned_resources(workdir, "--profile", str(PROFILE), "--cores", "64")
    test = planned_resources(workdir, "--profile", str(PROFILE), "--profile", str(OVERLAY))
    cpu_partition = yaml.safe_load((PROFILE / "config.yaml").read_text())["default-resources"]["slurm_partition"]
    gpu_rules = {rule for rule, res in plain.items() if int(res.get("gpu", 0)) > 0}
    assert GPU_RULES <= gpu_rules
    assert set(cluster) == set(plain)
    for rule, res in cluster.items():
        assert (res["slurm_partition"] != cpu_partition) == (rule in gpu_rules), (rule, res)
        assert res.get("gpu", "0") == plain[rule].get("gpu", "0"), (rule, res)
        assert {"runtime", "mem_mb", "cpus_per_task"} <= set(res), (rule, res)
    for rule, res in test.items():  # the test node has no GPU
        assert res["slurm_partition"] == "debug" and res.get("gpu", "0") == "0", (rule, res)


def executed_jobs(output: str) -> dict[int, tuple[str, bool]]:
    """Snakemake job id -> (rule, ran locally) from a run's log."""
    jobs, current = {}, None
    for line in output.splitlines():
        header = re.match(r"^(local)?rule (\w+):$", line)
        if header:
            current = (header.group(2), header.group(1) is not None)
            continue
        jobid = re.match(r"^\s+jobid: (\d+)$", line)
        if jobid and current:
            jobs[int(jobid.group(1))] = current
            current = None
    return jobs


def slurm_submissions(output: str) -> dict[int, tuple[str, Path]]:
    """Snakemake job id -> (SLURM job id, SLURM log file)."""
    pattern = r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (.+?)\)\.$"
    return {int(job): (slurm_id, Path(log)) for job, slurm_id, log in re.findall(pattern, output, re.MULTILINE)}


def slurm_records() -> dict[str, dict[str, str]]:
    """SLURM job id -> the fields of its jobcomp/filetxt line (one line per finished job)."""
    records = {}
    for line in JOBCOMP_LOG.read_text().splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "JobId" in fields:
            records[fields["JobId"]] = fields
    return records


def test_every_cluster_job_went_through_sbatch(local_run, slurm_run):
    workdir, output = slurm_run
    jobs = executed_jobs(output)
    submitted = slurm_submissions(output)
    remote = {job for job, (_, local) in jobs.items() if not local}
    assert remote, output[-3000:]
    assert remote == set(submitted), f"not submitted: {sorted(jobs[j][0] for j in remote - set(submitted))}"
    assert Counter(rule for rule, _ in jobs.values()) == Counter(planned_jobs(local_run[1]))
    assert TARGET_GPU_RULES <= {jobs[job][0] for job in submitted}

    records = slurm_records()
    for job, (slurm_id, log) in submitted.items():
        rule = jobs[job][0]
        record = records.get(slurm_id)
        assert record is not None, f"{rule}: SLURM job {slurm_id} is not in {JOBCOMP_LOG}"
        assert record["WorkDir"] == str(workdir), (rule, record)
        assert record["Partition"] == "debug", (rule, record)
        assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), (rule, record)
        assert log.is_file() and f"rule_{rule}" in log.parts, (rule, log)


# Outputs whose bytes may differ between a local and a cluster run: training logs its speed, and
# what is trained, and measured on it, may be computed with other thread counts.
RUN_DEPENDENT = re.compile(r"(\.safetensors|updates\.pt"
                           r"|metrics\.csv|nli_classifier\.json|^results/init/.*\.json|^results/checkpoints/.*/state\.json|^results/xnli/[^/]+\.tsv)$")
# Deterministic outputs the comparison must cover.
REPRODUCIBLE = {"results/text/en/train.txt", "results/text/fr/train.txt", "results/parallel/en-fr/train.fr.txt",
                "results/vocab/fr/codes", "results/vocab/fr/tokenizer/tokenizer.json", "results/encoded/en/ids.bin",
                "results/encoded/fr/ids.bin", "results/align/en-fr/ids.en", "results/align/en-fr/ids.fr",
                "results/models/ramen_fr/fr/tokenizer.json", "results/models/ramen_fr/fr/config.json",
                # eflomal's links: alignment.seed fixes them, whatever the number of threads.
                "results/align/en-fr/links.forward", "results/align/en-fr/links.reverse",
                "results/align/en-fr/alpha.npz", "results/align/en-fr/alpha.stats.json"}
# What a run-dependent table must still agree on: which rows it has (XNLI predictions: which pairs).
MEASURED_COLUMNS = {"accuracy", "correct", "selected", "train_loss", "predicted"}


# Checkpoints sit under a hash of the settings and starting weights (ramen.training.trainer.run_fingerprint),
# and ramen's starting weights differ between runs.
RUN_FINGERPRINT = re.compile(r"^(results/checkpoints/[^/]+/)[0-9a-f]{12}/")


def result_files(workdir: Path) -> dict[str, Path]:
    """Files under results/ by name (run fingerprints as <run>), minus Snakemake's timestamps, its
    per-job benchmark records and TensorBoard event logs (what they hold is the wall-clock time,
    the memory used and the process id)."""
    return {RUN_FINGERPRINT.sub(r"\1<run>/", path.relative_to(workdir).as_posix()): path
            for path in (workdir / "results").rglob("*")
            if path.is_file() and path.name != ".snakemake_timestamp"
            and path.relative_to(workdir / "results").parts[0] != "benchmarks"
            and not path.name.startswith("events.out.tfevents.")}


def structure(path: Path):
    """The shape of a run-dependent output: what must match although its numbers do not."""
    if path.suffix == ".safetensors":  # tensor names, dtypes and shapes, from the JSON header
        header = json.loads(path.read_bytes()[8:8 + int.from_bytes(path.read_bytes()[:8], "little")])
        return {name: (entry["dtype"], entry["shape"]) for name, entry in header.items() if name != "__metadata__"}
    if path.suffix == ".json":
        return sorted(json.loads(path.read_text()))
    if path.suffix == ".csv":  # training metrics: the same steps and learning rates, finite losses
        with open(path, newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert all(np.isfinite(float(v)) for row in rows for k, v in row.items() if k.startswith("loss_")), path
        return [(row["step"], row["lr"]) for row in rows]
    if path.suffix == ".tsv":
        with open(path, newline="") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        return [{k: v for k, v in row.items() if k not in MEASURED_COLUMNS} for row in rows]
    return path.stat().st_size > 0


def test_outputs_match_a_local_run(local_run, slurm_run):
    local, cluster = result_files(local_run[0]), result_files(slurm_run[0])
    assert set(cluster) == set(local)
    run_dependent = {name for name in local if RUN_DEPENDENT.search(name)}
    reproducible = set(local) - run_dependent
    assert REPRODUCIBLE <= reproducible
    assert [name for name in sorted(reproducible) if local[name].read_bytes() != cluster[name].read_bytes()] == []
    assert [name for name in sorted(run_dependent) if structure(local[name]) != structure(cluster[name])] == []


# --- time limits and preemption -------------------------------------------------------------------

# The rnd variant's initial table is seeded, so with the same upstream files two trainings of it
# can be compared number for number.
PREEMPTED_TARGET = "results/models/rnd_fr/fr"
PREEMPTED_LOG = "logs/train_bilingual/rnd_fr.log"
# SLURM's shortest time limit is a minute. slurmctld checks time limits every 30 s and sends a
# --signal=USR1@N warning at the first check less than N + 30 s before the limit: with N = 5,
# 25 to 55 s after the job starts, once Snakemake and the trainer are up (10 to 20 s), and
# early enough to stop before the limit.
SIGNAL_BEFORE_LIMIT_S = 5
# Updates that last past that on one thread (about 0.3 s each on a 2-CPU machine), so the
# warning always comes mid-training. The signal itself saves the checkpoint the retry resumes
# from; the workflow tests' keep_every=2 would keep 150 checkpoints of 150 MB each per run.
PREEMPTED_TRAINING = {"steps": 300, "batch_size": 4, "seq_len": 16, "warmup_steps": 20, "log_every": 10,
                      "checkpoint_every": 100, "keep_every": 0}


def preemption_profile(directory: Path) -> Path:
    """A third profile: the first attempt at training gets one minute and the warning signal;
    its retry gets ten, so exactly one interruption happens whatever the machine's speed."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump({
        "retries": 1,
        "set-resources": {"train_bilingual": {
            "gpu": 0,
            "runtime": "1 if attempt == 1 else 10",
            "slurm_extra": f"--signal=USR1@{SIGNAL_BEFORE_LIMIT_S}",
        }},
    }))
    return directory


@pytest.fixture(scope="module")
def training_inputs(local_run, tmp_path_factory):
    """The local run's files plus the rnd variant's initial table, with longer training.

    Both trainings below start from copies of these, so they differ only in how they ran
    (warmup_head's MLM head is drawn afresh in every run)."""
    workdir = tmp_path_factory.mktemp("training_inputs") / "run"
    shutil.copytree(local_run[0], workdir, symlinks=True, ignore=shutil.ignore_patterns("checkpoints"))
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["training"].update(PREEMPTED_TRAINING)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    output = snakemake(workdir, PREEMPTED_TARGET, "--omit-from", "train_bilingual", "--cores", "2",
                       "--set-threads", *overlay_threads())
    assert "train_bilingual" not in {rule for rule, _ in executed_jobs(output).values()}, output[-3000:]
    return workdir


def copy_run(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)  # copies keep the mtimes: nothing upstream reruns
    return target


def metric_rows(path: Path) -> list[dict[str, str]]:
    """Update, learning rate and losses of each metrics row (the timing columns vary)."""
    with open(path, newline="") as handle:
        return [{k: v for k, v in row.items() if k in {"step", "lr"} or k.startswith("loss_")}
                for row in csv.DictReader(handle)]


def test_a_training_job_stopped_at_its_time_limit_resumes_to_the_uninterrupted_result(
        slurm_cluster, training_inputs, tmp_path_factory):
    from safetensors.torch import load_file
    import torch

    base = tmp_path_factory.mktemp("preempted")
    local = copy_run(training_inputs, base / "local")
    cluster = copy_run(training_inputs, base / "cluster")
    # The uninterrupted reference trains beside the cluster job: one thread each, and the
    # thread count, not the machine's load, decides the numbers.
    with ThreadPoolExecutor(max_workers=1) as pool:
        reference = pool.submit(snakemake, local, PREEMPTED_TARGET, "--cores", "1", "--set-threads",
                                *overlay_threads())
        output = snakemake(cluster, PREEMPTED_TARGET, "--profile", str(PROFILE), "--profile", str(OVERLAY),
                           "--profile", str(preemption_profile(base / "profile")))
        local_output = reference.result()
    assert {rule for rule, _ in executed_jobs(local_output).values()} == {"train_bilingual"}, local_output[-3000:]
    assert {rule for rule, _ in executed_jobs(output).values()} == {"train_bilingual"}, output[-3000:]
    pattern = r"Job \d+ has been submitted with SLURM jobid (\d+) \(log: .+?\)\.$"
    submitted = re.findall(pattern, output, re.MULTILINE)
    assert len(submitted) == 2, output[-5000:]
    records = slurm_records()
    first, retry = (records[slurm_id] for slurm_id in submitted)
    # The first attempt ended at its one-minute limit: FAILED when the trainer stopped on the
    # USR1 warning (TrainingInterrupted), TIMEOUT when a loaded machine started the trainer after
    # the warning (ignored until then) and SLURM's SIGTERM at the limit made it checkpoint instead.
    # Either way the retry must resume mid-training, checked below.
    assert first["JobState"] in {"FAILED", "TIMEOUT"} and first["TimeLimit"] == "1", first
    assert (retry["JobState"], retry["ExitCode"]) == ("COMPLETED", "0:0"), retry

    steps = PREEMPTED_TRAINING["steps"]
    resumed = re.search(r"resumed from \S+/step-(\d+) \(step (\d+)\)", (cluster / PREEMPTED_LOG).read_text())
    assert resumed, (cluster / PREEMPTED_LOG).read_text()[-3000:]
    assert 0 < int(resumed.group(2)) < steps
    assert "resumed from" not in (local / PREEMPTED_LOG).read_text()

    metrics = "results/training/rnd_fr.metrics.csv"
    assert len(metric_rows(local / metrics)) == steps // PREEMPTED_TRAINING["log_every"]
    assert metric_rows(cluster / metrics) == metric_rows(local / metrics)
    for side in ("en", "fr"):
        expected = load_file(local / "results" / "models" / "rnd_fr" / side / "model.safetensors")
        actual = load_file(cluster / "results" / "models" / "rnd_fr" / side / "model.safetensors")
        assert actual.keys() == expected.keys()
        assert [name for name in expected if not torch.equal(actual[name], expected[name])] == [], side
