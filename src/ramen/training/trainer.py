"""Masked-LM training of the bilingual model: batches, masking, schedule, checkpoints, loop.

Every random choice of a step (which sentences, which tokens are masked, dropout)
is seeded from (seed, step), and the learning rate is a pure function of the step.
A checkpoint therefore needs only the step, the weights, the optimiser state (and
the fp16 loss scale): a run resumed from it sees exactly the batches, masks,
dropout and learning rates an uninterrupted run would have seen, with no RNG
state or data-loader position to save.

Several processes (torchrun, one per GPU) split every step's batch by rows and
average gradients weighted by masked-token counts, so the global batch, the
loss and the checkpoints are those of a single-process run.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import csv
import functools
import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_model, save_model

from ramen.vocab.encode import TokenStream
from ramen.errors import ConfigError
from ramen.io import atomic_path
from ramen.training.core import (
    StopRequested,
    TrainingInterrupted,
    Updates,
    check_precision,
    checkpoint_name,
    fused_adam,
    hash_files,
    list_checkpoints,
    prune_checkpoints,
)
from ramen.modeling.bilingual import IGNORE_INDEX, BilingualMaskedLM, MaskedBatch

log = logging.getLogger(__name__)

PARAMETER_GROUPS = ("encoder", "head", "source_embeddings", "foreign_embeddings")
# Settings that change which batches are drawn or how an update is computed: a resumed run
# with other values does not continue the checkpointed trajectory.
TRAJECTORY_SETTINGS = ("batch_size", "seq_len", "grad_accumulation", "seed", "mask_prob", "train", "peak_lr",
                       "init_lr", "warmup_steps", "weight_decay", "max_grad_norm", "precision")


def run_fingerprint(settings: "TrainSettings", inputs: Sequence[str | os.PathLike] = (),
                    objective: Mapping | None = None) -> str:
    """A short id of everything that fixes a training trajectory: the trajectory settings, the
    training objective's settings (when not plain masked-LM) and the contents of the starting files.
    Checkpoints live under it, so a changed learning rate or a new initialisation starts afresh
    while more ``steps`` extend the same run."""
    import hashlib

    digest = hashlib.blake2b(digest_size=6)
    values = asdict(settings)
    digest.update(json.dumps({name: values[name] for name in TRAJECTORY_SETTINGS}, sort_keys=True,
                             default=list).encode())
    if objective:
        digest.update(json.dumps(objective, sort_keys=True, default=list).encode())
    hash_files(digest, inputs)
    return digest.hexdigest()


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
    precision: str = "auto"  # auto: bf16 on a GPU that supports it, else fp32; fp16 adds loss scaling
    compile: bool = False  # torch.compile the shared encoder
    gpus: int = 1  # processes (GPUs) on one node; the workflow starts torchrun when > 1
    distributed: bool = False  # join torchrun's process group (the launcher sets it when gpus > 1)

    def __post_init__(self):
        unknown = set(self.train) - set(PARAMETER_GROUPS)
        if unknown:
            raise ConfigError("training.train", f"unknown parameter groups {sorted(unknown)}",
                              f"choose from {list(PARAMETER_GROUPS)}")
        if self.seq_len < 8:
            raise ConfigError("training.seq_len", f"{self.seq_len} is too short")
        check_precision(self.precision, "training.precision")
        if self.gpus < 1:
            raise ConfigError("training.gpus", f"{self.gpus}: at least one process is needed")
        if self.batch_size % self.grad_accumulation:
            raise ConfigError("training.grad_accumulation", f"batch_size {self.batch_size} does not split into "
                              f"{self.grad_accumulation} equal micro-steps",
                              "make batch_size a multiple of grad_accumulation")
        if (self.batch_size // self.grad_accumulation) % self.gpus:
            raise ConfigError("training.gpus", f"{self.batch_size // self.grad_accumulation} sequences per language "
                              f"and micro-step do not split evenly over {self.gpus} GPUs",
                              "make batch_size / grad_accumulation a multiple of gpus")


def learning_rate(step: int, settings: TrainSettings) -> float:
    """Linear warm-up from ``init_lr`` to ``peak_lr``, then inverse square root decay (§3.3)."""
    if settings.warmup_steps > 0 and step < settings.warmup_steps:
        return settings.init_lr + (settings.peak_lr - settings.init_lr) * step / settings.warmup_steps
    return settings.peak_lr * math.sqrt(max(settings.warmup_steps, 1) / max(step, 1))


def step_rng(seed: int, step: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, step, stream])


def dropout_seed(seed: int, step: int, rank: int = 0) -> int:
    """Torch's seed for a step's dropout; each process of a multi-GPU run draws its own masks."""
    return seed * 1_000_003 + step + rank * 1_000_000_000_039


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


@functools.lru_cache(maxsize=16)
def _replacement_candidates(vocab_size: int, special: tuple[int, ...]) -> np.ndarray:
    # Cached: with a 30k vocabulary, recomputing the set difference is a visible share of a CPU batch.
    candidates = np.setdiff1d(np.arange(vocab_size), special)
    candidates.flags.writeable = False
    return candidates


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
    candidates = _replacement_candidates(special.vocab_size, tuple(special.all_special))
    masked[randomise] = candidates[rng.integers(0, len(candidates), size=int(randomise.sum()))]
    return masked, labels


def token_windows(stream: TokenStream, special: SpecialIds, rng: np.random.Generator, count: int,
                  seq_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[CLS] window [SEP] sequences, padded: (token ids, attention mask, positions of corpus tokens)."""
    body = sample_blocks(stream, rng, count, seq_len - 2)
    lengths = (body >= 0).sum(axis=1)
    ids = np.full((count, seq_len), special.pad, dtype=np.int64)
    ids[:, 0] = special.cls
    for row, length in enumerate(lengths):
        ids[row, 1 : 1 + length] = body[row, :length]
        ids[row, 1 + length] = special.sep
    positions = np.arange(seq_len)[None, :]
    return ids, positions < (lengths[:, None] + 2), (positions >= 1) & (positions <= lengths[:, None])


