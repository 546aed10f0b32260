"""Training an NMT model: Adam with the inverse-sqrt schedule, label smoothing, resumable checkpoints.

The batch order and every random draw (dropout, drop-net) depend only on the seed
and the step, so a run resumed from a checkpoint continues exactly where an
uninterrupted run would have been (the core's StepLoop).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from ramen.io import atomic_path
from ramen.nmt.data import EncodedText, FrozenBert, pad_batch, token_batches
from ramen.nmt.model import NmtModelConfig, TransformerNmt
from ramen.training.checkpoints import fingerprint as run_id
from ramen.training.loops import StepLoop
from ramen.training.optimisation import Updates
from ramen.training.schedules import inverse_sqrt
from ramen.training.settings import check_accumulation, check_precision

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NmtTrainSettings:
    steps: int = 50000
    max_tokens: int = 4096       # padded tokens per side per update (the paper: 4k per GPU)
    peak_lr: float = 0.0005
    init_lr: float = 1e-7
    warmup_steps: int = 4000
    adam_betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.0001
    label_smoothing: float = 0.1
    max_grad_norm: float = 0.0   # 0: no clipping (fairseq's default)
    seed: int = 1
    log_every: int = 100
    eval_every: int = 1000       # dev loss every N updates (and at the end)
    checkpoint_every: int = 1000
    keep_last: int = 2
    grad_accumulation: int = 1   # micro-batches per update: the same updates in less memory
    precision: str = "fp32"      # or bf16/fp16 autocast (fp16 with loss scaling), auto: bf16 on a GPU that has it

    def __post_init__(self):
        check_accumulation(self.grad_accumulation, "nmt_training.grad_accumulation")
        check_precision(self.precision, "nmt_training.precision")

    def learning_rate(self, step: int) -> float:
        """fairseq's inverse_sqrt: linear warm-up from init_lr to peak_lr, then peak·sqrt(warmup/step)."""
        return inverse_sqrt(step, self.peak_lr, self.warmup_steps, self.init_lr)


@dataclass
class ParallelData:
    source: EncodedText
    target: EncodedText
    bert: EncodedText | None = None

    def __post_init__(self):
        if len(self.source) != len(self.target) or (self.bert is not None and len(self.bert) != len(self.source)):
            raise ValueError("source, target and BERT inputs must have one entry per sentence pair")


@dataclass
class Batch:
    source: torch.Tensor
    target_input: torch.Tensor
    target_output: torch.Tensor
    bert_ids: torch.Tensor | None


def make_batch(data: ParallelData, indices: np.ndarray, pad_id: int, bos_id: int, bert_pad_id: int = 0) -> Batch:
    """Source rows end with EOS; the decoder reads BOS + target and predicts target + EOS."""
    targets = [data.target[i] for i in indices]
    return Batch(
        source=pad_batch([data.source[i] for i in indices], pad_id),
        target_input=pad_batch([row[:-1] for row in targets], pad_id, prefix=bos_id),
        target_output=pad_batch(targets, pad_id),
        bert_ids=None if data.bert is None else pad_batch([data.bert[i] for i in indices], bert_pad_id),
    )


def epoch_batches(data: ParallelData, settings: NmtTrainSettings, epoch: int) -> list[np.ndarray]:
    rng = np.random.default_rng([settings.seed, epoch])
    return token_batches(data.source.lengths(), data.target.lengths() + 1, settings.max_tokens, rng)


def batch_schedule(data: ParallelData, settings: NmtTrainSettings, first: int, last: int):
    """Yield (step, indices) for steps first..last, epoch after epoch of shuffled length buckets."""
    step, epoch = 0, 0
    while step < last:
        batches = epoch_batches(data, settings, epoch)
        if step + len(batches) < first:  # skip whole epochs on resume without building batches
            step += len(batches)
            epoch += 1
            continue
        for indices in batches:
            step += 1
            if step > last:
                return
            if step >= first:
                yield step, indices
        epoch += 1


def translation_loss(model: TransformerNmt, batch: Batch, bert: FrozenBert | None, label_smoothing: float,
                     device: str) -> tuple[torch.Tensor, int]:
    """Summed label-smoothed cross-entropy over target tokens, and their count."""
    bert_states = bert_padding = None
    if bert is not None and batch.bert_ids is not None:
        bert_states, bert_padding = bert(batch.bert_ids)
    logits = model(batch.source.to(device), batch.target_input.to(device), bert_states, bert_padding)
    targets = batch.target_output.to(device)
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1),
                           ignore_index=model.config.pad_id, label_smoothing=label_smoothing, reduction="sum")
    return loss, int(targets.ne(model.config.pad_id).sum())


