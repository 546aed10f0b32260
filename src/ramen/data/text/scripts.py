"""The supported languages and their scripts: what share of a sentence's letters is in its language's script.

Latin for en/fr/vi, Cyrillic for ru, Greek for el, Arabic for ar, Han for zh, Devanagari for hi.
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_right
from collections.abc import Iterable

import numpy as np

from ramen.errors import ConfigError

LANGUAGES: tuple[str, ...] = ("en", "fr", "ru", "vi", "ar", "zh", "hi", "el")


def _check_lang(lang: str) -> str:
    if lang not in LANGUAGES:
        raise ConfigError("languages", f"unsupported language {lang!r}", f"use one of {', '.join(LANGUAGES)}")
    return lang


_SCRIPT_RANGES: dict[str, list[tuple[int, int]]] = {
    "latin": [
        (0x41, 0x5A), (0x61, 0x7A), (0xAA, 0xAA), (0xBA, 0xBA), (0xC0, 0x24F), (0x250, 0x2AF),
        (0x1E00, 0x1EFF), (0x2C60, 0x2C7F), (0xA720, 0xA7FF), (0xAB30, 0xAB6F),
        (0xFF21, 0xFF3A), (0xFF41, 0xFF5A),
    ],
    "cyrillic": [(0x400, 0x52F), (0x1C80, 0x1C8F), (0x2DE0, 0x2DFF), (0xA640, 0xA69F)],
    "arabic": [(0x600, 0x6FF), (0x750, 0x77F), (0x8A0, 0x8FF), (0xFB50, 0xFDFF), (0xFE70, 0xFEFF)],
    "han": [
        (0x2E80, 0x2FDF), (0x3005, 0x3007), (0x3400, 0x4DBF), (0x4E00, 0x9FFF),
        (0xF900, 0xFAFF), (0x20000, 0x323AF),
    ],
    "devanagari": [(0x900, 0x97F), (0xA8E0, 0xA8FF)],
    "greek": [(0x370, 0x3FF), (0x1F00, 0x1FFF)],
}

LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = {
    "en": ("latin",), "fr": ("latin",), "vi": ("latin",), "ru": ("cyrillic",),
    "ar": ("arabic",), "zh": ("han",), "hi": ("devanagari",), "el": ("greek",),
}


def _script_table(lang: str) -> tuple[list[int], list[int]]:
    ranges = sorted(r for script in LANGUAGE_SCRIPTS[lang] for r in _SCRIPT_RANGES[script])
    return [start for start, _ in ranges], [end for _, end in ranges]


_SCRIPT_TABLES = {lang: _script_table(lang) for lang in LANGUAGES}


def _in_script(code: int, lang: str) -> bool:
    starts, ends = _SCRIPT_TABLES[lang]
    index = bisect_right(starts, code) - 1
    return index >= 0 and code <= ends[index]


def script_ratio(line: str, lang: str) -> float:
    """Fraction of the letters in ``line`` that belong to the script(s) of ``lang``.

    Latin for en/fr/vi, Cyrillic for ru, Arabic for ar, Han for zh, Devanagari
    for hi. Non-letters (digits, punctuation, combining marks) are ignored; a
    line without letters scores 0.
    """
    _check_lang(lang)
    letters = sum(map(str.isalpha, line))
    return len(_script_letters(lang).findall(line)) / letters if letters else 0.0


@functools.cache
def _script_letters(lang: str) -> re.Pattern[str]:
    """A regex for one letter of ``lang``'s script."""
    starts, ends = _SCRIPT_TABLES[lang]
    codes = (code for start, end in zip(starts, ends) for code in range(start, end + 1))
    return re.compile(f"[{_class_of(code for code in codes if chr(code).isalpha())}]")


def _class_of(codes: Iterable[int]) -> str:
    """A regex character class body matching exactly the given code points."""
    parts, run_start, previous = [], None, None
    for code in sorted(codes):
        if previous is not None and code == previous + 1:
            previous = code
            continue
        if run_start is not None:
            parts.append(f"{re.escape(chr(run_start))}-{re.escape(chr(previous))}")
        run_start = previous = code
    if run_start is not None:
        parts.append(f"{re.escape(chr(run_start))}-{re.escape(chr(previous))}")
    return "".join(parts)


@functools.cache
def _letter_classes(lang: str) -> np.ndarray:
    """Per UTF-16 code unit: 0 not a letter, 1 a letter of ``lang``'s script, 2 a letter of
    another script, 3 half of a surrogate pair (a character beyond the BMP)."""
    classes = np.zeros(0x10000, dtype=np.uint8)
    for code in range(0x10000):
        if chr(code).isalpha():
            classes[code] = 1 if _in_script(code, lang) else 2
    classes[0xD800:0xE000] = 3
    return classes


def _script_ratios(sentences: list[str], lang: str) -> np.ndarray:
    """:func:`script_ratio` of each sentence (which must hold no newline), for the whole batch at once.

    Letters are counted per line from a table lookup of every UTF-16 code unit;
    only lines with a character beyond the Basic Multilingual Plane are counted
    one by one.
    """
    if not sentences:
        return np.ones(0)
    # Every line ends with its newline (not a letter), so no line is an empty segment.
    units = np.frombuffer(("\n".join(sentences) + "\n").encode("utf-16-le"), dtype="<u2")
    classes = _letter_classes(lang)[units]
    starts = np.concatenate(([0], np.flatnonzero(units == 10)[:-1] + 1))

    def per_line(mask: np.ndarray) -> np.ndarray:
        return np.add.reduceat(mask.view(np.uint8), starts, dtype=np.int64)

    native, foreign = per_line(classes == 1), per_line(classes == 2)
    letters = native + foreign
    ratios = np.divide(native, letters, out=np.zeros(len(sentences)), where=letters > 0)
    beyond = classes == 3
    if beyond.any():
        for index in np.flatnonzero(per_line(beyond)):
            ratios[index] = script_ratio(sentences[index], lang)
    return ratios
