"""Raw text preparation: Wikipedia extraction, sentence splitting, filtering.

Everything here streams its input: corpora are read line by line (or one
Wikipedia article at a time) and only fixed-size hashes are kept in memory
for deduplication. Outputs are written atomically.

Supported languages: en, fr, ru, vi, ar, zh, hi (see :data:`LANGUAGES`).
"""

from __future__ import annotations

import bz2
import collections
import contextlib
import functools
import gzip
import io
import itertools
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
from tqdm import tqdm
from xxhash import xxh3_64_intdigest

from .dedup import HashDeduplicator, RepeatMask
from ramen.errors import ConfigError, InputFormatError
from ramen.io import atomic_path, open_text, read_lines
from .nli_data import read_nli, read_xnli_tsv

LANGUAGES: tuple[str, ...] = ("en", "fr", "ru", "vi", "ar", "zh", "hi")
SOURCE_FORMATS: tuple[str, ...] = ("text", "wikiextractor")


def _check_lang(lang: str) -> str:
    if lang not in LANGUAGES:
        raise ConfigError("lang", f"unsupported language {lang!r}", f"use one of {', '.join(LANGUAGES)}")
    return lang


# ---------------------------------------------------------------------------
# Normalisation


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


# ---------------------------------------------------------------------------
# Scripts

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
}

LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = {
    "en": ("latin",), "fr": ("latin",), "vi": ("latin",), "ru": ("cyrillic",),
    "ar": ("arabic",), "zh": ("han",), "hi": ("devanagari",),
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


# ---------------------------------------------------------------------------
# Sentence splitting

# Terminal punctuation per language.
_TERMINALS: dict[str, str] = {
    "en": ".!?…", "fr": ".!?…", "ru": ".!?…", "vi": ".!?…",
    "ar": ".!?…؟",
    "hi": ".!?…।॥",
    "zh": "。！？!?",
}
# These end a sentence even when no space follows (Chinese has no spaces;
# Hindi text often glues the next word to the danda).
_ALWAYS_END: dict[str, str] = {"zh": "。！？", "hi": "।॥"}
# Closing quotes/brackets that belong to the sentence they follow. French puts
# a space before a closing guillemet, hence the second alternative.
_CLOSERS = "\"'”’»)]}」』）〕】"
_TERMINAL_RE: dict[str, re.Pattern[str]] = {
    lang: re.compile(
        f"[{re.escape(terms)}]+(?:[{re.escape(_CLOSERS)}]|[ \u00a0\u202f][»”])*"
    )
    for lang, terms in _TERMINALS.items()
}
# A period after one of these does not end a sentence (case-sensitive).
_ABBREVIATIONS: dict[str, frozenset[str]] = {
    "en": frozenset("Mr Mrs Ms Dr Prof Sr Jr St Mt Messrs Gen Col Lt Sgt Capt Gov Sen Rep Rev vs cf".split()),
    "fr": frozenset("M MM Mme Mmes Mlle Mlles Dr Pr Me Mgr St Ste cf env av apr".split()),
    "ru": frozenset("им ул проф акад ген св тов".split()),
    "vi": frozenset("TP Tp GS PGS TS ThS BS KS".split()),
    "ar": frozenset(),
    "hi": frozenset("डॉ प्रो".split()),
    "zh": frozenset(),
}
# Before a number these are abbreviations too, in any case ("world no. 141", "p. 12", "т. 2").
_NUMBER_ABBREVIATIONS = frozenset("no nos nr n n° № p pp vol fig art ch с стр т рис".split())
_OPENERS = "([{«“‘\"'"


@functools.cache
def _class_where(test: str) -> str:
    """Regex class body of every code point for which ``str.<test>`` (e.g. ``islower``) is true."""
    method = getattr(str, test)
    # Every cased letter is in the first two planes; looking no further keeps this fast.
    return _class_of(code for code in range(0x20000) if method(chr(code)))


def _after_any(words: Iterable[str], before: str, after: str, *, negative: bool = True) -> str:
    """Lookbehinds for: a ``before`` character, one of ``words``, then ``after``, ending here.

    ``re`` lookbehinds need a fixed width, so there is one per word length:
    negative ones are all required (none of the words), positive ones are
    alternatives (any of them).
    """
    by_length: dict[int, list[str]] = {}
    for word in sorted(words):
        by_length.setdefault(len(word), []).append(re.escape(word))
    kind = "!" if negative else "="
    looks = [f"(?<{kind}{before}(?:{'|'.join(group)}){after})" for _, group in sorted(by_length.items())]
    return "".join(looks) if negative else f"(?:{'|'.join(looks)})"


@functools.cache
def _boundary_pattern(lang: str) -> re.Pattern[str]:
    """A regex whose :meth:`~re.Pattern.split` cuts normalised paragraphs (joined by newlines) into sentences.

    It matches a sentence's final punctuation (captured, so ``split`` keeps it)
    and the space after it. Every rule of :func:`split_sentences` is a
    lookaround, so a whole block of text is split in one C-level pass instead
    of a Python test at each period: this is most of the cleaning's speed.
    Each match starts with a terminal character, which lets the engine skip
    ahead to the next one.
    """
    esc = re.escape
    terms, always = _TERMINALS[lang], _ALWAYS_END.get(lang, "")
    closers = f"(?:[{esc(_CLOSERS)}]| [»”])*+"
    lower, upper = _class_where("islower"), _class_where("isupper")
    # A space then a word not starting in lowercase, or the paragraph's end.
    ends = f"(?= [^{lower}\n]|\n|\\Z)"
    word_start = f"[\\s{esc(_OPENERS + always)}]"
    initial_start = f"[\\s{esc(_OPENERS + always)}.\\-]"
    # "1. Introduction": a number alone before its period, at the paragraph's start or
    # after a sentence end (not after "no. 3." or "U.S.A. 4.", where no sentence ended).
    sentence_ends = [f"[{esc(terms)}]", f"[{esc(terms)}][{esc(_CLOSERS)}]", f"[{esc(terms)}] [»”]"]
    list_number = ""
    for digits in (f"\\d{{{k}}}{period}" for k in (1, 2, 3, 4) for period in (r"\.", r" \.")):
        list_number += (
            f"(?<!\n{digits})" + (f"(?<![{esc(always)}]{digits})" if always else "")
            + "(?:" + "".join(f"(?<!{end} {digits})" for end in sentence_ends) + "|"
            + _after_any(_NUMBER_ABBREVIATIONS, f"(?i:{word_start}", f")\\. {digits}", negative=False)
            + f"|(?<={initial_start}[{upper}]\\. {digits}))"
        )
    lone_period = (
        f"(?<=\\.)(?![{esc(terms)}])(?={closers}{ends})"
        # "Mr. Smith", tokenised "Mr . Smith"
        + _after_any(_ABBREVIATIONS[lang], word_start, r"\.") + _after_any(_ABBREVIATIONS[lang], word_start, r" \.")
        # initials: "J. S. Bach", "U.S. Army", "J.-C."
        + f"(?<!{initial_start}[{upper}]\\.)(?<!{initial_start}[{upper}] \\.)"
        # "no. 141", "p. 12", "т. 2"
        + f"(?:(?!{closers} \\d)|" + _after_any(_NUMBER_ABBREVIATIONS, f"(?i:{word_start}", r")\.")
        + _after_any(_NUMBER_ABBREVIATIONS, f"(?i:{word_start}", r") \.") + ")"
        # The list-number tests only matter after a digit or a space: skip them elsewhere.
        + f"(?:(?<![\\d ]\\.)|{list_number})" + closers
    )
    # Any other run of terminals ("!", "?!", "..."), which a period alone does not start.
    other = f"(?:(?<!\\.)|(?=[{esc(terms)}]))[{esc(terms)}]*+{closers}{ends}"
    alternatives = [lone_period, other]
    if always:  # a run holding one of these ends a sentence wherever it is
        not_always = "".join(char for char in terms if char not in always)
        alternatives.insert(
            0, f"(?:(?<=[{esc(always)}])|(?=[{esc(not_always)}]*+[{esc(always)}]))[{esc(terms)}]*+{closers}"
        )
    return re.compile(f"([{esc(terms)}](?:{'|'.join(alternatives)})) ?")


def _split_normalised(paragraphs: list[str], lang: str) -> list[str]:
    """The sentences of paragraphs normalised by :func:`normalise_line` (none containing a newline)."""
    parts = _boundary_pattern(lang).split("\n" + "\n".join(paragraphs))
    # parts = [text, end, text, end, ..., text]: glue each sentence to its end, one per line.
    text = "\n".join(map(str.__add__, parts[0:-1:2], parts[1::2])) + "\n" + parts[-1]
    return [sentence for sentence in text.split("\n") if sentence]


def split_sentences(text: str, lang: str) -> list[str]:
    """Split ``text`` into sentences with simple punctuation rules.

    Each line of ``text`` is a paragraph, and a sentence never crosses a line
    break. Sentences end at ``. ! ? …`` followed by a space (plus ``؟`` for
    ar); in zh at ``。！？`` with or without a following space; in hi at the
    danda ``।`` / ``॥``. A period after a common abbreviation or a single
    capital letter (an initial), or before a lowercase word, does not end a
    sentence. Sentences are NFC-normalised with whitespace collapsed; case
    and diacritics are untouched.
    """
    _check_lang(lang)
    return _split_normalised([line for line in _normalise_lines(text.splitlines()) if line], lang)


# ---------------------------------------------------------------------------
# Wikipedia


_EXTRACTED = re.compile(r"Extracted (\d+) articles")


def _run_wikiextractor(command: list[str], grace: float = 5.0) -> tuple[int, list[str]]:
    """Run WikiExtractor; return its exit status and last stderr lines.

    Its periodic "Extracted N articles" messages drive a progress bar. When
    its reader process dies (a truncated or corrupt dump), WikiExtractor
    prints a traceback and then waits for it forever: a traceback followed by
    ``grace`` seconds without exit stops the whole process group.
    """
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    lines: collections.deque[str] = collections.deque(maxlen=40)
    failed_at: list[float] = []

    def collect():
        with tqdm(unit=" articles", desc="WikiExtractor", mininterval=10) as bar:
            for line in process.stderr:
                lines.append(line.rstrip("\n"))
                if line.startswith("Traceback") and not failed_at:
                    failed_at.append(time.monotonic())
                progress = _EXTRACTED.search(line)
                if progress:
                    bar.update(int(progress.group(1)) - bar.n)

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    while process.poll() is None:
        if failed_at and time.monotonic() - failed_at[0] > grace:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            break
        time.sleep(0.2)
    reader.join(timeout=grace)
    return (process.returncode or 1) if failed_at else process.returncode, list(lines)


# How a damaged .bz2/.gz shows in WikiExtractor's traceback.
_CORRUPT_COMPRESSION = ("Invalid data stream", "end-of-stream marker", "Not a gzipped file", "CRC check failed")


def extract_wikipedia(
    dump_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    processes: int = 1,
    *,
    expand_templates: bool = True,
) -> Path:
    """Run WikiExtractor on a MediaWiki XML dump (``.xml`` or ``.xml.bz2``).

    Writes WikiExtractor's ``<doc>`` files (``AA/wiki_00`` ...) under
    ``out_dir``, atomically: the directory appears only once extraction has
    succeeded. Returns ``out_dir``. ``expand_templates=False`` skips
    WikiExtractor's extra pass that collects template definitions (faster on
    full dumps; text produced by templates, such as unit conversions, is then
    lost). Raises :class:`InputFormatError` when WikiExtractor fails or
    extracts no article.
    """
    dump_path, out_dir = Path(dump_path), Path(out_dir)
    if not dump_path.is_file():
        raise FileNotFoundError(f"Wikipedia dump not found: {dump_path}")
    if processes < 1:
        raise ConfigError("processes", f"must be at least 1, got {processes}")
    with atomic_path(out_dir) as tmp:
        command = [
            sys.executable, "-m", "wikiextractor.WikiExtractor", str(dump_path),
            "-o", str(tmp), "--processes", str(processes),
        ]
        if not expand_templates:
            command.append("--no-templates")
        returncode, lines = _run_wikiextractor(command)
        if returncode != 0:
            cause = lines[-1] if lines else ""
            if any(sign in cause for sign in _CORRUPT_COMPRESSION):
                raise InputFormatError(
                    dump_path, None, f"corrupt or truncated compressed file ({cause})",
                    "delete it and download it again",
                )
            tail = "\n".join(lines[-15:])
            raise InputFormatError(
                dump_path, None, f"WikiExtractor failed with exit status {returncode}:\n{tail}",
                "is this a MediaWiki XML dump (pages-articles.xml[.bz2])?",
            )
        if not any(True for _ in iter_wikiextractor_documents(tmp, drop_headings=False)):
            raise InputFormatError(
                dump_path, None, "WikiExtractor extracted no article with text",
                "is this a MediaWiki XML dump (pages-articles.xml[.bz2])?",
            )
    return out_dir


# Parentheses left empty, or starting with separators, once WikiExtractor
# drops templates such as pronunciations and unit conversions: "Alaska () is".
_EMPTY_PARENS = re.compile(r"\s*\((?:[\s,;:]|&nbsp;)*\)")
_LEADING_SEPARATORS = re.compile(r"\(\s*[,;:][\s,;:]*")
_SPACE_BEFORE_COMMA = re.compile(r"\s+([,.])(?=\s|$)")
_HEADING_INNER_PUNCT = re.compile(r"[.!?;:।。！？]")


def _clean_wiki_line(line: str) -> str:
    line = _EMPTY_PARENS.sub("", line)
    line = _LEADING_SEPARATORS.sub("(", line)
    line = _SPACE_BEFORE_COMMA.sub(r"\1", line)
    return " ".join(line.split())


def _looks_like_heading(line: str) -> bool:
    # WikiExtractor prints section titles as their own line with a "." appended.
    return (
        line.endswith(".")
        and len(line.split()) <= 5
        and not _HEADING_INNER_PUNCT.search(line[:-1])
    )


def _open_extracted(path: Path):
    if path.suffix == ".bz2":  # WikiExtractor --compress
        return bz2.open(path, "rt", encoding="utf-8")
    return open_text(path)


def iter_wikiextractor_documents(out_dir: str | os.PathLike, *, drop_headings: bool = True) -> Iterator[str]:
    """Yield the text of each article in a WikiExtractor output directory.

    The ``<doc ...>`` / ``</doc>`` wrapper and the title line are removed,
    as are empty articles (redirects, lists). Each paragraph stays on its own
    line. Remnants of dropped templates (``Alaska () is``) are tidied and,
    with ``drop_headings``, section titles are skipped: WikiExtractor prints
    them as a line ending in an added ``.``, so any line of at most five words
    ending in ``.`` without other punctuation is taken for one (the rare
    five-word paragraph is lost with them).
    """
    for path in wikiextractor_files(out_dir):
        yield from _iter_extracted_file(path, drop_headings)


def wikiextractor_files(out_dir: str | os.PathLike) -> list[Path]:
    """The ``wiki_*`` files of a WikiExtractor output directory, in order."""
    out_dir = Path(out_dir)
    files = sorted(p for p in out_dir.rglob("wiki_*") if p.is_file())
    if not files:
        raise InputFormatError(
            out_dir, None, "no WikiExtractor output files (wiki_*) found",
            "point to a directory made by extract_wikipedia",
        )
    return files


def _iter_extracted_file(path: Path, drop_headings: bool = True) -> Iterator[str]:
    with _open_extracted(path) as handle:
        body: list[str] | None = None
        expect_title = False
        doc_line = 0
        for line_no, raw in enumerate(handle, start=1):
            line = raw.strip()
            if line.startswith("<doc ") or line == "<doc>":
                if body is not None:
                    raise InputFormatError(path, line_no, "<doc> opened before the previous </doc>")
                body, expect_title, doc_line = [], True, line_no
            elif line == "</doc>":
                if body is None:
                    raise InputFormatError(path, line_no, "</doc> without a matching <doc>")
                if body:
                    yield "\n".join(body)
                body = None
            elif body is not None and line:
                if expect_title:
                    expect_title = False
                    continue
                line = _clean_wiki_line(line)
                if line and not (drop_headings and _looks_like_heading(line)):
                    body.append(line)
        if body is not None:
            raise InputFormatError(path, doc_line, "<doc> is never closed (truncated file?)")


# ---------------------------------------------------------------------------
# Corpus preparation


def _source_spec(source: dict | str | os.PathLike, index: int) -> tuple[Path, str, bool]:
    if isinstance(source, (str, os.PathLike)):
        source = {"path": source}
    if not isinstance(source, dict) or "path" not in source:
        raise ConfigError(f"sources[{index}]", f"{source!r} has no 'path'")
    fmt = source.get("format", "text")
    if fmt not in SOURCE_FORMATS:
        raise ConfigError(
            f"sources[{index}].format", f"unknown format {fmt!r}", f"use one of {', '.join(SOURCE_FORMATS)}"
        )
    path = Path(source["path"])
    if not path.exists():
        raise ConfigError(f"sources[{index}].path", f"{path} does not exist")
    if fmt == "wikiextractor" and not path.is_dir():
        raise ConfigError(
            f"sources[{index}].path", f"{path} is not a directory",
            "format 'wikiextractor' takes the directory written by extract_wikipedia, not the dump",
        )
    return path, fmt, bool(source.get("split", True))


# Blocks of about this many bytes go to the cleaning processes: large
# enough that per-call overheads vanish, small enough to keep memory flat.
_BATCH_BYTES = 1 << 18


def _batches(specs: list[tuple[Path, str, bool]]) -> Iterator[tuple]:
    """Work units: a span of whole lines of an uncompressed text file, a block of
    whole lines of a gzipped one, or one WikiExtractor file.

    The main process only finds where spans end (or, for gzip, which cannot
    seek, decompresses blocks); reading, parsing and splitting happen in the
    cleaning processes.
    """
    for path, fmt, split in specs:
        if fmt == "wikiextractor":
            for file in wikiextractor_files(path):
                yield "wikiextractor", split, file
            continue
        if path.suffix != ".gz":
            yield from (("span", split, (path, offset, length)) for offset, length in _line_spans(path))
            continue
        # Bytes: decoding is left to the cleaning processes.
        with gzip.open(path, "rb") as handle:
            while True:
                block = handle.read(_BATCH_BYTES)
                if not block:
                    break
                if not block.endswith(b"\n"):
                    block += handle.readline()
                yield "text", split, (path, block)


def _line_spans(path: Path) -> Iterator[tuple[int, int]]:
    """(offset, length) of successive spans of about ``_BATCH_BYTES`` whole lines of a file."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        offset = 0
        while offset < size:
            end = offset + _BATCH_BYTES
            if end >= size:
                end = size
            else:  # through the end of the line that holds the span's last byte
                handle.seek(end - 1)
                end += len(handle.readline()) - 1
            yield offset, end - offset
            offset = end


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


def undecodable_line_error(path: str | os.PathLike) -> InputFormatError:
    """An error naming the first line of a (gzipped) file that is not UTF-8, found by reading it
    again line by line: blocks of text are decoded whole, so only their position would be known."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                return InputFormatError(path, number, f"not UTF-8 text: byte {line[error.start]:#04x} at column "
                                        f"{error.start + 1}", "convert the file to UTF-8")
    return InputFormatError(path, None, "not UTF-8 text", "convert the file to UTF-8")


def _unit_sentences(job: tuple, lang: str) -> list[str]:
    """The normalised sentences (``split``) or whole lines of a work unit, blank lines skipped."""
    kind, split, content = job
    if kind == "wikiextractor":
        units = [line for document in _iter_extracted_file(content) for line in document.splitlines()]
    else:
        if kind == "span":
            path, offset, length = content
            with open(path, "rb") as handle:
                handle.seek(offset)
                block = handle.read(length)
        else:
            path, block = content
        if b"\r" in block:  # the universal newlines of a file opened as text
            block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        normalised = _is_normalised(block)
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError:
            raise undecodable_line_error(path) from None
        text = unicodedata.normalize("NFC", text)
        if normalised:  # then blank lines are empty and "\n" is the only line break
            lines = [line for line in text.split("\n") if line]
            return _split_normalised(lines, lang) if split else lines
        units = [line for line in text.split("\n") if line.strip()]
        if split:
            units = [paragraph for line in units for paragraph in line.splitlines()]
    paragraphs = _normalise_lines(units)
    return _split_normalised([paragraph for paragraph in paragraphs if paragraph], lang) if split else paragraphs


# Each step below runs once on a whole batch joined by newlines (one C-level call)
# instead of once per line; none of them can create or merge lines.


def _normalise_lines(lines: list[str]) -> list[str]:
    """:func:`normalise_line` of each line (which must not contain a newline)."""
    # One NFC call for the whole batch. A printable line has no whitespace but
    # the plain space (tabs, no-break spaces and controls are not printable),
    # so without a double space it only needs stripping.
    return [
        line.strip() if line.isprintable() and "  " not in line else " ".join(_CONTROL.sub(" ", line).split())
        for line in unicodedata.normalize("NFC", "\n".join(lines)).split("\n")
    ]


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


_CLEANING: dict = {}


def _init_cleaning(settings: dict) -> None:
    _CLEANING.clear()
    _CLEANING.update(settings)


def _clean_batch(job: tuple) -> tuple[tuple[Path, int, int] | None, bytes, bytes, dict[str, int]]:
    """Split, normalise and filter one work unit.

    The kept sentences (UTF-8 lines) are appended to this process's file in
    the scratch directory; returns where they are (file, offset, length; None
    if nothing was kept), their key hashes, the byte size of each line (empty
    unless the settings ask for them) and counts.
    """
    lang = _CLEANING["lang"]
    sentences = _unit_sentences(job, lang)
    min_ratio, excluded = _CLEANING["min_script_ratio"], _CLEANING["excluded"]
    # Whole-batch array tests instead of a Python branch per sentence; drops are counted
    # in order (length, then script, then evaluation sentences).
    lengths = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
    keep = (lengths >= _CLEANING["min_chars"]) & (lengths <= _CLEANING["max_chars"])
    counts = {"read": len(sentences), "dropped_length": int(len(keep) - keep.sum())}
    before = int(keep.sum())
    if min_ratio > 0:
        keep &= _script_ratios(sentences, lang) >= min_ratio
    counts["dropped_script"] = before - int(keep.sum())
    kept = list(itertools.compress(sentences, keep))
    keys = _sentence_keys(kept)
    counts["dropped_excluded"] = 0
    if excluded:
        fresh = [key not in excluded for key in keys]
        counts["dropped_excluded"] = len(fresh) - sum(fresh)
        kept, keys = list(itertools.compress(kept, fresh)), list(itertools.compress(keys, fresh))
    digests = _key_digests(keys).tobytes()
    if not kept:
        return None, digests, b"", counts
    # Written here, in parallel: the cleaned text never passes through the main process.
    text = ("\n".join(kept) + "\n").encode("utf-8")
    with open(_CLEANING["scratch"] / f"cleaned-{os.getpid()}.txt", "ab") as shard:
        segment = (Path(shard.name), shard.tell(), len(text))
        shard.write(text)
    sizes = _line_sizes(text).tobytes() if _CLEANING["line_sizes"] else b""
    return segment, digests, sizes, counts


@contextlib.contextmanager
def _cleaned_batches(batches: Iterator, settings: dict, processes: int):
    """Results of :func:`_clean_batch` in input order, from ``processes`` worker processes."""
    # Build the language's large regexes and tables once, before forking, so workers inherit them.
    _boundary_pattern(settings["lang"])
    _letter_classes(settings["lang"])
    _key_tables()
    _unnormal_utf8()
    if processes == 1:
        _init_cleaning(settings)
        yield map(_clean_batch, batches)
        return
    # Pool.imap would read the whole corpus ahead into its task queue; a few
    # batches in flight per process keep memory flat.
    slots = threading.BoundedSemaphore(4 * processes)

    def bounded():
        for batch in batches:
            slots.acquire()
            yield batch

    with multiprocessing.get_context("fork").Pool(processes, _init_cleaning, (settings,)) as pool:

        def results():
            for result in pool.imap(_clean_batch, bounded()):
                slots.release()
                yield result

        yield results()


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


def prepare_monolingual(
    sources: list[dict],
    output_path: str | os.PathLike,
    *,
    lang: str,
    exclude_keys: Iterable[str] = frozenset(),
    min_chars: int = 1,
    max_chars: int = 10_000,
    max_sentences: int | None = None,
    max_bytes: int | None = None,
    seed: int = 0,
    min_script_ratio: float = 0.0,
    processes: int = 1,
    progress: bool = False,
) -> dict[str, int]:
    """Build a one-sentence-per-line training corpus from raw text sources, streaming.

    ``sources`` are dicts ``{"path": ..., "format": "text" | "wikiextractor"}``:
    ``text`` is a (possibly gzipped) file with one sentence or paragraph per
    line (``"split": false`` keeps lines whole); ``wikiextractor`` is a
    directory written by :func:`extract_wikipedia`. Paragraphs are split into
    sentences, which are normalised and then dropped when shorter than
    ``min_chars`` or longer than ``max_chars`` characters, when less than
    ``min_script_ratio`` of their letters are in ``lang``'s script, when
    their :func:`sentence_key` is in ``exclude_keys`` (evaluation sentences)
    or when they repeat an earlier sentence. If more than ``max_sentences``
    remain, a seeded random sample of that size is kept in original order.
    With ``max_bytes``, a seeded uniform subset of those of at most that many
    bytes (UTF-8, newlines included) is kept, in original order: each
    sentence draws a random priority and the lowest priorities that fit are
    kept (found from a histogram of bytes per priority, so nothing is held
    in memory); the output falls short of the budget by at most 1/65,536 of
    the sampled text's size.

    Memory does not grow with the corpus (beyond one bit per sentence):
    cleaned sentences go to scratch files next to the output, repeats are
    found by :class:`ramen.data.dedup.HashDeduplicator`, and a second pass writes
    the result. ``processes`` > 1 cleans batches in that many processes; the
    output is the same for any number. Returns counts: ``read`` = ``kept`` +
    every ``dropped_*``.
    """
    _check_lang(lang)
    if min_chars > max_chars:
        raise ConfigError("min_chars", f"min_chars ({min_chars}) exceeds max_chars ({max_chars})")
    if max_sentences is not None and max_sentences < 0:
        raise ConfigError("max_sentences", f"must be non-negative, got {max_sentences}")
    if max_bytes is not None and max_bytes < 0:
        raise ConfigError("max_bytes", f"must be non-negative, got {max_bytes}")
    if processes < 1:
        raise ConfigError("processes", f"must be at least 1, got {processes}")
    specs = [_source_spec(source, index) for index, source in enumerate(sources)]
    settings = {
        "lang": lang, "min_chars": min_chars, "max_chars": max_chars,
        "min_script_ratio": min_script_ratio, "excluded": frozenset(exclude_keys),
        "line_sizes": max_bytes is not None,
    }
    stats = dict.fromkeys(
        ("read", "kept", "dropped_length", "dropped_script", "dropped_excluded",
         "dropped_duplicate", "dropped_sampled", "dropped_bytes"),
        0,
    )
    with atomic_path(output_path) as tmp:
        settings["scratch"], line_bytes = tmp.parent / "cleaned", tmp.parent / "line-bytes.u4"
        settings["scratch"].mkdir()
        dedup = HashDeduplicator(tmp.parent / "hashes")
        candidates = []  # where the cleaned sentences are, in input order
        with contextlib.ExitStack() as stack:
            results = stack.enter_context(_cleaned_batches(_batches(specs), settings, processes))
            sizes = stack.enter_context(open(line_bytes, "wb")) if max_bytes is not None else None
            bar = stack.enter_context(
                tqdm(unit=" sentences", unit_scale=True, desc=f"cleaning {lang}", disable=not progress, mininterval=10)
            )
            for segment, digests, line_sizes, counts in results:
                if segment is not None:
                    candidates.append(segment)
                dedup.add(digests)
                if sizes is not None:
                    sizes.write(line_sizes)
                for name, count in counts.items():
                    stats[name] += count
                bar.update(counts["read"])
        repeats = dedup.repeats()
        unique = dedup.count - repeats.count()
        stats["dropped_duplicate"] = dedup.count - unique
        keep = unique if max_sentences is None else min(unique, max_sentences)
        stats["dropped_sampled"] = unique - keep
        stats["kept"] = _write_selected(
            [candidates], [tmp], repeats, keep, seed, line_bytes=line_bytes, max_bytes=max_bytes
        )
        stats["dropped_bytes"] = keep - stats["kept"]
        if not stats["kept"]:  # an empty file would pass for a finished output and fail a stage later
            dropped = ", ".join(f"{name[8:]} {count}" for name, count in stats.items()
                                if name.startswith("dropped_") and count)
            raise InputFormatError(
                ", ".join(str(path) for path, _, _ in specs), None,
                f"no {lang} sentence is left to train on ({stats['read']} read; dropped: {dropped or 'none'})",
                "check the corpora and the text settings (min_chars, max_chars, min_script_ratio)",
            )
    return stats


def _line_sizes(text: bytes) -> np.ndarray:
    """Size of each newline-terminated line of ``text``, newline included."""
    ends = np.flatnonzero(np.frombuffer(text, dtype=np.uint8) == ord("\n"))
    return np.diff(ends, prepend=-1).astype("<u4")


def prepare_parallel(
    src_path: str | os.PathLike,
    tgt_path: str | os.PathLike,
    out_src: str | os.PathLike,
    out_tgt: str | os.PathLike,
    *,
    exclude_keys: Iterable[str] = frozenset(),
    max_pairs: int | None = None,
    seed: int = 0,
    min_chars: int = 1,
    max_chars: int = 10_000,
    progress: bool = False,
) -> dict[str, int]:
    """Filter, deduplicate and subsample a line-aligned parallel corpus, streaming.

    Reads both (possibly gzipped) files in lockstep; raises
    :class:`InputFormatError` naming the shorter file and the first line
    number that has no partner. A pair is dropped when either side is empty,
    outside ``[min_chars, max_chars]`` characters, an evaluation sentence
    (its :func:`sentence_key` is in ``exclude_keys``), or when it repeats an
    earlier pair (both sides' keys equal; the first is kept). If more than
    ``max_pairs`` remain, a seeded random sample is kept in original order.
    Filtered pairs go to scratch files and their hashes to
    :class:`ramen.data.dedup.HashDeduplicator`; a second pass writes both outputs,
    atomically. Returns counts: ``read`` = ``kept`` + every ``dropped_*``.
    """
    if min_chars > max_chars:
        raise ConfigError("min_chars", f"min_chars ({min_chars}) exceeds max_chars ({max_chars})")
    if max_pairs is not None and max_pairs < 0:
        raise ConfigError("max_pairs", f"must be non-negative, got {max_pairs}")
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    excluded = set(exclude_keys)
    stats = dict.fromkeys(
        ("read", "kept", "dropped_empty", "dropped_length", "dropped_excluded", "dropped_duplicate",
         "dropped_sampled"),
        0,
    )
    missing = object()
    with atomic_path(out_src) as tmp_src, atomic_path(out_tgt) as tmp_tgt:
        candidates = [tmp_src.parent / "candidates.src.txt", tmp_tgt.parent / "candidates.tgt.txt"]
        dedup = HashDeduplicator(tmp_src.parent / "hashes")
        with contextlib.ExitStack() as stack:
            write_src, write_tgt = (
                stack.enter_context(open(path, "w", encoding="utf-8", newline="\n")) for path in candidates
            )
            bar = stack.enter_context(
                tqdm(unit=" pairs", unit_scale=True, desc="parallel", disable=not progress, mininterval=10)
            )
            src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
            digests = bytearray()
            line_no = 0
            while True:
                src = next(src_lines, missing)
                tgt = next(tgt_lines, missing)
                line_no += 1
                if line_no % 100_000 == 0:
                    bar.update(100_000)
                    dedup.add(bytes(digests))
                    digests.clear()
                if src is missing and tgt is missing:
                    break
                if src is missing or tgt is missing:
                    shorter, longer = (src_path, tgt_path) if src is missing else (tgt_path, src_path)
                    raise InputFormatError(
                        shorter, line_no,
                        f"file ends after {line_no - 1} lines but {longer} has a line {line_no}",
                        "parallel files must have the same number of lines",
                    )
                stats["read"] += 1
                src, tgt = normalise_line(src), normalise_line(tgt)
                if not src or not tgt:
                    stats["dropped_empty"] += 1
                    continue
                if not (min_chars <= len(src) <= max_chars and min_chars <= len(tgt) <= max_chars):
                    stats["dropped_length"] += 1
                    continue
                src_key, tgt_key = _normalised_sentence_key(src), _normalised_sentence_key(tgt)
                if src_key in excluded or tgt_key in excluded:
                    stats["dropped_excluded"] += 1
                    continue
                write_src.write(src + "\n")
                write_tgt.write(tgt + "\n")
                digests += _key_digest(src_key + "\n" + tgt_key)  # keys hold no newline
            dedup.add(bytes(digests))
        repeats = dedup.repeats()
        unique = dedup.count - repeats.count()
        stats["dropped_duplicate"] = dedup.count - unique
        keep = unique if max_pairs is None else min(unique, max_pairs)
        stats["dropped_sampled"] = unique - keep
        stats["kept"] = _write_selected(candidates, [tmp_src, tmp_tgt], repeats, keep, seed)
    return stats


def evaluation_keys(nli_paths: Iterable[str | os.PathLike | dict]) -> set[str]:
    """Sentence keys of every sentence in the given evaluation files.

    Items are XNLI-style TSV paths or NLI source dicts as taken by
    :func:`ramen.data.nli_data.read_nli` (premises and hypotheses), CoNLL-U
    treebanks (``.conllu``, ``.conllu.gz``: each sentence's text), or any
    other text file (one sentence per line, e.g. retrieval test pairs).
    """
    from ramen.data.conllu import sentence_texts

    keys: set[str] = set()
    for item in nli_paths:
        name = str(item.get("path", "") if isinstance(item, dict) else item)
        if isinstance(item, dict) or name.endswith(".tsv"):
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
