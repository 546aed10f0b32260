"""Sharded training (``training.sharding: fsdp``): FSDP2 over the processes of a torchrun job,
activation checkpointing, checkpoints through ``torch.distributed.checkpoint`` (DCP), and the
whole model gathered back for the export.

Every transformer block is an FSDP unit of its own and the rest of the objective (embeddings,
output layers and biases, an objective's own parameters) is the root's: each process keeps
1/N of every parameter, gradient and optimiser moment, and a unit's full weights exist only
while it computes. Tied weights (an output layer that is the input table) live in the root's
unit and stay one parameter. Under bf16 the units gather bf16 copies for the computation while
the sharded fp32 weights are the ones the optimiser updates, and gradients are reduced in fp32.

A sharded run's checkpoints hold each tensor once, in shards (DCP); loading reshards them, so a
run checkpointed by N processes resumes with M, one included (which trains unsharded and reads
and writes the same format). Only tensors are stored: loading unpickles nothing but DCP's index
of them, through an allow-list.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pickle
import shutil
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ramen.modeling.sources import transformer_blocks
from ramen.training.checkpoints import checkpoint_name, prune_checkpoints, read_module
from ramen.training.distributed import Processes
# Objectives whose blocks stay in the root's FSDP unit (the plan, torch-free, keeps the list).
from ramen.training.memory import BLOCKS_RUN_IN_PARTS



def transformer_stacks(objective: nn.Module) -> list[nn.ModuleList]:
    """The stacks of transformer blocks of every Hugging Face model in an objective (the bilingual
    model's; an RTD generator's), each once."""
    from transformers import PreTrainedModel

    stacks: dict[int, nn.ModuleList] = {}
    for module in objective.modules():
        if isinstance(module, PreTrainedModel):
            stack = transformer_blocks(module)
            stacks.setdefault(id(stack), stack)
    return list(stacks.values())


# --- activation checkpointing ------------------------------------------------------------------

@contextlib.contextmanager
def checkpointed_blocks(objective: nn.Module, enabled: bool = True) -> Iterator[None]:
    """While open, every transformer block keeps only its inputs for backward and recomputes the
    rest there (non-reentrant ``torch.utils.checkpoint``, with the RNG state of the forward, so
    dropout draws the same masks): the gradients are those of a run without it.

    The block's own ``forward`` is what recomputes, so module hooks around it (FSDP's gathering)
    run once. The key/value cache is off meanwhile: a recomputed block would append to it twice.
    """
    if not enabled:
        yield
        return
    from transformers import PreTrainedModel

    blocks = [block for stack in transformer_stacks(objective) for block in stack]
    configs = {id(module.config): module.config for module in objective.modules()
               if isinstance(module, PreTrainedModel) and getattr(module.config, "use_cache", False)}
    for block in blocks:
        block.forward = functools.partial(_recomputed_in_backward, block.forward)
    for config in configs.values():
        config.use_cache = False
    try:
        yield
    finally:
        for block in blocks:
            del block.forward
        for config in configs.values():
            config.use_cache = True


def _recomputed_in_backward(forward, *args, **kwargs):
    from torch.utils.checkpoint import checkpoint

    return checkpoint(forward, *args, use_reentrant=False, preserve_rng_state=True, **kwargs)


# --- sharding and gathering back -----------------------------------------------------------------

@dataclass(frozen=True)
class _PlainModule:
    """What sharding changes on a module, as it was before: its class, attributes and hooks."""

    module: nn.Module
    cls: type
    attributes: frozenset[str]
    hooks: Mapping[str, frozenset]

    @classmethod
    def of(cls, module: nn.Module) -> "_PlainModule":
        return cls(module, type(module), frozenset(vars(module)), {
            name: frozenset(value) for name, value in vars(module).items() if _is_hook_table(name, value)})

    def restore(self) -> None:
        """Drop the class, attributes and hooks that sharding added (:meth:`ShardedObjective.gather`
        sets the parameters)."""
        module = self.module
        for name in set(vars(module)) - self.attributes:
            del vars(module)[name]
        for name, value in vars(module).items():
            if _is_hook_table(name, value):
                for key in set(value) - self.hooks.get(name, frozenset()):
                    del value[key]
        module.__class__ = self.cls


def _is_hook_table(name: str, value) -> bool:
    return name.startswith("_") and "hooks" in name and isinstance(value, dict)


class ShardedObjective:
    """An objective sharded in place with FSDP2 over a torchrun job's processes (a unit per
    transformer block, the rest the root's). :meth:`gather` makes it whole again for the export.

    Shard it after anything that adds parameters (LoRA adapters) and before its optimiser is
    built: the optimiser must hold the sharded parameters that ``parameter_groups()`` returns
    from then on. ``compute_dtype`` bf16: the units compute in bf16 and reduce gradients in fp32.
    """

    def __init__(self, objective: nn.Module, world: int, device: str, compute_dtype: torch.dtype | None = None):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        self.objective = objective
        self._plain = [_PlainModule.of(module) for module in objective.modules()]
        mesh = init_device_mesh(torch.device(device).type, (world,))
        policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                  if compute_dtype == torch.bfloat16 else MixedPrecisionPolicy())
        if getattr(objective, "name", None) not in BLOCKS_RUN_IN_PARTS:
            for stack in transformer_stacks(objective):
                for block in stack:
                    fully_shard(block, mesh=mesh, mp_policy=policy)
        fully_shard(objective, mesh=mesh, mp_policy=policy)

    def gather(self, main: bool) -> None:
        """Every process sends its shards; the main process's objective becomes the plain module it
        was, with full fp32 parameters on the CPU (tied ones tied again) and no trace of FSDP, so the
        exporters read it as after unsharded training. The other processes' stays sharded."""
        from torch.distributed.tensor import DTensor

        whole: dict[int, nn.Parameter] = {}
        with torch.no_grad():
            for module in self.objective.modules():
                for name, param in list(module._parameters.items()):
                    if not isinstance(param, DTensor):
                        continue
                    if id(param) not in whole:  # in the same order on every process: each is a collective
                        full = param.full_tensor()
                        whole[id(param)] = nn.Parameter(full.cpu(), requires_grad=param.requires_grad) if main else None
                    if main:
                        module._parameters[name] = whole[id(param)]
        if main:
            for plain in self._plain:
                plain.restore()
            self.objective.to("cpu")


