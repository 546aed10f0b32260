"""Throughput and peak memory of monolingual corpus preparation at two corpus sizes.

Writes a synthetic French corpus of about ``--megabytes`` MB and one ten times
smaller (paragraphs of 1–6 sentences, about 5% of sentences repeating an
earlier one, a few too short, a few in Cyrillic), then runs
``ramen.data.text.corpus.prepare_monolingual`` on each in a fresh process with the paper's
filters (min_chars 10, min_script_ratio 0.5) and a sentence budget of 80% of
the corpus, so deduplication and sampling both do work. It does so twice:

* ``prepare``: paragraphs in, so sentence splitting runs as well as cleaning;
* ``clean``: the same sentences one per line (``split: false``, as for corpora
  that come split), so the figure is that of cleaning alone: normalisation,
  length and script filters, deduplication and sampling.

Prints, per run, the input MB/s, the CPU time of all processes, and the peak
RSS of the main process and of the largest cleaning process, then the
large/small RSS ratios (goal: ≤ 1.2: memory does not grow with the corpus) and
the large corpus's throughput (goal for cleaning: ≥ 20 MB/s on 2 cores).

    .venv/bin/python benchmarks/bench_text.py [--megabytes 1000] [--processes 2] [--workdir DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

WORDS = (
    "le la les un une des du de au aux et ou mais donc car ni que qui quoi dont où chat chien maison "
    "ville pays région fleuve montagne été hiver printemps automne élève école université histoire "
    "guerre paix roi reine église château musée théâtre opéra gare route forêt île côte mer océan "
    "grand petit ancien nouveau célèbre français européen première dernière plusieurs années siècle "
    "est était sont furent devient reste situé construit fondé nommé connu utilisé publié joué "
    "pendant depuis après avant entre contre selon sous sur dans avec sans pour vers chez"
).split()
CYRILLIC = "город река страна история война мир король церковь".split()


def write_corpus(path: Path, megabytes: float, seed: int, *, sentence_per_line: bool = False) -> tuple[int, int]:
    """Write the synthetic corpus, a paragraph or a sentence per line; return (bytes, sentences)."""
    rng = random.Random(seed)
    target = int(megabytes * 1e6)
    written = sentences = 0
    recent: list[str] = []
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            paragraph = []
            for _ in range(rng.randint(1, 6)):
                roll = rng.random()
                if roll < 0.05 and recent:
                    sentence = rng.choice(recent)
                elif roll < 0.06:
                    sentence = "Voir."
                elif roll < 0.07:
                    sentence = " ".join(rng.choices(CYRILLIC, k=8)).capitalize() + "."
                else:
                    words = rng.choices(WORDS, k=rng.randint(6, 24))
                    words.insert(rng.randrange(len(words)), str(sentences))  # keeps sentences distinct
                    sentence = " ".join(words).capitalize() + rng.choice(".....!?")
                    if len(recent) < 10_000:
                        recent.append(sentence)
                    else:
                        recent[rng.randrange(len(recent))] = sentence
                paragraph.append(sentence)
                sentences += 1
            line = ("\n" if sentence_per_line else " ").join(paragraph) + "\n"
            out.write(line)
            written += len(line.encode("utf-8"))
    return written, sentences


MEASURE = """
import json, resource, sys, time
sys.path.insert(0, {src!r})
from ramen.data.text.corpus import prepare_monolingual
start = time.perf_counter()
stats = prepare_monolingual([{{"path": {corpus!r}, "format": "text", "split": {split}}}], {output!r}, lang="fr",
                            min_chars=10, max_chars=2000, min_script_ratio=0.5,
                            max_sentences={budget}, seed=0, processes={processes}, progress=True)
seconds = time.perf_counter() - start
own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({{"seconds": seconds, "stats": stats,
                  "cpu_seconds": own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime,
                  "rss_main_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rss_worker_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}}))
"""


def measure(corpus: Path, output: Path, budget: int, processes: int, split: bool) -> dict:
    code = MEASURE.format(src=str(SRC), corpus=str(corpus), output=str(output), budget=budget, processes=processes,
                          split=split)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=1000.0, help="size of the large corpus")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=None, help="scratch directory (default: a temporary one)")
    parser.add_argument("--smoke", action="store_true", help="the smallest sizes: checks that the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.megabytes, args.processes = 0.2, 1
    with tempfile.TemporaryDirectory(dir=args.workdir) as scratch:
        scratch = Path(scratch)
        results = {}
        for mode in ("prepare", "clean"):
            for name, megabytes in (("small", args.megabytes / 10), ("large", args.megabytes)):
                corpus = scratch / f"{mode}-{name}.txt"
                start = time.perf_counter()
                size, sentences = write_corpus(corpus, megabytes, seed=1, sentence_per_line=mode == "clean")
                print(f"{mode} {name}: wrote {size / 1e6:.0f} MB, {sentences:,} sentences in "
                      f"{time.perf_counter() - start:.0f} s", flush=True)
                output = scratch / f"{mode}-{name}.out.txt"
                run = measure(corpus, output, int(0.8 * sentences), args.processes, split=mode == "prepare")
                run["megabytes"] = size / 1e6
                results[mode, name] = run
                corpus.unlink()
                output.unlink()
                print(f"{mode} {name}: {run['megabytes']:.0f} MB in {run['seconds']:.1f} s = "
                      f"{run['megabytes'] / run['seconds']:.1f} MB/s; peak RSS main {run['rss_main_mib']:.0f} MiB, "
                      f"largest cleaning process {run['rss_worker_mib']:.0f} MiB; {run['cpu_seconds']:.1f} "
                      f"CPU-seconds ({run['megabytes'] / run['cpu_seconds']:.1f} MB per CPU-second); "
                      f"{json.dumps(run['stats'])}", flush=True)
    for mode, what in (("prepare", "splitting + cleaning"), ("clean", "cleaning alone")):
        small, large = results[mode, "small"], results[mode, "large"]
        print(f"{mode}: throughput of {what}, large corpus: {large['megabytes'] / large['seconds']:.1f} MB/s "
              f"with {args.processes} processes (cleaning goal >= 20); CPU cost "
              f"{large['megabytes'] / large['cpu_seconds']:.1f} MB per CPU-second "
              f"(on a loaded machine wall-clock MB/s understates what idle cores give)")
        print(f"{mode}: peak RSS ratio large/small: main {large['rss_main_mib'] / small['rss_main_mib']:.2f}, "
              f"cleaning processes {large['rss_worker_mib'] / max(small['rss_worker_mib'], 1e-9):.2f} (goal <= 1.2)")


if __name__ == "__main__":
    main()
