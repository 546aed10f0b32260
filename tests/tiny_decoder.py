"""A tiny decoder source built in the tests: a byte-level BPE tokenizer with chat markers and a
Llama-layout causal LM with random weights (tied or untied output layer), or one of the other
families users adapt (:func:`tiny_family`)."""

from __future__ import annotations

import json
from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
                 "<|im_end|>\n{% endfor %}")
ENGLISH = [
    "The cat sits on the mat.", "A dog runs in the park with a ball.", "Two men are playing football.",
    "The house is red and the door is blue.", "She reads a book under the tree.",
    "Children are swimming in the lake.", "A woman sells fruit at the market.",
]


def build_byte_tokenizer_dir(path: Path, lines=ENGLISH, vocab_size: int = 300, bos: bool = True) -> Path:
    """A byte-level BPE source tokenizer; ``bos``: it prepends <|endoftext|> like Llama prepends BOS."""
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(vocab_size=vocab_size, special_tokens=[AddedToken(t, special=True) for t in SPECIALS],
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(list(lines) * 3, trainer)
    if bos:
        bos_id = tokenizer.token_to_id(SPECIALS[0])
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{SPECIALS[0]} $A", pair=f"{SPECIALS[0]} $A $B", special_tokens=[(SPECIALS[0], bos_id)])
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=SPECIALS[0], eos_token=SPECIALS[2],
                                      pad_token=SPECIALS[0], extra_special_tokens=[SPECIALS[1]],
                                      model_max_length=128)
    wrapped.chat_template = CHAT_TEMPLATE
    path.mkdir(parents=True, exist_ok=True)
    wrapped.save_pretrained(path)
    return path


