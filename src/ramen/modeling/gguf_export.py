"""An exported Hugging Face causal-LM directory written as one GGUF file (``model.gguf``), for
llama.cpp, Ollama and LM Studio: the weights in f32, f16 or bf16 (quantising stays llama.cpp's
job) and the tokenizer (tokens, merges, scores, token types, special ids, chat template and the
pre-tokenizer name llama.cpp splits text with).

Two tokenizer kinds: byte-level BPE (``gpt2``) and SentencePiece-style BPE with byte fallback
(``llama``). The pre-tokenizer name comes from the SOURCE, never from the exported tokenizer: an
extended vocabulary still splits text as the source did, but llama.cpp's own way of naming it
(hashing the tokenizer's output on a check text) fails once the vocabulary has grown.

Architectures: ramen.modeling.gguf_layouts (the graph checks read it too); what a file of one
would compute differently (rotary scaling, Mistral's and Phi-3's sliding window, Gemma 2's query
scale other than the head size) is refused. llama.cpp reads every key written; transformers' GGUF
loader ignores some and takes its defaults instead (Qwen3's head size, 128; Gemma 2's caps, 50 and
30, and query scale, 256; Phi-3's partial rotary factor), so a file whose model differs there reads
back wrong in transformers only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ramen.errors import ConfigError
from ramen.io import atomic_path
from ramen.modeling.gguf_layouts import DTYPE_SETTING, DTYPES, GGUF_ARCHITECTURES, PRE_SETTING, layout_refusal

SOURCE_SETTING = "source.model"
SENTENCEPIECE_SPACE = "\u2581"


# --- the pre-tokenizer name ----------------------------------------------------------------------


def _known_splits() -> dict[str, str]:
    """Split regex -> a llama.cpp pre-tokenizer name that splits text by it: the names transformers'
    GGUF loader rebuilds a regex for, so that the file reads back as it was written."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS

    names = {}
    for name, regex in GGUF_PRE_TOKENIZER_SPLITS.items():
        names.setdefault(regex, name)  # the first name of a regex is its usual one
    return names


def _byte_level_pre(pre_tokenizer: dict | None) -> str | None:
    """The llama.cpp name of a byte-level tokenizer.json pre-tokenizer, or None if not recognised."""
    if pre_tokenizer is None:
        return None
    if pre_tokenizer["type"] == "ByteLevel":
        # ByteLevel's own regex is GPT-2's, which llama.cpp calls gpt-2.
        return "gpt-2" if pre_tokenizer.get("use_regex", True) and not pre_tokenizer.get("add_prefix_space") else None
    if pre_tokenizer["type"] != "Sequence":
        return None
    steps = pre_tokenizer["pretokenizers"]
    if len(steps) == 2 and steps[0]["type"] == "Split" and steps[1]["type"] == "ByteLevel" \
            and not steps[1].get("use_regex", True) and steps[0].get("behavior") == "Isolated" \
            and not steps[0].get("invert"):
        return _known_splits().get(steps[0]["pattern"].get("Regex"))
    return None


def source_pre_tokenizer(source: str | os.PathLike) -> str:
    """The source's own ``tokenizer.ggml.pre``: a GGUF source's, copied; a Hugging Face source's, named
    from its tokenizer.json pre-tokenizer (ConfigError on ``gguf.pre`` when it is not recognised)."""
    from ramen.data.checkpoints import locate_source

    location = locate_source(source, SOURCE_SETTING)
    if location.gguf_file:
        from gguf import GGUFReader

        field = GGUFReader(location.directory / location.gguf_file).get_field("tokenizer.ggml.pre")
        if field is None:
            raise ConfigError(PRE_SETTING, f"the GGUF source {location.directory / location.gguf_file} names no "
                              "tokenizer.ggml.pre", "set gguf.pre to the llama.cpp pre-tokenizer of the source")
        return field.contents()
    tokenizer_file = location.directory / "tokenizer.json"
    if not tokenizer_file.exists():
        raise ConfigError(PRE_SETTING, f"{location.directory} has no tokenizer.json to name its pre-tokenizer from",
                          "set gguf.pre to the llama.cpp pre-tokenizer of the source")
    name = _byte_level_pre(json.loads(tokenizer_file.read_text(encoding="utf-8")).get("pre_tokenizer"))
    if name is None:
        raise ConfigError(PRE_SETTING, f"the pre-tokenizer of {tokenizer_file} is not one ramen names for llama.cpp",
                          "set gguf.pre to its llama.cpp name (the source GGUF's tokenizer.ggml.pre)")
    return name


