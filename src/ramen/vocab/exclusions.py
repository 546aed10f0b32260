"""One English text for every target language, each language's evaluation sentences left out.

The English training text is prepared and encoded once. A target language's models must not
train on the English sides of that language's own evaluation pairs (retrieval, NMT), which the
other languages may train on; so instead of a copy of the text per language, each language has
a small index of the sentences of the shared encoding its batches never draw
(:func:`ramen.vocab.encode.load_stream` with ``exclude``), and the digests of every sentence its
English text is cleaned of, which :mod:`ramen.data.decontamination` checks evaluation files
against.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ramen.data.decontamination import key_digests, read_digests, write_digests
from ramen.data.text.keys import evaluation_keys, sentence_key
from ramen.errors import InputFormatError
from ramen.io import atomic_path, read_lines


def matching_lines(text_path: str | os.PathLike, keys: set[str]) -> tuple[np.ndarray, int]:
    """0-based numbers of the lines of a text whose sentence key is one of ``keys``, and its line count."""
    found, count = [], 0
    for count, line in enumerate(read_lines(text_path), start=1):
        if keys and sentence_key(line) in keys:
            found.append(count - 1)
    return np.asarray(found, dtype=np.int64), count


def stream_sentences(encoded_dir: str | os.PathLike, text_lines: np.ndarray, text_line_count: int) -> np.ndarray:
    """The sentence numbers in an encoded corpus (ramen.vocab.encode.encode_corpus) of some lines
    of the text it was encoded from; lines the encoding skipped (nothing to tokenise) have none."""
    meta_path = Path(encoded_dir) / "meta.json"
    meta = json.loads(meta_path.read_text())
    skipped = np.asarray(meta.get("skipped_lines", []), dtype=np.int64)
    if "skipped_lines" not in meta or text_line_count - len(skipped) != meta["num_sentences"]:
        raise InputFormatError(meta_path, None,
                               f"{meta['num_sentences']} sentences, but its text has {text_line_count} lines "
                               f"({len(skipped)} skipped): not the encoding of this text",
                               f"rerun the encoding (snakemake --forcerun {Path(encoded_dir).as_posix()})")
    lines = np.setdiff1d(text_lines, skipped)
    return lines - np.searchsorted(skipped, lines)


def write_exclusions(text_path: str | os.PathLike, encoded_dir: str | os.PathLike,
                     text_excluded: str | os.PathLike, evaluation: Iterable[str | os.PathLike],
                     sentences_out: str | os.PathLike, excluded_out: str | os.PathLike) -> dict:
    """A language's exclusions from the shared English text: the sentence numbers of the encoded
    text whose key is in the language's ``evaluation`` files (``sentences_out``) and the digests
    of everything its English text is cleaned of: the shared text's own (``text_excluded``) and
    those (``excluded_out``)."""
    keys = evaluation_keys(list(evaluation))
    lines, line_count = matching_lines(text_path, keys)
    sentences = stream_sentences(encoded_dir, lines, line_count)
    with atomic_path(sentences_out) as tmp:
        with open(tmp, "wb") as handle:
            np.save(handle, sentences)
    write_digests(excluded_out, np.union1d(read_digests(text_excluded), key_digests(keys)))
    return {"text_lines": line_count, "evaluation_sentences": len(keys), "excluded_lines": int(len(lines)),
            "excluded_sentences": int(len(sentences))}