def tiny_llama(vocab_size: int, *, tie: bool = True, seed: int = 0, layers: int = 2, hidden: int = 16):
    """A random LlamaForCausalLM of ``vocab_size`` rows."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=128, tie_word_embeddings=tie, bos_token_id=0, eos_token_id=2,
                         pad_token_id=None)
    return LlamaForCausalLM(config).eval()


# Causal LM families users adapt, each a tiny random model from transformers' own config class.
FAMILIES = ["llama-tied", "llama-untied", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "olmo2",
            "biogpt"]


def tiny_family(name: str, vocab_size: int, *, seed: int = 0, layers: int = 2, hidden: int = 32,
                softcap: float = 0.3):
    """A random causal LM of family ``name`` (FAMILIES) over ``vocab_size`` rows. Every parameter is
    perturbed off its initial value (zero biases, unit norms), so a weight that an export drops or a
    layout that is not reproduced shows in the logits; ``softcap``: Gemma's final logit cap, small
    enough to bend logits of this size."""
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    shapes = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, bos_token_id=0,
                  eos_token_id=2, pad_token_id=0)
    head_dim = hidden // 4
    if name in ("llama-tied", "llama-untied"):
        config = tf.LlamaConfig(**shapes, tie_word_embeddings=name == "llama-tied")
    elif name == "mistral":
        config = tf.MistralConfig(**shapes, sliding_window=6, tie_word_embeddings=False)
    elif name == "qwen2":  # biases on q, k and v
        config = tf.Qwen2Config(**shapes, tie_word_embeddings=True)
    elif name == "qwen3":  # RMS norms on q and k
        config = tf.Qwen3Config(**shapes, head_dim=head_dim, tie_word_embeddings=False)
    elif name == "gemma":  # sqrt(d)-scaled embeddings, tied
        config = tf.GemmaConfig(**shapes, head_dim=head_dim)
    elif name == "gemma2":  # sqrt(d)-scaled embeddings, capped attention scores and logits, tied
        config = tf.Gemma2Config(**shapes, head_dim=head_dim, query_pre_attn_scalar=head_dim, sliding_window=6,
                                 final_logit_softcapping=softcap, attn_logit_softcapping=5.0)
    elif name == "gemma3":  # Gemma3ForCausalLM, the text model: scaled embeddings, capped logits, tied
        config = tf.Gemma3TextConfig(**shapes, head_dim=head_dim, query_pre_attn_scalar=head_dim, sliding_window=6,
                                     layer_types=[("sliding_attention", "full_attention")[i % 2] for i in range(layers)],
                                     final_logit_softcapping=softcap)
    elif name == "biogpt":  # sqrt(d)-scaled embeddings (scale_embedding), learned positions, tied
        config = tf.BioGptConfig(**shapes, scale_embedding=True)
    elif name == "phi3":  # fused qkv_proj and gate_up_proj
        config = tf.Phi3Config(**shapes, tie_word_embeddings=False)
    elif name == "olmo2":  # norms after attention and MLP, q/k norms over all heads
        config = tf.Olmo2Config(**shapes, tie_word_embeddings=False)
    else:
        raise ValueError(name)
    model = tf.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.02)
    return model.eval()


def build_tiny_decoder_dir(path: Path, *, tie: bool = True, seed: int = 0) -> Path:
    """A model directory: byte-level tokenizer and a tiny Llama over its vocabulary."""
    build_byte_tokenizer_dir(path)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    tiny_llama(len(tokenizer), tie=tie, seed=seed).save_pretrained(path)
    return path


def write_llama_gguf(model, tokenizer, path) -> None:
    """Write a Llama-layout model and its byte-level BPE as an fp32 GGUF file, with the tensor names
    and the rotary permutation of Q and K that llama.cpp's converter uses."""
    import gguf

    config = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocab = tokenizer.get_vocab()
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    merges = [m if isinstance(m, str) else " ".join(m) for m in backend["model"]["merges"]]
    special = set(tokenizer.all_special_tokens)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)

    def permute(weights, heads):
        return (weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
                .swapaxes(1, 2).reshape(weights.shape))

    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        values = tensor.detach().float().numpy()
        if name.endswith("q_proj.weight"):
            values = permute(values, config.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            values = permute(values, config.num_key_value_heads)
        base, _, suffix = name.rpartition(".")
        writer.add_tensor(f"{names.get_name(base)}.{suffix}", values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def build_sentencepiece_tokenizer_dir(path: Path, lines=ENGLISH, vocab_size: int = 400) -> Path:
    """A Llama-2-style source tokenizer: SentencePiece BPE with byte fallback, trained by the
    sentencepiece package and turned into a fast tokenizer the way transformers converts Llama's
    (merges ranked by piece score; the legacy Prepend + Replace normaliser; BOS prepended). The
    SentencePiece model is kept beside it as sentencepiece.model, so tests can compare with it."""
    import io

    import sentencepiece
    from tokenizers import normalizers, processors
    from transformers import LlamaTokenizer, PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import import_protobuf
    from transformers.tokenization_utils_base import generate_merges

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(list(lines) * 20), model_writer=model, model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, split_digits=True,
        remove_extra_whitespaces=False, normalization_rule_name="identity", minloglevel=2)
    proto = import_protobuf().ModelProto()
    proto.ParseFromString(model.getvalue())
    vocab = {piece.piece: index for index, piece in enumerate(proto.pieces)}
    merges = generate_merges(vocab, {piece.piece: piece.score for piece in proto.pieces})
    backend = LlamaTokenizer(vocab=vocab, merges=merges).backend_tokenizer
    backend.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    backend.pre_tokenizer = None
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", 1)])
    wrapped = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
                                      unk_token="<unk>", model_max_length=128)
    wrapped.chat_template = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
    path.mkdir(parents=True, exist_ok=True)
    wrapped.save_pretrained(path)
    (path / "sentencepiece.model").write_bytes(model.getvalue())
    return path


# --- GGUF export (tests/unit/test_gguf_export.py, tools/check_gguf.py) ---


