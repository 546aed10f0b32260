"""Definitions every initialiser shares: the result type, the common signature, random rows,
special-token copying, the report's statistics and word-boundary markers."""


from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ramen.data.checkpoint_headers import BYTE_CHARACTERS, BYTE_PIECES, SPACE


DEFAULT_SPECIAL_TOKENS: tuple[str, ...] = ("[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]")


@dataclass
class InitResult:
    """Foreign embeddings (V_f, d), output bias (V_f,) and which rows came from English.

    ``supported[i]`` is True when row i was built from English parameters (an
    alignment mixture or a copied special token) and False when it is random.
    ``copied_special_tokens`` lists the special tokens copied from English.
    """

    embeddings: torch.Tensor
    bias: torch.Tensor
    supported: torch.Tensor
    copied_special_tokens: tuple[str, ...] = field(default_factory=tuple)
    # The (V_f, V_e) mixture weights an initialiser computed itself (WECHSEL, FOCUS), for the
    # report's support figures; None when there are none or they came in as alpha.
    weights: object = None
    # How every row was made from English rows (a Mixture), so that an untied output layer and
    # its bias can be built the same way (apply_mixture); None for initialisers that do not mix.
    mixture: object = None
    # How untied output rows are made where that differs from ``mixture`` (weighted_pieces); None: as ``mixture``.
    output_mixture: object = None
    # Figures of the initialiser's own (a fit's time and losses: distill), added to the init stats.
    stats: dict = field(default_factory=dict)


def check_shapes(source_embeddings: torch.Tensor, source_bias: torch.Tensor, source_vocab: Sequence[str]) -> None:
    """Raise ValueError unless the English table, bias and vocabulary agree in size."""
    if source_embeddings.dim() != 2:
        raise ValueError(f"source embeddings must be 2-D (V_e, d), got shape {tuple(source_embeddings.shape)}")
    n_e = len(source_vocab)
    if source_embeddings.shape[0] != n_e:
        raise ValueError(f"source embeddings have {source_embeddings.shape[0]} rows but the English vocabulary has {n_e} entries")
    if tuple(source_bias.shape) != (n_e,):
        raise ValueError(f"source bias has shape {tuple(source_bias.shape)}, expected ({n_e},)")


