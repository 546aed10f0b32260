"""Wikipedia: WikiExtractor run on a MediaWiki dump, and the articles read back from its output."""

from __future__ import annotations

import bz2
import collections
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from ramen.errors import ConfigError, InputFormatError
from ramen.io import atomic_path, open_text


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
        raise ConfigError("threads.text", f"must be at least 1, got {processes}")
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
