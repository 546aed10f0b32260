"""Which exported decoders ramen writes as GGUF files (ramen.modeling.gguf_export), read from a
config as a plain mapping: the job graph checks a run's source config.json with the same function
the writer applies to the exported model's config, before any job starts, and importing it loads no
torch (the graph checks may not)."""

from __future__ import annotations

from collections.abc import Mapping

# Hugging Face model_type (a GGUF source's general.architecture reads the same) -> the
# general.architecture written. llama.cpp reads Mistral's layout as llama's.
GGUF_ARCHITECTURES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3",
                      "gemma2": "gemma2"}

# Why the others are refused: each needs a conversion ramen does not make yet, and a file that
# loads but computes something else is worse than none.
NOT_WRITTEN = {
    "gemma": "ramen writes Gemma 2 only; Gemma 1's llama.cpp layout is not checked",
    "gemma3": "Gemma 3's two rotary bases and its sliding-window pattern are not written by ramen",
    "gemma3_text": "Gemma 3's two rotary bases and its sliding-window pattern are not written by ramen",
    "olmo2": "transformers' GGUF loader does not read OLMo 2, so the file could not be checked",
}

DTYPES = ("f32", "f16", "bf16")
DTYPE_SETTING = "gguf.dtype"
PRE_SETTING = "gguf.pre"


def gguf_refusal(model_type: str) -> str | None:
    """Why a model of ``model_type`` gets no GGUF file, or None when ramen writes it."""
    if model_type in GGUF_ARCHITECTURES:
        return None
    reason = NOT_WRITTEN.get(model_type, "ramen has no GGUF layout for it")
    return (f"model_type '{model_type}' has no GGUF writer: {reason}; written: "
            f"{', '.join(sorted(GGUF_ARCHITECTURES))}")


def _head_dim(config: Mapping) -> int:
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def layout_refusal(config: Mapping) -> str | None:
    """Why a model of this config (config.json, or a config's ``to_dict()``) gets no GGUF file: its
    architecture, or what a file of it would compute differently in llama.cpp; None when written.
    Keys a config leaves out (a GGUF source's header gives only its architecture) pass."""
    model_type = config.get("model_type", "")
    refusal = gguf_refusal(model_type)
    if refusal is not None:
        return refusal
    # transformers 5 calls it rope_parameters; config.json files written before call it rope_scaling.
    rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        return f"rotary scaling '{kind}' is not written to GGUF by ramen"
    activation = config.get("hidden_activation") or config.get("hidden_act", "silu")
    expected = "gelu_pytorch_tanh" if model_type == "gemma2" else "silu"
    if activation != expected:
        return f"activation '{activation}' differs from the {expected} llama.cpp assumes for {model_type}"
    if model_type in ("llama", "mistral") and (config.get("attention_bias") or config.get("mlp_bias")):
        return "attention or MLP biases in a Llama layout, which transformers' GGUF loader drops"
    window = config.get("sliding_window")
    if (model_type in ("mistral", "phi3") and window is not None
            and window < config.get("max_position_embeddings", window + 1)):
        return f"sliding-window attention ({window} tokens) that llama.cpp's {model_type} layout does not apply"
    if model_type in ("qwen2", "qwen3") and config.get("use_sliding_window"):
        return "sliding-window attention, which ramen does not write to GGUF"
    if model_type == "gemma2" and "query_pre_attn_scalar" in config and \
            config["query_pre_attn_scalar"] != _head_dim(config):
        # llama.cpp scales Gemma 2's attention by the head size, except for its 27B model.
        return (f"query_pre_attn_scalar {config['query_pre_attn_scalar']} other than the head size "
                f"{_head_dim(config)}, which llama.cpp assumes")
    return None
