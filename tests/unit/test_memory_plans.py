"""The training jobs' memory plans while the job graph is built (ramen.workflow.memory_plans), on
config dicts: where the source's shapes come from, which jobs are planned, and a plan above
resources.gpu_memory_gb refused by that key."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from ramen.config_errors import config_problem
from ramen.errors import ConfigError
from ramen.workflow import memory_plans
from ramen.training.memory import COLUMNS

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
DEMO = yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))


@pytest.fixture
def demo(tmp_path, monkeypatch) -> dict:
    """The demo config with the schema's defaults, run from an empty directory."""
    monkeypatch.chdir(tmp_path)
    config = copy.deepcopy(DEMO)
    assert config_problem(config, SCHEMA, fill_defaults=True) == ""
    return config


def test_a_training_setting_is_named_by_the_key_that_sets_it():
    key = memory_plans.training_key("training", "ramen", {"gpus": 2})
    assert key("gpus") == "variants.ramen.training.gpus"
    assert key("steps") == "training.steps"
    assert memory_plans.training_key("head_warmup")("gpus") == "head_warmup.gpus"


def test_the_training_jobs_are_the_warm_up_and_each_trained_variant_per_language(demo):
    demo["languages"] = ["fr", "ru"]
    demo["variants"]["rnd"]["training"] = {"steps": 7}
    jobs = memory_plans.training_jobs(demo)
    assert [(job.rule, job.job) for job in jobs] == [
        ("warmup_head", "source"), ("train_bilingual", "ramen_fr"), ("train_bilingual", "ramen_ru"),
        ("train_bilingual", "rnd_fr"), ("train_bilingual", "rnd_ru")]
    rnd = jobs[3]
    assert rnd.values["steps"] == 7 and rnd.values["batch_size"] == demo["training"]["batch_size"]
    assert rnd.key("steps") == "variants.rnd.training.steps" and rnd.key("batch_size") == "training.batch_size"


def test_the_source_header_is_the_installed_models_config(demo):
    header, where = memory_plans.source_header(demo, REPO)
    assert where.endswith("config.json") and header["model_type"] == "bert"


def test_a_source_still_to_be_downloaded_is_planned_from_a_shipped_config(demo, tmp_path):
    demo["source"]["model"] = {"hf": "org/model"}
    header, why = memory_plans.source_header(demo, REPO)
    assert header is None and "still to be downloaded" in why and "resources.source_config" in why
    # A relative path not in the run directory is the repository's.
    shipped = tmp_path / "repo" / "recipes" / "config.json"
    shipped.parent.mkdir(parents=True)
    shipped.write_text(json.dumps({"model_type": "llama"}))
    demo["resources"]["source_config"] = "recipes/config.json"
    assert memory_plans.source_header(demo, tmp_path / "repo") == ({"model_type": "llama"}, str(shipped))
    shipped.write_text("{not json")
    with pytest.raises(ConfigError, match=r"^config setting 'resources\.source_config': .*cannot be read as JSON"):
        memory_plans.source_header(demo, tmp_path / "repo")


def test_every_training_job_of_the_demo_is_planned_and_written_as_a_row(demo):
    plans = memory_plans.memory_plans(demo, REPO)
    # all-MiniLM-L6-v2 is a masked LM, so its head warm-up trains and is planned too.
    assert [(plan.rule, plan.job) for plan in plans] == [
        ("warmup_head", "source"), ("train_bilingual", "ramen_fr"), ("train_bilingual", "rnd_fr")]
    # The demo sets no resources.gpu_memory_gb: no limit, and the table's fits column is left empty.
    assert all(plan.plan is not None and plan.plan.limit is None for plan in plans)
    rows = memory_plans.memory_plan_rows(demo, plans)
    assert [tuple(row) for row in rows] == [COLUMNS] * 3
    assert rows[1]["source"] == demo["source"]["model"] and float(rows[1]["total_gib"]) > 0
    assert [(row["limit_gib"], row["fits"]) for row in rows] == [("", "")] * 3
    # Under a limit between the smallest and the largest plan, each job fits by its own total.
    totals = [plan.plan.total for plan in plans]
    limit = (min(totals) + max(totals)) / 2
    assert min(totals) < limit < max(totals)
    demo["resources"]["gpu_memory_gb"] = limit / 1e9
    limited = memory_plans.memory_plans(demo, REPO)
    assert [plan.plan.total for plan in limited] == totals
    fits = [total <= limit for total in totals]
    assert [plan.plan.fits for plan in limited] == fits and set(fits) == {True, False}
    assert [row["fits"] for row in memory_plans.memory_plan_rows(demo, limited)] == [str(f).lower() for f in fits]


