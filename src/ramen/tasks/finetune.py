"""The fine-tuning skeleton every task trains with: the settings all share, the optimiser, the
epoch loop (resumable after a kill, epoch selected on the dev score, every epoch kept for a model
shared by every language) and the atomic save of the model directory.

A task writes what is its own, its model, how a batch's loss is computed and how an epoch is
scored, and hands them to :class:`Finetuning`::

    with seeded(settings):
        model = ...  # built after the seed: a new head's initial weights come from it
        run = Finetuning(model, settings, train_size=len(train), out_dir=out_dir, desc="my task")
        history, best_epoch = run.train(lengths, batch_loss, evaluate)
        run.save({"task": "my-task", "selected_epoch": best_epoch, ...}, save_my_model)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from ramen.errors import ConfigError, RamenError
from ramen.io import atomic_path
from ramen.tasks.common import torch_threads
from ramen.tasks.epochs import EpochKeeper
from ramen.training.checkpoints import fingerprint, remove_run, tied_once
from ramen.training.loops import EpochLoop, skip
from ramen.training.optimisation import decay_groups, linear_warmup_decay, Updates
from ramen.training.settings import check_accumulation, check_precision

logger = logging.getLogger(__name__)


@dataclass
class FinetuneSettings:
    """What every fine-tuning sets; a task's settings subclass this, change the defaults it needs
    and add its own fields and checks (:meth:`check`). Defaults follow the paper (§3.3)."""

    SECTION: ClassVar[str] = "tasks.<task>.settings"  # where the settings live in the config

    epochs: int = 4
    batch_size: int = 32
    learning_rate: float = 1e-5
    max_length: int = 128
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    freeze_embeddings: bool = True  # the foreign table must fit the body it is swapped into
    seed: int = 1
    threads: int | None = None  # None: leave torch's default
    eval_batch_size: int = 128
    grad_accumulation: int = 1  # micro-batches per batch: the same updates in less memory
    precision: str = "fp32"  # or bf16/fp16 autocast (fp16 with loss scaling), auto: bf16 on a GPU that has it

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, prefix: str | None = None) -> None:
        """Raise a ConfigError naming ``prefix.<field>`` (default: :attr:`SECTION`) for a bad value."""
        prefix = prefix or self.SECTION

        def need(ok: bool, name: str, problem: str) -> None:
            if not ok:
                raise ConfigError(f"{prefix}.{name}", problem)

        for name in ("epochs", "batch_size", "eval_batch_size"):
            need(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        need(self.learning_rate > 0, "learning_rate", f"must be > 0, got {self.learning_rate}")
        need(self.max_length >= 4, "max_length", f"must be >= 4, got {self.max_length}")
        need(0 <= self.warmup_ratio < 1, "warmup_ratio", f"must be in [0, 1), got {self.warmup_ratio}")
        need(self.weight_decay >= 0, "weight_decay", f"must be >= 0, got {self.weight_decay}")
        need(self.max_grad_norm > 0, "max_grad_norm", f"must be > 0, got {self.max_grad_norm}")
        need(self.threads is None or self.threads >= 1, "threads", f"must be >= 1, got {self.threads}")
        check_accumulation(self.grad_accumulation, f"{prefix}.grad_accumulation")
        check_precision(self.precision, f"{prefix}.precision")
        self.check(need)

    def check(self, need: Callable[[bool, str, str], None]) -> None:
        """A task's own checks: ``need(ok, field, problem)`` for each."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@contextlib.contextmanager
def seeded(settings: FinetuneSettings):
    """Inside the block torch uses ``settings.threads`` threads and its global generator starts at
    ``settings.seed`` (a new head's weights and dropout are drawn from it)."""
    with torch_threads(settings.threads):
        torch.manual_seed(settings.seed)
        yield


def train_batches(
    lengths: Sequence[int], batch_size: int, generator: torch.Generator, group_by_length: bool = True
) -> list[list[int]]:
    """Shuffled batches of indices; with grouping, neighbours in a batch have similar length."""
    order = torch.randperm(len(lengths), generator=generator).tolist()
    if not group_by_length:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    # Sort within mega-chunks only, so batches stay random across the data set.
    mega = batch_size * 50
    batches: list[list[int]] = []
    for start in range(0, len(order), mega):
        chunk = sorted(order[start : start + mega], key=lambda i: lengths[i], reverse=True)
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    shuffle = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in shuffle]


def build_optimizer(model: nn.Module, settings: FinetuneSettings, total_steps: int):
    """AdamW over the trainable parameters (no decay on biases and norms) with linear warmup then
    linear decay to 0."""
    optimizer = torch.optim.AdamW(decay_groups(model.parameters(), settings.weight_decay), lr=settings.learning_rate)
    return optimizer, linear_warmup_decay(optimizer, settings.warmup_ratio, total_steps)


