"""The paper-scale decoder plan (config/paper-decoder.yaml) under the SLURM profile: it builds offline,
trains every variant for every language on a GPU in bf16, and schedules language-independent work
once (one dry run)."""

from __future__ import annotations

import copy
import itertools
import re
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate
from test_paper_plan import dry_run_jobs

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "config" / "paper-decoder.yaml"
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> list[dict]:
    """Rule, wildcards, outputs and SLURM resources of every job the profile would submit."""
    jobs = dry_run_jobs(tmp_path_factory.mktemp("paper-decoder"), CONFIG, "--profile", str(REPO / "profiles" / "slurm"))
    assert jobs
    return jobs


def test_the_config_is_a_whole_decoder_config_in_bf16():
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    effective = copy.deepcopy(config)
    validate(effective, str(SCHEMA), set_default=True)
    assert config["source"]["model"]["hf"] == "Qwen/Qwen2.5-0.5B"
    assert config["languages"] == ["fr", "ru", "ar", "zh", "hi", "vi"]
    assert effective["device"] == "cuda" and effective["training"]["precision"] == "bf16"
    # No variant trains in another precision, and the fine-tunes of the tasks run in bf16 too.
    assert all("precision" not in variant.get("training", {}) for variant in config["variants"].values())
    for task in ("xnli", "sib200"):
        assert effective["tasks"][task]["settings"]["precision"] == "bf16", task
    trained = {name for name, variant in config["variants"].items() if variant["init"] != "none"}
    assert {config["variants"][name]["objective"] for name in trained} == {"clm"}


def test_every_variant_trains_for_every_language_on_a_gpu(plan):
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    trained = sorted(name for name, variant in config["variants"].items() if variant["init"] != "none")
    assert trained == sorted([f"{init}{vocabulary}{updates}" for init in ("ramen", "mean", "focus")
                              for vocabulary in ("", "-ext") for updates in ("", "-u0")]
                             + [f"{init}-ext{updates}" for init in ("fvt", "pfvt", "wp", "distill")
                                for updates in ("", "-u0")])
    assert {name for name in trained if config["variants"][name].get("vocabulary") == "extend"} == {
        name for name in trained if "-ext" in name}
    training = [job for job in plan if job["rule"] == "train_bilingual"]
    assert sorted((job["wildcards"]["variant"], job["wildcards"]["lang"]) for job in training) == sorted(
        itertools.product(trained, config["languages"]))
    for job in training:
        assert job["resources"]["slurm_partition"] == "gpu" and job["resources"]["gpu"] == "1", job
    # Every job that asks for a GPU goes to the GPU partition, and nothing else does.
    for job in plan:
        if job["rule"] == "all":
            continue
        wants_gpu = int(job["resources"].get("gpu", "0")) > 0
        assert (job["resources"].get("slurm_partition") == "gpu") == wants_gpu, job
    lm = {(job["wildcards"]["variant"], job["wildcards"]["lang"]) for job in plan if job["rule"] == "language_modeling"}
    assert lm == set(itertools.product(config["targets"]["bits_per_byte"], config["languages"]))


def test_language_independent_work_is_scheduled_once(plan):
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    def rules_writing(pattern):
        return [job["rule"] for job in plan if any(re.match(pattern, path) for path in job["outputs"])]

    # The hub snapshot, downloaded once on the submit host, then saved once as the source directory.
    downloads = [job for job in plan if job["rule"] == "download_model"]
    assert [job["outputs"] for job in downloads] == [["results/downloads/huggingface.co/Qwen/Qwen2.5-0.5B"]]
    assert [job["rule"] for job in plan if job["rule"] == "warmup_head"] == ["warmup_head"]
    assert rules_writing(r"results/text/en[^/]*/train\.txt$") == ["prepare_monolingual"]
    # English in the source's own ids, once (an extended vocabulary's English is results/encoded/en.extended-<lang>)
    assert rules_writing(r"results/encoded/en$") == ["encode_monolingual"]
    # The untransferred source is fine-tuned once per task, and read in every language. Its SIB-200
    # classifier also serves the update-0 variants that keep the source's tokenizer, whose English
    # side is the source's: one classifier per other variant and language besides it (an extended
    # model reads English with its own tokenizer, at update 0 too).
    classifiers = sorted(job["wildcards"]["name"] for job in plan if job["rule"] == "sib200_classifier")
    trained = [v for v in config["targets"]["sib200"] if (not v.endswith("-u0") or "-ext" in v) and v != "source"]
    assert classifiers == sorted(["source"] + [f"{v}_{lang}" for v in trained for lang in config["languages"]])
    assert {(job["wildcards"]["variant"], job["wildcards"]["lang"]) for job in plan if job["rule"] == "sib200"} == set(
        itertools.product(config["targets"]["sib200"], config["languages"]))
    assert [job["wildcards"]["variant"] for job in plan if job["rule"] == "finetune_xnli_shared"] == ["source"]
    assert sorted(job["wildcards"]["lang"] for job in plan
                  if job["rule"] == "sib200" and job["wildcards"]["variant"] == "source") == sorted(
        ["fr", "ru", "ar", "zh", "hi", "vi"])
