"""A tiny decoder source built in the tests: a byte-level BPE tokenizer with chat markers and a
Llama-layout causal LM with random weights (tied or untied output layer)."""

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
