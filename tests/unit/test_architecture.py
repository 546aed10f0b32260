"""The import contracts of `make lint` (pyproject.toml [tool.importlinter]) catch what they are for:
an import from a lower stage into a higher one, a new top-level module without a layer, an import
cycle inside a stage, torch reached from a module the Snakefile imports, and a task importing
another. Each case runs lint-imports on a copy of the package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_copy(tmp_path: Path, change) -> subprocess.CompletedProcess:
    """lint-imports over a copy of src/ramen with ``change(package_dir)`` applied."""
    shutil.copytree(REPO / "src" / "ramen", tmp_path / "src" / "ramen",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    change(tmp_path / "src" / "ramen")
    # The copy comes first on the path, before the installed (editable) package.
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)


def append(path: Path, line: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")


def test_the_package_keeps_the_contract(tmp_path):
    result = lint_copy(tmp_path, lambda package: None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    "change, message",
    [
        # The data stage reading a report: upward.
        (lambda package: append(package / "data" / "dedup.py", "import ramen.reports.summary  # noqa"),
         "ramen.data is not allowed to import ramen.reports"),
        # A new top-level module nobody placed in a layer.
        (lambda package: (package / "extras.py").write_text("X = 1\n"),
         "The following modules are not listed as layers:\n\n- ramen.extras"),
        # Two text modules importing each other.
        (lambda package: append(package / "data" / "text" / "normalise.py", "import ramen.data.text.keys  # noqa"),
         "No cycles are allowed in ramen.data.text"),
        # The task registry, read while the job graph is built, reaching torch even from inside a function.
        (lambda package: append(package / "tasks" / "__init__.py",
                                "def _late():\n    from ramen.tasks.xnli import NliSettings  # noqa\n"),
         "ramen.tasks is not allowed to import torch"),
        # One task importing another instead of what they share (ramen.tasks.swap, .finetune, ...).
        (lambda package: append(package / "tasks" / "ud.py", "from ramen.tasks.xnli import LABELS  # noqa"),
         "ramen.tasks.ud is not allowed to import ramen.tasks.xnli"),
    ],
    ids=["upward", "unplaced", "cycle", "torch-at-graph-time", "sibling-task"],
)
def test_the_contract_breaks_on(tmp_path, change, message):
    baseline = lint_copy(tmp_path / "before", lambda package: None)
    result = lint_copy(tmp_path / "after", change)
    assert result.returncode != 0, result.stdout
    assert message in result.stdout + result.stderr
    assert message not in baseline.stdout + baseline.stderr
