"""Approximation of an embedding table by the char2subword module (§3.1), with character noise.

Each step draws a batch of table rows; a share of the subwords long enough for noise is
given one Table-1 edit (the target stays the clean row), so the module learns to map
misspellings onto the right embedding.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ramen.training.loops import StepLoop
from ramen.training.optimisation import Updates
from ramen.training.schedules import warmup_cosine
from ramen.training.settings import check_accumulation, check_precision
from ramen.char2subword.losses import LOSSES, approximation_loss, nearest_rows
from ramen.char2subword.module import Char2Subword, CharVocab, ModuleConfig, strip_markers
from ramen.char2subword.noise import OPERATIONS, WORD_PUNCTUATION, check_operations, noise_string
from ramen.errors import ConfigError
from ramen.glue import check_loss_weights

logger = logging.getLogger(__name__)


@dataclass
class ApproximationSettings:
    steps: int = 1000
    batch_size: int = 256
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    losses: Mapping[str, float] = field(default_factory=lambda: {name: 1.0 for name in LOSSES})
    top_k: int = 15  # neighbours of the neighbour loss
    noise_share: float = 0.5  # share of the noise-eligible subwords of a batch that get one edit
    noise_min_length: int = 5  # Table 1: only subwords longer than four characters
    operations: Sequence[str] = tuple(OPERATIONS)
    seed: int = 0
    log_every: int = 50
    max_rows: int | None = None  # approximate only the N subwords most frequent in the corpus (None: all)
    grad_accumulation: int = 1  # micro-batches per step: the same updates in less memory
    precision: str = "fp32"  # or bf16/fp16 autocast (fp16 with loss scaling)

    def __post_init__(self):
        unknown = set(self.losses) - set(LOSSES)
        if unknown:
            raise ConfigError("char2subword.approximation.losses", f"unknown losses {sorted(unknown)}",
                              f"give weights to some of {list(LOSSES)}")
        check_loss_weights(self.losses, "char2subword.approximation.losses")
        if not 0.0 <= self.noise_share <= 1.0:
            raise ConfigError("char2subword.approximation.noise_share", f"{self.noise_share} is not in [0, 1]")
        if self.steps < 0 or self.batch_size < 1:
            raise ConfigError("char2subword.approximation", "steps must be >= 0 and batch_size >= 1")
        check_operations(self.operations)
        check_accumulation(self.grad_accumulation, "char2subword.approximation.grad_accumulation")
        check_precision(self.precision, "char2subword.approximation.precision")


def subword_strings(vocab: Sequence[str]) -> list[str]:
    """The module's input for each table row: the subword without its tokenizer's markers."""
    return [strip_markers(token) for token in vocab]


def approximable_rows(vocab: Sequence[str], special_tokens: Sequence[str]) -> np.ndarray:
    """Rows with characters to compose: every row but the special tokens and empty strings."""
    special = set(special_tokens)
    return np.asarray([i for i, token in enumerate(vocab) if token not in special and strip_markers(token)],
                      dtype=np.int64)


def frequent_rows(rows: np.ndarray, token_ids: np.ndarray, vocab_size: int, max_rows: int | None) -> np.ndarray:
    """The ``max_rows`` of ``rows`` most frequent in ``token_ids`` (a corpus), in id order; all when None."""
    if max_rows is None or max_rows >= len(rows):
        return rows
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, len(token_ids), 1 << 24):  # a memory-mapped corpus, counted in chunks
        counts += np.bincount(np.asarray(token_ids[start : start + (1 << 24)]), minlength=vocab_size)[:vocab_size]
    order = np.argsort(-counts[rows], kind="stable")
    return np.sort(rows[order[:max_rows]])


def new_module(table: torch.Tensor, strings: Sequence[str], sizes: Mapping, seed: int) -> Char2Subword:
    """A fresh module for ``table``'s width over the characters of ``strings``, its output at the table's scale."""
    torch.manual_seed(seed)
    config = ModuleConfig(output_dim=int(table.shape[1]), **sizes)
    module = Char2Subword(config, CharVocab.from_strings(strings, extra=WORD_PUNCTUATION))
    # The final LayerNorm starts at the table's per-dimension mean and spread: a unit-scale output
    # would sit far (about 25x for a MiniLM table) from rows the losses compare it with.
    with torch.no_grad():
        module.norm.weight.copy_(table.float().std(dim=0))
        module.norm.bias.copy_(table.float().mean(dim=0))
    return module


def noisy_batch(strings: Sequence[str], rng: random.Random, settings: ApproximationSettings) -> list[str]:
    out = []
    for text in strings:
        if len(text) >= settings.noise_min_length and rng.random() < settings.noise_share:
            text = noise_string(text, rng, settings.operations, settings.noise_min_length)
        out.append(text)
    return out


def approximate(module: Char2Subword, table: torch.Tensor, strings: Sequence[str], rows: np.ndarray,
                settings: ApproximationSettings, progress: bool = True, checkpoint_dir: str | os.PathLike | None = None,
                checkpoint_every: int = 0) -> list[dict]:
    """Train ``module`` in place so that module(strings[i]) ≈ table[i] for i in ``rows``; the metrics rows.

    With ``checkpoint_dir`` a killed run resumes from its last checkpoint (ramen.training.loops.StepLoop)."""
    table = table.detach().float()
    if len(rows) == 0:
        raise ConfigError("char2subword", "the table has no subword rows to approximate")
    neighbours = None
    if settings.losses.get("nbr", 0) > 0:
        neighbours = nearest_rows(table, settings.top_k)
    optimizer = torch.optim.AdamW(module.parameters(), lr=settings.learning_rate,
                                  weight_decay=settings.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, settings.warmup_steps, settings.steps))
    updates = Updates(optimizer, scheduler=schedule, max_grad_norm=1.0, accumulation=settings.grad_accumulation,
                      precision=settings.precision, device=str(table.device))
    loop = StepLoop(module, updates, steps=settings.steps, seed=settings.seed, checkpoint_dir=checkpoint_dir,
                    checkpoint_every=checkpoint_every, desc="approximate", progress=progress)
    module.train()
    batch = min(settings.batch_size, len(rows))
    for step in loop.steps_to_run():
        rng = np.random.default_rng([settings.seed, step - 1])
        chosen = torch.from_numpy(rng.choice(rows, size=batch, replace=False))
        texts = noisy_batch([strings[i] for i in chosen.tolist()],
                            random.Random(settings.seed * 1_000_003 + step - 1), settings)
        parts: dict[str, float] = {}

        def loss_of(part):
            loss, values = approximation_loss(module.embed([texts[i] for i in part.tolist()]).float(), table,
                                              chosen[part], settings.losses, neighbours)
            for name, value in values.items():  # each objective's value over the whole batch
                parts[name] = parts.get(name, 0.0) + value * len(part) / batch
            return loss

        value = loop.update(batch, loss_of)
        if step % settings.log_every == 0 or step == settings.steps:
            row = {"step": step, "loss": value, **parts}
            loop.log(row)
            logger.info("approximation %s", row)
    module.eval()
    return loop.rows
