"""Masked-LM on monolingual text, one batch per language: RAMEN's objective (§3.3 of paper 000)."""

from __future__ import annotations

from ramen.objectives.base import Objective


class MaskedLM(Objective):
    name = "mlm"