# --- checkpoints ----------------------------------------------------------------------------------

def save_sharded_state(directory: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                       state: Mapping, processes: Processes, keep_last: int = 2, keep_every: int = 0) -> Path:
    """The checkpoint ``step-XXXXXXXX`` of a sharded run (every process calls this): the model and
    the optimiser's moments by parameter name, each process writing its shards (DCP), and
    ``state.json``. All write into a hidden directory that the main process renames once every
    shard is written, so a killed job leaves the previous checkpoints as they were."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    target = directory / checkpoint_name(step)
    partial = directory / f".{target.name}.partial"
    if processes.main:
        for stale in directory.glob(".step-*.partial"):  # left by a killed job
            shutil.rmtree(stale)
        partial.mkdir(parents=True)
    processes.barrier()
    model_state, optimizer_state = get_state_dict(model, optimizer)
    # The hyperparameters are the settings' (the rate is set every step): only tensors are stored.
    with _one_process_is_intended():
        dcp.save({"model": model_state, "optimizer": optimizer_state["state"]},
                 storage_writer=dcp.FileSystemWriter(partial))
    if processes.main:
        (partial / "state.json").write_text(json.dumps({"step": step, **state}, indent=2))
        if target.is_dir():  # the same step again (a run extended and resumed)
            shutil.rmtree(target)
        os.replace(partial, target)
        prune_checkpoints(directory, keep_last, keep_every)
    processes.barrier()
    return target


def load_sharded_state(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load a checkpoint of :func:`save_sharded_state` into a model and its optimiser, sharded over
    any number of processes (every process calls this) or not at all. A parameter with no moments
    in the checkpoint (one no stage has trained yet) gets none."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    saved = checkpoint_reader(path).read_metadata().state_dict_metadata
    model_state, optimizer_state = get_state_dict(model, optimizer)
    moments = {name: values for name, values in optimizer_state["state"].items()
               if all(f"optimizer.{name}.{key}" in saved for key in values)}
    with _one_process_is_intended(), _as_error(path):
        dcp.load({"model": model_state, "optimizer": moments}, storage_reader=checkpoint_reader(path))
    set_model_state_dict(model, model_state)
    set_optimizer_state_dict(model, optimizer, {"state": moments, "param_groups": optimizer_state["param_groups"]},
                             options=StateDictOptions(strict=False))


def read_sharded_tensors(path: Path, prefixes: Sequence[str] = ("model.",)) -> dict[str, torch.Tensor]:
    """The whole tensors of a sharded checkpoint whose names start with one of ``prefixes``
    (``model.``: the weights; ``optimizer.<name>.``: a parameter's moments), in one process."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    saved = checkpoint_reader(path).read_metadata().state_dict_metadata
    tensors = {name: torch.empty(entry.size, dtype=entry.properties.dtype) for name, entry in saved.items()
               if isinstance(entry, TensorStorageMetadata) and name.startswith(tuple(prefixes))}
    with _one_process_is_intended(), _as_error(path):
        dcp.load(tensors, storage_reader=checkpoint_reader(path), no_dist=True)
    return tensors


class UnreadableCheckpoint(RuntimeError):
    """A sharded checkpoint DCP could not read (a shard truncated or missing)."""


@contextlib.contextmanager
def _as_error(path: Path) -> Iterator[None]:
    """DCP's CheckpointException derives from BaseException, so the fallback to an older checkpoint
    (``except Exception``) would never see it: raise it as an ordinary error naming the checkpoint."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        yield
    except CheckpointException as error:
        raise UnreadableCheckpoint(f"{path}: {error}") from None


@contextlib.contextmanager
def _one_process_is_intended() -> Iterator[None]:
    """DCP warns whenever it saves or loads without a process group; here one process is intended."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        yield


class _MetadataUnpickler(pickle.Unpickler):
    """DCP's index of a checkpoint: its own dataclasses, torch sizes, dtypes and layouts, paths."""

    def find_class(self, module: str, name: str):
        allowed = (module == "torch.distributed.checkpoint.metadata"
                   or (module, name) in {("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
                                         ("torch", "Size"), ("torch.serialization", "_get_layout"),
                                         ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"),
                                         ("collections", "OrderedDict")}
                   or (module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)))
        if not allowed:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint's index")
        return super().find_class(module, name)


@functools.cache
def _reader_class() -> type:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta, TensorStorageMetadata

    class SafeReader(FileSystemReader):
        """DCP's file reader with its index unpickled through an allow-list (DCP reads the tensors
        themselves with ``weights_only=True``)."""

        def read_metadata(self, *args, **kwargs):
            with open(Path(self.path) / ".metadata", "rb") as handle:
                metadata = _MetadataUnpickler(handle).load()
            # ramen writes tensors only; DCP would read any other entry with a full unpickler.
            other = [name for name, entry in metadata.state_dict_metadata.items()
                     if not isinstance(entry, TensorStorageMetadata)]
            if other:
                raise pickle.UnpicklingError(f"{self.path}: entries that are not tensors ({other[:3]}) are not "
                                             "part of a checkpoint ramen writes")
            metadata.storage_meta = getattr(metadata, "storage_meta", None) or StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader


def checkpoint_reader(path: Path):
    """A reader of the DCP checkpoint at ``path`` that unpickles nothing but its index, checked."""
    return _reader_class()(path)


def read_checkpoint_model(path: Path, module: nn.Module) -> None:
    """Load the model of a checkpoint into ``module``, from either format: an unsharded run's
    ``model.safetensors`` or a sharded run's DCP shards (whole tensors, in one process)."""
    if (Path(path) / "model.safetensors").exists():
        read_module(Path(path), "model", module)
        return
    tensors = read_sharded_tensors(Path(path))
    module.load_state_dict({name.removeprefix("model."): value for name, value in tensors.items()}, strict=True)