# --- the tokenizer -------------------------------------------------------------------------------


def _steps(component: dict | None) -> list[dict]:
    if component is None:
        return []
    return [step for part in component.get("normalizers", component.get("pretokenizers",
            component.get("decoders", [component]))) for step in _steps(part)] \
        if component["type"] == "Sequence" else [component]


def tokenizer_kind(backend: dict) -> str:
    """``gpt2`` (byte-level BPE) or ``llama`` (SentencePiece-style BPE with byte fallback)."""
    model = backend["model"]
    if model["type"] != "BPE":
        raise ConfigError(SOURCE_SETTING, f"a {model['type']} tokenizer has no GGUF writer in ramen",
                          "GGUF export writes byte-level BPE and SentencePiece-style BPE tokenizers")
    kinds = {step["type"] for step in _steps(backend.get("pre_tokenizer")) + _steps(backend.get("decoder"))}
    if model.get("byte_fallback"):
        return "llama"
    if "ByteLevel" in kinds:
        return "gpt2"
    raise ConfigError(SOURCE_SETTING, "a BPE tokenizer that is neither byte-level nor falls back to bytes has no "
                      "GGUF writer in ramen", "GGUF export writes byte-level and SentencePiece-style BPE")


def _adds_space_prefix(backend: dict) -> bool:
    """Whether a SentencePiece-style tokenizer puts ▁ before the text (llama.cpp's add_space_prefix)."""
    for step in _steps(backend.get("normalizer")):
        if step["type"] == "Prepend" and step.get("prepend") == SENTENCEPIECE_SPACE:
            return True
    return any(step["type"] == "Metaspace" and step.get("prepend_scheme", "always") != "never"
               for step in _steps(backend.get("pre_tokenizer")))


def _merge_scores(tokens: list[str], merges: list[str]) -> list[float]:
    """SentencePiece scores that reproduce the merge order: llama.cpp's llama tokenizer joins the
    neighbours whose joint token scores highest, so a token made by merge r scores -(r + 1) (earlier
    merges higher). A single character is never a join's result (0); a longer token no merge makes
    scores below every merge, so that llama.cpp joins into it last if ever."""
    rank = {}
    for index, merge in enumerate(merges):
        rank.setdefault(merge.replace(" ", "", 1), index)
    unmade = -(len(merges) + 1.0)
    return [-(rank[token] + 1.0) if token in rank else 0.0 if len(token) == 1 else unmade for token in tokens]


def _adds(tokenizer, token_id: int | None, first: bool) -> bool:
    """Whether the tokenizer puts ``token_id`` first (BOS) or last (EOS) of an encoded text."""
    if token_id is None:
        return False
    ids = tokenizer("a")["input_ids"]
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    return len(ids) > len(plain) and ids[0 if first else -1] == token_id


