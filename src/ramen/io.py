"""File helpers: streaming text reads and atomic writes (nothing is left half written)."""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path


def open_text(path: str | os.PathLike, mode: str = "rt"):
    """Open a plain or gzip-compressed UTF-8 text file."""
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, mode, encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def read_lines(path: str | os.PathLike) -> Iterator[str]:
    """Yield the lines of a (possibly gzipped) text file without their newline."""
    with open_text(path) as handle:
        for line in handle:
            yield line.rstrip("\n").rstrip("\r")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path next to ``path``; rename it onto ``path`` on success.

    Works for files and directories: the caller writes to the yielded path,
    and readers never see a half-written output.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent)) / path.name
    try:
        yield tmp
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> int:
    """Atomically write lines (newline-terminated); return how many were written."""
    count = 0
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            for line in lines:
                handle.write(line)
                handle.write("\n")
                count += 1
    return count


def tsv_cell(value, *, missing: str = "", digits: int = 6) -> str:
    """One table cell: floats to ``digits`` decimals, booleans as true/false, no tabs or newlines."""
    if value is None:
        return missing
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return " ".join(str(value).split())  # tabs/newlines would break the table


def write_tsv(path: str | os.PathLike, rows: Iterable[Mapping], columns: Sequence[str], *,
              missing: str = "", digits: int = 6) -> int:
    """Atomically write rows as a TSV with a header (absent values as ``missing``); return the row count."""
    count = 0
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write("\t".join(columns) + "\n")
            for row in rows:
                handle.write("\t".join(tsv_cell(row.get(c), missing=missing, digits=digits) for c in columns) + "\n")
                count += 1
    return count
