"""Registry of downstream evaluation tasks, one module and one entry each.

Task modules import torch and transformers, so the registry names them by
module path and imports them only when a task is asked for; listing or
validating task names in the workflow stays cheap.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from ramen.errors import ConfigError


@dataclass(frozen=True)
class TaskSpec:
    """One downstream task: where its code lives and how it is scored."""

    name: str
    module: str
    metric: str
    description: str

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


TASKS: dict[str, TaskSpec] = {
    "xnli": TaskSpec(
        name="xnli",
        module="ramen.tasks.xnli",
        metric="accuracy",
        description="zero-shot cross-lingual natural language inference (paper §3.4, §4.1)",
    ),
    "ud": TaskSpec(
        name="ud",
        module="ramen.tasks.ud",
        metric="las",
        description="UD dependency parsing with a biaffine parser, zero-shot and supervised (§4.2, §5.3)",
    ),
    "retrieval": TaskSpec(
        name="retrieval",
        module="ramen.tasks.retrieval",
        metric="accuracy",
        description="sentence retrieval between the source and a target language (a cheap zero-shot check)",
    ),
}


def get_task(name: str, setting: str = "tasks") -> ModuleType:
    """Import and return the module of task ``name``; unknown names are a config error."""
    try:
        spec = TASKS[name]
    except KeyError:
        raise ConfigError(
            setting, f"unknown task {name!r}", fix=f"choose from {', '.join(sorted(TASKS))}"
        ) from None
    return spec.load()
