"""Objective settings in the workflow: which settings reach a variant's training, config parsing,
and the objective x init ablation table."""

from __future__ import annotations

import pytest

from ramen.errors import ConfigError
from ramen.objective_config import OBJECTIVE_SETTINGS, PAIR_OBJECTIVES, objective_params
from ramen.objective_report import ablation_table, write_ablation
from ramen.objectives import OBJECTIVES, ObjectiveSettings, uses_pairs

SECTION = {"language_embeddings": True, "sampling_alpha": None, "decomposed_share": False,
           "focal": {"enabled": False, "alpha": 0.25, "gamma": 2.0, "loss_threshold": 5.0, "min_step": 50},
           "rtd": {"weight": 50.0, "generator_layers": 2, "rescale_init": False}}


def test_plain_masked_lm_reads_no_objective_settings():
    assert objective_params("mlm", SECTION) == {}
    assert objective_params("mlm", SECTION, {"focal": {"enabled": True}})["focal"]["enabled"] is True


def test_each_objective_reads_only_its_own_settings():
    assert "rtd" not in objective_params("tlm", SECTION)
    assert "decomposed_share" not in objective_params("rtd", SECTION)
    assert objective_params("tlm-da", SECTION)["decomposed_share"] is False
    assert objective_params("trtd", SECTION)["rtd"]["weight"] == 50.0
    # A variant's override merges into the section key by key.
    params = objective_params("tlm-da", SECTION, {"focal": {"enabled": True}})
    assert params["focal"] == {**SECTION["focal"], "enabled": True}
    with pytest.raises(ValueError, match="unknown objective"):
        objective_params("xlm", SECTION)


def test_the_torch_free_names_match_the_registry():
    assert set(OBJECTIVE_SETTINGS) == set(OBJECTIVES)
    assert set(PAIR_OBJECTIVES) == {name for name in OBJECTIVES if uses_pairs(name)}


def test_objective_settings_from_config_fill_defaults_and_name_unknown_keys():
    settings = ObjectiveSettings.from_config({"focal": {"enabled": True}, "rtd": {"weight": 10.0}})
    assert settings.focal.enabled and settings.focal.gamma == 2.0 and settings.rtd.weight == 10.0
    with pytest.raises(ConfigError, match="objectives.*foca"):
        ObjectiveSettings.from_config({"foca": {}})
    with pytest.raises(ConfigError, match="objectives"):
        ObjectiveSettings.from_config({"rtd": {"lambda": 3}})


def write(path, header, rows):
    path.write_text("\t".join(header) + "\n" + "".join("\t".join(map(str, row)) + "\n" for row in rows))
    return path


def test_ablation_table_pairs_xnli_accuracy_with_ud_las(tmp_path):
    xnli_header = ["variant", "lang", "split", "task", "accuracy"]
    ud_header = ["variant", "lang", "split", "task", "mode", "las"]
    xnli = [write(tmp_path / "ramen_fr.tsv", xnli_header, [["ramen", "fr", "dev", "xnli", 0.9],
                                                            ["ramen", "fr", "test", "xnli", 0.4461]]),
            write(tmp_path / "ramen-da_fr.tsv", xnli_header, [["ramen-da", "fr", "test", "xnli", 0.45]])]
    (tmp_path / "ud").mkdir()
    ud = [write(tmp_path / "ud" / "ramen_fr.tsv", ud_header, [["ramen", "fr", "test", "ud", "zero-shot", 0.3512]])]
    variants = {"ramen-da": {"objective": "tlm-da", "init": "parallel"},
                "ramen": {"objective": "mlm", "init": "parallel"}}
    rows = ablation_table(variants, xnli, ud)
    assert [(r["variant"], r["xnli_accuracy"], r["ud_las"]) for r in rows] == [("ramen", "44.6", "35.1"),
                                                                              ("ramen-da", "45.0", "")]
    write_ablation(rows, tmp_path / "table.tsv")
    assert (tmp_path / "table.tsv").read_text().splitlines()[0].split("\t") == [
        "objective", "init", "variant", "lang", "xnli_accuracy", "ud_las"]


def test_schema_validation_keeps_a_partial_variant_override_partial():
    # Schema defaults filled into a variant's override would replace the section's values.
    from pathlib import Path

    import yaml
    from snakemake.utils import validate

    repo = Path(__file__).resolve().parents[2]
    config = yaml.safe_load((repo / "config.yaml").read_text(encoding="utf-8"))
    config["objectives"]["focal"]["min_step"] = 50
    config["variants"]["probe"] = {"init": "parallel", "objective": "tlm", "objectives": {"focal": {"enabled": True}}}
    validate(config, str(repo / "schemas" / "config.schema.yaml"))
    assert config["variants"]["probe"]["objectives"] == {"focal": {"enabled": True}}
    params = objective_params("tlm", config["objectives"], config["variants"]["probe"]["objectives"])
    assert params["focal"]["min_step"] == 50 and params["focal"]["enabled"] is True
