"""Every input of a run read before the first job: a bad file fails in seconds, not after training.

The workflow calls :func:`check_language_settings` and :func:`check_inputs` while it builds the
job graph (every invocation, dry runs included). Files that are not there yet (downloads) are
checked when they arrive (ramen.data.download). What a file has passed is remembered per path, size
and modification time, so a large corpus is read once, not at every invocation.
"""

from __future__ import annotations

import bz2
import gzip
import json
import os
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ramen.data.download import looks_like_html
from ramen.errors import ConfigError, InputFormatError

# Large corpora are read this far; smaller files whole.
HEAD_BYTES = 8 << 20
CACHE_VERSION = 1
# A printable ASCII character: text, found without decoding in nearly every real file.
_ASCII_GLYPH = re.compile(rb"[\x21-\x7e]")


@dataclass(frozen=True)
class InputFile:
    """One file a run reads: the config setting that names it, its local path and its kind."""

    setting: str
    path: str
    kind: str  # corpus | wikipedia | lines | nli | conllu | vectors | dictionary
    options: dict = field(default_factory=dict, hash=False, compare=False)


def _open_head(path: Path) -> bytes:
    """The first HEAD_BYTES of the file's content (decompressed for .gz and .bz2)."""
    with open(path, "rb") as raw:
        magic = raw.read(4)
    if path.suffix == ".gz":
        if magic[:2] != b"\x1f\x8b":
            raise _not_a(path, "gzip", magic)
        opener = gzip.open
    elif path.suffix == ".bz2":
        if magic[:3] != b"BZh":
            raise _not_a(path, "bzip2", magic)
        opener = bz2.open
    else:
        opener = open
    try:
        with opener(path, "rb") as handle:
            return handle.read(HEAD_BYTES)
    except (OSError, EOFError) as error:
        raise InputFormatError(path, None, f"cannot be decompressed ({error})",
                               "the file is damaged or truncated; fetch it again") from None


def _not_a(path: Path, kind: str, magic: bytes) -> InputFormatError:
    with open(path, "rb") as handle:
        head = handle.read(512)
    if looks_like_html(head):
        return _html_error(path)
    return InputFormatError(path, None, f"is not a {kind} file (it starts with {magic!r})",
                            f"the name ends in {path.suffix}: give the real file or rename it")


def _html_error(path: Path) -> InputFormatError:
    return InputFormatError(path, 1, "is an HTML page, not the data file its name says",
                            "a browser or a login page saved it; fetch the file itself")


