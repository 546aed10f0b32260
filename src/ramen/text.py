"""Raw text preparation: Wikipedia extraction, sentence splitting, filtering.

Everything here streams its input: corpora are read line by line (or one
Wikipedia article at a time) and only fixed-size hashes are kept in memory
for deduplication. Outputs are written atomically.

Supported languages: en, fr, ru, vi, ar, zh, hi (see :data:`LANGUAGES`).
"""

from __future__ import annotations

import bz2
import contextlib
import hashlib
import os
import random
import re
import subprocess
import sys
import unicodedata
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from pathlib import Path

from .errors import ConfigError, InputFormatError
from .io import atomic_path, open_text, read_lines
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
    text = unicodedata.normalize("NFC", normalise_line(line).casefold())
    text = _SPACE_BY_PUNCTUATION.sub("", text)
    for curly, straight in _QUOTES:
        if curly in text:  # str.replace per quote is much faster than str.translate
            text = text.replace(curly, straight)
    return text.strip(_EDGE_CHARS)


def _key_digest(key: str) -> bytes:
    # 8-byte digests keep dedup memory bounded; collisions are negligible at corpus scale.
    return hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()


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


def _range_table(lang: str) -> tuple[list[int], list[int]]:
    ranges = sorted(r for script in LANGUAGE_SCRIPTS[lang] for r in _SCRIPT_RANGES[script])
    return [start for start, _ in ranges], [end for _, end in ranges]


_RANGE_TABLES = {lang: _range_table(lang) for lang in LANGUAGES}


def script_ratio(line: str, lang: str) -> float:
    """Fraction of the letters in ``line`` that belong to the script(s) of ``lang``.

    Latin for en/fr/vi, Cyrillic for ru, Arabic for ar, Han for zh, Devanagari
    for hi. Non-letters (digits, punctuation, combining marks) are ignored; a
    line without letters scores 0.
    """
    starts, ends = _RANGE_TABLES[_check_lang(lang)]
    letters = in_script = 0
    for char in line:
        if char.isalpha():
            letters += 1
            code = ord(char)
            index = bisect_right(starts, code) - 1
            if index >= 0 and code <= ends[index]:
                in_script += 1
    return in_script / letters if letters else 0.0


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
_INITIAL_SEPARATORS = re.compile(r"[.\-]")


def _is_abbreviation(token: str, lang: str) -> bool:
    token = token.lstrip(_OPENERS)
    if token in _ABBREVIATIONS[lang]:
        return True
    # An initial: "J. S. Bach", "A. S. Pouchkine", "U.S.", "J.-C."
    last = _INITIAL_SEPARATORS.split(token)[-1]
    return len(last) == 1 and last.isupper()


def _split_paragraph(paragraph: str, lang: str) -> list[str]:
    always = _ALWAYS_END.get(lang, "")
    sentences = []
    start = 0
    for match in _TERMINAL_RE[lang].finditer(paragraph):
        end = match.end()
        terms = match.group(0)
        if not any(char in always for char in terms):
            if end < len(paragraph) and not paragraph[end].isspace():
                continue  # "3.5", "U.S.A", "e.g.,"
            following = paragraph[end:].lstrip()
            if following and following[0].islower():
                continue  # "etc. and", "« Oui ? » demanda-t-il"
            if terms[0] == "." and terms.rstrip(_CLOSERS + " \u00a0\u202f") == ".":
                before = paragraph[start:match.start()].rsplit(None, 1)
                token = before[-1] if before else ""
                if _is_abbreviation(token, lang):
                    continue
                if following[:1].isdigit() and token.lstrip(_OPENERS).casefold() in _NUMBER_ABBREVIATIONS:
                    continue
                if len(before) == 1 and token.isdigit():
                    continue  # list numbering: "1. Introduction"
        sentence = paragraph[start:end].strip()
        if sentence:
            sentences.append(sentence)
        start = end
    rest = paragraph[start:].strip()
    if rest:
        sentences.append(rest)
    return sentences


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
    sentences: list[str] = []
    for paragraph in _paragraphs(text):
        sentences.extend(_split_paragraph(paragraph, lang))
    return sentences


