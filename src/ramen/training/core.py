"""What every training loop of ramen shares: optimiser and schedule, clipped updates, precision,
gradient accumulation, several processes (torchrun), batch prefetching, progress, metric logs,
signals, run fingerprints and numbered checkpoints that a killed job resumes from.

:class:`StepLoop` runs updates whose batches are drawn from (seed, step): bilingual training
with every objective (:mod:`ramen.training.trainer`), char2subword and NMT. It needs no RNG state
in its checkpoints. The fine-tuning loops (XNLI, UD parsing)
shuffle with a generator and draw dropout from torch's global RNG, so :class:`EpochLoop` saves
both: the generator as it was at the start of the epoch (the epoch's batch order is drawn again
from it and the batches already done are skipped) and the global RNG as it is at the checkpoint.
A run killed between checkpoints and restarted therefore repeats exactly the updates an
uninterrupted run makes (on the CPU; cuDNN and atomics on a GPU add their own noise).

:class:`Updates` is the update itself, the same in every loop: the forward pass under the
precision's autocast, fp16 loss scaling, gradient accumulation over micro-batches of one batch,
clipping, the optimiser and schedule step.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import csv
import json
import logging
import math
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

from ramen.errors import ConfigError, RamenError
from ramen.io import atomic_path
# Re-exported: the settings checks live with the settings, which the job graph checks without torch.
from ramen.training.settings import PRECISIONS, check_accumulation, check_precision  # noqa: F401

log = logging.getLogger(__name__)


# --- optimiser and schedule --------------------------------------------------------------------

def decay_groups(parameters: Iterable[nn.Parameter], weight_decay: float) -> list[dict]:
    """AdamW parameter groups: weight decay on matrices, none on biases and norms."""
    decay, no_decay = [], []
    for param in parameters:
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def linear_warmup_decay(optimizer: torch.optim.Optimizer, warmup_ratio: float, total_steps: int):
    """Linear warm-up over the first ``warmup_ratio`` of the updates, then linear decay to 0."""
    warmup = int(warmup_ratio * total_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def autocast_dtype(precision: str, device: str) -> torch.dtype | None:
    """The autocast dtype for a precision setting on a device (None: plain fp32)."""
    if precision == "auto":
        cuda = device.startswith("cuda") and torch.cuda.is_available()
        precision = "bf16" if cuda and torch.cuda.is_bf16_supported() else "fp32"
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def fused_adam(device: str) -> bool:
    # The fused kernel exists for CUDA and (since torch 2.4) the CPU, where it is about 4x faster
    # than the per-tensor loop.
    return torch.device(device).type in ("cuda", "cpu")


# --- the update --------------------------------------------------------------------------------

def micro_batches(rows, parts: int) -> list:
    """``rows`` (a batch's indices, or its size) in ``parts`` nearly equal consecutive pieces;
    fewer when the batch has fewer rows."""
    rows = torch.arange(rows) if isinstance(rows, int) else rows
    count = max(1, min(parts, len(rows)))
    bounds = [len(rows) * index // count for index in range(count + 1)]
    return [rows[bounds[index]:bounds[index + 1]] for index in range(count)]


class Updates:
    """Optimiser updates: autocast at the precision, fp16 loss scaling, clipping, the optimiser and
    (when given) the schedule step.

    ``batch(rows, loss_of)`` makes one update from a batch in ``accumulation`` micro-batches:
    ``loss_of(part)`` is the mean loss of a part of the rows, weighted by ``share(part)`` (its
    share of the batch's rows unless given), so the accumulated gradient is the whole batch's.
    A batch in one piece takes exactly the steps of a plain ``loss.backward(); optimizer.step()``.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, *, scheduler=None, max_grad_norm: float | None = None,
                 accumulation: int = 1, precision: str = "fp32", device: str = "cpu",
                 parameters: Sequence[nn.Parameter] | None = None):
        self.optimizer, self.scheduler = optimizer, scheduler
        self.max_grad_norm, self.accumulation = max_grad_norm, accumulation
        self.parameters = list(parameters) if parameters is not None else [
            param for group in optimizer.param_groups for param in group["params"]]
        self.device_type = torch.device(device).type
        self.dtype = autocast_dtype(precision, device)
        self.scaler = torch.amp.GradScaler(self.device_type, enabled=self.dtype == torch.float16)

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self) -> None:
        """Unscale, clip, step the optimiser (skipped by the fp16 scaler on overflow) and schedule."""
        self.scaler.unscale_(self.optimizer)
        if self.max_grad_norm:
            nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None:
            self.scheduler.step()

    def batch(self, rows, loss_of: Callable, share: Callable | None = None) -> float:
        """One update from ``rows`` in micro-batches; the batch's mean loss."""
        parts = micro_batches(rows, self.accumulation)
        total = 0.0
        for part in parts:
            with self.autocast():
                loss = loss_of(part)
            if len(parts) > 1:
                loss = loss * (share(part) if share else len(part) / sum(len(p) for p in parts))
            self.backward(loss)
            total += float(loss.detach())
        self.step()
        return total

    def state_dict(self) -> dict:
        state = {"optimizer": self.optimizer.state_dict()}
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        if self.scaler.is_enabled():
            state["scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: Mapping) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler.is_enabled() and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])


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


# --- numbered checkpoints ----------------------------------------------------------------------

def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    if not directory.exists():
        return []
    found = []
    for path in directory.glob("step-*"):
        try:
            found.append((int(path.name.split("-")[1]), path))
        except (IndexError, ValueError):
            continue
    return sorted(found)


def prune_checkpoints(directory: Path, keep_last: int, keep_every: int = 0) -> None:
    """Keep the last ``keep_last`` checkpoints and every ``keep_every``-th step."""
    checkpoints = list_checkpoints(directory)
    recent = {step for step, _ in checkpoints[-max(keep_last, 1):]}
    for step, path in checkpoints:
        if step in recent or (keep_every and step % keep_every == 0):
            continue
        shutil.rmtree(path, ignore_errors=True)


def remove_run(run_dir: Path) -> None:
    """Delete a finished run's checkpoints, and the job's directory above them once it is empty."""
    shutil.rmtree(run_dir, ignore_errors=True)
    try:
        run_dir.parent.rmdir()
    except OSError:  # other runs (other settings) of the same job are still there
        pass


def rng_state() -> dict[str, torch.Tensor]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for index, cuda_state in enumerate(torch.cuda.get_rng_state_all()):
            state[f"cuda{index}"] = cuda_state
    return state


def set_rng_state(state: Mapping[str, torch.Tensor]) -> None:
    torch.set_rng_state(state["torch"])
    cuda = [state[key] for key in sorted(k for k in state if k.startswith("cuda"))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def save_state(directory: Path, step: int, *, modules: Mapping[str, nn.Module] | None = None,
               tensors: Mapping[str, Mapping[str, torch.Tensor]] | None = None,
               objects: Mapping[str, object] | None = None, state: Mapping | None = None, keep_last: int = 2,
               keep_every: int = 0) -> Path:
    """One checkpoint, written atomically: ``<name>.safetensors`` per module (tied weights once;
    read back with :func:`read_module`) and per tensor dict, ``<name>.pt`` per optimiser/schedule
    state (tensors and plain values, read back with weights_only=True), ``state.json``. A crash
    mid-write leaves the previous checkpoints intact; at least two are kept, since rewriting the
    same step (an epoch's end) removes the old copy first."""
    target = directory / checkpoint_name(step)
    directory.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        tmp.mkdir()
        for name, module in (modules or {}).items():
            save_model(module, str(tmp / f"{name}.safetensors"), force_contiguous=True)
        for name, values in (tensors or {}).items():
            save_file(unshared(values), str(tmp / f"{name}.safetensors"))
        for name, value in (objects or {}).items():
            torch.save(value, tmp / f"{name}.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, **(state or {})}, indent=2))
    prune_checkpoints(directory, keep_last, keep_every)
    return target


def unshared(values: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU tensors safetensors can write: tied weights (one storage, two names) are copied."""
    seen, result = set(), {}
    for key, value in values.items():
        value = value.detach().contiguous().cpu()
        pointer = (value.untyped_storage().data_ptr(), value.storage_offset())
        result[key] = value.clone() if pointer in seen else value
        seen.add(pointer)
    return result


def load_latest_state(directory: Path, restore: Callable[[Path, dict], None]) -> dict | None:
    """``restore(path, state)`` from the newest checkpoint that loads cleanly; its state.json, or
    None when there is none. ``restore`` reads the files with :func:`read_tensors` and
    :func:`read_object`; a truncated or corrupt checkpoint falls back to an older one."""
    for step, path in reversed(list_checkpoints(directory)):
        try:
            state = json.loads((path / "state.json").read_text())
            restore(path, state)
            log.info("resumed from %s (step %d)", path, state["step"])
            return state
        except Exception as error:
            log.warning("checkpoint %s is unreadable (%s: %s); trying the previous one",
                        path, type(error).__name__, error)
    return None


def read_tensors(path: Path, name: str) -> dict[str, torch.Tensor]:
    return load_file(str(path / f"{name}.safetensors"))


def read_module(path: Path, name: str, module: nn.Module) -> None:
    """Load a module saved by :func:`save_state` (every parameter and buffer, strictly)."""
    load_model(module, str(path / f"{name}.safetensors"))


def read_object(path: Path, name: str):
    return torch.load(path / f"{name}.pt", weights_only=True)


def hash_files(digest, paths: Iterable[str | Path]) -> None:
    """Feed each file (every file below a directory, in name order) to ``digest``: name, then bytes."""
    for path in paths:
        for file in sorted(Path(path).rglob("*")) if Path(path).is_dir() else [Path(path)]:
            if file.is_file():
                digest.update(file.name.encode())
                with open(file, "rb") as handle:
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(block)


def fingerprint(values: Mapping, paths: Sequence[str | Path] = (), data: Iterable[str] = ()) -> str:
    """A short id of what fixes a run: settings, the contents of its starting files and its data.
    Checkpoints live under it, so a run with other settings or inputs starts afresh."""
    import hashlib

    digest = hashlib.blake2b(digest_size=6)
    digest.update(json.dumps(values, sort_keys=True, default=list).encode())
    hash_files(digest, paths)
    for item in data:
        digest.update(item.encode())
        digest.update(b"\0")
    return digest.hexdigest()


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


# --- several processes -------------------------------------------------------------------------

@dataclass
class Processes:
    """This process's place in a torchrun job (rank 0 of 1 without one)."""

    rank: int = 0
    world: int = 1
    control: object = None  # a gloo group for CPU-side agreement (stop flags, barriers)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def any(self, flag: bool) -> bool:
        """True on every process when ``flag`` is true on any (a signal may reach them at different steps)."""
        if self.world == 1:
            return flag
        import torch.distributed as dist

        value = torch.tensor([int(flag)])
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=self.control)
        return bool(value.item())

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier(group=self.control)

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor)
        return tensor

    def same(self, value: int, what: str) -> None:
        """Fail loudly when processes disagree (e.g. on the step they resumed from)."""
        if self.world == 1:
            return
        import torch.distributed as dist

        values = torch.tensor([value, -value])
        dist.all_reduce(values, op=dist.ReduceOp.MAX, group=self.control)
        if int(values[0]) != -int(values[1]):
            raise RuntimeError(f"processes disagree on {what}: from {-int(values[1])} to {int(values[0])}")


def join_processes(distributed: bool, device: str, setting: str = "training.distributed"
                   ) -> tuple[Processes, str]:
    """Join torchrun's process group when started by it; return this process's place and device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Processes(), device
    if not distributed:
        raise ConfigError(setting, f"started by torchrun with {world} processes but distributed "
                          "training is off", "set training.gpus in the workflow, or distributed: true")
    import torch.distributed as dist

    cuda = device.startswith("cuda")
    if cuda:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    control = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else None
    return Processes(rank=dist.get_rank(), world=dist.get_world_size(), control=control), device


def is_main_process() -> bool:
    """False on torchrun's processes other than rank 0 (they write no files)."""
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def wrap_ddp(model: nn.Module, device: str) -> nn.Module:
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    # The model's buffers (position ids) are constants: no need to broadcast them before every forward.
    options = inspect.signature(DistributedDataParallel).parameters
    buffers = {"forward_sync_buffers": False} if "forward_sync_buffers" in options else {"broadcast_buffers": False}
    device_ids = [torch.device(device).index] if device.startswith("cuda") else None
    return DistributedDataParallel(model, device_ids=device_ids, **buffers)


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    """Torch's seed for a step (dropout, sampling); each process of a multi-GPU run draws its own."""
    return seed * 1_000_003 + step + rank * 1_000_000_000_039


# --- the batches of a step ---------------------------------------------------------------------

def shard_batch(batch, rank: int, world: int):
    """Rows ``rank::world`` of a batch (anything with ``apply``): each process's share."""
    if world == 1:
        return batch
    return batch.apply(lambda tensor: tensor[rank::world])


@dataclass
class MicroBatch:
    """This process's share of one micro-step, ready for the model."""

    batches: dict  # by batch key: a language, or an objective's own key (translation pairs)
    weights: dict[str, float]  # this share's targets / the whole micro-step's, times the world size
    tokens: int  # non-padding tokens of the whole micro-step (all processes)


def prepare_step(make_batches: Callable[[int, int], Mapping], step: int, accumulation: int = 1, rank: int = 0,
                 world: int = 1, pin: bool = False) -> list[MicroBatch]:
    """Every micro-batch of a step for one process (a pure function of its arguments).

    ``make_batches(step, micro)`` draws the whole micro-step's batches by key; each batch has
    ``apply(function)``, ``targets()`` (the tokens its loss averages over) and ``tokens()``.
    """
    micros = []
    for micro in range(accumulation):
        full = make_batches(step, micro)
        batches, weights = {}, {}
        for key, batch in full.items():
            share = shard_batch(batch, rank, world)
            if world > 1:
                # A process's mean loss weighted by its share of the targets, so that DDP's average
                # of the processes' gradients is the gradient of the whole micro-step's mean loss.
                weights[key] = share.targets() * world / batch.targets()
            else:
                weights[key] = 1.0
            if pin:
                share = share.apply(torch.Tensor.pin_memory)
            batches[key] = share
        micros.append(MicroBatch(batches, weights, sum(b.tokens() for b in full.values())))
    return micros


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


# --- metric logs -------------------------------------------------------------------------------

def write_metrics(path: str | os.PathLike, rows: Sequence[Mapping]) -> None:
    """Rewrite a metric log with ``rows`` (none: remove it), atomically."""
    path = Path(path)
    if not rows:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[-1]), restval="")
            writer.writeheader()
            writer.writerows({key: row.get(key, "") for key in rows[-1]} for row in rows)


