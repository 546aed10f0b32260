"""Masked-LM training of the bilingual model: batches, masking, schedule, checkpoints, loop.

Every random choice of a step (which sentences, which tokens are masked, dropout)
is seeded from (seed, step), so a run resumed from a checkpoint sees exactly the
batches and masks an uninterrupted run would have seen.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import shutil
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_model, save_model

from ramen.encode import TokenStream
from ramen.errors import ConfigError
from ramen.io import atomic_path
from ramen.model import IGNORE_INDEX, BilingualMaskedLM, MaskedBatch

log = logging.getLogger(__name__)

PARAMETER_GROUPS = ("encoder", "head", "source_embeddings", "foreign_embeddings")


@dataclass
class SpecialIds:
    """Token ids a language's tokenizer reserves; masking and padding need them."""

    cls: int
    sep: int
    pad: int
    mask: int
    all_special: list[int]
    vocab_size: int

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "SpecialIds":
        cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        sep_id = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
        return cls(cls=cls_id, sep=sep_id, pad=tokenizer.pad_token_id, mask=tokenizer.mask_token_id,
                   all_special=sorted(set(tokenizer.all_special_ids)), vocab_size=len(tokenizer))


@dataclass
class TrainSettings:
    steps: int
    batch_size: int  # sequences per language per update (the paper's batch is half English, half foreign)
    seq_len: int = 128
    peak_lr: float = 1e-4
    init_lr: float = 1e-7
    warmup_steps: int = 4000
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    mask_prob: float = 0.15
    grad_accumulation: int = 1
    train: Sequence[str] = ("encoder", "head", "foreign_embeddings")
    seed: int = 0
    log_every: int = 10
    checkpoint_every: int = 0  # 0: only at the end and on SIGTERM/SIGUSR1
    keep_last: int = 2
    keep_every: int = 0  # also keep every M-th step's checkpoint (0: none)
    threads: int = 0

    def __post_init__(self):
        unknown = set(self.train) - set(PARAMETER_GROUPS)
        if unknown:
            raise ConfigError("training.train", f"unknown parameter groups {sorted(unknown)}",
                              f"choose from {list(PARAMETER_GROUPS)}")
        if self.seq_len < 8:
            raise ConfigError("training.seq_len", f"{self.seq_len} is too short")


def learning_rate(step: int, settings: TrainSettings) -> float:
    """Linear warm-up from ``init_lr`` to ``peak_lr``, then inverse square root decay (§3.3)."""
    if settings.warmup_steps > 0 and step < settings.warmup_steps:
        return settings.init_lr + (settings.peak_lr - settings.init_lr) * step / settings.warmup_steps
    return settings.peak_lr * math.sqrt(max(settings.warmup_steps, 1) / max(step, 1))


def step_rng(seed: int, step: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, step, stream])


def sample_blocks(stream: TokenStream, rng: np.random.Generator, count: int, length: int) -> np.ndarray:
    """``count`` windows of ``length`` token ids starting at random sentence starts.

    A window runs on across sentence boundaries, as BERT's packed inputs do; one
    that reaches the end of the corpus is shorter, marked by -1 padding.
    """
    starts = stream.offsets[rng.integers(0, stream.num_sentences, size=count)]
    blocks = np.full((count, length), -1, dtype=np.int64)
    for row, start in enumerate(starts):
        window = stream.ids[start:start + length]
        blocks[row, :len(window)] = window
    return blocks


def mask_tokens(input_ids: np.ndarray, maskable: np.ndarray, special: SpecialIds, rng: np.random.Generator,
                mask_prob: float) -> tuple[np.ndarray, np.ndarray]:
    """BERT's dynamic masking: choose ``mask_prob`` of maskable tokens (at least one per row);
    replace 80% with [MASK], 10% with a random non-special token, keep 10%."""
    scores = rng.random(input_ids.shape)
    scores[~maskable] = 2.0
    chosen = (scores < mask_prob) & maskable
    first = scores.argmin(axis=1)
    rows = np.arange(len(input_ids))
    chosen[rows, first] |= maskable[rows, first]
    labels = np.where(chosen, input_ids, IGNORE_INDEX)
    action = rng.random(input_ids.shape)
    masked = input_ids.copy()
    masked[chosen & (action < 0.8)] = special.mask
    randomise = chosen & (action >= 0.8) & (action < 0.9)
    candidates = np.setdiff1d(np.arange(special.vocab_size), special.all_special)
    masked[randomise] = candidates[rng.integers(0, len(candidates), size=int(randomise.sum()))]
    return masked, labels


