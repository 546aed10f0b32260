"""alpha = p(e|f) from monolingual data only (RAMEN eq. 3-4).

Word vectors of each language (trained with fastText on the prepared corpus, or
pretrained ``.vec``/``.bin`` files such as the published fastText vectors) are
aligned with identical-string Procrustes (:mod:`ramen.alignment.procrustes`), turned
into subword vectors of the two tokenizers by eq. 4 over the most frequent
words, and alpha is sparsemax over their similarities
(:func:`ramen.alignment.sparsemax.sparsemax_alpha`).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ramen.alignment.procrustes import AlignSettings, align_vectors, normalise_embeddings, subword_vectors
from ramen.errors import ConfigError, InputFormatError
from ramen.io import atomic_path, read_lines
from ramen.alignment.sparsemax import CHUNK_ROWS, sparsemax_alpha
from ramen.data.checkpoint_headers import SPACE as SPACE_MARKER
from ramen.data.vectors import load_vectors
from ramen.glue import settings_from

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MonolingualSettings:
    top_words: int = 50_000          # §3.2: subword vectors from the 50k most frequent words
    max_vector_words: int = 500_000  # entries read from a published .vec file (sorted by frequency)
    temperature: float = 10.0        # sparsemax runs on temperature x cosine similarity
    chunk_rows: int = CHUNK_ROWS
    align: AlignSettings = field(default_factory=AlignSettings)


def _backend(tokenizer):
    return getattr(tokenizer, "backend_tokenizer", tokenizer)


def _writes_spaces_as_marker(backend) -> bool:
    """Whether the tokenizer reads a space as SentencePiece's '▁' (Llama-2, Mistral, Gemma, Phi-3):
    its normaliser replaces it, or a Metaspace pre-tokeniser does."""
    normalizer, pre_tokenizer = backend.normalizer, backend.pre_tokenizer
    return ((normalizer is not None and SPACE_MARKER in normalizer.normalize_str("a b"))
            or "Metaspace" in repr(pre_tokenizer))


def word_splitter(tokenizer) -> Callable[[str], list[str]]:
    """Split a line into the words the tokenizer sees (its normaliser and pre-tokeniser)."""
    backend = _backend(tokenizer)
    normalizer, pre_tokenizer = backend.normalizer, backend.pre_tokenizer
    byte_level = "ByteLevel" in repr(pre_tokenizer)
    marker = _writes_spaces_as_marker(backend)

    def split(line: str) -> list[str]:
        text = normalizer.normalize_str(line) if normalizer is not None else line
        pieces = text.split() if pre_tokenizer is None else [piece for piece, _ in pre_tokenizer.pre_tokenize_str(text)]
        if byte_level:  # byte-level pieces carry the space marker; words are kept without it
            pieces = [piece.lstrip("Ġ") for piece in pieces]
        if marker:  # the spaces are '▁' by now, inside one piece: the words lie between them
            pieces = [word for piece in pieces for word in piece.split(SPACE_MARKER)]
        return [piece for piece in pieces if piece.strip()]

    return split


def word_normaliser(tokenizer) -> Callable[[str], str]:
    """Map a vector-file word to the tokenizer's form; '' for words it would split apart."""
    split = word_splitter(tokenizer)

    def normalise(word: str) -> str:
        pieces = split(word)
        return pieces[0] if len(pieces) == 1 else ""

    return normalise


def subword_tokenize(tokenizer) -> Callable[[str], list[str]]:
    """Subword tokens of one word as it appears inside running text."""
    backend = _backend(tokenizer)
    if _writes_spaces_as_marker(backend):
        # Inside text a word follows a '▁'; the normaliser would add another (Llama-2) or none (Gemma).
        return lambda word: [token.value for token in backend.model.tokenize(SPACE_MARKER + word)]
    prefix = " " if "ByteLevel" in repr(backend.pre_tokenizer) else ""

    def tokenize(word: str) -> list[str]:
        return backend.encode(prefix + word, add_special_tokens=False).tokens

    return tokenize


