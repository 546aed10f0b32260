"""The GPU check's throughput at the paper's shapes (:mod:`ramen.reports.gpu_check`, and the GPU
section of ``benchmarks/bench_train_step.py``): the bilingual training loop and a bare
``BertForMaskedLM`` update on random weights and token ids, timed on one device."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FOREIGN_SPECIAL = dict(cls=2, sep=3, pad=0, mask=4, all_special=[0, 1, 2, 3, 4])
GIB = 1024 ** 3


@dataclass(frozen=True)
class Shape:
    """A model shape and batch of the paper: ``per_language`` sequences of ``seq_len`` tokens per
    language and update, ``updates`` in the paper's run."""

    name: str
    config: Mapping  # transformers.BertConfig arguments
    per_language: int
    updates: int
    seq_len: int = 256
    foreign_vocab: int = 32_000  # §3.1: the foreign vocabularies have 32k subwords


def paper_shapes() -> list[Shape]:
    """BERT-base (56 + 56 x 256, 120k updates) and BERT-large (12 + 12 x 256, 300k updates), §3.1."""
    return [Shape("base", {}, 56, 120_000),
            Shape("large", dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                intermediate_size=4096), 12, 300_000)]


def projected_hours(updates: int, seconds_per_update: float) -> float:
    return updates * seconds_per_update / 3600


def synthetic_stream(directory: Path, name: str, vocab_size: int, first_id: int, seed: int,
                     sentences: int = 20_000):
    """A corpus of random ids on disk, read through numpy.memmap as training reads encoded corpora."""
    from ramen.vocab.encode import TokenStream

    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 40, size=sentences)
    path = Path(directory) / f"{name}.bin"
    rng.integers(first_id, vocab_size, size=int(lengths.sum())).astype(np.uint16).tofile(path)
    ids = np.memmap(path, dtype=np.uint16, mode="r")
    return TokenStream(ids=ids, offsets=np.concatenate([[0], np.cumsum(lengths)]), vocab_size=vocab_size)


