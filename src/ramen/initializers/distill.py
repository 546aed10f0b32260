"""Token Distillation (after Dobler et al. 2026): each new token's input row fitted so that the frozen
source reads the token as it reads the pieces it was merged from.

A new token t of pieces p1..pk (its source ids, ``vocab_extension.json``) occurs in the foreign
training text encoded with the extended tokenizer. Each occurrence is an example: the sentence's
text before t (BOS first when the tokenizer has one, then at most ``context_tokens`` source
tokens), t, then at most ``following_tokens`` source tokens after it; new tokens around t are cut
back into their pieces, so each example holds one new token. The source reads the example twice:
with p1..pk (the teacher) and with t's row in their place (the student). The loss is the mean
squared difference of the last layer's hidden states, the student's at t against the teacher's at
pk, and at each following token against the same token. Adam moves only the new input rows, from
the subword mean (``fvt``); every source weight stays frozen. Sequences hold one new token each, so
each row is fitted on its own examples alone.

Examples are the first ``contexts_per_token`` occurrences of each token in the text, ordered by
occurrence (every token's first, then every token's second, ...) and within that by id: the
extension learned its tokens in order of their merges' counts, so a budget of ``steps`` x
``batch_size`` examples smaller than the whole fits the tokens learned first, one context each
before any gets a second. Step s takes the next ``batch_size`` examples of that fixed order
(wrapping around), a pure function of the step, so the fit runs on the core's step loop
(ramen.training.loops.StepLoop): with a ``checkpoint_dir`` a killed fit resumes from its last
checkpoint and ends with the rows of an uninterrupted one. A token with no example, or beyond the
budget, keeps its subword mean.

The output bias and untied output rows are the subword mean's (the fit is of the input rows);
through a tied head the fitted rows are output rows too. The result's ``stats`` hold the fit's
wall time (``seconds``, summed over the runs a resume continues) and the mismatch before and after
on a fixed spread of the fitted examples.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ramen.errors import ConfigError
from ramen.initializers.common import InitResult
from ramen.initializers.fvt import fvt_init
from ramen.training.loops import StepLoop
from ramen.training.optimisation import Updates, fused_adam
from ramen.glue import settings_from

SETTINGS = "peers.distill"
# Tokens of the encoded text read at a time while looking for occurrences.
SCAN_CHUNK = 1 << 22


@dataclass(frozen=True)
class DistillSettings:
    """``peers.distill``; the schema holds the same defaults."""

    contexts_per_token: int = 4
    context_tokens: int = 16
    following_tokens: int = 2
    steps: int = 100
    batch_size: int = 16
    lr: float = 1e-3
    checkpoint_every: int = 25

    def __post_init__(self):
        for name in ("contexts_per_token", "steps", "batch_size", "context_tokens", "following_tokens",
                     "checkpoint_every"):
            least = 1 if name in ("contexts_per_token", "batch_size") else 0
            if getattr(self, name) < least:
                raise ConfigError(f"peers.distill.{name}", f"is {getattr(self, name)}", f"use at least {least}")
        if not self.lr > 0:
            raise ConfigError("peers.distill.lr", f"is {self.lr}", "use a positive learning rate")

    @property
    def trajectory(self) -> dict:
        """The settings that fix each update, which the step loop compares with a checkpoint's."""
        return {name: value for name, value in dataclasses.asdict(self).items() if name != "steps"}


@dataclass(frozen=True)
class Example:
    """One occurrence of a new token: the source ids before it (BOS first where there is one) and after it."""

    token: int  # index among the new tokens
    before: tuple[int, ...]
    after: tuple[int, ...]


