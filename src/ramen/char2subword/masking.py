"""Dynamic masked LM at the character level (§3.2).

``mask_prob`` of the subword tokens are chosen (at least one per sequence, as in
:func:`ramen.training.batches.mask_tokens`); each character of a chosen token becomes the mask
symbol with probability 0.8, a random character with 0.1, and stays with 0.1. The
model predicts the chosen tokens' subword ids.
"""

from __future__ import annotations

import numpy as np
import torch

from ramen.char2subword.module import MASK, PAD, SPECIAL_SYMBOLS
from ramen.modeling.bilingual import IGNORE_INDEX


def choose_tokens(token_ids: np.ndarray, maskable: np.ndarray, rng: np.random.Generator,
                  mask_prob: float) -> tuple[np.ndarray, np.ndarray]:
    """(chosen, labels): the positions to predict and their token ids (IGNORE_INDEX elsewhere)."""
    scores = rng.random(token_ids.shape)
    scores[~maskable] = 2.0
    chosen = (scores < mask_prob) & maskable
    rows = np.arange(len(token_ids))
    first = scores.argmin(axis=1)
    chosen[rows, first] |= maskable[rows, first]
    return chosen, np.where(chosen, token_ids, IGNORE_INDEX)


def corrupt_characters(char_ids: torch.Tensor, generator: torch.Generator, vocab_size: int,
                       mask_share: float = 0.8, random_share: float = 0.1) -> torch.Tensor:
    """A copy of (n, M) character ids where each real character is masked, randomised or kept."""
    action = torch.rand(char_ids.shape, generator=generator)
    real = char_ids != PAD
    out = char_ids.clone()
    out[real & (action < mask_share)] = MASK
    randomise = real & (action >= mask_share) & (action < mask_share + random_share)
    first_character = len(SPECIAL_SYMBOLS)
    random_ids = torch.randint(first_character, vocab_size, char_ids.shape, generator=generator)
    out[randomise] = random_ids[randomise]
    return out
