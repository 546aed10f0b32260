"""Time and memory of alpha = sparsemax(t * F Eᵀ) (monolingual route, RAMEN eq. 3) at full vocabulary size.

Sizes: 32,000 x 30,522 (a foreign vocabulary beside BERT-base's) and 50,000 x 50,265
(RoBERTa's), d = 300, unit-length synthetic vectors: every second foreign row is a
noisy copy of an English row (a translation), the others are unrelated, temperature 10.

Each configuration runs in its own child process so that its peak RSS (ru_maxrss) is its own:

* ``gemm``: the bare chunked similarity GEMM (the floor: every method must compute it);
* ``ours``: ramen.alignment.sparsemax.sparsemax_alpha (top-k threshold, sparse CSR output);
* ``entmax``: entmax.sparsemax per chunk (full sort of every row), run on the first
  ``--entmax-rows`` rows and extrapolated linearly to all rows;
* ``dense``: one-shot dense similarity matrix + our threshold, where it fits in memory.

    .venv/bin/python benchmarks/bench_sparsemax_alpha.py [--sizes bert roberta] [--threads 1]

(``--sizes smoke``: 4,096 rows, a quick check; ``--smoke``: 256 x 2,000, a check that the script runs.)

Goals: ours <= 1.5 x the GEMM; peak RSS <= 2 GB (BERT size) and <= 4 GB (RoBERTa size).
Wall-time ratios drift when other processes share the cores; CPU-time ratios are printed beside them.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
SIZES = {"bert": (32_000, 30_522), "roberta": (50_000, 50_265), "smoke": (4_096, 30_522), "tiny": (256, 2_000)}
RSS_GOAL_GIB = {"bert": 2.0, "roberta": 4.0, "smoke": 2.0, "tiny": 2.0}
DIM = 300
TEMPERATURE = 10.0
CHUNK_ROWS = 2048
DENSE_LIMIT_GIB = 6.0  # the dense fp32 matrix is tried only below this size


def vectors(n_f: int, n_e: int, seed: int = 0):
    import torch

    generator = torch.Generator().manual_seed(seed)
    english = torch.nn.functional.normalize(torch.randn(n_e, DIM, generator=generator), dim=1)
    foreign = torch.randn(n_f, DIM, generator=generator)
    translated = torch.arange(0, n_f, 2)
    foreign[translated] = english[translated % n_e] + 0.05 * foreign[translated]
    return torch.nn.functional.normalize(foreign, dim=1), english


def child(mode: str, size: str, threads: int, entmax_rows: int) -> dict:
    sys.path.insert(0, str(SRC))
    import torch

    torch.set_num_threads(threads)
    n_f, n_e = SIZES[size]
    foreign, english = vectors(n_f, n_e)
    english_t = (english * TEMPERATURE).t().contiguous()
    result: dict = {"mode": mode, "size": size, "rows": n_f, "cols": n_e}
    start, cpu_start = time.perf_counter(), time.process_time()
    if mode == "gemm":
        checksum = 0.0
        for row in range(0, n_f, CHUNK_ROWS):
            checksum += float((foreign[row : row + CHUNK_ROWS] @ english_t)[0, 0])
    elif mode == "ours":
        from ramen.alignment.sparsemax import sparsemax_alpha

        alpha = sparsemax_alpha(foreign, english, temperature=TEMPERATURE, chunk_rows=CHUNK_ROWS, progress=False)
        result["nnz"] = int(alpha.nnz)
        result["mean_support"] = alpha.nnz / n_f
    elif mode == "entmax":
        from entmax import sparsemax as entmax_sparsemax

        rows = min(entmax_rows, n_f)
        for row in range(0, rows, CHUNK_ROWS):
            block = entmax_sparsemax(foreign[row : min(row + CHUNK_ROWS, rows)] @ english_t, dim=1)
            del block
        result["measured_rows"] = rows
    elif mode == "dense":
        from ramen.alignment.sparsemax import sparsemax_rows_sparse

        scores = foreign @ english_t
        indptr, _, _ = sparsemax_rows_sparse(scores)
        result["nnz"] = int(indptr[-1])
    result["seconds"] = time.perf_counter() - start
    result["cpu_seconds"] = time.process_time() - cpu_start
    if mode == "entmax":
        scale = n_f / result["measured_rows"]
        result["seconds_extrapolated"] = result["seconds"] * scale
        result["cpu_seconds"] *= scale
    result["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return result


def run_child(mode: str, size: str, threads: int, entmax_rows: int) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--sizes", size, "--threads", str(threads),
               "--entmax-rows", str(entmax_rows)]
    finished = subprocess.run(command, capture_output=True, text=True)
    if finished.returncode != 0:
        return {"mode": mode, "size": size, "error": finished.stderr.strip().splitlines()[-1:]}
    return json.loads(finished.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["bert", "roberta"], choices=sorted(SIZES))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--entmax-rows", type=int, default=4096, help="rows run through entmax (0: skip)")
    parser.add_argument("--no-dense", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="the smallest size (tiny: 256 x 2,000): checks that "
                        "the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.sizes, args.entmax_rows = ["tiny"], 128
    if args.child:
        print(json.dumps(child(args.child, args.sizes[0], args.threads, args.entmax_rows)))
        return
    print(f"d={DIM}, temperature={TEMPERATURE}, chunk_rows={CHUNK_ROWS}, threads={args.threads}")
    for size in args.sizes:
        n_f, n_e = SIZES[size]
        modes = ["gemm", "ours"] + (["entmax"] if args.entmax_rows else [])
        dense_gib = n_f * n_e * 4 / 2**30
        if not args.no_dense and dense_gib <= DENSE_LIMIT_GIB:
            modes.append("dense")
        results = {mode: run_child(mode, size, args.threads, args.entmax_rows) for mode in modes}
        gemm = results["gemm"].get("seconds")
        gemm_cpu = results["gemm"].get("cpu_seconds")
        print(f"\n{size}: {n_f:,} x {n_e:,} (dense fp32 matrix {dense_gib:.1f} GiB)")
        for mode, res in results.items():
            if "error" in res:
                print(f"  {mode:7s} failed: {res['error']}")
                continue
            seconds = res.get("seconds_extrapolated", res["seconds"])
            note = f" (extrapolated from {res['measured_rows']:,} rows)" if mode == "entmax" else ""
            extra = f", mean support {res['mean_support']:.2f}" if "mean_support" in res else ""
            print(f"  {mode:7s} {seconds:8.1f} s  ratio to GEMM {seconds / gemm:5.2f}x  "
                  f"(CPU time {res['cpu_seconds']:7.1f} s, {res['cpu_seconds'] / gemm_cpu:5.2f}x)  "
                  f"peak RSS {res['peak_rss_gib']:.2f} GiB{note}{extra}")
        ours = results["ours"]
        if "error" not in ours:
            ratio = ours["seconds"] / gemm
            print(f"  goal: ours <= 1.5x GEMM: {'met' if ratio <= 1.5 else 'NOT met'} ({ratio:.2f}x); "
                  f"peak RSS <= {RSS_GOAL_GIB[size]:.0f} GB: "
                  f"{'met' if ours['peak_rss_gib'] * 2**30 / 1e9 <= RSS_GOAL_GIB[size] else 'NOT met'}")


if __name__ == "__main__":
    main()
