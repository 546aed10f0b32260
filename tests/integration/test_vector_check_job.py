"""A local .vec file with a bad row past the rows read while the job graph is built stops the run
in rule check_vectors, naming the setting and the line, before the language's first job."""

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


def test_a_bad_row_deep_in_a_local_vec_file_stops_the_run_before_the_languages_text(tmp_path):
    (tmp_path / "resources").symlink_to(REPO / "resources")
    rows = [f"mot{i} " + " ".join(f"{(i + j) / 7:.4f}" for j in range(4)) for i in range(300)]
    rows[149] = "mot149 0.1 0.2 0.3"  # line 151: the header is line 1
    (tmp_path / "wiki.fr.vec").write_text("300 4\n" + "\n".join(rows) + "\n", encoding="utf-8")
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))
    config["monolingual"]["vectors"] = {"fr": "wiki.fr.vec"}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")

    planned = snakemake(tmp_path, "-n", "results/text/fr/train.txt")
    assert planned.returncode == 0, planned.stderr[-3000:]  # the graph-time check reads the first rows only
    assert "rule check_vectors:" in planned.stdout and "results/checks/vectors/fr.json" in planned.stdout

    ran = snakemake(tmp_path, "results/text/fr/train.txt")
    assert ran.returncode != 0
    log = (tmp_path / "logs" / "check_vectors" / "fr.log").read_text(encoding="utf-8")
    assert "wiki.fr.vec:151: line has 3 values, the header says 4 [config setting 'monolingual.vectors.fr']" in log
    assert not (tmp_path / "results" / "text" / "fr").exists()