def make_batch(stream: TokenStream, special: SpecialIds, rng: np.random.Generator, count: int,
               seq_len: int, mask_prob: float) -> MaskedBatch:
    """[CLS] window [SEP] sequences, padded, with dynamic MLM masking."""
    input_ids, attention, maskable = token_windows(stream, special, rng, count, seq_len)
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


def shard_batch(batch, rank: int, world: int):
    """Rows ``rank::world`` of a batch (a MaskedBatch or an objective's pair batch): each process's share."""
    if world == 1:
        return batch
    return batch.apply(lambda tensor: tensor[rank::world])


@dataclass
class MicroBatch:
    """This process's share of one micro-step, ready for the model."""

    batches: dict[str, MaskedBatch]  # by stream: a language, or a training objective's stream
    weights: dict[str, float]  # this share's masked tokens / the whole micro-step's, times the world size
    tokens: int  # non-padding tokens of the whole micro-step (all processes)


def prepare_step(streams: Mapping[str, TokenStream], specials: Mapping[str, SpecialIds], settings: TrainSettings,
                 step: int, rank: int = 0, world: int = 1, pin: bool = False,
                 make_batches=None) -> list[MicroBatch]:
    """Every micro-batch of a step for one process (a pure function of its arguments).

    ``make_batches(step, micro)`` replaces the masked-LM batches of every language
    when a training objective draws its own (ramen.objectives).
    """
    micros = []
    for micro in range(settings.grad_accumulation):
        full = make_batches(step, micro) if make_batches else step_batches(streams, specials, settings, step, micro)
        batches, weights = {}, {}
        for lang, batch in full.items():
            share = shard_batch(batch, rank, world)
            if world > 1:
                # A process's mean loss weighted by its share of masked tokens, so that DDP's average
                # of the processes' gradients is the gradient of the whole micro-step's mean loss.
                weights[lang] = share.targets() * world / batch.targets()
            else:
                weights[lang] = 1.0
            if pin:
                share = share.apply(torch.Tensor.pin_memory)
            batches[lang] = share
        micros.append(MicroBatch(batches, weights, sum(b.tokens() for b in full.values())))
    return micros