def append_metrics(path: str | os.PathLike, row: Mapping, first: bool) -> None:
    """Add a row to a CSV log (a new log when ``first``); a log with other columns is rewritten."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new_file = first or not path.exists()
    if not new_file:
        with open(path, newline="") as handle:
            header = next(csv.reader(handle), [])
        if header != list(row):  # a log begun by an older version: rewrite it with the new columns
            with open(path, newline="") as handle:
                rows = list(csv.DictReader(handle))
            write_metrics(path, [*rows, row])
            return
    with open(path, "w" if new_file else "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        if new_file:
            writer.writeheader()
        writer.writerow(row)


def tensorboard_writer(directory: Path, start: int):
    """A SummaryWriter under ``directory`` when tensorboard is installed (the CSV log is the record)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    # purge_step hides events a killed run logged after the checkpoint it is resumed from.
    return SummaryWriter(log_dir=str(directory), purge_step=start + 1 if start else None)


def log_scalars(writer, row: Mapping) -> None:
    """Every number of a metric row; ``loss_<stream>`` as ``loss/<stream>`` (an empty cell: not trained yet)."""
    step = int(row["step"])
    for key, value in row.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        writer.add_scalar(f"loss/{key[len('loss_'):]}" if key.startswith("loss_") else key, value, step)
    writer.flush()


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
    """

    def __init__(self, model: nn.Module, updates: Updates, *, steps: int, seed: int,
                 checkpoint_dir: str | Path | None = None, checkpoint_every: int = 0, keep_last: int = 2,
                 keep_every: int = 0, learning_rate: Callable[[int], float] | None = None, save_last: bool = False,
                 desc: str = "train", progress: bool = True, processes: Processes | None = None,
                 metrics_path: str | Path | None = None, tensorboard_dir: str | Path | None = None,
                 settings: Mapping | None = None):
        self.model, self.updates = model, updates
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
        """Checkpoint the current step (rank 0 writes; no process runs ahead meanwhile)."""
        if self.processes.main:
            state = {"rows": self.rows, **({"settings": self.settings} if self.settings is not None else {})}
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
        on the last micro-batch. ``drop_gradients``: parameters this update leaves as they are
        (a training stage under DDP, which needs every gradient exchanged). Returns each stream's
        loss (this process's weighted share) and whether the step trained it."""
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
