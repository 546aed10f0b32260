"""Masked-LM batches drawn from (seed, step): windows of the encoded corpus, BERT's dynamic masking.

Every random choice is made by a generator seeded from (seed, step, stream), so a step's
batches are a pure function of those numbers and a resumed run draws exactly what an
uninterrupted one would have drawn.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from ramen.modeling.bilingual import IGNORE_INDEX, MaskedBatch
from ramen.vocab.encode import TokenStream


@dataclass
class SpecialIds:
    """Token ids a language's tokenizer reserves; masking and padding need them."""

    cls: int
    sep: int
    pad: int
    mask: int
    all_special: list[int]
    vocab_size: int

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "SpecialIds":
        cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        sep_id = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
        return cls(cls=cls_id, sep=sep_id, pad=tokenizer.pad_token_id, mask=tokenizer.mask_token_id,
                   all_special=sorted(set(tokenizer.all_special_ids)), vocab_size=len(tokenizer))


def step_rng(seed: int, step: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, step, stream])


def sample_blocks(stream: TokenStream, rng: np.random.Generator, count: int, length: int) -> np.ndarray:
    """``count`` windows of ``length`` token ids starting at random sentence starts.

    A window runs on across sentence boundaries, as BERT's packed inputs do; one
    that reaches the end of the corpus is shorter, marked by -1 padding.
    """
    starts = stream.offsets[rng.integers(0, stream.num_sentences, size=count)]
    blocks = np.full((count, length), -1, dtype=np.int64)
    for row, start in enumerate(starts):
        window = stream.ids[start:start + length]
        blocks[row, :len(window)] = window
    return blocks


@functools.lru_cache(maxsize=16)
def _replacement_candidates(vocab_size: int, special: tuple[int, ...]) -> np.ndarray:
    # Cached: with a 30k vocabulary, recomputing the set difference is a visible share of a CPU batch.
    candidates = np.setdiff1d(np.arange(vocab_size), special)
    candidates.flags.writeable = False
    return candidates


def mask_tokens(input_ids: np.ndarray, maskable: np.ndarray, special: SpecialIds, rng: np.random.Generator,
                mask_prob: float) -> tuple[np.ndarray, np.ndarray]:
    """BERT's dynamic masking: choose ``mask_prob`` of maskable tokens (at least one per row);
    replace 80% with [MASK], 10% with a random non-special token, keep 10%."""
    scores = rng.random(input_ids.shape)
    scores[~maskable] = 2.0
    chosen = (scores < mask_prob) & maskable
    first = scores.argmin(axis=1)
    rows = np.arange(len(input_ids))
    chosen[rows, first] |= maskable[rows, first]
    labels = np.where(chosen, input_ids, IGNORE_INDEX)
    action = rng.random(input_ids.shape)
    masked = input_ids.copy()
    masked[chosen & (action < 0.8)] = special.mask
    randomise = chosen & (action >= 0.8) & (action < 0.9)
    candidates = _replacement_candidates(special.vocab_size, tuple(special.all_special))
    masked[randomise] = candidates[rng.integers(0, len(candidates), size=int(randomise.sum()))]
    return masked, labels


def token_windows(stream: TokenStream, special: SpecialIds, rng: np.random.Generator, count: int,
                  seq_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[CLS] window [SEP] sequences, padded: (token ids, attention mask, positions of corpus tokens)."""
    body = sample_blocks(stream, rng, count, seq_len - 2)
    lengths = (body >= 0).sum(axis=1)
    ids = np.full((count, seq_len), special.pad, dtype=np.int64)
    ids[:, 0] = special.cls
    for row, length in enumerate(lengths):
        ids[row, 1 : 1 + length] = body[row, :length]
        ids[row, 1 + length] = special.sep
    positions = np.arange(seq_len)[None, :]
    return ids, positions < (lengths[:, None] + 2), (positions >= 1) & (positions <= lengths[:, None])


def make_batch(stream: TokenStream, special: SpecialIds, rng: np.random.Generator, count: int,
               seq_len: int, mask_prob: float) -> MaskedBatch:
    """[CLS] window [SEP] sequences, padded, with dynamic MLM masking."""
    input_ids, attention, maskable = token_windows(stream, special, rng, count, seq_len)
    masked, labels = mask_tokens(input_ids, maskable, special, rng, mask_prob)
    return MaskedBatch(input_ids=torch.from_numpy(masked), attention_mask=torch.from_numpy(attention.astype(np.int64)),
                       labels=torch.from_numpy(labels))