class Prefetcher:
    """Makes the next step's batches in a background thread while the current step runs.

    Batches depend only on (seed, step), so prefetching changes no result; numpy
    releases the GIL for most of the work.
    """

    def __init__(self, make, first: int, last: int):
        self._make, self._last = make, last
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="batches")
        self._pending: dict[int, concurrent.futures.Future] = {}
        self.wait_s = 0.0
        self._submit(first)

    def _submit(self, step: int) -> None:
        if step <= self._last and step not in self._pending:
            self._pending[step] = self._pool.submit(self._make, step)

    def get(self, step: int) -> list[MicroBatch]:
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


# --- several processes ---------------------------------------------------------------------------

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


def join_processes(settings: TrainSettings, device: str) -> tuple[Processes, str]:
    """Join torchrun's process group when started by it; return this process's place and device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Processes(), device
    if not settings.distributed:
        raise ConfigError("training.distributed", f"started by torchrun with {world} processes but distributed "
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


# --- checkpoints -------------------------------------------------------------------------------

def save_checkpoint(directory: Path, step: int, model: BilingualMaskedLM, optimizer, settings: TrainSettings,
                    scaler: torch.amp.GradScaler | None = None) -> Path:
    """Write a complete checkpoint atomically; a crash mid-write leaves the previous ones intact."""
    target = directory / checkpoint_name(step)
    state = {"step": step, "settings": asdict(settings)}
    if scaler is not None and scaler.is_enabled():
        state["grad_scaler"] = scaler.state_dict()
    with atomic_path(target) as tmp:
        tmp.mkdir()
        save_model(model, str(tmp / "model.safetensors"))
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        (tmp / "state.json").write_text(json.dumps(state, indent=2))
    prune_checkpoints(directory, settings.keep_last, settings.keep_every)
    return target


def resume_latest(directory: Path, model: BilingualMaskedLM, optimizer,
                  scaler: torch.amp.GradScaler | None = None, settings: TrainSettings | None = None) -> int:
    """Load the newest checkpoint that loads cleanly; return its step (0 when none)."""
    for step, path in reversed(list_checkpoints(directory)):
        try:
            state = json.loads((path / "state.json").read_text())
            load_model(model, str(path / "model.safetensors"))
            optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
            if scaler is not None and scaler.is_enabled():
                if "grad_scaler" in state:
                    scaler.load_state_dict(state["grad_scaler"])
                else:
                    log.info("%s has no fp16 loss scale; starting from the default scale", path)
            log.info("resumed from %s (step %d)", path, state["step"])
            if settings is not None:
                warn_changed_settings(path, state.get("settings", {}), settings)
            return int(state["step"])
        except Exception as error:  # a truncated or corrupt checkpoint: fall back to an older one
            log.warning("checkpoint %s is unreadable (%s: %s); trying the previous one",
                        path, type(error).__name__, error)
    return 0


def warn_changed_settings(path: Path, saved: Mapping, settings: TrainSettings) -> None:
    current = json.loads(json.dumps(asdict(settings)))  # tuples as lists, as in state.json
    changed = [name for name in TRAJECTORY_SETTINGS if name in saved and saved[name] != current[name]]
    if changed:
        log.warning("%s was written with other %s (%s); the resumed run will not match an uninterrupted one",
                    path, ", ".join(changed), ", ".join(f"{name}: {saved[name]} -> {current[name]}"
                                                        for name in changed))


# --- training loop -----------------------------------------------------------------------------

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


def wrap_ddp(model: torch.nn.Module, device: str) -> torch.nn.Module:
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    # The model's buffers (position ids) are constants: no need to broadcast them before every forward.
    options = inspect.signature(DistributedDataParallel).parameters
    buffers = {"forward_sync_buffers": False} if "forward_sync_buffers" in options else {"broadcast_buffers": False}
    device_ids = [torch.device(device).index] if device.startswith("cuda") else None
    return DistributedDataParallel(model, device_ids=device_ids, **buffers)


def tensorboard_writer(directory: Path, start: int):
    """A SummaryWriter under ``directory`` when tensorboard is installed (the CSV log is the record)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    # purge_step hides events a killed run logged after the checkpoint it is resumed from.
    return SummaryWriter(log_dir=str(directory), purge_step=start + 1 if start else None)


