"""Model architectures of ramen beyond the Hugging Face library's own: registration with the Auto
classes, conversion of a pretrained BERT, and self-contained export.

``ramen-bert`` (``ramen.modeling.modeling_ramen_bert``) is BERT with XLM-E's gated relative
position bias. Every loader of the workflow calls :func:`register_architectures`
before an Auto class, so such a model loads like any BERT. An exported directory
also carries the modeling file and an ``auto_map``, so users without ramen load it
with ``trust_remote_code=True``.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

from torch import nn

from ramen.errors import ConfigError
from ramen.modeling.state import load_every_weight

MODELING_MODULE = "modeling_ramen_bert"
GATED_MODEL_TYPE = "ramen-bert"

_registered = False


def register_architectures() -> None:
    """Make AutoConfig and the Auto model classes know ``ramen-bert`` (idempotent)."""
    global _registered
    if _registered:
        return
    import transformers

    from ramen.modeling import modeling_ramen_bert as modeling

    transformers.AutoConfig.register(GATED_MODEL_TYPE, modeling.RamenBertConfig, exist_ok=True)
    for auto_name, model_class in modeling.AUTO_CLASSES.items():
        getattr(transformers, auto_name).register(modeling.RamenBertConfig, model_class, exist_ok=True)
    _registered = True


def auto_map() -> dict[str, str]:
    """config.json's ``auto_map``: each Auto class to its class in the copied modeling file."""
    from ramen.modeling import modeling_ramen_bert as modeling

    classes = {"AutoConfig": modeling.RamenBertConfig, **modeling.AUTO_CLASSES}
    return {auto: f"{MODELING_MODULE}.{cls.__name__}" for auto, cls in classes.items()}


def save_pretrained_with_code(model, directory: str | os.PathLike) -> None:
    """``model.save_pretrained``; a ``ramen-bert`` model also gets its modeling file and ``auto_map``."""
    if model.config.model_type != GATED_MODEL_TYPE:
        model.save_pretrained(directory)
        return
    from ramen.modeling import modeling_ramen_bert

    model.config.auto_map = auto_map()
    model.save_pretrained(directory)
    shutil.copyfile(modeling_ramen_bert.__file__, Path(directory) / f"{MODELING_MODULE}.py")


def gated_bert(mlm: nn.Module, buckets: int, max_distance: int) -> nn.Module:
    """A ``RamenBertForMaskedLM`` holding ``mlm``'s weights (a BERT masked LM) and a zero bias d, so that
    it computes what ``mlm`` computes until d is trained."""
    from transformers import BertForMaskedLM

    from ramen.modeling.modeling_ramen_bert import RamenBertConfig, RamenBertForMaskedLM

    if type(mlm) is not BertForMaskedLM:
        raise ConfigError("objectives.relative_position.gated",
                          f"the gated relative position bias extends BERT, not {type(mlm).__name__}",
                          "use a BERT-family source model or turn the option off")
    register_architectures()
    values = {key: value for key, value in mlm.config.to_dict().items() if key != "model_type"}
    config = RamenBertConfig.from_dict({**values, "relative_position_buckets": buckets,
                                        "relative_position_max_distance": max_distance})
    config._attn_implementation = mlm.config._attn_implementation
    gated = RamenBertForMaskedLM(config)
    new = {name for name, _ in gated.named_parameters() if "relative_attention_bias" in name or ".gate_" in name}
    load_every_weight(gated, copy.deepcopy(mlm.state_dict()), f"conversion to {GATED_MODEL_TYPE}", new)
    return gated.train(mlm.training)
