"""Where a settings section has defaults in the schema and in its dataclass, they agree; elsewhere
the dataclass alone holds them (the schema leaves the section free-form or gives no default)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

SCHEMA = yaml.safe_load((Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml")
                        .read_text(encoding="utf-8"))


def node(path: str) -> dict:
    current = SCHEMA
    for part in path.split("."):
        current = current["properties"][part]
        if "$ref" in current:
            current = SCHEMA["definitions"][current["$ref"].rsplit("/", 1)[1]]
    return current


def filled(spec: dict):
    """What validating an empty section with set_default gives: defaults, nested ones filled in."""
    value = spec.get("default")
    if spec.get("type") == "object" and "properties" in spec and isinstance(value, dict):
        value = dict(value)
        for key, child in spec["properties"].items():
            if key not in value and "default" in child:
                value[key] = filled(child)
    return value


def class_default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def sections():
    from ramen.char2subword.approximate import ApproximationSettings
    from ramen.char2subword.pretrain import PretrainSettings
    from ramen.nmt.train import NmtTrainSettings
    from ramen.tasks.retrieval import RetrievalSettings
    from ramen.tasks.ud import UdSettings
    from ramen.tasks.xnli import NliSettings
    from ramen.training.trainer import TrainSettings

    return {"training": TrainSettings, "tasks.xnli.settings": NliSettings, "tasks.ud.settings": UdSettings,
            "tasks.retrieval.settings": RetrievalSettings, "char2subword.approximation": ApproximationSettings,
            "char2subword.pretraining": PretrainSettings, "tasks.nmt.arms.plain": NmtTrainSettings}


@pytest.mark.parametrize("path", list(sections()))
def test_schema_and_dataclass_defaults_agree(path):
    cls = sections()[path]
    try:
        spec = node(path)
    except KeyError:
        spec = SCHEMA["definitions"]["nmt_training"] if cls.__name__ == "NmtTrainSettings" else None
    assert spec is not None, path
    fields = {field.name: field for field in dataclasses.fields(cls)}
    compared = 0
    for name, child in spec.get("properties", {}).items():
        assert name in fields, f"{path}.{name} is in the schema but not a field of {cls.__name__}"
        if "default" not in child:
            continue
        expected = class_default(fields[name])
        value = filled(child)
        if isinstance(expected, tuple):
            expected = list(expected)
        assert value == expected, f"{path}.{name}: schema default {value!r}, {cls.__name__} default {expected!r}"
        compared += 1
    assert compared or not any("default" in child for child in spec.get("properties", {}).values())