@torch.no_grad()
def dev_loss(model, data: ParallelData, bert, settings: NmtTrainSettings, pad_id: int, bos_id: int,
             device: str) -> float:
    """Per-token cross-entropy (no smoothing) on a dev set, in eval mode."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    bert_pad = bert.pad_id if bert is not None else 0
    for indices in token_batches(data.source.lengths(), data.target.lengths() + 1, settings.max_tokens):
        loss, tokens = translation_loss(model, make_batch(data, indices, pad_id, bos_id, bert_pad), bert, 0.0, device)
        total, count = total + float(loss), count + tokens
    model.train(was_training)
    return total / max(count, 1)


def fingerprint(settings: NmtTrainSettings, model_config: NmtModelConfig, start_files=()) -> str:
    """Checkpoints live under this id (the core's run id): other settings or another starting
    model start afresh, while more ``steps`` extend the same run."""
    trajectory = {key: value for key, value in asdict(settings).items()
                  if key not in ("steps", "log_every", "eval_every", "checkpoint_every", "keep_last")}
    return run_id({"training": trajectory, "model": model_config.to_dict()}, start_files)


def make_optimizer(model: TransformerNmt, settings: NmtTrainSettings) -> torch.optim.Optimizer:
    # Adam with decoupled weight decay: fairseq's `adam` optimizer with --weight-decay is AdamW.
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings.init_lr,
                             betas=tuple(settings.adam_betas), weight_decay=settings.weight_decay)


def save_model(model: TransformerNmt, out_dir: str | os.PathLike, extra: dict | None = None) -> None:
    """``model.safetensors`` + ``config.json``: everything needed to rebuild the model."""
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        save_file(model.state_dict(), str(tmp / "model.safetensors"))
        (tmp / "config.json").write_text(json.dumps({**model.config.to_dict(), **(extra or {})}, indent=2))


def load_model(directory: str | os.PathLike, **overrides) -> tuple[TransformerNmt, dict]:
    """A saved model and its config.json (``overrides`` change config values, e.g. drop_net)."""
    meta = json.loads((Path(directory) / "config.json").read_text())
    names = set(NmtModelConfig.__dataclass_fields__)
    config = NmtModelConfig(**{**{k: v for k, v in meta.items() if k in names}, **overrides})
    model = TransformerNmt(config)
    model.load_state_dict(load_file(str(Path(directory) / "model.safetensors")))
    return model, meta


def train(model: TransformerNmt, train_data: ParallelData, dev_data: ParallelData, bert: FrozenBert | None,
          settings: NmtTrainSettings, checkpoint_dir: str | os.PathLike, metrics_path: str | os.PathLike,
          bos_id: int, device: str = "cpu") -> list[dict]:
    """Train for ``settings.steps`` updates, resuming from ``checkpoint_dir``; return the metric rows."""
    model.to(device).train()
    pad_id = model.config.pad_id
    bert_pad = bert.pad_id if bert is not None else 0
    updates = Updates(make_optimizer(model, settings), max_grad_norm=settings.max_grad_norm,
                      accumulation=settings.grad_accumulation, precision=settings.precision, device=device,
                      parameters=list(model.parameters()))
    # Every update's dropout and drop-net draws are seeded from (seed, step); the last step's
    # checkpoint stays, so a rerun with more steps continues from it.
    loop = StepLoop(model, updates, steps=settings.steps, seed=settings.seed, checkpoint_dir=checkpoint_dir,
                    checkpoint_every=settings.checkpoint_every, keep_last=settings.keep_last,
                    learning_rate=settings.learning_rate, save_last=True, desc="nmt",
                    metrics_path=metrics_path)
    schedule = batch_schedule(train_data, settings, loop.step + 1, settings.steps)
    window_loss, window_tokens, window_start = 0.0, 0, time.perf_counter()
    for step in loop.steps_to_run():
        _, indices = next(schedule)
        tokens = int(train_data.target.lengths()[indices].sum())  # the predicted tokens (EOS included)

        def loss_of(part):
            loss, _ = translation_loss(model, make_batch(train_data, part, pad_id, bos_id, bert_pad), bert,
                                       settings.label_smoothing, device)
            return loss / tokens  # a per-token mean over the whole batch, micro-batch or not

        value = loop.update(indices, loss_of, share=lambda part: 1.0)
        window_loss, window_tokens = window_loss + value * tokens, window_tokens + tokens
        evaluate = step % settings.eval_every == 0 or step == settings.steps
        if step % settings.log_every == 0 or evaluate:
            elapsed = time.perf_counter() - window_start
            row = {"step": step, "train_loss": round(window_loss / max(window_tokens, 1), 5),
                   "dev_loss": "", "lr": settings.learning_rate(step),
                   "tokens_per_s": round(window_tokens / max(elapsed, 1e-9), 1)}
            if evaluate:
                row["dev_loss"] = round(dev_loss(model, dev_data, bert, settings, pad_id, bos_id, device), 5)
            log.info("step %d: %s", step, row)
            loop.log(row)
            window_loss, window_tokens, window_start = 0.0, 0, time.perf_counter()
    return loop.rows