def pretokenize_corpus(text_path, tokenizer, out_path) -> int:
    """Write ``text_path`` as space-separated words of the tokenizer (fastText's input); return lines."""
    split = word_splitter(tokenizer)
    count = 0
    with atomic_path(out_path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            for line in read_lines(text_path):
                words = split(line)
                if words:
                    handle.write(" ".join(words) + "\n")
                    count += 1
    if count == 0:
        raise InputFormatError(text_path, None, "no words in the corpus", "check the prepared text")
    return count


def count_words(pretokenized_path) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    for line in read_lines(pretokenized_path):
        counts.update(line.split())
    return counts


@dataclass
class LanguageWords:
    words: list[str]             # by decreasing corpus frequency
    vectors: np.ndarray          # normalised (unit length, centred)
    probabilities: np.ndarray    # unigram probability in the monolingual data


def language_words(vectors_path, counts: collections.Counter, tokenizer, settings: MonolingualSettings,
                   expected_dim: int | None = None) -> LanguageWords:
    """The ``top_words`` most frequent corpus words that have a vector, with p(w)."""
    total = sum(counts.values())
    if total == 0:
        raise ValueError(f"no word counts for {vectors_path}: the corpus is empty")
    path = Path(vectors_path)
    if path.suffix == ".bin":
        loaded = load_vectors(path, words=[w for w, _ in counts.most_common(settings.top_words)],
                              expected_dim=expected_dim)
    else:
        loaded = load_vectors(path, max_words=settings.max_vector_words, expected_dim=expected_dim,
                              normalise=word_normaliser(tokenizer))
    row = {word: i for i, word in enumerate(loaded.words)}
    chosen = [w for w, _ in counts.most_common() if w in row][: settings.top_words]
    if not chosen:
        raise InputFormatError(path, None, "none of the corpus words has a vector here",
                               "are these vectors of the right language and casing?")
    vectors = normalise_embeddings(loaded.vectors[[row[w] for w in chosen]])
    probabilities = np.asarray([counts[w] / total for w in chosen], dtype=np.float64)
    logger.info("%s: %d words with vectors (of %d distinct corpus words)", path, len(chosen), len(counts))
    return LanguageWords(chosen, vectors, probabilities)


def monolingual_alpha(english_vectors, foreign_vectors, english_words_path, foreign_words_path,
                      source_tokenizer, foreign_tokenizer, settings: MonolingualSettings = MonolingualSettings(),
                      *, source_vocab: list[str], foreign_vocab: list[str]):
    """alpha (V_f, V_e, CSR) and a stats dict, from word vectors and the two pre-tokenised corpora."""
    counts = {}
    for path in (english_words_path, foreign_words_path):
        counts[path] = count_words(path)
        if not counts[path]:
            raise InputFormatError(path, None, "no words", "the prepared corpus of this language is empty")
    english = language_words(english_vectors, counts[english_words_path], source_tokenizer, settings)
    foreign = language_words(foreign_vectors, counts[foreign_words_path], foreign_tokenizer, settings,
                             expected_dim=english.vectors.shape[1])
    alignment = align_vectors(foreign.vectors, english.vectors, foreign.words, english.words, settings.align)
    mapped = foreign.vectors @ alignment.mapping
    english_table, english_mask = subword_vectors(english.words, english.vectors, english.probabilities,
                                                  subword_tokenize(source_tokenizer), source_vocab)
    foreign_table, foreign_mask = subword_vectors(foreign.words, mapped, foreign.probabilities,
                                                  subword_tokenize(foreign_tokenizer), foreign_vocab)
    for table in (english_table, foreign_table):
        table /= np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1e-8)
    alpha = sparsemax_alpha(
        torch.from_numpy(foreign_table), torch.from_numpy(english_table), temperature=settings.temperature,
        foreign_rows=torch.from_numpy(foreign_mask), english_columns=torch.from_numpy(english_mask),
        chunk_rows=settings.chunk_rows,
    )
    stats = {
        "english_words": len(english.words), "foreign_words": len(foreign.words),
        "seed_pairs": len(alignment.seed_pairs), "seed_held_out_p1": alignment.held_out_p1,
        "seed_examples": [foreign.words[i] for i, _ in alignment.seed_pairs[:30]],
        "refinement": alignment.history, "final_dictionary_pairs": len(alignment.dictionary),
        "english_subwords_with_vector": int(english_mask.sum()),
        "foreign_subwords_with_vector": int(foreign_mask.sum()),
        "temperature": settings.temperature,
    }
    return alpha, stats


# Keys of the flat ``monolingual`` config section that set the alignment and its seed filter.
SEED_KEYS = {"seed_min_length": "min_length", "seed_max_log_rank_ratio": "max_log_rank_ratio"}
ALIGN_KEYS = ("refine_iterations", "refine_words", "retrieval", "csls_k")


def settings_from_config(values: Mapping, setting: str = "monolingual") -> MonolingualSettings:
    """MonolingualSettings from the flat ``monolingual`` config section (vectors and fasttext
    excluded), through the one settings parser; a bad key is named as the section spells it."""
    values = dict(values)
    seed = {field: values.pop(key) for key, field in SEED_KEYS.items() if key in values}
    align = {key: values.pop(key) for key in ALIGN_KEYS if key in values}
    try:
        settings = settings_from(MonolingualSettings, {**values, "align": {**align, "seed_filter": seed}}, setting)
    except ConfigError as error:
        flat = error.setting.replace(f"{setting}.align.seed_filter.", f"{setting}.seed_")
        flat = flat.replace(f"{setting}.align.", f"{setting}.")
        if flat == error.setting:
            raise
        raise error.at(flat) from None
    if settings.align.retrieval not in ("cosine", "csls"):
        raise ConfigError(f"{setting}.retrieval", f"unknown value {settings.align.retrieval!r}", "choose cosine or csls")
    return settings
