"""The NLI classifier of XNLI and noisy XNLI: an encoder (or a causal LM's body) with a pooling
and a linear head over the NLI labels, sentence pairs tokenised once, evaluation and the saved
classifier directory.

The code uses only ``AutoModel``, ``get_input_embeddings`` and ``set_input_embeddings``, so BERT
and RoBERTa encoders and causal LMs (Llama, Qwen, GPT-2, ...) all work. A causal LM refuses
``cls`` pooling: its first token sees nothing after it (``last`` pools the last real token, as
``AutoModelForSequenceClassification`` does for decoders).

Saved classifier directory (:func:`save_classifier`), written atomically:

* ``classifier.safetensors`` - weights of the whole :class:`NliClassifier`
  (encoder with the English word embeddings, plus the head);
* ``config.json`` - the encoder config, so loading needs no other directory;
* tokenizer files of the English model (``AutoTokenizer.from_pretrained(out_dir)``);
* ``nli_classifier.json`` - label names, pooling, settings, base model
  directory, selected epoch and the dev history.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from ramen.errors import ConfigError, RamenError
from ramen.modeling.architectures import register_architectures
from ramen.tasks.common import encoder_from_config, load_encoder
from ramen.tasks.finetune import read_model_meta, save_model_dir
from ramen.tasks.swap import is_causal

logger = logging.getLogger(__name__)

# Same order as ramen.data.nli_data.LABELS; the index is the class id of the head.
LABELS = ("entailment", "neutral", "contradiction")
WEIGHTS_NAME = "classifier.safetensors"
META_NAME = "nli_classifier.json"
META_FORMAT = 1
POOLINGS = ("mean", "cls", "last")


# --------------------------------------------------------------------------- model

class NliClassifier(nn.Module):
    """Encoder + pooling + dropout + linear head over the NLI labels."""

    def __init__(
        self,
        encoder: nn.Module,
        num_labels: int = len(LABELS),
        pooling: str = "mean",
        dropout: float | None = None,
    ):
        super().__init__()
        if pooling not in POOLINGS:
            raise ConfigError("tasks.xnli.settings.pooling", f"must be one of {POOLINGS}, got {pooling!r}")
        config = encoder.config
        if dropout is None:
            dropout = getattr(config, "classifier_dropout", None)
        if dropout is None:
            dropout = getattr(config, "hidden_dropout_prob", 0.1)
        self.encoder = encoder
        self.causal = is_causal(config)
        if self.causal and pooling == "cls":
            raise ConfigError("tasks.xnli.settings.pooling", f"'cls' pools the first token, which the causal "
                              f"LM {config.model_type} computes without seeing the rest of the pair", "use mean or last")
        self.pooling = pooling
        self.dropout_p = float(dropout)
        self.dropout = nn.Dropout(self.dropout_p)
        self.head = nn.Linear(config.hidden_size, num_labels)
        std = getattr(config, "initializer_range", 0.02)
        nn.init.normal_(self.head.weight, mean=0.0, std=std)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | os.PathLike,
        num_labels: int = len(LABELS),
        pooling: str = "mean",
        dropout: float | None = None,
    ) -> NliClassifier:
        encoder, options = load_encoder(model_dir)
        classifier = cls(encoder, num_labels=num_labels, pooling=pooling, dropout=dropout)
        classifier.encoder_options = options
        return classifier

    @property
    def uses_token_types(self) -> bool:
        """BERT-style encoders distinguish premise and hypothesis by token type."""
        return (getattr(self.encoder.config, "type_vocab_size", 0) or 0) > 1

    @property
    def pad_token_id(self) -> int:
        # RoBERTa derives position ids from this id, so padding must use it; a causal LM's follows
        # the tokenizer of the installed table (set_word_embeddings).
        pad = getattr(self.encoder.config, "pad_token_id", None)
        return 0 if pad is None else int(pad)

    def word_embeddings(self) -> nn.Embedding:
        return self.encoder.get_input_embeddings()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        hidden = self.encoder(**inputs).last_hidden_state
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        elif self.pooling == "last":  # batches are right-padded (collate)
            last = attention_mask.sum(1).clamp(min=1) - 1
            pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(self.dropout(pooled))


# --------------------------------------------------------------------------- data


@dataclass
class EncodedPairs:
    """Tokenised premise/hypothesis pairs, unpadded."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    labels: list[int]

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> list[int]:
        return [len(ids) for ids in self.input_ids]


