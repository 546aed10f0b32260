"""Bilingual training on two nodes of the SLURM test cluster, compared with one process run locally.

tools/slurm/start.sh runs two slurmd daemons on this machine, each its own node (partition
multinode). The training rule alone runs with training.nodes: 2 and gpus: 1 on the CPU, through
``--profile profiles/slurm --profile profiles/slurm-local-test``: the job asks SLURM for two nodes,
and ramen.pipeline.launch starts one torchrun on each under srun, meeting at a rendezvous. The
cluster fixture is test_slurm.py's (one cluster per machine); outside CI the test skips when
SLURM cannot be set up here, with CI=true it fails instead.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import yaml

from test_slurm import (NODES, OVERLAY, PROFILE, executed_jobs, slurm_cluster, slurm_records,  # noqa: F401
                        slurm_submissions, snakemake)
from test_workflow import overlay_threads, spine_run

pytestmark = pytest.mark.integration

TARGET = "results/models/ramen_fr/fr"
LOG = "logs/train_bilingual/ramen_fr.log"
MULTINODE_PARTITION = "multinode"  # tools/slurm/common.sh
# A key bias shifts all of a query's attention scores alike, which softmax ignores: its gradient is
# float rounding noise, which Adam scales up to ordinary steps, so these weights are not compared.
GRADIENT_FREE = re.compile(r"attention\.self\.key\.bias$")


# What the training neither reads nor keeps: the checkpoints (it would resume from its own), its
# outputs, and the XNLI runs on them.
NOT_COPIED = {"results/checkpoints", "results/models/ramen_fr", "results/xnli"}


def training_inputs(tmp_path_factory, target: Path, nodes: int) -> Path:
    """The session's spine run, the files the training reads, with a dropout-free source model
    (each process draws its own dropout masks): two trainings from these differ only by float
    rounding."""
    spine = spine_run(tmp_path_factory)

    def not_copied(directory: str, names: list[str]) -> set[str]:
        return {name for name in names if (Path(directory).relative_to(spine) / name).as_posix() in NOT_COPIED}

    shutil.copytree(spine, target, symlinks=True, ignore=not_copied)
    source_config = target / "results" / "models" / "source" / "config.json"
    values = json.loads(source_config.read_text())
    values.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    source_config.write_text(json.dumps(values, indent=2))
    config = yaml.safe_load((target / "config.yaml").read_text())
    config["training"]["nodes"] = nodes
    (target / "config.yaml").write_text(yaml.safe_dump(config))
    return target


def two_node_profile(directory: Path) -> Path:
    """A third profile: the training in the two-node partition, without GPUs. The plugin submits a
    job without GPUs with --ntasks=<tasks> (1 by default), and one task would shrink it to one node."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump({
        "set-resources": {"train_bilingual": {"slurm_partition": MULTINODE_PARTITION, "gpu": 0, "gres": "",
                                              "tasks": len(NODES)}},
    }))
    return directory


def metrics(path: Path) -> tuple[list[tuple[str, str]], np.ndarray]:
    """(update, learning rate) of each row, and its losses."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    losses = [[float(value) for name, value in row.items() if name.startswith("loss_")] for row in rows]
    return [(row["step"], row["lr"]) for row in rows], np.array(losses)


def test_training_on_two_nodes_matches_one_process(slurm_cluster, tmp_path_factory):  # noqa: F811
    import torch
    from safetensors.torch import load_file

    base = tmp_path_factory.mktemp("multinode")
    local = training_inputs(tmp_path_factory, base / "local", nodes=1)
    cluster = training_inputs(tmp_path_factory, base / "cluster", nodes=len(NODES))
    # The one-process reference trains beside the cluster job; with thread counts as on the cluster.
    with ThreadPoolExecutor(max_workers=1) as pool:
        reference = pool.submit(snakemake, local, TARGET, "--cores", "1", "--set-threads", *overlay_threads())
        output = snakemake(cluster, TARGET, "--profile", str(PROFILE), "--profile", str(OVERLAY),
                           "--profile", str(two_node_profile(base / "profile")))
        local_output = reference.result()
    assert [rule for rule, _ in executed_jobs(local_output).values()] == ["train_bilingual"], local_output[-3000:]
    assert [rule for rule, _ in executed_jobs(output).values()] == ["train_bilingual"], output[-3000:]

    ((slurm_id, _),) = slurm_submissions(output).values()
    record = slurm_records()[slurm_id]
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), record
    assert record["Partition"] == MULTINODE_PARTITION and record["NodeCnt"] == str(len(NODES)), record
    assert set(record["NodeList"].split(",")) == set(NODES), record

    log = (cluster / LOG).read_text()
    assert re.search(r"starting torchrun on 2 nodes: srun --overlap --nodes=2 ", log), log[-3000:]
    # Each training process logs its rank, the world size and its node (SLURM's name for it).
    placed = re.findall(r"process (\d+) of (\d+) on node (\S+) ", log)
    assert sorted(rank for rank, _, _ in placed) == ["0", "1"] and {world for _, world, _ in placed} == {"2"}, log
    assert {node for _, _, node in placed} == set(NODES), log

    # The batch split over two processes: the same updates as one process's, up to float rounding.
    name = "results/training/ramen_fr.metrics.csv"
    (local_steps, local_losses), (cluster_steps, cluster_losses) = metrics(local / name), metrics(cluster / name)
    assert cluster_steps == local_steps and len(local_steps) == 4
    np.testing.assert_allclose(cluster_losses, local_losses, atol=3e-5)
    for side in ("en", "fr"):
        expected = load_file(local / "results" / "models" / "ramen_fr" / side / "model.safetensors")
        actual = load_file(cluster / "results" / "models" / "ramen_fr" / side / "model.safetensors")
        assert actual.keys() == expected.keys()
        compared = [tensor for tensor in expected if not GRADIENT_FREE.search(tensor)]
        assert len(compared) > len(expected) / 2
        for tensor in compared:
            torch.testing.assert_close(actual[tensor], expected[tensor], rtol=1e-4, atol=1e-5, msg=tensor)
