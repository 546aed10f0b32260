"""Masked-LM on monolingual text, one batch per language: RAMEN's objective (§3.3 of "From English
to Foreign Languages: Transferring Pre-trained Language Models")."""

from __future__ import annotations

from ramen.objectives.base import Objective


class MaskedLM(Objective):
    name = "mlm"