def tiny_causal_source(layout: str, vocab_size: int):
    """A random causal LM of ``layout`` (hidden 32, two blocks, grouped-query attention)."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    shapes = dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    if layout == "llama-tied":
        return tf.LlamaForCausalLM(tf.LlamaConfig(**shapes, tie_word_embeddings=True)).eval()
    if layout == "llama-untied":
        return tf.LlamaForCausalLM(tf.LlamaConfig(**shapes, tie_word_embeddings=False)).eval()
    if layout == "mistral":
        return tf.MistralForCausalLM(tf.MistralConfig(**shapes, sliding_window=None,
                                                      tie_word_embeddings=False)).eval()
    if layout == "qwen2":
        return tf.Qwen2ForCausalLM(tf.Qwen2Config(**shapes, tie_word_embeddings=True)).eval()
    if layout == "qwen3":
        # head_dim 128, as every Qwen3 has: transformers' GGUF loader does not read it from the file.
        return tf.Qwen3ForCausalLM(tf.Qwen3Config(**shapes, head_dim=128, tie_word_embeddings=True)).eval()
    if layout == "phi3":  # fused qkv_proj and gate_up_proj
        return tf.Phi3ForCausalLM(tf.Phi3Config(**shapes, bos_token_id=0, eos_token_id=2, pad_token_id=0,
                                                tie_word_embeddings=False)).eval()
    if layout.startswith("gemma2"):
        # Gemma 2 2B's and 9B's head size, query scale and caps, which transformers' GGUF loader assumes;
        # "gemma2-capped": a final cap small enough to bend these logits (llama.cpp reads it).
        capped = dict(final_logit_softcapping=0.3, attn_logit_softcapping=5.0) if layout == "gemma2-capped" else {}
        model = tf.Gemma2ForCausalLM(tf.Gemma2Config(**shapes, head_dim=256, query_pre_attn_scalar=256,
                                                     sliding_window=6, pad_token_id=0, **capped)).eval()
        with torch.no_grad():  # norms off their zero start, so that a lost +1 shows
            for name, param in model.named_parameters():
                if name.endswith("norm.weight"):
                    param.add_(0.1 * torch.randn_like(param))
        return model
    raise ValueError(layout)


def split_like_qwen2(tokenizer_dir: Path) -> None:
    """Give a byte-level tokenizer Qwen2's pre-tokenizer (its regex, then bytes), as a Qwen source's has:
    transformers' GGUF loader splits a Qwen file's text that way whatever the file's pre-tokenizer."""
    from transformers import Qwen2TokenizerFast

    qwen = Qwen2TokenizerFast(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")])
    tokenizer_json = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    tokenizer_json["pre_tokenizer"] = json.loads(qwen.backend_tokenizer.to_str())["pre_tokenizer"]
    (tokenizer_dir / "tokenizer.json").write_text(json.dumps(tokenizer_json))


def export_tiny_side(tmp_path: Path, layout: str, tokenizer_dir: Path) -> Path:
    """A side exported the way rule train_bilingual exports it (BilingualCausalLM.export_language):
    the source's blocks and the foreign tokenizer's own random tables."""
    import shutil

    import torch
    from transformers import AutoTokenizer

    from ramen.modeling.causal import BilingualCausalLM, ForeignTables

    source_dir = build_byte_tokenizer_dir(tmp_path / "source")
    if layout.startswith("qwen"):
        split_like_qwen2(source_dir)
        tokenizer_dir = Path(shutil.copytree(tokenizer_dir, tmp_path / "foreign_tokenizer"))
        split_like_qwen2(tokenizer_dir)
    source_tokenizer = AutoTokenizer.from_pretrained(source_dir)
    model = tiny_causal_source(layout, len(source_tokenizer))
    model.save_pretrained(tmp_path / "source")
    foreign = AutoTokenizer.from_pretrained(tokenizer_dir)
    generator = torch.Generator().manual_seed(1)
    rows = len(foreign)
    tied = model.config.tie_word_embeddings
    tables = ForeignTables(0.5 * torch.randn(rows, 32, generator=generator),
                           None if tied else 0.5 * torch.randn(rows, 32, generator=generator))
    BilingualCausalLM(model, "en", {"xx": tables}).export_language("xx", foreign, tmp_path / "xx")
    return tmp_path / "xx"
