"""The rows of an extended vocabulary's new tokens (ramen.vocab.extend), from a registered initialiser.

The initialisers are written for a whole foreign vocabulary; here the foreign vocabulary is the
new tokens alone, in id order, and the English one the source's. Every source row (input, untied
output, bias) is copied unchanged; each new token's rows are the initialiser's row for it:

    mean         the mean of every source row (the registry's ``mean``, not of the token's pieces)
    random       N(0, 1/d^2) draws, zero bias
    overlap      the source row of a token spelled alike without its leading space, else random
    focus        overlap, then FOCUS mixtures (``token_vectors`` of the new tokens)
    wechsel      WECHSEL mixtures (its fastText models, dictionary and settings)
    parallel     alpha @ source rows, alpha = p(e|f) over the new tokens' rows
    monolingual  the same, alpha from aligned subword vectors
    char2subword the module's vector of each new token's characters
    fvt          the mean of the source rows of the token's pieces (FVT)
    weighted_pieces  the pieces' rows weighted toward the last piece; untied output rows and the
                 output bias toward the first
    parallel_fvt alpha's mixture and the pieces' mean, mixed (ramen.initializers.parallel_fvt)
    distill      the pieces' mean, then the input rows fitted so that the source model reads each
                 new token as it reads its pieces (ramen.initializers.distill)

An alpha-based initialiser (parallel, monolingual, parallel_fvt) takes alpha with one row per new token
(``len(record["new_ids"])`` rows, in id order) over the source vocabulary; an alpha over the whole
extended vocabulary (one row per id) is cut to the new tokens' rows. ``scratch`` draws the whole
model anew and does not apply; the registry entry of each initialiser says whether it serves an
extension (``InitializerEntry.vocabularies``). ``fvt``, ``weighted_pieces``, ``parallel_fvt`` and
``distill`` read the new tokens' pieces: the source ids each was merged from (``vocab_extension.json``).

The new output rows follow their own rule (``variants.<name>.output_init``, :data:`OUTPUT_RULES`):

    input         the input rows' rule (an untied source only; a tied one shares the rows)
    mean          the mean of every source output row, bias likewise (Hewitt 2021): each new
                  token's logit is the mean logit, which bounds how much of the source's
                  distribution the new tokens take
    first_piece   the pieces' output rows weighted toward the first piece
    subword_mean  the mean of the pieces' output rows

The output bias follows the output rule. A rule other than ``input`` unties a tied source's head:
the extended output rows are then the source's input rows (copied) and the new output rows.

:func:`initialise_rows` makes the new rows of either vocabulary: the new tokens' here, a replaced
vocabulary's every token's for ramen.pipeline.initialise (whose output rows follow ``input``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ramen.errors import ConfigError
from ramen.initializers import check_init_vocabulary
from ramen.initializers.common import InitResult, Mixture, apply_mixture, initialisation_stats
from ramen.initializers.pieces import extension_pieces, piece_weights, toward_first, uniform
from ramen.modeling.causal import ForeignTables, special_token_ids
from ramen.modeling.sources import SourceParts
from ramen.vocab.tokenizer import ordered_vocab

SETTING = "variants.<variant>.init"
OUTPUT_SETTING = "variants.<variant>.output_init"
# The rules of the new output rows; the schema's enum of variants.<name>.output_init.
OUTPUT_RULES = ("input", "mean", "first_piece", "subword_mean")


def new_tokens(extended_tokenizer, record: Mapping, first: int) -> list[str]:
    """The new tokens' strings in id order, checked against the tokenizer: ids ``first``, ``first`` + 1, ..."""
    ids = [int(index) for index in record.get("new_ids", [])]
    if ids != list(range(first, first + len(ids))):
        # The record (vocab_extension.json) is the extension's: made by vocabulary: extend from another source.
        raise ConfigError("variants.<variant>.vocabulary", f"vocab_extension.json's new ids {ids[:3]}... do not "
                          f"follow the source's {first} tokens",
                          "extend the source's own tokenizer (ramen.vocab.extend.extend_tokenizer)")
    tokens = extended_tokenizer.convert_ids_to_tokens(ids)
    expected = [entry["token"] for entry in record.get("tokens", [])]
    if len(extended_tokenizer) != first + len(ids) or (expected and tokens != expected):
        raise ConfigError("variants.<variant>.vocabulary", f"vocab_extension.json's {len(ids)} new tokens are not "
                          f"those of the extended tokenizer ({len(extended_tokenizer)} tokens)",
                          "use the record saved beside the extended tokenizer")
    return tokens


