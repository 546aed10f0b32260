"""The task registry drives the workflow: a task is one module, one registry entry and one rule file,
and its targets and decontamination units follow from the entry alone."""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"

pytestmark = pytest.mark.integration

TOY_MODULE = '''"""A toy task: the share of test sentences the foreign tokenizer splits into at most two tokens;
and a zero-shot one on the shared fine-tuning skeleton: a linear probe on mean word vectors learns
whether a sentence is short on the source side, then reads the foreign side's table."""

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from transformers import AutoTokenizer

from ramen.io import read_lines
from ramen.tasks.common import load_encoder
from ramen.tasks.finetune import FinetuneSettings, Finetuning, save_model_dir, seeded
from ramen.tasks.swap import swap_embeddings


def score(model_dir, test_path, out_path):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    lines = list(read_lines(test_path))
    short = sum(len(tokenizer.tokenize(line)) <= 2 for line in lines)
    with open(out_path, "w", encoding="utf-8") as handle:
        handle.write(f"short\\t{short / len(lines)}\\n")


@dataclass
class ToySettings(FinetuneSettings):
    SECTION: ClassVar[str] = "tasks.toy.settings"

    epochs: int = 3
    batch_size: int = 4
    learning_rate: float = 0.05
    freeze_embeddings: bool = True


class Probe(nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder, self.head = encoder, nn.Linear(encoder.config.hidden_size, 2)
        self.pad_token_id = encoder.config.pad_token_id

    def word_embeddings(self):
        return self.encoder.get_input_embeddings()

    def forward(self, ids):
        mask = (ids != self.pad_token_id).unsqueeze(-1).float()
        return self.head((self.word_embeddings()(ids) * mask).sum(1) / mask.sum(1))


def finetune(model_dir, foreign_dir, lines, out_dir, settings=None):
    """Train on ``lines`` with ``model_dir``'s table, keep the epoch most accurate on them, save it to
    ``out_dir``; return the dev history and the accuracy with ``foreign_dir``'s table."""
    settings = settings or ToySettings()
    labels = torch.tensor([len(line.split()) <= 3 for line in lines], dtype=torch.long)
    with seeded(settings):
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = Probe(load_encoder(model_dir)[0])
        if settings.freeze_embeddings:
            model.word_embeddings().weight.requires_grad_(False)
        run = Finetuning(model, settings, train_size=len(lines), out_dir=out_dir, progress=False)

        def logits(indices, tokenizer=tokenizer):
            ids = tokenizer([lines[i] for i in indices], padding=True, return_tensors="pt")["input_ids"]
            return model(ids)

        def batch_loss(indices):
            return nn.functional.cross_entropy(logits(indices), labels[indices])

        def accuracy(epoch=None, tokenizer=tokenizer):
            with torch.no_grad():
                value = (logits(range(len(lines)), tokenizer).argmax(-1) == labels).float().mean().item()
            return value, [{"epoch": epoch, "accuracy": value}]

        history, best_epoch = run.train([len(line) for line in lines], batch_loss, accuracy)
        run.save({"task": "toy", "selected_epoch": best_epoch},
                 lambda path, meta: save_model_dir(path, model, tokenizer, "toy.json", meta, weights_name="toy.pt"))
        foreign, _ = accuracy(tokenizer=swap_embeddings(model, foreign_dir))
    return history, foreign
'''
TOY_ENTRY = '''    "toy": TaskSpec(
        module="ramen.tasks.toy",
        metric="share",
        description="a toy task",
        rules="rules/toy.smk",
        targets={"toy": Target("results/toy/{variant}_{lang}.tsv", needs=("tasks.toy.test.{lang}",))},
        files=(TaskFiles("test"),),
    ),
'''
TOY_RULES = '''rule toy:
    input:
        model=lambda wildcards: model_dir(wildcards.variant, wildcards.lang, wildcards.lang),
        test=lambda wildcards: local_input(config["tasks"]["toy"]["test"][wildcards.lang]),
        decontamination=lambda wildcards: decontamination_checks(wildcards, ("toy", "test")),
    output:
        "results/toy/{variant}_{lang}.tsv",
    run:
        from ramen.tasks.toy import score

        score(input.model, input.test, output[0])
'''


def changed_files(original: Path, copy: Path, parts: tuple[str, ...]) -> list[str]:
    changed = []
    for part in parts:
        pending = [filecmp.dircmp(original / part, copy / part, ignore=["__pycache__", "ramen.egg-info"])]
        while pending:
            compared = pending.pop()
            changed += [str(Path(compared.right) / name) for name in compared.diff_files + compared.right_only]
            pending += compared.subdirs.values()
    return sorted(Path(path).relative_to(copy).as_posix() for path in changed)