def write_tokenizer(writer, tokenizer, rows: int, pre: str | None) -> str:
    """The tokenizer's keys; its kind. ``rows``: the model's vocabulary rows (rows past the
    tokenizer's tokens get placeholder tokens, as llama.cpp needs one token per row)."""
    import gguf

    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    kind = tokenizer_kind(backend)
    if len(tokenizer) > rows:
        raise ConfigError(SOURCE_SETTING, f"the tokenizer has {len(tokenizer)} tokens but the model {rows} rows",
                          "export the model with the tokenizer it was trained with")
    added = {token["id"]: token for token in backend.get("added_tokens", [])}
    tokens, types = [], []
    unk = tokenizer.unk_token
    for index in range(rows):
        if index >= len(tokenizer):
            tokens.append(f"[PAD{index}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        token = added[index]["content"] if index in added else tokenizer.convert_ids_to_tokens(index)
        tokens.append(token)
        if token == unk and unk is not None:
            types.append(gguf.TokenType.UNKNOWN)
        elif index in added:
            types.append(gguf.TokenType.CONTROL if added[index]["special"] else gguf.TokenType.USER_DEFINED)
        elif kind == "llama" and len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in backend["model"]["merges"]]
    writer.add_tokenizer_model(kind)
    if kind == "gpt2":
        if pre is None:
            raise ConfigError(PRE_SETTING, "a byte-level BPE tokenizer needs the source's pre-tokenizer name",
                              "give the source (source.model) or set gguf.pre")
        writer.add_tokenizer_pre(pre)
    else:
        writer.add_tokenizer_pre("default")
        writer.add_add_space_prefix(_adds_space_prefix(backend))
        writer.add_token_scores(_merge_scores(tokens, merges))
    writer.add_token_list(tokens)
    writer.add_token_types([int(t) for t in types])
    writer.add_token_merges(merges)
    ids = {role: getattr(tokenizer, f"{role}_token_id", None) for role in ("bos", "eos", "unk", "pad")}
    for role, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                      ("unk", writer.add_unk_token_id), ("pad", writer.add_pad_token_id)):
        if ids[role] is not None:
            add(ids[role])
    writer.add_add_bos_token(_adds(tokenizer, ids["bos"], first=True))
    writer.add_add_eos_token(_adds(tokenizer, ids["eos"], first=False))
    if isinstance(tokenizer.chat_template, str):
        writer.add_chat_template(tokenizer.chat_template)
    return kind


# --- the model -----------------------------------------------------------------------------------


def _refuse(problem: str, fix: str = "") -> ConfigError:
    return ConfigError(SOURCE_SETTING, problem, fix or "GGUF export writes this architecture only in its plain form")


def check_layout(config) -> str:
    """The GGUF architecture of a Hugging Face config, having refused what the file would get wrong."""
    refusal = layout_refusal(config.to_dict())
    if refusal is not None:
        raise _refuse(refusal, "leave the GGUF target out for this source")
    return GGUF_ARCHITECTURES[config.model_type]


def _head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def write_hyperparameters(writer, config, file_type) -> None:
    head_dim = _head_dim(config)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(int(head_dim * getattr(config, "partial_rotary_factor", 1.0)))
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    if config.model_type in ("qwen3", "gemma2") or head_dim != config.hidden_size // config.num_attention_heads:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if config.model_type == "gemma2" and getattr(config, "sliding_window", None):
        writer.add_sliding_window(config.sliding_window)
    if config.model_type == "gemma2":
        writer.add_attn_logit_softcapping(config.attn_logit_softcapping or 0.0)
        writer.add_final_logit_softcapping(config.final_logit_softcapping or 0.0)
    writer.add_file_type(file_type)


