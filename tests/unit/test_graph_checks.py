"""The checks the Snakefile makes while it builds the job graph (ramen.workflow.graph_checks), on
config dicts: the demo's passes, and each bad setting fails with a ConfigError naming its key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from ramen.config_errors import config_problem
from ramen.data.input_checks import InputFile
from ramen.errors import ConfigError
from ramen.glue import resolve_model_path
from ramen.workflow import config_lookups, graph_checks, memory_plans

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
DEMO = yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))


@pytest.fixture
def demo(tmp_path, monkeypatch) -> dict:
    """The demo config with the schema's defaults, as the Snakefile holds it, in a run directory
    where its relative paths resolve."""
    (tmp_path / "resources").symlink_to(REPO / "resources")
    monkeypatch.chdir(tmp_path)
    config = copy.deepcopy(DEMO)
    assert config_problem(config, SCHEMA, fill_defaults=True) == ""
    return config


def raises_at(setting: str, match: str = ""):
    """pytest.raises for a ConfigError naming ``setting``."""
    return pytest.raises(ConfigError, match=rf"^config setting '{setting}': {match}")


def no_plans():
    return []


# --- check_registry_names -------------------------------------------------------------------------


def test_every_variant_of_the_demo_is_checked_against_the_registries(demo):
    """The demo's variants pass, and a misspelt name in any one of them, not only the first, fails."""
    variants = demo["variants"]
    graph_checks.check_registry_names(variants)
    assert len(variants) > 2
    for name, settings in variants.items():
        for key in ("init", "objective"):
            changed = {**variants, name: {**settings, key: f"{settings[key]}-misspelt"}}
            with raises_at(f"variants.{name}.{key}", "unknown "):
                graph_checks.check_registry_names(changed)


@pytest.mark.parametrize("settings, setting, message", [
    ({"init": "parralel"}, "variants.v.init", r"unknown initialiser 'parralel' \(valid names: random, .*none, pretrained\)"),
    ({"objective": "tlmm"}, "variants.v.objective", r"unknown objective 'tlmm' \(valid names: mlm, "),
    ({"init": "none", "vocabulary": "extend"}, "variants.v.vocabulary",
     r"init 'none' builds no new rows, which an extended vocabulary needs \(choose an initialiser of the new rows"),
    ({"init": "scratch", "vocabulary": "extend"}, "variants.v.init",
     r"initialiser 'scratch' does not serve vocabulary: extend"),
    ({"output_init": "mean"}, "variants.v.output_init",
     r"'mean' chooses the new output rows of an extension; a replaced vocabulary's follow its input rows"),
])
def test_a_variant_the_registries_do_not_serve_is_named_by_its_key(demo, settings, setting, message):
    variant = {**demo["variants"]["ramen"], **settings}
    with raises_at(setting, message):
        graph_checks.check_registry_names({"v": variant})


# --- config look-ups --------------------------------------------------------------------------------


def test_the_run_trains_and_reads_the_variants_its_targets_name(demo):
    # targets: xnli and ud [ramen, rnd, source]; the nmt table target source_en-fr names `source`.
    assert config_lookups.requested_variants(demo) == ["ramen", "rnd", "source"]
    assert config_lookups.trained_variants(demo) == ["ramen", "rnd"]
    demo["targets"] = {"xnli": "all"}
    trained = config_lookups.trained_variants(demo)
    assert "wechsel" in trained and "source" not in trained and "mbert" not in trained
    assert config_lookups.target_variants(demo, "ud") == []


def test_a_pretrained_variant_without_its_checkpoint_says_what_to_set(demo, tmp_path):
    demo["variants"]["mbert"]["model"] = str(tmp_path / "absent")
    with pytest.raises(ValueError, match=r"variant 'mbert' needs a multilingual checkpoint: .*Set variants\.mbert\.model"):
        config_lookups.pretrained_model_dir(demo, "mbert")
    del demo["variants"]["mbert"]["model"]
    with pytest.raises(ValueError, match="has init: pretrained but no model"):
        config_lookups.pretrained_model_dir(demo, "mbert")
    demo["variants"]["mbert"]["model"] = {"hf": "org/model"}
    assert config_lookups.pretrained_model_dir(demo, "mbert").startswith(f"{demo['download_dir'].rstrip('/')}/")


