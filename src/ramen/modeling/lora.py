"""Low-rank adapters (LoRA, through peft) on the linear layers of a model's transformer blocks.

peft replaces each targeted layer by a wrapper that keeps the layer itself as its ``base_layer``
and adds the low-rank pair ``lora_A``/``lora_B``. The layer's own weights stay in the groups that
hold them (``encoder``, ``block:<i>``); the pairs form a group of their own, ``lora``
(:func:`adapter_groups`), so a stage that names ``encoder`` or ``top:k`` does not train them and
a ``lora`` stage moves them and nothing else it does not name. The wrappers are ordinary modules
inside the blocks: wrapping or sharding per block takes them along.

An export is a plain model of the source's architecture: the weights as the model without
adapters names them (:func:`plain_state`), each targeted weight with its adapter's product added
(:func:`adapter_deltas`, peft's merge, one layer at a time and leaving the model as it is), and
the adapters saved beside it in peft's format (:func:`save_adapter`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import torch
from torch import nn

from ramen.errors import ConfigError

SETTING = "training.lora.target_modules"
ALL_LINEAR = "all-linear"
GROUP = "lora"
ADAPTER = "default"  # peft's name for a model's only adapter
# A subfolder of the export: transformers would read an adapter_config.json at the top as an adapter.
ADAPTER_DIR = "lora_adapter"
# Keys of peft's adapter files are those of a PeftModel, whose wrapped model sits at this path.
PEFT_PREFIX = "base_model.model."


def has_adapters(model: nn.Module) -> bool:
    return hasattr(model, "peft_config")  # set by peft's injection


def _linear_layers(model: nn.Module, blocks: nn.ModuleList) -> dict[str, nn.Module]:
    """The linear layers (GPT-2's Conv1D included) of ``blocks``, by their names in ``model``."""
    from transformers.pytorch_utils import Conv1D

    inside = {id(module) for module in blocks.modules()}
    return {name: module for name, module in model.named_modules()
            if id(module) in inside and isinstance(module, (nn.Linear, Conv1D))}


def _names(layer: str, target: str) -> bool:
    """peft's rule for a list of targets: the layer's whole name or a dotted suffix of it."""
    return layer == target or layer.endswith(f".{target}")


def targeted_layers(model: nn.Module, blocks: nn.ModuleList, target_modules: Sequence[str]) -> list[str]:
    """The names in ``model`` of the linear layers of ``blocks`` that ``target_modules`` names
    (``all-linear``: every one); ConfigError for a target that names none of them."""
    layers = list(_linear_layers(model, blocks))
    everything = ALL_LINEAR in target_modules
    unmatched = [target for target in target_modules
                 if target != ALL_LINEAR and not any(_names(layer, target) for layer in layers)]
    if unmatched or not layers:
        leaves = sorted({layer.rsplit(".", 1)[-1] for layer in layers})
        raise ConfigError(SETTING, f"{unmatched or list(target_modules)} name no linear layer of the "
                          f"{len(blocks)} transformer blocks", f"choose from {leaves} or [{ALL_LINEAR}]")
    return [layer for layer in layers if everything or any(_names(layer, target) for target in target_modules)]


def add_adapters(model: nn.Module, blocks: nn.ModuleList, *, rank: int, alpha: float, dropout: float,
                 target_modules: Sequence[str], seed: int, task_type: str | None = None) -> list[str]:
    """Wrap the layers of ``blocks`` that ``target_modules`` names (:func:`targeted_layers`) with
    LoRA adapters of ``rank``, scaled by ``alpha / rank``, in place; return their names.

    ``lora_B`` starts at zero, so the model computes what it computed; ``lora_A`` is drawn from
    ``seed``, so a run's adapters start alike every time. Whether other parameters train is left
    as it was (peft would freeze them: staging decides). ``task_type``: peft's, saved with the
    adapter (``CAUSAL_LM``: ``PeftModel.from_pretrained`` gives a model that generates).
    """
    from peft import LoraConfig, inject_adapter_in_model
    from transformers.pytorch_utils import Conv1D

    names = targeted_layers(model, blocks, target_modules)
    layers = _linear_layers(model, blocks)
    # Conv1D stores its weight transposed; a stack holds one kind of linear layer.
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=names,
                        fan_in_fan_out=isinstance(layers[names[0]], Conv1D), task_type=task_type)
    requires_grad = {id(param): param.requires_grad for param in model.parameters()}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    for param in model.parameters():
        param.requires_grad_(requires_grad.get(id(param), True))
    model.train(model.training)  # the new dropout modules start in training mode
    return names


def _adapter_layers(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    from peft.tuners.lora import LoraLayer

    return ((name, module) for name, module in model.named_modules() if isinstance(module, LoraLayer))


def adapter_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The adapters' own parameters (not the weights of the layers they wrap)."""
    if not has_adapters(model):
        return []
    return [param for _, layer in _adapter_layers(model) for name in layer.adapter_layer_names
            for param in getattr(layer, name).parameters()]


def adapter_groups(groups: Mapping[str, list[nn.Parameter]], model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """``groups`` with ``model``'s adapters taken out of every group and gathered in ``lora``
    (``groups`` as they are when it has none)."""
    adapters = adapter_parameters(model)
    if not adapters:
        return dict(groups)
    ids = {id(param) for param in adapters}
    return {**{name: [param for param in params if id(param) not in ids] for name, params in groups.items()},
            GROUP: adapters}


def plain_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict(keep_vars=True)`` as the model without adapters names it: each wrapped
    layer's own (un-merged) weights under the layer's name, no adapter weights."""
    state = model.state_dict(keep_vars=True)
    if not has_adapters(model):
        return state
    for name, _ in _adapter_layers(model):
        prefix, base = f"{name}.", f"{name}.base_layer."
        for key in [key for key in state if key.startswith(prefix)]:
            tensor = state.pop(key)
            if key.startswith(base):
                state[prefix + key[len(base):]] = tensor
    return state


def adapter_deltas(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(weight name as in :func:`plain_state`, what the adapter adds to it), one layer at a time:
    a merged export holds one extra layer's weight at a time, not a second copy of the stack."""
    if not has_adapters(model):
        return
    with torch.no_grad():
        for name, layer in _adapter_layers(model):
            yield f"{name}.weight", layer.get_delta_weight(ADAPTER)


def save_adapter(model: nn.Module, directory: str | os.PathLike) -> None:
    """The adapters in peft's format (adapter_config.json, adapter_model.safetensors):
    ``PeftModel.from_pretrained(base, directory)`` over the un-merged weights (:func:`plain_state`
    in a model of the architecture) computes what ``model`` computes."""
    from peft import get_peft_model_state_dict
    from peft.utils import SAFETENSORS_WEIGHTS_NAME
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True)
    # No embedding tables: the export holds them, and "auto" would look up the base model's name.
    weights = get_peft_model_state_dict(model, adapter_name=ADAPTER, save_embedding_layers=False)
    save_file({PEFT_PREFIX + key: tensor.detach().cpu().contiguous() for key, tensor in weights.items()},
              str(directory / SAFETENSORS_WEIGHTS_NAME), metadata={"format": "pt"})
    config = copy.deepcopy(model.peft_config[ADAPTER])
    config.inference_mode = True
    config.target_modules = sorted(config.target_modules)  # peft holds a set: a fixed order for the file
    config.save_pretrained(str(directory))