def _paragraphs(text: str) -> Iterator[str]:
    """Yield the non-empty lines of ``text``, normalised."""
    for line in text.splitlines():
        line = normalise_line(line)
        if line:
            yield line


# ---------------------------------------------------------------------------
# Wikipedia


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
            "-o", str(tmp), "--processes", str(processes), "--quiet",
        ]
        if not expand_templates:
            command.append("--no-templates")
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            tail = "\n".join(result.stderr.strip().splitlines()[-15:])
            raise InputFormatError(
                dump_path, None, f"WikiExtractor failed with exit status {result.returncode}:\n{tail}",
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
    out_dir = Path(out_dir)
    files = sorted(p for p in out_dir.rglob("wiki_*") if p.is_file())
    if not files:
        raise InputFormatError(
            out_dir, None, "no WikiExtractor output files (wiki_*) found",
            "point to a directory made by extract_wikipedia",
        )
    for path in files:
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


def _iter_source_sentences(path: Path, fmt: str, split: bool, lang: str) -> Iterator[str]:
    if fmt == "wikiextractor":
        for document in iter_wikiextractor_documents(path):
            yield from split_sentences(document, lang)
        return
    for line in read_lines(path):
        if not line.strip():
            continue
        if split:
            yield from split_sentences(line, lang)
        else:
            yield line


def _subsample_aligned(paths: list[Path], total: int, keep: int, seed: int) -> None:
    """Keep ``keep`` of the ``total`` aligned lines of ``paths``, in order, chosen by ``seed``.

    Selection sampling (Knuth's Algorithm S): uniform, exact count, one pass,
    constant memory.
    """
    staged = [path.with_name("unsampled-" + path.name) for path in paths]
    for path, stage in zip(paths, staged):
        os.replace(path, stage)
    rng = random.Random(seed)
    needed = keep
    with contextlib.ExitStack() as stack:
        readers = [stack.enter_context(open_text(stage)) for stage in staged]
        writers = [stack.enter_context(open_text(path, "wt")) for path in paths]
        for index, lines in enumerate(zip(*readers)):
            if needed == 0:
                break
            if rng.random() * (total - index) < needed:
                for writer, line in zip(writers, lines):
                    writer.write(line)
                needed -= 1
    for stage in staged:
        stage.unlink()


def prepare_monolingual(
    sources: list[dict],
    output_path: str | os.PathLike,
    *,
    lang: str,
    exclude_keys: Iterable[str] = frozenset(),
    min_chars: int = 1,
    max_chars: int = 10_000,
    max_sentences: int | None = None,
    seed: int = 0,
    min_script_ratio: float = 0.0,
) -> dict[str, int]:
    """Build a one-sentence-per-line training corpus from raw text sources.

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

    Returns counts: ``read`` = ``kept`` + every ``dropped_*``.
    """
    _check_lang(lang)
    if min_chars > max_chars:
        raise ConfigError("min_chars", f"min_chars ({min_chars}) exceeds max_chars ({max_chars})")
    if max_sentences is not None and max_sentences < 0:
        raise ConfigError("max_sentences", f"must be non-negative, got {max_sentences}")
    specs = [_source_spec(source, index) for index, source in enumerate(sources)]
    excluded = set(exclude_keys)
    seen: set[bytes] = set()
    stats = dict.fromkeys(
        ("read", "kept", "dropped_length", "dropped_script", "dropped_excluded",
         "dropped_duplicate", "dropped_sampled"),
        0,
    )
    output_path = Path(output_path)
    with atomic_path(output_path) as tmp:
        with open_text(tmp, "wt") as out:
            for path, fmt, split in specs:
                for sentence in _iter_source_sentences(path, fmt, split, lang):
                    stats["read"] += 1
                    sentence = normalise_line(sentence)
                    if not min_chars <= len(sentence) <= max_chars:
                        stats["dropped_length"] += 1
                        continue
                    if min_script_ratio > 0 and script_ratio(sentence, lang) < min_script_ratio:
                        stats["dropped_script"] += 1
                        continue
                    key = sentence_key(sentence)
                    if key in excluded:
                        stats["dropped_excluded"] += 1
                        continue
                    digest = _key_digest(key)
                    if digest in seen:
                        stats["dropped_duplicate"] += 1
                        continue
                    seen.add(digest)
                    out.write(sentence + "\n")
                    stats["kept"] += 1
        if max_sentences is not None and stats["kept"] > max_sentences:
            _subsample_aligned([tmp], stats["kept"], max_sentences, seed)
            stats["dropped_sampled"] = stats["kept"] - max_sentences
            stats["kept"] = max_sentences
    return stats


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
) -> dict[str, int]:
    """Filter and subsample a line-aligned parallel corpus.

    Reads both (possibly gzipped) files in lockstep; raises
    :class:`InputFormatError` naming the shorter file and the first line
    number that has no partner. A pair is dropped when either side is empty,
    outside ``[min_chars, max_chars]`` characters, or an evaluation sentence
    (its :func:`sentence_key` is in ``exclude_keys``). If more than
    ``max_pairs`` remain, a seeded random sample is kept in original order.
    Both outputs are written atomically. Returns counts: ``read`` = ``kept``
    + every ``dropped_*``.
    """
    if min_chars > max_chars:
        raise ConfigError("min_chars", f"min_chars ({min_chars}) exceeds max_chars ({max_chars})")
    if max_pairs is not None and max_pairs < 0:
        raise ConfigError("max_pairs", f"must be non-negative, got {max_pairs}")
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    excluded = set(exclude_keys)
    stats = dict.fromkeys(
        ("read", "kept", "dropped_empty", "dropped_length", "dropped_excluded", "dropped_sampled"), 0
    )
    missing = object()
    with atomic_path(out_src) as tmp_src, atomic_path(out_tgt) as tmp_tgt:
        with open_text(tmp_src, "wt") as write_src, open_text(tmp_tgt, "wt") as write_tgt:
            src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
            line_no = 0
            while True:
                src = next(src_lines, missing)
                tgt = next(tgt_lines, missing)
                line_no += 1
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
                if sentence_key(src) in excluded or sentence_key(tgt) in excluded:
                    stats["dropped_excluded"] += 1
                    continue
                write_src.write(src + "\n")
                write_tgt.write(tgt + "\n")
                stats["kept"] += 1
        if max_pairs is not None and stats["kept"] > max_pairs:
            _subsample_aligned([tmp_src, tmp_tgt], stats["kept"], max_pairs, seed)
            stats["dropped_sampled"] = stats["kept"] - max_pairs
            stats["kept"] = max_pairs
    return stats


def evaluation_keys(nli_paths: Iterable[str | os.PathLike | dict]) -> set[str]:
    """Sentence keys of every evaluation sentence in the given files.

    Items are XNLI-style TSV paths, NLI source dicts as taken by
    :func:`ramen.nli_data.read_nli`, or other paths (plain or gzipped), read as
    one sentence per line (translation dev/test sets).
    """
    keys: set[str] = set()
    for item in nli_paths:
        if not isinstance(item, dict) and not str(item).endswith(".tsv"):
            keys.update(sentence_key(line) for line in read_lines(item))
            continue
        examples = read_nli(item) if isinstance(item, dict) else read_xnli_tsv(item)
        for example in examples:
            keys.add(sentence_key(example.premise))
            keys.add(sentence_key(example.hypothesis))
    keys.discard("")  # a punctuation-only sentence must not exclude every other one
    return keys
