"""Which settings of the ``objectives`` config section each training objective reads.

Torch-free, so the workflow can decide at parse time what a variant's training
rule depends on: only those settings become its params, and changing one reruns
exactly the variants whose objective reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SHARED_SETTINGS = ("sampling_alpha", "focal", "relative_position")


@dataclass(frozen=True)
class ObjectiveEntry:
    """What the workflow needs to know of an objective before torch is imported."""

    implementation: str  # "module:Class", imported when a model trains
    settings: tuple[str, ...]  # keys of the objectives section it reads
    uses_pairs: bool  # trains on translation pairs too (the rules encode them)


# The registry of training objectives, in the order of the objective x init table. A new
# objective is its module in ramen/objectives/ and one entry here; a test checks that the
# schema's enum of variants.<name>.objective lists exactly these names.
OBJECTIVES: dict[str, ObjectiveEntry] = {
    "mlm": ObjectiveEntry("ramen.objectives.mlm:MaskedLM", SHARED_SETTINGS, False),
    "tlm": ObjectiveEntry("ramen.objectives.tlm:TranslationLM", SHARED_SETTINGS + ("language_embeddings",), True),
    "tlm-da": ObjectiveEntry("ramen.objectives.tlm:DecomposedTranslationLM",
                             SHARED_SETTINGS + ("language_embeddings", "decomposed_share"), True),
    "rtd": ObjectiveEntry("ramen.objectives.rtd:ReplacedTokenDetection", SHARED_SETTINGS + ("rtd",), False),
    "trtd": ObjectiveEntry("ramen.objectives.rtd:TranslationReplacedTokenDetection",
                           SHARED_SETTINGS + ("language_embeddings", "rtd"), True),
}


def objective_entry(name: str) -> ObjectiveEntry:
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective '{name}'; choose from {sorted(OBJECTIVES)}")
    return OBJECTIVES[name]


def uses_pairs(name: str) -> bool:
    return objective_entry(name).uses_pairs


def is_plain(name: str, *, focal: bool, sampling_alpha, gated: bool) -> bool:
    """RAMEN's own masked-LM, which the model trains by itself (its run id and checkpoints stay
    as they were): mlm without focal loss, language sampling or the gated position bias."""
    return name == "mlm" and not focal and sampling_alpha is None and not gated


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
    """{"name": ..., the settings it reads}; empty for RAMEN's plain masked-LM, which the model
    trains by itself (so its rule and checkpoints stay as they are)."""
    settings = merged(section, overrides)
    chosen = {key: settings[key] for key in objective_entry(name).settings if key in settings}
    if not chosen.get("relative_position", {}).get("gated"):
        # off, the option changes nothing: variants without it keep their params (and runs)
        chosen.pop("relative_position", None)
    plain = is_plain(name, focal=bool(chosen.get("focal", {}).get("enabled")),
                     sampling_alpha=chosen.get("sampling_alpha"), gated="relative_position" in chosen)
    return {} if plain else {"name": name, **chosen}


def gated_relative_position(name: str, section: Mapping | None, overrides: Mapping | None = None) -> bool:
    """Whether a variant trains with the gated relative position bias."""
    return "relative_position" in objective_params(name, section, overrides)
