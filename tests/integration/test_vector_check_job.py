"""A local .vec file with a bad row past the rows read while the job graph is built stops the run
in rule check_vectors, naming the setting and the line, before any job that trains, whatever its
language."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"

pytestmark = pytest.mark.integration


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(REPO / "workflow" / "Snakefile"), "--directory", str(workdir),
         "--cores", "1", *args, "--configfile", str(workdir / "config.yaml")],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600,
    )


def bad_vec_run(tmp_path: Path) -> None:
    """The demo config in ``tmp_path`` with a French .vec whose line 151 has a value too few."""
    (tmp_path / "resources").symlink_to(REPO / "resources")
    rows = [f"mot{i} " + " ".join(f"{(i + j) / 7:.4f}" for j in range(4)) for i in range(300)]
    rows[149] = "mot149 0.1 0.2 0.3"  # line 151: the header is line 1
    (tmp_path / "wiki.fr.vec").write_text("300 4\n" + "\n".join(rows) + "\n", encoding="utf-8")
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))
    config["monolingual"]["vectors"] = {"fr": "wiki.fr.vec"}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")


def test_a_bad_row_deep_in_a_local_vec_file_stops_the_run_before_the_languages_text(tmp_path):
    bad_vec_run(tmp_path)
    planned = snakemake(tmp_path, "-n", "results/text/fr/train.txt")
    assert planned.returncode == 0, planned.stderr[-3000:]  # the graph-time check reads the first rows only
    assert "rule check_vectors:" in planned.stdout and "results/checks/vectors/fr.json" in planned.stdout

    ran = snakemake(tmp_path, "results/text/fr/train.txt")
    assert ran.returncode != 0
    log = (tmp_path / "logs" / "check_vectors" / "fr.log").read_text(encoding="utf-8")
    assert "wiki.fr.vec:151: line has 3 values, the header says 4 [config setting 'monolingual.vectors.fr']" in log
    assert not (tmp_path / "results" / "text" / "fr").exists()


def test_the_english_head_warm_up_waits_for_every_languages_vec_check(tmp_path):
    """Only the French jobs waited for the French check: the English warm-up and fastText ran
    first, and the bad row was reported 148 s into a tiny run instead of 5 s."""
    bad_vec_run(tmp_path)
    planned = snakemake(tmp_path, "-n", "results/models/source", "results/monolingual/en/fasttext.bin")
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert "rule check_vectors:" in planned.stdout and "rule input_checks:" in planned.stdout

    ran = snakemake(tmp_path, "results/models/source", "results/monolingual/en/fasttext.bin")
    assert ran.returncode != 0
    assert "line has 3 values" in (tmp_path / "logs" / "check_vectors" / "fr.log").read_text(encoding="utf-8")
    assert not (tmp_path / "results" / "text").exists()  # not even the English text was prepared
    assert not (tmp_path / "logs" / "warmup_head").exists() and not (tmp_path / "logs" / "train_fasttext").exists()
