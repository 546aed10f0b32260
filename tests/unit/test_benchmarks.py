"""Every script in benchmarks/ runs at its smallest size (``--smoke``) and prints its figures.

A benchmark is not run by the workflow, so an API it uses can move without anything else
noticing; this runs each one, a new one included, as a smoke test. No timing is asserted:
the figures of a smoke run mean nothing, only that the script gets to print them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Each test starts processes or runs for seconds: left to `make test`, out of `make test-fast`.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = sorted((REPO / "benchmarks").glob("*.py"))

# What each script prints once it has measured something; a script not listed here must print
# at least one line with a number.
FIGURES = {
    "bench_align.py": ["count_links (sum):", "translation_probabilities:", "parallel init"],
    "bench_chunked_loss.py": ["whole    loss+backward: peak", "chunked  loss+backward: peak", "ratio chunked/whole",
                              "ratio measured/planned"],
    "bench_nli.py": ["s/step at batch", "eval:"],
    "bench_objectives.py": ["s/update", "mlm"],
    "bench_peers_agreement.py": ["wechsel", "focus", "mixture_rows_ours"],
    "bench_sparsemax_alpha.py": ["gemm", "ours", "ratio to GEMM"],
    "bench_text.py": ["MB/s", "peak RSS ratio"],
    "bench_train_step.py": ["bare BertForMaskedLM", "ratio ours/bare", "tokens/s", "s/update", "updates ~"],
    "bench_decoder_step.py": ["replace, CPU", "ratio (b)/(a)", "tokens/s", "extend, CPU", "forward", "train all",
                              "train new rows", "ratio ours/plain"],
    "bench_sharding.py": ["ddp", "fsdp", "lora", "tokens/s per process", "ratio to ddp", "held per process"],
    "bench_memory_plan.py": ["llama-3.1-8b-lora.yaml", "ratio to limit", "ratio allocated/planned"],
    "bench_vocab_extend.py": ["ms/merge", "ratio naive/ours", "French held-out bytes/token", "English held-out"],
}


def test_every_benchmark_is_found():
    assert {"bench_train_step.py", "bench_text.py"} <= {path.name for path in BENCHMARKS}


@pytest.mark.parametrize("script", BENCHMARKS, ids=[path.stem for path in BENCHMARKS])
def test_benchmark_runs_at_its_smallest_size(script: Path, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run([sys.executable, str(script), "--smoke"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, f"{script.name} --smoke failed:\n{result.stderr[-4000:]}"
    expected = FIGURES.get(script.name)
    if expected is None:
        assert re.search(r"\d", result.stdout), f"{script.name} --smoke printed no figures:\n{result.stdout}"
    for text in expected or []:
        assert text in result.stdout, f"{script.name} --smoke did not print '{text}':\n{result.stdout[-4000:]}"
