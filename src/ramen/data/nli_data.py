"""Readers and a writer for natural language inference (NLI) data.

Two input formats are supported:

* ``xnli``: a tab-separated file whose first line is the header
  ``premise<TAB>hypothesis<TAB>label[<TAB>genre]`` (the layout of the XNLI
  dev/test files bundled with the demo);
* ``sick``: the ``SICK.txt`` release of the SICK corpus (columns ``pair_ID``,
  ``sentence_A``, ``sentence_B``, ``entailment_label``, ..., ``SemEval_set``);
* ``multinli``: the MultiNLI 1.0 / XNLI 1.0 release files (columns
  ``gold_label``, ``sentence1``, ``sentence2``, ..., and ``language`` in XNLI);
  pairs without a gold label (``-``) are skipped.

Labels are stored as integers indexing :data:`LABELS`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ramen.errors import ConfigError, InputFormatError
from ramen.io import atomic_path, read_lines

LABELS: tuple[str, ...] = ("entailment", "neutral", "contradiction")
LABEL_IDS: dict[str, int] = {name: index for index, name in enumerate(LABELS)}

# The original XNLI release spells the third class "contradictory".
_LABEL_ALIASES: dict[str, int] = {**LABEL_IDS, "contradictory": LABEL_IDS["contradiction"]}

XNLI_COLUMNS: tuple[str, ...] = ("premise", "hypothesis", "label")
SICK_COLUMNS: tuple[str, ...] = ("sentence_A", "sentence_B", "entailment_label", "SemEval_set")
SICK_SPLITS: tuple[str, ...] = ("TRAIN", "TRIAL", "TEST")
MULTINLI_COLUMNS: tuple[str, ...] = ("gold_label", "sentence1", "sentence2")
FORMATS: tuple[str, ...] = ("xnli", "sick", "multinli")


@dataclass(frozen=True)
class NliExample:
    """One premise/hypothesis pair; ``label`` indexes :data:`LABELS`."""

    premise: str
    hypothesis: str
    label: int

    @property
    def label_name(self) -> str:
        """The label as a word, e.g. ``"entailment"``."""
        return LABELS[self.label]


def _parse_label(raw: str, path: Path, line_no: int) -> int:
    label = _LABEL_ALIASES.get(raw.strip().lower())
    if label is None:
        raise InputFormatError(
            path,
            line_no,
            f"unknown label {raw!r}",
            f"use one of {', '.join(LABELS)}",
        )
    return label


def _header_index(
    header: list[str], required: Sequence[str], path: Path, expected: str
) -> dict[str, int]:
    missing = [name for name in required if name not in header]
    if missing:
        raise InputFormatError(
            path,
            1,
            f"header lacks column(s) {', '.join(missing)}; found {header!r}",
            f"the first line must be the header {expected!r}",
        )
    return {name: header.index(name) for name in header}


def _rows(
    path: Path, required: Sequence[str], expected: str
) -> Iterator[tuple[int, list[str], dict[str, int]]]:
    """Yield (line number, fields, column index) for each non-blank data row."""
    lines = read_lines(path)
    header_line = next(lines, None)
    if header_line is None:
        raise InputFormatError(path, None, "file is empty", f"expected a header line {expected!r}")
    header = [name.strip() for name in header_line.lstrip("\ufeff").split("\t")]
    index = _header_index(header, required, path, expected)
    for line_no, line in enumerate(lines, start=2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(header):
            raise InputFormatError(
                path,
                line_no,
                f"expected {len(header)} tab-separated fields like the header, found {len(fields)}",
                "fields must not contain tabs or line breaks",
            )
        yield line_no, fields, index


def _example(premise: str, hypothesis: str, label: int, path: Path, line_no: int) -> NliExample:
    premise, hypothesis = premise.strip(), hypothesis.strip()
    if not premise or not hypothesis:
        which = "premise" if not premise else "hypothesis"
        raise InputFormatError(path, line_no, f"empty {which}")
    return NliExample(premise, hypothesis, label)


def read_xnli_tsv(path: str | os.PathLike) -> list[NliExample]:
    """Read an XNLI-style TSV file (header ``premise, hypothesis, label[, genre]``).

    Raises :class:`InputFormatError` naming the file and 1-based line for a
    missing header column, a row with the wrong number of fields, an empty
    sentence or an unknown label.
    """
    path = Path(path)
    expected = "premise\thypothesis\tlabel\tgenre"
    examples = []
    for line_no, fields, index in _rows(path, XNLI_COLUMNS, expected):
        label = _parse_label(fields[index["label"]], path, line_no)
        examples.append(
            _example(fields[index["premise"]], fields[index["hypothesis"]], label, path, line_no)
        )
    return examples


def read_sick(path: str | os.PathLike, splits: Iterable[str] = ("TRAIN",)) -> list[NliExample]:
    """Read the pairs of ``SICK.txt`` whose ``SemEval_set`` is in ``splits``.

    ``splits`` are names among ``TRAIN``, ``TRIAL`` and ``TEST`` (case-insensitive).
    """
    path = Path(path)
    if isinstance(splits, str):
        splits = [splits]
    wanted = {split.strip().upper() for split in splits}
    unknown = sorted(wanted - set(SICK_SPLITS))
    if unknown or not wanted:
        raise ConfigError(
            "tasks.xnli.train[].splits",
            f"unknown SICK split(s) {unknown}" if unknown else "no SICK split given",
            f"choose from {', '.join(SICK_SPLITS)}",
        )
    expected = "pair_ID\tsentence_A\tsentence_B\tentailment_label\t...\tSemEval_set"
    examples = []
    for line_no, fields, index in _rows(path, SICK_COLUMNS, expected):
        split = fields[index["SemEval_set"]].strip().upper()
        if split not in SICK_SPLITS:
            raise InputFormatError(
                path, line_no, f"unknown SemEval_set {split!r}", f"expected one of {', '.join(SICK_SPLITS)}"
            )
        if split not in wanted:
            continue
        label = _parse_label(fields[index["entailment_label"]], path, line_no)
        examples.append(
            _example(fields[index["sentence_A"]], fields[index["sentence_B"]], label, path, line_no)
        )
    return examples


def iter_multinli(path: str | os.PathLike, language: str | None = None) -> Iterator[NliExample]:
    """Yield the gold-labelled pairs of a MultiNLI / XNLI 1.0 release TSV file.

    With ``language``, only rows whose ``language`` column equals it (XNLI 1.0
    holds every language in one file).
    """
    path = Path(path)
    required = MULTINLI_COLUMNS + (("language",) if language else ())
    expected = "gold_label\t...\tsentence1\tsentence2\t..." + ("\tlanguage" if language else "")
    for line_no, fields, index in _rows(path, required, expected):
        if language and fields[index["language"]] != language:
            continue
        if fields[index["gold_label"]].strip() == "-":
            continue  # no annotator majority
        label = _parse_label(fields[index["gold_label"]], path, line_no)
        yield _example(fields[index["sentence1"]], fields[index["sentence2"]], label, path, line_no)


def xnli_release_language(release_tsv: str | os.PathLike, language: str, out_path: str | os.PathLike) -> int:
    """Write the ``language`` pairs of an XNLI 1.0 file (``xnli.dev.tsv``) as an XNLI-style TSV.

    Returns the number of pairs; raises :class:`InputFormatError` when there are none.
    """
    count = write_nli_tsv(out_path, iter_multinli(release_tsv, language))
    if count == 0:
        Path(out_path).unlink()
        raise InputFormatError(release_tsv, None, f"no pair in language {language!r}",
                               "XNLI 1.0 covers ar bg de el en es fr hi ru sw th tr ur vi zh")
    return count


def read_nli(source: dict) -> list[NliExample]:
    """Read NLI examples described by ``{"path": ..., "format": "xnli"|"sick", "splits": [...]}``.

    ``splits`` only applies to ``sick`` (default ``["TRAIN"]``).
    """
    if not isinstance(source, dict) or "path" not in source:
        raise ConfigError("tasks.xnli.train[].path", f"NLI source {source!r} has no 'path'", "give the data file path")
    fmt = source.get("format", "xnli")
    if fmt == "xnli":
        if source.get("splits"):
            # XNLI files hold one split each; a split filter here would be silently ignored.
            raise ConfigError(
                "tasks.xnli.train[].splits",
                f"'splits' is only meaningful for format 'sick' (source {source['path']})",
                "list one XNLI file per split instead",
            )
        return read_xnli_tsv(source["path"])
    if fmt == "sick":
        return read_sick(source["path"], source.get("splits") or ("TRAIN",))
    if fmt == "multinli":
        return list(iter_multinli(source["path"]))
    raise ConfigError(
        "tasks.xnli.train[].format", f"unknown NLI format {fmt!r} for {source['path']}", f"use one of {', '.join(FORMATS)}"
    )


def write_nli_tsv(path: str | os.PathLike, examples: Iterable[NliExample]) -> int:
    """Atomically write examples as an XNLI-style TSV; return how many were written.

    The output has the header ``premise, hypothesis, label`` and can be read
    back with :func:`read_xnli_tsv`.
    """
    count = 0
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write("\t".join(XNLI_COLUMNS) + "\n")
            for example in examples:
                for text in (example.premise, example.hypothesis):
                    if any(char in text for char in "\t\n\r"):
                        raise ValueError(f"cannot write a tab or line break inside a TSV field: {text!r}")
                if not 0 <= example.label < len(LABELS):
                    raise ValueError(f"label {example.label!r} is not an index into {LABELS}")
                handle.write(f"{example.premise}\t{example.hypothesis}\t{LABELS[example.label]}\n")
                count += 1
    return count