def label_of(example, index: int, num_labels: int) -> int:
    label = example.label
    try:
        value = int(label)
    except (TypeError, ValueError):
        value = -1
    if value != label or not 0 <= value < num_labels:
        raise RamenError(
            f"NLI example {index}: label {label!r} is not a class id "
            f"0..{num_labels - 1} ({', '.join(LABELS)})"
        )
    return value


def encode_pairs(
    tokenizer,
    examples: Sequence,
    max_length: int = 128,
    token_types: bool = True,
    num_labels: int = len(LABELS),
    chunk_size: int = 4096,
) -> EncodedPairs:
    """Tokenise examples (objects with .premise, .hypothesis, .label) once, unpadded."""
    input_ids: list[list[int]] = []
    types: list[list[int]] | None = [] if token_types else None
    labels = [label_of(example, i, num_labels) for i, example in enumerate(examples)]
    for start in range(0, len(examples), chunk_size):
        chunk = examples[start : start + chunk_size]
        encoded = tokenizer(
            [e.premise for e in chunk],
            [e.hypothesis for e in chunk],
            truncation=True,
            max_length=max_length,
            return_attention_mask=False,
            return_token_type_ids=token_types,
        )
        input_ids.extend(encoded["input_ids"])
        if types is not None:
            types.extend(encoded["token_type_ids"])
    if types and not any(1 in row for row in types):
        # A tokenizer without pair type ids would silently feed the hypothesis as segment A.
        logger.warning(
            "%s: tokenizer gives no segment-B token types for sentence pairs",
            getattr(tokenizer, "name_or_path", "tokenizer"),
        )
    return EncodedPairs(input_ids, types, labels)


