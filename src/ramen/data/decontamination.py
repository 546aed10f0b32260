"""Keeping evaluation sentences out of training text, one language at a time.

Each prepared training text records the sentence keys it was cleaned of (as 64-bit digests,
``*.excluded.npy``). Training text is prepared against the evaluation files as they were; an
evaluation file edited afterwards is checked again here before it is scored: sentences it did
not have then are looked up in the training text itself, and any found there stop the run.
This lets a changed test file rerun only its evaluations, without giving up the guarantee.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
from xxhash import xxh3_64_intdigest

from ramen.errors import RamenError
from ramen.io import atomic_path, read_lines
from ramen.data.text.keys import evaluation_keys, sentence_key


class ContaminationError(RamenError):
    """An evaluation sentence occurs in training text."""


def key_digests(keys: Iterable[str]) -> np.ndarray:
    """Sorted, unique 64-bit digests of sentence keys."""
    keys = list(keys)
    return np.unique(np.fromiter(map(xxh3_64_intdigest, keys), dtype="<u8", count=len(keys)))


def write_digests(path: str | os.PathLike, digests: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.save(handle, np.asarray(digests, dtype="<u8"))


def read_digests(path: str | os.PathLike) -> np.ndarray:
    return np.load(path, allow_pickle=False)


def remove_sentences(text_path: str | os.PathLike, out_path: str | os.PathLike, exclude_keys: set[str]) -> dict:
    """Copy a prepared text (one sentence per line) without the sentences whose key is excluded."""
    kept = dropped = 0
    with atomic_path(out_path) as tmp:
        with open(tmp, "w", encoding="utf-8") as out:
            for line in read_lines(text_path):
                if exclude_keys and sentence_key(line) in exclude_keys:
                    dropped += 1
                    continue
                out.write(line)
                out.write("\n")
                kept += 1
    return {"kept": kept, "dropped_evaluation": dropped}


def _found_in(text_path: str | os.PathLike, keys: set[str]) -> dict[str, int]:
    """Line numbers (1-based) in a training text of the first occurrence of each key found."""
    found: dict[str, int] = {}
    for number, line in enumerate(read_lines(text_path), start=1):
        key = sentence_key(line)
        if key in keys and key not in found:
            found[key] = number
            if len(found) == len(keys):
                break
    return found


def check_decontaminated(
    evaluation: Sequence[str | os.PathLike | dict],
    texts: Mapping[str, str | os.PathLike],
    excluded: Mapping[str, str | os.PathLike],
) -> dict:
    """Check that no sentence of the evaluation files occurs in the training texts.

    ``texts`` maps a name to a training text and ``excluded`` the same names to the digests the
    text was cleaned of. Only sentences absent from those digests (added to an evaluation file
    after the text was prepared) are looked up in the text. Returns a summary per evaluation
    file; raises :class:`ContaminationError` naming the file, the sentence and the training
    text line where one is found.
    """
    summary = {}
    for item in evaluation:
        name = str(item.get("path") if isinstance(item, dict) else item)
        keys = evaluation_keys([item])
        digests = {key: xxh3_64_intdigest(key) for key in keys}
        checked = {}
        for text_name, text_path in texts.items():
            known = read_digests(excluded[text_name])
            values = np.fromiter(digests.values(), dtype="<u8", count=len(digests))
            new = {key for key, is_known in zip(digests, np.isin(values, known)) if not is_known}
            found = _found_in(text_path, new) if new else {}
            if found:
                key, line = next(iter(found.items()))
                raise ContaminationError(
                    f"{name}: {len(found)} evaluation sentence(s) occur in the training text {text_path} "
                    f"(e.g. line {line}: {key[:80]!r}). The file changed after that text was prepared; "
                    f"clean it again with `snakemake --forcerun {Path(excluded[text_name]).as_posix()} ...` "
                    f"(add your targets; that job also writes the text, or for the English text of one "
                    f"language's models the sentences its batches leave out), or restore the evaluation file"
                )
            checked[text_name] = {"new_sentences": len(new)}
        summary[name] = {"sentences": len(keys), "texts": checked}
    return summary


def write_summary(path: str | os.PathLike, summary: dict) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
