"""Zero-shot cross-lingual NLI (XNLI), paper §3.4 / §4.1.

The English encoder is fine-tuned on English NLI with its word-embedding
table frozen; it is then evaluated on a foreign language by swapping in that
language's word-embedding table and tokenizer (:mod:`ramen.tasks.swap`).
Everything else (position and token-type embeddings, embedding LayerNorm,
encoder layers, classifier head) is shared between languages, so freezing the
table keeps the English and foreign embeddings in the space the encoder was
adapted to. The classifier and its saved directory: :mod:`ramen.tasks.nli`;
the fine-tuning loop: :mod:`ramen.tasks.finetune`.

Results TSV (:func:`write_results_tsv`), one row per evaluation, columns:

* ``variant`` - model variant name (e.g. ``ramen_fr``, ``source``);
* ``lang`` - language of the evaluated examples;
* ``split`` - ``dev`` or ``test``;
* ``task`` - ``xnli``;
* ``step`` - optimizer updates done when evaluated (empty if not applicable);
* ``epoch`` - epochs done when evaluated (empty if not applicable);
* ``accuracy`` - fraction of correct predictions, 6 decimals;
* ``n`` - number of examples; ``correct`` - number predicted correctly;
* ``selected`` - ``true`` for the dev rows of the epoch kept by model
  selection (best mean dev accuracy), ``false`` for the others, empty for
  rows that are not part of model selection;
* ``train_loss`` - mean training loss of that epoch (dev rows only).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from torch import nn

from ramen.errors import RamenError
from ramen.io import write_tsv
from ramen.tasks.common import subsample, torch_threads, write_table
from ramen.tasks.epochs import read_epochs, select_epoch
from ramen.tasks.finetune import FinetuneSettings, Finetuning, seeded
from ramen.tasks.nli import (
    LABELS,
    META_FORMAT,
    POOLINGS,
    NliClassifier,
    accuracy_report,
    collate,
    encode_pairs,
    evaluate,
    load_classifier,
    predict_encoded,
    read_classifier_info,
    save_classifier,
)
from ramen.tasks.swap import decoder_pad_id, set_word_embeddings, side_table, swap_embeddings
from ramen.vocab.tokenizer import load_tokenizer

logger = logging.getLogger(__name__)

TASK = "xnli"
RESULT_COLUMNS = (
    "variant",
    "lang",
    "split",
    "task",
    "step",
    "epoch",
    "accuracy",
    "n",
    "correct",
    "selected",
    "train_loss",
)


@dataclass
class NliSettings(FinetuneSettings):
    """Fine-tuning settings; defaults follow the paper (§3.3) where it gives them."""

    SECTION: ClassVar[str] = "tasks.xnli.settings"

    pooling: str = "mean"  # all-MiniLM was trained with mean pooling; last: a decoder's last real token
    max_train_examples: int | None = None  # None: all
    max_dev_examples: int | None = None  # the first N of each dev set select the epoch; None: all
    # Batches of similar length pad less; this is what makes CPU training affordable.
    group_by_length: bool = True
    dropout: float | None = None  # None: the encoder config's dropout

    def check(self, need) -> None:
        need(self.pooling in POOLINGS, "pooling", f"must be one of {POOLINGS}, got {self.pooling!r}")
        for name in ("max_train_examples", "max_dev_examples"):
            value = getattr(self, name)
            need(value is None or value >= 1, name, f"must be >= 1 or null, got {value}")
        need(self.dropout is None or 0 <= self.dropout < 1, "dropout", f"must be in [0, 1) or null, got {self.dropout}")


def _same_dir(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def finetune(
    model_dir: str | os.PathLike,
    train_examples: Sequence,
    dev_examples_by_lang: Mapping[str, tuple[str | os.PathLike | None, Sequence]] | None,
    settings: NliSettings | None,
    out_dir: str | os.PathLike,
    log_every: int = 100,
    variant: str = "",
    progress: bool = True,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int = 0,
    keep_epochs: bool = False,
) -> list[dict]:
    """Fine-tune ``model_dir`` on English NLI and save the selected classifier to ``out_dir``.

    ``keep_epochs``: ``out_dir`` holds every epoch's classifier instead (ramen.tasks.epochs), for
    a model shared by every target language, whose epoch each language selects on its dev set.

    With ``checkpoint_dir``, a checkpoint every ``checkpoint_every`` updates and at every epoch's
    end (under a fingerprint of the settings and inputs) lets a killed run resume exactly; they
    are removed once the classifier is saved.

    ``dev_examples_by_lang`` maps a language to ``(embedding_dir, examples)``;
    after each epoch every dev set is evaluated with that directory's word
    embeddings and tokenizer (``None`` or ``model_dir``: the English ones).
    The epoch with the best mean dev accuracy is kept (the last one when there
    are no dev sets). Returns the dev history rows (see the module docstring).
    """
    settings = settings or NliSettings()
    settings.validate()
    model_dir = Path(model_dir)
    dev_examples_by_lang = dict(dev_examples_by_lang or {})
    train_examples = subsample(train_examples, settings.max_train_examples, settings.seed)
    if len(train_examples) == 0:
        raise RamenError("no NLI training examples")

    with seeded(settings):
        classifier = NliClassifier.from_pretrained(model_dir, pooling=settings.pooling, dropout=settings.dropout)
        tokenizer = load_tokenizer(model_dir)
        english = classifier.word_embeddings()
        english_pad = decoder_pad_id(classifier, tokenizer)
        set_word_embeddings(classifier, english, english_pad)
        if settings.freeze_embeddings:
            english.weight.requires_grad_(False)
        token_types = classifier.uses_token_types
        num_labels = classifier.head.out_features
        train = encode_pairs(tokenizer, train_examples, settings.max_length, token_types, num_labels)

        # Foreign tables and tokenised dev sets are prepared once, not every epoch.
        dev_sets = {}
        for lang, (embedding_dir, examples) in dev_examples_by_lang.items():
            examples = examples[: settings.max_dev_examples]
            if len(examples) == 0:
                raise RamenError(f"dev set for language {lang!r} has no examples")
            if embedding_dir is None or _same_dir(embedding_dir, model_dir):
                module, lang_tokenizer, lang_pad = english, tokenizer, english_pad
            else:
                module, lang_tokenizer, lang_pad = side_table(classifier, Path(embedding_dir))
            encoded = encode_pairs(lang_tokenizer, examples, settings.max_length, token_types, num_labels)
            dev_sets[lang] = (module, encoded, lang_pad)

        run = Finetuning(classifier, settings, train_size=len(train), out_dir=out_dir, checkpoint_dir=checkpoint_dir,
                         checkpoint_every=checkpoint_every, keep_epochs=keep_epochs,
                         inputs=[model_dir, *[embedding for embedding, _ in dev_examples_by_lang.values()
                                              if embedding is not None]],
                         data=(f"{example.premise}\t{example.hypothesis}\t{example.label}"
                               for example in train_examples),
                         desc=f"xnli fine-tune {variant}".strip(), progress=progress)
        labels = torch.tensor(train.labels, dtype=torch.long)
        pad_id = classifier.pad_token_id

        def batch_loss(indices):
            logits = classifier(**collate(train, indices, pad_id))
            return nn.functional.cross_entropy(logits.float(), labels[indices])

        def evaluate_dev(epoch):
            rows, scores = [], []
            for lang, (module, encoded, lang_pad) in dev_sets.items():
                set_word_embeddings(classifier, module, lang_pad)
                try:
                    predictions = predict_encoded(classifier, encoded, settings.eval_batch_size, progress,
                                                  desc=f"dev {lang}")
                finally:
                    set_word_embeddings(classifier, english, english_pad)
                report = accuracy_report(encoded.labels, predictions, LABELS[:num_labels])
                scores.append(report["accuracy"])
                rows.append(results_row(report, variant=variant, lang=lang, split="dev", epoch=epoch,
                                        step=run.loop.step, selected=False, train_loss=run.loop.train_loss))
                logger.info("epoch %d dev %s accuracy %.4f", epoch, lang, report["accuracy"])
            return (sum(scores) / len(scores) if scores else None), rows

        def save(path, meta):
            save_classifier(classifier, tokenizer, path, meta)

        def save_epoch(path, epoch):
            save(path, {"format": META_FORMAT, "task": TASK, "base_model_dir": str(model_dir), "variant": variant,
                        "selected_epoch": epoch, "settings": settings.to_dict()})

        history, best_epoch = run.train(train.lengths, batch_loss, evaluate_dev, save_epoch=save_epoch,
                                        group_by_length=settings.group_by_length, log_every=log_every)
        meta = {
            "format": META_FORMAT,
            "task": TASK,
            "labels": list(LABELS[:num_labels]),
            "pooling": classifier.pooling,
            "dropout": classifier.dropout_p,
            "encoder_options": getattr(classifier, "encoder_options", {}),
            "base_model_dir": str(model_dir),
            "variant": variant,
            "selected_epoch": best_epoch,
            "selection": "best mean dev accuracy over: " + (", ".join(dev_sets) or "none (last epoch)"),
            "train_examples": len(train),
            "total_steps": run.total_steps,
            "settings": settings.to_dict(),
            "dev_history": history,
        }
        run.save(meta, save, shared=("task", "base_model_dir", "variant", "train_examples", "total_steps", "settings"))
    return history


# --------------------------------------------------------------------------- evaluation

def evaluate_zero_shot(
    classifier_dir: str | os.PathLike,
    embedding_dir: str | os.PathLike | None,
    examples: Sequence,
    batch_size: int = 128,
    max_length: int | None = None,
    threads: int | None = None,
    progress: bool = False,
    keep_predictions: bool = False,
) -> dict:
    """Evaluate a saved classifier on ``examples`` with ``embedding_dir``'s embeddings and tokenizer.

    ``embedding_dir`` None evaluates with the English embeddings saved in the
    classifier. ``max_length`` None uses the fine-tuning setting.
    """
    with torch_threads(threads):
        meta = read_classifier_info(classifier_dir)
        if max_length is None:
            max_length = int(meta.get("settings", {}).get("max_length", 128))
        classifier = load_classifier(classifier_dir)
        if embedding_dir is None:
            tokenizer = load_tokenizer(classifier_dir)
            set_word_embeddings(classifier, classifier.word_embeddings(), decoder_pad_id(classifier, tokenizer))
        else:
            tokenizer = swap_embeddings(classifier, embedding_dir)
        return evaluate(classifier, tokenizer, examples, batch_size, max_length, progress, keep_predictions)


PREDICTION_COLUMNS = ("lang", "premise", "hypothesis", "gold", "predicted")


def prediction_rows(lang: str, examples: Sequence, predicted: Sequence[int]) -> list[dict]:
    """One row per pair: the language, the pair, the gold and the predicted label names."""
    if len(examples) != len(predicted):
        raise ValueError(f"{len(examples)} pairs but {len(predicted)} predictions")
    return [{"lang": lang, "premise": example.premise, "hypothesis": example.hypothesis,
             "gold": LABELS[example.label], "predicted": LABELS[label]}
            for example, label in zip(examples, predicted)]


def write_predictions_tsv(path: str | os.PathLike, rows: Iterable[Mapping]) -> int:
    """Per-pair predictions as a TSV (PREDICTION_COLUMNS), written atomically."""
    return write_tsv(path, rows, PREDICTION_COLUMNS)


def select_and_test(run_dir: str | os.PathLike, embedding_dir: str | os.PathLike | None, dev_examples: Sequence,
                    tests: Sequence[tuple[str, str | os.PathLike | None, Sequence]], *, variant: str, lang: str,
                    batch_size: int = 128, threads: int | None = None) -> tuple[list[dict], list[dict]]:
    """One target language's result from a fine-tuning shared by every language (``finetune`` with
    ``keep_epochs``): the epoch whose classifier is most accurate on ``lang``'s dev set (its first
    ``max_dev_examples`` pairs, as in a run that selects while it trains), then every test set of
    ``tests`` ((lang, embedding_dir, examples)) with it. Returns the result rows (the dev rows of
    every epoch, then one test row each) and the prediction rows."""
    dev = list(dev_examples)[: read_epochs(run_dir)["settings"].get("max_dev_examples")]

    def score(classifier_dir):
        report = evaluate_zero_shot(classifier_dir, embedding_dir, dev, batch_size=batch_size, threads=threads)
        logger.info("%s dev %s accuracy %.4f", classifier_dir.name, lang, report["accuracy"])
        return report["accuracy"], results_row(report, variant=variant, lang=lang, split="dev")

    classifier_dir, rows = select_epoch(run_dir, score)
    selected = next(row["epoch"] for row in rows if row["selected"])
    predictions = []
    for test_lang, test_embeddings, examples in tests:
        report = evaluate_zero_shot(classifier_dir, test_embeddings, examples, batch_size=batch_size, threads=threads,
                                    keep_predictions=True)
        predictions += prediction_rows(test_lang, examples, report.pop("predicted"))
        rows.append(results_row(report, variant=variant, lang=test_lang, split="test", epoch=selected))
    return rows, predictions


def finetune_and_test(
    english_dir: str | os.PathLike,
    foreign_dir: str | os.PathLike,
    train_examples: Sequence,
    dev_examples: Sequence,
    test_examples: Sequence,
    settings: NliSettings,
    lang: str,
    workdir: str | os.PathLike,
) -> dict:
    """Zero-shot XNLI of one bilingual model: fine-tune on English, select on the target dev set,
    test on the target; the classifier is written under ``workdir`` (a scratch directory).

    Returns the target test accuracy, its size and the selected epoch (`epoch`): one point of the Figure 2
    curve when called on each kept training checkpoint.
    """
    classifier = Path(workdir) / "classifier"
    finetune(english_dir, train_examples, {lang: (foreign_dir, dev_examples)}, settings, classifier, progress=False)
    selected_epoch = read_classifier_info(classifier).get("selected_epoch")
    report = evaluate_zero_shot(classifier, foreign_dir, test_examples, batch_size=settings.eval_batch_size,
                                threads=settings.threads)
    return {"accuracy": report["accuracy"], "n": report["n"], "epoch": selected_epoch}


# --------------------------------------------------------------------------- results


def results_row(
    report: Mapping,
    *,
    variant: str,
    lang: str,
    split: str,
    epoch: int | None = None,
    step: int | None = None,
    selected: bool | None = None,
    train_loss: float | None = None,
) -> dict:
    """One results-TSV row from an :func:`accuracy_report` dict."""
    return {
        "variant": variant,
        "lang": lang,
        "split": split,
        "task": TASK,
        "step": step,
        "epoch": epoch,
        "accuracy": report["accuracy"],
        "n": report["n"],
        "correct": report["correct"],
        "selected": selected,
        "train_loss": train_loss,
    }


def write_results_tsv(path: str | os.PathLike, rows: Iterable[Mapping]) -> int:
    """The XNLI results table (RESULT_COLUMNS), written atomically."""
    return write_table(path, rows, RESULT_COLUMNS)