def random_rows(n_rows: int, dim: int, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """Draw an (n_rows, dim) table from N(0, 1/d^2), i.e. standard deviation 1/d.

    The paper (§3.3) writes N(0, 1/d^2); read in the usual N(mean, variance)
    notation that is a variance of 1/d^2.  Drawn on the CPU in float32 so that
    a seed gives the same table on every device, then moved to ``like``.
    """
    table = torch.randn(n_rows, dim, generator=generator, dtype=torch.float32) / dim
    return table.to(device=like.device, dtype=like.dtype)


# Special tokens of the two common source families, by role: BERT WordPiece and RoBERTa byte-level BPE.
SPECIAL_TOKEN_ROLES: dict[str, str] = {
    "[CLS]": "cls", "<s>": "cls",
    "[SEP]": "sep", "</s>": "sep",
    "[MASK]": "mask", "<mask>": "mask",
    "[PAD]": "pad", "<pad>": "pad",
    "[UNK]": "unk", "<unk>": "unk",
}


def special_token_pairs(foreign_vocab: Sequence[str], source_vocab: Sequence[str],
                        wanted: Sequence[str]) -> list[tuple[str, int, int]]:
    """(foreign token, foreign row, English row) for each wanted special token found in both vocabularies.

    Matched by identical string first, else by role (so a foreign ``<s>`` gets
    the English ``[CLS]`` row); rows come from the vocabularies, never from
    assumed ids.
    """
    wanted_set = set(wanted)
    foreign_index: dict[str, int] = {}
    for i, tok in enumerate(foreign_vocab):
        if tok in wanted_set and tok not in foreign_index:
            foreign_index[tok] = i
    source_index: dict[str, int] = {}
    source_by_role: dict[str, int] = {}
    for i, tok in enumerate(source_vocab):
        if tok not in source_index:
            source_index[tok] = i
        role = SPECIAL_TOKEN_ROLES.get(tok)
        if role is not None and role not in source_by_role:
            source_by_role[role] = i
    pairs = []
    for tok in dict.fromkeys(wanted):
        if tok not in foreign_index:
            continue
        e = source_index.get(tok)
        if e is None and tok in SPECIAL_TOKEN_ROLES:
            e = source_by_role.get(SPECIAL_TOKEN_ROLES[tok])
        if e is not None:
            pairs.append((tok, foreign_index[tok], e))
    return pairs


def copy_special_tokens(
    embeddings: torch.Tensor,
    bias: torch.Tensor,
    supported: torch.Tensor,
    source_embeddings: torch.Tensor,
    source_bias: torch.Tensor,
    foreign_vocab: Sequence[str],
    source_vocab: Sequence[str],
    special_tokens: Sequence[str] | None,
) -> tuple[str, ...]:
    """Copy English rows for special tokens present in both vocabularies (same string or same role)."""
    wanted = DEFAULT_SPECIAL_TOKENS if special_tokens is None else tuple(special_tokens)
    copied = []
    for tok, f, e in special_token_pairs(foreign_vocab, source_vocab, wanted):
        embeddings[f] = source_embeddings[e].to(embeddings.dtype)
        bias[f] = source_bias[e].to(bias.dtype)
        supported[f] = True
        copied.append(tok)
    return tuple(copied)


def initialisation_stats(result: InitResult, alpha=None) -> dict:
    """Summary figures for the initialisation report (plain JSON-serialisable values)."""
    if alpha is None:
        alpha = result.weights
    n_rows = int(result.embeddings.shape[0])
    supported = result.supported.detach().cpu().numpy().astype(bool)
    norms = result.embeddings.detach().float().norm(dim=1).cpu().numpy()
    stats: dict = {
        "rows": n_rows,
        "dim": int(result.embeddings.shape[1]),
        "supported_rows": int(supported.sum()),
        "supported_share": float(supported.mean()) if n_rows else 0.0,
        "random_rows": int((~supported).sum()),
        "special_tokens_copied": list(result.copied_special_tokens),
        "mean_norm_supported": float(norms[supported].mean()) if supported.any() else None,
        "mean_norm_random": float(norms[~supported].mean()) if (~supported).any() else None,
    }
    if alpha is None:
        stats.update(aligned_rows=0, aligned_share=0.0, support_size_mean=None,
                     support_size_median=None, support_size_max=None, top_prob_mean=None, alpha_nnz=0)
        return {**stats, **result.stats}
    import scipy.sparse as sp

    alpha = sp.csr_matrix(alpha)
    sizes = np.diff(alpha.indptr)
    aligned = sizes > 0
    top = alpha.max(axis=1).toarray().ravel()[aligned] if alpha.nnz else np.zeros(0)
    stats.update(
        aligned_rows=int(aligned.sum()),
        aligned_share=float(aligned.mean()) if len(sizes) else 0.0,
        support_size_mean=float(sizes[aligned].mean()) if aligned.any() else None,
        support_size_median=float(np.median(sizes[aligned])) if aligned.any() else None,
        support_size_max=int(sizes.max()) if len(sizes) else 0,
        top_prob_mean=float(top.mean()) if len(top) else None,
        alpha_nnz=int(alpha.nnz),
    )
    return {**stats, **result.stats}


WORD_PREFIX = "##"        # WordPiece: a piece that continues a word
WORD_SUFFIX = "</w>"      # fastBPE / subword-nmt: a piece that ends a word
SPACE_MARKERS = "Ġ▁"      # byte-level BPE and SentencePiece: a piece that starts a word


def bare_string(token: str) -> str:
    """A token's characters without its tokenizer's word-boundary marker.

    The four conventions mark different boundaries (WordPiece the inside of a
    word, fastBPE its end, byte-level BPE and SentencePiece its start), so only
    the characters can be compared across two tokenizers.
    """
    if token.startswith(WORD_PREFIX) and len(token) > len(WORD_PREFIX):
        return token[len(WORD_PREFIX):]
    if token.endswith(WORD_SUFFIX) and len(token) > len(WORD_SUFFIX):
        return token[: -len(WORD_SUFFIX)]
    if token[:1] in SPACE_MARKERS and len(token) > 1:
        return token[1:]
    return token


@dataclass(frozen=True)
class Mixture:
    """How an initialiser made each foreign row from English rows, independent of which English matrix.

    ``weights`` is a (V_f, V_e) sparse matrix whose non-empty rows are mixtures (rows sum to
    one); ``mean_rows`` marks rows that are the mean of every English row (too dense to store
    as weights); ``special`` lists (token, foreign row, English row) copies, which win over
    both. Every other row is a random draw.
    """

    shape: tuple[int, int]
    weights: object = None
    mean_rows: object = None
    special: tuple[tuple[str, int, int], ...] = ()


def apply_mixture(mixture: Mixture, source_matrix: torch.Tensor, source_bias: torch.Tensor | None = None, *,
                  generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Foreign rows (V_f, k), bias (V_f,) or None, and supported mask from any (V_e, k) English matrix.

    The same mixture builds the input table and, for a model whose output layer is not tied to
    it, the output rows and output bias. Rows without support are N(0, 1/k^2) draws (drawn for
    every row first, so a seed gives the rows of ``random``) with zero bias.
    """
    import scipy.sparse as sp

    n_f, n_e = mixture.shape
    if source_matrix.dim() != 2 or source_matrix.shape[0] != n_e:
        raise ValueError(f"the mixture is over {n_e} English rows but the matrix has shape "
                         f"{tuple(source_matrix.shape)}")
    if source_bias is not None and tuple(source_bias.shape) != (n_e,):
        raise ValueError(f"the bias has shape {tuple(source_bias.shape)}, expected ({n_e},)")
    source_matrix = source_matrix.detach()
    rows = random_rows(n_f, source_matrix.shape[1], generator, like=source_matrix)
    bias = None
    if source_bias is not None:
        source_bias = source_bias.detach()
        bias = torch.zeros(n_f, dtype=source_bias.dtype, device=source_bias.device)
    supported = np.zeros(n_f, dtype=bool)
    if mixture.weights is not None:
        weights = sp.csr_matrix(mixture.weights)
        has_support = np.diff(weights.indptr) > 0
        supported |= has_support
        table = source_matrix.cpu().float().numpy()
        weights32 = weights.astype(np.float32)
        mixed_rows = np.flatnonzero(has_support)
        for start in range(0, len(mixed_rows), ROW_CHUNK):
            idx = mixed_rows[start : start + ROW_CHUNK]
            rows[torch.from_numpy(idx).to(rows.device)] = torch.from_numpy(
                np.asarray(weights32[idx] @ table)).to(device=rows.device, dtype=rows.dtype)
        if bias is not None and len(mixed_rows):
            mixed_bias = weights @ source_bias.cpu().double().numpy()
            bias[torch.from_numpy(mixed_rows).to(bias.device)] = torch.from_numpy(mixed_bias[mixed_rows]).to(
                device=bias.device, dtype=bias.dtype)
    if mixture.mean_rows is not None:
        mean_rows = np.asarray(mixture.mean_rows, dtype=bool)
        supported |= mean_rows
        index = torch.from_numpy(np.flatnonzero(mean_rows)).to(rows.device)
        rows[index] = source_matrix.float().mean(0).to(rows.dtype)
        if bias is not None:
            bias[index.to(bias.device)] = source_bias.double().mean().to(bias.dtype)
    for _, f, e in mixture.special:
        rows[f] = source_matrix[e].to(rows.dtype)
        if bias is not None:
            bias[f] = source_bias[e].to(bias.dtype)
        supported[f] = True
    return rows, bias, torch.from_numpy(supported)


def mixture_result(mixture: Mixture, source_embeddings: torch.Tensor, source_bias: torch.Tensor, *,
                   generator: torch.Generator) -> InitResult:
    """The InitResult of ``mixture`` applied to the English input table and output bias."""
    embeddings, bias, supported = apply_mixture(mixture, source_embeddings, source_bias, generator=generator)
    return InitResult(embeddings=embeddings, bias=bias, supported=supported,
                      copied_special_tokens=tuple(tok for tok, _, _ in mixture.special), mixture=mixture)


def special_copies(foreign_vocab: Sequence[str], source_vocab: Sequence[str],
                   special_tokens: Sequence[str] | None) -> tuple[tuple[str, int, int], ...]:
    """The special-token copies of ``copy_special_tokens`` as (token, foreign row, English row)."""
    wanted = DEFAULT_SPECIAL_TOKENS if special_tokens is None else tuple(special_tokens)
    return tuple(special_token_pairs(foreign_vocab, source_vocab, wanted))


# Rows of a mixture multiplied per step; bounds the float32 temporaries to ~rows x d.
ROW_CHUNK = 4096


def is_sentencepiece(vocab: Sequence[str]) -> bool:
    """True for a SentencePiece-style vocabulary with byte fallback (Llama-2, Mistral, Gemma, Phi-3):
    all 256 byte pieces ``<0x00>`` ... ``<0xFF>`` are tokens."""
    present = set(vocab)
    return all(piece in present for piece in BYTE_PIECES)


def is_byte_level(vocab: Sequence[str]) -> bool:
    """True for a byte-level BPE vocabulary (GPT-2, RoBERTa, Llama 3, Qwen, SmolLM): all 256 byte characters are tokens.

    A SentencePiece vocabulary with byte fallback is not one even where it holds every such
    character (Gemma's 256k pieces may): its 'é' is the character, not the byte 0xE9."""
    present = set(vocab)
    return all(c in present for c in BYTE_CHARACTERS) and not is_sentencepiece(vocab)


def _byte_fallback(token: str) -> str | None:
    """SentencePiece's byte-fallback piece ``<0x41>`` as its character when it is one (ASCII)."""
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        try:
            value = int(token[3:5], 16)
        except ValueError:
            return None
        return chr(value) if value < 0x80 else None
    return None


def token_text(token: str, byte_level: bool = False, sentencepiece: bool = False) -> str:
    """A token's characters, comparable across tokenizers: byte-level characters decoded, markers removed.

    In a byte-level vocabulary ``Ġ`` is a space and ``Ċ`` a newline, and ``Ã©`` is ``é``; the
    leading space that marks a word start is then dropped, like SentencePiece's ``▁``,
    WordPiece's ``##`` and fastBPE's ``</w>`` (:func:`bare_string`). A byte-level token holding
    part of a character decodes to U+FFFD, so it matches no real token. In a SentencePiece
    vocabulary (``sentencepiece``) only ``▁`` is a marker: its ``Ġabra`` (Maltese) or ``##`` are text.
    """
    if byte_level and token and all(c in BYTE_CHARACTERS for c in token):
        text = bytes(BYTE_CHARACTERS[c] for c in token).decode("utf-8", errors="replace")
        return text[1:] if text.startswith(" ") and len(text) > 1 else text
    fallback = _byte_fallback(token)
    if fallback is not None:
        return fallback
    if sentencepiece:
        return token[1:] if token.startswith(SPACE) and len(token) > 1 else token
    return bare_string(token)


def normalise_tokens(vocab: Sequence[str]) -> list[str]:
    """:func:`token_text` of every entry, the vocabulary's convention (byte-level, SentencePiece) detected once.

    Every initialiser that compares token strings across two vocabularies (overlap, FOCUS's
    shared tokens, WECHSEL's subword vectors) compares these.
    """
    byte_level, sentencepiece = is_byte_level(vocab), is_sentencepiece(vocab)
    return [token_text(token, byte_level, sentencepiece) for token in vocab]
