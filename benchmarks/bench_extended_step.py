"""Time an extended-vocabulary causal LM against a plain LlamaForCausalLM of the extended size.

BilingualCausalLM.extended (ramen.modeling.causal) keeps the source's rows and the new rows as two
parameters: each token's input row is looked up in the part that holds it and the logits of the
two parts are concatenated. This measures what that costs against one plain table of
``--vocab`` + ``--new`` rows, at equal shapes (random Llama-layout weights, synthetic ids over
the whole extended vocabulary):

(a) forward: the mean next-token loss of a batch, no gradients;
(b) a training step (fused AdamW, clipping) with every parameter trained;
(c) a first-stage step: only the new rows trained (the plain model: its whole table, the least
    it can train to move them).

Median over the steps, run in turn so that background load hits both alike; goal for (a) and
(b): ratio ours/plain <= 1.1.

    .venv/bin/python benchmarks/bench_extended_step.py [--untied] [--threads N] [--smoke] [--device cuda]

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
    intermediate: int
    vocab: int  # the source's rows
    new: int  # the new rows
    batch: int
    seq_len: int
    steps: int


SHAPES = {
    "smoke": Shape(32, 2, 4, 64, 500, 100, 4, 16, 2),
    "cpu": Shape(256, 4, 4, 688, 8_000, 2_000, 8, 128, 8),
    "gpu": Shape(576, 30, 9, 1536, 49_152, 8_000, 8, 1024, 10),  # SmolLM2-135M's shape
}


def llama(shape: Shape, rows: int, tied: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=rows, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                         num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.heads, max_position_embeddings=max(2048, shape.seq_len),
                         tie_word_embeddings=tied)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def batch(shape: Shape, step: int, device: str) -> CausalBatch:
    generator = torch.Generator().manual_seed(step)
    ids = torch.randint(0, shape.vocab + shape.new, (shape.batch, shape.seq_len + 1), generator=generator)
    return CausalBatch(ids[:, :-1].to(device), torch.ones(shape.batch, shape.seq_len, dtype=torch.long,
                                                          device=device), ids[:, 1:].to(device))


def timed(function, device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    started = time.perf_counter()
    function()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - started


def updates_for(params, device: str, precision: str) -> Updates:
    optimizer = torch.optim.AdamW(params, lr=1e-4, fused=fused_adam(device))
    return Updates(optimizer, max_grad_norm=1.0, precision=precision, device=device, parameters=params)


def compare(shape: Shape, tied: bool, device: str, precision: str) -> dict:
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
        data = batch(shape, step, device)
        logits = plain(input_ids=data.input_ids, attention_mask=data.attention_mask).logits
        return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), data.labels.flatten())

    def our_forward(step):
        return ours({"xx": batch(shape, step, device)})["xx"]

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
        plain_run, our_run = build()
        plain_run(0), our_run(0)  # warm-up: allocations, kernels, optimiser state
        plain_times, our_times = [], []
        for step in range(1, shape.steps + 1):
            plain_times.append(timed(lambda: plain_run(step), device))
            our_times.append(timed(lambda: our_run(step), device))
        plain_s, our_s = statistics.median(plain_times), statistics.median(our_times)
        results[name] = {"plain_s": plain_s, "ours_s": our_s, "ratio": our_s / plain_s}
    return results


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--untied", action="store_true")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--smoke", action="store_true", help="the smallest shape, two steps")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda")
    shape = SHAPES["smoke" if args.smoke else ("gpu" if cuda else "cpu")]
    if cuda:
        torch.set_float32_matmul_precision("high")
    tied = not args.untied
    results = compare(shape, tied, args.device, "bf16" if cuda else "fp32")
    print(f"{args.device}: hidden {shape.hidden}, {shape.layers} blocks, vocabulary {shape.vocab:,} + {shape.new:,} "
          f"new, {shape.batch} x {shape.seq_len} tokens, {'tied' if tied else 'untied'} output, {shape.steps} steps")
    for name, result in results.items():
        print(f"  {name:15s} plain {result['plain_s']:.4f} s  ours {result['ours_s']:.4f} s  "
              f"ratio ours/plain = {result['ratio']:.3f}")
    return results


if __name__ == "__main__":
    main()
