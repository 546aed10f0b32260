"""The import contracts of `make lint` (pyproject.toml [tool.importlinter]) catch what they are for:
an import from a lower stage into a higher one, a new top-level module without a layer, an import
cycle inside a stage, torch reached from a module the Snakefile imports, and a task importing another.

lint-imports runs twice per suite: once on an unchanged copy of the package (the messages must not
be there) and once on a copy with every breaking change applied (each must be reported)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def append(path: Path, line: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")


# (name, change to the copied package, what lint-imports must then say)
BREAKING_CHANGES = [
    # The data stage reading a report: upward.
    ("upward", lambda package: append(package / "data" / "dedup.py", "import ramen.reports.summary  # noqa"),
     "ramen.data is not allowed to import ramen.reports"),
    # A new top-level module nobody placed in a layer.
    ("unplaced", lambda package: (package / "extras.py").write_text("X = 1\n"),
     "The following modules are not listed as layers:\n\n- ramen.extras"),
    # Two text modules importing each other.
    ("cycle", lambda package: append(package / "data" / "text" / "normalise.py", "import ramen.data.text.keys  # noqa"),
     "No cycles are allowed in ramen.data.text"),
    # The task registry, read while the job graph is built, reaching torch even from inside a function.
    ("torch-at-graph-time", lambda package: append(package / "tasks" / "__init__.py",
                                                   "def _late():\n    from ramen.tasks.xnli import NliSettings  # noqa\n"),
     "ramen.tasks is not allowed to import torch"),
    # One task importing another instead of what they share (ramen.tasks.swap, .finetune, ...).
    ("sibling-task", lambda package: append(package / "tasks" / "ud.py", "from ramen.tasks.xnli import LABELS  # noqa"),
     "ramen.tasks.ud is not allowed to import ramen.tasks.xnli"),
]


def lint_copy(tmp_path: Path, changes) -> str:
    """lint-imports' report over a copy of src/ramen with every ``change(package_dir)`` applied."""
    shutil.copytree(REPO / "src" / "ramen", tmp_path / "src" / "ramen",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    for change in changes:
        change(tmp_path / "src" / "ramen")
    # The copy comes first on the path, before the installed (editable) package.
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    result = subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=tmp_path, env=env,
                            capture_output=True, text=True)
    return f"exit {result.returncode}\n{result.stdout}{result.stderr}"


@pytest.fixture(scope="module")
def unchanged(tmp_path_factory) -> str:
    return lint_copy(tmp_path_factory.mktemp("unchanged"), [])


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> str:
    return lint_copy(tmp_path_factory.mktemp("broken"), [change for _, change, _ in BREAKING_CHANGES])


def test_the_package_keeps_the_contract(unchanged):
    assert unchanged.startswith("exit 0\n"), unchanged
    assert "0 broken" in unchanged


@pytest.mark.parametrize("message", [message for _, _, message in BREAKING_CHANGES],
                         ids=[name for name, _, _ in BREAKING_CHANGES])
def test_the_contract_breaks_on(unchanged, broken, message):
    assert not broken.startswith("exit 0\n"), broken
    assert message in broken
    assert message not in unchanged
