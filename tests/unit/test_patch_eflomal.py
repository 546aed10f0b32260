"""tools/patch_eflomal.py edits every file or none: text it does not find stops it before any write.

(The patched build itself is tested in test_align.py: same seed, same links, whatever the threads.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "patch_eflomal.py"


@pytest.fixture(scope="module")
def patcher():
    spec = importlib.util.spec_from_file_location("patch_eflomal", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def source_tree(root: Path, patcher, leave_out: str | None = None) -> dict[Path, str]:
    """Files holding exactly the text each edit expects (but ``leave_out``), as a release would."""
    files = {}
    for name, edits in patcher.EDITS.items():
        text = "".join(f"/* before */\n{old}/* after */\n" for old, _ in edits if old != leave_out)
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files[path] = text
    return files


def test_every_edit_is_applied_once(tmp_path, patcher):
    files = source_tree(tmp_path, patcher)
    patcher.main(tmp_path)
    for name, edits in patcher.EDITS.items():
        text = (tmp_path / name).read_text()
        for old, new in edits:
            assert new in text
    assert "EFLOMAL_SEED" in (tmp_path / "src/random.c").read_text()
    assert "#pragma omp critical" not in (tmp_path / "src/eflomal.c").read_text()
    # A second run finds the release's text no more and stops.
    patched = {path: path.read_text() for path in files}
    with pytest.raises(SystemExit, match="found it 0 times"):
        patcher.main(tmp_path)
    assert {path: path.read_text() for path in files} == patched


def test_text_not_found_stops_before_any_file_is_written(tmp_path, patcher):
    files = source_tree(tmp_path, patcher, leave_out=patcher.SAMPLE_LOOP_TAIL)
    with pytest.raises(SystemExit, match="src/eflomal.c: expected this text once, found it 0 times"):
        patcher.main(tmp_path)
    assert {path: path.read_text() for path in files} == files  # random.c, checked first, untouched too


def test_a_directory_that_is_not_the_release_is_named(tmp_path, patcher):
    with pytest.raises(SystemExit, match="not found: is .* the unpacked eflomal 2.0.0 sdist"):
        patcher.main(tmp_path)
