"""Corpus sources cut into work units for the cleaning processes, and each unit read back as
normalised sentences (or whole lines)."""

from __future__ import annotations

import gzip
import os
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from ramen.errors import ConfigError, InputFormatError

from .normalise import _is_normalised, _normalise_lines
from .sentences import _split_normalised
from .wikipedia import _iter_extracted_file, wikiextractor_files

SOURCE_FORMATS: tuple[str, ...] = ("text", "wikiextractor")


def _source_spec(source: dict | str | os.PathLike, setting: str) -> tuple[Path, str, bool]:
    """(path, format, split into sentences?); ``setting`` is its key (``corpora.<lang>[i]``), which errors name."""
    if isinstance(source, (str, os.PathLike)):
        source = {"path": source}
    if not isinstance(source, dict) or "path" not in source:
        raise ConfigError(setting, f"{source!r} has no 'path'")
    fmt = source.get("format", "text")
    if fmt not in SOURCE_FORMATS:
        raise ConfigError(
            f"{setting}.format", f"unknown format {fmt!r}", f"use one of {', '.join(SOURCE_FORMATS)}"
        )
    path = Path(source["path"])
    if not path.exists():
        raise ConfigError(f"{setting}.path", f"{path} does not exist")
    if fmt == "wikiextractor" and not path.is_dir():
        raise ConfigError(
            f"{setting}.path", f"{path} is not a directory",
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