def test_a_registered_task_gets_its_targets_and_decontamination_units_with_no_other_file_touched(
        tmp_path, tiny_source_dir):
    parts = ("workflow", "src", "config")
    copy = tmp_path / "ramen"
    for part in parts:
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (copy / "src" / "ramen" / "tasks" / "toy.py").write_text(TOY_MODULE, encoding="utf-8")
    (copy / "workflow" / "rules" / "toy.smk").write_text(TOY_RULES, encoding="utf-8")
    registry = copy / "src" / "ramen" / "tasks" / "__init__.py"
    opening = 'TASKS: Registry[TaskSpec] = Registry("task", "tasks", {\n'
    text = registry.read_text(encoding="utf-8")
    assert opening in text, f"{registry}: the registry no longer opens with {opening!r}"
    registry.write_text(text.replace(opening, opening + TOY_ENTRY, 1), encoding="utf-8")
    assert changed_files(REPO, copy, parts) == [
        "src/ramen/tasks/__init__.py", "src/ramen/tasks/toy.py", "workflow/rules/toy.smk"]

    work = tmp_path / "work"
    work.mkdir()
    (work / "resources").symlink_to(REPO / "resources")
    (work / "toy.test.fr").write_text("bonjour\nune phrase un peu plus longue\n", encoding="utf-8")
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))
    config["tasks"]["toy"] = {"test": {"fr": "toy.test.fr"}}
    config["targets"] = {"xnli": [], "toy": ["ramen", "source"]}
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(copy / "src")}

    def dry_run(configfile: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(SNAKEMAKE), "--snakefile", str(copy / "workflow" / "Snakefile"), "--directory", str(work),
             "--cores", "1", "-n", "--configfile", str(configfile)],
            capture_output=True, text=True, env=env, timeout=600)

    result = dry_run(tmp_path / "toy.yaml")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    # Its targets, for every variant named, and nothing of the tasks not asked for.
    assert re.search(r"^toy\s+2$", output, re.MULTILINE), output[-3000:]
    assert "results/toy/ramen_fr.tsv" in output and "results/toy/source_fr.tsv" in output
    assert "results/xnli/" not in output and "results/ud/" not in output
    # Its test file is a decontamination unit: checked before scoring, and removed from the
    # French training text.
    assert "results/decontamination/fr/toy.test.fr.json" in output
    prepare = re.search(r"^rule prepare_monolingual:\n\s+input: (.*)\n\s+output: results/text/fr/", output, re.MULTILINE)
    assert prepare and "toy.test.fr" in prepare.group(1).split(", "), output[-3000:]

    # A target language without the task's file is named with the setting it needs.
    del config["tasks"]["toy"]["test"]["fr"]
    (tmp_path / "missing.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    missing = dry_run(tmp_path / "missing.yaml")
    assert missing.returncode != 0 and "tasks.toy.test.fr" in missing.stdout + missing.stderr

    probe = "from ramen.tasks import TASKS; print(TASKS.load('toy').score.__name__)"
    resolved = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert resolved.stdout.split() == ["score"]

    # Its fine-tuning, written on the shared skeleton, trains, selects, saves and swaps a table in.
    lines = ["the cat", "a big red dog is on the mat", "she is", "the old teacher was in the garden",
             "we", "my mother and my father was new", "it is red", "they and we was in the school of the house"]
    finetune = (f"import json; from ramen.tasks import TASKS; history, foreign = TASKS.load('toy').finetune("
                f"{str(tiny_source_dir)!r}, {str(tiny_source_dir)!r}, {lines!r}, {str(tmp_path / 'probe')!r}); "
                "print(json.dumps([history, foreign]))")
    trained = subprocess.run([sys.executable, "-c", finetune], capture_output=True, text=True, env=env)
    assert trained.returncode == 0, trained.stderr[-3000:]
    history, foreign = json.loads(trained.stdout.splitlines()[-1])
    assert [row["epoch"] for row in history] == [1, 2, 3] and sum(row["selected"] for row in history) == 1
    saved = json.loads((tmp_path / "probe" / "toy.json").read_text(encoding="utf-8"))
    assert saved["selected_epoch"] == next(row["epoch"] for row in history if row["selected"])
    assert (tmp_path / "probe" / "toy.pt").is_file() and (tmp_path / "probe" / "config.json").is_file()
    # The same table swapped back in scores as the selected epoch did.
    assert foreign == next(row["accuracy"] for row in history if row["selected"])


def test_a_task_section_or_target_that_no_task_registers_is_named(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "resources").symlink_to(REPO / "resources")
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))
    config["targets"]["xnli_curve"] = ["ramen"]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    result = subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(REPO / "workflow" / "Snakefile"), "--directory", str(work),
         "--cores", "1", "-n", "--configfile", str(tmp_path / "bad.yaml")],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "targets.xnli_curve" in output and "xnli_curves" in output, output[-3000:]
    assert "Job stats" not in output
