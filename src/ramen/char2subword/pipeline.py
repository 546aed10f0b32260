"""The workflow's char2subword stages on model directories: approximate, pre-train, measure.

A table is the input embedding table of a Hugging Face masked-LM directory (the
English source model, or a transferred language side) with that directory's tokenizer.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from collections.abc import Mapping, Sequence

import torch

from ramen.char2subword.approximate import (
    ApproximationSettings,
    approximable_rows,
    approximate,
    frequent_rows,
    new_module,
    subword_strings,
)
from ramen.char2subword.evaluate import evaluate_module, evaluation_rows, precision_columns, write_tsv
from ramen.char2subword.loss_names import losses_name
from ramen.char2subword.module import load_module, save_module
from ramen.char2subword.pretrain import PretrainSettings, pretrain
from ramen.errors import ConfigError
from ramen.training.checkpoints import fingerprint, remove_run
from ramen.glue import settings_from

logger = logging.getLogger(__name__)


def load_table(model_dir: str | os.PathLike) -> tuple[torch.Tensor, list[str], list[str]]:
    """(embedding table, vocabulary in id order, special tokens) of a model directory."""
    from ramen.modeling.weights import read_word_embeddings
    from ramen.vocab.tokenizer import load_tokenizer, ordered_vocab

    tokenizer = load_tokenizer(model_dir)
    table = read_word_embeddings(model_dir)
    vocab = ordered_vocab(tokenizer)
    if len(vocab) > table.shape[0]:
        raise ConfigError("char2subword", f"{model_dir}: the tokenizer has {len(vocab)} tokens but the table "
                          f"{table.shape[0]} rows")
    return table[: len(vocab)], vocab, list(tokenizer.all_special_tokens)


def table_rows(vocab: Sequence[str], specials: Sequence[str], data_dir, max_rows: int | None):
    """The rows to approximate and measure: all subword rows, or the ``max_rows`` most frequent in ``data_dir``."""
    rows = approximable_rows(vocab, specials)
    if max_rows is None:
        return rows
    from ramen.vocab.encode import load_stream

    return frequent_rows(rows, load_stream(data_dir).ids, len(vocab), max_rows)


def run_approximation(model_dir, data_dir, out_path, metrics_path, *, sizes: Mapping, settings: Mapping,
                      start_module: str | os.PathLike | None = None, stage: str = "approx",
                      checkpoint_dir: str | os.PathLike | None = None, checkpoint_every: int = 0) -> list[dict]:
    """Approximate ``model_dir``'s table, from a fresh module or from ``start_module``; save module and metrics.

    ``data_dir``: the language's encoded corpus, which ranks the subwords when ``max_rows`` is set.
    ``checkpoint_dir``: where a killed run resumes from (under a fingerprint of settings and inputs).
    """
    config = settings_from(ApproximationSettings, dict(settings), "char2subword.approximation")
    table, vocab, specials = load_table(model_dir)
    strings = subword_strings(vocab)
    if start_module:
        module, _ = load_module(start_module)
    else:
        module = new_module(table, strings, sizes, config.seed)
    if checkpoint_dir is not None:
        checkpoint_dir = Path(checkpoint_dir) / fingerprint(
            {"sizes": dict(sizes), "settings": dict(settings), "stage": stage}, [model_dir, *filter(None, [start_module])])
    metrics = approximate(module, table, strings, table_rows(vocab, specials, data_dir, config.max_rows), config,
                          checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every)
    save_module(module, out_path, stage=stage, losses=losses_name(config.losses), table=str(model_dir))
    write_metrics(metrics, metrics_path)
    if checkpoint_dir is not None:
        remove_run(checkpoint_dir)  # the module is the job's output now
    return metrics


def run_pretraining(module_path, model_dir, data_dir, out_path, metrics_path, *, settings: Mapping,
                    checkpoint_dir: str | os.PathLike | None = None, checkpoint_every: int = 0) -> list[dict]:
    config = settings_from(PretrainSettings, dict(settings), "char2subword.pretraining")
    module, meta = load_module(module_path)
    if checkpoint_dir is not None:
        checkpoint_dir = Path(checkpoint_dir) / fingerprint(dict(settings), [module_path, model_dir, data_dir])
    metrics = pretrain(module, model_dir, data_dir, config, checkpoint_dir=checkpoint_dir,
                       checkpoint_every=checkpoint_every)
    save_module(module, out_path, stage="pretrained", losses=meta.get("losses"), table=str(model_dir))
    write_metrics(metrics, metrics_path)
    if checkpoint_dir is not None:
        remove_run(checkpoint_dir)
    return metrics


def write_metrics(rows: Sequence[Mapping], path) -> None:
    columns = list(dict.fromkeys(key for row in rows for key in row)) or ["step"]
    write_tsv(rows, columns, path)


def precision_table(model_dir, data_dir, stages: Sequence[Mapping], *, table_name: str, eval_rows: int | None, max_k: int,
                    seed: int, noise_share: float, operations: Sequence[str], noise_min_length: int,
                    untrained: Mapping | None = None, max_rows: int | None = None) -> list[dict]:
    """Table 2 / Figure 4: one row per ``{"stage", "module"}`` entry, on the same sample of rows.

    ``untrained``: ``{"sizes", "seed"}`` of the approximation runs adds a first row for the module
    they start from, the floor every stage is measured against. ``max_rows``: the approximation's
    limit (the most frequent subwords of ``data_dir``); the sample is drawn from those rows.
    """
    table, vocab, specials = load_table(model_dir)
    strings = subword_strings(vocab)
    rows = evaluation_rows(table_rows(vocab, specials, data_dir, max_rows), eval_rows, seed)
    out = []
    if untrained is not None:
        stages = [{"stage": "untrained", "module": None}, *stages]
    for entry in stages:
        if entry["module"] is None:
            module, meta = new_module(table, strings, untrained["sizes"], untrained["seed"]), {"losses": "-"}
        else:
            module, meta = load_module(entry["module"])
        figures = evaluate_module(module, table, strings, rows, max_k=max_k, noise_seed=seed, operations=operations,
                                  noise_min_length=noise_min_length)
        out.append({"table": table_name, "stage": entry["stage"], "losses": meta.get("losses"),
                    "noise_share": noise_share, **figures})
        logger.info("%s %s: acc %.3f, P@1 %.3f, P@%d %.3f, AP %.3f", table_name, entry["stage"], figures["acc"],
                    figures["p@1"], max_k, figures[f"p@{max_k}"], figures["ap"])
    return out


def write_precision_table(rows: Sequence[Mapping], path, max_k: int) -> None:
    write_tsv(rows, precision_columns(max_k), path)
