"""Peak memory and time of the causal loss and its backward: the whole vocabulary's logits at once
against the chunked loss (ramen.modeling.causal: BilingualCausalLM.next_token_loss, one chunk of
positions' logits at a time, recomputed in backward).

A random Llama-layout model's head (untied) over ``--vocab`` rows, hidden states of ``--positions``
targets as a leaf tensor (the blocks are not run: their memory is the same either way). Peak: the
most bytes the CPU allocator held during loss + backward above what it held before, from torch's
profiler memory events; the output rows' gradient (vocab x hidden, the same for both) included.
Time: median of ``--repeats`` runs, outside the profiler, run in turn so background load hits both
alike. Also printed: the memory plan's ``logits`` part for the chunked loss at this shape
(ramen.training.memory), against the measured peak less the rows' gradient.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_chunked_loss.py [--positions 1024 --vocab 144000] [--bf16]

``--smoke``: the smallest shape with a chunk budget small enough for several chunks.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ramen.modeling import causal  # noqa: E402
from ramen.modeling.causal import BilingualCausalLM  # noqa: E402
from ramen.training import memory  # noqa: E402

MIB = 2 ** 20


def model_of(vocab: int, hidden: int) -> BilingualCausalLM:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False)
    return BilingualCausalLM(LlamaForCausalLM(config), "en")


def whole(model, hidden, labels):
    return F.cross_entropy(model.logits("en", hidden).float(), labels)


def chunked(model, hidden, labels):
    return model.next_token_loss("en", hidden, labels)


def autocast(bf16: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)


def step(loss_of, model, hidden, labels, bf16: bool = False) -> None:
    with autocast(bf16):
        loss = loss_of(model, hidden, labels)
    loss.backward()


def peak_bytes(loss_of, model, hidden, labels, bf16: bool = False) -> int:
    """The allocator's most bytes held during one step, above what it held at the start."""
    model.zero_grad(set_to_none=True)
    hidden.grad = None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step(loss_of, model, hidden, labels, bf16)
    events = sorted((event for event in prof.profiler.kineto_results.events() if event.name() == "[memory]"),
                    key=lambda event: event.start_ns())
    held = top = 0
    for event in events:
        held += event.nbytes()
        top = max(top, held)
    return top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--positions", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=144_000, help="an 8B Llama's vocabulary, extended")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget-mib", type=float, default=None, help="chunk budget (default: the module's)")
    parser.add_argument("--bf16", action="store_true", help="the head's matmul under CPU autocast (bf16)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.positions, args.vocab, args.hidden, args.repeats, args.budget_mib = 64, 2000, 16, 1, 0.1
    if args.budget_mib is not None:
        causal.LOGIT_CHUNK_BYTES = int(args.budget_mib * MIB)
    torch.set_num_threads(1)
    model = model_of(args.vocab, args.hidden)
    hidden = torch.randn(args.positions, args.hidden, requires_grad=True)
    labels = torch.randint(0, args.vocab, (args.positions,))
    chunk = causal.logit_chunk(args.vocab)
    print(f"positions {args.positions}, vocabulary {args.vocab}, hidden {args.hidden}: chunk {chunk} positions "
          f"({-(-args.positions // chunk)} chunks), whole fp32 logits {4 * args.positions * args.vocab / MIB:.1f} MiB")

    step(whole, model, hidden, labels, args.bf16)  # warm up both
    step(chunked, model, hidden, labels, args.bf16)
    times = {"whole": [], "chunked": []}
    for _ in range(args.repeats):
        for name, loss_of in (("whole", whole), ("chunked", chunked)):
            model.zero_grad(set_to_none=True)
            hidden.grad = None
            start = time.perf_counter()
            step(loss_of, model, hidden, labels, args.bf16)
            times[name].append(time.perf_counter() - start)
    seconds = {name: statistics.median(values) for name, values in times.items()}
    peaks = {name: peak_bytes(loss_of, model, hidden, labels, args.bf16) for name, loss_of in
             (("whole", whole), ("chunked", chunked))}
    rows_gradient = 4 * args.vocab * args.hidden
    for name in ("whole", "chunked"):
        print(f"{name:8s} loss+backward: peak {peaks[name] / MIB:9.1f} MiB "
              f"(less the rows' gradient {(peaks[name] - rows_gradient) / MIB:9.1f} MiB), {seconds[name]:.3f} s")
    print(f"ratio chunked/whole: peak {peaks['chunked'] / peaks['whole']:.3f}, "
          f"less the rows' gradient {(peaks['chunked'] - rows_gradient) / (peaks['whole'] - rows_gradient):.3f}, "
          f"time {seconds['chunked'] / seconds['whole']:.3f}")
    memory.LOGIT_CHUNK_BYTES = causal.LOGIT_CHUNK_BYTES  # the plan of the chunk measured
    compute = 2 if args.bf16 else memory.FP32
    planned = (compute + memory.CHUNK_LOGIT_COPIES * memory.FP32) * min(args.positions, chunk) * args.vocab
    print(f"planned logits part ({'bf16' if args.bf16 else 'fp32'}) {planned / MIB:.1f} MiB; "
          f"ratio measured/planned {(peaks['chunked'] - rows_gradient) / planned:.3f}")


if __name__ == "__main__":
    main()
