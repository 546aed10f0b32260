"""Runs the whole workflow on a tiny slice of the demo data in a temporary directory."""

from __future__ import annotations

import csv
import gzip
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"
DEMO = REPO / "resources" / "demo"

pytestmark = pytest.mark.integration


def head_lines(source: Path, target: Path, count: int) -> None:
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rt", encoding="utf-8") as handle:
        lines = list(itertools.islice(handle, count))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(lines), encoding="utf-8")


def tiny_config() -> dict:
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["corpora"] = {
        "en": [{"path": "data/wiki.xml.bz2", "format": "wikipedia"}, {"path": "data/en.txt", "format": "text"}],
        "fr": [{"path": "data/fr.txt", "format": "text"}],
    }
    config["parallel"] = {"fr": {"en": "data/en.txt", "fr": "data/fr.txt"}}
    config["bpe"]["merges"] = 300
    config["head_warmup"].update(steps=3, batch_size=4, seq_len=32, warmup_steps=1, log_every=1)
    config["training"].update(steps=4, batch_size=4, seq_len=32, warmup_steps=2, log_every=1)
    xnli = config["tasks"]["xnli"]
    xnli["train"] = [{"path": "data/nli.train.tsv", "format": "xnli"}]
    xnli["dev"] = {"fr": "data/xnli.dev.fr.tsv"}
    xnli["test"] = {"fr": "data/xnli.test.fr.tsv"}
    xnli["settings"].update(epochs=1, batch_size=8, max_length=64)
    nmt = config["tasks"]["nmt"]
    nmt["dev"] = {"en": "data/nmt.dev.en.txt", "fr": "data/nmt.dev.fr.txt"}
    nmt["test"] = {"en": "data/nmt.test.en.txt", "fr": "data/nmt.test.fr.txt"}
    nmt["settings"].update(bpe_merges=300, model={"layers": 1, "dim": 32, "ffn_dim": 64, "heads": 2, "dropout": 0.1},
                           search={"beam": 2, "length_penalty": 1.0})
    for stage in ("plain", "fused"):
        nmt["settings"][stage].update(steps=3, max_tokens=256, warmup_steps=1, log_every=1, eval_every=3,
                                      checkpoint_every=2)
    return config


def run(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir), "--cores", "2", *args],
        capture_output=True, text=True, env=env,
    )


def make_workdir(workdir: Path) -> Path:
    """A workflow directory with a tiny slice of the demo data and its config."""
    data = workdir / "data"
    head_lines(DEMO / "parallel" / "multi30k.train.en.gz", data / "en.txt", 600)
    head_lines(DEMO / "parallel" / "multi30k.train.fr.gz", data / "fr.txt", 600)
    (data / "wiki.xml.bz2").write_bytes((DEMO / "en" / "enwiki-sample.xml.bz2").read_bytes())
    head_lines(DEMO / "nli" / "xnli.dev.en.tsv", data / "nli.train.tsv", 97)
    head_lines(DEMO / "nli" / "xnli.dev.fr.tsv", data / "xnli.dev.fr.tsv", 41)
    head_lines(DEMO / "nli" / "xnli.test.fr.tsv", data / "xnli.test.fr.tsv", 61)
    for lang in ("en", "fr"):
        head_lines(DEMO / "parallel" / f"multi30k.val.{lang}.gz", data / f"nmt.dev.{lang}.txt", 20)
        head_lines(DEMO / "parallel" / f"multi30k.test_2016.{lang}.gz", data / f"nmt.test.{lang}.txt", 12)
    (workdir / "config.yaml").write_text(yaml.safe_dump(tiny_config()))
    return workdir


@pytest.fixture(scope="module")
def workflow(tmp_path_factory):
    workdir = make_workdir(tmp_path_factory.mktemp("workflow"))
    result = run(workdir)
    assert result.returncode == 0, result.stderr[-5000:]
    return workdir


def read_tsv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def test_every_variant_has_a_well_formed_result_table(workflow):
    for variant in ("ramen", "rnd", "source"):
        rows = read_tsv(workflow / "results" / "xnli" / f"{variant}_fr.tsv")
        test = [row for row in rows if row["split"] == "test" and row["lang"] == "fr"]
        assert len(test) == 1
        assert int(test[0]["n"]) == 60
        assert 0.0 <= float(test[0]["accuracy"]) <= 1.0
        assert any(row["split"] == "dev" and row["selected"] == "true" for row in rows)
    summary = read_tsv(workflow / "results" / "report" / "xnli_summary.tsv")
    assert {row["variant"] for row in summary if row["split"] == "test"} == {"ramen", "rnd", "source"}


def test_exported_sides_load_as_standard_hugging_face_models(workflow):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    for side in ("en", "fr"):
        directory = workflow / "results" / "models" / "ramen_fr" / side
        model = AutoModelForMaskedLM.from_pretrained(directory)
        tokenizer = AutoTokenizer.from_pretrained(directory)
        assert model.config.vocab_size == len(tokenizer)
        encoded = tokenizer("Deux hommes marchent.", return_tensors="pt")
        logits = model(**encoded).logits
        assert logits.shape[-1] == len(tokenizer)
    english = AutoModelForMaskedLM.from_pretrained(workflow / "results" / "models" / "ramen_fr" / "en")
    french = AutoModelForMaskedLM.from_pretrained(workflow / "results" / "models" / "ramen_fr" / "fr")
    shared = [name for name, _ in english.named_parameters() if "word_embeddings" not in name and "predictions.bias" not in name]
    french_params = dict(french.named_parameters())
    for name in shared:
        assert np.array_equal(dict(english.named_parameters())[name].detach().numpy(),
                              french_params[name].detach().numpy()), name


