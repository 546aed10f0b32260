"""The second pass of corpus preparation: the candidate lines that are kept (not repeats, a
seeded uniform sample, a byte budget) copied to the outputs as bytes."""

from __future__ import annotations

import contextlib
import gzip
import io
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from ramen.data.dedup import RepeatMask


def _selection(repeats: RepeatMask, keep: int, seed: int, block: int) -> Iterator[np.ndarray]:
    """For each block of ``block`` candidate lines, the indices (within it) of the lines kept.

    Those are the lines not marked in ``repeats``, or a seeded uniform sample
    of ``keep`` of them: the number chosen from each block is hypergeometric,
    the positions inside it uniform, so the sample is uniform, exactly
    ``keep`` lines, in original order, and the same for the same seed.
    """
    unique_left = len(repeats) - repeats.count()
    needed = keep
    rng = np.random.default_rng(seed)
    for position in range(0, len(repeats), block):
        unique = np.flatnonzero(~repeats.flags(position, position + block))
        if needed == unique_left:  # everything left is kept
            chosen = unique
        else:
            take = int(rng.hypergeometric(len(unique), unique_left - len(unique), needed)) if needed else 0
            chosen = unique[np.sort(rng.choice(len(unique), take, replace=False))]
        unique_left -= len(unique)
        needed -= len(chosen)
        yield chosen


# A byte budget keeps the lines whose seeded random priority falls in the lowest
# of this many buckets that fit: the kept size is at most the budget and short
# of it by at most one bucket's share of the selected bytes.
_PRIORITY_BUCKETS = 1 << 16


def _priority_buckets(seed: int) -> Callable[[int], np.ndarray]:
    """The priority bucket of each candidate line, block after block (same for the same seed)."""
    rng = np.random.default_rng([seed, 1])  # independent of the sample's own random stream
    return lambda count: (rng.random(count) * _PRIORITY_BUCKETS).astype(np.intp)


def _budget_buckets(
    line_bytes: Path, repeats: RepeatMask, keep: int, seed: int, max_bytes: int, block: int
) -> int:
    """How many of the lowest priority buckets of the selected lines fit in ``max_bytes``.

    One pass over the lines' byte sizes (4 bytes each, no text): a histogram of
    bytes per bucket, whatever the corpus size.
    """
    bucket_of = _priority_buckets(seed)
    histogram = np.zeros(_PRIORITY_BUCKETS)
    with open(line_bytes, "rb") as sizes:
        for chosen in _selection(repeats, keep, seed, block):
            lengths = np.fromfile(sizes, dtype="<u4", count=block)
            buckets = bucket_of(len(lengths))
            histogram += np.bincount(buckets[chosen], weights=lengths[chosen], minlength=_PRIORITY_BUCKETS)
    return int(np.searchsorted(np.cumsum(histogram), max_bytes, side="right"))


class _Segments(io.RawIOBase):
    """The bytes of (file, offset, length) segments, in order, read as one file."""

    def __init__(self, segments: Iterable[tuple[Path, int, int]]):
        self._segments = iter(segments)
        self._handles: dict[Path, io.BufferedReader] = {}
        self._current, self._left = None, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all that is left if negative); fewer only at the end."""
        pieces, wanted = [], size
        while wanted:
            if not self._left:
                segment = next(self._segments, None)
                if segment is None:
                    break
                path, offset, self._left = segment
                if path not in self._handles:
                    self._handles[path] = open(path, "rb")
                self._current = self._handles[path]
                self._current.seek(offset)
            piece = self._current.read(self._left if wanted < 0 else min(wanted, self._left))
            if not piece:
                raise OSError(f"{self._current.name}: scratch file shorter than written (disk full?)")
            self._left -= len(piece)
            wanted -= len(piece) if wanted > 0 else 0
            pieces.append(piece)
        return b"".join(pieces)

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        super().close()


def _write_selected(
    candidates: list[Path | list[tuple[Path, int, int]]], outputs: list[Path], repeats: RepeatMask, keep: int,
    seed: int, *,
    line_bytes: Path | None = None, max_bytes: int | None = None, block: int = 1 << 16,
) -> int:
    """Write the lines of ``candidates`` chosen by :func:`_selection`; return how many.

    ``candidates`` are line-aligned files, or lists of file segments read one
    after the other (one per output: both sides of a parallel corpus are
    sampled alike). With ``max_bytes`` (and ``line_bytes``,
    the UTF-8 size of each candidate line), the chosen lines are further cut to
    a seeded uniform subset of at most that many bytes.
    """
    fitting = None
    if max_bytes is not None:
        fitting = _budget_buckets(line_bytes, repeats, keep, seed, max_bytes, block)
        bucket_of = _priority_buckets(seed)
    kept = 0
    with contextlib.ExitStack() as stack:
        # Bytes and numpy throughout: lines are only copied, never decoded or touched one by one.
        readers = [
            _line_blocks(stack.enter_context(open(source, "rb") if isinstance(source, Path) else _Segments(source)),
                         block)
            for source in candidates
        ]
        writers = [
            stack.enter_context(gzip.open(path, "wb") if path.suffix == ".gz" else open(path, "wb"))
            for path in outputs
        ]
        for chosen in _selection(repeats, keep, seed, block):
            blocks = [next(reader) for reader in readers]
            if fitting is not None:
                chosen = chosen[bucket_of(len(blocks[0][1]))[chosen] < fitting]
            for (data, ends), writer in zip(blocks, writers):
                writer.write(_chosen_lines(data, ends, chosen))
            kept += len(chosen)
    return kept


def _chosen_lines(data: np.ndarray, ends: np.ndarray, chosen: np.ndarray) -> bytes:
    """The bytes of the lines ``chosen`` (sorted indices) of a block whose lines end at ``ends``."""
    if not len(chosen):
        return b""
    # Each run of consecutive chosen lines is one slice: most lines are kept.
    breaks = np.flatnonzero(np.diff(chosen) != 1) + 1
    starts = np.concatenate(([0], ends[:-1]))[chosen[np.concatenate(([0], breaks))]]
    stops = ends[chosen[np.concatenate((breaks - 1, [len(chosen) - 1]))]]
    view = memoryview(data)
    return b"".join([view[start:stop] for start, stop in zip(starts.tolist(), stops.tolist())])


def _line_blocks(handle, block: int, chunk: int = 1 << 22) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Successive blocks of ``block`` newline-terminated lines of a binary file.

    Each is the block's bytes and the end offset of each line in them.
    """
    pending = np.empty(0, dtype=np.uint8)
    ends = np.empty(0, dtype=np.int64)
    while True:
        while len(ends) < block:
            more = np.frombuffer(handle.read(chunk), dtype=np.uint8)
            if not len(more):
                break
            ends = np.concatenate([ends, len(pending) + np.flatnonzero(more == ord("\n")) + 1])
            pending = np.concatenate([pending, more])
        if not len(ends):
            return
        cut = int(ends[min(block, len(ends)) - 1])
        yield pending[:cut], ends[:block]
        pending, ends = pending[cut:], ends[block:] - cut
