"""Finding repeated items in a stream too large to hold: hash-partitioned, on disk.

Each item is represented by an 8-byte hash (its position in the stream is
implicit). Hashes are spilled in large blocks to 256 bucket files chosen by
their top byte; afterwards each bucket is deduplicated in memory with numpy.
Peak memory is the block buffer, one bucket (16 bytes × items / 256) and a
one-bit-per-item mask of the repeats, instead of a Python set (about 90 bytes
per item: 20M sentences would need ~1.8 GB). An external sort would need the
same disk space and a merge pass in Python; partitioning by hash needs neither.
With 64-bit hashes, a false repeat among 10^9 distinct items has probability
about 3·10^-2; among 10^8, 3·10^-4.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np

BUCKETS = 256
_RECORD = np.dtype([("hash", "<u8"), ("index", "<u8")])


class HashDeduplicator:
    """Collect 8-byte hashes in stream order; :meth:`repeats` marks every non-first occurrence."""

    def __init__(self, workdir: str | os.PathLike, block_items: int = 1 << 18):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.block_bytes = 8 * block_items
        self.count = 0
        self._flushed = 0
        self._buffer = bytearray()
        self._files = contextlib.ExitStack()
        self._handles: dict[int, object] = {}

    def add(self, digests: bytes) -> None:
        """Append the hashes of the next items (8 bytes each, in stream order)."""
        if len(digests) % 8:
            raise ValueError("digests must be a whole number of 8-byte hashes")
        self._buffer += digests
        self.count += len(digests) // 8
        if len(self._buffer) >= self.block_bytes:
            self._flush()

    def _bucket_path(self, bucket: int) -> Path:
        return self.workdir / f"bucket-{bucket:03d}.bin"

    def _flush(self) -> None:
        if not self._buffer:
            return
        hashes = np.frombuffer(bytes(self._buffer), dtype="<u8")
        self._buffer = bytearray()
        records = np.empty(len(hashes), dtype=_RECORD)
        records["hash"] = hashes
        records["index"] = np.arange(self._flushed, self._flushed + len(hashes), dtype=np.uint64)
        self._flushed += len(hashes)
        buckets = (hashes >> np.uint64(56)).astype(np.intp)
        order = np.argsort(buckets, kind="stable")  # stable: stream order within each bucket
        bounds = np.searchsorted(buckets[order], np.arange(BUCKETS + 1))
        for bucket in range(BUCKETS):
            start, end = bounds[bucket], bounds[bucket + 1]
            if start < end:
                if bucket not in self._handles:
                    self._handles[bucket] = self._files.enter_context(open(self._bucket_path(bucket), "wb"))
                records[order[start:end]].tofile(self._handles[bucket])

    def repeats(self) -> RepeatMask:
        """Which items repeat an earlier hash (every occurrence after the first)."""
        if not self._flushed:  # everything still fits in one block: no files needed
            return RepeatMask.from_bools(_repeated(np.frombuffer(bytes(self._buffer), dtype="<u8")))
        self._flush()
        self._files.close()
        mask = RepeatMask(self.count)
        for bucket in range(BUCKETS):
            path = self._bucket_path(bucket)
            if not path.exists():
                continue
            records = np.fromfile(path, dtype=_RECORD)
            mask.set(records["index"][_repeated(records["hash"])])
            path.unlink()
        return mask


class RepeatMask:
    """A bit per item: set for repeats."""

    def __init__(self, size: int):
        self.size = size
        self.bits = np.zeros((size + 7) // 8, dtype=np.uint8)

    @classmethod
    def from_bools(cls, flags: np.ndarray) -> RepeatMask:
        mask = cls(len(flags))
        mask.set(np.flatnonzero(flags))
        return mask

    def set(self, indices: np.ndarray) -> None:
        indices = np.asarray(indices, dtype=np.int64)
        np.bitwise_or.at(self.bits, indices >> 3, (1 << (indices & 7)).astype(np.uint8))

    def __len__(self) -> int:
        return self.size

    def count(self) -> int:
        return int(np.bitwise_count(self.bits).sum())

    def flags(self, start: int, stop: int) -> np.ndarray:
        """The bits of items ``start`` to ``stop`` as booleans."""
        stop = min(stop, self.size)
        chunk = np.unpackbits(self.bits[start >> 3:(stop + 7) >> 3], bitorder="little")
        return chunk[start & 7:(start & 7) + stop - start].astype(bool)


def _repeated(hashes: np.ndarray) -> np.ndarray:
    """True for every hash equal to an earlier one in ``hashes`` (which is in stream order)."""
    # return_index gives each value's first position (np.unique sorts stably for it).
    _, first = np.unique(hashes, return_index=True)
    repeated = np.ones(len(hashes), dtype=bool)
    repeated[first] = False
    return repeated
