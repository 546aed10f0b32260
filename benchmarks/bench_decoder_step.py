"""Time a bilingual causal-LM training step against a bare LlamaForCausalLM step at equal shapes.

CPU section, at equal shapes (the same number of sequences of the same length, vocabularies of
the same size, random Llama-layout weights, every parameter trained, fused AdamW, clipping):

(a) bare: Hugging Face LlamaForCausalLM on ``--batch`` English sequences, its own loss;
(b) ours: BilingualCausalLM (ramen.modeling.causal) on ``--batch``/2 English + ``--batch``/2
    foreign sequences, with a foreign input table (and output rows when untied) of its own.

They run in turn and the median step is reported, so background load hits them alike. The
ratio (b)/(a) is the cost of the per-language tables; goal <= 1.1.

GPU section (only when CUDA is available): the same comparison at a 0.5B-class shape
(Qwen2.5-0.5B: hidden 896, 24 blocks, 14 heads, 2 key/value heads, vocabulary 151,936, tied),
bf16 autocast, 8 sequences of 1,024 tokens.

Synthetic random token ids throughout.

    .venv/bin/python benchmarks/bench_decoder_step.py [--untied] [--threads N] [--no-gpu] [--smoke]

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
    vocab: int
    batch: int
    seq_len: int
    steps: int


SHAPES = {
    "smoke": Shape(32, 2, 4, 2, 64, 500, 4, 16, 2),
    "cpu": Shape(256, 4, 4, 2, 688, 8_000, 8, 128, 8),
    "gpu-0.5b": Shape(896, 24, 14, 2, 4864, 151_936, 8, 1024, 10),
}


def llama(shape: Shape, tied: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                         num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.kv_heads, max_position_embeddings=max(2048, shape.seq_len),
                         tie_word_embeddings=tied)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def windows(shape: Shape, rows: int, step: int, device: str) -> CausalBatch:
    generator = torch.Generator().manual_seed(step)
    ids = torch.randint(0, shape.vocab, (rows, shape.seq_len + 1), generator=generator)
    return CausalBatch(ids[:, :-1].to(device), torch.ones(rows, shape.seq_len, dtype=torch.long, device=device),
                       ids[:, 1:].to(device))


def updates_for(model: torch.nn.Module, device: str, precision: str) -> Updates:
    params = [p for p in model.parameters() if p.requires_grad]
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


def compare(shape: Shape, tied: bool, device: str, precision: str) -> dict:
    bare = llama(shape, tied).to(device).train()
    source = llama(shape, tied)
    foreign_rows = torch.randn(shape.vocab, shape.hidden) * 0.02
    tables = ForeignTables(foreign_rows, None if tied else torch.randn(shape.vocab, shape.hidden) * 0.02)
    ours = BilingualCausalLM(source, "en", {"xx": tables}).to(device).train()
    bare_updates, our_updates = updates_for(bare, device, precision), updates_for(ours, device, precision)
    half = shape.batch // 2

    def bare_step(step: int) -> None:
        batch = windows(shape, shape.batch, step, device)
        # The library shifts the labels itself and computes logits at every position.
        bare_updates.batch(1, lambda _: bare(input_ids=batch.input_ids, labels=batch.input_ids).loss)

    def our_step(step: int) -> None:
        batches = {"en": windows(shape, half, step, device), "xx": windows(shape, half, step + 10_000, device)}

        def loss(_):
            losses = ours(batches)
            return sum(losses.values()) / len(losses)

        our_updates.batch(1, loss)

    bare_step(0), our_step(0)  # warm-up: allocations, kernels, optimiser state
    bare_times, our_times = [], []
    for step in range(1, shape.steps + 1):
        bare_times.append(timed(lambda: bare_step(step), device))
        our_times.append(timed(lambda: our_step(step), device))
    bare_s, our_s = statistics.median(bare_times), statistics.median(our_times)
    return {"bare_s": bare_s, "ours_s": our_s, "ratio": our_s / bare_s,
            "tokens_per_s": shape.batch * shape.seq_len / our_s}


def report(name: str, shape: Shape, tied: bool, result: dict) -> None:
    print(f"{name}: hidden {shape.hidden}, {shape.layers} blocks, vocabulary {shape.vocab:,}, "
          f"{shape.batch} x {shape.seq_len} tokens, {'tied' if tied else 'untied'} output, {shape.steps} steps")
    print(f"  (a) bare LlamaForCausalLM      {result['bare_s']:.4f} s/step")
    print(f"  (b) BilingualCausalLM en + xx  {result['ours_s']:.4f} s/step  ({result['tokens_per_s']:,.0f} tokens/s)")
    print(f"  ratio (b)/(a) = {result['ratio']:.3f}  (goal <= 1.1)")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--untied", action="store_true", help="an untied output layer (one per language)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--no-gpu", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="the smallest shape, two steps")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    tied = not args.untied
    results = {}
    cpu_shape = SHAPES["smoke" if args.smoke else "cpu"]
    results["cpu"] = compare(cpu_shape, tied, "cpu", "fp32")
    report("CPU", cpu_shape, tied, results["cpu"])
    if torch.cuda.is_available() and not args.no_gpu:
        gpu_shape = SHAPES["smoke" if args.smoke else "gpu-0.5b"]
        torch.set_float32_matmul_precision("high")
        results["gpu"] = compare(gpu_shape, tied, "cuda", "bf16")
        report(f"GPU ({torch.cuda.get_device_name()}, bf16)", gpu_shape, tied, results["gpu"])
    return results


if __name__ == "__main__":
    main()
