"""A CoNLL-U reader for dependency treebanks, with errors that name the file and line.

Only what parsing needs is kept per word: FORM, UPOS, HEAD and DEPREL.
Multiword-token lines (``1-2``) and empty nodes (``1.1``) are skipped: heads
and relations are defined over syntactic words, which is also what the
CoNLL 2018 shared-task evaluation scores when tokenisation is gold.
Plain and gzip-compressed files are read alike.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ramen.errors import InputFormatError
from ramen.io import atomic_path, read_lines

FIELDS = 10
_WORD_ID = re.compile(r"^[1-9][0-9]*$")
_RANGE_ID = re.compile(r"^[1-9][0-9]*-[1-9][0-9]*$")
_EMPTY_ID = re.compile(r"^[0-9]+\.[1-9][0-9]*$")


@dataclass(frozen=True)
class Sentence:
    """One sentence: its words' forms, UPOS tags, heads (0 = root) and relations."""

    forms: tuple[str, ...]
    upos: tuple[str, ...]
    heads: tuple[int, ...]
    deprels: tuple[str, ...]
    sent_id: str | None = None
    text: str | None = None
    line: int = 0  # line of the sentence's first word, for messages

    def __len__(self) -> int:
        return len(self.forms)


def read_conllu(path: str | os.PathLike) -> Iterator[Sentence]:
    """Yield the sentences of a CoNLL-U file.

    Raises :class:`InputFormatError` with the 1-based line number for a line
    without ten tab-separated fields, a bad or out-of-order word ID, a head
    that is not a word of the sentence, an empty relation, or a sentence
    without exactly one root.
    """
    path = Path(path)
    words: list[tuple[str, str, int, str]] = []
    comments: dict[str, str] = {}
    first_line = 0
    last_line = 0
    for line_no, line in enumerate(read_lines(path), start=1):
        last_line = line_no
        if not line.strip():
            if words:
                yield _sentence(path, words, comments, first_line, line_no)
            words, comments = [], {}
            continue
        if line.startswith("#"):
            key, sep, value = line[1:].partition("=")
            if sep and key.strip() in ("sent_id", "text"):
                comments[key.strip()] = value.strip()
            continue
        fields = line.split("\t")
        if len(fields) != FIELDS:
            raise InputFormatError(path, line_no, f"expected {FIELDS} tab-separated fields, found {len(fields)}",
                                   "CoNLL-U word lines are ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC")
        word_id = fields[0]
        if _RANGE_ID.match(word_id) or _EMPTY_ID.match(word_id):
            continue  # multiword tokens and empty nodes carry no basic tree
        if not _WORD_ID.match(word_id):
            raise InputFormatError(path, line_no, f"invalid word ID {word_id!r}")
        if int(word_id) != len(words) + 1:
            raise InputFormatError(path, line_no, f"word ID {word_id} out of order, expected {len(words) + 1}",
                                   "sentences must be separated by a blank line")
        if not words:
            first_line = line_no
        head = fields[6]
        if not head.isdigit():
            raise InputFormatError(path, line_no, f"HEAD {head!r} is not a word number")
        deprel = fields[7]
        if not deprel or deprel == "_":
            raise InputFormatError(path, line_no, "empty DEPREL")
        words.append((fields[1], fields[3], int(head), deprel))
    if words:
        yield _sentence(path, words, comments, first_line, last_line + 1)


def _cycle_members(heads: list[int]) -> list[bool]:
    """For each word (1-based HEADs, 0 the root), whether following its heads never reaches 0."""
    reaches_root = [False] * len(heads)
    for start in range(len(heads)):
        path, word = [], start + 1
        while word != 0 and not reaches_root[word - 1] and len(path) <= len(heads):
            path.append(word)
            word = heads[word - 1]
        if word == 0 or reaches_root[word - 1]:
            for member in path:
                reaches_root[member - 1] = True
    return [not reached for reached in reaches_root]


def _sentence(path: Path, words, comments, first_line: int, end_line: int) -> Sentence:
    heads = [w[2] for w in words]
    for offset, head in enumerate(heads):
        if head > len(words):
            raise InputFormatError(path, first_line + offset,
                                   f"HEAD {head} is beyond the sentence's {len(words)} words")
    roots = heads.count(0)
    if roots != 1:
        raise InputFormatError(path, first_line, f"sentence ending before line {end_line} has {roots} roots",
                               "every sentence needs exactly one word with HEAD 0")
    for offset, cycle in enumerate(_cycle_members(heads)):
        if cycle:
            raise InputFormatError(path, first_line + offset,
                                   f"word {offset + 1} is in a cycle of HEADs: its heads never reach the root",
                                   "HEADs must form a tree rooted at the word with HEAD 0")
    return Sentence(
        forms=tuple(w[0] for w in words),
        upos=tuple(w[1] for w in words),
        heads=tuple(heads),
        deprels=tuple(w[3] for w in words),
        sent_id=comments.get("sent_id"),
        text=comments.get("text"),
        line=first_line,
    )


def write_predictions(gold_path: str | os.PathLike, out_path: str | os.PathLike,
                      heads: Sequence[Sequence[int]], deprels: Sequence[Sequence[str]]) -> int:
    """Copy a gold treebank with HEAD and DEPREL of every syntactic word replaced by predictions.

    Every other column, comment, multiword-token and empty-node line is kept, so the file scores
    with the CoNLL 2018 evaluation script against the gold file. Returns the sentences written.
    """
    sentence = word = 0
    with atomic_path(out_path) as tmp:
        with open(tmp, "w", encoding="utf-8") as out:
            for line in read_lines(gold_path):
                fields = line.split("\t")
                if len(fields) == FIELDS and _WORD_ID.match(fields[0]):
                    if sentence >= len(heads) or word >= len(heads[sentence]):
                        raise InputFormatError(gold_path, None, "has more words than were predicted")
                    fields[6], fields[7] = str(heads[sentence][word]), deprels[sentence][word]
                    word += 1
                    line = "\t".join(fields)
                elif not line.strip() and word:
                    sentence, word = sentence + 1, 0
                out.write(line + "\n")
            if word:
                sentence += 1
    if sentence != len(heads):
        raise InputFormatError(gold_path, None, f"has {sentence} sentences but {len(heads)} were predicted")
    return sentence


def universal_relation(deprel: str) -> str:
    """The universal part of a relation (``obl:mod`` -> ``obl``), as CoNLL 2018 scores LAS."""
    return deprel.split(":", 1)[0]


def sentence_texts(path: str | os.PathLike) -> Iterator[str]:
    """The ``# text`` of each sentence, or its words joined by spaces when there is none."""
    for sentence in read_conllu(path):
        yield sentence.text if sentence.text else " ".join(sentence.forms)