class Finetuning:
    """One fine-tuning of ``model`` on ``train_size`` examples: optimiser, resumable epoch loop and save.

    With ``checkpoint_dir`` a checkpoint every ``checkpoint_every`` updates and at every epoch's
    end (under a fingerprint of the settings, ``fingerprint_values`` when given, the contents of
    the ``inputs`` directories and the ``data`` strings) lets a killed run resume exactly; they
    are removed once the model is saved. ``keep_epochs``: every epoch's model is kept and
    published to ``out_dir`` (ramen.tasks.epochs) instead of the selected one.
    ``optimizer(model, settings, total_steps)`` gives the optimiser and its schedule.
    """

    def __init__(self, model: nn.Module, settings: FinetuneSettings, *, train_size: int,
                 out_dir: str | os.PathLike, checkpoint_dir: str | os.PathLike | None = None,
                 checkpoint_every: int = 0, fingerprint_values: Mapping | None = None,
                 inputs: Sequence[str | os.PathLike] = (), data: Iterable[str] = (), keep_epochs: bool = False,
                 desc: str = "fine-tune", progress: bool = True,
                 optimizer: Callable = build_optimizer):
        self.model, self.settings, self.out_dir = model, settings, Path(out_dir)
        self.steps_per_epoch = math.ceil(train_size / settings.batch_size)
        self.total_steps = self.steps_per_epoch * settings.epochs
        self.optimizer, self.scheduler = optimizer(model, settings, self.total_steps)
        self.generator = torch.Generator().manual_seed(settings.seed)
        self.run_dir = None
        if checkpoint_dir is not None:
            values = settings.to_dict() if fingerprint_values is None else fingerprint_values
            self.run_dir = Path(checkpoint_dir) / fingerprint(values, list(inputs), data)
        trainable = [p for p in model.parameters() if p.requires_grad]
        updates = Updates(self.optimizer, scheduler=self.scheduler, max_grad_norm=settings.max_grad_norm,
                          accumulation=settings.grad_accumulation, precision=settings.precision,
                          device=str(next(model.parameters()).device), parameters=trainable)
        self.loop = EpochLoop(model, updates, epochs=settings.epochs, steps_per_epoch=self.steps_per_epoch,
                              generator=self.generator, checkpoint_dir=self.run_dir,
                              checkpoint_every=checkpoint_every, desc=desc, progress=progress)
        self.keeper = EpochKeeper(out_dir, self.run_dir) if keep_epochs else None

    def train(self, lengths: Sequence[int], batch_loss: Callable, evaluate: Callable[[int], tuple], *,
              share: Callable | None = None, save_epoch: Callable[[Path, int], None] | None = None,
              train_mode: Callable[[], None] | None = None, group_by_length: bool = True,
              log_every: int = 0) -> tuple[list[dict], int | None]:
        """Run the epochs left, from where a killed run stopped.

        Each epoch draws shuffled batches of the training rows (``lengths``: their lengths, for
        :func:`train_batches`) and makes one update per batch, ``batch_loss(indices)`` giving the
        mean loss of some rows (``share(indices)``: how to weigh a micro-batch of the batch, see
        :meth:`ramen.training.optimisation.Updates.batch`). ``evaluate(epoch)`` then returns the epoch's
        dev score (None: no dev set, the last epoch is kept) and its dev rows. With
        ``keep_epochs`` ``save_epoch(path, epoch)`` saves the epoch's model (before the epoch's
        checkpoint, so a resumed run has it). ``train_mode()`` (default ``model.train()``) puts
        the model in training mode at each epoch's start.

        Returns the dev history and the selected epoch; the model holds that epoch's weights.
        """
        loop, settings = self.loop, self.settings
        train_mode = train_mode or self.model.train
        for epoch, done in loop.epochs_to_run():
            train_mode()
            batches = train_batches(lengths, settings.batch_size, self.generator, group_by_length)
            for indices in skip(batches, done):
                loss = loop.update(indices, batch_loss, share(indices) if share else None)
                if log_every and loop.step % log_every == 0:
                    logger.info("step %d/%d epoch %d loss %.4f lr %.3g", loop.step, self.total_steps, epoch, loss,
                                self.scheduler.get_last_lr()[0])
            logger.info("epoch %d step %d train loss %.4f", epoch, loop.step, loop.train_loss)
            score, rows = evaluate(epoch)
            if self.keeper:
                save_epoch(self.keeper.path(epoch), epoch)
                self.keeper.saved(epoch, loop.step, loop.train_loss)
            loop.end_epoch(score, rows)
        return loop.finish()

    def save(self, meta: Mapping, save: Callable[[Path, Mapping], None], shared: Sequence[str] = ()) -> None:
        """Write the output: ``save(out_dir, meta)`` the selected model, or with ``keep_epochs`` the
        kept epochs with the ``shared`` keys of ``meta`` as their index; then drop the checkpoints."""
        if self.keeper:
            self.keeper.publish(self.settings.epochs, {key: meta[key] for key in shared})
        else:
            save(self.out_dir, meta)
        if self.run_dir is not None:
            remove_run(self.run_dir)  # the model is the job's output now


def save_model_dir(out_dir: str | os.PathLike, model: nn.Module, tokenizer, meta_name: str, meta: Mapping, *,
                   weights_name: str | None = None) -> None:
    """A task model's directory, written atomically: its weights, config, ``tokenizer`` (when
    given) and ``meta`` as JSON (``meta_name``). ``weights_name``: a task module holding a bare
    encoder as ``.encoder``, saved whole as safetensors with the encoder's config; None: a
    Hugging Face model's ``save_pretrained``."""
    with atomic_path(out_dir) as tmp:
        if weights_name is None:
            model.save_pretrained(tmp)
        else:
            from safetensors.torch import save_file

            tmp.mkdir()
            save_file(tied_once(model), str(tmp / weights_name), metadata={"format": "pt"})
            model.encoder.config.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        (tmp / meta_name).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def read_model_meta(out_dir: str | os.PathLike, meta_name: str, meta_format: int, what: str) -> dict:
    """The metadata JSON of a task model saved by :func:`save_model_dir`, refused when it is not
    there (``what``: "an NLI classifier", ...) or of another format."""
    path = Path(out_dir) / meta_name
    if not path.is_file():
        raise RamenError(f"{out_dir}: not a saved {what} (no {meta_name})")
    meta = json.loads(path.read_text(encoding="utf-8"))
    if meta.get("format") != meta_format:
        raise RamenError(f"{path}: unsupported format {meta.get('format')!r} (expected {meta_format})")
    return meta