# --- language_needs and run_input_files ---------------------------------------------------------


def test_a_language_needs_the_settings_its_targets_read(demo):
    needs = graph_checks.language_needs(demo)
    assert needs["en"][0] == "corpora.en"
    assert needs["fr"][:2] == ["corpora.fr", "parallel.fr"]  # ramen's init reads sentence pairs
    assert "tasks.xnli.test.fr" in needs["fr"]
    demo["targets"] = {"xnli": ["rnd"]}  # random init, masked LM: no pairs
    assert "parallel.fr" not in graph_checks.language_needs(demo)["fr"]


def test_the_run_input_files_are_those_of_its_languages_each_with_its_check(demo):
    demo["monolingual"]["vectors"] = {"fr": "fr.vec", "ru": "ru.vec"}  # ru is not one of the run's languages
    files = {item.setting: item for item in graph_checks.run_input_files(demo)}
    assert files["corpora.en[0]"].kind == "wikipedia" and files["corpora.fr[0]"].kind == "corpus"
    pairs = demo["parallel"]["fr"]
    assert files["parallel.fr.en"] == InputFile("parallel.fr.en", pairs["en"], "lines", {"aligned_with": pairs["fr"]})
    assert files["monolingual.vectors.fr"].kind == "vectors"
    assert "monolingual.vectors.ru" not in files
    assert files["tasks.xnli.test.fr"].kind == "nli"


# --- check_model_paths and check_aligner ----------------------------------------------------------


def test_the_demo_source_passes_its_header_checks(demo, monkeypatch):
    """The installed demo source is checked (not skipped as absent), against every transfer
    variant's objective."""
    checked = []

    def check_source(path, setting, *args):
        checked.append((path, setting, args))
        return real(path, setting, *args)

    real = graph_checks.check_source
    monkeypatch.setattr(graph_checks, "check_source", check_source)
    graph_checks.check_model_paths(demo)
    assert [(path, setting) for path, setting, _ in checked] == [
        (resolve_model_path(demo["source"]["model"]), "source.model")]
    transfers = [v for v in demo["variants"] if config_lookups.is_transfer(demo, v)]
    assert transfers and checked[0][2][0] == {f"variants.{v}.objective": demo["variants"][v]["objective"]
                                              for v in transfers}


def test_a_source_model_that_is_not_there_is_named(demo, tmp_path):
    demo["source"]["model"] = str(tmp_path / "no-such-model")
    with raises_at("source.model", "'.*no-such-model' resolves to"):
        graph_checks.check_model_paths(demo)


def test_an_objective_that_trains_another_family_is_named_by_the_variants_key(demo):
    demo["variants"]["rnd"]["objective"] = "clm"  # a causal LM's objective on a masked-LM source
    with raises_at("variants.rnd.objective"):
        graph_checks.check_model_paths(demo)


def test_a_requested_pretrained_checkpoint_is_checked_too(demo, tiny_source_dir, tmp_path):
    demo["variants"]["mbert"]["model"] = str(tiny_source_dir)
    demo["targets"]["xnli"] = ["mbert"]
    graph_checks.check_model_paths(demo)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-family"}')
    demo["variants"]["mbert"]["model"] = str(broken)
    with raises_at("variants.mbert.model"):
        graph_checks.check_model_paths(demo)


def test_an_unseeded_eflomal_is_refused_only_when_a_requested_variant_aligns(demo, unseeded_eflomal):
    with raises_at("alignment.seed", ".* ignores seeds"):
        graph_checks.check_aligner(demo)
    demo["alignment"]["aligner"] = "fast_align"
    graph_checks.check_aligner(demo)
    demo["alignment"]["aligner"] = "eflomal"
    demo["targets"] = {"xnli": ["rnd", "source"]}
    graph_checks.check_aligner(demo)


