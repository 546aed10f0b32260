"""What a causal LM's own forward does around its blocks, read from its config (torch-free).

The bilingual causal LM (ramen.modeling.causal) looks its input rows up itself, passes them to the
source's backbone as ``inputs_embeds`` and computes the logits itself over each vocabulary part.
So whatever the source's forward does on the way in (before the backbone sees ``inputs_embeds``)
or on the way out (after the output layer) it must do too, or its logits are not the exported
model's. This module says what that is for a config, and refuses a source whose forward ramen
cannot reproduce: the dry run reads it from config.json (ramen.families.check_source), the model
from the loaded config, so the two agree.

Checked against transformers 5.24's modeling files:

* Gemma 1/2/3 scale each embedding row by sqrt(hidden_size) inside the embedding module
  (``*TextScaledWordEmbedding``, in the table's dtype): ``inputs_embeds`` skips it. (Older
  transformers scaled ``inputs_embeds`` inside the backbone; the loaded model's embedding module is
  checked against this table: ramen.modeling.sources.source_layout.)
* Gemma 2 and Gemma 3 (when set) soft-cap the final logits: cap * tanh(logits / cap)
  (``final_logit_softcapping``).
* BioGPT and XGLM scale them by sqrt(hidden_size) in the module where ``scale_embedding`` is set.
* Multipliers inside the backbone (Granite's ``embedding_multiplier``) apply to ``inputs_embeds``
  as they are: nothing to do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ramen.errors import ConfigError

SETTING = "source.model"

# Model types whose embedding module multiplies its rows by sqrt(hidden_size).
SCALED_EMBEDDINGS = frozenset({"gemma", "gemma2", "gemma3_text"})

# Config keys whose value (other than 1) changes the logits after the output layer in a way ramen
# does not reproduce, and which family sets it.
UNSERVED_LOGIT_SCALES = {
    "logit_scale": "Cohere multiplies its logits by it",
    "logits_scaling": "Granite divides its logits by it (HyperCLOVA X multiplies)",
    "lm_head_multiplier": "Falcon-H1 multiplies its logits by it",
}

# Model types whose blocks read more than ``inputs_embeds``: tables looked up by token id that a new
# vocabulary would need too.
PER_TOKEN_INPUTS = {
    "gemma3n_text": "its blocks read per-layer embeddings looked up by token id (embed_tokens_per_layer), "
                    "which a new vocabulary has no rows for",
}

REMEDY = "use a text-only causal LM ramen serves (Llama, Mistral, Qwen2/3, Gemma 1-3, Phi-3, OLMo-2, GPT-2, ...)"


@dataclass(frozen=True)
class CausalLayout:
    """What ramen's causal LM does besides the backbone: ``embed_scale`` multiplies every input row
    (None: no scaling), ``softcap`` caps the logits as cap * tanh(logits / cap) (None: no cap)."""

    model_type: str = ""
    embed_scale: float | None = None
    softcap: float | None = None


def causal_layout(config: Mapping, setting: str = SETTING, where: str = "") -> CausalLayout:
    """The layout of a causal LM's config (config.json, or a config's ``to_dict()``; a GGUF file's
    metadata names no model type and passes: the loaded config is checked again). ConfigError
    naming ``setting`` (and ``where``, the file) for a source ramen cannot reproduce exactly."""
    where = f"{where}: " if where else ""
    model_type = str(config.get("model_type") or "")
    if isinstance(config.get("text_config"), Mapping):
        raise ConfigError(setting, f"{where}'{model_type}' nests its text model in a multimodal config "
                          "(text_config), which ramen does not transfer",
                          "use the checkpoint of its text model alone (a …ForCausalLM architecture)")
    if model_type in PER_TOKEN_INPUTS:
        raise ConfigError(setting, f"{where}'{model_type}' cannot be served: {PER_TOKEN_INPUTS[model_type]}",
                          REMEDY)
    for key, why in UNSERVED_LOGIT_SCALES.items():
        value = config.get(key)
        if value is not None and float(value) != 1.0:
            raise ConfigError(setting, f"{where}'{model_type}' sets {key}: {value} ({why}), which ramen's "
                              "causal LM does not reproduce", REMEDY)
    hidden = config.get("hidden_size") or config.get("d_model")
    scaled = model_type in SCALED_EMBEDDINGS or config.get("scale_embedding") is True
    scale = math.sqrt(hidden) if scaled and hidden else None
    cap = config.get("final_logit_softcapping")
    return CausalLayout(model_type, scale, float(cap) if cap else None)
