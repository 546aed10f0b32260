"""A config file given on the command line is the whole config of a run, and bad settings or
inputs fail while the job graph is built, before any job runs."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"

pytestmark = pytest.mark.integration


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(REPO / "workflow" / "Snakefile"), "--directory", str(workdir),
         "--cores", "1", *args],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600,
    )


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "resources").symlink_to(REPO / "resources")  # the demo config's relative paths
    return tmp_path


def effective_config(workdir: Path, *configs: Path) -> dict:
    result = snakemake(workdir, "results/config/effective.yaml", "--configfile", *map(str, configs))
    assert result.returncode == 0, result.stderr[-3000:]
    return yaml.safe_load((workdir / "results" / "config" / "effective.yaml").read_text(encoding="utf-8"))


def demo_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))


def test_the_paper_config_is_the_whole_config_of_its_run(workdir):
    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text(encoding="utf-8"))
    effective = effective_config(workdir, REPO / "config" / "paper.yaml")
    expected = copy.deepcopy(paper)
    validate(expected, str(SCHEMA), set_default=True)
    assert effective == expected
    assert set(effective["variants"]) == set(paper["variants"])
    demo = demo_config()
    assert not {"rnd-tlm", "ramen-trtd-grpb", "rnd-da"} & set(effective["variants"])
    for section, key in (("xnli", "max_train_examples"), ("xnli", "max_dev_examples")):
        assert key in demo["tasks"][section]["settings"] and key not in effective["tasks"][section]["settings"]
    for key in ("max_train_sentences", "max_dev_sentences", "arc_dim", "relation_dim", "encoder_layers"):
        assert key in demo["tasks"]["ud"]["settings"] and key not in effective["tasks"]["ud"]["settings"]
    assert "min_step" not in effective["variants"]["ramen-da"]["objectives"]["focal"]


def test_a_section_left_out_gets_the_schema_default_not_the_demo(workdir):
    config = demo_config()
    for section in ("char2subword", "text", "threads", "alignment"):
        del config[section]
    user = workdir / "user.yaml"
    user.write_text(yaml.safe_dump(config), encoding="utf-8")
    effective = effective_config(workdir, user)
    assert effective["char2subword"]["module"]["dim"] == 256 != demo_config()["char2subword"]["module"]["dim"]
    assert effective["char2subword"]["approximation"]["max_rows"] is None
    assert effective["text"]["min_chars"] == 10 and effective["threads"]["text"] == 1
    # Several config files merge left to right; --config overrides them.
    override = workdir / "override.yaml"
    override.write_text(yaml.safe_dump({"bpe": {"merges": 123}}), encoding="utf-8")
    merged = effective_config(workdir, user, override)
    assert merged["bpe"]["merges"] == 123 and merged["bpe"]["min_symbol_count"] == config["bpe"]["min_symbol_count"]


def test_without_a_config_file_the_demo_runs(workdir):
    (workdir / "config").mkdir()
    (workdir / "config" / "config.yaml").write_text((REPO / "config" / "config.yaml").read_text())
    result = snakemake(workdir, "results/config/effective.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    effective = yaml.safe_load((workdir / "results" / "config" / "effective.yaml").read_text(encoding="utf-8"))
    assert set(effective["variants"]) == set(demo_config()["variants"])
    assert effective["tasks"]["xnli"]["settings"] == demo_config()["tasks"]["xnli"]["settings"]


def failing_dry_run(workdir: Path, config: dict) -> str:
    path = workdir / "bad.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = snakemake(workdir, "-n", "--configfile", str(path))
    assert result.returncode != 0
    return result.stdout + result.stderr


def test_an_unknown_key_gives_one_short_message(workdir):
    config = demo_config()
    config["training"]["stepz"] = 3
    output = failing_dry_run(workdir, config)
    assert "unknown key 'stepz' in training; allowed keys there: batch_size" in output
    assert len(output.splitlines()) < 30 and "properties" not in output


def test_languages_are_those_the_text_pipeline_supports(workdir):
    config = demo_config()
    config["languages"] = ["fr", "de"]
    assert "config setting 'languages[1]': 'de' is not one of" in failing_dry_run(workdir, config)


def test_a_language_without_its_settings_names_the_missing_one(workdir):
    config = demo_config()
    config["languages"] = ["fr", "ru"]
    assert "config setting 'corpora.ru'" in failing_dry_run(workdir, config)
    config["corpora"]["ru"] = [{"path": "resources/demo/fr/sequoia.train.txt", "format": "text"}]
    config["parallel"]["ru"] = {"en": "resources/demo/parallel/multi30k.train.en.gz",
                                "ru": "resources/demo/parallel/multi30k.train.fr.gz"}
    assert "config setting 'tasks.xnli.dev.ru'" in failing_dry_run(workdir, config)


def test_an_empty_corpus_fails_before_any_job_naming_the_file(workdir):
    config = demo_config()
    (workdir / "blank.txt").write_text("\n   \n\t\n", encoding="utf-8")
    config["corpora"]["fr"].append({"path": "blank.txt", "format": "text"})
    output = failing_dry_run(workdir, config)
    assert "blank.txt: holds no text (empty or whitespace only)" in output and "corpora.fr[2]" in output
    assert "Job stats" not in output