def _rotary_rows(weights: np.ndarray, heads: int) -> np.ndarray:
    """Q or K rows reordered for llama.cpp's llama rotary embedding, which rotates neighbouring
    pairs of a head where Hugging Face's rotates its two halves."""
    return (weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def _weights(model_dir: Path):
    """Every tensor of the directory's safetensors files, one at a time, as float32 numpy."""
    from safetensors import safe_open

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ConfigError(SOURCE_SETTING, f"{model_dir} holds no safetensors weights", "export the model again")
    for file in files:
        with safe_open(str(file), framework="pt") as tensors:
            for name in tensors.keys():
                yield name, tensors.get_tensor(name).float().numpy()


def gguf_tensor_type(dtype: str):
    import gguf

    return {"f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
            "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
            "bf16": (gguf.GGMLQuantizationType.BF16, gguf.LlamaFileType.MOSTLY_BF16)}[dtype]


def write_tensors(writer, model_dir: Path, config, architecture: str, dtype: str) -> int:
    """The weights under GGUF names; how many were written."""
    import gguf

    arch = next(a for a, name in gguf.MODEL_ARCH_NAMES.items() if name == architecture)
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    qtype, _ = gguf_tensor_type(dtype)
    tied = getattr(config, "tie_word_embeddings", False)
    count = 0
    for name, values in _weights(model_dir):
        if name == "lm_head.weight" and tied:
            continue  # llama.cpp reads a missing output.weight as tied to token_embd
        base, _, suffix = name.rpartition(".")
        mapped = names.get_name(base)
        if mapped is None:
            raise _refuse(f"weight '{name}' has no place in a GGUF {architecture} file")
        if architecture == "llama" and name.endswith("q_proj.weight"):
            values = _rotary_rows(values, config.num_attention_heads)
        elif architecture == "llama" and name.endswith("k_proj.weight"):
            values = _rotary_rows(values, config.num_key_value_heads)
        elif architecture == "gemma2" and name.endswith("norm.weight"):
            values = values + 1.0  # Gemma multiplies by 1 + weight; llama.cpp by the stored weight
        # Norms and biases stay f32, as llama.cpp's own files keep them.
        if values.ndim == 1 or dtype == "f32":
            writer.add_tensor(f"{mapped}.{suffix}", np.ascontiguousarray(values, dtype=np.float32))
        elif dtype == "f16":
            writer.add_tensor(f"{mapped}.{suffix}", values.astype(np.float16))
        else:
            writer.add_tensor(f"{mapped}.{suffix}", gguf.quants.quantize(values, qtype), raw_dtype=qtype)
        count += 1
    return count


def write_gguf(model_dir: str | os.PathLike, out_path: str | os.PathLike, *, dtype: str = "f16",
               source: str | os.PathLike | None = None, pre: str | None = None, name: str | None = None) -> dict:
    """Write the exported causal LM in ``model_dir`` (config, safetensors, tokenizer) as the GGUF file
    ``out_path`` (atomically). ``pre`` (setting gguf.pre) names llama.cpp's pre-tokenizer; left out,
    it is the ``source``'s (source.model: a GGUF file's own, or named from a Hugging Face
    tokenizer's). A summary: architecture, tokenizer kind, pre-tokenizer, tensors, dtype."""
    import gguf
    from transformers import AutoConfig, AutoTokenizer

    if dtype not in DTYPES:
        raise ConfigError(DTYPE_SETTING, f"'{dtype}' is not a GGUF dtype ramen writes", f"one of {', '.join(DTYPES)}")
    model_dir = Path(model_dir)
    config = AutoConfig.from_pretrained(model_dir)
    architecture = check_layout(config)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    backend_kind = tokenizer_kind(json.loads(tokenizer.backend_tokenizer.to_str()))
    if pre is None and backend_kind == "gpt2":
        if source is None:
            raise ConfigError(PRE_SETTING, "no source to take the pre-tokenizer name from", "set gguf.pre")
        pre = source_pre_tokenizer(source)
    _, file_type = gguf_tensor_type(dtype)
    with atomic_path(out_path) as tmp:
        writer = gguf.GGUFWriter(str(tmp), architecture)
        writer.add_name(name or model_dir.name)
        write_hyperparameters(writer, config, file_type)
        kind = write_tokenizer(writer, tokenizer, config.vocab_size, pre)
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        tensors = write_tensors(writer, model_dir, config, architecture, dtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return {"architecture": architecture, "model_type": config.model_type, "tokenizer": kind,
            "pre": pre if kind == "gpt2" else None, "tensors": tensors, "dtype": dtype}