def test_jobs_whose_source_cannot_be_read_yet_are_listed_with_why(demo, capsys):
    demo["source"]["model"] = {"hf": "org/model"}
    plans = memory_plans.memory_plans(demo, REPO)
    # Without the source's shapes a causal LM's warm-up cannot be told apart: only the trainings are listed.
    assert [(plan.job, plan.plan) for plan in plans] == [("ramen_fr", None), ("rnd_fr", None)]
    memory_plans.check_memory_plans(demo, plans)
    assert "still to be downloaded" in capsys.readouterr().err


def test_a_plan_above_the_gpus_memory_is_refused_naming_the_limit_and_the_job(demo, capsys):
    demo["resources"]["gpu_memory_gb"] = 0.01
    plans = memory_plans.memory_plans(demo, REPO)
    with pytest.raises(ConfigError, match=r"^config setting 'resources\.gpu_memory_gb': warmup_head source plans .* "
                                          r"more than .*\(no change of head_warmup\.sharding"):
        memory_plans.check_memory_plans(demo, plans)
    assert "Memory per GPU in GiB" in capsys.readouterr().err
    demo["resources"]["gpu_memory_gb"] = 80
    memory_plans.check_memory_plans(demo, memory_plans.memory_plans(demo, REPO))


def recipe_config(name: str, tmp_path, monkeypatch) -> dict:
    """A recipe with the schema's defaults, run from an empty directory: planned from its shipped config.json."""
    monkeypatch.chdir(tmp_path)
    config = yaml.safe_load((REPO / "config" / "recipes" / f"{name}.yaml").read_text(encoding="utf-8"))
    assert config_problem(config, SCHEMA, fill_defaults=True) == ""
    return config


def test_lora_targets_that_name_no_layer_of_the_source_are_refused_by_their_key(tmp_path, monkeypatch):
    """Not as training.train's unknown group lora (no adapters, no group): by the key that sets the
    targets, the variant's where it sets lora, with the source's layer names to choose from."""
    config = recipe_config("llama-3.1-8b-lora", tmp_path, monkeypatch)
    config["variants"]["ramen"]["training"] = {"lora": {**config["training"]["lora"], "target_modules": ["nope"]}}
    with pytest.raises(ConfigError, match=r"^config setting 'variants\.ramen\.training\.lora\.target_modules': "
                                          r"\['nope'\] name no linear layer .*q_proj") as refused:
        memory_plans.memory_plans(config, REPO)
    assert "training.train" not in str(refused.value)
    del config["variants"]["ramen"]["training"]
    config["training"]["lora"]["target_modules"] = ["q_proj", "nope"]
    with pytest.raises(ConfigError, match=r"^config setting 'training\.lora\.target_modules': \['nope'\]"):
        memory_plans.memory_plans(config, REPO)
    # A layer's whole name, as the model names it (its prefix unknown to the plan), names it.
    config["training"]["lora"]["target_modules"] = ["q_proj", "model.layers.0.mlp.up_proj"]
    plans = memory_plans.memory_plans(config, REPO)
    assert all(plan.plan is not None for plan in plans)
