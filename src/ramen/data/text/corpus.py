"""The two corpus preparations the workflow runs: monolingual training text and a parallel corpus.

Both stream their input in two passes: the first cleans and filters it into scratch files beside
the output and hands each kept line's key digest to a :class:`~ramen.data.dedup.HashDeduplicator`;
the second copies the lines that are not repeats (or a seeded sample of them) to the output,
written atomically. Memory does not grow with the corpus beyond one bit per line.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tqdm import tqdm

from ramen.data.dedup import HashDeduplicator
from ramen.errors import ConfigError, InputFormatError
from ramen.io import atomic_path, read_lines

from .cleaning import Cleaning, cleaned_units
from .keys import _key_digest, _normalised_sentence_key
from .normalise import normalise_line
from .sampling import _write_selected
from .scripts import _check_lang
from .sources import _batches, _source_spec


# The config settings that decide each of the preparations' filters.
FILTER_SETTINGS = {
    "dropped_length": "text.min_chars, text.max_chars",
    "dropped_script": "text.min_script_ratio",
    "dropped_bytes": "text.max_bytes",
}


def _nothing_left(paths: Sequence, what: str, stats: Mapping[str, int],
                  excluded_from: Sequence[str | os.PathLike], setting: str) -> InputFormatError:
    """The error for a preparation that kept nothing, naming what dropped the lines: the
    decontamination (and the evaluation files whose sentences it removes, and ``setting``, the
    config key that names the text), the text settings."""
    dropped = ", ".join(f"{'decontamination' if name == 'dropped_excluded' else name[8:]} {count}"
                        for name, count in stats.items() if name.startswith("dropped_") and count)
    fixes = []
    if stats["dropped_excluded"]:
        files = f" ({', '.join(str(path) for path in excluded_from)})" if excluded_from else ""
        fixes.append(f"decontamination keeps every sentence of the evaluation files under `tasks`{files} out of "
                     f"the training text: set `{setting}` to text that is not the evaluation data")
    settings = [setting for name, setting in FILTER_SETTINGS.items() if stats.get(name)]
    if settings:
        fixes.append(f"check the text settings ({', '.join(settings)})")
    return InputFormatError(", ".join(str(path) for path in paths), None,
                            f"no {what} is left to train on ({stats['read']} read; dropped: {dropped or 'none'})",
                            "; ".join(fixes) or "check the corpora")


def prepare_monolingual(
    sources: list[dict],
    output_path: str | os.PathLike,
    *,
    lang: str,
    exclude_keys: Iterable[str] = frozenset(),
    excluded_from: Sequence[str | os.PathLike] = (),
    min_chars: int = 1,
    max_chars: int = 10_000,
    max_sentences: int | None = None,
    max_bytes: int | None = None,
    seed: int = 0,
    min_script_ratio: float = 0.0,
    processes: int = 1,
    progress: bool = False,
) -> dict[str, int]:
    """Build a one-sentence-per-line training corpus from raw text sources, streaming.

    ``sources`` are dicts ``{"path": ..., "format": "text" | "wikiextractor"}``:
    ``text`` is a (possibly gzipped) file with one sentence or paragraph per
    line (``"split": false`` keeps lines whole); ``wikiextractor`` is a
    directory written by :func:`ramen.data.text.wikipedia.extract_wikipedia`. Paragraphs are split into
    sentences, which are normalised and then dropped when shorter than
    ``min_chars`` or longer than ``max_chars`` characters, when less than
    ``min_script_ratio`` of their letters are in ``lang``'s script, when
    their :func:`~ramen.data.text.keys.sentence_key` is in ``exclude_keys`` (evaluation sentences,
    of the files ``excluded_from``, named if nothing is left) or when they repeat an earlier
    sentence. If more than ``max_sentences`` remain, a seeded random sample of that size is kept
    in original order.
    With ``max_bytes``, a seeded uniform subset of those of at most that many
    bytes (UTF-8, newlines included) is kept, in original order: each
    sentence draws a random priority and the lowest priorities that fit are
    kept (found from a histogram of bytes per priority, so nothing is held
    in memory); the output falls short of the budget by at most 1/65,536 of
    the sampled text's size.

    Memory does not grow with the corpus (beyond one bit per sentence):
    cleaned sentences go to scratch files next to the output, repeats are
    found by :class:`ramen.data.dedup.HashDeduplicator`, and a second pass writes
    the result. ``processes`` > 1 cleans batches in that many processes; the
    output is the same for any number. Returns counts: ``read`` = ``kept`` +
    every ``dropped_*``.
    """
    _check_lang(lang)
    if min_chars > max_chars:
        raise ConfigError("text.min_chars", f"min_chars ({min_chars}) exceeds max_chars ({max_chars})")
    if max_sentences is not None and max_sentences < 0:
        raise ConfigError("text.max_sentences", f"must be non-negative, got {max_sentences}")
    if max_bytes is not None and max_bytes < 0:
        raise ConfigError("text.max_bytes", f"must be non-negative, got {max_bytes}")
    if processes < 1:
        raise ConfigError("threads.text", f"must be at least 1, got {processes}")
    specs = [_source_spec(source, f"corpora.{lang}[{index}]") for index, source in enumerate(sources)]
    with atomic_path(output_path) as tmp:
        cleaning = Cleaning(
            lang=lang, min_chars=min_chars, max_chars=max_chars, min_script_ratio=min_script_ratio,
            excluded=frozenset(exclude_keys), scratch=tmp.parent / "cleaned", line_sizes=max_bytes is not None,
        )
        cleaning.scratch.mkdir()
        line_bytes = tmp.parent / "line-bytes.u4"

        # First pass: clean every work unit; remember where its kept sentences went.
        dedup = HashDeduplicator(tmp.parent / "hashes")
        candidates = []  # where the cleaned sentences are, in input order
        counts = collections.Counter()  # read and dropped_{length,invisible,script,excluded}
        with contextlib.ExitStack() as stack:
            units = stack.enter_context(cleaned_units(_batches(specs), cleaning, processes))
            sizes = stack.enter_context(open(line_bytes, "wb")) if max_bytes is not None else None
            bar = stack.enter_context(
                tqdm(unit=" sentences", unit_scale=True, desc=f"cleaning {lang}", disable=not progress, mininterval=10)
            )
            for unit in units:
                if unit.segment is not None:
                    candidates.append(unit.segment)
                dedup.add(unit.digests)
                if sizes is not None:
                    sizes.write(unit.line_sizes)
                counts.update(unit.counts)
                bar.update(unit.counts["read"])

        # Second pass: write the sentences that are not repeats, sampled to the limits.
        repeats = dedup.repeats()
        unique = dedup.count - repeats.count()
        keep = unique if max_sentences is None else min(unique, max_sentences)
        kept = _write_selected([candidates], [tmp], repeats, keep, seed, line_bytes=line_bytes, max_bytes=max_bytes)
        stats = {
            "read": counts["read"],
            "kept": kept,
            "dropped_length": counts["dropped_length"],
            "dropped_invisible": counts["dropped_invisible"],
            "dropped_script": counts["dropped_script"],
            "dropped_excluded": counts["dropped_excluded"],
            "dropped_duplicate": dedup.count - unique,
            "dropped_sampled": unique - keep,
            "dropped_bytes": keep - kept,
        }
        if not kept:  # an empty file would pass for a finished output and fail a stage later
            raise _nothing_left([path for path, _, _ in specs], f"{lang} sentence", stats, excluded_from,
                                f"corpora.{lang}")
    if stats["dropped_invisible"]:
        warnings.warn(f"corpora.{lang}: dropped {stats['dropped_invisible']} lines made only of zero-width "
                      "characters (U+200B, U+200C, U+200D, U+2060, U+FEFF) and spaces", stacklevel=2)
    return stats


def prepare_parallel(
    src_path: str | os.PathLike,
    tgt_path: str | os.PathLike,
    out_src: str | os.PathLike,
    out_tgt: str | os.PathLike,
    *,
    exclude_keys: Iterable[str] = frozenset(),
    excluded_from: Sequence[str | os.PathLike] = (),
    max_pairs: int | None = None,
    seed: int = 0,
    min_chars: int = 1,
    max_chars: int = 10_000,
    progress: bool = False,
    setting: str = "parallel",
) -> dict[str, int]:
    """Filter, deduplicate and subsample a line-aligned parallel corpus, streaming.

    Reads both (possibly gzipped) files in lockstep; raises
    :class:`InputFormatError` naming the shorter file and the first line
    number that has no partner. A pair is dropped when either side is empty,
    outside ``[min_chars, max_chars]`` characters, an evaluation sentence
    (its :func:`~ramen.data.text.keys.sentence_key` is in ``exclude_keys``, the sentences of the
    files ``excluded_from``), or when it repeats an earlier pair (both sides' keys equal; the
    first is kept). If more than ``max_pairs`` remain, a seeded random sample is kept in original order.
    Filtered pairs go to scratch files and their hashes to
    :class:`ramen.data.dedup.HashDeduplicator`; a second pass writes both outputs,
    atomically. Returns counts: ``read`` = ``kept`` + every ``dropped_*``; none kept is an
    :class:`InputFormatError` naming what dropped them and ``setting``, the config key of the pairs.
    """
    if min_chars > max_chars:
        raise ConfigError("text.min_chars", f"min_chars ({min_chars}) exceeds max_chars ({max_chars})")
    if max_pairs is not None and max_pairs < 0:
        raise ConfigError("text.max_pairs", f"must be non-negative, got {max_pairs}")
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    excluded = set(exclude_keys)
    missing = object()
    with atomic_path(out_src) as tmp_src, atomic_path(out_tgt) as tmp_tgt:
        # First pass: filter the pairs into scratch files, their key digests into the deduplicator.
        candidates = [tmp_src.parent / "candidates.src.txt", tmp_tgt.parent / "candidates.tgt.txt"]
        dedup = HashDeduplicator(tmp_src.parent / "hashes")
        counts = collections.Counter()  # read and dropped_{empty,length,excluded}
        with contextlib.ExitStack() as stack:
            write_src, write_tgt = (
                stack.enter_context(open(path, "w", encoding="utf-8", newline="\n")) for path in candidates
            )
            bar = stack.enter_context(
                tqdm(unit=" pairs", unit_scale=True, desc="parallel", disable=not progress, mininterval=10)
            )
            pairs = itertools.zip_longest(read_lines(src_path), read_lines(tgt_path), fillvalue=missing)
            digests = bytearray()
            for line_no, (src, tgt) in enumerate(pairs, start=1):
                if line_no % 100_000 == 0:
                    bar.update(100_000)
                    dedup.add(bytes(digests))
                    digests.clear()
                if src is missing or tgt is missing:
                    shorter, longer = (src_path, tgt_path) if src is missing else (tgt_path, src_path)
                    raise InputFormatError(
                        shorter, line_no,
                        f"file ends after {line_no - 1} lines but {longer} has a line {line_no}",
                        "parallel files must have the same number of lines",
                    )
                counts["read"] += 1
                src, tgt = normalise_line(src), normalise_line(tgt)
                if not src or not tgt:
                    counts["dropped_empty"] += 1
                    continue
                if not (min_chars <= len(src) <= max_chars and min_chars <= len(tgt) <= max_chars):
                    counts["dropped_length"] += 1
                    continue
                src_key, tgt_key = _normalised_sentence_key(src), _normalised_sentence_key(tgt)
                if src_key in excluded or tgt_key in excluded:
                    counts["dropped_excluded"] += 1
                    continue
                write_src.write(src + "\n")
                write_tgt.write(tgt + "\n")
                digests += _key_digest(src_key + "\n" + tgt_key)  # keys hold no newline
            dedup.add(bytes(digests))

        # Second pass: write the pairs that are not repeats, sampled to the limit.
        repeats = dedup.repeats()
        unique = dedup.count - repeats.count()
        keep = unique if max_pairs is None else min(unique, max_pairs)
        kept = _write_selected(candidates, [tmp_src, tmp_tgt], repeats, keep, seed)
        stats = {
            "read": counts["read"],
            "kept": kept,
            "dropped_empty": counts["dropped_empty"],
            "dropped_length": counts["dropped_length"],
            "dropped_excluded": counts["dropped_excluded"],
            "dropped_duplicate": dedup.count - unique,
            "dropped_sampled": unique - keep,
        }
        if not kept:  # aligning nothing would fail later, or yield an empty table
            raise _nothing_left([src_path, tgt_path], "sentence pair", stats, excluded_from, setting)
    return stats
