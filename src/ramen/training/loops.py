"""The training loops: :class:`StepLoop` and :class:`EpochLoop`, with signals and prefetching.

:class:`StepLoop` runs updates whose batches are drawn from (seed, step): bilingual training
with every objective (:mod:`ramen.training.trainer`), char2subword and NMT. It needs no RNG state
in its checkpoints. The fine-tuning loops (XNLI, UD parsing)
shuffle with a generator and draw dropout from torch's global RNG, so :class:`EpochLoop` saves
both: the generator as it was at the start of the epoch (the epoch's batch order is drawn again
from it and the batches already done are skipped) and the global RNG as it is at the checkpoint.
A run killed between checkpoints and restarted therefore repeats exactly the updates an
uninterrupted run makes (on the CPU; cuDNN and atomics on a GPU add their own noise).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import math
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import torch
from torch import nn

from ramen.errors import RamenError
from ramen.training.checkpoints import (
    checkpoint_name,
    load_latest_state,
    read_module,
    read_object,
    read_tensors,
    rng_state,
    save_state,
    set_rng_state,
)
from ramen.training.distributed import MicroBatch, Processes
from ramen.training.metrics import append_metrics, log_scalars, tensorboard_writer, write_metrics
from ramen.training.optimisation import Updates
from ramen.training.sharding import load_sharded_state, save_sharded_state

log = logging.getLogger(__name__)


# --- signals -----------------------------------------------------------------------------------

class StopRequested:
    """Set by SIGTERM/SIGUSR1 (what SLURM sends before a time limit): save and stop after this step."""

    def __init__(self):
        self.requested = False
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not in the main thread
                pass
        return self

    def _handle(self, signum, frame):
        log.warning("received signal %d: checkpointing and stopping", signum)
        self.requested = True

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class TrainingInterrupted(RuntimeError):
    """Raised after a signal-triggered checkpoint, so the job fails and a rerun resumes."""


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    """Torch's seed for a step (dropout, sampling); each process of a multi-GPU run draws its own."""
    return seed * 1_000_003 + step + rank * 1_000_000_000_039


# --- prefetching -------------------------------------------------------------------------------