def train(model: torch.nn.Module, streams: Mapping[str, TokenStream], specials: Mapping[str, SpecialIds],
          settings: TrainSettings, checkpoint_dir: str | os.PathLike, metrics_path: str | os.PathLike,
          device: str = "cpu", progress: bool = True) -> list[dict]:
    """Train (or resume training) and return the metric rows; the model ends at the final step.

    ``model`` is the bilingual model (masked-LM on every language) or a training objective
    (ramen.objectives) holding it, which draws its own batches and names its loss streams.

    Under torchrun (``settings.distributed``) every process calls this; only rank 0
    writes metrics and checkpoints, and the rows of steps logged before a resume
    are returned on rank 0 only.
    """
    from tqdm import tqdm

    if settings.threads:
        torch.set_num_threads(settings.threads)
    checkpoint_dir = Path(checkpoint_dir)
    procs, device = join_processes(settings, device)
    per_micro = max(1, settings.batch_size // settings.grad_accumulation)
    if per_micro % procs.world:
        raise ConfigError("training.batch_size", f"{per_micro} sequences per language and micro-step do not split "
                          f"evenly over {procs.world} processes",
                          "make batch_size / grad_accumulation a multiple of the number of GPUs")
    cuda = device.startswith("cuda")
    model.to(device)
    trainable = configure_trainable(model, settings.train)
    optimizer = torch.optim.AdamW(trainable, lr=settings.peak_lr, weight_decay=settings.weight_decay,
                                  fused=fused_adam(device))
    # The learning rate is set per step (learning_rate), so no schedule object; micro-steps are
    # drawn (and weighted) here, since each draws its own batches from (seed, step, micro).
    updates = Updates(optimizer, max_grad_norm=settings.max_grad_norm, precision=settings.precision, device=device,
                      parameters=trainable)
    if cuda and updates.dtype is None:
        torch.set_float32_matmul_precision("high")  # TF32 matmuls: fp32 training at a fraction of the cost
    scaler = updates.scaler
    start = resume_latest(checkpoint_dir, model, optimizer, scaler, settings)
    procs.same(start, "the step to resume from")
    rows = read_metrics(metrics_path, up_to=start, rewrite=procs.main)
    if settings.compile:
        # In place: parameter names (and checkpoints) stay as they are. An objective holds the model.
        getattr(model, "model", model).mlm.base_model.compile()
    network = model
    if procs.world > 1:
        network = wrap_ddp(model, device)
    langs = list(streams)
    writer = tensorboard_writer(checkpoint_dir / "tensorboard", start) if procs.main else None
    last_saved = start

    def checkpoint(step: int) -> None:
        nonlocal last_saved
        if procs.main:
            save_checkpoint(checkpoint_dir, step, model, optimizer, settings, scaler)
        procs.barrier()  # no process runs ahead (or exits) while rank 0 writes
        last_saved = step

    # A training objective (ramen.objectives) names its own loss streams and draws its own batches.
    objective_batches = model.step_batches
    if objective_batches is not None:
        langs = model.stream_names()

    def make(step: int) -> list[MicroBatch]:
        return prepare_step(streams, specials, settings, step, procs.rank, procs.world, pin=cuda,
                            make_batches=objective_batches)

    tokens_seen, window_start, window_steps = 0, time.perf_counter(), 0
    model.train()
    with contextlib.ExitStack() as stack:
        stop = stack.enter_context(StopRequested())
        bar = stack.enter_context(tqdm(total=settings.steps, initial=start, disable=not (progress and procs.main),
                                       desc="mlm", unit="step", mininterval=5))
        batches = stack.enter_context(Prefetcher(make, start + 1, settings.steps))
        if writer is not None:
            stack.callback(writer.close)
        waited = batches.wait_s
        latest = torch.zeros(len(langs), dtype=torch.float64, device=device)
        ever_seen = torch.zeros(len(langs), dtype=torch.bool, device=device)
        for step in range(start + 1, settings.steps + 1):
            lr = learning_rate(step, settings)
            for group in optimizer.param_groups:
                group["lr"] = lr
            torch.manual_seed(dropout_seed(settings.seed, step, procs.rank))
            model.begin_step(step)
            step_losses = torch.zeros(len(langs), dtype=torch.float64, device=device)
            seen = torch.zeros(len(langs), dtype=torch.bool, device=device)
            micros = batches.get(step)
            for index, micro in enumerate(micros):
                inputs = {lang: b.apply(lambda t: t.to(device, non_blocking=True)) for lang, b in micro.batches.items()}
                # Gradients are exchanged once per update, on its last micro-step.
                sync = network.no_sync() if network is not model and index < len(micros) - 1 \
                    else contextlib.nullcontext()
                with sync:
                    with updates.autocast():
                        losses = network(inputs)
                    present = [lang for lang in langs if lang in losses]
                    batch_key = model.batch_key  # a pair batch feeds two streams
                    weighted = [losses[lang] * micro.weights[batch_key(lang)] if procs.world > 1 else losses[lang]
                                for lang in present]
                    loss = sum(weighted) / (len(weighted) * settings.grad_accumulation)
                    updates.backward(loss)
                for lang, value in zip(present, weighted):
                    step_losses[langs.index(lang)] += value.detach().double() / settings.grad_accumulation
                    seen[langs.index(lang)] = True
                tokens_seen += micro.tokens
            # Streams that alternate (monolingual and translation batches) keep their latest loss.
            latest = torch.where(seen, step_losses, latest)
            ever_seen |= seen
            updates.step()
            window_steps += 1
            bar.update(1)
            if step % settings.log_every == 0 or step == settings.steps:
                # Each process's weighted share summed over processes: the whole batch's mean per language.
                means = (procs.sum(latest.clone()) / procs.world).tolist()
                elapsed = max(time.perf_counter() - window_start, 1e-9)
                # A stream not trained since this process started (a resume just before it) repeats
                # its last logged value; with none, its cell stays empty.
                previous = rows[-1] if rows else {}
                losses = {f"loss_{lang}": round(value, 5) if trained else previous.get(f"loss_{lang}", "")
                          for lang, value, trained in zip(langs, means, ever_seen.tolist())}
                row = {"step": step, "lr": lr, **losses,
                       **model.metrics(),
                       "tokens_per_s": round(tokens_seen / elapsed, 1),
                       "step_s": round(elapsed / window_steps, 4),
                       "data_wait": round((batches.wait_s - waited) / elapsed, 4)}
                rows.append(row)
                if procs.main:
                    append_metrics(metrics_path, row, first=len(rows) == 1)
                    if writer is not None:
                        log_scalars(writer, row)
                bar.set_postfix({k: v for k, v in row.items() if k.startswith("loss")})
                tokens_seen, window_start, window_steps, waited = 0, time.perf_counter(), 0, batches.wait_s
            if settings.checkpoint_every and step % settings.checkpoint_every == 0:
                checkpoint(step)
            if procs.any(stop.requested):
                if last_saved != step:
                    checkpoint(step)
                raise TrainingInterrupted(f"stopped by signal at step {step}; rerun to resume from "
                                          f"{checkpoint_dir / checkpoint_name(step)}")
    if settings.steps and last_saved != settings.steps:
        checkpoint(settings.steps)
    return rows


def log_scalars(writer, row: Mapping) -> None:
    step = int(row["step"])
    for key, value in row.items():
        if key.startswith("loss_") and value != "":  # empty: a stream not trained yet
            writer.add_scalar(f"loss/{key[len('loss_'):]}", value, step)
    for key in ("lr", "tokens_per_s", "step_s", "data_wait"):
        writer.add_scalar(key, row[key], step)
    writer.flush()


def read_metrics(path: str | os.PathLike, up_to: int, rewrite: bool = True) -> list[dict]:
    """Metric rows already logged up to a resumed step (later ones are rewritten)."""
    path = Path(path)
    if not path.exists() or up_to == 0:
        if path.exists() and rewrite:
            path.unlink()
        return []
    with open(path, newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if int(row["step"]) <= up_to]
    if rewrite:
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
    if not new_file:
        with open(path, newline="") as handle:
            header = next(csv.reader(handle), [])
        if header != list(row):  # a log begun by an older version: rewrite it with the new columns
            with open(path, newline="") as handle:
                rows = list(csv.DictReader(handle))
            with atomic_path(path) as tmp:
                with open(tmp, "w", newline="") as handle:
                    writer = csv.DictWriter(handle, fieldnames=list(row), restval="")
                    writer.writeheader()
                    writer.writerows({key: old.get(key, "") for key in row} for old in rows)
    with open(path, "w" if new_file else "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        if new_file:
            writer.writeheader()
        writer.writerow(row)
