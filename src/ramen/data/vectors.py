"""Word-vector files: fastText text (.vec) and binary (.bin) files.

``.vec`` files are the format fastText publishes (a header ``count dim``, then
one ``word v1 ... vd`` line per word, most frequent first).  They are read as a
stream and checked line by line: header, dimension, UTF-8 and truncation errors
name the file and line.  ``.bin`` models are loaded with the ``fasttext``
package, which can also build vectors for words outside its vocabulary.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ramen.errors import InputFormatError
from ramen.io import atomic_path


@dataclass
class WordVectors:
    """Words (most frequent first, unique) and their vectors (n, d) float32."""

    words: list[str]
    vectors: np.ndarray

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _decode(raw: bytes, path, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFormatError(path, lineno, f"not valid UTF-8 ({exc.reason} at byte {exc.start})",
                               "fastText .vec files are UTF-8 text") from None


def read_vec(path, *, max_words: int | None = None, expected_dim: int | None = None,
             normalise: Callable[[str], str] | None = None) -> WordVectors:
    """Read a fastText ``.vec`` (optionally gzipped) file, the first ``max_words`` entries.

    ``normalise`` maps each word to the form the tokenizers see (e.g. lowercased);
    when several words share a form, the first (most frequent) one is kept.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no word-vector file at {path}")
    with _open_binary(path) as handle:
        header = _decode(handle.readline(), path, 1).split()
        if len(header) != 2 or not all(field.isdigit() for field in header):
            raise InputFormatError(path, 1, f"header {' '.join(header)[:60]!r} is not 'count dimension'",
                                   "a .vec file starts with the number of words and the vector size")
        count, dim = int(header[0]), int(header[1])
        if count == 0 or dim == 0:
            raise InputFormatError(path, 1, f"header announces {count} words of dimension {dim}",
                                   "the file holds no vectors")
        if expected_dim is not None and dim != expected_dim:
            raise InputFormatError(path, 1, f"vectors have dimension {dim}, expected {expected_dim}",
                                   "use vectors of the same size for both languages")
        wanted = count if max_words is None else min(count, max_words)
        vectors = np.empty((wanted, dim), dtype=np.float32)
        words: list[str] = []
        seen: set[str] = set()
        lineno = 1
        for raw in tqdm(handle, total=wanted, desc=f"reading {path.name}", unit="word", mininterval=5):
            lineno += 1
            fields = _decode(raw, path, lineno).rstrip("\n").rstrip("\r").rstrip(" ").split(" ")
            if len(fields) != dim + 1:
                if not raw.endswith(b"\n"):
                    raise InputFormatError(path, lineno, "file ends in the middle of a line",
                                           "the file is truncated; download it again")
                raise InputFormatError(path, lineno, f"line has {len(fields) - 1} values, the header says {dim}",
                                       "every line is a word followed by its vector")
            word = normalise(fields[0]) if normalise else fields[0]
            if not word or word in seen:
                continue
            try:
                vectors[len(words)] = np.asarray(fields[1:], dtype=np.float32)
            except ValueError:
                raise InputFormatError(path, lineno, "vector has a value that is not a number") from None
            seen.add(word)
            words.append(word)
            if len(words) == wanted:
                break
        else:
            if lineno - 1 < count:
                raise InputFormatError(path, lineno + 1, f"file ends after {lineno - 1} of {count} vectors",
                                       "the file is truncated; download it again")
    if not words:
        raise InputFormatError(path, None, "no usable words")
    return WordVectors(words, vectors[: len(words)].copy())


def load_bin(path, words: Iterable[str], *, expected_dim: int | None = None) -> WordVectors:
    """Vectors of ``words`` from a fastText ``.bin`` model (character n-grams cover unseen words)."""
    import fasttext

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no fastText model at {path}")
    try:
        model = fasttext.load_model(str(path))
    except ValueError as exc:
        raise InputFormatError(path, None, f"not a fastText .bin model ({exc})") from None
    dim = model.get_dimension()
    if expected_dim is not None and dim != expected_dim:
        raise InputFormatError(path, None, f"vectors have dimension {dim}, expected {expected_dim}",
                               "use vectors of the same size for both languages")
    words = list(dict.fromkeys(words))
    if not words:
        raise ValueError(f"no words to look up in {path}")
    vectors = np.stack([model.get_word_vector(word) for word in words]).astype(np.float32)
    return WordVectors(words, vectors)


def load_vectors(path, *, words: Iterable[str] | None = None, max_words: int | None = None,
                 expected_dim: int | None = None, normalise: Callable[[str], str] | None = None) -> WordVectors:
    """Load ``.vec``/``.vec.gz`` (read as published) or ``.bin`` (vectors for ``words``)."""
    path = Path(path)
    if path.suffix == ".bin":
        if words is None:
            raise ValueError(f"{path}: a .bin model needs the list of words to look up")
        return load_bin(path, words, expected_dim=expected_dim)
    return read_vec(path, max_words=max_words, expected_dim=expected_dim, normalise=normalise)


def write_vec(path, vectors: WordVectors) -> None:
    """Atomically write ``vectors`` as a fastText ``.vec`` text file."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(f"{len(vectors.words)} {vectors.dim}\n")
            for word, row in zip(vectors.words, vectors.vectors):
                handle.write(word + " " + " ".join(f"{value:.5f}" for value in row) + "\n")
