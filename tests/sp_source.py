"""A tiny SentencePiece-style decoder source built in the tests, without a download: a SentencePiece
BPE model with byte fallback trained on the demo's English text, converted by transformers' own
slow-to-fast converter, in the layouts real sources ship (the directory holds tokenizer.model and
tokenizer.json, as theirs do):

    llama2   normaliser Prepend('▁') + Replace(' ', '▁'), no pre-tokenizer (Llama-2, TinyLlama, Phi-3)
    mistral  Metaspace pre-tokenizer, prepend_scheme 'first' (Mistral, newer Llama-2 conversions)
    gemma    Replace(' ', '▁') normaliser, no dummy prefix (Gemma)

``chat=True`` adds Phi-3's chat markers as special tokens after the vocabulary and its chat template.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "resources" / "demo"
PHI3_SPECIALS = ["<|user|>", "<|assistant|>", "<|end|>", "<|system|>"]
PHI3_TEMPLATE = ("{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}")


def english_lines(captions: int = 3000) -> list[str]:
    """The demo's English: its background text's lines and the first Multi30k training captions."""
    background = (ROOT / "en" / "lee_background.txt").read_text(encoding="utf-8").splitlines()
    with gzip.open(ROOT / "parallel" / "multi30k.train.en.gz", "rt", encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for _, line in zip(range(captions), handle)]
    return [line.strip() for line in background + lines if line.strip()]


@functools.lru_cache(maxsize=4)
def sentencepiece_model(vocab_size: int = 800) -> bytes:
    """A SentencePiece BPE model with byte fallback (ids 0-2: <unk>, <s>, </s>), as Llama-2's is made."""
    import sentencepiece

    out = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(english_lines()), model_writer=out, model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, character_coverage=1.0, split_digits=True, allow_whitespace_only_pieces=True,
        remove_extra_whitespaces=False, normalization_rule_name="identity", unk_id=0, bos_id=1, eos_id=2,
        pad_id=-1, num_threads=1, minloglevel=2)
    return out.getvalue()


def _converted_spec(model: bytes) -> dict:
    """tokenizer.json of transformers' LlamaTokenizer converted from the SentencePiece model."""
    from transformers import LlamaTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "tokenizer.model").write_bytes(model)
        tokenizer = LlamaTokenizer.from_pretrained(tmp)
        if not (len(tokenizer) > 259 and "<0xCE>" in tokenizer.get_vocab()):
            raise AssertionError("the converted tokenizer lost the SentencePiece vocabulary")
        return json.loads(tokenizer.backend_tokenizer.to_str())


def build_sp_source_dir(path: Path, style: str = "llama2", *, chat: bool = False, vocab_size: int = 800) -> Path:
    """A tokenizer directory of a SentencePiece-style source in ``style`` (see the module docstring)."""
    from tokenizers import AddedToken, Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    model = sentencepiece_model(vocab_size)
    spec = _converted_spec(model)
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    strip = {"type": "Strip", "content": " ", "start": 1, "stop": 0}
    if style == "llama2":
        spec["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, replace]}
        spec["pre_tokenizer"] = None
    elif style == "gemma":
        spec["normalizer"], spec["pre_tokenizer"] = replace, None
        spec["decoder"]["decoders"] = [d for d in spec["decoder"]["decoders"] if d != strip]
    elif style != "mistral":
        raise ValueError(f"unknown style {style!r}")
    backend = Tokenizer.from_str(json.dumps(spec))
    backend.post_processor = processors.TemplateProcessing(  # BOS first, as Llama-2 adds it
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", backend.token_to_id("<s>"))])
    if chat:
        backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in PHI3_SPECIALS])
    wrapped = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                      pad_token="<unk>", model_max_length=4096,
                                      extra_special_tokens=PHI3_SPECIALS if chat else None)
    if chat:
        wrapped.chat_template = PHI3_TEMPLATE
    if path.exists():
        shutil.rmtree(path)
    wrapped.save_pretrained(path)
    (path / "tokenizer.model").write_bytes(model)
    return path
