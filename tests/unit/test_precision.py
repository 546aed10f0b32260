"""One decision of what a ``precision`` setting means: the trainer's autocast dtype and the memory
plan's precision both come from ramen.training.settings.resolved_precision."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ramen.training.memory import compute_bytes, plan_precision
from ramen.training.precision import autocast_dtype
from ramen.training.settings import PRECISIONS, TrainSettings

NAMES = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
# (device, a CUDA GPU at hand, whether it supports bf16)
MACHINES = [("cpu", False, False), ("cuda", True, True), ("cuda:1", True, True), ("cuda", True, False)]


def trainer_precision(monkeypatch, precision: str, device: str, cuda: bool, bf16: bool) -> str:
    # The GPU faked, so that every machine is tested on this one.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: bf16)
    return NAMES[autocast_dtype(precision, device)]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize(("device", "cuda", "bf16"), MACHINES)
def test_trainer_and_plan_decide_every_precision_alike(monkeypatch, precision, device, cuda, bf16):
    trained = trainer_precision(monkeypatch, precision, device, cuda, bf16)
    planned = plan_precision(precision, device)
    if precision == "auto" and cuda and not bf16:
        # The plan's documented assumption: a GPU that supports bf16.
        assert (trained, planned) == ("fp32", "bf16")
    else:
        assert trained == planned
    expected = {"auto": "bf16" if cuda and bf16 else "fp32"}.get(precision, precision)
    assert trained == expected


@pytest.mark.parametrize(("device", "cuda", "bf16"), MACHINES)
def test_low_precision_frozen_weights_run_bf16_for_trainer_and_plan(monkeypatch, device, cuda, bf16):
    """TrainSettings.compute_precision, which both are given, forces bf16 under bf16/nf4 frozen weights."""
    base = TrainSettings(steps=4, batch_size=4, train=["lora", "foreign_embeddings"])
    for frozen in ("bf16", "nf4"):
        settings = dataclasses.replace(base, frozen_dtype=frozen)
        assert trainer_precision(monkeypatch, settings.compute_precision, device, cuda, bf16) == "bf16"
        assert plan_precision(settings.compute_precision, device) == "bf16"
        assert compute_bytes(settings.compute_precision, device) == 2
