"""Sharded training (FSDP2 on two CPU processes, gloo), activation checkpointing and sharded
checkpoints: two sharded processes train as one unsharded process does, across training stages,
for an extended-vocabulary causal LM (tied output layer, new rows apart), with LoRA adapters, and
for a masked LM; a stage leaves the groups it does not train unmoved and without optimiser state;
a sharded run killed with SIGKILL and restarted ends exactly where an uninterrupted one does, and
a run resumes from the checkpoints of another process count, and past a corrupt newest checkpoint
from the one before; the model the export reads is whole and plain again; recomputing the blocks'
activations changes no loss and no weight.

The runs are made once for the module (sharding_worker.py is their script): each torchrun start
costs seconds, so one job is killed mid-way and a second trains everything else in turn.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import sharding_worker
from ramen.training.checkpoints import list_checkpoints
from ramen.training.sharding import read_checkpoint_model, read_sharded_tensors
from test_train_resume import metric_rows, stop, wait_for

# Each test reads runs that start processes for seconds: left to `make test`, out of `make test-fast`.
pytestmark = pytest.mark.slow

WORKER = Path(sharding_worker.__file__)
SHARDED = {"sharding": "fsdp", "distributed": True, "gpus": 2}
LOSSES = ("step", "lr", "loss_en", "loss_fr")
# Runs of two sharded processes, the same runs of one unsharded process, and their updates.
PAIRS = (("pair", "single", 20), ("pair_masked", "single_masked", 8), ("pair_lora", "single_lora", 8))


def torchrun(jobs: list[dict], path: Path, **options) -> subprocess.Popen:
    path.write_text(json.dumps(jobs))
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             str(WORKER), str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, **options)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_source_dir) -> dict:
    from tiny_decoder import build_byte_tokenizer_dir

    tokenizer = build_byte_tokenizer_dir(tmp_path_factory.mktemp("decoder_tokenizer"))
    return {"tokenizer": str(tokenizer), "masked_source": str(tiny_source_dir)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, inputs) -> dict:
    root = tmp_path_factory.mktemp("sharding")

    def job(case, name, **options):
        return {"case": case, "out": str(root / name), "inputs": inputs, **options}

    extended, masked = {"grad_accumulation": 2}, {"steps": 8}
    # LoRA adapters added before training (the pipeline's order), sharded with their blocks.
    lora = {"steps": 8, "stages": [{"until": 4, "train": ["lora"]}, {"train": ["lora", "foreign_embeddings"]}],
            "lora": {"rank": 4, "alpha": 8.0}}
    # Killed with SIGKILL (every process of the job) once a checkpoint of the middle stage is written.
    killed = torchrun([job("extended", "killed", settings={**extended, **SHARDED}, step_delay=0.25)],
                      root / "killed.json")
    try:
        wait_for(lambda: any(step >= 12 for step, _ in list_checkpoints(root / "killed" / "checkpoints")), killed,
                 240, "a checkpoint at step 12")
    finally:
        stop(killed)
    reached = list_checkpoints(root / "killed" / "checkpoints")[-1][0]
    shutil.copytree(root / "killed", root / "killed_then_one")
    # The same run with one shard of its newest checkpoint cut short (a node lost mid-copy): it
    # must resume from the checkpoint before.
    shutil.copytree(root / "killed", root / "corrupt_newest")
    newest = list_checkpoints(root / "corrupt_newest" / "checkpoints")[-1][1]
    shard = sorted(newest.glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[:shard.stat().st_size // 2])

    # Checkpointed by one process, to be resumed by two.
    sharding_worker.run(job("extended", "one_then_two", settings={**extended, "sharding": "fsdp", "steps": 6}))
    # One job, one process group: both runs resumed, the same run uninterrupted, a masked LM and
    # LoRA with activation checkpointing.
    checkpointed = {**SHARDED, "activation_checkpointing": True}
    pair = torchrun([job("extended", "killed", settings={**extended, **SHARDED}),
                     job("extended", "corrupt_newest", settings={**extended, **SHARDED}),
                     job("extended", "one_then_two", settings={**extended, **SHARDED}),
                     job("extended", "pair", settings={**extended, **SHARDED}),
                     job("masked", "pair_masked", settings={**masked, **checkpointed}),
                     job("extended", "pair_lora", settings={**lora, **checkpointed})],
                    root / "pair.json")
    try:
        _, stderr = pair.communicate(timeout=300)
    finally:
        stop(pair)
    assert pair.returncode == 0, stderr[-3000:]
    (root / "pair.stderr").write_text(stderr)

    sharding_worker.run(job("extended", "single", settings=extended))
    sharding_worker.run(job("masked", "single_masked", settings=masked))
    sharding_worker.run(job("extended", "single_lora", settings=lora))
    sharding_worker.run(job("extended", "killed_then_one", settings={**extended, "sharding": "fsdp"}))
    return {"root": root, "reached": reached, "corrupt": newest}


def losses(path: Path) -> np.ndarray:
    return np.array([row[2:] for row in metric_rows(path / "metrics.csv", LOSSES)], dtype=float)


def assert_close_tensors(ours: dict, theirs: dict, **tolerance) -> None:
    assert ours.keys() == theirs.keys()
    for name in theirs:
        torch.testing.assert_close(ours[name], theirs[name], msg=name, **tolerance)


def test_two_sharded_processes_train_as_one_unsharded_process_does(runs):
    root = runs["root"]
    for pair, single, steps in PAIRS:
        pair_rows, single_rows = metric_rows(root / pair / "metrics.csv", LOSSES), metric_rows(
            root / single / "metrics.csv", LOSSES)
        assert [row[:2] for row in pair_rows] == [row[:2] for row in single_rows]
        assert [int(row[0]) for row in pair_rows] == list(range(1, steps + 1))
        # Equal up to float rounding: the processes' gradients are summed in another order.
        np.testing.assert_allclose(losses(root / pair), losses(root / single), atol=5e-5)
        assert len({row[3] for row in pair_rows}) > 5  # it trains
        assert_close_tensors(load_file(str(root / pair / "weights.safetensors")),
                             load_file(str(root / single / "weights.safetensors")), rtol=1e-3, atol=1e-4)


def test_a_sharded_stage_leaves_what_it_does_not_train_unmoved_and_without_moments(runs, inputs):
    """Stages: the new rows alone to update 6, with the top block to 12, then everything."""
    checkpoints = runs["root"] / "pair" / "checkpoints"
    objective, _ = sharding_worker.extended_objective(inputs, sharding_worker.training_settings("extended"))
    start = {f"model.{name}": value for name, value in objective.state_dict().items()}

    def moved_and_moments(step):
        tensors = read_sharded_tensors(checkpoints / f"step-{step:08d}", ("model.", "optimizer."))
        moved = {name for name in start if not torch.equal(tensors[name], start[name])}
        moments = {name.removeprefix("optimizer.").rsplit(".", 1)[0] for name in tensors
                   if name.startswith("optimizer.")}
        return moved, moments

    new_rows = "model.new_embeddings"
    top_block = {name for name in start if name.startswith("model.model.lm.model.layers.1.")}
    assert top_block
    moved, moments = moved_and_moments(6)
    assert moved == {f"model.{new_rows}"} and moments == {new_rows}
    moved, moments = moved_and_moments(12)
    assert moved == {f"model.{new_rows}"} | top_block
    assert moments == {new_rows} | {name.removeprefix("model.") for name in top_block}
    moved, moments = moved_and_moments(18)
    assert {"model.model.lm.model.embed_tokens.weight", "model.model.lm.model.layers.0.mlp.up_proj.weight"} <= moved
    assert len(moments) == len(list(objective.parameters()))


def test_a_sharded_run_killed_and_restarted_equals_an_uninterrupted_one(runs):
    root = runs["root"]
    assert 6 <= runs["reached"] < 20, "the run was not killed mid-way"
    assert metric_rows(root / "killed" / "metrics.csv", LOSSES) == metric_rows(root / "pair" / "metrics.csv", LOSSES)
    ours, theirs = (load_file(str(root / name / "weights.safetensors")) for name in ("killed", "pair"))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[name], theirs[name]) for name in theirs)
    assert not list((root / "killed" / "checkpoints").glob(".step-*"))  # nothing half written is left


def test_a_corrupt_newest_sharded_checkpoint_falls_back_to_the_one_before(runs):
    root = runs["root"]
    # Named in the log as unreadable, and the run ends exactly where an uninterrupted one does.
    assert f"checkpoint {runs['corrupt']} is unreadable (UnreadableCheckpoint" in (root / "pair.stderr").read_text()
    assert metric_rows(root / "corrupt_newest" / "metrics.csv", LOSSES) == metric_rows(root / "pair" / "metrics.csv",
                                                                                        LOSSES)
    ours, theirs = (load_file(str(root / name / "weights.safetensors")) for name in ("corrupt_newest", "pair"))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[name], theirs[name]) for name in theirs)


@pytest.mark.parametrize("run", ["killed_then_one", "one_then_two"])
def test_a_run_resumes_from_a_checkpoint_of_another_process_count(runs, run):
    """Checkpointed by two processes and resumed by one, or the other way round."""
    root = runs["root"]
    resumed = runs["reached"] if run == "killed_then_one" else 6
    # The steps up to the checkpoint are those of the first process count, the rest the second's.
    np.testing.assert_allclose(losses(root / run)[resumed:], losses(root / "pair")[resumed:], atol=5e-5)
    final = "checkpoints/step-00000020"
    ours = read_sharded_tensors(root / run / final, ("model.", "optimizer."))
    theirs = read_sharded_tensors(root / "pair" / final, ("model.", "optimizer."))
    assert ours.keys() == theirs.keys() and any(name.endswith(".exp_avg_sq") for name in theirs)
    for name in theirs:
        if name.endswith(".step"):
            assert torch.equal(ours[name], theirs[name]), name
        else:  # moments near zero differ most in relative terms: compare each tensor as a whole
            assert (ours[name] - theirs[name]).norm() <= 1e-3 * theirs[name].norm(), name


def test_the_model_is_whole_and_plain_after_sharded_training_and_exports_as_unsharded(runs):
    root = runs["root"]
    for name, unsharded, _ in PAIRS:
        facts = json.loads((root / name / "facts.json").read_text())
        assert facts["dtensors"] == []
        assert facts["hooks"] == json.loads((root / unsharded / "facts.json").read_text())["hooks"]
        assert not [cls for cls in facts["classes"] if cls.startswith("FSDP")]
        assert facts["devices"] == ["cpu"] and facts["dtypes"] == ["torch.float32"]
        assert facts["tied"]  # the output layer is the input table again, one parameter
    for sharded, unsharded in (("pair", "single"), ("pair_lora", "single_lora")):
        exported, expected = root / sharded / "model", root / unsharded / "model"
        assert json.loads((exported / "config.json").read_text()) == json.loads((expected / "config.json").read_text())
        files = sorted(path.relative_to(expected) for path in expected.rglob("*.safetensors"))
        assert files == sorted(path.relative_to(exported) for path in exported.rglob("*.safetensors"))
        for file in files:  # the model (adapters merged) and, with LoRA, the adapters themselves
            assert_close_tensors(load_file(str(exported / file)), load_file(str(expected / file)),
                                 rtol=1e-3, atol=1e-4)
    assert (root / "pair_lora" / "model" / "lora_adapter" / "adapter_model.safetensors").exists()


@pytest.mark.parametrize("case", ["masked", "extended"])
def test_activation_checkpointing_changes_no_loss_and_no_weight(inputs, case, tmp_path, monkeypatch):
    """With dropout (the recomputation draws the forward's masks again) and, for the Llama layout,
    a key/value cache the model would otherwise fill during training."""
    import torch.utils.checkpoint

    recomputed = []
    checkpoint = torch.utils.checkpoint.checkpoint

    def counted(*args, **kwargs):
        recomputed.append(kwargs)
        return checkpoint(*args, **kwargs)

    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", counted)
    trained = {}
    for enabled in (False, True):
        job = {"case": case, "out": str(tmp_path / str(enabled)), "inputs": inputs, "dropout": 0.1,
               "settings": {"steps": 4, "activation_checkpointing": enabled, "checkpoint_every": 0, "stages": [],
                            "train": ["encoder", "head", "source_embeddings", "foreign_embeddings"]}}
        trained[enabled] = sharding_worker.run(job)
        assert len(recomputed) == (8 if enabled else 0)  # each of the 2 blocks in each of the 4 updates
    assert all(kwargs["use_reentrant"] is False and kwargs["preserve_rng_state"] is True for kwargs in recomputed)
    plain, checkpointed = (load_file(str(tmp_path / str(enabled) / "weights.safetensors")) for enabled in (False, True))
    assert plain.keys() == checkpointed.keys() and all(torch.equal(plain[k], checkpointed[k]) for k in plain)
    assert metric_rows(tmp_path / "True" / "metrics.csv", LOSSES) == metric_rows(
        tmp_path / "False" / "metrics.csv", LOSSES)
    # Afterwards the blocks run as they did and the model caches again for generation.
    for module in trained[True].modules():
        assert "forward" not in vars(module)
        assert getattr(getattr(module, "config", None), "use_cache", True) is not False


def test_a_sharded_checkpoint_loads_whole_into_one_process(runs, inputs):
    """What checkpoint curves read: a sharded run's last checkpoint, loaded into a plain objective,
    holds the weights that run ended with (gathered by the run itself, not read from its shards)
    and, up to rounding, those the same run by one unsharded process ended with."""
    from ramen.training.checkpoints import tied_once

    objective, _ = sharding_worker.extended_objective(inputs, sharding_worker.training_settings("extended"))
    root = runs["root"]
    read_checkpoint_model(root / "pair" / "checkpoints" / "step-00000020", objective)
    loaded = tied_once(objective)
    ended = load_file(str(root / "pair" / "weights.safetensors"))
    assert loaded.keys() == ended.keys()
    assert all(torch.equal(loaded[name], ended[name]) for name in ended)
    assert_close_tensors(loaded, load_file(str(root / "single" / "weights.safetensors")), rtol=1e-3, atol=1e-4)


def test_sharded_lora_on_an_extension_moves_only_the_new_rows_and_the_adapters(runs, inputs):
    """Stages: LoRA alone to update 4, then with the new rows: no source row moves or holds a moment."""
    from dataclasses import asdict

    settings = sharding_worker.training_settings("extended", stages=[{"train": ["lora", "foreign_embeddings"]}],
                                                 lora={"rank": 4, "alpha": 8.0})
    objective, _ = sharding_worker.extended_objective(inputs, settings)
    objective.model.add_adapters(**asdict(settings.lora), seed=settings.seed)
    start = {f"model.{name}": value for name, value in objective.state_dict().items()}
    tensors = read_sharded_tensors(runs["root"] / "pair_lora" / "checkpoints" / f"step-{8:08d}",
                                   ("model.", "optimizer."))
    moved = {name for name in start if not torch.equal(tensors[name], start[name])}
    moments = {name.removeprefix("optimizer.").rsplit(".", 1)[0] for name in tensors if name.startswith("optimizer.")}
    adapters = {name for name in start if ".lora_" in name}
    assert adapters and moved == adapters | {"model.model.new_embeddings"}
    assert moments == {name.removeprefix("model.") for name in moved}
    assert "model.model.lm.model.embed_tokens.weight" not in moved
