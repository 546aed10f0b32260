"""Sentence keys: the normalised form that decides whether two sentences are "the same", for
deduplication and for keeping evaluation sentences out of training text; their 64-bit digests;
the keys of every sentence of a set of evaluation files."""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from collections.abc import Iterable

import numpy as np
from xxhash import xxh3_64_intdigest

from ramen.data.conllu import sentence_texts
from ramen.data.nli_data import read_nli, read_xnli_tsv
from ramen.data.sib200 import is_sib200_file, read_sib200
from ramen.io import read_lines

from .normalise import normalise_line


# The Basic Multilingual Plane covers the punctuation of every supported language.
_BMP_PUNCTUATION = [
    (chr(code), unicodedata.category(chr(code)))
    for code in range(0x10000)
    if unicodedata.category(chr(code)).startswith("P")
]
_PUNCTUATION = "".join(char for char, _ in _BMP_PUNCTUATION)
_OPENING = "".join(char for char, category in _BMP_PUNCTUATION if category in ("Ps", "Pi"))
_CLOSING = "".join(char for char, category in _BMP_PUNCTUATION if category in ("Pe", "Pf", "Po"))
# A space before a closing or after an opening punctuation mark. Starting the
# pattern with the literal space lets the regex engine skip ahead quickly.
_SPACE_BY_PUNCTUATION = re.compile(
    f" (?:(?=[{re.escape(_CLOSING)}])|(?<=[{re.escape(_OPENING)}] ))"
)
_EDGE_CHARS = _PUNCTUATION + " "
_QUOTES = (
    ("\u2018", "'"), ("\u2019", "'"), ("\u201b", "'"), ("\u02bc", "'"), ("`", "'"), ("\u00b4", "'"),
    ("\u201c", '"'), ("\u201d", '"'), ("\u201e", '"'), ("\u00ab", '"'), ("\u00bb", '"'),
    ("\u2039", '"'), ("\u203a", '"'),
)


def sentence_key(line: str) -> str:
    """Normalised form used to decide whether two sentences are "the same".

    Case-folded and NFC-normalised, whitespace collapsed, insensitive to
    punctuation at either edge, to typographic spacing around punctuation
    (French ``oui ?`` equals ``oui?``) and to curly versus straight quotes.
    Used for deduplication and for keeping evaluation sentences out of
    training data.
    """
    return _normalised_sentence_key(normalise_line(line))


def _normalised_sentence_key(line: str) -> str:
    """:func:`sentence_key` of a line already passed through :func:`normalise_line`."""
    text = unicodedata.normalize("NFC", line.casefold())
    text = _SPACE_BY_PUNCTUATION.sub("", text)
    for curly, straight in _QUOTES:
        if curly in text:  # str.replace per quote is much faster than str.translate
            text = text.replace(curly, straight)
    return text.strip(_EDGE_CHARS)


def _key_digest(key: str) -> bytes:
    # 8-byte digests keep dedup memory bounded; collisions are negligible at corpus scale.
    # xxh3 is deterministic across processes and runs, and several times faster than blake2b.
    return xxh3_64_intdigest(key).to_bytes(8, "little")


def _key_digests(keys: list[str]) -> np.ndarray:
    """:func:`_key_digest` of each key, as little-endian 64-bit integers (one C-level map)."""
    return np.fromiter(map(xxh3_64_intdigest, keys), dtype="<u8", count=len(keys))


@functools.cache
def _key_tables() -> tuple[np.ndarray, ...]:
    """Per UTF-16 code unit: its case fold, whether that is not one code unit (several
    characters, or a surrogate), whether it is opening, closing or edge punctuation
    (:func:`sentence_key`'s classes), and its straight quote (itself if not a quote)."""
    codes = np.arange(0x10000)
    fold, straight = codes.astype(np.uint16), codes.astype(np.uint16)
    irregular = np.zeros(0x10000, dtype=bool)
    irregular[0xD800:0xE000] = True
    for code in range(0x10000):
        if not 0xD800 <= code < 0xE000:
            folded = chr(code).casefold()
            if len(folded) == 1:
                fold[code] = ord(folded)
            else:
                irregular[code] = True
    classes = []
    for chars in (_OPENING, _CLOSING, _EDGE_CHARS):
        members = np.zeros(0x10000, dtype=bool)
        members[[ord(char) for char in chars]] = True
        classes.append(members)
    for curly, plain in _QUOTES:
        straight[ord(curly)] = ord(plain)
    return fold, irregular, *classes, straight


