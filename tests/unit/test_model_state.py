"""Converting or exporting a model loads every weight or fails (ramen.modeling.state)."""

import pytest
import torch
from torch import nn

from ramen.modeling.state import load_every_weight


class Small(nn.Module):
    def __init__(self, extra: bool = False):
        super().__init__()
        self.body = nn.Linear(3, 3)
        if extra:
            self.gate = nn.Parameter(torch.zeros(3))


def test_a_complete_load_copies_every_weight():
    source, target = Small(), Small()
    load_every_weight(target, source.state_dict(), "copy")
    assert torch.equal(target.body.weight, source.body.weight)


def test_a_parameter_left_unfilled_is_refused_unless_the_caller_fills_it():
    with pytest.raises(RuntimeError, match=r"conversion would lose weights: missing \['gate'\], unexpected \[\]"):
        load_every_weight(Small(extra=True), Small().state_dict(), "conversion")
    load_every_weight(Small(extra=True), Small().state_dict(), "conversion", filled_elsewhere=["gate"])


def test_a_weight_the_target_has_no_place_for_is_refused():
    with pytest.raises(RuntimeError, match=r"export would lose weights: missing \[\], unexpected \['gate'\]"):
        load_every_weight(Small(), Small(extra=True).state_dict(), "export")
