"""Source checkpoints of either family, and what the initialisers need from them.

A source is a Hugging Face model directory (``config.json``), a directory holding one GGUF
file, or a GGUF file itself (dequantised to fp32 on load; transformers needs the ``gguf`` and
``accelerate`` packages for it). Its family is read from the checkpoint, never configured:

    masked-lm  a masked LM of the BERT or RoBERTa family (ramen.modeling.bilingual)
    causal-lm  a causal LM (Llama, Qwen, Mistral, Gemma, GPT-2, Pythia, Phi, OLMo, ... layouts;
               ramen.modeling.causal; what its forward does around the blocks: ramen.modeling.layouts)

:func:`source_parts` returns the tables an initialiser starts from: the input embeddings, the
output rows (the same tensor when the source ties them), the output bias or None, and the
special tokens by role as strings, so a new vocabulary maps them by string, never by id.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import torch
from torch import nn

from ramen.data.checkpoints import SourceLocation, locate_source
from ramen.errors import ConfigError
from ramen.modeling.layouts import CausalLayout, causal_layout
from ramen.modeling.state import load_every_weight

ENCODER = "masked-lm"  # the families' names in ramen.families.FAMILIES
DECODER = "causal-lm"
SPECIAL_ROLES = ("bos", "eos", "pad", "unk")


def load_source_config(location: SourceLocation):
    from transformers import AutoConfig

    from ramen.modeling.architectures import register_architectures

    register_architectures()
    return AutoConfig.from_pretrained(location.directory, **location.load_kwargs())


def config_family(config) -> str:
    """The family of a loaded checkpoint config, as transformers' Auto classes know it: its declared
    architecture first, then its model type (masked first). The dry run decides the same from
    config.json through the family registry (ramen.families.recognise); modeling sits below the
    registry, whose families' stage modules build on it, so it asks transformers directly."""
    from transformers.models.auto import modeling_auto

    for architecture in config.architectures or []:
        if architecture.endswith("ForMaskedLM"):
            return ENCODER
        if architecture.endswith(("ForCausalLM", "LMHeadModel")):
            return DECODER
    model_type = config.model_type
    seq2seq = modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
    if getattr(config, "is_encoder_decoder", False) or model_type in seq2seq:
        raise ConfigError("source.model", f"'{model_type}' is an encoder-decoder model, which ramen does not "
                          "transfer", "use a masked LM (BERT, RoBERTa) or a causal LM (Llama, Qwen, GPT-2, ...)")
    if model_type in modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return ENCODER
    if model_type in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return DECODER
    raise ConfigError("source.model", f"model type '{model_type}' is neither a masked nor a causal LM",
                      "use a masked LM (BERT, RoBERTa) or a causal LM (Llama, Qwen, GPT-2, ...)")


def source_family(path: str | os.PathLike) -> str:
    """The family of the checkpoint at ``path`` (reads only its config)."""
    return config_family(load_source_config(locate_source(path)))


def attention_for(config) -> str:
    """``sdpa`` where the causal LM's class supports it, else ``eager`` (Gemma 2 soft-caps its
    attention scores, which sdpa cannot)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    model_class = MODEL_FOR_CAUSAL_LM_MAPPING.get(type(config), None)
    return "sdpa" if model_class is None or model_class._supports_sdpa else "eager"


def load_source_causal_lm(path: str | os.PathLike) -> nn.Module:
    """A causal LM in fp32 (a GGUF file is dequantised); ConfigError when it is not a decoder."""
    from transformers import AutoModelForCausalLM

    location = locate_source(path)
    config = load_source_config(location)
    if config_family(config) != DECODER:
        raise ConfigError("source.model", f"{path} is a masked LM, not a causal LM",
                          "decoder training needs a causal LM source")
    causal_layout(config.to_dict(), where=str(path))  # refused before the weights load
    model = AutoModelForCausalLM.from_pretrained(location.directory, dtype=torch.float32,
                                                 attn_implementation=attention_for(config), **location.load_kwargs())
    if location.gguf_file:
        model = plain_copy(model)
    return model


def plain_copy(model: nn.Module) -> nn.Module:
    """A model loaded from GGUF (dequantised already) as an ordinary one: transformers keeps the GGUF
    quantiser attached and then refuses to save it."""
    import copy

    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation=attention_for(config))
    table = plain.get_input_embeddings().weight
    tied = {name for name, param in plain.named_parameters(remove_duplicate=False) if param is table}
    load_every_weight(plain, model.state_dict(), "GGUF model copy", tied)
    return plain.eval()


def load_source_tokenizer(path: str | os.PathLike):
    """The source's tokenizer (from the GGUF file for a GGUF source)."""
    from ramen.vocab.tokenizer import load_tokenizer

    return load_tokenizer(path)


