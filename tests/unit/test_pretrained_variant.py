"""A multilingual checkpoint as a variant (mBERT): used as is, or a clear error naming the setting."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Each test starts processes or runs for seconds: left to `make test`, out of `make test-fast`.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def dry_run(*arguments: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "snakemake", "-n", "--nolock", "--cores", "1", *arguments],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_missing_checkpoint_fails_with_what_to_configure():
    result = dry_run("--config", "variants={'mbert': {'init': 'pretrained', 'model': 'no/such/dir'}}",
                     "--", "results/ud/mbert_fr.tsv")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "variant 'mbert' needs a multilingual checkpoint" in output
    assert "Set variants.mbert.model to a local Hugging Face directory" in output


def test_available_checkpoint_is_used_without_transfer(tiny_source_dir):
    result = dry_run("--config", f"variants={{'mbert': {{'init': 'pretrained', 'model': '{tiny_source_dir}'}}}}",
                     "--", "results/ud/mbert_fr.tsv")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "rule ud_zero_shot" in result.stdout
    # Nothing is trained or initialised for it: its model is the checkpoint itself.
    assert "train_bilingual" not in result.stdout and "init_foreign" not in result.stdout
    assert str(tiny_source_dir) in result.stdout


def test_a_checkpoint_named_by_model_id_is_downloaded_first():
    # From an empty results/: the snapshot is a rule output, so the DAG does not need it yet.
    result = dry_run("--config", "variants={'mbert': {'init': 'pretrained', 'model': {'hf': 'tiny-org/tiny-mbert'}}}",
                     "--", "results/ud/mbert_fr.tsv")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "rule download_model" in result.stdout and "rule ud_zero_shot" in result.stdout
    assert "results/downloads/huggingface.co/tiny-org/tiny-mbert" in result.stdout
    assert "train_bilingual" not in result.stdout
