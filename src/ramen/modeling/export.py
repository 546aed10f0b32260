"""One language side of a bilingual model saved as a standard Hugging Face directory, for every
source family: the shared weights of the source model (LoRA adapters merged into them, and kept
beside in ``lora_adapter/``: ramen.modeling.lora), the side's own vocabulary-sized tables, and its
tokenizer."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch import nn

from ramen.io import atomic_path
from ramen.modeling.frozen import dense
from ramen.modeling.lora import ADAPTER_DIR, adapter_deltas, has_adapters, plain_state, save_adapter
from ramen.modeling.state import load_every_weight


def export_side(source: nn.Module, config, vocabulary: Iterable[torch.Tensor], build: Callable[[object], nn.Module],
                fill: Callable[[nn.Module], None], tokenizer, out_dir: str | os.PathLike, lang: str,
                save: Callable[[nn.Module, os.PathLike], None] | None = None) -> None:
    """Save ``lang``'s side of a model whose shared part is ``source``.

    ``build(config)`` makes an empty model of the side's architecture (``config.vocab_size`` its
    rows); it takes every tensor of ``source`` but the ``vocabulary``-sized ones, then ``fill``
    writes the side's tables into it (without gradients). A weight of the architecture that is
    neither is an error, not a random tensor in the export. ``save(model, directory)``:
    ``model.save_pretrained`` unless given. Adapters of ``source`` are merged into the weights they
    wrap, and saved as they are in the subfolder ``lora_adapter``.
    """
    exported = build(config)
    skipped = {id(tensor) for tensor in vocabulary}
    # Frozen NF4 weights (ramen.modeling.frozen) are dequantised; the adapters merge into them.
    shared = {name: dense(tensor.detach()) for name, tensor in plain_state(source).items() if id(tensor) not in skipped}
    vocab_sized = {name for name, tensor in exported.state_dict().items() if tensor.shape[:1] == (config.vocab_size,)}
    load_every_weight(exported, shared, f"export of '{lang}'", vocab_sized)
    with torch.no_grad():
        for name, delta in adapter_deltas(source):
            exported.get_parameter(name).add_(delta)
        fill(exported)
    with atomic_path(out_dir) as tmp:
        (save or type(exported).save_pretrained)(exported, tmp)
        tokenizer.save_pretrained(tmp)
        if has_adapters(source):
            save_adapter(source, Path(tmp) / ADAPTER_DIR)