def bilingual_model(source, foreign_vocab: int, lang: str = "fr"):
    """``source`` (a masked LM) with a random ``foreign_vocab``-row foreign table beside English."""
    import torch

    from ramen.modeling.bilingual import BilingualMaskedLM

    hidden = source.config.hidden_size
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(foreign_vocab, hidden, generator=generator) * source.config.initializer_range
    return BilingualMaskedLM(source, "en", {lang: (table, torch.zeros(foreign_vocab))})


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def reset_peak_memory(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_memory(device: str) -> float | None:
    """Peak GPU memory allocated since :func:`reset_peak_memory`, in bytes (None on the CPU)."""
    import torch

    return float(torch.cuda.max_memory_allocated()) if device.startswith("cuda") else None


def masked_lm(model, streams, specials, settings):
    """RAMEN's masked-LM objective on ``model``, as train_bilingual trains a variant without ``objective``."""
    from ramen.objectives import DEFAULT_OBJECTIVE, get_objective
    from ramen.objectives.base import BatchShape, ObjectiveSettings

    return get_objective(DEFAULT_OBJECTIVE).build(model, streams, specials, BatchShape.of(settings),
                                                  ObjectiveSettings())


def loop_timing(model, streams, specials, settings, warmup: int, device: str, directory: Path) -> dict:
    """Seconds per update, tokens/s and data-wait share of the training loop (masked-LM on ``model``)
    after ``warmup`` updates."""
    from ramen.training.trainer import train

    rows = train(masked_lm(model, streams, specials, settings), settings, directory / "checkpoints",
                 directory / "metrics.csv", device=device, progress=False)
    timed = [row for row in rows if row["step"] > warmup] or rows[-1:]
    seconds = sum(row["step_s"] for row in timed)
    return {"step_s": seconds / len(timed),
            "tokens_per_s": float(np.mean([row["tokens_per_s"] for row in timed])),
            "data_wait": sum(row["data_wait"] * row["step_s"] for row in timed) / seconds}


def bare_step_fn(bare, stream, special, batch: int, seq_len: int, device: str, precision: str = "auto"):
    """One update of a bare Hugging Face masked LM on ``batch`` sequences (its own loss over the whole
    vocabulary at every position, every parameter trained); returns the seconds spent making the batch."""
    import torch

    from ramen.training.optimisation import fused_adam
    from ramen.training.precision import autocast_dtype
    from ramen.training.batches import make_batch, step_rng

    params = [p for p in bare.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4, fused=fused_adam(device))
    dtype = autocast_dtype(precision, device)

    def step(index: int) -> float:
        start = time.perf_counter()
        masked = make_batch(stream, special, step_rng(0, index, 0), batch, seq_len, 0.15)
        data = time.perf_counter() - start
        inputs = {"input_ids": masked.input_ids.to(device), "attention_mask": masked.attention_mask.to(device),
                  "labels": masked.labels.to(device)}
        with torch.autocast(device.split(":")[0], dtype=dtype, enabled=dtype is not None):
            loss = bare(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return data

    return step


def time_interleaved(steps_by_name: Mapping[str, Callable[[int], float]], warmup: int, steps: int,
                     device: str = "cpu") -> dict[str, tuple[float, float]]:
    """Median seconds per step and data share for each step function, run in turn.

    Taking turns exposes every variant to the same background load; the median drops the steps a
    burst of it lands on.
    """
    for index in range(warmup):
        for step in steps_by_name.values():
            step(index + 1)
    synchronize(device)
    times = {name: [] for name in steps_by_name}
    data = {name: [] for name in steps_by_name}
    for index in range(warmup, warmup + steps):
        for name, step in steps_by_name.items():
            start = time.perf_counter()
            data[name].append(step(index + 1))
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return {name: (float(np.median(times[name])), float(np.sum(data[name]) / np.sum(times[name])))
            for name in steps_by_name}


def measure_shape(shape: Shape, device: str, workdir: Path, steps: int = 20, warmup: int = 2,
                  sentences: int = 200_000, compile: bool = False) -> dict:
    """The training loop and a bare BertForMaskedLM update at ``shape`` on ``device``: one row of the page."""
    import torch
    from transformers import AutoModelForMaskedLM, BertConfig

    from ramen.training.batches import SpecialIds
    from ramen.training.trainer import PARAMETER_GROUPS, TrainSettings

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    config = BertConfig(**shape.config)
    english = SpecialIds(**FOREIGN_SPECIAL, vocab_size=config.vocab_size)
    foreign = SpecialIds(**FOREIGN_SPECIAL, vocab_size=shape.foreign_vocab)
    specials = {"en": english, "fr": foreign}
    streams = {"en": synthetic_stream(workdir, "en", english.vocab_size, 5, 0, sentences),
               "fr": synthetic_stream(workdir, "fr", foreign.vocab_size, 5, 1, sentences)}

    torch.manual_seed(0)
    model = bilingual_model(AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa"), shape.foreign_vocab)
    settings = TrainSettings(steps=warmup + steps, batch_size=shape.per_language, seq_len=shape.seq_len,
                             train=list(PARAMETER_GROUPS), log_every=1, warmup_steps=4000, compile=compile)
    reset_peak_memory(device)
    # torch.compile spends its first updates compiling: they are left out as well.
    timing = loop_timing(model, streams, specials, settings, warmup + (3 if compile else 0), device,
                         workdir / "loop")
    ours_peak = peak_memory(device)
    del model
    reset_peak_memory(device)

    torch.manual_seed(0)
    bare = AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa").to(device).train()
    sequences = 2 * shape.per_language
    bare_time, _ = time_interleaved({"bare": bare_step_fn(bare, streams["en"], english, sequences, shape.seq_len,
                                                          device)}, warmup, steps, device)["bare"]
    bare_peak = peak_memory(device)
    del bare
    reset_peak_memory(device)
    return {"model": shape.name, "per_language": shape.per_language, "seq_len": shape.seq_len,
            "tokens_per_update": sequences * shape.seq_len, "step_s": timing["step_s"],
            "tokens_per_s": timing["tokens_per_s"], "data_wait": timing["data_wait"], "peak_memory": ours_peak,
            "updates": shape.updates, "hours": projected_hours(shape.updates, timing["step_s"]),
            "bare_step_s": bare_time, "bare_peak_memory": bare_peak, "ratio": timing["step_s"] / bare_time}


def throughput_line(row: Mapping) -> str:
    """A measured row as the benchmark script prints it."""
    memory = "" if row["peak_memory"] is None else f", peak memory {row['peak_memory'] / GIB:.1f} GiB"
    bare_memory = "" if row["bare_peak_memory"] is None else f", peak memory {row['bare_peak_memory'] / GIB:.1f} GiB"
    return (f"BERT-{row['model']} ours: {row['per_language']} en + {row['per_language']} fr x {row['seq_len']}, all "
            f"parameters: {row['step_s']:.3f} s/update, {row['tokens_per_s']:.0f} tokens/s, data wait "
            f"{row['data_wait']:.1%}{memory}; {row['updates']:,} updates ~ {row['hours']:.1f} h\n"
            f"BERT-{row['model']} bare BertForMaskedLM {2 * row['per_language']} x {row['seq_len']}: "
            f"{row['bare_step_s']:.3f} s/update{bare_memory}; ratio ours/bare {row['ratio']:.2f}")
