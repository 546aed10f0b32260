"""A config file given on the command line is the whole config of a run, and bad settings or
inputs fail while the job graph is built, before any job runs."""

from __future__ import annotations

import copy
import re
import shutil
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
    # The paper config leaves these out: it gets the schema's defaults, not the demo's values.
    for key in ("max_train_examples", "max_dev_examples"):
        assert key not in paper["tasks"]["xnli"]["settings"]
        assert effective["tasks"]["xnli"]["settings"][key] is None != demo["tasks"]["xnli"]["settings"][key]
    for key in ("max_train_sentences", "max_dev_sentences", "arc_dim", "relation_dim", "encoder_layers"):
        assert key not in paper["tasks"]["ud"]["settings"]
        assert effective["tasks"]["ud"]["settings"][key] != demo["tasks"]["ud"]["settings"][key]
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
    demo = demo_config()["tasks"]["xnli"]["settings"]
    assert {key: effective["tasks"]["xnli"]["settings"][key] for key in demo} == demo


def test_a_yaml_syntax_error_in_the_config_names_the_file_and_line(workdir):
    """Snakemake's own message names neither. (A --configfile is read by Snakemake before the
    workflow starts: `python -m ramen.config_errors FILE` checks it, tests/unit/test_config_errors.py.)"""
    (workdir / "config").mkdir()
    text = (REPO / "config" / "config.yaml").read_text(encoding="utf-8")
    assert "\nlanguages: [fr]\n" in text
    (workdir / "config" / "config.yaml").write_text(text.replace("\nlanguages: [fr]\n", "\nlanguages: [fr\n"))
    line = text[:text.index("\nlanguages: [fr]\n")].count("\n") + 2
    result = snakemake(workdir, "-n")
    assert result.returncode != 0
    assert re.search(rf"config/config\.yaml:\d+:\d+: not valid YAML: .*flow sequence from line {line}\)",
                     result.stdout + result.stderr), (result.stdout + result.stderr)[-3000:]


def test_the_job_graph_is_built_without_importing_torch(workdir):
    """Every Snakemake start parses the workflow, and a cluster job starts Snakemake once or twice:
    torch's import there cost each start about 2 s of CPU."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "snakemake", "--snakefile", str(REPO / "workflow" / "Snakefile"),
         "--directory", str(workdir), "--cores", "1", "-n", "all", "--configfile", str(REPO / "config" / "paper.yaml")],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "ramen.glue" in imported  # the probe sees the workflow's own imports
    assert {"torch", "transformers"} & imported == set()


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
    assert ("config setting 'training.stepz': unknown key (did you mean 'steps'?); allowed keys in training: "
            "activation_checkpointing, batch_size") in output
    assert len(output.splitlines()) < 30 and "properties" not in output


@pytest.mark.parametrize("where, value, message", [
    (("variants", "ramen", "training", "steps"), "abc",
     "config setting 'variants.ramen.training.steps': 'abc' is not an integer"),
    (("tasks", "xnli", "settings", "epoch"), 2,
     "config setting 'tasks.xnli.settings.epoch': unknown key (did you mean 'epochs'?)"),
])
def test_a_bad_override_or_task_setting_fails_the_dry_run_with_its_full_path(workdir, where, value, message):
    """Once open objects: such a value passed the dry run and failed in its job, hours later."""
    config = demo_config()
    section = config
    for key in where[:-1]:
        section = section.setdefault(key, {})
    section[where[-1]] = value
    output = failing_dry_run(workdir, config)
    assert message in output and "Job stats" not in output


def test_a_missing_model_fails_the_dry_run(workdir):
    """Found by the third job (after Wikipedia extraction) before."""
    config = demo_config()
    config["source"]["model"] = str(workdir / "no-such-model")
    output = failing_dry_run(workdir, config)
    assert f"config setting 'source.model': '{workdir / 'no-such-model'}' resolves to" in output
    assert "holds no config.json" in output and "Job stats" not in output
    config = demo_config()
    config["peers"]["fasttext_models"] = {"fr": "no-such-fasttext.bin"}
    output = failing_dry_run(workdir, config)
    assert "config setting 'peers.fasttext_models.fr': no file at no-such-fasttext.bin" in output


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
    # The first evaluation file the requested targets read, in the order of the task registry.
    assert re.search(r"config setting 'tasks\.(xnli|ud)\.dev\.ru'", failing_dry_run(workdir, config))


def test_an_empty_corpus_fails_before_any_job_naming_the_file(workdir):
    config = demo_config()
    (workdir / "blank.txt").write_text("\n   \n\t\n", encoding="utf-8")
    config["corpora"]["fr"].append({"path": "blank.txt", "format": "text"})
    output = failing_dry_run(workdir, config)
    assert "blank.txt: holds no text (empty or whitespace only" in output and "corpora.fr[2]" in output
    assert "Job stats" not in output


TOY_INITIALISER = '''"""A toy initialiser: every foreign row the mean English embedding."""

import torch

from ramen.initializers.common import InitResult


def mean_init(source_embeddings, source_bias, foreign_vocab, source_vocab, *, alpha=None, generator,
              special_tokens=None):
    n_f = len(foreign_vocab)
    return InitResult(embeddings=source_embeddings.mean(0).expand(n_f, -1).clone(),
                      bias=torch.zeros(n_f), supported=torch.ones(n_f, dtype=torch.bool))
'''
TOY_OBJECTIVE = '''"""A toy objective: RAMEN's masked LM under another name."""

