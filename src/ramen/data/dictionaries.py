"""Bilingual dictionaries: ``english<TAB>foreign`` word pairs (WECHSEL's dictionary, the BLI report's)."""

from __future__ import annotations

from ramen.errors import InputFormatError
from ramen.io import read_lines


def read_dictionary(path) -> list[tuple[str, str]]:
    """``english<TAB>foreign`` pairs, one per line."""
    pairs = []
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
            raise InputFormatError(path, lineno, f"expected 'english<TAB>foreign', got {line[:60]!r}")
        pairs.append((fields[0].strip(), fields[1].strip()))
    if not pairs:
        raise InputFormatError(path, None, "the dictionary holds no pairs")
    return pairs
