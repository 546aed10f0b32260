"""A tiny decoder source built in the tests: a byte-level BPE tokenizer with chat markers and a
Llama-layout causal LM with random weights (tied or untied output layer)."""

from __future__ import annotations

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