class Prefetcher:
    """Makes the next step's batches in a background thread while the current step runs.

    Batches depend only on (seed, step), so prefetching changes no result; numpy
    releases the GIL for most of the work.
    """

    def __init__(self, make: Callable[[int], object], first: int, last: int):
        self._make, self._last = make, last
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="batches")
        self._pending: dict[int, concurrent.futures.Future] = {}
        self.wait_s = 0.0
        self._submit(first)

    def _submit(self, step: int) -> None:
        if step <= self._last and step not in self._pending:
            self._pending[step] = self._pool.submit(self._make, step)

    def get(self, step: int):
        started = time.perf_counter()
        self._submit(step)
        result = self._pending.pop(step).result()
        self.wait_s += time.perf_counter() - started
        self._submit(step + 1)
        return result

    def close(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pool.shutdown(wait=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --- the fine-tuning loop ----------------------------------------------------------------------

class EpochLoop:
    """Epochs of shuffled batches, one :class:`Updates` update per batch, dev selection and resume.

    The caller draws each epoch's batches from ``generator`` (:meth:`epochs_to_run` hands it over
    at the epoch's start), calls :meth:`update` with each batch's rows and a function giving the
    mean loss of some of them; after each epoch it scores the dev sets and calls :meth:`end_epoch`.
    With a ``checkpoint_dir`` every ``checkpoint_every`` updates (and on SIGTERM/SIGUSR1) the loop
    saves the model, optimiser, schedule, loss scale, RNG states, losses, history and the best
    state so far; a new loop on the same directory continues from the newest checkpoint.
    ``finish()`` loads the best epoch's weights.
    """

    def __init__(self, model: nn.Module, updates: Updates, *, epochs: int, steps_per_epoch: int,
                 generator: torch.Generator, checkpoint_dir: str | Path | None = None, checkpoint_every: int = 0,
                 desc: str = "train", progress: bool = True):
        self.model, self.updates = model, updates
        self.epochs, self.steps_per_epoch, self.generator = epochs, steps_per_epoch, generator
        self.directory = Path(checkpoint_dir) if checkpoint_dir else None
        self.checkpoint_every = checkpoint_every if self.directory else 0
        self.total_steps = epochs * steps_per_epoch
        self.step, self.epoch, self.done_in_epoch = 0, 1, 0
        self.loss_sum, self.loss_count = 0.0, 0
        self.history: list[dict] = []
        self.best_score, self.best_epoch, self.best_state = -math.inf, None, None
        self._epoch_generator = generator.get_state()
        self._last_saved = 0
        self._resume()
        self.desc, self.progress = desc, progress

    # resume
    def _restore(self, path: Path, state: dict) -> None:
        read_module(path, "model", self.model)
        self.updates.load_state_dict(read_object(path, "updates"))
        set_rng_state(read_tensors(path, "rng"))
        self.generator.set_state(read_tensors(path, "generator")["epoch_start"])
        self.best_state = read_tensors(path, "best") if (path / "best.safetensors").exists() else None

    def _resume(self) -> None:
        if self.directory is None:
            return
        state = load_latest_state(self.directory, self._restore)
        if state is None:
            return
        if state.get("total_steps") != self.total_steps:
            raise RamenError(f"{self.directory}: the checkpoints are of a run with {state.get('total_steps')} "
                             f"updates, this one has {self.total_steps}; delete the directory to start afresh")
        self.step, self.epoch, self.done_in_epoch = state["step"], state["epoch"], state["done_in_epoch"]
        self.loss_sum, self.loss_count = state["loss_sum"], state["loss_count"]
        self.history = state["history"]
        self.best_score = state["best_score"] if state["best_score"] is not None else -math.inf
        self.best_epoch = state["best_epoch"]
        self._epoch_generator = self.generator.get_state()
        self._last_saved = self.step

    def save(self) -> None:
        if self.directory is None:
            return
        tensors = {"rng": rng_state(), "generator": {"epoch_start": self._epoch_generator}}
        if self.best_state is not None:
            tensors["best"] = self.best_state
        state = {"epoch": self.epoch, "done_in_epoch": self.done_in_epoch, "total_steps": self.total_steps,
                 "loss_sum": self.loss_sum, "loss_count": self.loss_count, "history": self.history,
                 "best_score": None if self.best_score == -math.inf else self.best_score,
                 "best_epoch": self.best_epoch}
        save_state(self.directory, self.step, modules={"model": self.model}, tensors=tensors,
                   objects={"updates": self.updates.state_dict()}, state=state)
        self._last_saved = self.step

    # the loop
    def epochs_to_run(self):
        """Yields (epoch, batches_to_skip) from where the run stands; the generator is at the epoch's start."""
        from tqdm import tqdm

        with StopRequested() as stop, tqdm(total=self.total_steps, initial=self.step, desc=self.desc, unit="step",
                                           disable=not self.progress) as bar:
            self._stop, self._bar = stop, bar
            while self.epoch <= self.epochs:
                epoch = self.epoch
                self._epoch_generator = self.generator.get_state()
                yield epoch, self.done_in_epoch
                if self.epoch == epoch:
                    raise RuntimeError("EpochLoop: end_epoch() was not called for epoch %d" % epoch)

    def update(self, rows, loss_of: Callable, share: Callable | None = None) -> float:
        """One update from a batch's ``rows`` (see :meth:`Updates.batch`); checkpoint when due.
        Returns the batch's mean loss."""
        value = self.updates.batch(rows, loss_of, share)
        examples = rows if isinstance(rows, int) else len(rows)
        self.step += 1
        self.done_in_epoch += 1
        self.loss_sum += value * examples
        self.loss_count += examples
        self._bar.update(1)
        self._bar.set_postfix(loss=f"{value:.4f}", epoch=self.epoch)
        if self.checkpoint_every and self.step % self.checkpoint_every == 0:
            self.save()
        if self._stop.requested:
            if self._last_saved != self.step:
                self.save()
            raise TrainingInterrupted(f"stopped by signal at update {self.step}; rerun to resume from "
                                      f"{self.directory / checkpoint_name(self.step) if self.directory else '-'}")
        return value

    @property
    def train_loss(self) -> float:
        return self.loss_sum / max(1, self.loss_count)

    def end_epoch(self, score: float | None, rows: Sequence[dict] = ()) -> None:
        """Record the epoch's dev rows; keep its weights when ``score`` is the best (or None: no dev)."""
        self.history.extend(rows)
        if score is None or score > self.best_score:
            self.best_score = score if score is not None else self.best_score
            self.best_epoch = self.epoch
            self.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.epoch += 1
        self.done_in_epoch, self.loss_sum, self.loss_count = 0, 0.0, 0
        self._epoch_generator = self.generator.get_state()
        if self.checkpoint_every and self.epoch <= self.epochs:
            self.save()  # a resumed run does not train or evaluate this epoch again

    def finish(self) -> tuple[list[dict], int | None]:
        """Load the best epoch's weights; the dev history (rows marked ``selected``) and that epoch."""
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)
        for row in self.history:
            row["selected"] = row["epoch"] == self.best_epoch
        return self.history, self.best_epoch


def skip(batches: Iterable, count: int):
    """The batches after the first ``count`` (those a resumed epoch has done already)."""
    for index, batch in enumerate(batches):
        if index >= count:
            yield batch


# --- the step loop -----------------------------------------------------------------------------

class StepLoop:
    """Updates numbered 1..steps whose batches are drawn from (seed, step), as bilingual training,
    char2subword's approximation and pre-training and NMT training draw theirs; torch's RNG
    (dropout, sampling) is seeded from (seed, step, rank) before each step, and
    ``learning_rate(step)``, when given, sets the step's rate. A checkpoint therefore holds only
    the weights, the :class:`Updates` state (optimiser, schedule, fp16 loss scale), the metric rows
    so far and the run's ``settings`` (a resume with other values is warned about).

    Under torchrun (``processes``) every process runs the loop on its share of each batch;
    rank 0 alone writes checkpoints and logs, and every process stops at the same step on a
    signal. ``metrics_path``: a CSV log of :meth:`log`'s rows, rewritten on resume to the
    checkpoint's rows; ``tensorboard_dir``: the same rows as scalars. ``save_last`` keeps a
    checkpoint of the final step (a rerun with more steps continues from it); otherwise the
    caller removes the checkpoints (:func:`remove_run`) once it has saved what was trained.
    ``sharded``: the checkpoints hold the model and the optimiser's moments by parameter name in
    DCP's shards (:mod:`ramen.training.sharding`), written by every process and read back at any
    process count; the :class:`Updates` must have no schedule and no loss scale.
    """

    def __init__(self, model: nn.Module, updates: Updates, *, steps: int, seed: int,
                 checkpoint_dir: str | Path | None = None, checkpoint_every: int = 0, keep_last: int = 2,
                 keep_every: int = 0, learning_rate: Callable[[int], float] | None = None, save_last: bool = False,
                 desc: str = "train", progress: bool = True, processes: Processes | None = None,
                 metrics_path: str | Path | None = None, tensorboard_dir: str | Path | None = None,
                 settings: Mapping | None = None, sharded: bool = False):
        if sharded and (updates.scheduler is not None or updates.scaler.is_enabled()):
            raise ValueError("sharded checkpoints hold no schedule or loss scale")
        self.model, self.updates, self.sharded = model, updates, sharded
        self.steps, self.seed, self.learning_rate = steps, seed, learning_rate
        self.directory = Path(checkpoint_dir) if checkpoint_dir else None
        self.checkpoint_every = checkpoint_every if self.directory else 0
        self.keep_last, self.keep_every = keep_last, keep_every
        self.save_last = save_last and self.directory is not None
        self.processes = processes or Processes()
        self.metrics_path = Path(metrics_path) if metrics_path else None
        self.tensorboard_dir = Path(tensorboard_dir) if tensorboard_dir else None
        # As state.json holds them (tuples as lists), to compare with a checkpoint's.
        self.settings = json.loads(json.dumps(dict(settings), default=list)) if settings is not None else None
        self.step, self.rows = 0, []
        self.desc, self.progress = desc, progress
        self._bar, self._writer = None, None
        if self.directory is not None:
            state = load_latest_state(self.directory, self._restore)
            if state is not None:
                self.step, self.rows = state["step"], state.get("rows", [])
                self._warn_changed(state.get("settings") or {})
        self.processes.same(self.step, "the step to resume from")
        if self.metrics_path is not None and self.processes.main:
            write_metrics(self.metrics_path, self.rows)  # drops rows a killed run logged after its checkpoint

    def _restore(self, path: Path, state: dict) -> None:
        if self.sharded:
            load_sharded_state(path, self.model, self.updates.optimizer)
            return
        read_module(path, "model", self.model)
        self.updates.load_state_dict(read_object(path, "updates"))

    def _warn_changed(self, saved: Mapping) -> None:
        if self.settings is None:
            return
        changed = [name for name in self.settings if name in saved and saved[name] != self.settings[name]]
        if changed:
            log.warning("%s holds a run with other %s (%s); the resumed run will not match an uninterrupted one",
                        self.directory, ", ".join(changed),
                        ", ".join(f"{name}: {saved[name]} -> {self.settings[name]}" for name in changed))

    def save(self) -> None:
        """Checkpoint the current step (rank 0 writes, or every process its shards; no process runs
        ahead meanwhile)."""
        state = {"rows": self.rows, **({"settings": self.settings} if self.settings is not None else {})}
        if self.sharded:
            save_sharded_state(self.directory, self.step, self.model, self.updates.optimizer, state, self.processes,
                               keep_last=self.keep_last, keep_every=self.keep_every)
            return
        if self.processes.main:
            save_state(self.directory, self.step, modules={"model": self.model},
                       objects={"updates": self.updates.state_dict()}, state=state,
                       keep_last=self.keep_last, keep_every=self.keep_every)
        self.processes.barrier()

    def prefetch(self, make: Callable[[int], object]) -> Prefetcher:
        """``make(step)`` for the steps still to run, each drawn while the step before it trains."""
        return Prefetcher(make, self.step + 1, self.steps)

    def steps_to_run(self):
        """Yields the step numbers still to run, with torch's RNG seeded (and the rate set) for the step."""
        from tqdm import tqdm

        procs = self.processes
        with contextlib.ExitStack() as stack:
            stop = stack.enter_context(StopRequested())
            self._bar = stack.enter_context(tqdm(total=self.steps, initial=self.step, desc=self.desc, unit="step",
                                                 disable=not (self.progress and procs.main), mininterval=5))
            if self.tensorboard_dir is not None and procs.main:
                self._writer = tensorboard_writer(self.tensorboard_dir, self.step)
                if self._writer is not None:
                    stack.callback(self._writer.close)
            for step in range(self.step + 1, self.steps + 1):
                torch.manual_seed(step_seed(self.seed, step, procs.rank))
                if self.learning_rate is not None:
                    for group in self.updates.optimizer.param_groups:
                        group["lr"] = self.learning_rate(step)
                yield step
                if self.step != step:
                    raise RuntimeError(f"StepLoop: no update was made in step {step}")
                self._bar.update(1)
                stopping = procs.any(stop.requested)
                due = self.checkpoint_every and step % self.checkpoint_every == 0
                if due or (self.directory is not None and stopping) or (self.save_last and step == self.steps):
                    self.save()
                if stopping:
                    raise TrainingInterrupted(f"stopped by signal at update {step}; rerun to resume from "
                                              f"{self.directory / checkpoint_name(step) if self.directory else '-'}")

    def update(self, rows, loss_of: Callable, share: Callable | None = None) -> float:
        """One update from a batch's ``rows`` (see :meth:`Updates.batch`); the batch's mean loss."""
        value = self.updates.batch(rows, loss_of, share)
        self.step += 1
        return value

    def update_streams(self, network: nn.Module, micros: Sequence[MicroBatch], streams: Sequence[str],
                       batch_key: Callable[[str], str] = str, device: str = "cpu",
                       drop_gradients: Sequence[nn.Parameter] = ()) -> tuple[torch.Tensor, torch.Tensor]:
        """One update from a step's drawn micro-batches (:func:`prepare_step`) of a model that maps
        batches by key to a mean loss per stream (``batch_key(stream)``: the batch a stream's loss
        comes from). The update minimises the mean of the streams' losses; under torchrun
        ``network`` is the model wrapped by :func:`wrap_ddp`, whose gradients are exchanged once,
        on the last micro-batch, or the model sharded by FSDP, whose units reduce their gradients
        after every micro-batch's backward (it keeps only its shard of them). ``drop_gradients``:
        parameters this update leaves as they are (a training stage under DDP or FSDP, which
        exchange every gradient). Returns each stream's loss (this process's weighted share) and
        whether the step trained it."""
        world, count = self.processes.world, len(micros)
        losses_sum = torch.zeros(len(streams), dtype=torch.float64, device=device)
        seen = torch.zeros(len(streams), dtype=torch.bool, device=device)
        for index, micro in enumerate(micros):
            inputs = {key: batch.apply(lambda t: t.to(device, non_blocking=True))
                      for key, batch in micro.batches.items()}
            sync = network.no_sync() if network is not self.model and index < count - 1 else contextlib.nullcontext()
            with sync:
                with self.updates.autocast():
                    losses = network(inputs)
                present = [stream for stream in streams if stream in losses]
                weighted = [losses[stream] * micro.weights[batch_key(stream)] if world > 1 else losses[stream]
                            for stream in present]
                self.updates.backward(sum(weighted) / (len(weighted) * count))
            for stream, value in zip(present, weighted):
                losses_sum[streams.index(stream)] += value.detach().double() / count
                seen[streams.index(stream)] = True
        for param in drop_gradients:
            param.grad = None
        self.updates.step()
        self.step += 1
        return losses_sum, seen

    def log(self, row: dict) -> None:
        """Record a metric row (kept in the checkpoints; written to the CSV log and tensorboard)."""
        self.rows.append(row)
        if self.processes.main and self.metrics_path is not None:
            append_metrics(self.metrics_path, row, first=len(self.rows) == 1)
        if self._writer is not None:
            log_scalars(self._writer, row)
        if self._bar is not None:
            self._bar.set_postfix({key: value for key, value in row.items() if key.startswith("loss")})
