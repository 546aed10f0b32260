"""Masked-LM on monolingual text, one batch per language: RAMEN's objective (§3.3 of "From English
to Foreign Languages: Transferring Pre-trained Language Models")."""

from __future__ import annotations

from collections.abc import Mapping

from ramen.objectives.base import BatchShape, Objective, ObjectiveSettings


class MaskedLM(Objective):
    name = "mlm"


def masked_lm(model, streams: Mapping, specials: Mapping, training, settings: ObjectiveSettings | None = None
              ) -> MaskedLM:
    """RAMEN's masked-LM on ``streams`` with the batch shape of ``training`` (TrainSettings)."""
    return MaskedLM.build(model, streams, specials, BatchShape.of(training), settings or ObjectiveSettings())
