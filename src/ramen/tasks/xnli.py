"""Zero-shot cross-lingual NLI (XNLI), paper §3.4 / §4.1.

The English encoder is fine-tuned on English NLI with its word-embedding
table frozen; it is then evaluated on a foreign language by swapping in that
language's word-embedding table and tokenizer. Everything else (position and
token-type embeddings, embedding LayerNorm, encoder layers, classifier head)
is shared between languages, so freezing the table keeps the English and
foreign embeddings in the space the encoder was adapted to.

Each language side of a transferred model is a standard Hugging Face
directory (``AutoTokenizer`` / ``AutoModelForMaskedLM`` or ``AutoModelForCausalLM``).
The code uses only ``AutoModel``, ``get_input_embeddings`` and
``set_input_embeddings``, so BERT and RoBERTa encoders and causal LMs (Llama,
Qwen, GPT-2, ...) all work. A causal LM pads with the pad id of the tokenizer
in use (its EOS when it has none: a foreign vocabulary numbers it differently
and may have fewer rows than the English id), and refuses ``cls`` pooling: its
first token sees nothing after it (``last`` pools the last real token, as
``AutoModelForSequenceClassification`` does for decoders).

Saved classifier directory (``finetune(..., out_dir)``), written atomically:

* ``classifier.safetensors`` - weights of the whole :class:`NliClassifier`
  (encoder with the English word embeddings, plus the head);
* ``config.json`` - the encoder config, so loading needs no other directory;
* tokenizer files of the English model (``AutoTokenizer.from_pretrained(out_dir)``);
* ``nli_classifier.json`` - label names, pooling, settings, base model
  directory, selected epoch and the dev history.

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

import dataclasses
import json
import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from ramen.modeling.architectures import register_architectures
from ramen.families import FAMILIES, recognise
from ramen.modeling.weights import read_word_embeddings
from ramen.errors import ConfigError, RamenError
from ramen.io import atomic_path, write_tsv
from ramen.tasks.epochs import EpochKeeper, read_epochs, select_epoch
from ramen.tasks.common import (
    encoder_from_config,
    ensure_padding,
    load_encoder,
    subsample,
    torch_threads,
    write_table,
)
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

# Same order as ramen.data.nli_data.LABELS; the index is the class id of the head.
LABELS = ("entailment", "neutral", "contradiction")
TASK = "xnli"
WEIGHTS_NAME = "classifier.safetensors"
META_NAME = "nli_classifier.json"
META_FORMAT = 1
POOLINGS = ("mean", "cls", "last")
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


# --------------------------------------------------------------------------- settings


@dataclass
class NliSettings:
    """Fine-tuning settings; defaults follow the paper (§3.3) where it gives them."""

    epochs: int = 4
    batch_size: int = 32
    learning_rate: float = 1e-5
    max_length: int = 128
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    freeze_embeddings: bool = True
    pooling: str = "mean"  # all-MiniLM was trained with mean pooling; last: a decoder's last real token
    seed: int = 1
    threads: int | None = None  # None: leave torch's default
    eval_batch_size: int = 128
    max_train_examples: int | None = None  # None: all
    max_dev_examples: int | None = None  # the first N of each dev set select the epoch; None: all
    max_grad_norm: float = 1.0
    # Batches of similar length pad less; this is what makes CPU training affordable.
    group_by_length: bool = True
    dropout: float | None = None  # None: the encoder config's dropout
    grad_accumulation: int = 1  # micro-batches per batch: the same updates in less memory
    precision: str = "fp32"  # or bf16/fp16 autocast (fp16 with loss scaling), auto: bf16 on a GPU that has it

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, prefix: str = "tasks.xnli.settings") -> None:
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
        need(self.pooling in POOLINGS, "pooling", f"must be one of {POOLINGS}, got {self.pooling!r}")
        need(self.threads is None or self.threads >= 1, "threads", f"must be >= 1, got {self.threads}")
        need(
            self.max_train_examples is None or self.max_train_examples >= 1,
            "max_train_examples",
            f"must be >= 1 or null, got {self.max_train_examples}",
        )
        need(
            self.max_dev_examples is None or self.max_dev_examples >= 1,
            "max_dev_examples",
            f"must be >= 1 or null, got {self.max_dev_examples}",
        )
        need(self.max_grad_norm > 0, "max_grad_norm", f"must be > 0, got {self.max_grad_norm}")
        check_accumulation(self.grad_accumulation, f"{prefix}.grad_accumulation")
        check_precision(self.precision, f"{prefix}.precision")
        need(
            self.dropout is None or 0 <= self.dropout < 1,
            "dropout",
            f"must be in [0, 1) or null, got {self.dropout}",
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
            raise ConfigError("xnli.pooling", f"must be one of {POOLINGS}, got {pooling!r}")
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


# --------------------------------------------------------------------------- embeddings


def _word_embedding_name(encoder: nn.Module) -> str:
    weight = encoder.get_input_embeddings().weight
    for name, param in encoder.named_parameters(remove_duplicate=False):
        if param is weight:
            return name
    raise RamenError(f"{type(encoder).__name__}: input embeddings are not a parameter of the encoder")


def is_causal(config) -> bool:
    """Whether a language side's config is of a family whose sides read left to right (its entry in
    ramen.families says)."""
    try:
        return FAMILIES[recognise(config.to_dict())].causal
    except ConfigError:  # a bare encoder of a type no LM mapping knows: not a decoder
        return False


def decoder_pad_id(classifier: NliClassifier, tokenizer) -> int | None:
    """The pad id a causal LM's batches use with ``tokenizer``'s table; None for an encoder."""
    return ensure_padding(tokenizer).pad_token_id if runs_causal_lm(classifier) else None


def runs_causal_lm(model: nn.Module) -> bool:
    """Whether ``model`` (an NLI classifier, or the UD parser that shares its table swap) runs a causal
    LM; the parser has no ``causal`` flag and always runs an encoder."""
    return getattr(model, "causal", False)


def set_word_embeddings(classifier: NliClassifier, module: nn.Embedding, pad_id: int | None = None) -> None:
    """Install ``module`` as the encoder's input word embeddings (``pad_id``: a causal LM's, from
    :func:`decoder_pad_id` for the tokenizer of ``module``)."""
    classifier.encoder.set_input_embeddings(module)
    # Keep the config truthful so a saved classifier reloads with the right shape.
    classifier.encoder.config.vocab_size = module.num_embeddings
    if pad_id is not None:
        classifier.encoder.config.pad_token_id = pad_id


def _embedding_module(classifier: NliClassifier, embedding_dir: Path) -> nn.Embedding:
    old = classifier.word_embeddings()
    weight = read_word_embeddings(embedding_dir, _word_embedding_name(classifier.encoder))
    if weight.ndim != 2 or weight.shape[1] != old.embedding_dim:
        width = weight.shape[-1] if weight.ndim else "?"
        raise RamenError(
            f"{embedding_dir}: word embeddings have width {width} but the classifier's encoder "
            f"has hidden size {old.embedding_dim}; embeddings must come from a model transferred "
            "from the same English encoder"
        )
    padding_idx = old.padding_idx
    if padding_idx is not None and padding_idx >= weight.shape[0]:
        padding_idx = None
    return nn.Embedding.from_pretrained(
        weight.to(dtype=old.weight.dtype, device=old.weight.device),
        freeze=not old.weight.requires_grad,
        padding_idx=padding_idx,
    )


def _check_tokenizer(
    tokenizer, module: nn.Embedding, classifier: NliClassifier, directory: Path
) -> None:
    if len(tokenizer) > module.num_embeddings:
        raise RamenError(
            f"{directory}: tokenizer has {len(tokenizer)} tokens but the word-embedding table "
            f"has only {module.num_embeddings} rows"
        )
    pad = tokenizer.pad_token_id
    if pad is not None and pad != classifier.pad_token_id and not runs_causal_lm(classifier):
        # Harmless for BERT (pads are masked), but RoBERTa numbers positions by
        # skipping the encoder's pad id, so a real token with that id shifts them.
        logger.warning(
            "%s: tokenizer pad id %d differs from the encoder's pad id %d; encoders that "
            "derive positions from the pad id (RoBERTa) will misplace token %d",
            directory,
            pad,
            classifier.pad_token_id,
            classifier.pad_token_id,
        )


def swap_embeddings(classifier: NliClassifier, embedding_dir: str | os.PathLike):
    """Replace the encoder's word embeddings with those of ``embedding_dir``.

    Only the word-embedding table changes; every other parameter is shared.
    Returns the tokenizer of ``embedding_dir``, which must be used with it.
    """
    embedding_dir = Path(embedding_dir)
    module = _embedding_module(classifier, embedding_dir)
    tokenizer = load_tokenizer(embedding_dir)
    _check_tokenizer(tokenizer, module, classifier, embedding_dir)
    set_word_embeddings(classifier, module, decoder_pad_id(classifier, tokenizer))
    return tokenizer


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


def train_batches(
    lengths: Sequence[int], batch_size: int, generator: torch.Generator, group_by_length: bool = True
) -> list[list[int]]:
    """Shuffled batches of indices; with grouping, neighbours in a batch have similar length."""
    order = torch.randperm(len(lengths), generator=generator).tolist()
    if not group_by_length:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    # Sort within mega-chunks only, so batches stay random across the data set.
    mega = batch_size * 50
    batches: list[list[int]] = []
    for start in range(0, len(order), mega):
        chunk = sorted(order[start : start + mega], key=lambda i: lengths[i], reverse=True)
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    shuffle = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in shuffle]


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


# --------------------------------------------------------------------------- training


def build_optimizer(classifier: NliClassifier, settings: NliSettings, total_steps: int):
    """AdamW (no decay on biases and norms) with linear warmup then linear decay to 0."""
    optimizer = torch.optim.AdamW(decay_groups(classifier.parameters(), settings.weight_decay),
                                  lr=settings.learning_rate)
    return optimizer, linear_warmup_decay(optimizer, settings.warmup_ratio, total_steps)


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

    with torch_threads(settings.threads):
        torch.manual_seed(settings.seed)
        classifier = NliClassifier.from_pretrained(
            model_dir, pooling=settings.pooling, dropout=settings.dropout
        )
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
                module = _embedding_module(classifier, Path(embedding_dir))
                lang_tokenizer = load_tokenizer(embedding_dir)
                _check_tokenizer(lang_tokenizer, module, classifier, Path(embedding_dir))
                lang_pad = decoder_pad_id(classifier, lang_tokenizer)
            encoded = encode_pairs(
                lang_tokenizer, examples, settings.max_length, token_types, num_labels
            )
            dev_sets[lang] = (module, encoded, lang_pad)

        steps_per_epoch = math.ceil(len(train) / settings.batch_size)
        total_steps = steps_per_epoch * settings.epochs
        optimizer, scheduler = build_optimizer(classifier, settings, total_steps)
        generator = torch.Generator().manual_seed(settings.seed)
        labels = torch.tensor(train.labels, dtype=torch.long)
        pad_id = classifier.pad_token_id
        run_dir = None
        if checkpoint_dir is not None:
            run_dir = Path(checkpoint_dir) / fingerprint(
                dataclasses.asdict(settings), [model_dir, *[embedding for embedding, _ in dev_examples_by_lang.values()
                                                            if embedding is not None]],
                (f"{example.premise}\t{example.hypothesis}\t{example.label}" for example in train_examples))
        updates = Updates(optimizer, scheduler=scheduler, max_grad_norm=settings.max_grad_norm,
                          accumulation=settings.grad_accumulation, precision=settings.precision,
                          device=str(classifier.head.weight.device),
                          parameters=[p for p in classifier.parameters() if p.requires_grad])
        loop = EpochLoop(classifier, updates, epochs=settings.epochs, steps_per_epoch=steps_per_epoch,
                         generator=generator, checkpoint_dir=run_dir, checkpoint_every=checkpoint_every,
                         desc=f"xnli fine-tune {variant}".strip(), progress=progress)
        keeper = EpochKeeper(out_dir, run_dir) if keep_epochs else None
        classifier.train()

        def batch_loss(indices):
            logits = classifier(**collate(train, indices, pad_id))
            return nn.functional.cross_entropy(logits.float(), labels[indices])

        for epoch, done in loop.epochs_to_run():
            batches = train_batches(train.lengths, settings.batch_size, generator, settings.group_by_length)
            for indices in skip(batches, done):
                loss = loop.update(indices, batch_loss)
                if log_every and loop.step % log_every == 0:
                    logger.info("step %d/%d epoch %d loss %.4f lr %.3g", loop.step, total_steps, epoch, loss,
                                scheduler.get_last_lr()[0])
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
                                        step=loop.step, selected=False, train_loss=loop.train_loss))
                logger.info("epoch %d dev %s accuracy %.4f", epoch, lang, report["accuracy"])
            if keeper:  # saved before the epoch's checkpoint, so a resumed run has it
                save_classifier(classifier, tokenizer, keeper.path(epoch),
                                {"format": META_FORMAT, "task": TASK, "base_model_dir": str(model_dir),
                                 "variant": variant, "selected_epoch": epoch, "settings": settings.to_dict()})
                keeper.saved(epoch, loop.step, loop.train_loss)
            loop.end_epoch(sum(scores) / len(scores) if scores else None, rows)
        history, best_epoch = loop.finish()

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
            "total_steps": total_steps,
            "settings": settings.to_dict(),
            "dev_history": history,
        }
        if keeper:
            keeper.publish(settings.epochs, {key: meta[key] for key in
                                             ("task", "base_model_dir", "variant", "train_examples", "total_steps",
                                              "settings")})
        else:
            save_classifier(classifier, tokenizer, out_dir, meta)
    if run_dir is not None:
        remove_run(run_dir)  # the classifier is the job's output now
    return history


# --------------------------------------------------------------------------- save / load


def save_classifier(
    classifier: NliClassifier, tokenizer, out_dir: str | os.PathLike, meta: Mapping
) -> None:
    """Write weights, encoder config, tokenizer and metadata to ``out_dir`` atomically."""
    from safetensors.torch import save_model

    meta = dict(meta)
    meta.setdefault("format", META_FORMAT)
    meta.setdefault("labels", list(LABELS[: classifier.head.out_features]))
    meta.setdefault("pooling", classifier.pooling)
    meta.setdefault("dropout", classifier.dropout_p)
    meta.setdefault("encoder_options", getattr(classifier, "encoder_options", {}))
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        save_model(classifier, str(tmp / WEIGHTS_NAME), metadata={"format": "pt"})
        classifier.encoder.config.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        text = json.dumps(meta, indent=2, ensure_ascii=False) + "\n"
        (tmp / META_NAME).write_text(text, encoding="utf-8")


def read_classifier_info(out_dir: str | os.PathLike) -> dict:
    """The metadata JSON of a saved classifier."""
    path = Path(out_dir) / META_NAME
    if not path.is_file():
        raise RamenError(f"{out_dir}: not a saved NLI classifier (no {META_NAME})")
    meta = json.loads(path.read_text(encoding="utf-8"))
    if meta.get("format") != META_FORMAT:
        raise RamenError(f"{path}: unsupported format {meta.get('format')!r} (expected {META_FORMAT})")
    return meta


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