# --- check_run_inputs -----------------------------------------------------------------------------


def test_the_demo_run_passes_every_check_its_memory_plans_included(demo, capsys):
    made = []

    def plans():
        made.append(memory_plans.memory_plans(demo, REPO))
        return made[-1]

    graph_checks.check_run_inputs(demo, graph_checks.run_input_files(demo), plans, cache=None)
    assert len(made) == 1 and made[0]  # the training jobs were planned, and the plans shown
    shown = capsys.readouterr().err
    assert "Memory per GPU in GiB" in shown and all(f"{plan.rule} {plan.job}:" in shown for plan in made[0])
    # The plans are checked, not only shown: the same plans above a GPU's memory are refused.
    demo["resources"]["gpu_memory_gb"] = 0.01
    with raises_at("resources.gpu_memory_gb", ".* plans .* more than"):
        graph_checks.check_run_inputs(demo, graph_checks.run_input_files(demo), plans, cache=None)


@pytest.mark.parametrize("change, setting, message", [
    (lambda c: c["corpora"].pop("fr"), "corpora.fr", "'fr' is in `languages`"),
    (lambda c: c["corpora"]["fr"].append({"path": "no-such.txt", "format": "text"}), r"corpora\.fr\[2\]",
     "no file at no-such.txt"),
    (lambda c: c["head_warmup"].update(gpus=3), "head_warmup.gpus", "16 sequences per language and micro-step"),
    (lambda c: c["training"].update(batch_size=15, grad_accumulation=2), "training.grad_accumulation",
     "training.batch_size: 15 does not split into 2"),
    (lambda c: c["variants"]["ramen"].setdefault("training", {}).update(grad_accumulation=5),
     "variants.ramen.training.grad_accumulation", "training.batch_size: 16 does not split into 5"),
    (lambda c: c["char2subword"]["pretraining"].update(mask_share=0.8, random_share=0.3), "char2subword.pretraining",
     r"mask_share 0\.8 \+ random_share 0\.3 exceeds 1"),
])
def test_a_bad_setting_or_input_fails_the_run_naming_its_key(demo, change, setting, message):
    change(demo)
    with raises_at(setting, message):
        graph_checks.check_run_inputs(demo, graph_checks.run_input_files(demo), no_plans, cache=None)


def test_the_memory_plans_are_made_only_after_the_training_sections_pass(demo):
    made = []
    demo["training"].update(batch_size=15, grad_accumulation=2)
    with raises_at("training.grad_accumulation"):
        graph_checks.check_run_inputs(demo, [], lambda: made.append(1) or [], cache=None)
    assert made == []
    demo["training"].update(batch_size=16, grad_accumulation=1)
    graph_checks.check_run_inputs(demo, [], lambda: made.append(1) or [], cache=None)
    assert made == [1]


def test_a_file_still_to_be_downloaded_is_checked_when_it_arrives(demo):
    url = "https://example.org/fr.txt"
    demo["corpora"]["fr"].append({"url": url, "format": "text"})
    files = graph_checks.run_input_files(demo)
    downloaded = {item.setting: item.path for item in files}["corpora.fr[2]"]
    assert downloaded == f"{config_lookups.download_dir(demo)}/example.org/fr.txt"
    graph_checks.check_run_inputs(demo, files, no_plans, cache=None)


# --- an extension of no tokens ---------------------------------------------------------------------


def test_an_extension_of_no_new_tokens_is_refused_before_any_job_naming_its_key():
    """bpe.extension_tokens: 0 would extend by nothing: the schema the Snakefile checks first
    refuses it (every other way to learn no token depends on the text, and the job names it)."""
    config = yaml.safe_load((REPO / "config" / "demo-decoder.yaml").read_text(encoding="utf-8"))
    assert any(v.get("vocabulary") == "extend" for v in config["variants"].values())
    config.setdefault("bpe", {})["extension_tokens"] = 0
    assert config_problem(config, SCHEMA, fill_defaults=True) == (
        "config setting 'bpe.extension_tokens': 0 is less than the minimum of 1")
