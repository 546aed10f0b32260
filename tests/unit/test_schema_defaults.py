"""Every setting has one default, in the schema (workflow/schemas/config.schema.yaml): a settings
dataclass that mirrors a config section has the same fields, and each of its defaults is the
schema's (or it has none); no rule carries a default of its own."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text(encoding="utf-8"))
# Fields a job sets from its rule (threads) or from its inputs, never from the config.
RUNTIME_FIELDS = {"threads"}


def resolved(spec: dict) -> dict:
    while "$ref" in spec:
        spec = SCHEMA["definitions"][spec["$ref"].rsplit("/", 1)[1]]
    return spec


def node(path: str) -> dict:
    """The schema of a dotted config section, or of a definition named #name."""
    if path.startswith("#"):
        return SCHEMA["definitions"][path[1:]]
    current = SCHEMA
    for part in path.split("."):
        current = resolved(current["properties"][part])
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


NAMED_CLASS = re.compile(r"\(ramen\.([\w.]+)\.(\w+Settings)\)")


def named_sections(spec: dict, path: str = ""):
    """Sections whose description names their settings dataclass, "(ramen.<module>.<Class>Settings)":
    the settings a newly registered task brings are compared without being listed in sections()."""
    match = NAMED_CLASS.search(spec.get("description", ""))
    if match and path:
        yield path, match.groups()
    for key, child in spec.get("properties", {}).items():
        yield from named_sections(child, f"{path}.{key}" if path else key)


def test_sections_that_name_their_dataclass_are_found():
    assert {"tasks.xnli.settings", "tasks.ud.settings"} <= {path for path, _ in named_sections(SCHEMA)}


def sections():
    """Config section -> (its settings dataclass, {schema key: field name} where they differ,
    fields that are not settings of that section)."""
    import importlib

    named = {path: (getattr(importlib.import_module(f"ramen.{module}"), name), {}, set())
             for path, (module, name) in named_sections(SCHEMA)}
    return {**named, **listed_sections()}


def listed_sections():
    from ramen.char2subword.approximate import ApproximationSettings
    from ramen.char2subword.pretrain import PretrainSettings
    from ramen.nmt.model import NmtModelConfig
    from ramen.nmt.train import NmtTrainSettings
    from ramen.tasks.retrieval import RetrievalSettings
    from ramen.tasks.ud import UdSettings
    from ramen.tasks.xnli import NliSettings
    from ramen.training.trainer import TrainSettings

    # The NMT model's sizes come from tasks.nmt.settings.model, its drop-net rate from
    # tasks.nmt.settings.p_net; the rest from the vocabulary and the arm.
    nmt_model_only = {"vocab_size", "pad_id", "bert_dim", "bert_encoder_attention", "bert_decoder_attention",
                      "drop_net"}
    return {
        "training": (TrainSettings, {}, set()),
        "head_warmup": (TrainSettings, {}, set()),
        "tasks.xnli.settings": (NliSettings, {}, set()),
        "tasks.ud.settings": (UdSettings, {}, set()),
        "tasks.retrieval.settings": (RetrievalSettings, {}, set()),
        "char2subword.approximation": (ApproximationSettings, {}, None),
        "char2subword.pretraining": (PretrainSettings, {}, None),
        "#nmt_training": (NmtTrainSettings, {}, None),
        "tasks.nmt.settings.model": (NmtModelConfig, {}, nmt_model_only),
        "tasks.nmt.settings": (NmtModelConfig, {"p_net": "drop_net"}, "schema keys only"),
    }


@pytest.mark.parametrize("path", list(sections()))
def test_a_settings_dataclass_has_the_schema_keys_and_no_default_of_its_own(path):
    cls, renamed, not_settings = sections()[path]
    spec = node(path)
    fields = {field.name: field for field in dataclasses.fields(cls)}
    properties = spec.get("properties", {})
    if not_settings == "schema keys only":  # a section of which the class reads some keys only
        properties = {key: child for key, child in properties.items() if key in renamed}
    for key, child in properties.items():
        name = renamed.get(key, key)
        assert name in fields, f"{path}.{key} is in the schema but not a field of {cls.__name__}"
        default = class_default(fields[name])
        if "default" in child:
            expected = list(default) if isinstance(default, tuple) else default
            if dataclasses.is_dataclass(default):  # a nested section: the schema's filled mapping
                expected = {key: list(value) if isinstance(value, tuple) else value
                            for key, value in dataclasses.asdict(default).items()}
            assert default is dataclasses.MISSING or filled(child) == expected, \
                f"{path}.{key}: schema default {filled(child)!r}, {cls.__name__}.{name} default {default!r}"
        else:
            assert default is dataclasses.MISSING, \
                f"{cls.__name__}.{name} has a default ({default!r}) but {path}.{key} has none in the schema"
    if isinstance(not_settings, set):
        missing = set(fields) - {renamed.get(key, key) for key in properties} - RUNTIME_FIELDS - not_settings
        assert not missing, f"{cls.__name__} fields {sorted(missing)} are not keys of {path} in the schema"


GET_WITH_DEFAULT = re.compile(r"\.get\(\s*[^,()]+,\s*([^)]*)\)")


def literal_default(line: str) -> bool:
    """Whether a line looks a key up with a default other than an empty section, list or None."""
    return any(default.strip() not in ("{}", "[]", "None") for default in GET_WITH_DEFAULT.findall(line))


def test_no_rule_carries_a_default_of_its_own():
    """`.get(key, literal)` in a rule is a second default beside the schema's; an empty section or
    list (`.get(key, {})`) is only the absence of one."""
    found = []
    # rules/inputs/ too: the input functions of one rule file live there.
    for path in [REPO / "workflow" / "Snakefile", *sorted((REPO / "workflow" / "rules").rglob("*.smk"))]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if literal_default(line) and not line.lstrip().startswith("#"):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "defaults belong in the schema:\n" + "\n".join(found)


def test_the_literal_default_probe_finds_one():
    assert literal_default('p_net=lambda wildcards: nmt_settings().get("p_net", 1.0),')
    assert literal_default('objective = settings.get("objective", "mlm")')
    assert not literal_default('files = config["tasks"]["nmt"].get(split, {})')


STATED_DEFAULT = re.compile(r"(?:^|[(;]\s*)default (\S+?)(?:\)|$)")


def test_the_objectives_section_states_its_dataclass_defaults_and_fills_in_none():
    """The one section whose defaults stay in its dataclass (ramen.objectives.base.ObjectiveSettings):
    a variant's `objectives` overrides merge into the section key by key, so schema defaults there
    would mask the section's values. Its schema has the same keys, no `default:`, and each
    description that states a default states the dataclass's."""
    from ramen.objectives.base import ObjectiveSettings

    def walk(spec: dict, cls, path: str) -> int:
        fields = {field.name: field for field in dataclasses.fields(cls)}
        assert set(spec["properties"]) == set(fields), path
        stated = 0
        for key, child in spec["properties"].items():
            assert "default" not in child, f"{path}.{key}"
            default = class_default(fields[key])
            if child.get("type") == "object":
                stated += walk(child, type(default), f"{path}.{key}")
                continue
            description = child.get("description", "")
            match = STATED_DEFAULT.search(description)
            if match:
                assert yaml.safe_load(match.group(1)) == default, f"{path}.{key}: {description!r} vs {default!r}"
                stated += 1
            elif "null (default)" in description:
                assert default is None, f"{path}.{key}"
                stated += 1
        return stated

    assert walk(SCHEMA["definitions"]["objectives"], ObjectiveSettings, "objectives") >= 12
