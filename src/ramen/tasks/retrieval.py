"""Tatoeba-style sentence retrieval between the source language and a target: a cheap zero-shot check.

Each sentence is the mean of one layer's hidden states over its tokens
(padding excluded), encoded by its own language side of a model (English side
for English, target side for the target); an encoder or a decoder (its
transformer stack, loaded from the causal-LM directory), alike. For every source sentence the most
cosine-similar target sentence is retrieved, and vice versa; accuracy is the
share whose neighbour is the translation (line ``i`` of the other file).
No training is involved, so it can score any exported checkpoint.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tqdm import tqdm

from ramen.errors import ConfigError, InputFormatError
from ramen.io import read_lines
from ramen.tasks.common import load_encoder, torch_threads, write_table
from ramen.vocab.tokenizer import load_tokenizer

RESULT_COLUMNS = ("variant", "lang", "task", "step", "layer", "pairs", "source_to_target", "target_to_source")


@dataclass
class RetrievalSettings:
    layer: int = -1  # hidden layer to pool: -1 the last, 0 the embedding output
    max_length: int = 64
    batch_size: int = 64
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.max_length < 4:
            raise ConfigError("tasks.retrieval.settings.max_length", f"must be >= 4, got {self.max_length}")
        if self.batch_size < 1:
            raise ConfigError("tasks.retrieval.settings.batch_size", f"must be >= 1, got {self.batch_size}")


def read_pairs(source_path: str | os.PathLike, target_path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Line-aligned sentences; unequal lengths or an empty line are an error naming the file."""
    source, target = list(read_lines(source_path)), list(read_lines(target_path))
    if len(source) != len(target):
        raise InputFormatError(target_path, None, f"{len(target)} lines but {source_path} has {len(source)}",
                               "retrieval pairs must be line-aligned translations")
    for path, lines in ((source_path, source), (target_path, target)):
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                raise InputFormatError(path, number, "empty sentence")
    return source, target


def embed(model_dir: str | os.PathLike, sentences: Sequence[str], settings: RetrievalSettings,
          progress: bool = False) -> torch.Tensor:
    """Unit-length mean-pooled hidden states of ``settings.layer``, one row per sentence."""
    encoder, _ = load_encoder(model_dir)
    tokenizer = load_tokenizer(model_dir)
    # A decoder's tokenizer may pad on the left or not at all; right padding keeps the real tokens'
    # positions, and the padded positions are excluded from the mean anyway.
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    encoder.eval()
    layers = encoder.config.num_hidden_layers
    if not -layers - 1 <= settings.layer <= layers:
        raise ConfigError("tasks.retrieval.settings.layer", f"{settings.layer} is not a layer of a "
                          f"{layers}-layer encoder", f"use -{layers + 1}..{layers}")
    # Tokenized once; batches of sentences of similar length pad little, and the rows go back to input order.
    encoded = tokenizer(list(sentences), truncation=True, max_length=settings.max_length,
                        return_attention_mask=False, return_token_type_ids=False)["input_ids"]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    chunks = []
    with torch.inference_mode():
        for start in tqdm(range(0, len(order), settings.batch_size), desc="embed", disable=not progress):
            batch = tokenizer.pad({"input_ids": [encoded[i] for i in order[start:start + settings.batch_size]]},
                                  return_tensors="pt")
            output = encoder(**batch, output_hidden_states=True)
            hidden = output.hidden_states[settings.layer]
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            chunks.append(torch.nn.functional.normalize(pooled, dim=-1))
    in_order = torch.cat(chunks)
    vectors = torch.empty_like(in_order)
    vectors[order] = in_order
    return vectors


def retrieval_accuracy(source: torch.Tensor, target: torch.Tensor, chunk: int = 4096) -> tuple[float, float]:
    """(source -> target, target -> source) nearest-neighbour accuracy of unit vectors, row i <-> row i."""
    if source.shape != target.shape or source.shape[0] == 0:
        raise ValueError(f"need two equal, non-empty sets of vectors, got {tuple(source.shape)} and "
                         f"{tuple(target.shape)}")

    def accuracy(queries: torch.Tensor, keys: torch.Tensor) -> float:
        correct = 0
        for start in range(0, len(queries), chunk):
            best = (queries[start:start + chunk] @ keys.T).argmax(1)
            correct += int((best == torch.arange(start, start + len(best))).sum())
        return correct / len(queries)

    return accuracy(source, target), accuracy(target, source)


def evaluate_retrieval(source_dir: str | os.PathLike, target_dir: str | os.PathLike, source_sentences: Sequence[str],
                       target_sentences: Sequence[str], settings: RetrievalSettings) -> dict:
    with torch_threads(settings.threads):
        source = embed(source_dir, source_sentences, settings)
        target = embed(target_dir, target_sentences, settings)
    forward, backward = retrieval_accuracy(source, target)
    return {"pairs": len(source_sentences), "layer": settings.layer, "source_to_target": forward,
            "target_to_source": backward}


def write_results(path: str | os.PathLike, rows) -> int:
    return write_table(path, rows, RESULT_COLUMNS)
