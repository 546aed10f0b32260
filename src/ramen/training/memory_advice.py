"""Refusing a training job whose memory plan (ramen.training.memory) is above resources.gpu_memory_gb,
naming the fewest changes of its training settings that make the plan fit.

The changes searched are those of the settings the refusal lists: sharding over more GPUs (or more
GPUs alone), activation checkpointing, bf16 instead of fp32, another gradient accumulation and
LoRA's adapters trained instead of the blocks, alone or together. Together matters: a batch that
one micro-step takes whole does not split over more GPUs until the accumulation is lowered, so
no single change fits where sharding over 8 GPUs with 2 micro-steps does. No torch here.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence

from ramen.errors import ConfigError
from ramen.training.memory import GB, GIB, LIMIT_KEY, Plan
from ramen.training.settings import TrainSettings, training_key

MORE_GPUS = (2, 4, 8)

Changes = Mapping[str, object]


def fitting_changes(plan_for: Callable[[TrainSettings], Plan], settings: TrainSettings,
                    key: Callable[[str], str] = training_key) -> list[tuple[str, Plan]]:
    """The fewest changes of the training settings that make the plan fit, each as its text (``key``
    names a setting by its full config path) and its plan: every single change that fits; when none
    does, every pair of changes that fits, then every three, and so on. Of the values of the same
    settings, one: the fewest GPUs, then the accumulation nearest the one set (above it first).
    ``plan_for(settings)``: the job's plan at other settings."""
    options = _options(settings)
    fitting: list[tuple[str, Plan]] = []
    for size in range(1, len(options) + 1):
        for names in itertools.combinations(options, size):
            found = _first_fitting(plan_for, settings, {name: options[name] for name in names})
            if found:
                fitting.append((" and ".join(_text(part, key) for part in found[0]), found[1]))
        if fitting:  # changing more settings than needed is not advice
            return fitting
    return []


def _first_fitting(plan_for: Callable[[TrainSettings], Plan], settings: TrainSettings,
                   options: Mapping[str, Sequence[Changes]]) -> tuple[Sequence[Changes], Plan] | None:
    """The first values, in the order preferred, of every setting in ``options`` that make the plan fit."""
    others = [values for name, values in options.items() if name != "grad_accumulation"]
    for choice in itertools.product(*others):
        changes = {name: value for part in choice for name, value in part.items()}
        tails = [part for part in options.get("grad_accumulation", [{}]) if _splits(settings, {**changes, **part})]
        if "grad_accumulation" in options and tails:
            # More micro-steps hold fewer windows at a time, never more memory: when the most
            # does not fit, no other does (and the search stays quick on every dry run).
            most = max(tails, key=lambda part: part["grad_accumulation"])
            if not _fits(plan_for, settings, {**changes, **most}):
                continue
        for part in tails:
            plan = _fits(plan_for, settings, {**changes, **part})
            if plan:
                return [*choice, part] if part else list(choice), plan
    return None


def _fits(plan_for: Callable[[TrainSettings], Plan], settings: TrainSettings, changes: Changes) -> Plan | None:
    """The plan at ``settings`` changed, when it fits; None where it does not, or the changes make
    settings that are refused (training.frozen_dtype bf16/nf4 with sharding, nf4 on several GPUs)."""
    try:
        plan = plan_for(dataclasses.replace(settings, **changes))
    except ConfigError:
        return None
    return plan if plan.fits else None


def _options(settings: TrainSettings) -> dict[str, list[Changes]]:
    """Per kind of change, its values in the order they are preferred (the cheapest first)."""
    batch = settings.batch_size
    parallel: list[Changes] = []
    more = [gpus for gpus in MORE_GPUS if gpus > settings.gpus]
    if settings.sharding != "fsdp":
        # FSDP over one process trains unsharded (ramen.training.sharding): never advice on its own.
        if settings.processes > 1:
            parallel.append({"sharding": "fsdp"})
        parallel += [{"sharding": "fsdp", "gpus": gpus} for gpus in more]
    # More GPUs without sharding only split the batch (each holds the whole model): the last resort.
    parallel += [{"gpus": gpus} for gpus in more]
    current = settings.grad_accumulation
    divisors = [value for value in range(1, batch + 1) if batch % value == 0 and value != current]
    accumulation = [{"grad_accumulation": value} for value in
                    sorted(divisors, key=lambda value: (value < current, abs(value - current)))]
    options = {"parallel": parallel,
               "activation_checkpointing": [] if settings.activation_checkpointing else [
                   {"activation_checkpointing": True}],
               "precision": [{"precision": "bf16"}] if settings.precision == "fp32" else [],
               "lora": [lora] if (lora := _with_lora(settings)) else [],
               "grad_accumulation": accumulation}
    return {name: values for name, values in options.items() if values}


def _splits(settings: TrainSettings, changes: Changes) -> bool:
    """Whether the batch splits into the accumulation's micro-steps and those over the processes."""
    batch = settings.batch_size
    accumulation = changes.get("grad_accumulation", settings.grad_accumulation)
    processes = changes.get("gpus", settings.gpus) * settings.nodes
    return batch % accumulation == 0 and (batch // accumulation) % processes == 0


def _text(changes: Changes, key: Callable[[str], str]) -> str:
    texts = []
    for name, value in changes.items():
        if name in ("train", "stages"):
            texts.append(f"{key(name)} naming lora instead of encoder")
        else:
            texts.append(f"{key(name)}: {str(value).lower() if isinstance(value, bool) else value}")
    return " with ".join(texts)


def _with_lora(settings: TrainSettings) -> dict | None:
    """The groups with LoRA's adapters trained instead of the shared stack (None: it is not trained)."""
    def swap(names: Sequence[str]) -> tuple[str, ...]:
        return tuple(dict.fromkeys("lora" if name == "encoder" else name for name in names))

    if settings.stages:
        if not any("encoder" in (stage.get("train") or ()) for stage in settings.stages):
            return None
        return {"stages": [{**stage, "train": list(swap(stage["train"]))} for stage in settings.stages]}
    return {"train": swap(settings.train)} if "encoder" in settings.train else None


def check_plan(job: str, plan: Plan, plan_for: Callable[[TrainSettings], Plan], settings: TrainSettings,
               key: Callable[[str], str] = training_key) -> None:
    """ConfigError naming resources.gpu_memory_gb and the settings that would make ``job``'s plan fit."""
    if plan.fits:
        return
    changes = fitting_changes(plan_for, settings, key)
    if changes:
        fix = "set " + "; or ".join(f"{text} (plans {changed.total / GIB:.1f} GiB)" for text, changed in changes)
    else:
        fix = (f"no change of {key('sharding')}, {key('gpus')}, {key('activation_checkpointing')}, "
               f"{key('precision')}, {key('grad_accumulation')} or LoRA, alone or together, makes it fit: "
               "plan for a GPU with more memory")
    raise ConfigError(LIMIT_KEY, f"{job} plans {plan.summary()} per GPU, more than the {plan.limit / GIB:.1f} GiB "
                      f"({plan.limit / GB:g} GB) the GPU holds", fix)
