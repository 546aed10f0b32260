"""The task registry (ramen.tasks): evaluation units by layout, targets, and the checks of task names."""

from __future__ import annotations

from pathlib import Path

import pytest

from ramen.errors import ConfigError
from ramen.tasks import (TASKS, TaskFiles, TaskSpec, Target, check_task_config, checkpoint_targets,
                         evaluation_units, language_needs, requested_files, table_targets, targets, task_files)

WORKFLOW = Path(__file__).resolve().parents[2] / "workflow"


def test_every_layout_groups_its_files_into_units_owned_by_the_evaluated_language():
    tasks = {
        "xnli": {"train": [{"url": "https://example.org/mnli.zip", "member": "mnli.tsv", "format": "multinli"}],
                 "dev": {"fr": "x.dev.fr"}, "test": {"fr": "x.test.fr", "en": "x.test.en"}, "settings": {}},
        "ud": {"train": {"en": "u.train.en"}, "dev": {"fr": "u.dev.fr"}, "test": {},
               "supervised": {"fr": {"train": "s.train", "dev": "s.dev", "test": "s.test"}}},
        "retrieval": {"pairs": {"fr": {"en": "p.en", "fr": "p.fr"}}},
        "nmt": {"dev": {"en": "n.dev.en", "fr": "n.dev.fr", "de": "n.dev.de"}, "test": {"en": "n.test.en"}},
    }
    assert evaluation_units(tasks, "en") == {
        ("xnli", "dev", "fr"): {"fr": "x.dev.fr"},
        ("xnli", "test", "fr"): {"fr": "x.test.fr"},
        ("xnli", "test", "en"): {"en": "x.test.en"},
        ("ud", "dev", "fr"): {"fr": "u.dev.fr"},
        # A training treebank is no evaluation file, in either layout.
        ("ud_supervised", "dev", "fr"): {"fr": "s.dev"},
        ("ud_supervised", "test", "fr"): {"fr": "s.test"},
        ("retrieval", "pairs", "fr"): {"en": "p.en", "fr": "p.fr"},
        # The shared English side of parallel dev/test files belongs to each foreign language.
        ("nmt", "dev", "fr"): {"en": "n.dev.en", "fr": "n.dev.fr"},
        ("nmt", "dev", "de"): {"en": "n.dev.en", "de": "n.dev.de"},
    }
    assert evaluation_units({}, "en") == {}
    # Every file is named by its own key path; training files are checked but form no unit.
    files = {setting: (file.check, file.unit) for file in task_files(tasks, "en") for setting in file.settings.values()}
    assert files["tasks.ud.train.en"] == ("conllu", None)
    assert files["tasks.ud.supervised.fr.train"] == ("conllu", None)
    assert files["tasks.ud.supervised.fr.dev"] == ("conllu", ("ud_supervised", "dev", "fr"))
    assert files["tasks.retrieval.pairs.fr.en"] == ("lines", ("retrieval", "pairs", "fr"))
    assert files["tasks.nmt.dev.en"] == ("lines", ("nmt", "dev", "de")) and "tasks.nmt.test.en" not in files
    assert files["tasks.xnli.test.en"] == ("nli", ("xnli", "test", "en"))
    # A sources entry is a source-language training file; what describes it goes to its check.
    [train] = [file for file in task_files(tasks, "en") if "tasks.xnli.train[0]" in file.settings.values()]
    assert (train.owner, train.options) == ("en", {"source": {"format": "multinli"}})
    assert train.sides == {"en": tasks["xnli"]["train"][0]} and train.unit is None


def test_requested_targets_give_results_per_variant_and_language_and_each_report_once():
    files = requested_files({"xnli": ["a", "b"], "ud": ["a"], "ud_supervised": ["b"], "curves": [], "ablation": ["a"]},
                            ["fr", "de"])
    assert files[:4] == ["results/xnli/a_fr.tsv", "results/xnli/a_de.tsv", "results/xnli/b_fr.tsv", "results/xnli/b_de.tsv"]
    assert "results/ud/supervised/b_de.tsv" in files and "results/report/curves.png" not in files
    # ud and ud_supervised share the paper tables: listed once.
    assert files.count("results/report/paper_tables.md") == 1 and "results/report/xnli_summary.tsv" in files
    assert not any("ablation" in path for path in files)  # not a task's target


def test_language_needs_follow_the_requested_targets():
    source, per_language = language_needs({"retrieval": ["a"], "xnli": [], "ud_curves": ["a"]}, "en")
    assert source == ["tasks.ud.train.en"]
    assert per_language == ["tasks.ud.dev.{lang}", "tasks.ud.test.{lang}", "tasks.retrieval.pairs.{lang}"]


def test_unregistered_task_sections_and_target_keys_are_named_with_the_known_ones():
    check_task_config({"xnli": {}, "nmt": {}}, {"xnli": [], "curves": [], "ablation": []}, ["ablation"])
    with pytest.raises(ConfigError, match=r"tasks\.topics': no registered task.*xnli, ud, retrieval"):
        check_task_config({"topics": {}}, {})
    with pytest.raises(ConfigError, match=r"targets\.xnli_curve': no registered task declares.*xnli_curves"):
        check_task_config({}, {"xnli_curve": ["a"]})


def test_a_target_key_declared_by_two_tasks_is_refused():
    twice = {name: TaskSpec("m", "accuracy", "", f"rules/{name}.smk", targets={"same": Target()}) for name in ("a", "b")}
    with pytest.raises(ValueError, match="targets.same is declared twice"):
        targets(twice)
    with pytest.raises(ValueError, match="layout"):
        TaskFiles("dev", "by_lang")


def test_every_entry_names_an_existing_rule_file_that_makes_its_results():
    for name, spec in TASKS.items():
        rules = (WORKFLOW / spec.rules).read_text(encoding="utf-8")
        for key, target in spec.targets.items():
            if target.results:
                assert target.results in rules, f"{spec.rules} has no rule writing {target.results} (targets.{key})"
    assert set(checkpoint_targets()) == {"curves", "xnli_curves", "ud_curves"}
    assert table_targets() == ["nmt"]
