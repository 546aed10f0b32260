"""How frozen weights are laid out below fp32 (``training.frozen_dtype``), without torch: the memory
plan (ramen.training.memory) counts them with these rules, the trainer (ramen.modeling.frozen)
builds them with the same ones.

NF4 (torchao's ``NF4Tensor``, QLoRA's format) stores two 4-bit codes a byte, an int8 scale per
block of :data:`NF4_BLOCK` values (double quantisation), a bf16 factor per group of ``scaler``
scales, and per tensor a bf16 mean of the scales and the 16-entry bf16 code book.
"""

from __future__ import annotations

NF4_BLOCK = 64
NF4_SCALER_BLOCK = 256  # QLoRA's; smaller where a tensor has fewer (or not a multiple of 256) blocks
NF4_CODEBOOK = 16
BF16 = 2


def nf4_scaler_block(numel: int) -> int | None:
    """The scales per double-quantisation group of a tensor of ``numel`` values (the largest power of
    two up to 256 that divides its blocks); None: it does not split into blocks and stays bf16."""
    if numel < NF4_BLOCK or numel % NF4_BLOCK:
        return None
    blocks, size = numel // NF4_BLOCK, NF4_SCALER_BLOCK
    while blocks % size:
        size //= 2
    return size


def nf4_bytes(numel: int) -> int:
    """Bytes of one weight of ``numel`` values held in NF4 (bf16 where it cannot be)."""
    scaler = nf4_scaler_block(numel)
    if scaler is None:
        return BF16 * numel
    blocks = numel // NF4_BLOCK
    return numel // 2 + blocks + BF16 * (blocks // scaler) + BF16 + BF16 * NF4_CODEBOOK
