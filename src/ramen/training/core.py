"""The names ``ramen.tasks`` imports from the training core, which lives by concern in
:mod:`.optimisation`, :mod:`.precision`, :mod:`.checkpoints`, :mod:`.loops` (and
:mod:`.distributed`, :mod:`.metrics`). New code imports from those modules; this one goes once
the tasks do (tests/unit/test_training_core.py fails when another module imports it, and when
none does)."""

from ramen.training.checkpoints import fingerprint, list_checkpoints, read_module, remove_run
from ramen.training.loops import EpochLoop, skip
from ramen.training.optimisation import Updates, check_accumulation, decay_groups, linear_warmup_decay
from ramen.training.precision import check_precision

__all__ = ["EpochLoop", "Updates", "check_accumulation", "check_precision", "decay_groups", "fingerprint",
           "linear_warmup_decay", "list_checkpoints", "read_module", "remove_run", "skip"]
