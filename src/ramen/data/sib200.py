"""SIB-200 topic classification files (Adelani et al., 2024): ``index_id``, ``category``, ``text``.

The sentences are FLORES-200 sentences: the same ``index_id`` is the same sentence in every
language, so the split files of two languages are translations of each other. Torch-free: the
decontamination keys and the input checks read these files while the job graph is built.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass

from ramen.errors import InputFormatError
from ramen.io import open_text

CATEGORIES = ("science/technology", "travel", "politics", "sports", "health", "entertainment", "geography")
HEADER = ("index_id", "category", "text")


@dataclass(frozen=True)
class TopicExample:
    index_id: str
    text: str
    label: int  # index into CATEGORIES


def is_sib200_file(path: str | os.PathLike) -> bool:
    """True when the file's first line is SIB-200's header."""
    try:
        with open_text(path) as handle:
            first = handle.readline()
    except (OSError, UnicodeDecodeError):
        return False
    return tuple(first.rstrip("\r\n").split("\t")) == HEADER


def read_sib200(path: str | os.PathLike) -> list[TopicExample]:
    """The examples of one SIB-200 split file; a malformed line is an error naming file and line."""
    examples = []
    with open_text(path) as handle:
        rows = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(rows, None)
        if header is None or tuple(header) != HEADER:
            raise InputFormatError(path, 1, f"header {header!r} is not SIB-200's {'/'.join(HEADER)}",
                                   "use the files of the SIB-200 repository's data/annotated/<language>/")
        for number, row in enumerate(rows, start=2):
            if len(row) != 3:
                raise InputFormatError(path, number, f"{len(row)} tab-separated fields, expected 3")
            index_id, category, text = row
            if category not in CATEGORIES:
                raise InputFormatError(path, number, f"unknown category {category!r}",
                                       f"SIB-200 has {', '.join(CATEGORIES)}")
            if not text.strip():
                raise InputFormatError(path, number, "empty text")
            examples.append(TopicExample(index_id=index_id, text=text, label=CATEGORIES.index(category)))
    if not examples:
        raise InputFormatError(path, None, "no examples")
    return examples
