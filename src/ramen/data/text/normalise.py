"""Line normalisation: NFC, control characters to spaces, whitespace collapsed; case and
diacritics kept. One line at a time, a batch of lines at once, or a test on raw UTF-8 bytes
that tells whether a block of text needs any of it."""

from __future__ import annotations

import functools
import re
import unicodedata

import numpy as np


# Control characters other than tab/newline/carriage return, and the BOM.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufeff]")


def normalise_line(line: str) -> str:
    """NFC-normalise, turn control characters into spaces, collapse whitespace, strip.

    Case, accents and other diacritics are kept exactly.
    """
    line = unicodedata.normalize("NFC", line)
    if not line.isprintable():  # cheap test first: most lines have no control character
        line = _CONTROL.sub(" ", line)
    return " ".join(line.split())


def _normalise_lines(lines: list[str]) -> list[str]:
    """:func:`normalise_line` of each line (which must not contain a newline), run once on the
    whole batch joined by newlines (one C-level call) instead of once per line."""
    # One NFC call for the whole batch. A printable line has no whitespace but
    # the plain space (tabs, no-break spaces and controls are not printable),
    # so without a double space it only needs stripping.
    return [
        line.strip() if line.isprintable() and "  " not in line else " ".join(_CONTROL.sub(" ", line).split())
        for line in unicodedata.normalize("NFC", "\n".join(lines)).split("\n")
    ]


@functools.cache
def _unnormal_utf8() -> tuple[np.ndarray, np.ndarray]:
    """What :func:`normalise_line` replaces or collapses beyond ASCII controls (C1 controls,
    the BOM, whitespace other than the space) as UTF-8: a table over a multi-byte character's
    first two bytes (1: such a character, 2: one if its third byte says so) and the
    three-byte sequences, as ``first << 16 | second << 8 | third``."""
    pairs, triples = np.zeros(1 << 16, dtype=np.uint8), []
    for code in range(0x80, 0x10000):
        char = chr(code)
        if not 0xD800 <= code < 0xE000 and (_CONTROL.match(char) or char.isspace()):
            encoded = char.encode("utf-8")
            pair = encoded[0] << 8 | encoded[1]
            if len(encoded) == 2:
                pairs[pair] = 1
            else:
                pairs[pair] = 2
                triples.append(pair << 8 | encoded[2])
    return pairs, np.array(triples, dtype=np.uint32)


def _is_normalised(block: bytes) -> bool:
    """Whether every line of a block of UTF-8 text is already as :func:`normalise_line` leaves
    it, once NFC-normalised (NFC creates no space or control character).

    True for most blocks of real text, whose lines then need no work one by one: no
    control character, no whitespace but the plain space and the newline, and no space
    doubled or at either end of a line. Checked on the bytes with numpy: a pass or two
    over the block, then table lookups at the first bytes of multi-byte characters.
    """
    data = np.frombuffer(block + b"\0\0", dtype=np.uint8)  # padded: tests look two bytes ahead
    size = len(block)
    if np.count_nonzero(data[:size] < 0x20) != block.count(b"\n") or b"\x7f" in block:
        return False
    pairs, triples = _unnormal_utf8()
    leads = np.flatnonzero(data >= 0xC2)
    pair = data[leads].astype(np.uint32) << 8 | data[leads + 1]
    kind = pairs[pair]
    if (kind == 1).any():
        return False
    maybe = np.flatnonzero(kind == 2)
    if len(maybe) and np.isin(pair[maybe] << 8 | data[leads[maybe] + 2], triples).any():
        return False
    if not size:
        return True
    spaces, newlines = data[:size] == 0x20, data[:size] == 0x0A
    # The block starts and ends a line: a space first or last in it is at a line's edge.
    return not (
        spaces[0] or spaces[-1] or (spaces[1:] & spaces[:-1]).any()
        or (newlines[:-1] & spaces[1:]).any() or (spaces[:-1] & newlines[1:]).any()
    )