def _check_text_head(path: Path, head: bytes, whole: bool) -> None:
    """UTF-8 (the bad line named), not HTML, and not empty or whitespace only."""
    if looks_like_html(head[:512]):
        raise _html_error(path)
    if not whole:  # the cut may fall inside a character or a line
        head = head[: head.rfind(b"\n") + 1] or head
    for number, line in enumerate(head.split(b"\n"), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise InputFormatError(path, number, f"not UTF-8 text: byte {line[error.start]:#04x} at column "
                                   f"{error.start + 1}", "convert the file to UTF-8") from None
    if not _holds_text(head):
        raise InputFormatError(path, None, "holds no text (empty or whitespace only, zero-width and no-break "
                               "spaces included)",
                               "give a file with one sentence or paragraph per line")


def _holds_text(head: bytes) -> bool:
    """Whether a character is visible: not whitespace (no-break and ideographic spaces included)
    and not a format or control character (zero-width space, joiners, byte order mark)."""
    if _ASCII_GLYPH.search(head):
        return True
    return any(not char.isspace() and unicodedata.category(char) not in ("Cf", "Cc")
               for char in head.decode("utf-8", errors="replace"))


def _check_corpus(item: InputFile) -> None:
    path = Path(item.path)
    head = _open_head(path)
    whole = len(head) < HEAD_BYTES
    _check_text_head(path, head, whole)


def _check_wikipedia(item: InputFile) -> None:
    path = Path(item.path)
    head = _open_head(path)
    if looks_like_html(head[:512]):
        raise _html_error(path)
    if b"<mediawiki" not in head[:4096]:
        raise InputFormatError(path, 1, "is not a MediaWiki XML dump (no <mediawiki> element at the start)",
                               "give a pages-articles .xml.bz2 dump from dumps.wikimedia.org")


def _line_count(path: Path) -> int:
    opener = gzip.open if path.suffix == ".gz" else open
    count = 0
    with opener(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            count += block.count(b"\n")
    return count


def _check_lines(item: InputFile) -> None:
    """A line-aligned text file (parallel side, retrieval pair, NMT split); the same number of
    lines as its partner when the item names one."""
    path = Path(item.path)
    head = _open_head(path)
    _check_text_head(path, head, len(head) < HEAD_BYTES)
    partner = item.options.get("aligned_with")
    if partner and Path(partner).is_file() and item.options.get("count_lines", True):
        ours, theirs = _line_count(path), _line_count(Path(partner))
        if ours != theirs:
            raise InputFormatError(path, None, f"has {ours} lines but its other side {partner} has {theirs}",
                                   "the two sides must be line-aligned")


def _check_nli(item: InputFile) -> None:
    from ramen.data.nli_data import read_nli, read_xnli_tsv

    path = Path(item.path)
    _check_text_head(path, _open_head(path)[:4096], False)
    source = item.options.get("source")
    examples = read_nli({**source, "path": item.path}) if source else read_xnli_tsv(path)
    if not examples:
        raise InputFormatError(path, None, "holds no sentence pairs")


def _check_conllu(item: InputFile) -> None:
    from ramen.data.conllu import read_conllu

    path = Path(item.path)
    head = _open_head(path)
    _check_text_head(path, head, len(head) < HEAD_BYTES)
    if not sum(1 for _ in read_conllu(path)):
        raise InputFormatError(path, None, "holds no sentences")


def _check_vectors(item: InputFile) -> None:
    from ramen.data.vectors import read_vec

    path = Path(item.path)
    if path.suffix == ".bin":
        return  # fastText's binary model: read by fastText itself
    head = _open_head(path)
    if looks_like_html(head[:512]):
        raise _html_error(path)
    read_vec(path, max_words=100)  # the header and the first lines
    count = int(head.split(b"\n", 1)[0].split()[0])
    lines = _line_count(path)
    if lines < count + 1:
        raise InputFormatError(path, lines + 1, f"file ends after {lines - 1} of {count} vectors",
                               "the file is truncated; download it again")


def _check_dictionary(item: InputFile) -> None:
    from ramen.data.dictionaries import read_dictionary

    path = Path(item.path)
    _check_text_head(path, _open_head(path), True)
    read_dictionary(path)


def _check_sib200(item: InputFile) -> None:
    from ramen.data.sib200 import read_sib200

    path = Path(item.path)
    head = _open_head(path)
    _check_text_head(path, head, len(head) < HEAD_BYTES)
    read_sib200(path)


CHECKS = {
    "corpus": _check_corpus,
    "wikipedia": _check_wikipedia,
    "lines": _check_lines,
    "nli": _check_nli,
    "conllu": _check_conllu,
    "sib200": _check_sib200,
    "vectors": _check_vectors,
    "dictionary": _check_dictionary,
}


def _fingerprint(item: InputFile) -> str:
    stat = os.stat(item.path)
    return json.dumps([CACHE_VERSION, item.kind, os.path.abspath(item.path), stat.st_size, stat.st_mtime_ns,
                       item.options], sort_keys=True, default=str)


def check_inputs(items: Iterable[InputFile], cache: str | os.PathLike | None = None) -> list[InputFile]:
    """Check every item whose file exists; return those not there yet (downloads to come).

    ``cache`` is a JSON file of fingerprints that passed before; it is rewritten atomically.
    """
    passed: set[str] = set()
    if cache and Path(cache).is_file():
        try:
            passed = set(json.loads(Path(cache).read_text(encoding="utf-8")))
        except (ValueError, OSError):
            passed = set()
    pending, newly = [], []
    for item in items:
        if not Path(item.path).exists():
            pending.append(item)
            continue
        if Path(item.path).is_dir():
            continue
        fingerprint = _fingerprint(item)
        if fingerprint in passed:
            continue
        try:
            CHECKS[item.kind](item)
        except InputFormatError as error:
            raise InputFormatError(error.path, error.line, f"{_problem(error)} [config setting '{item.setting}']") \
                from None
        newly.append(fingerprint)
    if cache and newly:
        cache = Path(cache)
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(sorted(passed | set(newly))), encoding="utf-8")
        os.replace(tmp, cache)
    return pending


def _problem(error: InputFormatError) -> str:
    where = f"{error.path}:{error.line}: " if error.line is not None else f"{error.path}: "
    return str(error)[len(where):] if str(error).startswith(where) else str(error)


def missing_language_settings(config: dict, needs: dict[str, list[str]]) -> None:
    """Raise ConfigError naming the first setting a listed language lacks.

    ``needs`` maps a language to the dotted settings its requested targets read, e.g.
    ``{"de": ["corpora.de", "tasks.xnli.test.de"]}``.
    """
    for lang, settings in needs.items():
        for setting in settings:
            value = config
            for part in setting.split("."):
                value = value.get(part) if isinstance(value, dict) else None
                if value is None:
                    break
            if value is None or value == [] or value == {}:
                raise ConfigError(
                    setting, f"'{lang}' is in `languages` (or is the source language) but this setting is missing",
                    f"add {setting} to the config file, or take '{lang}' out of `languages`",
                )
