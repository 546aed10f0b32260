"""Which settings of the ``objectives`` config section each training objective reads.

Torch-free, so the workflow can decide at parse time what a variant's training
rule depends on: only those settings become its params, and changing one reruns
exactly the variants whose objective reads it.
"""

from __future__ import annotations

from collections.abc import Mapping

PAIR_OBJECTIVES = ("tlm", "tlm-da", "trtd")
SHARED_SETTINGS = ("sampling_alpha", "focal", "relative_position")
OBJECTIVE_SETTINGS = {
    "mlm": SHARED_SETTINGS,
    "tlm": SHARED_SETTINGS + ("language_embeddings",),
    "tlm-da": SHARED_SETTINGS + ("language_embeddings", "decomposed_share"),
    "rtd": SHARED_SETTINGS + ("rtd",),
    "trtd": SHARED_SETTINGS + ("language_embeddings", "rtd"),
}


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
    if name not in OBJECTIVE_SETTINGS:
        raise ValueError(f"unknown objective '{name}'; choose from {sorted(OBJECTIVE_SETTINGS)}")
    settings = merged(section, overrides)
    chosen = {key: settings[key] for key in OBJECTIVE_SETTINGS[name] if key in settings}
    if not chosen.get("relative_position", {}).get("gated"):
        # off, the option changes nothing: variants without it keep their params (and runs)
        chosen.pop("relative_position", None)
    plain = (name == "mlm" and not chosen.get("focal", {}).get("enabled") and chosen.get("sampling_alpha") is None
             and "relative_position" not in chosen)
    return {} if plain else {"name": name, **chosen}


def gated_relative_position(name: str, section: Mapping | None, overrides: Mapping | None = None) -> bool:
    """Whether a variant trains with the gated relative position bias."""
    return "relative_position" in objective_params(name, section, overrides)