from ramen.objectives.mlm import MaskedLM


class ToyMaskedLM(MaskedLM):
    name = "toy-mlm"
'''


def register(registry: Path, opening: str, entry: str) -> None:
    text = registry.read_text(encoding="utf-8")
    assert opening in text, f"{registry}: the registry no longer opens with {opening!r}"
    registry.write_text(text.replace(opening, opening + entry, 1), encoding="utf-8")


def test_a_registered_initialiser_and_objective_build_their_dag_with_no_other_file_touched(tmp_path):
    """One module plus one registry entry each: no schema value, no rule, no report list."""
    import filecmp

    copy = tmp_path / "ramen"
    for part in ("workflow", "src", "config"):
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (copy / "src" / "ramen" / "initializers" / "toy_mean.py").write_text(TOY_INITIALISER, encoding="utf-8")
    (copy / "src" / "ramen" / "objectives" / "toy_mlm.py").write_text(TOY_OBJECTIVE, encoding="utf-8")
    register(copy / "src" / "ramen" / "initializers" / "__init__.py",
             'INITIALIZERS: Registry[InitializerEntry] = Registry("initialiser", "variants.<variant>.init", {\n',
             '    "toy-mean": InitializerEntry("ramen.initializers.toy_mean:mean_init"),\n')
    register(copy / "src" / "ramen" / "objectives" / "__init__.py",
             'OBJECTIVES: Registry[ObjectiveEntry] = Registry("objective", "variants.<variant>.objective", {\n',
             '    "toy-mlm": ObjectiveEntry("ramen.objectives.toy_mlm:ToyMaskedLM", SHARED_SETTINGS, False),\n')

    changed = []
    for part in ("workflow", "src", "config"):
        pending = [filecmp.dircmp(REPO / part, copy / part, ignore=["__pycache__", "ramen.egg-info"])]
        while pending:
            compared = pending.pop()
            changed += [str(Path(compared.right) / name) for name in compared.diff_files + compared.right_only]
            pending += compared.subdirs.values()
    assert sorted(Path(path).relative_to(copy).as_posix() for path in changed) == [
        "src/ramen/initializers/__init__.py", "src/ramen/initializers/toy_mean.py",
        "src/ramen/objectives/__init__.py", "src/ramen/objectives/toy_mlm.py"]

    config = demo_config()
    config["variants"]["toy"] = {"init": "toy-mean", "objective": "toy-mlm"}
    config["targets"] = {"xnli": ["toy"]}
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "resources").symlink_to(REPO / "resources")
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(copy / "src")}
    result = subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(copy / "workflow" / "Snakefile"), "--directory", str(tmp_path / "work"),
         "--cores", "1", "-n", "--configfile", str(tmp_path / "toy.yaml")],
        capture_output=True, text=True, env=env, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "results/init/toy_fr.safetensors" in output and "results/xnli/toy_fr.tsv" in output
    assert re.search(r"^train_bilingual\s+1$", output, re.MULTILINE), output[-3000:]
    # The entries resolve to the new modules' code.
    probe = ("from ramen.initializers import INITIALIZERS; from ramen.objectives import get_objective; "
             "print(INITIALIZERS['toy-mean'].load().__name__, get_objective('toy-mlm').__name__)")
    resolved = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert resolved.stdout.split() == ["mean_init", "ToyMaskedLM"]


def test_an_unregistered_initialiser_or_objective_is_named_with_the_registered_ones(workdir):
    config = demo_config()
    config["variants"]["ramen"]["init"] = "parralel"
    output = failing_dry_run(workdir, config)
    assert "config setting 'variants.ramen.init': unknown initialiser 'parralel'" in output
    assert "valid names: random, parallel, monolingual" in output
    config = demo_config()
    config["variants"]["ramen"]["objective"] = "tlmm"
    assert "config setting 'variants.ramen.objective': unknown objective 'tlmm'" in failing_dry_run(workdir, config)


def test_an_initialiser_that_does_not_serve_the_variant_s_vocabulary_fails_the_dry_run(workdir):
    """weighted_pieces initialises an extension's new rows only: a replacing variant naming it is refused
    while the job graph is built, with the registry's initialisers of a replaced vocabulary as the fix."""
    from ramen.initializers import names_for

    config = demo_config()
    config["variants"]["pieces"] = {"init": "weighted_pieces"}
    output = failing_dry_run(workdir, config)
    assert ("config setting 'variants.pieces.init': initialiser 'weighted_pieces' does not serve vocabulary: "
            f"replace (it serves extend) (with vocabulary: replace choose one of: {', '.join(names_for('replace'))})"
            in output), output[-2000:]
    assert "Job stats" not in output
