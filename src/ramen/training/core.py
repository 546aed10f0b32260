"""The former home of the training core, which lives by concern in :mod:`.optimisation`,
:mod:`.precision`, :mod:`.checkpoints`, :mod:`.distributed`, :mod:`.metrics` and :mod:`.loops`:
every name it had, re-exported for ``ramen.tasks``, which still imports it. New code imports from
those modules; this one goes once the tasks do (tests/unit/test_training_core.py fails when
another module imports it, and when none does)."""

from ramen.training.checkpoints import (
    checkpoint_name,
    fingerprint,
    hash_files,
    list_checkpoints,
    load_latest_state,
    prune_checkpoints,
    read_module,
    read_object,
    read_tensors,
    remove_run,
    rng_state,
    save_state,
    set_rng_state,
    unshared,
)
from ramen.training.distributed import (
    is_main_process,
    join_processes,
    MicroBatch,
    prepare_step,
    Processes,
    shard_batch,
    wrap_ddp,
)
from ramen.training.loops import EpochLoop, Prefetcher, skip, step_seed, StepLoop, StopRequested, TrainingInterrupted
from ramen.training.metrics import append_metrics, log_scalars, tensorboard_writer, write_metrics
from ramen.training.optimisation import (
    check_accumulation,
    decay_groups,
    fused_adam,
    linear_warmup_decay,
    micro_batches,
    Updates,
)
from ramen.training.precision import autocast_dtype, check_precision, PRECISIONS

__all__ = [
    "append_metrics",
    "autocast_dtype",
    "check_accumulation",
    "check_precision",
    "checkpoint_name",
    "decay_groups",
    "EpochLoop",
    "fingerprint",
    "fused_adam",
    "hash_files",
    "is_main_process",
    "join_processes",
    "linear_warmup_decay",
    "list_checkpoints",
    "load_latest_state",
    "log_scalars",
    "micro_batches",
    "MicroBatch",
    "PRECISIONS",
    "Prefetcher",
    "prepare_step",
    "Processes",
    "prune_checkpoints",
    "read_module",
    "read_object",
    "read_tensors",
    "remove_run",
    "rng_state",
    "save_state",
    "set_rng_state",
    "shard_batch",
    "skip",
    "step_seed",
    "StepLoop",
    "StopRequested",
    "tensorboard_writer",
    "TrainingInterrupted",
    "unshared",
    "Updates",
    "wrap_ddp",
    "write_metrics",
]