def _sentence_keys(sentences: list[str]) -> list[str]:
    """:func:`sentence_key` of each sentence already normalised by :func:`normalise_line`.

    Works on the UTF-16 code units of the whole batch with numpy: every step but
    NFC maps one code unit to at most one, so each is a table lookup or a mask,
    and lookups only touch non-ASCII units, spaces and line edges. Text with a
    character outside the Basic Multilingual Plane or one that case-folds to
    several (``ß`` → ``ss``) takes :func:`_sentence_keys_of_text`.
    """
    if not sentences:
        return []
    fold, irregular, opening, closing, edge, straight = _key_tables()
    units = np.frombuffer("\n".join(sentences).encode("utf-16-le"), dtype="<u2").copy()
    wide = np.flatnonzero(units >= 0x80)
    if irregular[units[wide]].any():
        return _sentence_keys_of_text(sentences)
    np.add(units, 32, out=units, where=(units - np.uint16(0x41)) < 26)  # ASCII A-Z
    units[wide] = fold[units[wide]]
    text = unicodedata.normalize("NFC", units.tobytes().decode("utf-16-le"))
    encoded = text.encode("utf-16-le")
    if len(encoded) != 2 * len(text):  # NFC composed a character beyond the BMP
        return _sentence_keys_of_text(sentences)
    units = np.frombuffer(encoded, dtype="<u2").copy()
    # A space before closing or after opening punctuation goes (below, once lines are cut).
    spaces = np.flatnonzero(units == 32)
    dropped = np.zeros(len(spaces), dtype=bool)
    before = spaces + 1 < len(units)
    dropped[before] = closing[units[spaces[before] + 1]]
    after = spaces > 0
    dropped[after] |= opening[units[spaces[after] - 1]]
    quotes = np.flatnonzero((units >= 0x80) | (units == ord("`")))
    units[quotes] = straight[units[quotes]]
    # Each key runs from the first to the last non-edge character of its line (dropped
    # spaces are edge characters, so this can be found before they go): move each line's
    # bounds inwards, a step at a time, only for the lines whose bound still sits on one.
    newlines = np.flatnonzero(units == 10)
    first = np.concatenate(([0], newlines + 1))
    stop = np.concatenate((newlines, [len(units)]))
    moving = np.flatnonzero(first < stop)
    while len(moving):
        moving = moving[edge[units[first[moving]]]]
        first[moving] += 1
        moving = moving[first[moving] < stop[moving]]
    moving = np.flatnonzero(first < stop)
    while len(moving):
        moving = moving[edge[units[stop[moving] - 1]]]
        stop[moving] -= 1
        moving = moving[first[moving] < stop[moving]]
    if dropped.any():
        gone = spaces[dropped]
        units = np.delete(units, gone)
        first -= np.searchsorted(gone, first)
        stop -= np.searchsorted(gone, stop)
    text = units.tobytes().decode("utf-16-le")
    return [text[start:end] for start, end in zip(first.tolist(), stop.tolist())]


def _sentence_keys_of_text(sentences: list[str]) -> list[str]:
    """:func:`_sentence_keys` with string operations on the joined batch: any text."""
    if not sentences:  # joined, no sentence would read as one empty line
        return []
    text = unicodedata.normalize("NFC", "\n".join(sentences).casefold())
    text = _SPACE_BY_PUNCTUATION.sub("", text)
    for curly, straight in _QUOTES:
        if curly in text:
            text = text.replace(curly, straight)
    return [key.strip(_EDGE_CHARS) for key in text.split("\n")]


def evaluation_keys(nli_paths: Iterable[str | os.PathLike | dict]) -> set[str]:
    """Sentence keys of every sentence in the given evaluation files.

    Items are XNLI-style TSV paths or NLI source dicts as taken by
    :func:`ramen.data.nli_data.read_nli` (premises and hypotheses), CoNLL-U
    treebanks (``.conllu``, ``.conllu.gz``: each sentence's text), SIB-200 files (a ``.tsv``
    with SIB-200's header: each text), or any
    other text file (one sentence per line, e.g. retrieval test pairs).
    """
    keys: set[str] = set()
    for item in nli_paths:
        name = str(item.get("path", "") if isinstance(item, dict) else item)
        if not isinstance(item, dict) and name.endswith(".tsv") and is_sib200_file(item):
            keys.update(sentence_key(example.text) for example in read_sib200(item))
        elif isinstance(item, dict) or name.endswith(".tsv"):
            examples = read_nli(item) if isinstance(item, dict) else read_xnli_tsv(item)
            for example in examples:
                keys.add(sentence_key(example.premise))
                keys.add(sentence_key(example.hypothesis))
        elif name.endswith((".conllu", ".conllu.gz")):
            keys.update(sentence_key(text) for text in sentence_texts(item))
        else:
            keys.update(sentence_key(line) for line in read_lines(item))
    keys.discard("")  # a punctuation-only sentence must not exclude every other one
    return keys