def make_batch(stream: TokenStream, special: SpecialIds, rng: np.random.Generator, count: int,
               seq_len: int, mask_prob: float) -> MaskedBatch:
    """[CLS] window [SEP] sequences, padded, with dynamic MLM masking."""
    body = sample_blocks(stream, rng, count, seq_len - 2)
    lengths = (body >= 0).sum(axis=1)
    input_ids = np.full((count, seq_len), special.pad, dtype=np.int64)
    input_ids[:, 0] = special.cls
    for row, length in enumerate(lengths):
        input_ids[row, 1:1 + length] = body[row, :length]
        input_ids[row, 1 + length] = special.sep
    positions = np.arange(seq_len)[None, :]
    attention = positions < (lengths[:, None] + 2)
    maskable = (positions >= 1) & (positions <= lengths[:, None])
    masked, labels = mask_tokens(input_ids, maskable, special, rng, mask_prob)
    return MaskedBatch(input_ids=torch.from_numpy(masked), attention_mask=torch.from_numpy(attention.astype(np.int64)),
                       labels=torch.from_numpy(labels))


def step_batches(streams: Mapping[str, TokenStream], specials: Mapping[str, SpecialIds], settings: TrainSettings,
                 step: int, micro: int) -> dict[str, MaskedBatch]:
    """The batches of one micro-step: the same number of sequences for every language."""
    per_micro = max(1, settings.batch_size // settings.grad_accumulation)
    return {
        lang: make_batch(stream, specials[lang], step_rng(settings.seed, step, index * 1000 + micro),
                         per_micro, settings.seq_len, settings.mask_prob)
        for index, (lang, stream) in enumerate(streams.items())
    }


# --- checkpoints -------------------------------------------------------------------------------

def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def save_checkpoint(directory: Path, step: int, model: BilingualMaskedLM, optimizer, settings: TrainSettings) -> Path:
    """Write a complete checkpoint atomically; a crash mid-write leaves the previous ones intact."""
    target = directory / checkpoint_name(step)
    with atomic_path(target) as tmp:
        tmp.mkdir()
        save_model(model, str(tmp / "model.safetensors"))
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, "settings": asdict(settings)}, indent=2))
    prune_checkpoints(directory, settings)
    return target


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


def prune_checkpoints(directory: Path, settings: TrainSettings) -> None:
    """Keep the last ``keep_last`` checkpoints and every ``keep_every``-th step."""
    checkpoints = list_checkpoints(directory)
    recent = {step for step, _ in checkpoints[-max(settings.keep_last, 1):]}
    for step, path in checkpoints:
        if step in recent or (settings.keep_every and step % settings.keep_every == 0):
            continue
        shutil.rmtree(path, ignore_errors=True)


def resume_latest(directory: Path, model: BilingualMaskedLM, optimizer) -> int:
    """Load the newest checkpoint that loads cleanly; return its step (0 when none)."""
    for step, path in reversed(list_checkpoints(directory)):
        try:
            state = json.loads((path / "state.json").read_text())
            load_model(model, str(path / "model.safetensors"))
            optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
            log.info("resumed from %s (step %d)", path, state["step"])
            return int(state["step"])
        except Exception as error:  # a truncated or corrupt checkpoint: fall back to an older one
            log.warning("checkpoint %s is unreadable (%s: %s); trying the previous one",
                        path, type(error).__name__, error)
    return 0


# --- training loop -----------------------------------------------------------------------------

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


def configure_trainable(model: BilingualMaskedLM, groups: Sequence[str]) -> list[torch.nn.Parameter]:
    by_group = model.parameter_groups()
    for params in by_group.values():
        for param in params:
            param.requires_grad_(False)
    trainable = []
    seen = set()
    for group in groups:
        for param in by_group[group]:
            if id(param) not in seen:
                param.requires_grad_(True)
                trainable.append(param)
                seen.add(id(param))
    return trainable


