"""Training objectives of the bilingual model, chosen per variant (``variants.<name>.objective``).

    mlm     masked-LM on each language's monolingual text (RAMEN)
    tlm     + masked-LM on concatenated translation pairs (XLM's TLM), batches alternating
    tlm-da  TLM with decomposed intra-/cross-lingual attention (Guo et al., "Learning Multilingual
            Representation for Natural Language Understanding with Enhanced Cross-Lingual Supervision")
    rtd     replaced-token detection with a smaller generator (ELECTRA, XLM-E's MRTD)
    trtd    + replaced-token detection on translation pairs (XLM-E's TRTD)

Every objective can re-weight its masked-LM losses with language-adaptive focal
loss (``objectives.focal``) and train the encoder with XLM-E's gated relative
position bias (``objectives.relative_position``). Settings: the ``objectives`` config section.
"""

from __future__ import annotations

import importlib

from ramen.errors import ConfigError
from ramen.objective_config import OBJECTIVES as REGISTRY
from ramen.objective_config import ObjectiveEntry, is_plain, uses_pairs
from ramen.objectives.base import (
    BatchShape,
    Objective,
    ObjectiveSettings,
    PairBatch,
    PairedStreams,
    trained_model,
    with_gated_relative_position,
)

def _implementation(entry: ObjectiveEntry) -> type[Objective]:
    module, name = entry.implementation.split(":")
    return getattr(importlib.import_module(module), name)


OBJECTIVES: dict[str, type[Objective]] = {name: _implementation(entry) for name, entry in REGISTRY.items()}


def get_objective(name: str) -> type[Objective]:
    if name not in OBJECTIVES:
        raise ConfigError("variants.*.objective", f"unknown objective '{name}'", f"choose from {sorted(OBJECTIVES)}")
    return OBJECTIVES[name]


def is_plain_mlm(name: str, settings: ObjectiveSettings) -> bool:
    """RAMEN's own objective, trained by the model itself (its checkpoints stay as they were)."""
    return is_plain(name, focal=settings.focal.enabled, sampling_alpha=settings.sampling_alpha,
                    gated=settings.relative_position.gated)


__all__ = ["OBJECTIVES", "BatchShape", "Objective", "ObjectiveSettings", "PairBatch", "PairedStreams",
           "get_objective", "is_plain_mlm", "trained_model", "uses_pairs",
           "with_gated_relative_position"]
