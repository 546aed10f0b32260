"""make lint's module-length check (tools/check_module_length.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_module_length", REPO / "tools" / "check_module_length.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_a_module_over_the_limit_is_named_with_its_length(tmp_path, capsys):
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "short.py").write_text("x = 1\n" * check.MAX_LINES)
    assert check.main([str(tmp_path)]) == 0
    (package / "long.py").write_text("x = 1\n" * (check.MAX_LINES + 1))
    assert check.main([str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith(f"src/pkg/long.py: {check.MAX_LINES + 1} lines, over the")
