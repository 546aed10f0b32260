"""Bilingual training: a training objective (:mod:`ramen.objectives`) optimised on the core's step loop.

Every random choice of a step (which sentences, which tokens are masked, dropout)
is seeded from (seed, step), and the learning rate is a pure function of the step.
A checkpoint therefore needs only the step, the weights, the optimiser state (and
the fp16 loss scale): a run resumed from it sees exactly the batches, masks,
dropout and learning rates an uninterrupted run would have seen, with no RNG
state or data-loader position to save.

Several processes (torchrun, one per GPU) split every step's batch by rows and
average gradients weighted by target-token counts, so the global batch, the
loss and the checkpoints are those of a single-process run. They hold the whole
model each (DDP), or with ``sharding: fsdp`` a shard of every weight, gradient
and optimiser moment (ramen.training.sharding), gathered whole for the export.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ramen.errors import ConfigError
from ramen.modeling.frozen import hold_frozen
from ramen.training.checkpoints import fingerprint
from ramen.training.distributed import join_processes, prepare_step, wrap_ddp
from ramen.training.loops import StepLoop
from ramen.training.optimisation import Updates, fused_adam
from ramen.training.precision import autocast_dtype
# Re-exported: the settings and their checks import no torch (the job graph runs them).
from ramen.training.settings import PARAMETER_GROUPS, TRAJECTORY_SETTINGS, TrainSettings  # noqa: F401
from ramen.training.sharding import ShardedObjective, checkpointed_blocks, transformer_stacks
from ramen.training.staging import Stage, apply_stage, check_stages, parse_stages, resolve, union_of_stages

def run_fingerprint(settings: TrainSettings, inputs: Sequence[str | os.PathLike] = (),
                    objective: Mapping | None = None) -> str:
    """The run id (:func:`ramen.training.checkpoints.fingerprint`) of a bilingual training run: the
    trajectory settings, the objective with its settings and the contents of the starting files.
    Checkpoints live under it, so a changed learning rate or a new initialisation starts afresh
    while more ``steps`` extend the same run."""
    return fingerprint({"training": settings.trajectory(), "objective": dict(objective or {})}, inputs)


def configure_trainable(model: torch.nn.Module, groups: Sequence[str],
                        setting: str = "training.train") -> list[torch.nn.Parameter]:
    """Freeze every parameter, then unfreeze those of ``groups`` (``model.parameter_groups()``, and
    ``bottom:<k>``/``top:<k>`` blocks where the model numbers them: ramen.training.staging)."""
    by_group = model.parameter_groups()
    for params in by_group.values():
        for param in params:
            param.requires_grad_(False)
    trainable = resolve(groups, by_group, setting)
    for param in trainable:
        param.requires_grad_(True)
    return trainable


def train(objective: torch.nn.Module, settings: TrainSettings, checkpoint_dir: str | os.PathLike,
          metrics_path: str | os.PathLike, device: str = "cpu", progress: bool = True) -> list[dict]:
    """Train (or resume training) a training objective; return the metric rows. The objective's
    model ends at the final step.

    ``objective`` (ramen.objectives.Objective, or any module with these members) holds the model
    and its training data: ``name``; ``stream_names()``, the losses it reports;
    ``step_batches(step, micro)``, a micro-step's batches by key, drawn from (seed, step);
    ``batch_key(stream)``, the batch a stream's loss comes from; ``begin_step(step)``;
    ``forward(batches)``, a mean loss per stream; ``parameter_groups()``, its parameters by
    :data:`PARAMETER_GROUPS`; ``metrics()``, extra columns; ``compile_encoder()``.

    Under torchrun (``settings.distributed``) every process calls this; only rank 0 writes
    metrics and checkpoints. Sharded (``settings.sharding``), every process writes its shards of
    each checkpoint, and at the end rank 0's objective holds the whole model, plain, on the CPU.
    Parameters added to the objective (LoRA adapters) must be in place before this is called.
    """
    if settings.threads:
        torch.set_num_threads(settings.threads)
    checkpoint_dir = Path(checkpoint_dir)
    procs, device = join_processes(settings.distributed, device)
    per_micro = max(1, settings.batch_size // settings.grad_accumulation)
    if per_micro % procs.world:
        raise ConfigError("training.batch_size", f"{per_micro} sequences per language and micro-step do not split "
                          f"evenly over {procs.world} processes",
                          "make batch_size / grad_accumulation a multiple of the number of GPUs")
    sharded = settings.sharding == "fsdp"
    compute_dtype = autocast_dtype(settings.compute_precision, device)
    cuda = device.startswith("cuda")
    # One process has nothing to shard: it trains as unsharded runs do and reads and writes sharded checkpoints.
    shard_model = sharded and procs.world > 1
    # Frozen weights below fp32 go to the device one at a time as they are converted (the whole
    # model in fp32 would not fit where they are meant to); FSDP moves each unit's shard itself.
    held_low = settings.frozen_dtype != "fp32"
    if not shard_model and not held_low:
        objective.to(device)
    stages = parse_stages(settings.stages)
    if stages:
        check_stages(stages, settings.steps, objective.parameter_groups())
    with checkpointed_blocks(objective, settings.activation_checkpointing):
        if settings.compile:
            objective.compile_encoder()  # in place: parameter names (and checkpoints) stay as they are
        sharding = (ShardedObjective(objective, procs.world, device, compute_dtype if cuda else None)
                    if shard_model else None)
        if stages:
            # The optimiser holds every group some stage trains; each update lets its stage's receive gradients.
            trainable = configure_trainable(objective, union_of_stages(stages), "training.stages")
        else:
            trainable = configure_trainable(objective, settings.train)
        # What no stage trains is held at training.frozen_dtype (bf16, NF4 blocks under LoRA).
        hold_frozen(objective, trainable, settings.frozen_dtype,
                    [block for stack in transformer_stacks(objective) for block in stack],
                    objective.parameter_groups().get("lora", ()), device)
        if held_low:
            objective.to(device)
        optimizer = torch.optim.AdamW(trainable, lr=settings.peak_lr, weight_decay=settings.weight_decay,
                                      fused=fused_adam(device))
        # The learning rate is set per step (TrainSettings.learning_rate), so no schedule object; micro-steps
        # are drawn by the objective, each from (seed, step, micro).
        updates = Updates(optimizer, max_grad_norm=settings.max_grad_norm, precision=settings.compute_precision,
                          device=device, parameters=trainable)
        if cuda and updates.dtype is None:
            torch.set_float32_matmul_precision("high")  # TF32 matmuls: fp32 training at a fraction of the cost
        loop = StepLoop(objective, updates, steps=settings.steps, seed=settings.seed, checkpoint_dir=checkpoint_dir,
                        checkpoint_every=settings.checkpoint_every, keep_last=settings.keep_last,
                        keep_every=settings.keep_every, learning_rate=settings.learning_rate,
                        save_last=True, desc=objective.name, progress=progress, processes=procs,
                        metrics_path=metrics_path, tensorboard_dir=checkpoint_dir / "tensorboard",
                        settings=settings.trajectory(), sharded=sharded)
        # FSDP's units exchange gradients themselves; DDP wraps the objective.
        network = wrap_ddp(objective, device) if procs.world > 1 and sharding is None else objective
        run_steps(objective, network, loop, settings, stages, trainable, device)
        if sharding is not None:
            sharding.gather(procs.main)
    return loop.rows


def run_steps(objective: torch.nn.Module, network: torch.nn.Module, loop: StepLoop, settings: TrainSettings,
              stages: Sequence[Stage], trainable: Sequence[torch.nn.Parameter], device: str) -> None:
    """The loop's remaining steps: each step's stage, batches (drawn ahead), update and metric row."""
    procs, optimizer, cuda = loop.processes, loop.updates.optimizer, device.startswith("cuda")
    streams = objective.stream_names()

    def make(step: int):
        return prepare_step(objective.step_batches, step, settings.grad_accumulation, procs.rank, procs.world,
                            pin=cuda)

    tokens_seen, window_start, window_steps = 0, time.perf_counter(), 0
    objective.train()
    with loop.prefetch(make) as batches:
        waited = batches.wait_s
        latest = torch.zeros(len(streams), dtype=torch.float64, device=device)
        ever_seen = torch.zeros(len(streams), dtype=torch.bool, device=device)
        for step in loop.steps_to_run():
            frozen = (apply_stage(stages, step, objective.parameter_groups(), trainable, distributed=procs.world > 1)
                      if stages else ())
            objective.begin_step(step)
            micros = batches.get(step)
            step_losses, seen = loop.update_streams(network, micros, streams, objective.batch_key, device,
                                                    drop_gradients=frozen)
            tokens_seen += sum(micro.tokens for micro in micros)
            # Streams that alternate (monolingual and translation batches) keep their latest loss.
            latest = torch.where(seen, step_losses, latest)
            ever_seen |= seen
            window_steps += 1
            if step % settings.log_every == 0 or step == settings.steps:
                # Each process's weighted share summed over processes: the whole batch's mean per stream.
                means = (procs.sum(latest.clone()) / procs.world).tolist()
                elapsed = max(time.perf_counter() - window_start, 1e-9)
                # A stream not trained since this process started (a resume just before it) repeats
                # its last logged value; with none, its cell stays empty.
                previous = loop.rows[-1] if loop.rows else {}
                losses = {f"loss_{stream}": round(value, 5) if trained else previous.get(f"loss_{stream}", "")
                          for stream, value, trained in zip(streams, means, ever_seen.tolist())}
                loop.log({"step": step, "lr": optimizer.param_groups[0]["lr"], **losses, **objective.metrics(),
                          "tokens_per_s": round(tokens_seen / elapsed, 1),
                          "step_s": round(elapsed / window_steps, 4),
                          "data_wait": round((batches.wait_s - waited) / elapsed, 4)})
                tokens_seen, window_start, window_steps, waited = 0, time.perf_counter(), 0, batches.wait_s
