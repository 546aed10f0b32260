"""Word alignment of subword-id parallel text and translation probabilities p(e|f).

RAMEN (§2.1, eq. 2) sets alpha[f, e] = p(e | f), estimated from word-alignment
links between foreign and English subword ids (:mod:`.aligners` runs the aligner).
This module

* counts aligned (foreign id, English id) pairs into a sparse V_f x V_e matrix,
* turns counts into sparse, thresholded, row-normalised p(e | f),
* saves and loads that matrix.

File formats
------------
Id files: one sentence per line, token ids as whitespace-separated integers.
Link files (Pharaoh format): one line per sentence, ``i-j`` pairs where ``i``
indexes the foreign sentence and ``j`` the English one (eflomal writes both of
its directions in this source-target order).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ramen.errors import ConfigError, InputFormatError
from ramen.io import atomic_path, open_text, read_lines

logger = logging.getLogger(__name__)

SYMMETRISATIONS = ("sum", "intersection", "union", "grow-diag-final-and", "forward", "reverse")

# Lines are parsed a chunk at a time with numpy; this bounds the text held in memory.
CHUNK_LINES = 20_000
# Pending (foreign id, English id) pairs are folded into the sparse total at this size.
FLUSH_PAIRS = 1_000_000

_ALLOWED_ID_BYTES = np.zeros(256, dtype=bool)
_ALLOWED_ID_BYTES[[ord(c) for c in "0123456789 \t\r\n"]] = True
_ALLOWED_LINK_BYTES = _ALLOWED_ID_BYTES.copy()
_ALLOWED_LINK_BYTES[ord("-")] = True
_LINK_FIELD = re.compile(r"([0-9]+)-([0-9]+)")


# --------------------------------------------------------------------------- parsing


def _parse_link_line(line: str, path, lineno: int) -> list[tuple[int, int]]:
    links = []
    for field in line.split():
        match = _LINK_FIELD.fullmatch(field)
        if match is None:
            raise InputFormatError(
                path, lineno, f"malformed link {field!r}", "expected space-separated 'i-j' pairs"
            )
        links.append((int(match.group(1)), int(match.group(2))))
    return links


def read_links(path) -> Iterator[list[tuple[int, int]]]:
    """Yield, per line of a Pharaoh link file, its list of (i, j) pairs."""
    for lineno, line in enumerate(read_lines(path), start=1):
        yield _parse_link_line(line, path, lineno)


def _chunk_text(lines: list[str]) -> str:
    text = "".join(lines)
    if not text.endswith("\n"):
        text += "\n"
    return text


def _split_sentinels(values: np.ndarray, n_lines: int):
    """Split a parsed chunk whose lines end in -1 into values and per-line lengths."""
    sentinel = values < 0
    ends = np.flatnonzero(sentinel)
    if len(ends) != n_lines:
        return None
    lengths = np.diff(ends, prepend=-1) - 1
    return values[~sentinel], lengths


def _first_bad_byte(text: str, links: bool) -> tuple[int, bytes] | None:
    """Return (line index, line bytes) of the first line that is not well formed.

    Checked with numpy over the whole chunk (a regex scan was the bottleneck):
    id lines may hold only digits and blanks; link lines only fields made of
    digits, one dash, digits.
    """
    raw = text.encode("utf-8")
    data = np.frombuffer(raw, dtype=np.uint8)
    bad = ~(_ALLOWED_LINK_BYTES if links else _ALLOWED_ID_BYTES)[data]
    if links:
        digit = (data >= 48) & (data <= 57)
        dash = data == 45
        prev_digit = np.concatenate(([False], digit[:-1]))
        next_digit = np.concatenate((digit[1:], [False]))
        bad |= dash & ~(prev_digit & next_digit)
        in_field = digit | dash
        starts = in_field & ~np.concatenate(([False], in_field[:-1]))
        field_start = np.flatnonzero(starts)
        field_of = np.cumsum(starts) - 1
        dashes = np.bincount(field_of[dash], minlength=len(field_start))
        bad[field_start[dashes != 1]] = True
    hits = np.flatnonzero(bad)
    if not len(hits):
        return None
    pos = int(hits[0])
    line_idx = raw.count(b"\n", 0, pos)
    line_start = raw.rfind(b"\n", 0, pos) + 1
    return line_idx, raw[line_start : raw.find(b"\n", pos)]


def _parse_id_chunk(lines: list[str], path, first_line: int, vocab_size: int):
    """Return (flat ids, per-line lengths) for a chunk of an id file."""
    text = _chunk_text(lines)
    bad = _first_bad_byte(text, links=False)
    if bad is not None:
        raise InputFormatError(
            path,
            first_line + bad[0],
            f"malformed line {bad[1].decode('utf-8', 'replace')[:80]!r}",
            "expected space-separated integer token ids",
        )
    parsed = np.fromstring(text.replace("\n", " -1 "), dtype=np.int64, sep=" ")
    split = _split_sentinels(parsed, len(lines))
    if split is None:  # should not happen after the character check; stay safe
        raise InputFormatError(path, first_line, "could not parse token ids in this block of lines")
    ids, lengths = split
    out_of_range = np.flatnonzero(ids >= vocab_size)
    if len(out_of_range):
        pos = out_of_range[0]
        line_idx = int(np.searchsorted(np.cumsum(lengths), pos, side="right"))
        raise InputFormatError(
            path,
            first_line + line_idx,
            f"token id {int(ids[pos])} is outside the vocabulary (size {vocab_size})",
            "were the ids made with a different vocabulary?",
        )
    return ids, lengths


def _parse_link_chunk(lines: list[str], path, first_line: int):
    """Return (line index within chunk, i, j) arrays for a chunk of a link file."""
    text = _chunk_text(lines)
    bad = _first_bad_byte(text, links=True)
    if bad is not None:
        lineno = first_line + bad[0]
        # Re-parse the one line for a message that quotes the faulty field.
        _parse_link_line(lines[lineno - first_line], path, lineno)
        raise InputFormatError(path, lineno, "malformed link line", "expected space-separated 'i-j' pairs")
    parsed = np.fromstring(text.replace("-", " ").replace("\n", " -1 "), dtype=np.int64, sep=" ")
    split = _split_sentinels(parsed, len(lines))
    if split is None or len(split[0]) % 2:
        raise InputFormatError(path, first_line, "could not parse links in this block of lines")
    values, lengths = split
    pairs = values.reshape(-1, 2)
    line_idx = np.repeat(np.arange(len(lines)), lengths // 2)
    return line_idx, pairs[:, 0], pairs[:, 1]


def read_chunks(paths: Sequence, chunk_lines: int) -> Iterator[tuple[int, list[list[str]]]]:
    """Yield (first line number, lines of each file) in lockstep, ``chunk_lines`` at a time; check equal lengths."""
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(open_text(p)) for p in paths]
        first_line = 1
        while True:
            chunks = [list(itertools.islice(h, chunk_lines)) for h in handles]
            sizes = [len(c) for c in chunks]
            if min(sizes) != max(sizes):
                short = int(np.argmin(sizes))
                long_ = int(np.argmax(sizes))
                n_short = first_line - 1 + sizes[short]
                raise InputFormatError(
                    paths[long_],
                    n_short + 1,
                    f"line has no counterpart in {paths[short]}, which has {n_short} lines",
                    "token-id and link files must have one line per sentence pair",
                )
            if sizes[0] == 0:
                return
            yield first_line, chunks
            first_line += sizes[0]


# --------------------------------------------------------------------------- counting


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    # Sort-based on purpose: np.unique's hash path was several times slower here.
    values = np.sort(values)
    if not len(values):
        return values
    return values[np.concatenate(([True], values[1:] != values[:-1]))]


def _intersect_sorted_unique(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    merged = np.concatenate((a, b))
    merged.sort()
    return merged[1:][merged[1:] == merged[:-1]]


def _link_files_for(symmetrisation: str, link_paths: Sequence) -> list:
    if symmetrisation not in SYMMETRISATIONS:
        raise ConfigError(
            "alignment.symmetrisation", f"unknown value {symmetrisation!r}", f"choose one of {', '.join(SYMMETRISATIONS)}"
        )
    need = {"sum": 1, "forward": 1, "intersection": 2, "union": 2, "grow-diag-final-and": 2, "reverse": 2}[symmetrisation]
    if len(link_paths) < need:
        raise ConfigError(
            "alignment.symmetrisation",
            f"{symmetrisation!r} needs {need} link files (forward, reverse), got {len(link_paths)}",
        )
    if symmetrisation == "forward":
        return [link_paths[0]]
    if symmetrisation == "reverse":
        return [link_paths[1]]
    return list(link_paths)


def count_links(
    foreign_ids_path,
    english_ids_path,
    link_paths,
    foreign_vocab_size: int,
    english_vocab_size: int,
    symmetrisation: str = "sum",
    *,
    chunk_lines: int = CHUNK_LINES,
) -> sp.csr_matrix:
    """Count aligned (foreign id, English id) pairs into a (V_f, V_e) int64 CSR matrix.

    ``link_paths`` is ``(forward, reverse)`` as written by
    :func:`align_with_eflomal` (a single path is allowed for "sum"/"forward").
    ``symmetrisation``:

    * ``"sum"``: the links of all given files are counted (a link present in
      both directions counts twice);
    * ``"intersection"``: only links present in every given file, once;
    * ``"union"``: links present in any file, once;
    * ``"grow-diag-final-and"``: Koehn et al.'s heuristic (as Moses and
      fast_align's ``atools``): the intersection grown towards the union;
    * ``"forward"`` / ``"reverse"``: only the first / second file.

    Files are streamed ``chunk_lines`` lines at a time.  Raises InputFormatError
    naming file and line for unequal line counts, malformed lines, token ids
    outside the vocabularies, or links pointing past the end of a sentence.
    """
    if isinstance(link_paths, (str, os.PathLike)):
        link_paths = [link_paths]
    links = _link_files_for(symmetrisation, list(link_paths))
    shape = (int(foreign_vocab_size), int(english_vocab_size))
    total = sp.csr_matrix(shape, dtype=np.int64)
    pending_f: list[np.ndarray] = []
    pending_e: list[np.ndarray] = []
    n_pending = 0
    n_sentences = 0
    n_links = 0

    def flush():
        nonlocal total, pending_f, pending_e, n_pending
        if n_pending:
            rows = np.concatenate(pending_f)
            cols = np.concatenate(pending_e)
            part = sp.coo_matrix((np.ones(len(rows), dtype=np.int64), (rows, cols)), shape=shape).tocsr()
            total = total + part
        pending_f, pending_e, n_pending = [], [], 0

    paths = [foreign_ids_path, english_ids_path, *links]
    for first_line, (f_lines, e_lines, *link_chunks) in read_chunks(paths, chunk_lines):
        f_ids, f_len = _parse_id_chunk(f_lines, foreign_ids_path, first_line, shape[0])
        e_ids, e_len = _parse_id_chunk(e_lines, english_ids_path, first_line, shape[1])
        f_off = np.cumsum(f_len) - f_len
        e_off = np.cumsum(e_len) - e_len
        positions = []
        for link_path, lines in zip(links, link_chunks):
            line_idx, i, j = _parse_link_chunk(lines, link_path, first_line)
            bad = np.flatnonzero((i >= f_len[line_idx]) | (j >= e_len[line_idx]))
            if len(bad):
                k = bad[0]
                li = line_idx[k]
                raise InputFormatError(
                    link_path,
                    first_line + int(li),
                    f"link {int(i[k])}-{int(j[k])} points past the sentence end "
                    f"(foreign has {int(f_len[li])} tokens, English {int(e_len[li])})",
                    "were the links made from these id files?",
                )
            positions.append((f_off[line_idx] + i, e_off[line_idx] + j))
        if symmetrisation in ("intersection", "union"):
            n_e = max(int(e_len.sum()), 1)
            keys = [_sorted_unique(gi * n_e + gj) for gi, gj in positions]
            common = keys[0]
            for other in keys[1:]:
                common = (_intersect_sorted_unique(common, other) if symmetrisation == "intersection"
                          else _sorted_unique(np.concatenate((common, other))))
            positions = [(common // n_e, common % n_e)]
        elif symmetrisation == "grow-diag-final-and":
            positions = [_grow_diag_final_and_chunk(positions, f_off, e_off, f_len)]
        for gi, gj in positions:
            pending_f.append(f_ids[gi].astype(np.int32))
            pending_e.append(e_ids[gj].astype(np.int32))
            n_pending += len(gi)
            n_links += len(gi)
        n_sentences += len(f_lines)
        if n_pending >= FLUSH_PAIRS:
            flush()
    flush()
    total.sort_indices()
    logger.info(
        "counted %d links (%s) over %d sentence pairs: %d distinct pairs",
        n_links, symmetrisation, n_sentences, total.nnz,
    )
    return total


_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def grow_diag_final_and(forward: set, reverse: set, foreign_length: int) -> set:
    """Symmetrise one sentence's links (sets of (i, j)) with grow-diag-final-and (Koehn et al. 2005).

    Starts from the intersection; adds union links next to (also diagonally)
    an aligned point while either of their words is still unaligned, until
    nothing changes; then ("final-and") adds links of each direction whose
    words are both unaligned.  Points are visited in grid order, left-side
    (foreign) position first, as fast_align's ``atools`` does.
    """
    alignment = forward & reverse
    union = forward | reverse
    aligned_f = {i for i, _ in alignment}
    aligned_e = {j for _, j in alignment}
    added = True
    while added:
        added = False
        for i in range(foreign_length):
            j = -1
            while True:
                # The next point of row i; points added to this row meanwhile are visited too.
                j = min((jj for ii, jj in alignment if ii == i and jj > j), default=None)
                if j is None:
                    break
                for di, dj in _NEIGHBOURS:
                    point = (i + di, j + dj)
                    if point in union and (point[0] not in aligned_f or point[1] not in aligned_e):
                        alignment.add(point)
                        aligned_f.add(point[0])
                        aligned_e.add(point[1])
                        added = True
    for direction in (forward, reverse):
        for i, j in sorted(direction):
            if i not in aligned_f and j not in aligned_e:
                alignment.add((i, j))
                aligned_f.add(i)
                aligned_e.add(j)
    return alignment


def _grow_diag_final_and_chunk(positions, f_off, e_off, f_len):
    """Apply grow_diag_final_and per sentence to a chunk's (global foreign, global English) positions."""
    (fwd_f, fwd_e), (rev_f, rev_e) = positions
    line_of_fwd = np.searchsorted(f_off, fwd_f, side="right") - 1
    line_of_rev = np.searchsorted(f_off, rev_f, side="right") - 1
    out_f, out_e = [], []
    fwd_order = np.argsort(line_of_fwd, kind="stable")
    rev_order = np.argsort(line_of_rev, kind="stable")
    fwd_bounds = np.searchsorted(line_of_fwd[fwd_order], np.arange(len(f_len) + 1))
    rev_bounds = np.searchsorted(line_of_rev[rev_order], np.arange(len(f_len) + 1))
    for line in range(len(f_len)):
        fi = fwd_order[fwd_bounds[line] : fwd_bounds[line + 1]]
        ri = rev_order[rev_bounds[line] : rev_bounds[line + 1]]
        if not len(fi) and not len(ri):
            continue
        forward = set(zip((fwd_f[fi] - f_off[line]).tolist(), (fwd_e[fi] - e_off[line]).tolist()))
        reverse = set(zip((rev_f[ri] - f_off[line]).tolist(), (rev_e[ri] - e_off[line]).tolist()))
        for i, j in sorted(grow_diag_final_and(forward, reverse, int(f_len[line]))):
            out_f.append(f_off[line] + i)
            out_e.append(e_off[line] + j)
    return np.asarray(out_f, dtype=np.int64), np.asarray(out_e, dtype=np.int64)


