"""Running the word aligners: eflomal (seeded) and fast_align, on two subword-id files.

Both write Pharaoh links ``i-j`` (i: foreign position, j: English position) for a forward and a
reverse model; :mod:`.parallel` counts them into p(e|f).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

from ramen.alignment.eflomal_build import EFLOMAL_SEED_ENV, seeded_eflomal_binary
from ramen.alignment.parallel import CHUNK_LINES, read_chunks
from ramen.errors import ConfigError, InputFormatError
from ramen.io import atomic_path, open_text, read_lines

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- eflomal


@contextlib.contextmanager
def _environment(**values: str):
    """Set environment variables for child processes started inside the block."""
    old = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _count_lines(path) -> int:
    count = 0
    for _ in read_lines(path):
        count += 1
    return count


def align_with_eflomal(
    src_ids_path,
    tgt_ids_path,
    out_forward,
    out_reverse,
    *,
    seed: int = 0,
    iterations_scale: float = 1.0,
    threads: int = 1,
    n_samplers: int = 3,
) -> None:
    """Align foreign (src) to English (tgt) id files with eflomal.

    Writes Pharaoh links ``i-j`` (i: foreign position, j: English position) for
    eflomal's forward and reverse models to ``out_forward`` / ``out_reverse``,
    atomically.

    ``iterations_scale`` multiplies eflomal's default iteration counts
    (``rel_iterations``).  ``threads`` sets OMP_NUM_THREADS for the eflomal
    binary, which runs its ``n_samplers`` independent samplers in parallel.

    ``seed`` (alignment.seed) fixes the sampler: the same inputs and seed give
    byte-identical links, whatever ``threads`` is.  It needs the patched build
    of eflomal that tools/install_eflomal.sh installs; the PyPI release is refused.
    """
    if not 0 <= seed < 2**64:
        raise ConfigError("alignment.seed", f"must be from 0 to 2**64 - 1 for eflomal, got {seed}")
    if threads < 1:
        raise ConfigError("threads.align", f"must be at least 1, got {threads}")
    if iterations_scale <= 0:
        raise ConfigError("alignment.iterations_scale", f"must be positive, got {iterations_scale}")
    if n_samplers < 1:
        raise ValueError(f"n_samplers must be at least 1, got {n_samplers}")
    seeded_eflomal_binary()
    import eflomal  # the seeded build, checked above

    n_src = _count_lines(src_ids_path)
    n_tgt = _count_lines(tgt_ids_path)
    if n_src != n_tgt:
        longer, shorter, n_short = (
            (src_ids_path, tgt_ids_path, n_tgt) if n_src > n_tgt else (tgt_ids_path, src_ids_path, n_src)
        )
        raise InputFormatError(
            longer,
            n_short + 1,
            f"line has no counterpart in {shorter}, which has {n_short} lines",
            "both sides of a parallel corpus need the same number of lines",
        )
    logger.info(
        "eflomal: %d sentence pairs, rel_iterations=%s, samplers=%d, threads=%d, seed %d",
        n_src, iterations_scale, n_samplers, threads, seed,
    )

    aligner = eflomal.Aligner(n_samplers=n_samplers, rel_iterations=float(iterations_scale))
    with atomic_path(out_forward) as tmp_fwd, atomic_path(out_reverse) as tmp_rev:
        with (open_text(src_ids_path) as src, open_text(tgt_ids_path) as tgt,
              _environment(OMP_NUM_THREADS=str(threads), **{EFLOMAL_SEED_ENV: str(seed)})):
            aligner.align(
                src,
                tgt,
                links_filename_fwd=str(tmp_fwd),
                links_filename_rev=str(tmp_rev),
                quiet=True,
            )
        for tmp in (tmp_fwd, tmp_rev):
            if not Path(tmp).exists():
                raise RuntimeError(f"eflomal finished without writing {tmp}")


# --------------------------------------------------------------------------- fast_align

FAST_ALIGN_INSTALL = (
    "fast_align is not on PATH: use the conda environment workflow/envs/fast_align.yaml (snakemake --sdm conda builds "
    "it), or build https://github.com/clab/fast_align (cmake, make) and put its build directory on PATH, "
    "or set alignment.aligner: eflomal"
)


def find_fast_align(executable: str = "fast_align") -> str:
    path = shutil.which(executable)
    if path is None:
        raise ConfigError("alignment.aligner", f"'{executable}' was not found", FAST_ALIGN_INSTALL)
    return path


def write_fast_align_input(src_ids_path, tgt_ids_path, out_path) -> int:
    """Write ``src ||| tgt`` lines (fast_align's input) from two id files; return the line count."""
    count = 0
    with open(out_path, "w", encoding="utf-8") as out:
        for _, (src_lines, tgt_lines) in read_chunks([src_ids_path, tgt_ids_path], CHUNK_LINES):
            for src, tgt in zip(src_lines, tgt_lines):
                out.write(f"{src.strip()} ||| {tgt.strip()}\n")
            count += len(src_lines)
    return count


def align_with_fast_align(src_ids_path, tgt_ids_path, out_forward, out_reverse, *, threads: int = 1,
                          executable: str = "fast_align") -> None:
    """Align foreign (src) to English (tgt) id files with fast_align, both directions.

    Runs fast_align as its documentation recommends: ``-i corpus -d -o -v``
    (favour the diagonal, optimise its tension, Dirichlet prior) for the
    forward links and the same with ``-r`` for the reverse model.  Both files
    hold ``i-j`` links with i the foreign and j the English position.
    """
    binary = find_fast_align(executable)
    if threads < 1:
        raise ConfigError("threads.align", f"must be at least 1, got {threads}")
    with atomic_path(out_forward) as tmp_fwd, atomic_path(out_reverse) as tmp_rev:
        corpus = Path(tmp_fwd).parent / "corpus.fast_align"
        n_pairs = write_fast_align_input(src_ids_path, tgt_ids_path, corpus)
        for reverse, out in ((False, tmp_fwd), (True, tmp_rev)):
            command = [binary, "-i", str(corpus), "-d", "-o", "-v"] + (["-r"] if reverse else [])
            logger.info("running %s", " ".join(command))
            with open(out, "w", encoding="utf-8") as handle, _environment(OMP_NUM_THREADS=str(threads)):
                finished = subprocess.run(command, stdout=handle, stderr=subprocess.PIPE, text=True)
            if finished.returncode != 0:
                raise RuntimeError(f"{' '.join(command)} failed (exit {finished.returncode}): "
                                   f"{finished.stderr.strip()[-2000:]}")
            n_links = _count_lines(out)
            if n_links != n_pairs:
                raise InputFormatError(out, n_links, f"fast_align wrote {n_links} lines for {n_pairs} sentence pairs",
                                       "check its log for skipped lines")
        corpus.unlink()
