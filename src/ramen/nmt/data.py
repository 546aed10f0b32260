"""NMT data: Moses tokenisation, a joint fastBPE vocabulary, encoded corpora and token-budget batches.

Text is Moses-tokenised (sacremoses), split into subwords by BPE codes learned with
fastBPE on both languages together (one shared vocabulary, as for the paper's
IWSLT and WMT systems), and mapped to ids. Translations are decoded the other
way: subwords joined, then Moses-detokenised, so BLEU is computed on plain text.
The frozen BERT reads the untokenised source with its own tokenizer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, pre_tokenizers
from tokenizers.models import BPE
from tqdm import tqdm

from ramen.modeling.architectures import register_architectures
from ramen.vocab.bpe import END_OF_WORD, build_vocabulary, count_symbols, learn_codes, read_codes
from ramen.errors import InputFormatError
from ramen.io import atomic_path, read_lines, write_lines

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_TOKENS = [PAD, UNK, BOS, EOS]
ENCODE_CHUNK = 4096


def moses_tokenize(lines: Iterable[str], lang: str) -> Iterator[str]:
    from sacremoses import MosesTokenizer

    tokenizer = MosesTokenizer(lang=lang)
    for line in lines:
        yield tokenizer.tokenize(line, escape=False, return_str=True)


class NmtTokenizer:
    """Moses tokenisation + BPE for both languages of a pair, and the way back."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self.bpe = Tokenizer.from_file(str(self.directory / "tokenizer.json"))
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = (self.bpe.token_to_id(t) for t in SPECIAL_TOKENS)
        self._moses: dict[str, object] = {}
        self._detok: dict[str, object] = {}

    def __len__(self) -> int:
        return self.bpe.get_vocab_size()

    def encode(self, lines: Sequence[str], lang: str) -> list[list[int]]:
        """Subword ids of each line, ending with the end-of-sentence id."""
        from sacremoses import MosesTokenizer

        moses = self._moses.setdefault(lang, MosesTokenizer(lang=lang))
        tokenized = [moses.tokenize(line, escape=False, return_str=True) for line in lines]
        return [encoding.ids + [self.eos_id] for encoding in self.bpe.encode_batch(tokenized)]

    def decode(self, ids: Sequence[int], lang: str) -> str:
        """Plain text of one id sequence (special tokens dropped, subwords joined, detokenised)."""
        from sacremoses import MosesDetokenizer

        detok = self._detok.setdefault(lang, MosesDetokenizer(lang=lang))
        words = self.bpe.decode([i for i in ids if i not in (self.pad_id, self.bos_id, self.eos_id)],
                                skip_special_tokens=False)
        return detok.detokenize(words.split())


def learn_vocabulary(source_path: str | os.PathLike, target_path: str | os.PathLike, source_lang: str,
                     target_lang: str, merges: int, out_dir: str | os.PathLike,
                     min_symbol_count: int = 1) -> dict:
    """Joint BPE of both sides of a parallel corpus, saved as ``codes`` and ``tokenizer.json``."""
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        tokenized = tmp / "tokenized.txt"
        write_lines(tokenized, tqdm(
            (line for path, lang in ((source_path, source_lang), (target_path, target_lang))
             for line in moses_tokenize(read_lines(path), lang)),
            desc="moses", unit=" lines", mininterval=10))
        learned = learn_codes(tokenized, merges, tmp / "codes")
        vocabulary = build_vocabulary(count_symbols(read_lines(tokenized)), read_codes(tmp / "codes"),
                                      SPECIAL_TOKENS, max_size=2**31 - 1, min_symbol_count=min_symbol_count)
        tokenized.unlink()
        token_to_id = {token: index for index, token in enumerate(vocabulary.tokens)}
        bpe = Tokenizer(BPE(vocab=token_to_id, merges=vocabulary.merges, unk_token=UNK,
                            end_of_word_suffix=END_OF_WORD))
        bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        bpe.decoder = decoders.BPEDecoder(suffix=END_OF_WORD)
        bpe.add_special_tokens(SPECIAL_TOKENS)
        bpe.save(str(tmp / "tokenizer.json"))
        stats = {"merges_learned": learned, "merges_kept": len(vocabulary.merges),
                 "vocab_size": len(vocabulary.tokens), "languages": [source_lang, target_lang]}
        (tmp / "stats.json").write_text(json.dumps(stats, indent=2))
    return stats


