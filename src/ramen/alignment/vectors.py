"""Word vectors for the monolingual route: fastText trained on words or on subword tokens.

The file formats (``.vec``, ``.bin``) are read and written by :mod:`ramen.data.vectors`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ramen.data.vectors import WordVectors, write_vec
from ramen.errors import InputFormatError
from ramen.io import atomic_path

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FastTextSettings:
    """fastText skipgram settings for training on a prepared corpus."""

    dim: int = 100
    epoch: int = 5
    min_count: int = 3
    minn: int = 3
    maxn: int = 6
    bucket: int = 200_000
    model: str = "skipgram"   # FOCUS trains cbow (closer to masked-LM, its paper says)
    neg: int = 5


def _train_unsupervised(fasttext, path: str, attempts: int = 3, **options):
    """fastText's ``train_unsupervised``, tried again when it stops with "Encountered NaN" at once.

    Its monitoring thread can read the loss before the first example is counted (0 / 0) and then
    stops a sound run; seen on small corpora when the machine is busy, with one thread and the same
    input passing on the next try. A corpus that really diverges fails every attempt.
    """
    for attempt in range(1, attempts + 1):
        try:
            return fasttext.train_unsupervised(path, **options)
        except RuntimeError as error:
            if "NaN" not in str(error) or attempt == attempts:
                raise
            logger.warning("fastText stopped with %s on %s; attempt %d of %d", error, path, attempt + 1, attempts)


def train_fasttext(pretokenized_path, out_vec, settings: FastTextSettings, *, threads: int = 1,
                   out_bin=None, keep=None) -> int:
    """Train fastText vectors on a pre-tokenised text file and write its vocabulary as ``.vec``.

    ``out_bin``: also save the model (character n-grams included: WECHSEL reads
    subword strings through them). ``keep``: write only these words' vectors.
    Returns the number of words written.  With one thread the result is
    reproducible (fastText's Python API takes no seed).  fastText needs character n-grams
    (``maxn`` > 0): without them training failed with NaNs on small corpora.
    """
    import fasttext

    if settings.maxn < settings.minn or settings.maxn <= 0:
        raise ValueError(f"fastText needs 0 < minn <= maxn, got minn={settings.minn}, maxn={settings.maxn}")
    if os.path.getsize(pretokenized_path) == 0:
        raise InputFormatError(pretokenized_path, None, "empty corpus", "fastText needs text to train on")
    logger.info("fastText skipgram on %s: %s", pretokenized_path, settings)
    if settings.model not in ("skipgram", "cbow"):
        raise ValueError(f"fastText model must be skipgram or cbow, got {settings.model!r}")
    model = _train_unsupervised(
        fasttext, str(pretokenized_path), model=settings.model, dim=settings.dim, epoch=settings.epoch,
        minCount=settings.min_count, minn=settings.minn, maxn=settings.maxn, bucket=settings.bucket,
        neg=settings.neg, thread=threads, verbose=0,
    )
    # "</s>" is fastText's end-of-line marker, not a word of the corpus.
    words = [word for word in model.words if word != "</s>" and (keep is None or word in keep)]
    if not words:
        raise InputFormatError(pretokenized_path, None, f"no word occurs {settings.min_count} times",
                               "lower monolingual.fasttext.min_count or give more text")
    vectors = np.stack([model.get_word_vector(word) for word in words]).astype(np.float32)
    write_vec(out_vec, WordVectors(words, vectors))
    if out_bin is not None:
        with atomic_path(out_bin) as tmp:
            model.save_model(str(tmp))
    return len(words)


def train_token_fasttext(text_path, tokenizer, out_vec, settings: FastTextSettings, *, threads: int = 1) -> int:
    """FOCUS's auxiliary vectors: fastText on ``text_path`` tokenised by ``tokenizer``, one vector per token.

    Tokens are fastText's words here (their markers kept), so only vocabulary tokens
    that occur ``min_count`` times get a vector; the ``.vec`` holds those.
    """
    import tempfile

    from ramen.io import read_lines

    keep = set(tokenizer.get_vocab())
    Path(out_vec).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=Path(out_vec).parent) as scratch:
        tokens_path = Path(scratch) / "tokens.txt"
        with open(tokens_path, "w", encoding="utf-8") as handle:
            for line in read_lines(text_path):
                tokens = tokenizer.tokenize(line)
                if tokens:
                    handle.write(" ".join(tokens) + "\n")
        return train_fasttext(tokens_path, out_vec, settings, threads=threads, keep=keep)
