"""Training objectives of the bilingual model, chosen per variant (``variants.<name>.objective``).

    mlm     masked-LM on each language's monolingual text (RAMEN)
    tlm     + masked-LM on concatenated translation pairs (XLM's TLM), batches alternating
    tlm-da  TLM with decomposed intra-/cross-lingual attention (Guo et al., "Learning Multilingual
            Representation for Natural Language Understanding with Enhanced Cross-Lingual Supervision")
    rtd     replaced-token detection with a smaller generator (ELECTRA, XLM-E's MRTD)
    trtd    + replaced-token detection on translation pairs (XLM-E's TRTD)
    clm     next-token prediction on each language's packed windows (decoder sources)

Every objective can re-weight its masked-LM losses with language-adaptive focal
loss (``objectives.focal``) and train the encoder with XLM-E's gated relative
position bias (``objectives.relative_position``). Settings: the ``objectives`` config section.

This module is the registry and is torch-free: the workflow reads it while the job graph is
built, to decide what a variant's training rule depends on (only the settings its objective
reads become the rule's params, so changing one reruns exactly the variants that read it).
An entry's class is imported when a model trains, and checked then against :class:`Objective`.
Adding an objective: its module in this package (a :class:`ramen.objectives.contract.TrainingObjective`:
for a masked-LM source a subclass of :class:`ramen.objectives.base.Objective`) and one entry in
``OBJECTIVES``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ramen.registry import Entry, MembersContract, Registry

DEFAULT_OBJECTIVE = "mlm"  # a variant without ``objective`` trains RAMEN's masked-LM
SHARED_SETTINGS = ("sampling_alpha", "focal", "relative_position")


@runtime_checkable
class Objective(Protocol):
    """What the pipeline and the training core (ramen.training.trainer) ask of an objective's class,
    called as they call it: ramen.objectives.contract.TrainingObjective gives the defaults."""

    name: str

    @classmethod
    def build(cls, model: Any, streams: Mapping, specials: Mapping, shape: Any, settings: Any, pairs: Any = None,
              /) -> Any: ...

    @classmethod
    def for_export(cls, model: Any, settings: Any, /) -> Any: ...

    def stream_names(self, /) -> list[str]: ...

    def batch_key(self, stream: str, /) -> str: ...

    def begin_step(self, step: int, /) -> None: ...

    def step_batches(self, step: int, micro: int, /) -> dict: ...

    def forward(self, batches: Mapping, /) -> dict: ...

    def parameter_groups(self, /) -> dict: ...

    def metrics(self, /) -> dict[str, str]: ...

    def compile_encoder(self, /) -> None: ...

    def export_language(self, lang: str, tokenizer: Any, out_dir: Any, /) -> None: ...


@dataclass(frozen=True)
class ObjectiveEntry(Entry):
    """A registered objective and what the workflow needs to know of it before torch is imported.

    ``implementation`` is ``"module:Class"``, imported on first use; ``settings`` are the keys
    of the ``objectives`` config section it reads; ``uses_pairs``: it trains on translation pairs
    too (the rules encode them); ``family``: the source family whose bilingual model it trains
    (a name in ramen.families.FAMILIES: ``masked-lm`` or ``causal-lm``).
    """

    contract = MembersContract(Objective, kind=type, concrete=True)

    implementation: str
    settings: tuple[str, ...]
    uses_pairs: bool
    family: str = "masked-lm"

    @property
    def target(self) -> str:
        return self.implementation

    def load(self) -> type:
        return super().load()


# The registry of training objectives, in the order of the objective x init table; the schema
# leaves variants.<name>.objective to it (a test checks that it lists no names of its own).
OBJECTIVES: Registry[ObjectiveEntry] = Registry("objective", "variants.<variant>.objective", {
    "mlm": ObjectiveEntry("ramen.objectives.mlm:MaskedLM", SHARED_SETTINGS, False),
    "tlm": ObjectiveEntry("ramen.objectives.tlm:TranslationLM", SHARED_SETTINGS + ("language_embeddings",), True),
    "tlm-da": ObjectiveEntry("ramen.objectives.tlm:DecomposedTranslationLM",
                             SHARED_SETTINGS + ("language_embeddings", "decomposed_share"), True),
    "rtd": ObjectiveEntry("ramen.objectives.rtd:ReplacedTokenDetection", SHARED_SETTINGS + ("rtd",), False),
    "trtd": ObjectiveEntry("ramen.objectives.rtd:TranslationReplacedTokenDetection",
                           SHARED_SETTINGS + ("language_embeddings", "rtd"), True),
    # Next-token loss on each language: the objective of a decoder (causal LM) source.
    "clm": ObjectiveEntry("ramen.objectives.causal:CausalLanguageModeling", ("sampling_alpha",), False,
                          family="causal-lm"),
})


def get_entry(name: str, *, setting: str = "variants.<variant>.objective") -> ObjectiveEntry:
    """The registry entry of ``name``; ConfigError naming ``setting`` otherwise."""
    return OBJECTIVES.entry(name, setting)


def get_objective(name: str) -> type:
    """The class of the objective registered as ``name`` (imported now)."""
    return get_entry(name).load()


def uses_pairs(name: str) -> bool:
    return get_entry(name).uses_pairs


def split_spec(spec: Mapping | None) -> tuple[str, dict]:
    """``{"name": ..., **settings}`` (a training rule's ``objective`` param; None: the default
    objective with default settings) as (name, settings)."""
    settings = dict(spec or {})
    return settings.pop("name", DEFAULT_OBJECTIVE), settings


def merged(section: Mapping | None, overrides: Mapping | None) -> dict:
    """The section with a variant's overrides, nested mappings merged key by key."""
    result = dict(section or {})
    for key, value in (overrides or {}).items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = {**result[key], **value}
        else:
            result[key] = value
    return result


def objective_params(name: str, section: Mapping | None, overrides: Mapping | None = None) -> dict:
    """{"name": ..., the settings it reads}: a variant's training rule's ``objective`` param."""
    settings = merged(section, overrides)
    chosen = {key: settings[key] for key in get_entry(name).settings if key in settings}
    # Off, these options change nothing: variants without them keep their params (and runs)
    # whatever their other values are.
    if not chosen.get("relative_position", {}).get("gated"):
        chosen.pop("relative_position", None)
    if not chosen.get("focal", {}).get("enabled"):
        chosen.pop("focal", None)
    return {"name": name, **chosen}


def gated_relative_position(name: str, section: Mapping | None, overrides: Mapping | None = None) -> bool:
    """Whether a variant trains with the gated relative position bias."""
    return "relative_position" in objective_params(name, section, overrides)