@dataclass
class EncodedText:
    """Token ids of many sentences in one flat array (sentence i is ids[offsets[i]:offsets[i+1]])."""

    ids: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.ids[self.offsets[index]:self.offsets[index + 1]]

    def save(self, path: str | os.PathLike) -> None:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as handle:
                np.savez(handle, ids=self.ids, offsets=self.offsets)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "EncodedText":
        with np.load(path) as data:
            return cls(ids=data["ids"], offsets=data["offsets"])


def encode_lines(lines: Iterable[str], encode_chunk, description: str = "encode") -> EncodedText:
    """Encode streamed lines chunk by chunk with ``encode_chunk(list[str]) -> list[list[int]]``."""
    pieces, lengths, chunk = [], [], []

    def flush():
        for ids in encode_chunk(chunk):
            pieces.append(np.asarray(ids, dtype=np.int32))
            lengths.append(len(ids))
        chunk.clear()

    for line in tqdm(lines, desc=description, unit=" lines", mininterval=10):
        chunk.append(line)
        if len(chunk) == ENCODE_CHUNK:
            flush()
    flush()
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
    return EncodedText(ids=ids, offsets=offsets)


def check_aligned(source_path, target_path) -> int:
    """Line count of a parallel pair; a length mismatch names both files."""
    source_count = sum(1 for _ in read_lines(source_path))
    target_count = sum(1 for _ in read_lines(target_path))
    if source_count != target_count:
        raise InputFormatError(target_path, min(source_count, target_count) + 1,
                               f"{source_count} lines in {source_path} but {target_count} here",
                               "the two sides of a parallel corpus must be line-aligned")
    return source_count


def encode_corpus(tokenizer: NmtTokenizer, path: str | os.PathLike, lang: str) -> EncodedText:
    return encode_lines(read_lines(path), lambda chunk: tokenizer.encode(chunk, lang), f"encode {Path(path).name}")


class FrozenBert:
    """A Hugging Face encoder used only for its last-layer states (no gradients, eval mode)."""

    def __init__(self, directory: str | os.PathLike, device: str = "cpu"):
        from transformers import AutoModel, AutoTokenizer

        register_architectures()
        self.tokenizer = AutoTokenizer.from_pretrained(directory)
        self.model = AutoModel.from_pretrained(directory).to(device).eval()
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)
        self.device = device
        self.dim = self.model.config.hidden_size
        self.pad_id = self.tokenizer.pad_token_id
        self.max_length = min(self.tokenizer.model_max_length, self.model.config.max_position_embeddings)

    def encode_corpus(self, path: str | os.PathLike) -> EncodedText:
        """BERT input ids of every line, [CLS] ... [SEP], truncated to the model's length."""
        def encode(chunk):
            return self.tokenizer(chunk, truncation=True, max_length=self.max_length)["input_ids"]

        return encode_lines(read_lines(path), encode, f"bert-encode {Path(path).name}")

    @torch.no_grad()
    def __call__(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Last-layer states and the padding mask (True at padding) of a padded id batch."""
        attention = ids.ne(self.pad_id)
        states = self.model(input_ids=ids.to(self.device), attention_mask=attention.to(self.device)).last_hidden_state
        return states, ~attention.to(self.device)


def pad_batch(rows: Sequence[np.ndarray], pad_id: int, prefix: int | None = None) -> torch.Tensor:
    """Right-padded LongTensor of rows, each optionally preceded by ``prefix``."""
    extra = 0 if prefix is None else 1
    out = torch.full((len(rows), max(len(r) for r in rows) + extra), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        if prefix is not None:
            out[i, 0] = prefix
        out[i, extra:extra + len(row)] = torch.from_numpy(row.astype(np.int64))
    return out


def token_batches(source_lengths: np.ndarray, target_lengths: np.ndarray, max_tokens: int,
                  rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """Index batches of similar length, each at most ``max_tokens`` padded tokens on either side.

    With ``rng`` the length order is broken among equal lengths and the batches
    are shuffled (training); without, batches follow the length order (decoding).
    """
    longest = np.maximum(source_lengths, target_lengths)
    if rng is None:
        order = np.argsort(longest, kind="stable")
    else:
        order = np.lexsort((rng.random(len(longest)), longest))
    batches, start = [], 0
    while start < len(order):
        end = start + 1
        # sorted ascending: the batch's padded size is its last element's length times its size
        while end < len(order) and longest[order[end]] * (end - start + 1) <= max_tokens:
            end += 1
        batches.append(order[start:end])
        start = end
    if rng is not None:
        rng.shuffle(batches)
    return batches
