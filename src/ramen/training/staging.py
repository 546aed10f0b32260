"""Staged training: which parameter groups train in which range of updates.

The recipes of the vocabulary-transfer literature (the new embeddings alone first, then the
embeddings with the top and bottom k blocks, then everything) are settings, not code::

    training:
      stages:
        - {until: 200, train: [foreign_embeddings]}
        - {until: 600, train: [foreign_embeddings, source_embeddings, head, bottom:2, top:2]}
        - {train: [encoder, head, source_embeddings, foreign_embeddings]}

Stage i trains updates (until of stage i-1, until of stage i]; the last may leave ``until`` out
(to the end of training). Group names are those of the model's ``parameter_groups()`` plus
``bottom:<k>`` / ``top:<k>``, the first / last k of its ``block:<i>`` groups. The stage of an
update is a pure function of its number, so a resumed run trains exactly what an uninterrupted
one does. No torch is imported here: the job graph parses the stages too
(:mod:`ramen.training.settings`); the parameters below are torch's, passed in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ramen.errors import ConfigError

SETTING = "training.stages"
_COUNTED = re.compile(r"^(bottom|top):(\d+)$")


@dataclass(frozen=True)
class Stage:
    until: int | None  # the last update of the stage; None: to the end of training
    train: tuple[str, ...]


def parse_stages(values: Sequence[Mapping] | None, setting: str = SETTING) -> list[Stage]:
    """The configured stages, checked: increasing ``until``, only the last open-ended, a non-empty ``train``."""
    stages = []
    previous = 0
    for index, value in enumerate(values or []):
        where = f"{setting}[{index}]"
        if not isinstance(value, Mapping) or set(value) - {"until", "train"}:
            raise ConfigError(where, f"{value!r}", "give a mapping with `train` (group names) and `until` (an update)")
        train = value.get("train")
        if not train or isinstance(train, str) or not all(isinstance(name, str) for name in train):
            raise ConfigError(f"{where}.train", f"{train!r}", "list the parameter groups this stage trains")
        until = value.get("until")
        if until is None and index != len(values) - 1:
            raise ConfigError(f"{where}.until", "only the last stage may leave `until` out",
                              "give the update at which this stage ends")
        if until is not None and (not isinstance(until, int) or until <= previous):
            raise ConfigError(f"{where}.until", f"{until!r} does not come after update {previous}",
                              "give increasing update numbers")
        previous = until if until is not None else previous
        stages.append(Stage(until, tuple(train)))
    return stages


def check_stage_ends(stages: Sequence[Stage], steps: int, setting: str = SETTING) -> None:
    """Every update has a stage (checked while the job graph is built, and again by the job)."""
    if stages and stages[-1].until is not None and stages[-1].until < steps:
        raise ConfigError(f"{setting}[{len(stages) - 1}].until", f"the stages end at update {stages[-1].until} "
                          f"but training runs {steps}", "leave `until` out of the last stage")


def check_stages(stages: Sequence[Stage], steps: int, groups: Mapping[str, Sequence], setting: str = SETTING) -> None:
    """Every update has a stage and every group name is the model's (before any training starts)."""
    check_stage_ends(stages, steps, setting)
    for index, stage in enumerate(stages):
        resolve(stage.train, groups, f"{setting}[{index}].train")


def stage_at(stages: Sequence[Stage], step: int) -> Stage:
    """The stage that trains update ``step`` (numbered from 1)."""
    for stage in stages:
        if stage.until is None or step <= stage.until:
            return stage
    return stages[-1]


def blocks_of(groups: Mapping[str, Sequence]) -> list[str]:
    names = [name for name in groups if name.startswith("block:")]
    return sorted(names, key=lambda name: int(name.split(":")[1]))


def resolve(names: Sequence[str], groups: Mapping[str, Sequence],
            setting: str = SETTING) -> list:
    """The parameters of the named groups, each once, in a fixed order."""
    blocks = blocks_of(groups)
    chosen, seen = [], set()
    for name in names:
        counted = _COUNTED.match(name)
        if counted:
            count = int(counted.group(2))
            if not blocks:
                raise ConfigError(setting, f"'{name}': this model has no numbered blocks",
                                  f"choose from {sorted(groups)}")
            if not 0 < count <= len(blocks):
                raise ConfigError(setting, f"'{name}': the model has {len(blocks)} blocks",
                                  f"give a count from 1 to {len(blocks)}")
            selected = blocks[:count] if counted.group(1) == "bottom" else blocks[-count:]
        elif name in groups:
            selected = [name]
        else:
            raise ConfigError(setting, f"unknown parameter group '{name}'",
                              f"choose from {sorted(n for n in groups if not n.startswith('block:'))}, "
                              "bottom:<k>, top:<k> or block:<i>")
        for group in selected:
            for param in groups[group]:
                if id(param) not in seen:
                    seen.add(id(param))
                    chosen.append(param)
    return chosen


def union_of_stages(stages: Sequence[Stage]) -> tuple[str, ...]:
    """Every group name any stage trains, in first-use order: what the optimiser holds."""
    names: list[str] = []
    for stage in stages:
        names += [name for name in stage.train if name not in names]
    return tuple(names)


def apply_stage(stages: Sequence[Stage], step: int, groups: Mapping[str, Sequence],
                trainable: Sequence, *, distributed: bool = False) -> list:
    """Let exactly the parameters of ``step``'s stage be updated, out of ``trainable`` (the
    optimiser's); return those whose gradients must be dropped after backward, before the update.

    A parameter without a gradient is skipped by the optimiser: it does not move and its moments
    stay as they were. In one process the others stop requiring gradients, so backward skips them
    (none to drop). Under DDP every parameter it was built with must get its gradient in each
    backward, or the reducer waits for it: all keep requiring gradients and the others' are dropped.
    """
    active = {id(param) for param in resolve(stage_at(stages, step).train, groups)}
    if distributed:
        return [param for param in trainable if id(param) not in active]
    for param in trainable:
        param.requires_grad_(id(param) in active)
    return []