def train(model: BilingualMaskedLM, streams: Mapping[str, TokenStream], specials: Mapping[str, SpecialIds],
          settings: TrainSettings, checkpoint_dir: str | os.PathLike, metrics_path: str | os.PathLike,
          device: str = "cpu", progress: bool = True) -> list[dict]:
    """Train (or resume training) and return the metric rows; the model ends at the final step."""
    from tqdm import tqdm

    if settings.threads:
        torch.set_num_threads(settings.threads)
    checkpoint_dir = Path(checkpoint_dir)
    model.to(device)
    trainable = configure_trainable(model, settings.train)
    optimizer = torch.optim.AdamW(trainable, lr=settings.peak_lr, weight_decay=settings.weight_decay,
                                  fused=device.startswith("cuda"))
    start = resume_latest(checkpoint_dir, model, optimizer)
    rows = read_metrics(metrics_path, up_to=start)
    tokens_seen, window_start = 0, time.perf_counter()
    model.train()
    with StopRequested() as stop, tqdm(total=settings.steps, initial=start, disable=not progress,
                                        desc="mlm", unit="step", mininterval=5) as bar:
        for step in range(start + 1, settings.steps + 1):
            lr = learning_rate(step, settings)
            for group in optimizer.param_groups:
                group["lr"] = lr
            torch.manual_seed(settings.seed * 1_000_003 + step)
            sums = {lang: 0.0 for lang in streams}
            for micro in range(settings.grad_accumulation):
                batches = step_batches(streams, specials, settings, step, micro)
                batches = {lang: MaskedBatch(*(t.to(device) for t in (b.input_ids, b.attention_mask, b.labels)))
                           for lang, b in batches.items()}
                with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16,
                                    enabled=device.startswith("cuda")):
                    losses = model(batches)
                loss = sum(losses.values()) / (len(losses) * settings.grad_accumulation)
                loss.backward()
                for lang, value in losses.items():
                    sums[lang] += value.item() / settings.grad_accumulation
                tokens_seen += sum(int(b.attention_mask.sum()) for b in batches.values())
            if settings.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(trainable, settings.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            bar.update(1)
            if step % settings.log_every == 0 or step == settings.steps:
                elapsed = time.perf_counter() - window_start
                row = {"step": step, "lr": lr, **{f"loss_{lang}": round(v, 5) for lang, v in sums.items()},
                       "tokens_per_s": round(tokens_seen / max(elapsed, 1e-9), 1)}
                rows.append(row)
                append_metrics(metrics_path, row, first=len(rows) == 1)
                bar.set_postfix({k: v for k, v in row.items() if k.startswith("loss")})
                tokens_seen, window_start = 0, time.perf_counter()
            if settings.checkpoint_every and step % settings.checkpoint_every == 0:
                save_checkpoint(checkpoint_dir, step, model, optimizer, settings)
            if stop.requested:
                save_checkpoint(checkpoint_dir, step, model, optimizer, settings)
                raise TrainingInterrupted(f"stopped by signal at step {step}; rerun to resume from "
                                          f"{checkpoint_dir / checkpoint_name(step)}")
    if not list_checkpoints(checkpoint_dir) or list_checkpoints(checkpoint_dir)[-1][0] != settings.steps:
        save_checkpoint(checkpoint_dir, settings.steps, model, optimizer, settings)
    return rows


def read_metrics(path: str | os.PathLike, up_to: int) -> list[dict]:
    """Metric rows already logged up to a resumed step (later ones are rewritten)."""
    path = Path(path)
    if not path.exists() or up_to == 0:
        if path.exists():
            path.unlink()
        return []
    with open(path, newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if int(row["step"]) <= up_to]
    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="") as handle:
            if rows:
                writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
    return rows


def append_metrics(path: str | os.PathLike, row: dict, first: bool) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new_file = first or not path.exists()
    with open(path, "w" if new_file else "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        if new_file:
            writer.writeheader()
        writer.writerow(row)