def test_alignment_probabilities_are_normalised(workflow):
    from ramen.align import load_alpha

    alpha = load_alpha(workflow / "results" / "align" / "en-fr" / "alpha.npz")
    sums = np.asarray(alpha.sum(axis=1)).ravel()
    supported = sums > 0
    assert supported.mean() > 0.2
    assert np.allclose(sums[supported], 1.0)


def test_logs_and_training_curves_exist(workflow):
    logs = list((workflow / "logs").rglob("*.log"))
    assert len(logs) >= 15
    metrics = list(csv.DictReader(open(workflow / "results" / "training" / "ramen_fr.metrics.csv")))
    assert [int(row["step"]) for row in metrics] == [1, 2, 3, 4]
    assert all(np.isfinite(float(row["loss_fr"])) for row in metrics)
    assert (workflow / "results" / "report" / "mlm_loss.png").read_bytes()[:4] == b"\x89PNG"


def test_report_is_generated(workflow):
    result = run(workflow, "--report", "results/report.html")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (workflow / "results" / "report.html").stat().st_size > 10_000


def planned_jobs(output: str) -> dict[str, int]:
    jobs = {}
    table = output.split("Job stats:")[1] if "Job stats:" in output else ""
    for line in table.splitlines():
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if match and match.group(1) != "total":
            jobs[match.group(1)] = int(match.group(2))
    return jobs


def test_nothing_to_do_after_a_complete_run(workflow):
    result = run(workflow, "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert planned_jobs(result.stdout + result.stderr) == {}


def test_changing_a_training_setting_reruns_only_training_and_downstream(workflow):
    config = yaml.safe_load((workflow / "config.yaml").read_text())
    config["training"]["peak_lr"] = config["training"]["peak_lr"] * 2
    changed = workflow / "changed.yaml"
    changed.write_text(yaml.safe_dump(config))
    result = run(workflow, "-n", "--configfile", str(changed))
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = planned_jobs(result.stdout + result.stderr)
    assert jobs.get("train_bilingual") == 2
    assert jobs.get("finetune_xnli") == 2  # the source baseline is not retrained
    assert set(jobs) <= {"train_bilingual", "finetune_xnli", "evaluate_xnli", "summarise_xnli", "plot_mlm_loss", "all"}


def test_changing_the_vocabulary_size_reruns_bpe_and_alignment(workflow):
    config = yaml.safe_load((workflow / "config.yaml").read_text())
    config["bpe"]["merges"] = 250
    changed = workflow / "changed_bpe.yaml"
    changed.write_text(yaml.safe_dump(config))
    jobs = planned_jobs((lambda r: r.stdout + r.stderr)(run(workflow, "-n", "--configfile", str(changed))))
    assert jobs.get("learn_bpe") == 1 and jobs.get("align") == 1
    assert "warmup_head" not in jobs and "prepare_monolingual" not in jobs


def test_invalid_config_names_the_setting(workflow):
    config = yaml.safe_load((workflow / "config.yaml").read_text())
    config["training"]["stepz"] = 3
    bad = workflow / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    result = run(workflow, "-n", "--configfile", str(bad))
    assert result.returncode != 0
    assert "stepz" in result.stdout + result.stderr


def test_nmt_tables_have_plain_fused_and_ablation_rows(workflow):
    result = run(workflow, "nmt_all")
    assert result.returncode == 0, result.stderr[-5000:]
    rows = read_tsv(workflow / "results" / "nmt" / "source_en-fr.tsv")
    assert [row["model"] for row in rows] == ["plain", "fused", "no-dropnet", "no-bert-enc", "no-bert-dec"]
    for row in rows:
        assert 0.0 <= float(row["bleu"]) <= 100.0 and int(row["sentences"]) == 12
        assert float(row["decode_s"]) > 0 and int(row["train_steps"]) == 3
    assert (workflow / "results" / "nmt" / "translations" / "source_en-fr" / "fused.fr").read_text().count("\n") == 12
    summary = read_tsv(workflow / "results" / "report" / "nmt_summary.tsv")
    assert len(summary) == 5 and summary[0]["bleu_vs_plain"] == "0.0"
    config = yaml.safe_load((workflow / "config.yaml").read_text())
    config["tasks"]["nmt"]["settings"]["p_net"] = 0.5
    changed = workflow / "changed_nmt.yaml"
    changed.write_text(yaml.safe_dump(config))
    jobs = planned_jobs((lambda r: r.stdout + r.stderr)(run(workflow, "nmt_all", "-n", "--configfile", str(changed))))
    assert jobs.get("nmt_train_fused") == 4 and "nmt_train_plain" not in jobs and "nmt_data" not in jobs
