"""Fail when a module of the package is over MAX_LINES lines (make lint).

Long modules mix concerns and are hard to review; a module that grows past the limit is split by
concern. The package (src/) is checked: tests and tools are scripts around it.
"""

from __future__ import annotations

import sys
from pathlib import Path

MAX_LINES = 600
ROOTS = ("src",)


def long_modules(repo: Path, roots=ROOTS, limit: int = MAX_LINES) -> list[tuple[Path, int]]:
    """(path relative to ``repo``, line count) of every .py under ``roots`` over ``limit`` lines."""
    found = []
    for root in roots:
        for path in sorted((repo / root).rglob("*.py")):
            count = len(path.read_text(encoding="utf-8").splitlines())
            if count > limit:
                found.append((path.relative_to(repo), count))
    return found


def main(argv: list[str] | None = None) -> int:
    repo = Path(argv[0] if argv else ".")
    found = long_modules(repo)
    for path, count in found:
        print(f"{path}: {count} lines, over the {MAX_LINES}-line limit: split it by concern", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
