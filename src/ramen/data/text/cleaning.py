"""The first pass of monolingual corpus preparation: each work unit split into sentences, which are
normalised and filtered, in one process or several.

Kept sentences are appended to a scratch file per process; only where they are, their key
digests and counts come back to the main process, in input order.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .keys import _key_digests, _key_tables, _sentence_keys
from .normalise import _unnormal_utf8
from .scripts import _letter_classes, _script_ratios
from .sentences import _boundary_pattern
from .sources import _unit_sentences

# Characters that print nothing: a line of them and spaces (after normalisation) is no text, and a
# tokenizer trained on it learns merges of them as new tokens. The BOM is a space by then already.
INVISIBLE = " \u200b\u200c\u200d\u2060\ufeff"


class CleanedUnit(NamedTuple):
    """What cleaning one work unit gives back to the main process."""

    segment: tuple[Path, int, int] | None  # the kept sentences in the scratch file; None if none was kept
    digests: bytes  # each kept sentence's key digest
    line_sizes: bytes  # each kept line's UTF-8 size as <u4, empty unless asked for
    counts: dict[str, int]  # read and dropped_{length,invisible,script,excluded}


@dataclass(frozen=True)
class Cleaning:
    """The filters of one corpus and where the sentences they keep go; called on a work unit."""

    lang: str
    min_chars: int
    max_chars: int
    min_script_ratio: float
    excluded: frozenset[str]  # sentence keys of evaluation sentences
    scratch: Path  # directory of the per-process files of kept sentences
    line_sizes: bool  # whether to return the byte size of each kept line (for a byte budget)

    def __call__(self, job: tuple) -> CleanedUnit:
        """Split, normalise and filter one work unit (see :mod:`ramen.data.text.sources`)."""
        sentences = _unit_sentences(job, self.lang)
        # Whole-batch array tests instead of a Python branch per sentence; drops are counted
        # in order (length, then invisible lines, then script, then evaluation sentences).
        lengths = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
        keep = (lengths >= self.min_chars) & (lengths <= self.max_chars)
        counts = {"read": len(sentences), "dropped_length": int(len(keep) - keep.sum())}
        # strip stops at a line's first visible character: cheap on real text.
        visible = np.fromiter((bool(sentence.strip(INVISIBLE)) for sentence in sentences), dtype=bool,
                              count=len(sentences))
        counts["dropped_invisible"] = int((keep & ~visible).sum())
        keep &= visible
        before = int(keep.sum())
        if self.min_script_ratio > 0:
            keep &= _script_ratios(sentences, self.lang) >= self.min_script_ratio
        counts["dropped_script"] = before - int(keep.sum())
        kept = list(itertools.compress(sentences, keep))
        keys = _sentence_keys(kept)
        counts["dropped_excluded"] = 0
        if self.excluded:
            fresh = [key not in self.excluded for key in keys]
            counts["dropped_excluded"] = len(fresh) - sum(fresh)
            kept, keys = list(itertools.compress(kept, fresh)), list(itertools.compress(keys, fresh))
        digests = _key_digests(keys).tobytes()
        if not kept:
            return CleanedUnit(None, digests, b"", counts)
        # Written here, in parallel: the cleaned text never passes through the main process.
        text = ("\n".join(kept) + "\n").encode("utf-8")
        with open(self.scratch / f"cleaned-{os.getpid()}.txt", "ab") as shard:
            segment = (Path(shard.name), shard.tell(), len(text))
            shard.write(text)
        return CleanedUnit(segment, digests, _line_sizes(text).tobytes() if self.line_sizes else b"", counts)


def _line_sizes(text: bytes) -> np.ndarray:
    """Size of each newline-terminated line of ``text``, newline included."""
    ends = np.flatnonzero(np.frombuffer(text, dtype=np.uint8) == ord("\n"))
    return np.diff(ends, prepend=-1).astype("<u4")


# The cleaning of a worker process, set once when the pool starts it: handing it over with each
# work unit would pickle the set of excluded keys every time.
_worker_cleaning: Cleaning | None = None


def _start_worker(cleaning: Cleaning) -> None:
    global _worker_cleaning
    _worker_cleaning = cleaning


def _clean_in_worker(job: tuple) -> CleanedUnit:
    return _worker_cleaning(job)


@contextlib.contextmanager
def cleaned_units(units: Iterable[tuple], cleaning: Cleaning, processes: int) -> Iterator[Iterator[CleanedUnit]]:
    """``cleaning`` of each work unit, in input order, from ``processes`` processes."""
    # Build the language's large regexes and tables once, before forking, so workers inherit them.
    _boundary_pattern(cleaning.lang)
    _letter_classes(cleaning.lang)
    _key_tables()
    _unnormal_utf8()
    if processes == 1:
        yield map(cleaning, units)
        return
    # Pool.imap would read the whole corpus ahead into its task queue; a few
    # units in flight per process keep memory flat.
    slots = threading.BoundedSemaphore(4 * processes)

    def bounded():
        for unit in units:
            slots.acquire()
            yield unit

    with multiprocessing.get_context("fork").Pool(processes, _start_worker, (cleaning,)) as pool:

        def results():
            for result in pool.imap(_clean_in_worker, bounded()):
                slots.release()
                yield result

        yield results()
