"""Time a decoder's (causal LM's) steps against a plain LlamaForCausalLM at equal shapes, for both vocabularies.

Random Llama-layout weights, synthetic random token ids, fused AdamW and clipping; each pair runs
in turn and the median step is reported, so background load hits both alike. Goal: ratio <= 1.1.

``replace`` (a foreign table of its own): the cost of the per-language tables.

(a) bare: Hugging Face LlamaForCausalLM on ``batch`` English sequences, its own loss;
(b) ours: BilingualCausalLM (ramen.modeling.causal) on ``batch``/2 English + ``batch``/2
    foreign sequences, with a foreign input table (and output rows when untied) of its own;
    every parameter trained.

``extend`` (an extended vocabulary): BilingualCausalLM.extended keeps the source's rows and the
new rows as two parameters: each token's input row is looked up in the part that holds it and
the logits of the two parts are concatenated. Against one plain table of ``vocab`` + ``new`` rows
(ids over the whole extended vocabulary):

    forward          the mean next-token loss of a batch, no gradients;
    train all        a training step with every parameter trained;
    train new rows   a first-stage step: only the new rows trained (the plain model: its whole
                     table, the least it can train to move them); no goal.

CPU section at fp32; GPU section (only when CUDA is available) under bf16 autocast, at a larger
shape: ``replace`` at Qwen2.5-0.5B's (hidden 896, 24 blocks, 14 heads, 2 key/value heads,
vocabulary 151,936), ``extend`` at SmolLM2-135M's with 8,000 new rows; 8 sequences of 1,024 tokens.

    .venv/bin/python benchmarks/bench_decoder_step.py [--vocabulary replace extend] [--untied]
        [--threads N] [--no-gpu] [--smoke]

``--smoke``: the smallest shape and two steps each, a quick check of the script itself.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ramen.modeling.causal import BilingualCausalLM, CausalBatch, ForeignTables  # noqa: E402
from ramen.training.optimisation import Updates, fused_adam  # noqa: E402


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int  # the source's rows
    batch: int
    seq_len: int
    steps: int
    new: int = 0  # the new rows of an extended vocabulary


SHAPES = {
    "replace": {
        "smoke": Shape(32, 2, 4, 2, 64, 500, 4, 16, 2),
        "cpu": Shape(256, 4, 4, 2, 688, 8_000, 8, 128, 8),
        "gpu": Shape(896, 24, 14, 2, 4864, 151_936, 8, 1024, 10),  # Qwen2.5-0.5B's shape
    },
    "extend": {
        "smoke": Shape(32, 2, 4, 4, 64, 500, 4, 16, 2, new=100),
        "cpu": Shape(256, 4, 4, 4, 688, 8_000, 8, 128, 8, new=2_000),
        "gpu": Shape(576, 30, 9, 9, 1536, 49_152, 8, 1024, 10, new=8_000),  # SmolLM2-135M's shape
    },
}


def llama(shape: Shape, rows: int, tied: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=rows, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                         num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.kv_heads, max_position_embeddings=max(2048, shape.seq_len),
                         tie_word_embeddings=tied)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def windows(shape: Shape, rows: int, vocab: int, step: int, device: str) -> CausalBatch:
    generator = torch.Generator().manual_seed(step)
    ids = torch.randint(0, vocab, (rows, shape.seq_len + 1), generator=generator)
    return CausalBatch(ids[:, :-1].to(device), torch.ones(rows, shape.seq_len, dtype=torch.long, device=device),
                       ids[:, 1:].to(device))


def updates_for(params, device: str, precision: str) -> Updates:
    optimizer = torch.optim.AdamW(params, lr=1e-4, fused=fused_adam(device))
    return Updates(optimizer, max_grad_norm=1.0, precision=precision, device=device, parameters=params)


def timed(function, device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    started = time.perf_counter()
    function()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - started


def race(theirs, ours, steps: int, device: str) -> tuple[float, float]:
    """The median seconds per step of each, run in turn after one warm-up step each."""
    theirs(0), ours(0)  # warm-up: allocations, kernels, optimiser state
    their_times, our_times = [], []
    for step in range(1, steps + 1):
        their_times.append(timed(lambda: theirs(step), device))
        our_times.append(timed(lambda: ours(step), device))
    return statistics.median(their_times), statistics.median(our_times)


def compare_replace(shape: Shape, tied: bool, device: str, precision: str) -> dict:
    bare = llama(shape, shape.vocab, tied).to(device).train()
    source = llama(shape, shape.vocab, tied)
    foreign_rows = torch.randn(shape.vocab, shape.hidden) * 0.02
    tables = ForeignTables(foreign_rows, None if tied else torch.randn(shape.vocab, shape.hidden) * 0.02)
    ours = BilingualCausalLM(source, "en", {"xx": tables}).to(device).train()
    bare_updates, our_updates = (updates_for([p for p in model.parameters() if p.requires_grad], device, precision)
                                 for model in (bare, ours))
    half = shape.batch // 2

    def bare_step(step: int) -> None:
        batch = windows(shape, shape.batch, shape.vocab, step, device)
        # The library shifts the labels itself and computes logits at every position.
        bare_updates.batch(1, lambda _: bare(input_ids=batch.input_ids, labels=batch.input_ids).loss)

    def our_step(step: int) -> None:
        batches = {"en": windows(shape, half, shape.vocab, step, device),
                   "xx": windows(shape, half, shape.vocab, step + 10_000, device)}

        def loss(_):
            losses = ours(batches)
            return sum(losses.values()) / len(losses)

        our_updates.batch(1, loss)

    bare_s, our_s = race(bare_step, our_step, shape.steps, device)
    return {"bare_s": bare_s, "ours_s": our_s, "ratio": our_s / bare_s,
            "tokens_per_s": shape.batch * shape.seq_len / our_s}


def compare_extend(shape: Shape, tied: bool, device: str, precision: str) -> dict:
    total = shape.vocab + shape.new
    plain = llama(shape, total, tied).to(device).train()
    source = llama(shape, shape.vocab, tied)
    hidden = shape.hidden
    tables = ForeignTables(torch.cat([source.get_input_embeddings().weight.detach(),
                                      torch.randn(shape.new, hidden) * 0.02]),
                           None if tied else torch.cat([source.get_output_embeddings().weight.detach(),
                                                        torch.randn(shape.new, hidden) * 0.02]))
    ours = BilingualCausalLM.extended(source, tables, shape.vocab, ("xx",)).to(device).train()

    def plain_forward(step):
        data = windows(shape, shape.batch, total, step, device)
        logits = plain(input_ids=data.input_ids, attention_mask=data.attention_mask).logits
        return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), data.labels.flatten())

    def our_forward(step):
        return ours({"xx": windows(shape, shape.batch, total, step, device)})["xx"]

    def stepper(model, forward, params):
        for param in model.parameters():
            param.requires_grad_(False)
        for param in params:
            param.requires_grad_(True)
        updates = updates_for(params, device, precision)
        return lambda step: updates.batch(1, lambda _: forward(step))

    def no_grad(forward):
        def run(step):
            with torch.no_grad(), torch.autocast(device.split(":")[0], dtype=torch.bfloat16,
                                                 enabled=precision == "bf16"):
                forward(step)
        return run

    new_params = ours.parameter_groups()["foreign_embeddings"]
    plain_tables = list({id(p): p for p in (plain.get_input_embeddings().weight,
                                            plain.get_output_embeddings().weight)}.values())
    # Built when their case runs: a step's setup decides which parameters require gradients.
    cases = {
        "forward": lambda: (no_grad(plain_forward), no_grad(our_forward)),
        "train all": lambda: (stepper(plain, plain_forward, list(plain.parameters())),
                              stepper(ours, our_forward, list(ours.parameters()))),
        "train new rows": lambda: (stepper(plain, plain_forward, plain_tables),
                                   stepper(ours, our_forward, new_params)),
    }
    results = {}
    for name, build in cases.items():
        plain_s, our_s = race(*build(), shape.steps, device)
        results[name] = {"plain_s": plain_s, "ours_s": our_s, "ratio": our_s / plain_s}
    return results


def report_replace(name: str, shape: Shape, tied: bool, result: dict) -> None:
    print(f"replace, {name}: hidden {shape.hidden}, {shape.layers} blocks, vocabulary {shape.vocab:,}, "
          f"{shape.batch} x {shape.seq_len} tokens, {'tied' if tied else 'untied'} output, {shape.steps} steps")
    print(f"  (a) bare LlamaForCausalLM      {result['bare_s']:.4f} s/step")
    print(f"  (b) BilingualCausalLM en + xx  {result['ours_s']:.4f} s/step  ({result['tokens_per_s']:,.0f} tokens/s)")
    print(f"  ratio (b)/(a) = {result['ratio']:.3f}  (goal <= 1.1)")


def report_extend(name: str, shape: Shape, tied: bool, results: dict) -> None:
    print(f"extend, {name}: hidden {shape.hidden}, {shape.layers} blocks, vocabulary {shape.vocab:,} + "
          f"{shape.new:,} new, {shape.batch} x {shape.seq_len} tokens, {'tied' if tied else 'untied'} output, "
          f"{shape.steps} steps")
    for case, result in results.items():
        print(f"  {case:15s} plain {result['plain_s']:.4f} s  ours {result['ours_s']:.4f} s  "
              f"ratio ours/plain = {result['ratio']:.3f}")


COMPARISONS = {"replace": (compare_replace, report_replace), "extend": (compare_extend, report_extend)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocabulary", nargs="+", choices=list(COMPARISONS), default=list(COMPARISONS),
                        help="the comparisons to run (default: both)")
    parser.add_argument("--untied", action="store_true", help="an untied output layer")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--no-gpu", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="the smallest shape, two steps")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    tied = not args.untied
    sections = [("cpu", "CPU", "fp32")]
    if torch.cuda.is_available() and not args.no_gpu:
        torch.set_float32_matmul_precision("high")
        sections.append(("cuda", f"GPU ({torch.cuda.get_device_name()}, bf16)", "bf16"))
    results = {}
    for vocabulary in args.vocabulary:
        compare, report = COMPARISONS[vocabulary]
        for device, name, precision in sections:
            shape = SHAPES[vocabulary]["smoke" if args.smoke else ("gpu" if device == "cuda" else "cpu")]
            results[vocabulary, device] = compare(shape, tied, device, precision)
            report(name, shape, tied, results[vocabulary, device])
    return results


if __name__ == "__main__":
    main()