class NewRows(nn.Module):
    """The new tokens' input rows: the only weights the fit moves (and its checkpoints hold)."""

    def __init__(self, rows: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(rows.detach().clone().float())


def occurrences(ids: np.ndarray, first: int, new_count: int, per_token: int) -> np.ndarray:
    """Stream positions of the first ``per_token`` occurrences of each new token (ids ``first`` on),
    ordered by occurrence rank, then by token."""
    counts = np.zeros(new_count, dtype=np.int64)
    found_positions, found_ranks = [], []
    for start in range(0, len(ids), SCAN_CHUNK):
        chunk = np.asarray(ids[start:start + SCAN_CHUNK], dtype=np.int64)
        where = np.flatnonzero(chunk >= first)
        if not len(where):
            continue
        tokens = chunk[where] - first
        order = np.argsort(tokens, kind="stable")  # by token, each token's occurrences in text order
        tokens = tokens[order]
        rank = np.arange(len(tokens)) - np.searchsorted(tokens, tokens, side="left") + counts[tokens]
        keep = rank < per_token
        found_positions.append(where[order[keep]] + start)
        found_ranks.append(rank[keep])
        counts += np.bincount(tokens[keep], minlength=new_count)
        if counts.min() >= per_token:
            break
    if not found_positions:
        return np.zeros(0, dtype=np.int64)
    positions, ranks = np.concatenate(found_positions), np.concatenate(found_ranks)
    return positions[np.lexsort((np.asarray(ids[positions], dtype=np.int64), ranks))]


def as_source_ids(ids: np.ndarray, first: int, pieces: Sequence[Sequence[int]]) -> list[int]:
    """Extended-vocabulary ids with every new token cut back into its pieces."""
    out: list[int] = []
    for index in ids.tolist():
        out.extend(pieces[index - first] if index >= first else (index,))
    return out


def distill_examples(text, first: int, pieces: Sequence[Sequence[int]], settings: DistillSettings,
                     bos_id: int | None) -> list[Example]:
    """The examples of the new tokens that have pieces, in the fit's order (module docstring).
    ``text``: the foreign training text encoded with the extended tokenizer (a TokenStream)."""
    ids, offsets = text.ids, text.offsets
    start_ids = () if bos_id is None else (int(bos_id),)
    examples = []
    for position in occurrences(ids, first, len(pieces), settings.contexts_per_token).tolist():
        token = int(ids[position]) - first
        if not len(pieces[token]):
            continue
        sentence = int(np.searchsorted(offsets, position, side="right")) - 1
        begin, end = int(offsets[sentence]), int(offsets[sentence + 1])
        before = as_source_ids(ids[max(begin, position - settings.context_tokens):position], first, pieces)
        after = as_source_ids(ids[position + 1:min(end, position + 1 + settings.following_tokens)], first, pieces)
        kept = before[-settings.context_tokens:] if settings.context_tokens else []
        examples.append(Example(token, (*start_ids, *kept), tuple(after[:settings.following_tokens])))
    return examples


def _padded(sequences: Sequence[Sequence[int]]) -> torch.Tensor:
    # Padded on the right: a causal model's earlier positions never see the padding.
    batch = torch.zeros(len(sequences), max(len(s) for s in sequences), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        batch[row, :len(sequence)] = torch.as_tensor(sequence, dtype=torch.long)
    return batch


def mismatch(backbone: nn.Module, table: torch.Tensor, rows: torch.Tensor, examples: Sequence[Example],
             pieces: Sequence[Sequence[int]]) -> torch.Tensor:
    """The mean squared difference of the last layer's hidden states between each example read with
    the new token's row (``rows``: one per new token) and read with its pieces (``backbone``: the
    source's transformer without its output layer; ``table``: its input table)."""
    student_rows, student_cols, teacher_rows, teacher_cols = [], [], [], []
    for row, example in enumerate(examples):
        at, width = len(example.before), len(pieces[example.token])
        for offset in range(len(example.after) + 1):
            student_rows.append(row)
            student_cols.append(at + offset)
            teacher_rows.append(row)
            teacher_cols.append(at + width - 1 + offset)
    teacher = _padded([(*e.before, *pieces[e.token], *e.after) for e in examples])
    student = _padded([(*e.before, 0, *e.after) for e in examples])
    with torch.no_grad():
        targets = backbone(inputs_embeds=table[teacher], use_cache=False).last_hidden_state
    where = (torch.arange(len(examples)), torch.as_tensor([len(e.before) for e in examples]))
    tokens = torch.as_tensor([e.token for e in examples])
    embeds = table[student].index_put(where, rows[tokens])
    states = backbone(inputs_embeds=embeds, use_cache=False).last_hidden_state
    return nn.functional.mse_loss(states[student_rows, student_cols], targets[teacher_rows, teacher_cols])


@contextlib.contextmanager
def frozen(model: nn.Module):
    """The model in eval mode with no weight taking gradients, as it was afterwards."""
    flags = [(param, param.requires_grad) for param in model.parameters()]
    training = model.training
    model.requires_grad_(False).eval()
    try:
        yield model
    finally:
        for param, flag in flags:
            param.requires_grad_(flag)
        model.train(training)


def fitted_order(step: int, batch_size: int, count: int) -> np.ndarray:
    """The example indices of ``step`` (1-based): the next ``batch_size`` of the fixed order, wrapping around."""
    return ((step - 1) * batch_size + np.arange(batch_size)) % count


def probe_examples(examples: Sequence[Example], settings: DistillSettings) -> list[Example]:
    """A fixed spread of the examples the budget reaches, to measure the mismatch on before and after."""
    reached = min(len(examples), settings.steps * settings.batch_size)
    if not reached:
        return []
    return [examples[i] for i in np.unique(np.linspace(0, reached - 1, min(reached, settings.batch_size)).round()
                                           .astype(int))]


def distill_init(
    source_embeddings: torch.Tensor,
    source_bias: torch.Tensor,
    foreign_vocab: list[str],
    source_vocab: list[str],
    *,
    alpha=None,
    generator: torch.Generator,
    special_tokens: Sequence[str] | None = None,
    pieces: Sequence[Sequence[int]],
    model: nn.Module,
    bos_id: int | None = None,
    text,
    checkpoint_dir: str | Path | None = None,
    **settings,
) -> InitResult:
    """The subword mean, then the new input rows fitted (module docstring); ``alpha`` is ignored.

    ``model``: the source causal LM (frozen while it runs, as it was afterwards); ``bos_id``: the id
    its training windows start with (None: none); ``text``: the foreign training text encoded with the
    extended tokenizer; ``checkpoint_dir``: where the fit resumes from (None: no checkpoints);
    ``settings``: ``peers.distill``. The seed is ``generator``'s (the variant's)."""
    started = time.perf_counter()
    config = settings_from(DistillSettings, settings, SETTINGS)
    first = len(source_vocab)
    if text.vocab_size != first + len(foreign_vocab):
        raise ConfigError("variants.<variant>.init", f"the foreign text is encoded with {text.vocab_size} tokens, "
                          f"the extended tokenizer has {first + len(foreign_vocab)}",
                          "rerun the encode_monolingual rule for this language")
    result = fvt_init(source_embeddings, source_bias, foreign_vocab, source_vocab, generator=generator,
                      special_tokens=special_tokens, pieces=pieces)
    examples = distill_examples(text, first, pieces, config, bos_id)
    rows = NewRows(result.embeddings)
    table = source_embeddings.detach().float()
    probe = probe_examples(examples, config)
    stats = {"distill_examples": len(examples), "distill_tokens": len({e.token for e in examples}),
             "distill_steps": config.steps if examples else 0}
    with frozen(model):
        backbone = model.base_model
        if probe:
            with torch.no_grad():
                stats["distill_loss_start"] = float(mismatch(backbone, table, rows.weight, probe, pieces))
        earlier = fit(backbone, table, rows, examples, pieces, config, seed=generator.initial_seed(),
                      checkpoint_dir=checkpoint_dir, started=started) if examples else 0.0
        if probe:
            with torch.no_grad():
                stats["distill_loss_end"] = float(mismatch(backbone, table, rows.weight, probe, pieces))
    reached = examples[:config.steps * config.batch_size]
    stats["distilled_rows"] = len({e.token for e in reached})
    stats["seconds"] = earlier + time.perf_counter() - started
    result.embeddings = rows.weight.detach().clone()
    result.stats = stats
    return result


def fit(backbone: nn.Module, table: torch.Tensor, rows: NewRows, examples: Sequence[Example],
        pieces: Sequence[Sequence[int]], config: DistillSettings, *, seed: int,
        checkpoint_dir: str | Path | None, started: float) -> float:
    """Adam on ``rows`` for the steps still to run; the seconds the runs before this one took, as
    the checkpoint it resumes from holds them (``started``: this run's start, ``time.perf_counter``)."""
    optimizer = torch.optim.Adam([rows.weight], lr=config.lr, fused=fused_adam("cpu"))
    loop = StepLoop(rows, Updates(optimizer, parameters=[rows.weight]), steps=config.steps, seed=seed,
                    checkpoint_dir=checkpoint_dir, checkpoint_every=config.checkpoint_every, desc="distill",
                    settings=config.trajectory)
    earlier = loop.rows[-1]["seconds"] if loop.rows else 0.0
    losses = []
    for step in loop.steps_to_run():
        batch = [examples[i] for i in fitted_order(step, config.batch_size, len(examples))]
        losses.append(loop.update(len(batch), lambda part: mismatch(backbone, table, rows.weight,
                                                                      [batch[i] for i in part.tolist()], pieces)))
        if step == config.steps or (config.checkpoint_every and step % config.checkpoint_every == 0):
            # Logged before the step's checkpoint, which keeps it: a resumed fit adds its time to these seconds.
            loop.log({"step": step, "loss": sum(losses) / len(losses),
                      "seconds": earlier + time.perf_counter() - started})
            losses = []
    return earlier