def new_token_alpha(alpha, new_count: int, total: int, first: int):
    """Alpha over the new tokens' rows: as given when it has one row per new token, cut to them
    when it has one row per id of the extended vocabulary."""
    import scipy.sparse as sp

    if alpha is None:
        return None
    alpha = sp.csr_matrix(alpha)
    if alpha.shape[0] == new_count:
        return alpha
    if alpha.shape[0] == total:
        return alpha[first:]
    raise ConfigError(SETTING, f"alpha has {alpha.shape[0]} rows; the extension has {new_count} new tokens "
                      f"of {total}", "estimate alpha over the new tokens (one row each, in id order)")


def output_rule_mixture(rule: str, pieces, source_rows: int) -> Mixture:
    """How the new output rows are made from the source's under ``rule`` (one of :data:`OUTPUT_RULES`
    but ``input``)."""
    shape = (len(pieces), source_rows)
    if rule == "mean":
        return Mixture(shape=shape, mean_rows=np.ones(len(pieces), dtype=bool))
    weighting = {"first_piece": toward_first, "subword_mean": uniform}[rule]
    return Mixture(shape=shape, weights=piece_weights(pieces, source_rows, weighting))


@dataclass
class NewRows:
    """The rows an initialiser made for a vocabulary's new tokens."""

    embeddings: torch.Tensor  # (n, d) input rows
    output: torch.Tensor | None  # (n, d) output rows; None: tied to the input rows
    bias: torch.Tensor | None  # (n,) output bias; None: the source's output layer has none
    result: InitResult  # the initialiser's result on the input rows, for the statistics
    seconds: float  # the initialiser's wall time on the input rows


def initialise_rows(entry, table: torch.Tensor, source_bias: torch.Tensor | None, foreign_vocab: Sequence[str],
                    source_vocab: Sequence[str], inputs: Mapping, *, seed: int, special_tokens: Sequence[str],
                    output_rows: torch.Tensor | None = None, output_init: str = "input",
                    pieces: Sequence[tuple[int, ...]] | None = None) -> NewRows:
    """The new tokens' input rows, output rows and output bias from the source's rows.

    ``entry`` (a registered initialiser) makes the input rows from ``table`` and ``source_bias``
    (zeros where the source has none), with ``inputs`` as keyword arguments, seeded by ``seed``.
    Given ``output_rows`` (the source's untied output rows, or a tied source's rows whose head an
    extension unties), the new output rows follow ``output_init`` (:data:`OUTPUT_RULES`):
    ``input`` the same rule over the output rows, that is the recorded mixture when the
    initialiser mixes, otherwise the initialiser again (equally seeded); another rule its mixture
    of the source's output rows and bias over the new tokens' ``pieces``.
    """
    if output_init != "input" and (output_rows is None or pieces is None):
        raise ValueError(f"output rule '{output_init}' makes output rows from the source's: pass output_rows and "
                         "pieces")
    bias = source_bias if source_bias is not None else torch.zeros(table.shape[0])

    def initialise(matrix: torch.Tensor) -> InitResult:
        return entry(matrix, bias, foreign_vocab, source_vocab, **inputs,
                     generator=torch.Generator().manual_seed(seed), special_tokens=special_tokens)

    started = time.perf_counter()
    result = initialise(table)
    seconds = time.perf_counter() - started
    new_bias, output = result.bias, None
    if output_rows is not None:
        generator = torch.Generator().manual_seed(seed)
        if output_init != "input":
            output, rule_bias, _ = apply_mixture(output_rule_mixture(output_init, pieces, output_rows.shape[0]),
                                                 output_rows, source_bias, generator=generator)
            new_bias = rule_bias if rule_bias is not None else new_bias
        elif (result.output_mixture or result.mixture) is not None:
            output, _, _ = apply_mixture(result.output_mixture or result.mixture, output_rows, generator=generator)
        else:
            output = initialise(output_rows).embeddings
    return NewRows(result.embeddings, output, None if source_bias is None else new_bias, result, seconds)


