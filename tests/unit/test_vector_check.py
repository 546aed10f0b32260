"""A .vec file is checked row by row, however far into the file a bad row lies."""

from __future__ import annotations

import gzip

import pytest

from ramen.data.input_checks import InputFile, check_inputs
from ramen.data.vector_check import check_vec_file
from ramen.errors import InputFormatError

SETTING = "monolingual.vectors.fr"


def write_vec(path, rows: int, dim: int = 4, bad: dict[int, str] | None = None, header: str | None = None):
    lines = [header or f"{rows} {dim}"]
    for row in range(rows):
        lines.append(f"mot{row} " + " ".join(f"{(row + i) / 7:.4f}" for i in range(dim)) + " ")
    for line, text in (bad or {}).items():
        lines[line - 1] = text
    data = "\n".join(lines) + "\n"
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data.encode("utf-8")))
    else:
        path.write_text(data, encoding="utf-8")
    return path


def test_a_well_formed_file_passes_plain_or_gzipped(tmp_path):
    assert check_vec_file(write_vec(tmp_path / "wiki.fr.vec", 300), SETTING) == {"words": 300, "dim": 4}
    assert check_vec_file(write_vec(tmp_path / "wiki.fr.vec.gz", 30), SETTING) == {"words": 30, "dim": 4}


@pytest.mark.parametrize("row, problem", [
    ("mot 0.1 0.2 0.3", "line has 3 values, the header says 4"),
    ("mot 0.1 0.2 0.3 0.4 0.5", "line has 5 values"),
    ("mot 0.1 0.2 abc 0.4", "not a number"),
    ("mot", "line has 0 values"),
])
def test_a_bad_row_far_into_the_file_is_found_with_its_line_and_setting(tmp_path, row, problem):
    path = write_vec(tmp_path / "wiki.fr.vec", 300, bad={151: row})
    # The check made while the job graph is built reads only the first rows: this row passes it.
    assert check_inputs([InputFile(SETTING, str(path), "vectors")]) == []
    with pytest.raises(InputFormatError, match=rf"wiki.fr.vec:151: .*{problem}.*\[config setting '{SETTING}'\]"):
        check_vec_file(path, SETTING)


def test_a_bad_word_and_a_wrong_count_are_found(tmp_path):
    path = write_vec(tmp_path / "wiki.fr.vec", 200)
    raw = path.read_bytes().replace(b"mot150 ", b"mot\xff150 ")
    path.write_bytes(raw)
    with pytest.raises(InputFormatError, match=r"wiki.fr.vec:152: word is not valid UTF-8"):
        check_vec_file(path, SETTING)
    with pytest.raises(InputFormatError, match=r"announces 250 vectors, the file holds 200"):
        check_vec_file(write_vec(tmp_path / "more.vec", 200, header="250 4"), SETTING)
    with pytest.raises(InputFormatError, match=r"announces 150 vectors, the file holds 200.*fix the header"):
        check_vec_file(write_vec(tmp_path / "fewer.vec", 200, header="150 4"), SETTING)
    path = write_vec(tmp_path / "cut.vec", 200)
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(InputFormatError, match=r"cut.vec:201: file ends in the middle of a line"):
        check_vec_file(path, SETTING)