# --------------------------------------------------------------------------- p(e|f)


def _normalise_rows(matrix: sp.csr_matrix) -> None:
    """Scale each non-empty row of ``matrix`` to sum to 1, in place."""
    sums = np.asarray(matrix.sum(axis=1)).ravel()
    scale = np.divide(1.0, sums, out=np.zeros_like(sums), where=sums > 0)
    matrix.data *= np.repeat(scale, np.diff(matrix.indptr))


def translation_probabilities(counts, min_prob: float = 0.01) -> sp.csr_matrix:
    """Return p(e|f) as a float64 CSR matrix of the same shape as ``counts``.

    Rows are normalised counts; entries below ``min_prob`` are dropped and the
    row renormalised, so each row with any support sums to 1.  Rows without
    counts stay empty (their foreign tokens are initialised randomly).
    """
    if not 0.0 <= min_prob <= 1.0:
        raise ConfigError("alignment.min_prob", f"must be within [0, 1], got {min_prob}")
    probs = sp.csr_matrix(counts, dtype=np.float64, copy=True)
    probs.sum_duplicates()
    if probs.nnz and probs.data.min() < 0:
        raise ValueError("alignment counts must not be negative")
    probs.eliminate_zeros()
    _normalise_rows(probs)
    if min_prob > 0:
        probs.data[probs.data < min_prob] = 0.0
        probs.eliminate_zeros()
        _normalise_rows(probs)
    probs.sort_indices()
    return probs


# --------------------------------------------------------------------------- storage


def save_alpha(path, alpha) -> None:
    """Atomically write ``alpha`` (sparse) to ``path`` in scipy .npz format.

    Written through a file handle so that scipy does not append ``.npz`` to a
    path that lacks it: the file lands exactly at ``path``.
    """
    matrix = sp.csr_matrix(alpha)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            sp.save_npz(handle, matrix, compressed=True)


def load_alpha(path) -> sp.csr_matrix:
    """Load a matrix written by :func:`save_alpha` as CSR."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no alignment matrix at {path}")
    try:
        matrix = sp.load_npz(path)
    except (OSError, ValueError, KeyError) as exc:
        raise InputFormatError(path, None, f"not a scipy sparse .npz file ({exc})") from exc
    return sp.csr_matrix(matrix)
