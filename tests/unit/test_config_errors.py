"""Every key of the config is checked by type and range, overrides of a section included, and a
problem is one line naming the setting's full path."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from ramen.config_errors import config_problem

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
DEMO = yaml.safe_load((REPO / "config" / "config.yaml").read_text(encoding="utf-8"))


def problem_with(path: str, value) -> str:
    config = copy.deepcopy(DEMO)
    *parents, key = path.split(".")
    section = config
    for part in parents:
        section = section.setdefault(part, {})
    section[key] = value
    return config_problem(config, SCHEMA)


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml", "rehearsal.yaml"])
def test_the_shipped_configs_pass_and_get_the_defaults_snakemake_would_fill_in(name):
    config = yaml.safe_load((REPO / "config" / name).read_text(encoding="utf-8"))
    expected = copy.deepcopy(config)
    validate(expected, str(SCHEMA), set_default=True)
    assert config_problem(config, SCHEMA) == ""
    assert config_problem(config, SCHEMA, fill_defaults=True) == ""
    assert config == expected


@pytest.mark.parametrize("path, value, expected", [
    ("variants.ramen.training.steps", "abc", "'variants.ramen.training.steps': 'abc' is not an integer"),
    ("variants.ramen.training.peak_lr", 0, "'variants.ramen.training.peak_lr': 0 is less than or equal to the "
                                           "minimum of 0"),
    ("variants.ramen.training.stepz", 10, "'variants.ramen.training.stepz': unknown key (did you mean 'steps'?)"),
    ("tasks.xnli.settings.epoch", 2, "'tasks.xnli.settings.epoch': unknown key (did you mean 'epochs'?)"),
    ("tasks.xnli.settings.epochs", 0, "'tasks.xnli.settings.epochs': 0 is less than the minimum of 1"),
    ("tasks.xnli.settings.pooling", "max", "'tasks.xnli.settings.pooling': 'max' is not one of ['mean', 'cls', 'last']"),
    ("tasks.ud.settings.max_train_sentences", 1.5,
     "'tasks.ud.settings.max_train_sentences': 1.5 is not an integer or null"),
    ("tasks.ud.supervised_settings.epochz", 3, "'tasks.ud.supervised_settings.epochz': unknown key"),
    ("tasks.ud.supervised_settings.dropout", 1.0, "'tasks.ud.supervised_settings.dropout': 1.0 is greater than or "
                                                  "equal to the maximum of 1"),
    ("tasks.retrieval.settings.batch_size", 0, "'tasks.retrieval.settings.batch_size': 0 is less than the minimum"),
    ("variants.ramen-da.objectives.focal.gamma", "x", "'variants.ramen-da.objectives.focal.gamma': 'x' is not a number"),
    ("training.steps", True, "'training.steps': True is not an integer"),
    ("tasks.ud.settings.learning_rate", "1e-5", "'tasks.ud.settings.learning_rate': '1e-5' is not a number "
                                                "(YAML reads 1e-5 as a string: write 1.0e-5)"),
])
def test_a_bad_value_is_named_by_its_full_path(path, value, expected):
    message = problem_with(path, value)
    assert message == f"config setting {expected}" or message.startswith(f"config setting {expected}"), message
    assert "\n" not in message and len(message) < 600


def test_an_override_needs_none_of_its_sections_required_keys():
    config = copy.deepcopy(DEMO)
    config["variants"]["ramen"]["training"] = {"peak_lr": 0.001}
    config["tasks"]["ud"]["supervised_settings"] = {"epochs": 2}
    assert config_problem(config, SCHEMA) == ""


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path, capsys):
    from ramen.config_errors import main, yaml_problem

    broken = tmp_path / "my.yaml"
    broken.write_text("source:\n  lang: en\n  model: [a, b\nlanguages: [fr]\n", encoding="utf-8")
    assert yaml_problem(broken) == (f"{broken}:4:10: not valid YAML: expected ',' or ']', but got ':' "
                                    "(while parsing a flow sequence from line 3)")
    tabbed = tmp_path / "tabbed.yaml"
    tabbed.write_text("bpe:\n\tmerges: 10\n", encoding="utf-8")
    assert yaml_problem(tabbed).startswith(f"{tabbed}:2:1: not valid YAML: found character '\\t'")
    assert yaml_problem(REPO / "config" / "config.yaml") == ""
    # The command a user runs on a --configfile, which Snakemake reads before the workflow starts.
    assert main([str(broken)]) == 1
    assert capsys.readouterr().out.startswith(f"{broken}:4:10: not valid YAML")


def test_a_config_file_that_holds_no_settings_is_named(tmp_path, capsys):
    """Snakemake's own message named no file; the command printed a missing `source` key."""
    from ramen.config_errors import main

    for name, content in (("empty.yaml", ""), ("comments.yaml", "# settings to come\n\n"),
                          ("list.yaml", "- source\n")):
        path = tmp_path / name
        path.write_text(content, encoding="utf-8")
        assert main([str(REPO / "config" / "config.yaml"), str(path)]) == 1
        out = capsys.readouterr().out
        assert out.startswith(f"{path}: holds no settings"), out
        assert len(out.splitlines()) == 1


