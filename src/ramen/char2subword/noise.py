"""Single-character noise (Table 1): mistype, repeat, swap, drop, toggle case, punctuation.

Every operation takes a ``random.Random``, so a seed fixes the result on every platform.
One operation is applied at a time, and only to strings longer than four characters by
default (shorter ones are too easily another valid subword).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

# QWERTY neighbours (row above, same row, row below) of each letter key.
_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")
WORD_PUNCTUATION = "-.'_"


def _keyboard_neighbours() -> dict[str, str]:
    position = {c: (r, i) for r, row in enumerate(_ROWS) for i, c in enumerate(row)}
    neighbours = {}
    for c, (r, i) in position.items():
        near = [d for d, (r2, i2) in position.items() if d != c and abs(r2 - r) <= 1 and abs(i2 - i) <= 1]
        neighbours[c] = "".join(sorted(near))
    return neighbours


KEYBOARD_NEIGHBOURS = _keyboard_neighbours()


def mistype(text: str, rng: random.Random) -> str:
    """Replace a letter by a neighbouring key (case kept); unchanged without a QWERTY letter."""
    positions = [i for i, c in enumerate(text) if c.lower() in KEYBOARD_NEIGHBOURS]
    if not positions:
        return text
    i = rng.choice(positions)
    new = rng.choice(KEYBOARD_NEIGHBOURS[text[i].lower()])
    return text[:i] + (new.upper() if text[i].isupper() else new) + text[i + 1:]


def repeat(text: str, rng: random.Random) -> str:
    i = rng.randrange(len(text))
    return text[: i + 1] + text[i:]


def swap(text: str, rng: random.Random) -> str:
    """Swap a character with the next one."""
    if len(text) < 2:
        return text
    i = rng.randrange(len(text) - 1)
    return text[:i] + text[i + 1] + text[i] + text[i + 2:]


def drop(text: str, rng: random.Random) -> str:
    if len(text) < 2:
        return text
    i = rng.randrange(len(text))
    return text[:i] + text[i + 1:]


def toggle(text: str, rng: random.Random) -> str:
    """Toggle the case of a cased character; unchanged without one."""
    positions = [i for i, c in enumerate(text) if c.swapcase() != c and len(c.swapcase()) == 1]
    if not positions:
        return text
    i = rng.choice(positions)
    return text[:i] + text[i].swapcase() + text[i + 1:]


def punct(text: str, rng: random.Random) -> str:
    """Insert a mark used inside words (dash, period, apostrophe, underscore) between two characters."""
    if len(text) < 2:
        return text
    i = rng.randrange(1, len(text))
    return text[:i] + rng.choice(WORD_PUNCTUATION) + text[i:]


OPERATIONS: dict[str, Callable[[str, random.Random], str]] = {
    "mistype": mistype, "repeat": repeat, "swap": swap, "drop": drop, "toggle": toggle, "punct": punct,
}


def check_operations(operations: Sequence[str], setting: str = "char2subword.noise.operations") -> None:
    from ramen.errors import ConfigError

    unknown = [name for name in operations if name not in OPERATIONS]
    if unknown or not operations:
        raise ConfigError(setting, f"unknown or no noise operations {unknown}", f"choose from {list(OPERATIONS)}")


def noise_string(text: str, rng: random.Random, operations: Sequence[str] = tuple(OPERATIONS),
                 min_length: int = 5) -> str:
    """One randomly chosen operation applied to ``text`` when it has at least ``min_length`` characters."""
    if len(text) < min_length:
        return text
    return OPERATIONS[rng.choice(list(operations))](text, rng)


_WORD = re.compile(r"\S+")


def noise_text(text: str, rng: random.Random, rate: float, operations: Sequence[str] = tuple(OPERATIONS),
               min_length: int = 5) -> str:
    """Each whitespace-separated word of at least ``min_length`` characters is noised with probability ``rate``."""
    def replace(match: re.Match) -> str:
        word = match.group(0)
        if len(word) < min_length or rng.random() >= rate:
            return word
        return noise_string(word, rng, operations, min_length)

    return _WORD.sub(replace, text)
