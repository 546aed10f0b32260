"""Zero-shot SIB-200 topic classification (7 topics) with RAMEN's protocol, for every source family.

A sequence-classification head is fine-tuned on the English side with its input table frozen
(English train 701, epoch selected on English dev 99); then the foreign language side's input
table and tokenizer replace the English ones and the foreign test set (204) is scored. One code
path for encoders and decoders: ``AutoModelForSequenceClassification`` pools ``[CLS]`` for BERT
and RoBERTa and the last non-padding token for Llama, Qwen, Mistral and GPT-2, which is why the
padding id is set from the tokenizer in use (the foreign one after the swap).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ramen.data.sib200 import CATEGORIES, TopicExample
from ramen.errors import ConfigError, RamenError
from ramen.io import atomic_path, write_tsv
from ramen.modeling.architectures import register_architectures
from ramen.modeling.weights import quiet_transformers
from ramen.tasks.common import ensure_padding, load_encoder, subsample, torch_threads
from ramen.tasks.xnli import train_batches
from ramen.training.core import (
    EpochLoop,
    Updates,
    check_accumulation,
    check_precision,
    decay_groups,
    fingerprint,
    linear_warmup_decay,
    remove_run,
    skip,
)
from ramen.vocab.tokenizer import load_tokenizer

logger = logging.getLogger(__name__)

TASK = "sib200"
META_NAME = "sib200.json"
RESULT_COLUMNS = ("variant", "lang", "task", "split", "examples", "accuracy", "selected_epoch", "dev_accuracy")


@dataclass
class Sib200Settings:
    """Fine-tuning settings (SIB-200's English train is small: a few epochs of small batches)."""

    epochs: int = 5
    batch_size: int = 16
    learning_rate: float = 3e-5
    max_length: int = 128
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    freeze_embeddings: bool = True  # the foreign table must fit the body it is swapped into
    seed: int = 1
    threads: int | None = None
    eval_batch_size: int = 64
    max_train_examples: int | None = None
    max_grad_norm: float = 1.0
    grad_accumulation: int = 1
    precision: str = "fp32"
    group_by_length: bool = True  # batches of similar length pad less

    def __post_init__(self) -> None:
        prefix = "tasks.sib200.settings"

        def need(ok: bool, name: str, problem: str) -> None:
            if not ok:
                raise ConfigError(f"{prefix}.{name}", problem)

        need(self.epochs >= 1, "epochs", f"must be >= 1, got {self.epochs}")
        need(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        need(self.eval_batch_size >= 1, "eval_batch_size", f"must be >= 1, got {self.eval_batch_size}")
        need(self.learning_rate > 0, "learning_rate", f"must be > 0, got {self.learning_rate}")
        need(self.max_length >= 4, "max_length", f"must be >= 4, got {self.max_length}")
        need(0 <= self.warmup_ratio < 1, "warmup_ratio", f"must be in [0, 1), got {self.warmup_ratio}")
        need(self.weight_decay >= 0, "weight_decay", f"must be >= 0, got {self.weight_decay}")
        need(self.max_grad_norm > 0, "max_grad_norm", f"must be > 0, got {self.max_grad_norm}")
        need(self.max_train_examples is None or self.max_train_examples >= 1, "max_train_examples",
             f"must be >= 1 or null, got {self.max_train_examples}")
        check_accumulation(self.grad_accumulation, f"{prefix}.grad_accumulation")
        check_precision(self.precision, f"{prefix}.precision")


# --------------------------------------------------------------------------- model and tables


def load_classifier_model(model_dir: str | os.PathLike, num_labels: int = len(CATEGORIES)):
    """``model_dir``'s body with a new sequence-classification head, and its tokenizer."""
    from transformers import AutoModelForSequenceClassification

    register_architectures()
    tokenizer = ensure_padding(load_tokenizer(model_dir))
    labels = {i: name for i, name in enumerate(CATEGORIES[:num_labels])}
    with quiet_transformers():  # the new head and the unused LM head are expected in the load report
        model = AutoModelForSequenceClassification.from_pretrained(
            model_dir, num_labels=num_labels, id2label=labels, label2id={v: k for k, v in labels.items()},
            dtype=torch.float32)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def swap_input_table(model, side_dir: str | os.PathLike):
    """Put the input table of the language side in ``side_dir`` into ``model``; return its tokenizer.

    Only the input table changes: the body and the head fine-tuned on English stay.
    """
    side_dir = Path(side_dir)
    table = load_encoder(side_dir)[0].get_input_embeddings().weight.detach().clone()
    tokenizer = ensure_padding(load_tokenizer(side_dir))
    current = model.get_input_embeddings().weight
    if table.shape[1] != current.shape[1]:
        raise RamenError(f"{side_dir}: input table of width {table.shape[1]}, the classifier's is {current.shape[1]}; "
                         "was it trained from another source model?")
    if len(tokenizer) > table.shape[0]:
        raise RamenError(f"{side_dir}: the tokenizer has {len(tokenizer)} entries but the table {table.shape[0]} rows")
    model.set_input_embeddings(nn.Embedding.from_pretrained(table.to(current.dtype), freeze=True))
    model.config.pad_token_id = tokenizer.pad_token_id
    return tokenizer


# --------------------------------------------------------------------------- data


def encode(tokenizer, examples: Sequence[TopicExample], max_length: int) -> list[list[int]]:
    """Token ids of each text with the tokenizer's own special tokens (CLS/SEP, BOS), unpadded."""
    return tokenizer([e.text for e in examples], truncation=True, max_length=max_length,
                     return_attention_mask=False)["input_ids"]


def collate(encoded: Sequence[Sequence[int]], indices: Sequence[int], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ids and attention mask of the selected examples."""
    width = max(len(encoded[i]) for i in indices)
    ids = torch.full((len(indices), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(indices), width), dtype=torch.long)
    for row, i in enumerate(indices):
        ids[row, :len(encoded[i])] = torch.tensor(encoded[i], dtype=torch.long)
        mask[row, :len(encoded[i])] = 1
    return {"input_ids": ids, "attention_mask": mask}


def predict(model, encoded: Sequence[Sequence[int]], pad_id: int, batch_size: int) -> list[int]:
    """Predicted class ids, in input order."""
    model.eval()
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    predicted = [0] * len(encoded)
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            indices = order[start:start + batch_size]
            logits = model(**collate(encoded, indices, pad_id)).logits
            for i, label in zip(indices, logits.argmax(-1).tolist()):
                predicted[i] = label
    return predicted


def accuracy(gold: Sequence[int], predicted: Sequence[int]) -> float:
    if len(gold) != len(predicted) or not gold:
        raise ValueError(f"{len(gold)} gold labels and {len(predicted)} predictions")
    return sum(g == p for g, p in zip(gold, predicted)) / len(gold)


# --------------------------------------------------------------------------- fine-tune and test


def finetune(model_dir: str | os.PathLike, train_examples: Sequence[TopicExample],
             dev_examples: Sequence[TopicExample], out_dir: str | os.PathLike,
             settings: Sib200Settings | None = None, *, checkpoint_dir: str | os.PathLike | None = None,
             checkpoint_every: int = 0, variant: str = "", progress: bool = False) -> list[dict]:
    """Fine-tune a classifier on English topics and save the epoch with the best English dev accuracy.

    With ``checkpoint_dir`` a killed run resumes exactly (checkpoints every ``checkpoint_every``
    updates and at each epoch's end, removed once the classifier is saved). Returns the dev history.
    """
    settings = settings or Sib200Settings()
    train_examples = subsample(train_examples, settings.max_train_examples, settings.seed)
    if not train_examples or not dev_examples:
        raise RamenError("SIB-200 fine-tuning needs English train and dev examples")
    with torch_threads(settings.threads):
        torch.manual_seed(settings.seed)
        model, tokenizer = load_classifier_model(model_dir)
        if settings.freeze_embeddings:
            model.get_input_embeddings().weight.requires_grad_(False)
        pad_id = tokenizer.pad_token_id
        train = encode(tokenizer, train_examples, settings.max_length)
        dev = encode(tokenizer, dev_examples, settings.max_length)
        labels = torch.tensor([e.label for e in train_examples], dtype=torch.long)
        steps_per_epoch = math.ceil(len(train) / settings.batch_size)
        total_steps = steps_per_epoch * settings.epochs
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(decay_groups(trainable, settings.weight_decay), lr=settings.learning_rate)
        scheduler = linear_warmup_decay(optimizer, settings.warmup_ratio, total_steps)
        run_dir = None
        if checkpoint_dir is not None:
            run_dir = Path(checkpoint_dir) / fingerprint(
                dataclasses.asdict(settings), [model_dir],
                (f"{e.text}\t{e.label}" for e in [*train_examples, *dev_examples]))
        updates = Updates(optimizer, scheduler=scheduler, max_grad_norm=settings.max_grad_norm,
                          accumulation=settings.grad_accumulation, precision=settings.precision,
                          device=str(next(model.parameters()).device), parameters=trainable)
        generator = torch.Generator().manual_seed(settings.seed)
        loop = EpochLoop(model, updates, epochs=settings.epochs, steps_per_epoch=steps_per_epoch,
                         generator=generator, checkpoint_dir=run_dir, checkpoint_every=checkpoint_every,
                         desc=f"sib200 fine-tune {variant}".strip(), progress=progress)

        def batch_loss(indices):
            logits = model(**collate(train, indices, pad_id)).logits
            return nn.functional.cross_entropy(logits.float(), labels[indices])

        for epoch, done in loop.epochs_to_run():
            model.train()
            batches = train_batches([len(ids) for ids in train], settings.batch_size, generator,
                                    settings.group_by_length)
            for indices in skip(batches, done):
                loop.update(indices, batch_loss)
            score = accuracy([e.label for e in dev_examples], predict(model, dev, pad_id, settings.eval_batch_size))
            logger.info("epoch %d English dev accuracy %.4f", epoch, score)
            loop.end_epoch(score, [{"epoch": epoch, "step": loop.step, "dev_accuracy": score,
                                    "train_loss": loop.train_loss}])
        history, best_epoch = loop.finish()
        meta = {"task": TASK, "labels": list(CATEGORIES), "base_model_dir": str(model_dir), "variant": variant,
                "selected_epoch": best_epoch, "selection": "best English dev accuracy",
                "train_examples": len(train), "settings": dataclasses.asdict(settings), "dev_history": history}
        with atomic_path(out_dir) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            (tmp / META_NAME).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    if run_dir is not None:
        remove_run(run_dir)
    return history


def read_classifier_info(classifier_dir: str | os.PathLike) -> dict:
    path = Path(classifier_dir) / META_NAME
    if not path.is_file():
        raise RamenError(f"{classifier_dir}: not a saved SIB-200 classifier (no {META_NAME})")
    return json.loads(path.read_text(encoding="utf-8"))


def evaluate_zero_shot(classifier_dir: str | os.PathLike, side_dir: str | os.PathLike | None,
                       examples: Sequence[TopicExample], settings: Sib200Settings | None = None) -> dict:
    """Accuracy of the English-trained classifier with ``side_dir``'s input table and tokenizer
    (None: the English ones it was trained with)."""
    from transformers import AutoModelForSequenceClassification

    settings = settings or Sib200Settings()
    meta = read_classifier_info(classifier_dir)
    register_architectures()
    with torch_threads(settings.threads):
        model = AutoModelForSequenceClassification.from_pretrained(classifier_dir, dtype=torch.float32)
        if side_dir is None:
            tokenizer = ensure_padding(load_tokenizer(classifier_dir))
        else:
            tokenizer = swap_input_table(model, side_dir)
        encoded = encode(tokenizer, examples, settings.max_length)
        predicted = predict(model, encoded, tokenizer.pad_token_id, settings.eval_batch_size)
    dev = [row["dev_accuracy"] for row in meta.get("dev_history", []) if row.get("epoch") == meta.get("selected_epoch")]
    return {"examples": len(examples), "accuracy": accuracy([e.label for e in examples], predicted),
            "selected_epoch": meta.get("selected_epoch"), "dev_accuracy": dev[0] if dev else None,
            "predicted": predicted}


def finetune_on_files(english_dir: str | os.PathLike, train_path, dev_path, classifier_dir: str | os.PathLike,
                      settings: Sib200Settings, *, variant: str = "", checkpoint_dir: str | os.PathLike | None = None,
                      checkpoint_every: int = 0) -> list[dict]:
    """:func:`finetune` on SIB-200 train and dev files (the English side; selection needs no foreign data,
    so a model shared by every target language is fine-tuned once)."""
    from ramen.data.sib200 import read_sib200

    return finetune(english_dir, read_sib200(train_path), read_sib200(dev_path), classifier_dir, settings,
                    checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every, variant=variant)


def test_zero_shot(classifier_dir: str | os.PathLike, foreign_dir: str | os.PathLike,
                   test_paths: Mapping[str, str | os.PathLike], settings: Sib200Settings, *, variant: str,
                   source_lang: str) -> list[dict]:
    """Score each test file (``test_paths`` by language) with its side's table: the foreign side's for
    the target, the English one the classifier was trained with for the source language (the
    retention check). Returns result rows."""
    from ramen.data.sib200 import read_sib200

    scores = {}
    for lang, path in test_paths.items():
        side = None if lang == source_lang else foreign_dir
        scores[lang] = evaluate_zero_shot(classifier_dir, side, read_sib200(path), settings)
        logger.info("%s %s test accuracy %.4f", variant, lang, scores[lang]["accuracy"])
    return results_rows(variant, scores)


def results_rows(variant: str, scores: Mapping[str, Mapping]) -> list[dict]:
    """One row per language scored: ``scores`` maps a language to evaluate_zero_shot's result."""
    return [{"variant": variant, "lang": lang, "task": TASK, "split": "test",
             **{k: v for k, v in result.items() if k != "predicted"}} for lang, result in scores.items()]


def write_results(path: str | os.PathLike, rows: Iterable[Mapping]) -> int:
    return write_tsv(path, rows, RESULT_COLUMNS)