def collate(encoded: EncodedPairs, indices: Sequence[int], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad the selected pairs to the longest of them (dynamic padding)."""
    width = max(len(encoded.input_ids[i]) for i in indices)
    ids = torch.full((len(indices), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(indices), width), dtype=torch.long)
    types = None
    if encoded.token_type_ids is not None:
        types = torch.zeros((len(indices), width), dtype=torch.long)
    for row, i in enumerate(indices):
        seq = encoded.input_ids[i]
        ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = 1
        if types is not None:
            types[row, : len(seq)] = torch.tensor(encoded.token_type_ids[i], dtype=torch.long)
    batch = {"input_ids": ids, "attention_mask": mask}
    if types is not None:
        batch["token_type_ids"] = types
    return batch


# --------------------------------------------------------------------------- evaluation


def accuracy_report(
    gold: Sequence[int], predicted: Sequence[int], labels: Sequence[str] = LABELS
) -> dict:
    """Accuracy, counts, per-label accuracy and confusion (rows gold, columns predicted).

    Accuracies over zero examples are None (undefined), not 0.
    """
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold labels but {len(predicted)} predictions")
    k = len(labels)
    confusion = [[0] * k for _ in range(k)]
    for g, p in zip(gold, predicted):
        confusion[g][p] += 1
    correct = sum(confusion[i][i] for i in range(k))
    per_label = {}
    for i, name in enumerate(labels):
        total = sum(confusion[i])
        per_label[name] = {
            "n": total,
            "correct": confusion[i][i],
            "accuracy": confusion[i][i] / total if total else None,
        }
    n = len(gold)
    return {
        "accuracy": correct / n if n else None,
        "n": n,
        "correct": correct,
        "per_label": per_label,
        "confusion": confusion,
        "labels": list(labels),
    }


def predict_encoded(
    classifier: NliClassifier,
    encoded: EncodedPairs,
    batch_size: int = 128,
    progress: bool = False,
    desc: str = "evaluate",
) -> list[int]:
    """Predicted class ids, in the order of ``encoded``."""
    # Longest first: batches of similar length pad little, and a batch too big fails at once.
    order = sorted(range(len(encoded)), key=lambda i: len(encoded.input_ids[i]), reverse=True)
    predictions = [0] * len(encoded)
    was_training = classifier.training
    classifier.eval()
    try:
        with torch.inference_mode(), tqdm(
            total=len(order), desc=desc, unit="pair", disable=not progress, leave=False
        ) as bar:
            for start in range(0, len(order), batch_size):
                indices = order[start : start + batch_size]
                logits = classifier(**collate(encoded, indices, classifier.pad_token_id))
                for i, p in zip(indices, logits.argmax(-1).tolist()):
                    predictions[i] = p
                bar.update(len(indices))
    finally:
        classifier.train(was_training)
    return predictions


def evaluate(
    classifier: NliClassifier,
    tokenizer,
    examples: Sequence,
    batch_size: int = 128,
    max_length: int = 128,
    progress: bool = False,
    keep_predictions: bool = False,
) -> dict:
    """Accuracy of ``classifier`` on ``examples`` tokenised with ``tokenizer``.

    The tokenizer must be the one of the word embeddings currently installed.
    Returns :func:`accuracy_report`'s dict, with the predicted label ids under
    ``predicted`` when ``keep_predictions``.
    """
    if len(examples) == 0:
        raise RamenError("no NLI examples to evaluate")
    num_labels = classifier.head.out_features
    encoded = encode_pairs(tokenizer, examples, max_length, classifier.uses_token_types, num_labels)
    predictions = predict_encoded(classifier, encoded, batch_size, progress)
    report = accuracy_report(encoded.labels, predictions, LABELS[:num_labels])
    if keep_predictions:
        report["predicted"] = predictions
    return report


# --------------------------------------------------------------------------- save / load


def save_classifier(
    classifier: NliClassifier, tokenizer, out_dir: str | os.PathLike, meta: Mapping
) -> None:
    """Write weights, encoder config, tokenizer and metadata to ``out_dir`` atomically."""
    meta = dict(meta)
    meta.setdefault("format", META_FORMAT)
    meta.setdefault("labels", list(LABELS[: classifier.head.out_features]))
    meta.setdefault("pooling", classifier.pooling)
    meta.setdefault("dropout", classifier.dropout_p)
    meta.setdefault("encoder_options", getattr(classifier, "encoder_options", {}))
    save_model_dir(out_dir, classifier, tokenizer, META_NAME, meta, weights_name=WEIGHTS_NAME)


def read_classifier_info(out_dir: str | os.PathLike) -> dict:
    """The metadata JSON of a saved classifier."""
    return read_model_meta(out_dir, META_NAME, META_FORMAT, "NLI classifier")


def load_classifier(out_dir: str | os.PathLike) -> NliClassifier:
    """Rebuild a saved classifier (in eval mode) from ``out_dir`` alone."""
    from safetensors.torch import load_model
    from transformers import AutoConfig

    out_dir = Path(out_dir)
    meta = read_classifier_info(out_dir)
    register_architectures()
    config = AutoConfig.from_pretrained(out_dir)
    options = meta.get("encoder_options", {})
    encoder = encoder_from_config(config, options)
    classifier = NliClassifier(
        encoder, num_labels=len(meta["labels"]), pooling=meta["pooling"], dropout=meta["dropout"]
    )
    classifier.encoder_options = options
    load_model(classifier, str(out_dir / WEIGHTS_NAME), strict=True)
    classifier.eval()
    return classifier


