"""Definitions every initialiser shares: the result type, the common signature, random rows,
special-token copying, the report's statistics and word-boundary markers."""


from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch


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


class Initializer(Protocol):
    def __call__(
        self,
        source_embeddings: torch.Tensor,
        source_bias: torch.Tensor,
        foreign_vocab: list[str],
        source_vocab: list[str],
        *,
        alpha,
        generator: torch.Generator,
        special_tokens: Sequence[str] | None = None,
    ) -> InitResult: ...


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
        return stats
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
    return stats


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
