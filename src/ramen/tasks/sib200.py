"""Zero-shot SIB-200 topic classification (7 topics) with RAMEN's protocol, for every source family.

A sequence-classification head is fine-tuned on the English side with its input table frozen
(English train 701, epoch selected on English dev 99); then the foreign language side's input
table and tokenizer replace the English ones and the foreign test set (204) is scored. One code
path for encoders and decoders: ``AutoModelForSequenceClassification`` pools ``[CLS]`` for BERT
and RoBERTa and the last non-padding token for Llama, Qwen, Mistral and GPT-2, which is why the
padding id is set from the tokenizer in use (the foreign one after the swap).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from torch import nn

from ramen.data.sib200 import CATEGORIES, TopicExample
from ramen.errors import RamenError
from ramen.io import write_tsv
from ramen.modeling.architectures import register_architectures
from ramen.modeling.weights import quiet_transformers
from ramen.tasks.common import ensure_padding, subsample, torch_threads
from ramen.tasks.finetune import FinetuneSettings, Finetuning, save_model_dir, seeded
from ramen.tasks.swap import swap_input_table
from ramen.vocab.tokenizer import load_tokenizer

logger = logging.getLogger(__name__)

TASK = "sib200"
META_NAME = "sib200.json"
RESULT_COLUMNS = ("variant", "lang", "task", "split", "examples", "accuracy", "selected_epoch", "dev_accuracy")


@dataclass
class Sib200Settings(FinetuneSettings):
    """Fine-tuning settings (SIB-200's English train is small: a few epochs of small batches)."""

    SECTION: ClassVar[str] = "tasks.sib200.settings"

    epochs: int = 5
    batch_size: int = 16
    learning_rate: float = 3e-5
    eval_batch_size: int = 64
    max_train_examples: int | None = None
    group_by_length: bool = True  # batches of similar length pad less

    def check(self, need) -> None:
        need(self.max_train_examples is None or self.max_train_examples >= 1, "max_train_examples",
             f"must be >= 1 or null, got {self.max_train_examples}")


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
    with seeded(settings):
        model, tokenizer = load_classifier_model(model_dir)
        if settings.freeze_embeddings:
            model.get_input_embeddings().weight.requires_grad_(False)
        pad_id = tokenizer.pad_token_id
        train = encode(tokenizer, train_examples, settings.max_length)
        dev = encode(tokenizer, dev_examples, settings.max_length)
        labels = torch.tensor([e.label for e in train_examples], dtype=torch.long)
        run = Finetuning(model, settings, train_size=len(train), out_dir=out_dir, checkpoint_dir=checkpoint_dir,
                         checkpoint_every=checkpoint_every, inputs=[model_dir],
                         data=(f"{e.text}\t{e.label}" for e in [*train_examples, *dev_examples]),
                         desc=f"sib200 fine-tune {variant}".strip(), progress=progress)

        def batch_loss(indices):
            logits = model(**collate(train, indices, pad_id)).logits
            return nn.functional.cross_entropy(logits.float(), labels[indices])

        def evaluate_dev(epoch):
            score = accuracy([e.label for e in dev_examples], predict(model, dev, pad_id, settings.eval_batch_size))
            logger.info("epoch %d English dev accuracy %.4f", epoch, score)
            return score, [{"epoch": epoch, "step": run.loop.step, "dev_accuracy": score,
                            "train_loss": run.loop.train_loss}]

        history, best_epoch = run.train([len(ids) for ids in train], batch_loss, evaluate_dev,
                                        group_by_length=settings.group_by_length)
        meta = {"task": TASK, "labels": list(CATEGORIES), "base_model_dir": str(model_dir), "variant": variant,
                "selected_epoch": best_epoch, "selection": "best English dev accuracy",
                "train_examples": len(train), "settings": settings.to_dict(), "dev_history": history}
        run.save(meta, lambda path, meta: save_model_dir(path, model, tokenizer, META_NAME, meta))
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
