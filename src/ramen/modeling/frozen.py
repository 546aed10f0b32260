"""Weights that no training stage moves, held below fp32 (``training.frozen_dtype``).

``bf16``: every frozen floating-point parameter becomes a bf16 parameter. ``nf4``: the frozen
linear weights of the transformer blocks (those LoRA adapts; ramen.modeling.lora) become
torchao's ``NF4Tensor`` (QLoRA's 4-bit NormalFloat, layout: ramen.modeling.frozen_layout), the
other frozen weights bf16. Trained parameters keep their fp32 masters. The forward then runs
under bf16 autocast (TrainSettings.compute_precision), on the CPU as on a GPU: autocast casts
fp32 activations for the matmuls, and an NF4 weight is dequantised one layer at a time inside
its linear (torchao's ``F.linear`` override keeps the 4-bit tensor, not the dequantised one, for
backward).

Checkpoints hold an NF4 weight as its inner tensors (:func:`pack`), so a resumed run has the
very codes it started with (quantising a dequantised weight again would not give them); the
export dequantises it (:func:`dense`) and merges the adapters into it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import torch
from torch import nn

from ramen.modeling.frozen_layout import NF4_BLOCK, nf4_scaler_block

PACKED = ".nf4."  # checkpoint keys of an NF4 weight's inner tensors: <weight name>.nf4.<inner name>


def is_nf4(tensor) -> bool:
    # By name: torchao is imported only where NF4 is used.
    return any(kind.__name__ == "NF4Tensor" for kind in type(tensor).__mro__)


def dense(tensor: torch.Tensor) -> torch.Tensor:
    """A plain tensor of ``tensor``'s values (an NF4 weight dequantised to bf16)."""
    return tensor.get_original_weight() if is_nf4(tensor) else tensor


def _owners(model: nn.Module) -> dict[int, list[tuple[nn.Module, str]]]:
    """Every module slot that holds each parameter (tied parameters have several)."""
    owners: dict[int, list[tuple[nn.Module, str]]] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                owners.setdefault(id(param), []).append((module, name))
    return owners


def _linear_weights(blocks: Iterable[nn.Module], adapters: Iterable[nn.Parameter]) -> set[int]:
    from transformers.pytorch_utils import Conv1D

    skip = {id(param) for param in adapters}
    return {id(module.weight) for block in blocks for module in block.modules()
            if isinstance(module, (nn.Linear, Conv1D)) and id(module.weight) not in skip}


def to_nf4(values: torch.Tensor, scaler: int) -> torch.Tensor:
    """``values`` (bf16) as torchao's NF4Tensor, :data:`NF4_BLOCK` values a scale, ``scaler`` scales a factor."""
    # torchao's wheel carries compiled kernels for other Pythons and CUDA builds, and warns when
    # they do not load; NF4 needs none of them.
    log = logging.getLogger("torchao")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import to_nf4 as quantise
    finally:
        log.setLevel(level)
    return quantise(values, NF4_BLOCK, scaler)


def hold_frozen(model: nn.Module, trained: Iterable[nn.Parameter], dtype: str, blocks: Iterable[nn.Module],
                adapters: Iterable[nn.Parameter] = (), device: str | torch.device | None = None) -> None:
    """Hold every floating-point parameter of ``model`` not in ``trained`` at ``dtype`` (fp32: as
    it is), in place: each slot that held it holds the new parameter, so ties stay tied.
    ``blocks``: the transformer blocks whose linear weights nf4 quantises, ``adapters`` LoRA's
    own (never quantised). ``device``: where the held weights go, one at a time (the fp32 model
    stays on the host, and the GPU quantises)."""
    if dtype == "fp32":
        return
    keep = {id(param) for param in trained}
    quantised = _linear_weights(blocks, adapters) if dtype == "nf4" else set()
    for key, owners in _owners(model).items():
        module, name = owners[0]
        param = module._parameters[name]
        if key in keep or is_nf4(param) or param.dtype != torch.float32:  # trained, held already, or not a weight
            continue
        with torch.no_grad():
            values = param.detach().to(device=device or param.device, dtype=torch.bfloat16).contiguous()
            scaler = nf4_scaler_block(values.numel()) if key in quantised and values.dim() == 2 else None
            if scaler is not None:
                values = to_nf4(values, scaler)
        held = nn.Parameter(values, requires_grad=False)
        for module, name in owners:
            module._parameters[name] = held


def held_bytes(tensor: torch.Tensor) -> int:
    """The bytes a parameter occupies (an NF4 weight: its inner tensors)."""
    if is_nf4(tensor):
        return sum(getattr(tensor, name).nbytes for name in tensor.__tensor_flatten__()[0])
    return tensor.nbytes


def pack(name: str, tensor: torch.Tensor) -> dict[str, torch.Tensor]:
    """A checkpoint's entries for one tensor: an NF4 weight's inner tensors, else the tensor."""
    if not is_nf4(tensor):
        return {name: tensor}
    return {f"{name}{PACKED}{inner}": getattr(tensor, inner) for inner in tensor.__tensor_flatten__()[0]}


def unpack_into(module: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy the packed NF4 entries of ``state`` into ``module``'s NF4 weights in place, leaving
    each weight itself under its name in ``state`` (so a strict load finds it, copying it onto itself)."""
    packed: dict[str, dict[str, torch.Tensor]] = {}
    for key in [key for key in state if PACKED in key]:
        name, inner = key.split(PACKED)
        packed.setdefault(name, {})[inner] = state.pop(key)
    for name, inners in packed.items():
        weight = module.get_parameter(name)
        if not is_nf4(weight) or set(inners) != set(weight.__tensor_flatten__()[0]):
            raise RuntimeError(f"checkpoint entry {name}: NF4 parts {sorted(inners)} do not fit the model's {name}")
        with torch.no_grad():
            for inner, value in inners.items():
                getattr(weight, inner).copy_(value)
        state[name] = weight


def has_nf4(module: nn.Module) -> bool:
    return any(is_nf4(param) for param in module.parameters())


def dense_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with every NF4 weight dequantised (an export's shared weights)."""
    return {name: dense(tensor) for name, tensor in state.items()}
