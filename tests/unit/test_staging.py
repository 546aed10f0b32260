"""Staged training settings: parsing, checks before training, the stage of each update."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ramen.errors import ConfigError
from ramen.training.staging import (
    Stage,
    apply_stage,
    check_stages,
    parse_stages,
    resolve,
    stage_at,
    union_of_stages,
)


def groups() -> dict[str, list[nn.Parameter]]:
    blocks = {f"block:{index}": [nn.Parameter(torch.zeros(2))] for index in range(4)}
    encoder = [p for params in blocks.values() for p in params] + [nn.Parameter(torch.zeros(2))]
    return {"encoder": encoder, "head": [], "source_embeddings": [nn.Parameter(torch.zeros(3, 2))],
            "foreign_embeddings": [nn.Parameter(torch.zeros(3, 2))], **blocks}


RECIPE = [{"until": 2, "train": ["foreign_embeddings"]},
          {"until": 5, "train": ["foreign_embeddings", "bottom:1", "top:2"]},
          {"train": ["encoder", "foreign_embeddings"]}]


def test_each_update_belongs_to_one_stage():
    stages = parse_stages(RECIPE)
    assert [stage_at(stages, step).train for step in (1, 2, 3, 5, 6, 100)] == [
        ("foreign_embeddings",), ("foreign_embeddings",), ("foreign_embeddings", "bottom:1", "top:2"),
        ("foreign_embeddings", "bottom:1", "top:2"), ("encoder", "foreign_embeddings"),
        ("encoder", "foreign_embeddings")]
    assert union_of_stages(stages) == ("foreign_embeddings", "bottom:1", "top:2", "encoder")


def test_bottom_and_top_select_blocks_by_count():
    named = groups()
    chosen = resolve(["bottom:1", "top:2"], named)
    assert [id(p) for p in chosen] == [id(named[f"block:{i}"][0]) for i in (0, 2, 3)]
    assert len(resolve(["encoder", "top:4"], named)) == 5  # each parameter once


@pytest.mark.parametrize("values, message", [
    ([{"until": 3, "train": ["head"]}, {"until": 3, "train": ["head"]}], r"stages\[1\].until.*after update 3"),
    ([{"train": ["head"]}, {"until": 9, "train": ["head"]}], r"stages\[0\].until.*only the last"),
    ([{"until": 3, "train": "head"}], r"stages\[0\].train"),
    ([{"until": 3, "train": ["head"], "lr": 1}], r"stages\[0\]"),
])
def test_malformed_stages_name_the_setting(values, message):
    with pytest.raises(ConfigError, match=message):
        parse_stages(values)


def test_stages_are_checked_against_the_model_and_the_run_length():
    with pytest.raises(ConfigError, match=r"stages\[1\].train.*unknown parameter group 'blocks'"):
        check_stages(parse_stages([{"until": 2, "train": ["head"]}, {"train": ["blocks"]}]), 10, groups())
    with pytest.raises(ConfigError, match="the model has 4 blocks"):
        check_stages(parse_stages([{"train": ["top:5"]}]), 10, groups())
    with pytest.raises(ConfigError, match="end at update 4 but training runs 10"):
        check_stages(parse_stages([{"until": 4, "train": ["head"]}]), 10, groups())
    check_stages(parse_stages(RECIPE), 10, groups())


def test_a_stage_lets_only_its_groups_receive_gradients():
    named = groups()
    stages = parse_stages(RECIPE)
    trainable = resolve(union_of_stages(stages), named)
    apply_stage(stages, 1, named, trainable)
    assert [p.requires_grad for p in trainable] == [True] + [False] * (len(trainable) - 1)
    apply_stage(stages, 6, named, trainable)
    assert all(p.requires_grad for p in trainable)
    assert Stage(None, ("head",)) == parse_stages([{"train": ["head"]}])[0]
