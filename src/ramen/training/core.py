"""What every training loop of ramen shares: optimiser and schedule, clipped updates, progress,
signals, and numbered checkpoints that a killed job resumes from.

The bilingual trainer (:mod:`ramen.training.trainer`) derives every random choice from
(seed, step) and needs no RNG state in its checkpoints. The fine-tuning loops (XNLI, UD parsing)
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

import contextlib
import json
import logging
import math
import shutil
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ramen.errors import ConfigError, RamenError
from ramen.io import atomic_path

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


PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def check_precision(precision: str, setting: str) -> None:
    if precision not in PRECISIONS:
        raise ConfigError(setting, f"unknown precision '{precision}'", f"choose from {list(PRECISIONS)}")


def check_accumulation(accumulation: int, setting: str) -> None:
    if not isinstance(accumulation, int) or accumulation < 1:
        raise ConfigError(setting, f"{accumulation!r}: the micro-batches per update must be a positive integer")


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


def save_state(directory: Path, step: int, *, tensors: Mapping[str, Mapping[str, torch.Tensor]],
               objects: Mapping[str, object], state: Mapping, keep_last: int = 2) -> Path:
    """One checkpoint, written atomically: ``<name>.safetensors`` per tensor dict, ``<name>.pt``
    per optimiser/schedule state (tensors and plain values, read back with weights_only=True),
    ``state.json``. A crash mid-write leaves the previous checkpoints intact; two are kept, since
    rewriting the same step (an epoch's end) removes the old copy first."""
    target = directory / checkpoint_name(step)
    directory.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        tmp.mkdir()
        for name, values in tensors.items():
            save_file(unshared(values), str(tmp / f"{name}.safetensors"))
        for name, value in objects.items():
            torch.save(value, tmp / f"{name}.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=2))
    prune_checkpoints(directory, keep_last)
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
        self.model.load_state_dict(read_tensors(path, "model"))
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
        tensors = {"model": self.model.state_dict(), "rng": rng_state(),
                   "generator": {"epoch_start": self._epoch_generator}}
        if self.best_state is not None:
            tensors["best"] = self.best_state
        state = {"epoch": self.epoch, "done_in_epoch": self.done_in_epoch, "total_steps": self.total_steps,
                 "loss_sum": self.loss_sum, "loss_count": self.loss_count, "history": self.history,
                 "best_score": None if self.best_score == -math.inf else self.best_score,
                 "best_epoch": self.best_epoch}
        save_state(self.directory, self.step, tensors=tensors, objects={"updates": self.updates.state_dict()},
                   state=state)
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


class StepLoop:
    """Updates numbered 1..steps whose batches are drawn from (seed, step), as char2subword's
    approximation and pre-training and NMT training draw theirs; torch's RNG (dropout, drop-net)
    is seeded from (seed, step) before each step, and ``learning_rate(step)``, when given, sets
    the step's rate. A checkpoint therefore holds only the weights, the :class:`Updates` state
    and the metric rows so far. ``save_last`` keeps a checkpoint of the final step (a rerun with
    more steps continues from it); otherwise the caller removes the checkpoints
    (:func:`remove_run`) once it has saved what was trained.
    """

    def __init__(self, model: nn.Module, updates: Updates, *, steps: int, seed: int,
                 checkpoint_dir: str | Path | None = None, checkpoint_every: int = 0, keep_last: int = 2,
                 learning_rate: Callable[[int], float] | None = None, save_last: bool = False,
                 desc: str = "train", progress: bool = True):
        self.model, self.updates = model, updates
        self.steps, self.seed, self.learning_rate = steps, seed, learning_rate
        self.directory = Path(checkpoint_dir) if checkpoint_dir else None
        self.checkpoint_every = checkpoint_every if self.directory else 0
        self.keep_last, self.save_last = keep_last, save_last and self.directory is not None
        self.step, self.rows = 0, []
        self.desc, self.progress = desc, progress
        if self.directory is not None:
            state = load_latest_state(self.directory, self._restore)
            if state is not None:
                self.step, self.rows = state["step"], state["rows"]

    def _restore(self, path: Path, state: dict) -> None:
        self.model.load_state_dict(read_tensors(path, "model"))
        self.updates.load_state_dict(read_object(path, "updates"))

    def save(self) -> None:
        save_state(self.directory, self.step, tensors={"model": self.model.state_dict()},
                   objects={"updates": self.updates.state_dict()}, state={"rows": self.rows},
                   keep_last=self.keep_last)

    def steps_to_run(self):
        """Yields the step numbers still to run, with torch's RNG seeded (and the rate set) for the step."""
        from tqdm import tqdm

        with StopRequested() as stop, tqdm(total=self.steps, initial=self.step, desc=self.desc, unit="step",
                                           disable=not self.progress, mininterval=5) as bar:
            for step in range(self.step + 1, self.steps + 1):
                torch.manual_seed(self.seed * 1_000_003 + step)
                if self.learning_rate is not None:
                    for group in self.updates.optimizer.param_groups:
                        group["lr"] = self.learning_rate(step)
                yield step
                if self.step != step:
                    raise RuntimeError(f"StepLoop: update() was not called in step {step}")
                bar.update(1)
                due = self.checkpoint_every and step % self.checkpoint_every == 0
                if due or (self.directory is not None and stop.requested) or (self.save_last and step == self.steps):
                    self.save()
                if stop.requested:
                    raise TrainingInterrupted(f"stopped by signal at update {step}; rerun to resume from "
                                              f"{self.directory / checkpoint_name(step) if self.directory else '-'}")

    def update(self, rows, loss_of: Callable, share: Callable | None = None) -> float:
        """One update from a batch's ``rows`` (see :meth:`Updates.batch`); the batch's mean loss."""
        value = self.updates.batch(rows, loss_of, share)
        self.step += 1
        return value

    def log(self, row: dict) -> None:
        self.rows.append(row)
