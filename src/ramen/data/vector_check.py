"""A fastText ``.vec`` file checked in full, before the first expensive job of its language.

While the job graph is built only the header, the first rows and the line count of a ``.vec``
file are read (ramen.data.input_checks): a full check of a paper-sized file (2M words x 300
values, several GB) takes tens of seconds, too long for every Snakemake start. This check reads
every row once, in a cheap job that the language's text preparation waits for.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

from ramen.errors import InputFormatError

# Bytes a value may hold: digits, sign, decimal point, exponent, and inf/nan as C's printf spells them.
NUMBER_BYTES = b"0123456789.-+eEinfaINFA"


def check_vec_file(path: str | os.PathLike, setting: str) -> dict:
    """Every row of a ``.vec`` (or ``.vec.gz``) file: a UTF-8 word and as many numbers as the
    header says, and as many rows as it announces. Raises InputFormatError naming the file, the
    line and the config ``setting``; returns the header's counts."""
    path = Path(path)

    def bad(line: int | None, problem: str, fix: str) -> InputFormatError:
        return InputFormatError(path, line, f"{problem} [config setting '{setting}']", fix)

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        header = handle.readline().split()
        if len(header) != 2 or not all(field.isdigit() for field in header):
            raise bad(1, "the first line is not 'count dimension'", "a .vec file starts with its word count and size")
        count, dim = int(header[0]), int(header[1])
        number = 1
        for number, raw in enumerate(handle, start=2):
            if not raw.endswith(b"\n"):
                raise bad(number, "file ends in the middle of a line", "the file is truncated; download it again")
            word, _, values = raw.rstrip(b"\r\n").rstrip(b" ").partition(b" ")
            if values.count(b" ") != dim - 1 or not values:
                raise bad(number, f"line has {len(values.split()) if values else 0} values, the header says {dim}",
                          "every line is a word followed by its vector")
            if values.translate(None, NUMBER_BYTES + b" "):
                raise bad(number, "vector has a value that is not a number", "every line is a word followed by its vector")
            try:
                word.decode("utf-8")
            except UnicodeDecodeError as error:
                raise bad(number, f"word is not valid UTF-8 ({error.reason})", "fastText .vec files are UTF-8") from None
    if number - 1 != count:
        raise bad(number + 1 if number - 1 < count else count + 2,
                  f"the header announces {count} vectors, the file holds {number - 1}",
                  "the file is truncated; download it again" if number - 1 < count else "fix the header's count")
    return {"words": count, "dim": dim}