@dataclass
class SourceParts:
    """What initialising a new vocabulary needs from a source model."""

    family: str
    input_embeddings: torch.Tensor  # (V, d)
    output_rows: torch.Tensor  # (V, d); the input table itself when tied
    output_bias: torch.Tensor | None  # (V,) or None: the output layer has no bias
    tied: bool
    special_tokens: dict[str, str] = field(default_factory=dict)  # role (bos, eos, pad, unk) -> string


def special_token_strings(tokenizer) -> dict[str, str]:
    """The tokenizer's BOS, EOS, PAD and UNK by role, as strings (roles it lacks are left out)."""
    found = {}
    for role in SPECIAL_ROLES:
        token = getattr(tokenizer, f"{role}_token", None)
        if token is not None:
            found[role] = str(token)
    return found


def output_layer(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None, bool]:
    """A causal LM's output rows, bias (None without one) and whether they are its input table."""
    head = model.get_output_embeddings()
    table = model.get_input_embeddings().weight
    if head is None:
        raise ConfigError("source.model", f"{type(model).__name__} has no output layer",
                          "use a causal LM checkpoint (…ForCausalLM)")
    bias = getattr(head, "bias", None)
    return head.weight, bias, head.weight is table


def source_layout(model: nn.Module) -> CausalLayout:
    """The layout of a loaded causal LM (ramen.modeling.layouts), checked against its embedding
    module: a module that scales its rows otherwise than the layout says is refused, not followed
    silently."""
    layout = causal_layout(model.config.to_dict())
    own = getattr(model.get_input_embeddings(), "embed_scale", None)
    own = None if own is None or float(own) == 1.0 else float(own)
    expected = layout.embed_scale
    if (own is None) != (expected is None) or (own is not None and not math.isclose(own, expected, rel_tol=1e-6)):
        raise ConfigError("source.model", f"the embedding module of {type(model).__name__} scales its rows by "
                          f"{own}, where ramen expects {expected} for model type '{layout.model_type}'",
                          "use a causal LM ramen serves, or teach ramen.modeling.layouts this model type")
    return layout


def masked_lm_parts(model: nn.Module, tokenizer) -> SourceParts:
    """A masked LM's tables (detached; its output layer is tied, with a bias) and special token strings."""
    from ramen.modeling.bilingual import split_mlm_head

    table = model.get_input_embeddings().weight.detach()
    _, bias = split_mlm_head(model)
    return SourceParts(ENCODER, table, table, bias.detach(), True, special_token_strings(tokenizer))


def causal_lm_parts(model: nn.Module, tokenizer) -> SourceParts:
    """A causal LM's tables (detached; output rows and bias as its head has them) and special token strings."""
    table = model.get_input_embeddings().weight.detach()
    rows, bias, tied = output_layer(model)
    return SourceParts(DECODER, table, table if tied else rows.detach(),
                       None if bias is None else bias.detach(), tied, special_token_strings(tokenizer))


def transformer_blocks(model: nn.Module) -> nn.ModuleList:
    """The stack of transformer blocks of a causal LM's backbone, in order (Llama ``layers``,
    GPT-2 ``h``, GPT-NeoX ``layers``, ...): the one ModuleList of ``num_hidden_layers`` entries."""
    count = model.config.num_hidden_layers
    found = [module for module in model.base_model.modules()
             if isinstance(module, nn.ModuleList) and len(module) == count]
    if not found:
        raise ConfigError("source.model", f"no stack of {count} transformer blocks in {type(model).__name__}",
                          "use a causal LM of a standard layout (Llama, Qwen, Mistral, GPT-2, Pythia)")
    return found[0]