def initialise_new_rows(method: str, parts: SourceParts, source_tokenizer, extended_tokenizer, record: Mapping, *,
                        seed: int, inputs: Mapping | None = None, output_init: str = "input",
                        model: nn.Module | None = None) -> tuple[ForeignTables, dict]:
    """The extended tables (input table, untied output rows, output bias, as the source has them)
    and the initialisation statistics of the new rows.

    ``parts``: the source's tables (the causal family's ``source_parts``); ``record``: the
    extension's ``vocab_extension.json``; ``inputs``: the initialiser's loaded inputs and
    settings as keyword arguments (``alpha`` over the new tokens: see the module docstring);
    ``output_init``: the rule of the new output rows (:data:`OUTPUT_RULES`; other than ``input``,
    a tied source's head is untied); ``model``: the source model, for an initialiser that reads it
    (``InitializerEntry.source_model``). The first ``len(source_tokenizer)`` rows of each table are
    the source's, bit for bit. The stats' ``seconds`` is the initialiser's wall time.
    """
    entry = check_init_vocabulary(method, "extend", setting=SETTING)
    if output_init not in OUTPUT_RULES:
        raise ConfigError(OUTPUT_SETTING, f"unknown output rule {output_init!r}",
                          f"valid rules: {', '.join(OUTPUT_RULES)}")
    source_vocab = ordered_vocab(source_tokenizer)
    first = len(source_vocab)
    if parts.input_embeddings.shape[0] < first:
        raise ConfigError("source.model", f"the source model has {parts.input_embeddings.shape[0]} rows, its "
                          f"tokenizer {first} tokens", "use the tokenizer saved with the source model")
    foreign_vocab = new_tokens(extended_tokenizer, record, first)
    total = first + len(foreign_vocab)
    table = parts.input_embeddings[:first].detach()
    bias = parts.output_bias[:first].detach() if parts.output_bias is not None else None
    loaded = dict(inputs or {})
    loaded["alpha"] = new_token_alpha(loaded.get("alpha"), len(foreign_vocab), total, first)
    pieces = extension_pieces(record, foreign_vocab, source_tokenizer)
    if entry.pieces:
        loaded["pieces"] = pieces
    if entry.source_model:
        if model is None:
            raise ValueError(f"initialiser '{method}' reads the source model: pass model")
        loaded.update(model=model, bos_id=special_token_ids(extended_tokenizer).get("bos"))
    untied = not parts.tied or output_init != "input"
    rows = parts.output_rows[:first].detach() if untied else None
    new = initialise_rows(entry, table, bias, foreign_vocab, source_vocab, loaded, seed=seed,
                          special_tokens=list(extended_tokenizer.all_special_tokens), output_rows=rows,
                          output_init=output_init, pieces=pieces)
    tables = ForeignTables(torch.cat([table.float(), new.embeddings.float()]),
                           None if new.output is None else torch.cat([rows.float(), new.output.float()]),
                           None if new.bias is None else torch.cat([bias.float(), new.bias.float()]))
    dim = int(table.shape[1])
    stats = {"method": method, "seed": seed, "tied": not untied, "source_tied": parts.tied,
             "output_init": output_init, "output_bias": parts.output_bias is not None,
             # What untying a tied source's head adds: an output row of its own for every token.
             "untied_head_parameters": total * dim if parts.tied and untied else 0,
             "source_rows": first, "new_rows": len(foreign_vocab), "seconds": new.seconds,
             **initialisation_stats(new.result, loaded["alpha"])}
    return tables, stats
