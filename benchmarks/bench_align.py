"""Time link counting, p(e|f) estimation and the parallel initialiser at paper-like size.

Synthetic data: Zipf-distributed foreign ids, each usually aligned to a fixed
English "translation" id and otherwise to a random English id, English order
shuffled; the reverse links drop 10% of the forward links and add a few random
ones.  Defaults: V_f=32000, V_e=30522, d=768, 100k sentence pairs with ~20
links each per direction (~2M link pairs per direction).

    .venv/bin/python benchmarks/bench_align.py [--sentences N] [--dim D] [--smoke]

Peak RSS is the process high-water mark (ru_maxrss) after each step, so it
includes everything before it; the first figure is taken after writing the data.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ramen.alignment.parallel import count_links, translation_probabilities  # noqa: E402
from ramen.initializers import get_entry  # noqa: E402
from ramen.initializers.common import initialisation_stats  # noqa: E402


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def zipf_sampler(n: int, rng: np.random.Generator):
    weights = 1.0 / np.arange(1, n + 1)
    cdf = np.cumsum(weights / weights.sum())
    return lambda size: np.minimum(np.searchsorted(cdf, rng.random(size)), n - 1)


def write_corpus(out: Path, n_sent: int, v_f: int, v_e: int, rng: np.random.Generator) -> tuple[int, int]:
    draw_f, draw_e = zipf_sampler(v_f, rng), zipf_sampler(v_e, rng)
    translation = rng.integers(0, v_e, size=v_f)
    n_fwd = n_rev = 0
    files = [open(out / name, "w", encoding="utf-8") for name in ("f.ids", "e.ids", "fwd.links", "rev.links")]
    try:
        for start in range(0, n_sent, 10_000):
            block = min(10_000, n_sent - start)
            lengths = rng.integers(10, 31, size=block)
            f_all = draw_f(lengths.sum())
            noise = draw_e(lengths.sum())
            e_all = np.where(rng.random(lengths.sum()) < 0.7, translation[f_all], noise)
            keep_all = rng.random(lengths.sum()) >= 0.1
            lines = [[], [], [], []]
            pos = 0
            for n in lengths:
                f = f_all[pos : pos + n]
                perm = rng.permutation(n)
                e = np.empty(n, dtype=np.int64)
                e[perm] = e_all[pos : pos + n]
                fwd = [f"{i}-{perm[i]}" for i in range(n)]
                rev = [link for link, keep in zip(fwd, keep_all[pos : pos + n]) if keep]
                rev.append(f"{rng.integers(n)}-{rng.integers(n)}")
                lines[0].append(" ".join(map(str, f.tolist())))
                lines[1].append(" ".join(map(str, e.tolist())))
                lines[2].append(" ".join(fwd))
                lines[3].append(" ".join(rev))
                n_fwd += len(fwd)
                n_rev += len(rev)
                pos += n
            for handle, chunk in zip(files, lines):
                handle.write("\n".join(chunk) + "\n")
    finally:
        for handle in files:
            handle.close()
    return n_fwd, n_rev


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--foreign-vocab", type=int, default=32_000)
    parser.add_argument("--english-vocab", type=int, default=30_522)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--min-prob", type=float, default=0.01)
    parser.add_argument("--smoke", action="store_true", help="the smallest sizes: checks that the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.sentences, args.foreign_vocab, args.english_vocab, args.dim = 300, 1_000, 1_000, 16
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        n_fwd, n_rev = write_corpus(tmp, args.sentences, args.foreign_vocab, args.english_vocab, rng)
        print(f"data: {args.sentences} sentence pairs, {n_fwd} forward + {n_rev} reverse links "
              f"(written in {time.perf_counter() - t0:.1f} s, peak RSS {peak_rss_mib():.0f} MiB)")

        t0 = time.perf_counter()
        counts = count_links(tmp / "f.ids", tmp / "e.ids", [tmp / "fwd.links", tmp / "rev.links"],
                             args.foreign_vocab, args.english_vocab, "sum")
        t_count = time.perf_counter() - t0
        print(f"count_links (sum):          {t_count:6.2f} s  {(n_fwd + n_rev) / t_count / 1e6:5.2f} M links/s  "
              f"nnz {counts.nnz}  peak RSS {peak_rss_mib():.0f} MiB")

        t0 = time.perf_counter()
        counts_i = count_links(tmp / "f.ids", tmp / "e.ids", [tmp / "fwd.links", tmp / "rev.links"],
                               args.foreign_vocab, args.english_vocab, "intersection")
        t_inter = time.perf_counter() - t0
        print(f"count_links (intersection): {t_inter:6.2f} s  nnz {counts_i.nnz}  peak RSS {peak_rss_mib():.0f} MiB")
        del counts_i

    t0 = time.perf_counter()
    alpha = translation_probabilities(counts, min_prob=args.min_prob)
    t_prob = time.perf_counter() - t0
    print(f"translation_probabilities:  {t_prob:6.2f} s  nnz {alpha.nnz}  peak RSS {peak_rss_mib():.0f} MiB")

    source_vocab = [f"e{i}" for i in range(args.english_vocab)]
    foreign_vocab = [f"f{i}" for i in range(args.foreign_vocab)]
    for k, tok in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]):
        source_vocab[k] = foreign_vocab[k] = tok
    emb = torch.randn(args.english_vocab, args.dim) * 0.05
    bias = torch.randn(args.english_vocab) * 0.1
    t0 = time.perf_counter()
    result = get_entry("parallel").load()(emb, bias, foreign_vocab, source_vocab, alpha=alpha,
                                          generator=torch.Generator().manual_seed(0))
    t_init = time.perf_counter() - t0
    print(f"parallel init (d={args.dim}):     {t_init:6.2f} s  peak RSS {peak_rss_mib():.0f} MiB")
    stats = initialisation_stats(result, alpha)
    print(f"supported share {stats['supported_share']:.3f}, mean support size {stats['support_size_mean']:.2f}, "
          f"max {stats['support_size_max']}")
    per_link = (t_count) / (n_fwd + n_rev)
    print(f"extrapolated count_links (sum) for 2M sentence pairs at this density: "
          f"{per_link * (n_fwd + n_rev) * 2_000_000 / args.sentences / 60:.1f} min")


if __name__ == "__main__":
    main()
