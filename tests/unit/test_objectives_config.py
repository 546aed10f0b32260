"""Objective settings in the workflow: which settings reach a variant's training, config parsing,
and the objective x init ablation table."""

from __future__ import annotations

import pytest

from ramen.errors import ConfigError
from ramen.io import write_tsv
from ramen.reports.objectives import ablation_table, plot_ablation
from ramen.objectives import OBJECTIVES, get_objective, objective_params, uses_pairs
from ramen.objectives.base import ObjectiveSettings

SECTION = {"language_embeddings": True, "sampling_alpha": None, "decomposed_share": False,
           "focal": {"enabled": False, "alpha": 0.25, "gamma": 2.0, "loss_threshold": 5.0, "min_step": 50},
           "rtd": {"weight": 50.0, "generator_layers": 2, "rescale_init": False}}


def test_masked_lm_reads_only_the_shared_settings_that_are_on():
    assert objective_params("mlm", SECTION) == {"name": "mlm", "sampling_alpha": None}
    assert objective_params("mlm", SECTION, {"focal": {"enabled": True}})["focal"]["enabled"] is True
    # Off, focal loss changes nothing: its other values are no param (changing them reruns nothing).
    assert "focal" not in objective_params("tlm", SECTION, {"focal": {"gamma": 1.0}})


def test_each_objective_reads_only_its_own_settings():
    assert "rtd" not in objective_params("tlm", SECTION)
    assert "decomposed_share" not in objective_params("rtd", SECTION)
    assert objective_params("tlm-da", SECTION)["decomposed_share"] is False
    assert objective_params("trtd", SECTION)["rtd"]["weight"] == 50.0
    # A variant's override merges into the section key by key.
    params = objective_params("tlm-da", SECTION, {"focal": {"enabled": True}})
    assert params["focal"] == {**SECTION["focal"], "enabled": True}
    with pytest.raises(ConfigError, match="unknown objective 'xlm'"):
        objective_params("xlm", SECTION)


def test_every_registry_entry_is_an_objective_and_the_schema_leaves_the_names_to_the_registry():
    from pathlib import Path

    import yaml

    for name in OBJECTIVES:  # each entry names a class that knows itself by that name
        assert get_objective(name).name == name
    schema = yaml.safe_load((Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml")
                            .read_text(encoding="utf-8"))
    variant = schema["properties"]["variants"]["additionalProperties"]["properties"]
    # A second list of names would have to be edited with every new entry (the DAG checks names).
    assert "enum" not in variant["objective"] and "enum" not in variant["init"]
    assert {name for name in OBJECTIVES if uses_pairs(name)} == {"tlm", "tlm-da", "trtd"}


def test_objective_settings_from_config_fill_defaults_and_name_unknown_keys():
    settings = ObjectiveSettings.from_config({"focal": {"enabled": True}, "rtd": {"weight": 10.0}})
    assert settings.focal.enabled and settings.focal.gamma == 2.0 and settings.rtd.weight == 10.0
    with pytest.raises(ConfigError, match="objectives.*foca"):
        ObjectiveSettings.from_config({"foca": {}})
    with pytest.raises(ConfigError, match=r"'objectives\.rtd\.lambda': unknown setting"):
        ObjectiveSettings.from_config({"rtd": {"lambda": 3}})
    # A variant's overrides are named by their own path, nested sections and types included.
    with pytest.raises(ConfigError, match=r"'variants\.ramen\.objectives\.focal\.gamma': 'high' is not a number"):
        ObjectiveSettings.from_config({"focal": {"gamma": "high"}}, "variants.ramen.objectives")


def write(path, header, rows):
    path.write_text("\t".join(header) + "\n" + "".join("\t".join(map(str, row)) + "\n" for row in rows))
    return path


def test_ablation_table_is_an_objective_by_init_grid_with_empty_missing_cells(tmp_path):
    xnli_header = ["variant", "lang", "split", "task", "accuracy"]
    ud_header = ["variant", "lang", "split", "task", "mode", "las"]
    xnli = [write(tmp_path / "ramen_fr.tsv", xnli_header, [["ramen", "fr", "dev", "xnli", 0.9],
                                                            ["ramen", "fr", "test", "xnli", 0.4461]]),
            write(tmp_path / "ramen-da_fr.tsv", xnli_header, [["ramen-da", "fr", "test", "xnli", 0.45]]),
            write(tmp_path / "rnd-da_fr.tsv", xnli_header, [["rnd-da", "fr", "test", "xnli", 0.34]])]
    (tmp_path / "ud").mkdir()
    ud = [write(tmp_path / "ud" / "ramen_fr.tsv", ud_header, [["ramen", "fr", "test", "ud", "zero-shot", 0.3512]]),
          write(tmp_path / "ud" / "rnd-da_fr.tsv", ud_header, [["rnd-da", "fr", "test", "ud", "zero-shot", 0.02]])]
    variants = {"rnd-da": {"row": "tlm-da + focal", "init": "random"},
                "ramen-da": {"row": "tlm-da + focal", "init": "parallel"},
                "ramen": {"row": "mlm", "init": "parallel"}}
    columns, rows = ablation_table(variants, xnli, ud)
    assert columns == ["objective", "lang", "parallel_xnli", "parallel_las", "random_xnli", "random_las", "variants"]
    assert [[row[c] for c in columns] for row in rows] == [
        ["mlm", "fr", "44.6", "35.1", "", "", "ramen"],
        ["tlm-da + focal", "fr", "45.0", "", "34.0", "2.0", "ramen-da rnd-da"]]
    write_tsv(tmp_path / "table.tsv", rows, columns)
    assert (tmp_path / "table.tsv").read_text().splitlines()[0].split("\t") == columns
    plot_ablation(columns, rows, tmp_path / "table.png")
    assert (tmp_path / "table.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ConfigError, match="'ramen-da' and 'ramen-da2' both"):
        ablation_table({**variants, "ramen-da2": {"row": "tlm-da + focal", "init": "parallel"}}, xnli, ud)


def test_schema_validation_keeps_a_partial_variant_override_partial():
    # Schema defaults filled into a variant's override would replace the section's values.
    from pathlib import Path

    import yaml
    from snakemake.utils import validate

    repo = Path(__file__).resolve().parents[2]
    config = yaml.safe_load((repo / "config" / "config.yaml").read_text(encoding="utf-8"))
    config["objectives"]["focal"]["min_step"] = 50
    config["variants"]["probe"] = {"init": "parallel", "objective": "tlm", "objectives": {"focal": {"enabled": True}}}
    validate(config, str(repo / "workflow" / "schemas" / "config.schema.yaml"))
    assert config["variants"]["probe"]["objectives"] == {"focal": {"enabled": True}}
    params = objective_params("tlm", config["objectives"], config["variants"]["probe"]["objectives"])
    assert params["focal"]["min_step"] == 50 and params["focal"]["enabled"] is True


def test_row_labels_name_the_options_and_keep_their_objective_rank():
    from ramen.reports.objectives import OBJECTIVE_ORDER, objective_rank, row_label

    assert row_label("mlm", False, False) == "mlm"
    assert row_label("tlm-da", False, True) == "tlm-da + focal"
    assert row_label("trtd", True, True) == "trtd+grpb + focal"
    for name in OBJECTIVE_ORDER:
        assert objective_rank(row_label(name, True, True)) == OBJECTIVE_ORDER.index(name)
