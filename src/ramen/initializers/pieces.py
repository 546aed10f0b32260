"""Each foreign token's pieces (its segmentation by the source tokenizer) and mixtures over them.

The subword initialisers (``fvt``, ``weighted_pieces``, ``parallel_fvt``) and the output rules of
an extension (ramen.initializers.extension) build a token's row from the source rows of the
pieces the source tokenizer cuts the token's text into. A piece that occurs twice counts twice.

Piece weights, for a token of n pieces (index i = 0 first ... n - 1 last):

    uniform       1/n each (FVT's subword mean)
    toward_last   proportional to 2^i: each piece half the weight of the one after it, so the
                  last piece carries more than half (input rows: the source model has read the
                  whole word by its last piece)
    toward_first  proportional to 2^-i: the mirror image (output rows: predicting the word, the
                  source model first predicts its first piece)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from ramen.initializers.common import is_byte_level, token_text

Pieces = Sequence[Sequence[int]]


def uniform(count: int) -> np.ndarray:
    return np.full(count, 1.0 / count)


def toward_last(count: int) -> np.ndarray:
    weights = 2.0 ** np.arange(count)
    return weights / weights.sum()


def toward_first(count: int) -> np.ndarray:
    return toward_last(count)[::-1].copy()


def piece_weights(pieces: Pieces, source_rows: int, weighting: Callable[[int], np.ndarray]) -> sp.csr_matrix:
    """The (V_f, V_e) mixture of each token's pieces by ``weighting`` (rows sum to one; a token
    without pieces has an empty row)."""
    rows, cols, values = [], [], []
    for row, ids in enumerate(pieces):
        if not len(ids):
            continue
        rows += [row] * len(ids)
        cols += list(ids)
        values += list(weighting(len(ids)))
    # Duplicate (row, column) entries add up: a repeated piece counts with both its weights.
    return sp.csr_matrix((np.asarray(values, dtype=np.float64), (rows, cols)), shape=(len(pieces), source_rows))


def segment_tokens(foreign_vocab: Sequence[str], source_tokenizer,
                   special_tokens: Sequence[str] = ()) -> list[tuple[int, ...]]:
    """Each foreign token's source ids: ``()`` for a special token (copied by string instead).

    Between two byte-level vocabularies the token's own byte string goes through the source's BPE
    model, so a token holding part of a UTF-8 character still gets its bytes' pieces and a word
    start keeps its space. Otherwise the token's characters without its word-boundary marker
    (:func:`~ramen.initializers.common.token_text`) are encoded, without special tokens.
    """
    specials = set(special_tokens)
    foreign_bytes = is_byte_level(foreign_vocab)
    kept = [index for index, token in enumerate(foreign_vocab) if token not in specials]
    if foreign_bytes and is_byte_level(list(source_tokenizer.get_vocab())):
        model = source_tokenizer.backend_tokenizer.model
        found = [tuple(piece.id for piece in model.tokenize(foreign_vocab[index])) for index in kept]
    else:
        texts = [token_text(foreign_vocab[index], foreign_bytes) for index in kept]
        found = [tuple(ids) for ids in source_tokenizer(texts, add_special_tokens=False)["input_ids"]] if texts else []
    pieces: list[tuple[int, ...]] = [()] * len(foreign_vocab)
    for index, ids in zip(kept, found):
        pieces[index] = ids
    return pieces


def extension_pieces(record: Mapping, new_tokens: Sequence[str], source_tokenizer) -> list[tuple[int, ...]]:
    """The new tokens' pieces: the source ids each was merged from (``vocab_extension.json``), else
    the token's string segmented by the source tokenizer."""
    recorded = [entry.get("source_ids") for entry in record.get("tokens", [])]
    if len(recorded) == len(new_tokens) and all(recorded):
        return [tuple(int(index) for index in ids) for ids in recorded]
    return segment_tokens(new_tokens, source_tokenizer)
