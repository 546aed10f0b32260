"""Deep biaffine dependency scorer (Dozat & Manning, 2017) over a pretrained encoder.

No part-of-speech input: each word is represented only by the encoder's
output for its subwords (first subword or their mean), and position 0 holds
the representation of the artificial root (the encoder's first token,
``[CLS]``/``<s>``). Two MLPs per role reduce words to dependent and head
views; a biaffine product scores every (dependent, head) arc and, per
relation, every labelled arc.
"""

from __future__ import annotations

import torch
from torch import nn

WORD_POOLINGS = ("first", "mean")


class Biaffine(nn.Module):
    """``x_i^T W_o y_j`` with a bias feature appended to both sides, for ``o`` in outputs."""

    def __init__(self, dim: int, outputs: int = 1):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(outputs, dim + 1, dim + 1))

    @staticmethod
    def _with_bias(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x.new_ones(x.shape[:-1] + (1,))], -1)

    def forward(self, dependents: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """(batch, n, dim) x (batch, n, dim) -> (batch, outputs, n dependents, n heads)."""
        return torch.einsum("bxi,oij,byj->boxy", self._with_bias(dependents), self.weight, self._with_bias(heads))

    def paired(self, dependents: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """Scores of given pairs only: (batch, n, dim) x (batch, n, dim) -> (batch, n, outputs)."""
        dependents, heads = self._with_bias(dependents), self._with_bias(heads)
        outputs = self.weight.shape[0]
        # The outer product of each pair against all outputs' weights is one matrix product,
        # several times faster on a CPU than einsum's contraction path.
        pairs = (dependents.unsqueeze(-1) * heads.unsqueeze(-2)).flatten(-2)
        return pairs @ self.weight.reshape(outputs, -1).T


class Mlp(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, dropout: float):
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim)
        self.activation = nn.LeakyReLU(0.1)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.activation(self.linear(x)))


class BiaffineParser(nn.Module):
    """Encoder + word pooling + biaffine arc and relation scorers."""

    def __init__(self, encoder: nn.Module, relations: int, arc_dim: int = 256, relation_dim: int = 64,
                 dropout: float = 0.33):
        super().__init__()
        hidden = encoder.config.hidden_size
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.arc_dependent = Mlp(hidden, arc_dim, dropout)
        self.arc_head = Mlp(hidden, arc_dim, dropout)
        self.relation_dependent = Mlp(hidden, relation_dim, dropout)
        self.relation_head = Mlp(hidden, relation_dim, dropout)
        self.arc_scorer = Biaffine(arc_dim, 1)
        self.relation_scorer = Biaffine(relation_dim, relations)

    @property
    def pad_token_id(self) -> int:
        pad = getattr(self.encoder.config, "pad_token_id", None)
        return 0 if pad is None else int(pad)

    def word_embeddings(self) -> nn.Embedding:
        return self.encoder.get_input_embeddings()

    def word_vectors(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     pooling: torch.Tensor) -> torch.Tensor:
        """(batch, n, hidden): root + word vectors; ``pooling`` (batch, n, subwords) maps subword states."""
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return torch.bmm(pooling, hidden)

    def score(self, words: torch.Tensor, word_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Arc scores (batch, n, n) over root + words, and the words after dropout.

        ``word_mask`` (batch, n) is False for padding, whose columns get -inf
        so no word attaches to it.
        """
        words = self.dropout(words)
        arcs = self.arc_scorer(self.arc_dependent(words), self.arc_head(words)).squeeze(1)
        return arcs.masked_fill(~word_mask[:, None, :], float("-inf")), words

    def relation_scores(self, words: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """(batch, n, relations): each word's relation scores given its head (``heads`` (batch, n))."""
        head_words = words.gather(1, heads[:, :, None].expand(-1, -1, words.shape[-1]))
        return self.relation_scorer.paired(self.relation_dependent(words), self.relation_head(head_words))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, pooling: torch.Tensor,
                word_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.score(self.word_vectors(input_ids, attention_mask, pooling), word_mask)


def parser_loss(parser: BiaffineParser, arcs: torch.Tensor, words: torch.Tensor, gold_heads: torch.Tensor,
                gold_relations: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each word's head, plus of its relation given the gold head.

    ``gold_heads`` and ``gold_relations`` are (batch, n); row 0 (the root) and
    padding are left out through ``word_mask``.
    """
    dependents = word_mask.clone()
    dependents[:, 0] = False
    arc_loss = nn.functional.cross_entropy(arcs[dependents], gold_heads[dependents])
    relations = parser.relation_scores(words, gold_heads)
    relation_loss = nn.functional.cross_entropy(relations[dependents], gold_relations[dependents])
    return arc_loss + relation_loss