def test_a_missing_path_or_a_directory_is_one_line_not_a_traceback(tmp_path, capsys):
    from ramen.config_errors import main

    assert main([str(tmp_path / "no-such.yaml")]) == 1
    assert capsys.readouterr().out == f"{tmp_path / 'no-such.yaml'}: cannot be read: No such file or directory " \
                                      "(check the path)\n"
    assert main([str(tmp_path)]) == 1
    assert capsys.readouterr().out == f"{tmp_path}: is a directory, not a config file (give the YAML file itself)\n"


def test_the_config_check_command_merges_files_as_snakemake_does(tmp_path, capsys):
    from ramen.config_errors import main

    override = tmp_path / "override.yaml"
    override.write_text("variants:\n  ramen:\n    training: {stepz: 10}\n", encoding="utf-8")
    assert main([str(REPO / "config" / "paper.yaml")]) == 0
    assert main([str(REPO / "config" / "config.yaml"), str(override)]) == 1
    out = capsys.readouterr().out
    assert "every setting is valid, and a dry run finds no problem" in out
    assert "config setting 'variants.ramen.training.stepz': unknown key (did you mean 'steps'?)" in out


@pytest.fixture
def demo_dir(tmp_path, monkeypatch):
    """A run directory where the demo config's relative paths resolve."""
    (tmp_path / "resources").symlink_to(REPO / "resources")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_config(directory: Path, change) -> Path:
    config = copy.deepcopy(DEMO)
    change(config)
    path = directory / "my.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def no_ramen_variant(config):
    config["variants"] = {"par": config["variants"]["ramen"], "source": config["variants"]["source"]}
    config["targets"] = {"xnli": ["par", "source"]}
    for section in ("char2subword", "peer_report", "init_report"):
        config.pop(section, None)


@pytest.mark.parametrize("change, expected", [
    # Each of these passed this command ("every setting is valid") and failed later.
    (lambda c: c["variants"]["ramen"].update(init="parralel"),
     "config setting 'variants.ramen.init': unknown initialiser 'parralel'"),
    (lambda c: c["variants"]["ramen"].update(objective="tlmm"),
     "config setting 'variants.ramen.objective': unknown objective 'tlmm'"),
    (lambda c: c["source"].update(model="no-such-model"),
     "config setting 'source.model': 'no-such-model' resolves to"),
    (lambda c: c["corpora"]["fr"].append({"path": "no-such.txt", "format": "text"}),
     "config setting 'corpora.fr[2]': no file at no-such.txt"),
    # Found by train_bilingual, 179 s into a tiny run, after every job before it.
    (lambda c: c["variants"]["ramen"].setdefault("training", {}).update(grad_accumulation=5),
     "config setting 'variants.ramen.training.grad_accumulation': training.batch_size: 16 does not split into 5"),
    (lambda c: c["training"].update(batch_size=15, grad_accumulation=2),
     "config setting 'training.grad_accumulation': training.batch_size: 15 does not split into 2"),
    (lambda c: c["head_warmup"].update(gpus=3),
     "config setting 'head_warmup.gpus': 16 sequences per language and micro-step"),
    (lambda c: c["variants"]["ramen"].setdefault("training", {}).update(stages=[{"until": 10, "train": ["head"]}]),
     "config setting 'variants.ramen.training.stages[0].until': the stages end at update 10 but training runs 150"),
    (lambda c: c["char2subword"]["pretraining"].update(mask_share=0.8, random_share=0.3),
     "config setting 'char2subword.pretraining': mask_share 0.8 + random_share 0.3 exceeds 1"),
    (lambda c: c["char2subword"]["approximation"].update(losses={"ce": 0, "cos": 0, "l2": 0, "nbr": 0}),
     "config setting 'char2subword.approximation.losses': no loss has a positive weight"),
])
def test_the_config_check_command_checks_what_the_dry_run_checks(demo_dir, capsys, change, expected):
    from ramen.config_errors import main

    assert main([str(write_config(demo_dir, change))]) == 1
    out = capsys.readouterr().out
    assert out.startswith(expected), out
    assert len(out.splitlines()) == 1


