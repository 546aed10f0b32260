"""The registry type: lazy loading, unknown names, and each registry's contract checked at load."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from ramen.errors import ConfigError
from ramen.families import FAMILIES, ExtensionStages, FamilyEntry, FamilyStages
from ramen.initializers import INITIALIZERS, InitializerEntry
from ramen.objectives import OBJECTIVES, Objective, ObjectiveEntry
from ramen.pipeline.launch import STAGES
from ramen.registry import ContractError, Registry, protocol_members
from ramen.tasks import TASKS, TaskSpec

REPO = Path(__file__).resolve().parents[2]
REGISTRIES = {"initializers": INITIALIZERS, "objectives": OBJECTIVES, "tasks": TASKS, "families": FAMILIES,
              "stages": STAGES}


@pytest.mark.parametrize("registry, name", [(key, name) for key, registry in REGISTRIES.items()
                                             for name in registry])
def test_every_registered_entry_loads_and_keeps_its_contract(registry, name):
    entry = REGISTRIES[registry][name]
    loaded = entry.load()
    assert entry.contract.problems(loaded, entry) == []
    assert entry.registered_as.endswith(repr(name))


def test_the_protocols_are_runtime_checkable_where_the_code_is_an_object():
    for name in OBJECTIVES:
        assert isinstance(OBJECTIVES[name].load(), Objective)
    for name, entry in FAMILIES.items():
        module = entry.load()
        assert isinstance(module, FamilyStages)
        assert isinstance(module, ExtensionStages) == ("extend" in entry.vocabularies)


def test_reading_the_registries_imports_no_torch():
    """The Snakefile reads them while it builds the job graph: loading stays lazy."""
    probe = ("import sys; import ramen.initializers, ramen.objectives, ramen.tasks, ramen.families, ramen.registry; "
             "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            env={"PYTHONPATH": str(REPO / "src")})
    assert result.stdout.strip() == "[]"


def test_an_unknown_name_names_the_setting_and_the_registered_ones():
    with pytest.raises(ConfigError, match=r"'variants.x.init': unknown initialiser 'parralel' \(valid names: "
                                          r"random, parallel, monolingual"):
        INITIALIZERS.entry("parralel", "variants.x.init")
    with pytest.raises(ConfigError, match="'variants.<variant>.objective': unknown objective 'xlm'"):
        OBJECTIVES.load("xlm")


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A package ``toy_registry`` of the modules a test writes: ``toy(name, source)``."""
    package = tmp_path / "toy_registry"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name: str, source: str) -> str:
        (package / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        return f"toy_registry.{name}"
    yield write
    for module in [m for m in sys.modules if m.startswith("toy_registry")]:
        del sys.modules[module]


GOOD_INIT = """
def init(source_embeddings, source_bias, foreign_vocab, source_vocab, *, alpha=None, generator,
         special_tokens=None, pieces=None):
    return "rows"
"""


def test_an_initialiser_keeping_the_protocol_loads_and_runs(toy):
    module = toy("good", GOOD_INIT)
    registry = Registry("initialiser", "variants.<variant>.init", {"good": InitializerEntry(f"{module}:init")})
    assert registry["good"](1, 2, [], [], alpha=None, generator=None, special_tokens=[]) == "rows"
    # It takes pieces, so an entry may declare them.
    Registry("initialiser", "init", {"p": InitializerEntry(f"{module}:init", pieces=True)}).load("p")


@pytest.mark.parametrize("source, entry, missing", [
    # The old docstring's signature without generator: the pipeline passes it.
    ("def init(source_embeddings, source_bias, foreign_vocab, source_vocab, *, alpha=None, special_tokens=None):"
     "\n    pass\n", {}, "unexpected keyword argument 'generator'"),
    # The entry declares pieces; the function does not take them.
    (GOOD_INIT.replace(", pieces=None", ""), {"pieces": True}, "unexpected keyword argument 'pieces'"),
    # A rule input the entry gives under another name.
    (GOOD_INIT, {"inputs": {"parallel_alpha": "alpha", "char_module": "module"}},
     "unexpected keyword argument 'module'"),
    # It needs a keyword nobody passes.
    (GOOD_INIT.replace("pieces=None", "table"), {}, "missing a required argument: 'table'"),
    ("init = 3\n", {}, "int is not callable"),
])
def test_an_initialiser_breaking_the_protocol_fails_at_load_naming_the_entry(toy, source, entry, missing):
    module = toy("bad", source)
    registry = Registry("initialiser", "variants.<variant>.init", {"broken": InitializerEntry(f"{module}:init",
                                                                                              **entry)})
    with pytest.raises(ContractError, match=r"initialiser 'broken' \(toy_registry.bad:init\) does not keep the "
                                            "Initializer contract") as error:
        registry["broken"](1, 2, [], [], alpha=None, generator=None, special_tokens=[])
    assert missing in str(error.value)


def test_an_entry_naming_a_missing_module_or_member_fails_naming_it(toy):
    registry = Registry("initialiser", "init", {"gone": InitializerEntry("toy_registry.nowhere:init"),
                                                "typo": InitializerEntry(f"{toy('here', GOOD_INIT)}:int")})
    with pytest.raises(ContractError, match=r"initialiser 'gone' .*no module 'toy_registry.nowhere'"):
        registry.load("gone")
    with pytest.raises(ContractError, match=r"initialiser 'typo' .*defines no 'int'"):
        registry.load("typo")


def test_an_objective_class_missing_a_member_or_left_abstract_fails_at_load(toy):
    module = toy("objectives", """
        import abc

        class Partial:
            name = "partial"

            @classmethod
            def build(cls, model, streams, specials, shape, settings, pairs=None):
                return cls()

        class Abstract(abc.ABC):
            name = "abstract"

        for member in ("for_export", "stream_names", "batch_key", "begin_step", "parameter_groups", "metrics",
                       "compile_encoder", "export_language"):
            setattr(Abstract, member, Partial.build)

        @abc.abstractmethod
        def step_batches(self, step, micro): ...

        def forward(self, batches, extra): ...

        Abstract.step_batches, Abstract.forward = step_batches, forward
        Abstract.build = Partial.build
        Abstract.__abstractmethods__ = frozenset({"step_batches"})
    """)
    registry = Registry("objective", "variants.<variant>.objective", {
        "partial": ObjectiveEntry(f"{module}:Partial", (), False),
        "abstract": ObjectiveEntry(f"{module}:Abstract", (), False)})
    with pytest.raises(ContractError, match=r"objective 'partial' .*Objective contract: defines no for_export, "
                                            "stream_names"):
        registry.load("partial")
    with pytest.raises(ContractError, match=r"objective 'abstract' .*forward: .*missing a required argument: "
                                            r"'extra'.*leaves abstract: step_batches"):
        registry.load("abstract")


def test_a_family_module_without_a_stage_fails_naming_the_stage(toy):
    stages = "\n".join(f"from ramen.families.masked_lm import {name}" for name in protocol_members(FamilyStages))
    module = toy("family", stages)
    replace = FamilyEntry("a toy LM", ("ForToyLM",), None, module)
    extend = FamilyEntry("a toy LM", ("ForToyLM",), None, module, vocabularies=("replace", "extend"))
    registry = Registry("family", "source.model", {"replace": replace, "extend": extend})
    assert registry["replace"].load("learn_vocabulary").__name__ == "train_foreign_tokenizer"
    with pytest.raises(ContractError, match=r"family 'extend' .*defines no extend_vocabulary, initialise_extension, "
                                            "extended_model"):
        registry["extend"].load("learn_vocabulary")


def test_a_task_entry_must_name_a_module(toy):
    module = toy("task", "def score():\n    pass\n")
    registry = Registry("task", "tasks", {"toy": TaskSpec(module, "accuracy", "a toy", "rules/toy.smk"),
                                          "function": TaskSpec(f"{module}:score", "accuracy", "", "rules/toy.smk")})
    assert registry.load("toy").score
    with pytest.raises(ContractError, match=r"task 'function' .*is a function, not a module"):
        registry.load("function")


def test_each_initialiser_takes_the_keys_of_its_settings_section():
    """The pipeline passes a ``peers.<settings>`` section's keys as keywords (the schema fixes them)."""
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text(encoding="utf-8"))
    peers = schema["properties"]["peers"]["properties"]
    for name, entry in INITIALIZERS.items():
        if entry.settings is None:
            continue
        keys = list(peers[entry.settings].get("properties", {}))
        function = entry.load()
        try:
            inspect.signature(function).bind_partial(**dict.fromkeys(keys))
        except TypeError as error:
            pytest.fail(f"initialiser {name!r} does not take the keys of peers.{entry.settings}: {error}")
