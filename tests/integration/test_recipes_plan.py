"""The recipes for real sizes (config/recipes/) build their job graphs offline with their memory plans
shown, rule memory_plan writes the table, and a plan over resources.gpu_memory_gb stops the dry
run before any job, naming the setting that would make it fit."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"
RECIPES = REPO / "config" / "recipes"

pytestmark = pytest.mark.integration


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SNAKEMAKE), "--snakefile", str(REPO / "workflow" / "Snakefile"), "--directory",
                           str(workdir), "--cores", "1", *args], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600)


def test_the_1b_recipe_dry_runs_with_its_plan_shown(tmp_path):
    result = snakemake(tmp_path, "-n", "--configfile", str(RECIPES / "llama-3.2-1b-fsdp8.yaml"))
    assert result.returncode == 0, result.stderr[-3000:]
    shown = [line for line in result.stderr.splitlines() if line.startswith("  train_bilingual ")]
    assert [line.split(":")[0].strip() for line in shown] == ["train_bilingual ramen_fr", "train_bilingual mean_fr"]
    assert all("optimizer" in line and "of 74.51" in line for line in shown)
    assert "resources/recipes/llama-3.2-1b/config.json" in result.stderr


def test_the_8b_recipe_writes_its_plan_table(tmp_path):
    result = snakemake(tmp_path, "results/config/memory_plan.tsv", "--configfile",
                       str(RECIPES / "llama-3.1-8b-lora.yaml"))
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "results" / "config" / "memory_plan.tsv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    assert [row["job"] for row in rows] == ["ramen_fr", "ramen-ext_fr"]
    for row in rows:
        parts = sum(float(row[column]) for column in row if column.endswith("_gib") and column not in (
            "total_gib", "limit_gib"))
        assert abs(parts - float(row["total_gib"])) < 0.01
        assert row["fits"] == "true" and float(row["total_gib"]) <= float(row["limit_gib"]), row
        assert row["processes"] == "1" and row["precision"] == "bf16" and row["activation_checkpointing"] == "true"


def test_a_plan_over_the_gpu_is_refused_naming_the_setting(tmp_path):
    over = tmp_path / "smaller_gpu.yaml"
    recipe = yaml.safe_load((RECIPES / "llama-3.2-1b-fsdp8.yaml").read_text(encoding="utf-8"))
    over.write_text(yaml.safe_dump({
        "resources": {**recipe["resources"], "gpu_memory_gb": 24},
        "variants": {"ramen": {"init": "parallel", "objective": "clm", "training": {"grad_accumulation": 2}},
                     "source": {"init": "none"}},
        "targets": {"xnli": [], "bits_per_byte": ["ramen"]}}))
    result = snakemake(tmp_path, "-n", "--configfile", str(RECIPES / "llama-3.2-1b-fsdp8.yaml"), str(over))
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "config setting 'resources.gpu_memory_gb': train_bilingual ramen_fr plans" in output
    # The variant sets grad_accumulation, the training section the rest.
    assert "variants.ramen.training.grad_accumulation: 4 (plans" in output
    assert "set training.activation_checkpointing: true (plans" in output
    assert "rule train_bilingual" not in output


def test_the_8b_recipe_on_40_gb_gpus_is_refused_naming_changes_together_that_fit(tmp_path):
    """No single change fits (a batch of 16 in 16 micro-steps splits over no more GPUs): the
    refusal names sharding over more GPUs with fewer micro-steps, all together."""
    smaller = tmp_path / "smaller_gpu.yaml"
    recipe = yaml.safe_load((RECIPES / "llama-3.1-8b-lora.yaml").read_text(encoding="utf-8"))
    smaller.write_text(yaml.safe_dump({"resources": {**recipe["resources"], "gpu_memory_gb": 40}}))
    result = snakemake(tmp_path, "-n", "--configfile", str(RECIPES / "llama-3.1-8b-lora.yaml"), str(smaller))
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "config setting 'resources.gpu_memory_gb': train_bilingual ramen_fr plans" in output
    assert ("set training.sharding: fsdp with training.gpus: 2 and training.grad_accumulation: 8 (plans"
            in output), output[-3000:]
    assert "no change of" not in output and "rule train_bilingual" not in output


def test_lora_targets_that_name_no_layer_stop_the_dry_run_by_their_key(tmp_path):
    """A variant's LoRA targets that name no layer of the source (its shipped config.json) are
    refused by the variant's key, not as training.train's unknown group lora."""
    nope = tmp_path / "nope.yaml"
    recipe = yaml.safe_load((RECIPES / "llama-3.1-8b-lora.yaml").read_text(encoding="utf-8"))
    nope.write_text(yaml.safe_dump({
        "variants": {"ramen": {"init": "parallel", "objective": "clm",
                               "training": {"lora": {**recipe["training"]["lora"], "target_modules": ["nope"]}}},
                     "source": {"init": "none"}},
        "targets": {"xnli": [], "bits_per_byte": ["ramen"]}}))
    result = snakemake(tmp_path, "-n", "--configfile", str(RECIPES / "llama-3.1-8b-lora.yaml"), str(nope))
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "config setting 'variants.ramen.training.lora.target_modules': ['nope'] name no linear layer" in output
    assert "training.train" not in output and "rule train_bilingual" not in output


@pytest.mark.parametrize(("recipe", "limit"), [("llama-3.1-8b-qlora-24gb.yaml", 24),
                                               ("llama-3.1-8b-bf16-base-40gb.yaml", 40)])
def test_the_8b_extension_recipes_over_a_frozen_base_dry_run_within_24_and_40_gb(tmp_path, recipe, limit):
    result = snakemake(tmp_path, "-n", "--configfile", str(RECIPES / recipe))
    assert result.returncode == 0, result.stderr[-3000:]
    shown = [line for line in result.stderr.splitlines() if line.startswith("  train_bilingual ")]
    assert [line.split(":")[0].strip() for line in shown] == ["train_bilingual ramen-ext_fr"]
    total, of = (float(value) for value in shown[0].rsplit("= ", 1)[1].removesuffix(" GiB of").split(" GiB of "))
    assert total * 2 ** 30 <= limit * 1e9 and abs(of * 2 ** 30 - limit * 1e9) < 1e7


def test_nf4_under_a_stage_that_trains_the_blocks_stops_the_dry_run_by_its_key(tmp_path):
    staged = tmp_path / "staged.yaml"
    staged.write_text(yaml.safe_dump({"variants": {
        "ramen-ext": {"init": "parallel", "objective": "clm", "vocabulary": "extend",
                      "training": {"stages": [{"until": 100, "train": ["lora", "foreign_embeddings"]},
                                              {"train": ["lora", "foreign_embeddings", "top:2"]}]}},
        "source": {"init": "none"}}}))
    result = snakemake(tmp_path, "-n", "--configfile", str(RECIPES / "llama-3.1-8b-qlora-24gb.yaml"), str(staged))
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "config setting 'training.frozen_dtype': nf4 blocks' linear weights cannot train" in output, output[-3000:]
    assert "variants.ramen-ext.training.stages trains ['top:2']" in output
    assert "rule train_bilingual" not in output