def test_a_config_without_a_variant_named_ramen_dry_runs(demo_dir):
    """The schema's default char2subword.tables named `ramen`, and building any run's job graph
    looked it up: `unknown variant 'ramen'`, though the run asked for no char2subword output."""
    from ramen.config_errors import run_problem

    path = write_config(demo_dir, no_ramen_variant)
    assert run_problem([path]) == ""
    assert run_problem([path], ["results/xnli/par_fr.tsv"]) == ""
    # The optional stage is still looked up when a run asks for it, and its setting is named.
    with_tables = write_config(demo_dir, lambda c: (no_ramen_variant(c), c.update(char2subword={"tables": ["ramen"]})))
    problem = run_problem([with_tables], ["char2subword_all"])
    assert problem.startswith("config setting 'char2subword.tables[0]': 'ramen' is neither 'source' nor a "
                              "transferred variant (variants: par, source)"), problem
    assert "\n" not in problem  # Snakemake's wrapping of an input function's error, traceback and all, is gone
    noisy = write_config(demo_dir, lambda c: (no_ramen_variant(c), c.update(
        char2subword={"tables": ["source"], "noisy_xnli": {"variants": ["ramen"]}})))
    problem = run_problem([noisy], ["char2subword_all"])
    assert problem.startswith("config setting 'char2subword.noisy_xnli.variants[0]': 'ramen' names no variant"), \
        problem


@pytest.mark.parametrize("path, key, change", [
    ("corpora.../x", "../x", lambda c: c["corpora"].update({"../x": c["corpora"]["fr"]})),
    ("parallel.fr.fra", "fra", lambda c: c["parallel"]["fr"].update(fra="x.txt")),
    ("text.max_bytes.de", "de", lambda c: c["text"].update(max_bytes={"de": 5})),
    ("tasks.xnli.dev.french", "french", lambda c: c["tasks"]["xnli"]["dev"].update(french="x.tsv")),
    ("monolingual.vectors.fr ", "fr ", lambda c: c["monolingual"].update(vectors={"fr ": "x.vec"})),
])
def test_a_key_of_a_per_language_mapping_that_names_no_language_is_an_error(path, key, change):
    """Such keys were accepted and ignored."""
    config = copy.deepcopy(DEMO)
    change(config)
    assert config_problem(config, SCHEMA) == (f"config setting '{path}': {key!r} names no language (a key here is "
                                              "one of ar, el, en, fr, hi, ru, vi, zh; fix or remove it)")


def test_a_config_may_list_inputs_of_more_languages_than_a_run_selects():
    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text(encoding="utf-8"))
    assert len(paper["languages"]) == 6
    paper["languages"] = ["fr", "ru"]  # --config languages=[fr,ru]
    assert config_problem(paper, SCHEMA) == ""


def test_a_language_modelling_window_is_checked_with_the_config():
    from ramen.glue import check_settings_together

    config = copy.deepcopy(DEMO)
    config["tasks"]["language_modeling"] = {"text": {"fr": "x.txt"}, "settings": {"max_length": 64, "stride": 64}}
    assert config_problem(config, SCHEMA, fill_defaults=True) == ""  # the schema cannot compare two keys
    with pytest.raises(Exception, match=r"config setting 'tasks\.language_modeling\.settings\.stride': must be "
                                        r"in 1\.\.max_length-1 \(63\), got 64"):
        check_settings_together(config)


def test_an_eflomal_build_that_ignores_the_seed_fails_the_dry_run(demo_dir, unseeded_eflomal):
    """Before, the align job refused it, after the text jobs; a run whose targets name no variant
    initialised from alignments does not need eflomal at all."""
    from ramen.config_errors import run_problem

    path = write_config(demo_dir, lambda c: None)
    problem = run_problem([path], ["results/xnli/ramen_fr.tsv"])
    assert "config setting 'alignment.seed'" in problem and "ignores seeds" in problem, problem
    unaligned = write_config(demo_dir, lambda c: c.update(targets={"xnli": ["rnd", "source"]}))
    assert run_problem([unaligned]) == ""
