"""Dependency parsing on Universal Dependencies (paper §4.2, §5.3), zero-shot and supervised.

A biaffine parser (:mod:`ramen.tasks.parsing.biaffine`) is trained on top of a
language side of a model (a Hugging Face directory). Zero-shot: train on the
source language's treebank with the English side, its word-embedding table
frozen (``freeze_embeddings``), then parse the target treebank after swapping
in the target side's table and tokenizer, exactly as for XNLI. Supervised
(Table 4): train, select and test on the target's own treebank with the
target side. Outputs are always trees (:func:`ramen.tasks.parsing.decode.decode_mst`);
scores follow :mod:`ramen.tasks.parsing.metrics` (punctuation excluded).

Saved parser directory (``train_parser(..., out_dir)``), written atomically:
``parser.safetensors`` (all weights), ``config.json`` (the encoder config),
the tokenizer of the training side, and ``ud_parser.json`` (relation labels,
settings, selected epoch, dev history).

Results TSV (:func:`write_results`), one row per evaluation: ``variant``,
``lang``, ``split`` (dev/test), ``task`` (``ud``), ``mode`` (zero-shot or
supervised), ``treebank`` (file name), ``epoch``, ``step``, ``las``, ``uas``
(punctuation excluded), ``las_all``, ``uas_all`` (all words), ``words``,
``sentences``, ``selected`` (dev rows: the epoch kept) and ``train_loss``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from torch import nn
from tqdm import tqdm

from ramen.modeling.architectures import register_architectures
from ramen.data.conllu import Sentence, universal_relation
from ramen.errors import ConfigError, RamenError
from ramen.tasks.parsing.biaffine import WORD_POOLINGS, BiaffineParser, parser_loss
from ramen.tasks.parsing.decode import decode_mst
from ramen.tasks.parsing.metrics import attachment_scores
from ramen.tasks.common import encoder_from_config, load_encoder, subsample, torch_threads, write_table
from ramen.tasks.epochs import read_epochs, select_epoch
from ramen.tasks.finetune import FinetuneSettings, Finetuning, read_model_meta, save_model_dir, seeded
from ramen.tasks.swap import set_word_embeddings, side_table, swap_embeddings
from ramen.training.optimisation import linear_warmup_decay
from ramen.vocab.tokenizer import load_tokenizer

logger = logging.getLogger(__name__)

TASK = "ud"
WEIGHTS_NAME = "parser.safetensors"
META_NAME = "ud_parser.json"
META_FORMAT = 1
RELATION_SETS = ("universal", "full")
MODES = ("zero-shot", "supervised")
RESULT_COLUMNS = ("variant", "lang", "split", "task", "mode", "treebank", "epoch", "step", "las", "uas",
                  "las_all", "uas_all", "words", "sentences", "selected", "train_loss")


@dataclass
class UdSettings(FinetuneSettings):
    """Parser training settings; batch size, learning rate and epochs default to the paper's (§3.3)."""

    SECTION: ClassVar[str] = "tasks.ud.settings"

    epochs: int = 50
    batch_size: int = 32                 # sentences per update
    learning_rate: float = 1e-5          # encoder
    max_grad_norm: float = 5.0
    max_length: int = 256                # subwords; longer training sentences are skipped
    eval_batch_size: int = 64
    head_learning_rate: float = 2e-3     # MLPs and biaffine scorers, trained from scratch
    max_train_sentences: int | None = None   # a seeded subset; None: all
    max_dev_sentences: int | None = None     # the first N dev sentences; None: all
    word_pooling: str = "first"          # first | mean subword of each word
    # Keep only the first N transformer layers: the parser reads the N-th layer's output. Middle
    # layers carry more syntax than the top of a small sentence-embedding model, and are cheaper.
    encoder_layers: int | None = None    # None: all layers (the paper)
    relations: str = "universal"         # predict universal relations, or full ones with subtypes
    arc_dim: int = 256
    relation_dim: int = 64
    dropout: float = 0.33
    # False: the encoder is a fixed feature extractor; word vectors are computed once and
    # only the scorers train, many times cheaper per epoch on a CPU.
    finetune_encoder: bool = True

    def check(self, need) -> None:
        for name in ("arc_dim", "relation_dim"):
            need(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        need(self.head_learning_rate > 0, "head_learning_rate", f"must be > 0, got {self.head_learning_rate}")
        need(0 <= self.dropout < 1, "dropout", f"must be in [0, 1), got {self.dropout}")
        need(self.word_pooling in WORD_POOLINGS, "word_pooling", f"must be one of {WORD_POOLINGS}")
        need(self.relations in RELATION_SETS, "relations", f"must be one of {RELATION_SETS}")
        for name in ("max_train_sentences", "max_dev_sentences", "encoder_layers"):
            value = getattr(self, name)
            need(value is None or value >= 1, name, f"must be >= 1 or null, got {value}")


# --------------------------------------------------------------------------- encoding


@dataclass
class EncodedSentence:
    input_ids: list[int]
    word_spans: list[tuple[int, int] | None]  # subword range of each word; None: no subword kept


def encode_sentences(tokenizer, sentences: Sequence[Sentence], max_length: int | None = None,
                     chunk_size: int = 1024) -> list[EncodedSentence]:
    """Subword ids of each sentence's words (gold tokenisation) and the subword span of every word.

    ``max_length`` truncates; words left without a subword get span None.
    """
    encoded = []
    for start in range(0, len(sentences), chunk_size):
        chunk = sentences[start:start + chunk_size]
        batch = tokenizer([list(s.forms) for s in chunk], is_split_into_words=True,
                          truncation=max_length is not None, max_length=max_length,
                          return_attention_mask=False, return_token_type_ids=False)
        for index, sentence in enumerate(chunk):
            spans: list[list[int] | None] = [None] * len(sentence)
            for position, word in enumerate(batch.word_ids(index)):
                if word is None:
                    continue
                if spans[word] is None:
                    spans[word] = [position, position + 1]
                else:
                    spans[word][1] = position + 1
            encoded.append(EncodedSentence(batch["input_ids"][index],
                                           [tuple(span) if span else None for span in spans]))
    return encoded


def collate(encoded: Sequence[EncodedSentence], pooling: str | None, pad_id: int,
            heads: Sequence[Sequence[int]] | None = None,
            relations: Sequence[Sequence[int]] | None = None) -> dict[str, torch.Tensor]:
    """Pad a batch; build the word-pooling matrices (not for ``pooling`` None) and, for training,
    the gold tensors."""
    size = len(encoded)
    subwords = max(len(e.input_ids) for e in encoded)
    words = 1 + max(len(e.word_spans) for e in encoded)
    input_ids = torch.full((size, subwords), pad_id, dtype=torch.long)
    attention = torch.zeros((size, subwords), dtype=torch.long)
    pool = torch.zeros((size, words, subwords) if pooling else (0,))
    word_mask = torch.zeros((size, words), dtype=torch.bool)
    for row, sentence in enumerate(encoded):
        input_ids[row, :len(sentence.input_ids)] = torch.tensor(sentence.input_ids)
        attention[row, :len(sentence.input_ids)] = 1
        word_mask[row, :len(sentence.word_spans) + 1] = True
        if not pooling:
            continue
        pool[row, 0, 0] = 1.0  # the root is the first token ([CLS] / <s>)
        for word, span in enumerate(sentence.word_spans, start=1):
            if span is None:
                pool[row, word, 0] = 1.0  # no subword left (truncated or empty): root state stands in
            elif pooling == "first":
                pool[row, word, span[0]] = 1.0
            else:
                pool[row, word, span[0]:span[1]] = 1.0 / (span[1] - span[0])
    batch = {"input_ids": input_ids, "attention_mask": attention, "pooling": pool, "word_mask": word_mask}
    if heads is not None:
        gold_heads = torch.zeros((size, words), dtype=torch.long)
        gold_relations = torch.zeros((size, words), dtype=torch.long)
        for row, (sentence_heads, sentence_relations) in enumerate(zip(heads, relations)):
            gold_heads[row, 1:len(sentence_heads) + 1] = torch.tensor(sentence_heads)
            gold_relations[row, 1:len(sentence_relations) + 1] = torch.tensor(sentence_relations)
        batch["gold_heads"] = gold_heads
        batch["gold_relations"] = gold_relations
    return batch


def relation_of(deprel: str, relation_set: str) -> str:
    return universal_relation(deprel) if relation_set == "universal" else deprel


# --------------------------------------------------------------------------- prediction


def decode_batch(parser: BiaffineParser, words: torch.Tensor, word_mask: torch.Tensor,
                 lengths: Sequence[int], relations: Sequence[str]) -> tuple[list[list[int]], list[list[str]]]:
    """Trees (MST) and their relations for a batch of root + word vectors."""
    arcs, words = parser.score(words, word_mask)
    arcs = arcs.log_softmax(-1).numpy()
    trees = torch.zeros(word_mask.shape, dtype=torch.long)
    heads = []
    for row, length in enumerate(lengths):
        tree = decode_mst(arcs[row, :length + 1, :length + 1])
        heads.append(tree[1:].tolist())
        trees[row, 1:length + 1] = torch.as_tensor(tree[1:])
    best = parser.relation_scores(words, trees).argmax(-1)
    labels = [[relations[r] for r in best[row, 1:length + 1].tolist()] for row, length in enumerate(lengths)]
    return heads, labels


def _encode_for_parsing(parser: BiaffineParser, tokenizer, sentences: Sequence[Sentence]) -> list[EncodedSentence]:
    limit = getattr(parser.encoder.config, "max_position_embeddings", 512)
    encoded = encode_sentences(tokenizer, sentences, max_length=limit)
    truncated = sum(span is None for e in encoded for span in e.word_spans)
    if truncated:
        logger.warning("%d words have no subword within %d positions; they are parsed from the root state",
                       truncated, limit)
    return encoded


def predict(parser: BiaffineParser, tokenizer, sentences: Sequence[Sentence], relations: Sequence[str],
            pooling: str, batch_size: int = 64, progress: bool = False,
            desc: str = "parse") -> tuple[list[list[int]], list[list[str]]]:
    """Predicted heads (trees, via MST decoding) and relations of every sentence, in input order."""
    encoded = _encode_for_parsing(parser, tokenizer, sentences)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].input_ids), reverse=True)
    heads: list[list[int]] = [[] for _ in sentences]
    labels: list[list[str]] = [[] for _ in sentences]
    was_training = parser.training
    parser.eval()
    try:
        with torch.inference_mode(), tqdm(total=len(order), desc=desc, unit="sent", disable=not progress,
                                          leave=False) as bar:
            for start in range(0, len(order), batch_size):
                indices = order[start:start + batch_size]
                batch = collate([encoded[i] for i in indices], pooling, parser.pad_token_id)
                words = parser.word_vectors(batch["input_ids"], batch["attention_mask"], batch["pooling"])
                batch_heads, batch_labels = decode_batch(parser, words, batch["word_mask"],
                                                         [len(sentences[i]) for i in indices], relations)
                for i, sentence_heads, sentence_labels in zip(indices, batch_heads, batch_labels):
                    heads[i], labels[i] = sentence_heads, sentence_labels
                bar.update(len(indices))
    finally:
        parser.train(was_training)
    return heads, labels


def evaluate_cached(parser: BiaffineParser, vectors: Sequence[torch.Tensor], sentences: Sequence[Sentence],
                    relations: Sequence[str], batch_size: int = 64) -> dict:
    """Scores from word vectors computed beforehand by a fixed encoder (see :func:`cache_word_vectors`)."""
    heads, labels = [], []
    was_training = parser.training
    parser.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(sentences), batch_size):
                chunk = vectors[start:start + batch_size]
                mask = pad_word_vectors([torch.ones(len(v), dtype=torch.bool) for v in chunk])
                batch_heads, batch_labels = decode_batch(parser, pad_word_vectors(chunk), mask,
                                                         [len(v) - 1 for v in chunk], relations)
                heads += batch_heads
                labels += batch_labels
    finally:
        parser.train(was_training)
    return attachment_scores(sentences, heads, labels)


def evaluate(parser: BiaffineParser, tokenizer, sentences: Sequence[Sentence], relations: Sequence[str],
             pooling: str, batch_size: int = 64, progress: bool = False, desc: str = "parse",
             keep_predictions: bool = False) -> dict:
    """Attachment scores; with ``keep_predictions`` also the predicted ``heads`` and ``deprels``."""
    if not sentences:
        raise RamenError("no sentences to parse")
    heads, labels = predict(parser, tokenizer, sentences, relations, pooling, batch_size, progress, desc)
    scores = attachment_scores(sentences, heads, labels)
    if keep_predictions:
        scores.update(heads=heads, deprels=labels)
    return scores


# --------------------------------------------------------------------------- training


def truncate_encoder(encoder: nn.Module, layers: int | None) -> None:
    """Drop the transformer layers above the first ``layers`` (BERT and RoBERTa layouts)."""
    if layers is None:
        return
    stack = getattr(getattr(encoder, "encoder", None), "layer", None)
    if not isinstance(stack, nn.ModuleList):
        raise ConfigError("tasks.ud.settings.encoder_layers", f"cannot truncate a {type(encoder).__name__}",
                          "use null with encoders other than BERT and RoBERTa")
    if layers > len(stack):
        raise ConfigError("tasks.ud.settings.encoder_layers", f"{layers} exceeds the encoder's {len(stack)} layers")
    encoder.encoder.layer = stack[:layers]
    encoder.config.num_hidden_layers = layers  # a saved parser rebuilds the truncated encoder


def cache_word_vectors(parser: BiaffineParser, encoded: Sequence[EncodedSentence], pooling: str,
                       batch_size: int, progress: bool = False) -> list[torch.Tensor]:
    """Each sentence's root + word vectors from the (fixed) encoder, computed once."""
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].input_ids), reverse=True)
    cached: list[torch.Tensor] = [None] * len(encoded)
    was_training = parser.encoder.training
    parser.encoder.eval()
    with torch.inference_mode(), tqdm(total=len(order), desc="word vectors", unit="sent", disable=not progress,
                                      leave=False) as bar:
        for start in range(0, len(order), batch_size):
            indices = order[start:start + batch_size]
            batch = collate([encoded[i] for i in indices], pooling, parser.pad_token_id)
            vectors = parser.word_vectors(batch["input_ids"], batch["attention_mask"], batch["pooling"])
            for row, i in enumerate(indices):
                cached[i] = vectors[row, :len(encoded[i].word_spans) + 1].clone()
            bar.update(len(indices))
    parser.encoder.train(was_training)
    return cached


def pad_word_vectors(vectors: Sequence[torch.Tensor]) -> torch.Tensor:
    return nn.utils.rnn.pad_sequence(list(vectors), batch_first=True)


def _optimizer(parser: BiaffineParser, settings: UdSettings, total_steps: int):
    """AdamW with the encoder's and the scorers' learning rates, decay on the encoder's matrices only."""
    encoder_ids = {id(p) for p in parser.encoder.parameters()}
    groups: dict[tuple[float, float], list] = {}
    for param in parser.parameters():
        if not param.requires_grad:
            continue
        lr = settings.learning_rate if id(param) in encoder_ids else settings.head_learning_rate
        decay = settings.weight_decay if param.ndim >= 2 and id(param) in encoder_ids else 0.0
        groups.setdefault((lr, decay), []).append(param)
    optimizer = torch.optim.AdamW([{"params": params, "lr": lr, "weight_decay": decay}
                                   for (lr, decay), params in groups.items()], betas=(0.9, 0.9))
    return optimizer, linear_warmup_decay(optimizer, settings.warmup_ratio, total_steps)


def train_parser(model_dir: str | os.PathLike, train_sentences: Sequence[Sentence],
                 dev: tuple[str | os.PathLike | None, Sequence[Sentence]] | None, settings: UdSettings,
                 out_dir: str | os.PathLike, *, variant: str = "", dev_lang: str = "", mode: str = "zero-shot",
                 dev_name: str = "", progress: bool = True, checkpoint_dir: str | os.PathLike | None = None,
                 checkpoint_every: int = 0, keep_epochs: bool = False) -> list[dict]:
    """Train a parser on ``model_dir``'s side and save the epoch with the best dev LAS to ``out_dir``.

    Checkpoints as :class:`ramen.tasks.finetune.Finetuning` (``checkpoint_dir``, ``checkpoint_every``).
    ``keep_epochs``: ``out_dir`` holds every epoch's parser instead (ramen.tasks.epochs), for a
    model shared by every target language, whose epoch each language selects on its dev set.

    ``dev`` is ``(embedding_dir, sentences)``: after every epoch the dev
    sentences are parsed with that directory's word embeddings and tokenizer
    (None: the training side's). Without dev sentences the last epoch is kept.
    Returns the dev history rows.
    """
    settings.validate()
    model_dir = Path(model_dir)
    train_sentences = subsample(train_sentences, settings.max_train_sentences, settings.seed)
    with seeded(settings):
        tokenizer = load_tokenizer(model_dir)
        encoded_all = encode_sentences(tokenizer, train_sentences)
        keep = [i for i, e in enumerate(encoded_all) if len(e.input_ids) <= settings.max_length]
        if len(keep) < len(encoded_all):
            logger.info("skipping %d of %d training sentences longer than %d subwords",
                        len(encoded_all) - len(keep), len(encoded_all), settings.max_length)
        if not keep:
            raise RamenError(f"no training sentence fits max_length {settings.max_length}")
        train_sentences = [train_sentences[i] for i in keep]
        encoded = [encoded_all[i] for i in keep]
        relations = sorted({relation_of(r, settings.relations) for s in train_sentences for r in s.deprels})
        relation_ids = {name: index for index, name in enumerate(relations)}
        gold_heads = [list(s.heads) for s in train_sentences]
        gold_relations = [[relation_ids[relation_of(r, settings.relations)] for r in s.deprels]
                          for s in train_sentences]

        encoder, options = load_encoder(model_dir)
        truncate_encoder(encoder, settings.encoder_layers)
        parser = BiaffineParser(encoder, len(relations), settings.arc_dim, settings.relation_dim, settings.dropout)
        if settings.freeze_embeddings:
            parser.word_embeddings().weight.requires_grad_(False)
        training_embeddings = parser.word_embeddings()

        dev_tokenizer, dev_embeddings, dev_sentences = None, None, []
        if dev is not None and len(dev[1]):
            dev_dir, dev_sentences = dev
            dev_sentences = list(dev_sentences)[:settings.max_dev_sentences]
            if dev_dir is None or Path(dev_dir).resolve() == model_dir.resolve():
                dev_tokenizer, dev_embeddings = tokenizer, training_embeddings
            else:
                dev_embeddings, dev_tokenizer, _ = side_table(parser, Path(dev_dir))

        if not settings.finetune_encoder:
            for param in parser.encoder.parameters():
                param.requires_grad_(False)
            cached = cache_word_vectors(parser, encoded, settings.word_pooling, settings.eval_batch_size, progress)
            if dev_sentences:  # the dev vectors do not change either
                set_word_embeddings(parser, dev_embeddings)
                dev_vectors = cache_word_vectors(parser, _encode_for_parsing(parser, dev_tokenizer, dev_sentences),
                                                 settings.word_pooling, settings.eval_batch_size, progress)
                set_word_embeddings(parser, training_embeddings)

        run = Finetuning(parser, settings, train_size=len(encoded), out_dir=out_dir, checkpoint_dir=checkpoint_dir,
                         checkpoint_every=checkpoint_every, keep_epochs=keep_epochs, optimizer=_optimizer,
                         fingerprint_values={**settings.to_dict(), "mode": mode},
                         inputs=[model_dir, *([dev[0]] if dev and dev[0] else [])],
                         data=("\t".join(f"{w}/{h}/{r}" for w, h, r in zip(s.forms, s.heads, s.deprels))
                               for s in train_sentences),
                         desc=f"ud parser {variant}".strip(), progress=progress)

        def train_mode():
            parser.train()
            if not settings.finetune_encoder:
                parser.encoder.eval()  # no dropout in a fixed feature extractor

        def batch_loss(indices):
            batch = collate([encoded[i] for i in indices], settings.word_pooling if settings.finetune_encoder else None,
                            parser.pad_token_id, [gold_heads[i] for i in indices],
                            [gold_relations[i] for i in indices])
            if settings.finetune_encoder:
                words = parser.word_vectors(batch["input_ids"], batch["attention_mask"], batch["pooling"])
            else:
                words = pad_word_vectors([cached[i] for i in indices])
            arcs, words = parser.score(words, batch["word_mask"])
            return parser_loss(parser, arcs, words, batch["gold_heads"], batch["gold_relations"], batch["word_mask"])

        def word_share(batch_indices):
            # The loss is a mean over words: a micro-batch weighs by its share of the batch's words.
            words = sum(len(gold_heads[i]) for i in batch_indices)
            return lambda part: sum(len(gold_heads[i]) for i in part) / words

        def evaluate_dev(epoch):
            if not dev_sentences:
                return None, []
            if not settings.finetune_encoder:
                scores = evaluate_cached(parser, dev_vectors, dev_sentences, relations, settings.eval_batch_size)
            else:
                set_word_embeddings(parser, dev_embeddings)
                try:
                    scores = evaluate(parser, dev_tokenizer, dev_sentences, relations, settings.word_pooling,
                                      settings.eval_batch_size, progress, desc="dev")
                finally:
                    set_word_embeddings(parser, training_embeddings)
            las = scores["las"] or 0.0
            logger.info("epoch %d dev %s LAS %.4f UAS %.4f", epoch, dev_lang, las, scores["uas"] or 0.0)
            return las, [results_row(scores, variant=variant, lang=dev_lang, split="dev", mode=mode,
                                     treebank=dev_name, epoch=epoch, step=run.loop.step, selected=False,
                                     train_loss=run.loop.train_loss)]

        def save(path, meta):
            save_parser(parser, tokenizer, path, meta)

        def save_epoch(path, epoch):
            save(path, {"format": META_FORMAT, "task": TASK, "relations": relations, "encoder_options": options,
                        "base_model_dir": str(model_dir), "variant": variant, "mode": mode,
                        "selected_epoch": epoch, "settings": settings.to_dict()})

        lengths = [len(e.input_ids) for e in encoded]
        history, best_epoch = run.train(lengths, batch_loss, evaluate_dev, share=word_share, save_epoch=save_epoch,
                                        train_mode=train_mode)
        meta = {
            "format": META_FORMAT, "task": TASK, "relations": relations, "encoder_options": options,
            "base_model_dir": str(model_dir), "variant": variant, "mode": mode, "selected_epoch": best_epoch,
            "train_sentences": len(encoded), "total_steps": run.total_steps, "settings": settings.to_dict(),
            "dev_history": history,
        }
        run.save(meta, save, shared=("task", "base_model_dir", "variant", "mode", "train_sentences", "total_steps",
                                     "settings"))
    return history


# --------------------------------------------------------------------------- save / load


def save_parser(parser: BiaffineParser, tokenizer, out_dir: str | os.PathLike, meta: Mapping) -> None:
    save_model_dir(out_dir, parser, tokenizer, META_NAME, meta, weights_name=WEIGHTS_NAME)


def read_parser_info(out_dir: str | os.PathLike) -> dict:
    return read_model_meta(out_dir, META_NAME, META_FORMAT, "parser")


def load_parser(out_dir: str | os.PathLike) -> tuple[BiaffineParser, dict]:
    """A saved parser (eval mode) and its metadata, rebuilt from ``out_dir`` alone."""
    from safetensors.torch import load_model
    from transformers import AutoConfig

    meta = read_parser_info(out_dir)
    settings = meta["settings"]
    register_architectures()
    encoder = encoder_from_config(AutoConfig.from_pretrained(out_dir), meta.get("encoder_options", {}))
    parser = BiaffineParser(encoder, len(meta["relations"]), settings["arc_dim"], settings["relation_dim"],
                            settings["dropout"])
    load_model(parser, str(Path(out_dir) / WEIGHTS_NAME), strict=True)
    parser.eval()
    return parser, meta


def evaluate_saved(parser_dir: str | os.PathLike, embedding_dir: str | os.PathLike | None,
                   sentences: Sequence[Sentence], batch_size: int | None = None, threads: int | None = None,
                   progress: bool = False, keep_predictions: bool = False) -> dict:
    """Scores of a saved parser on ``sentences`` with ``embedding_dir``'s embeddings (None: its own)."""
    with torch_threads(threads):
        parser, meta = load_parser(parser_dir)
        tokenizer = load_tokenizer(parser_dir) if embedding_dir is None else swap_embeddings(parser, embedding_dir)
        settings = meta["settings"]
        return evaluate(parser, tokenizer, sentences, meta["relations"], settings["word_pooling"],
                        batch_size or settings["eval_batch_size"], progress, desc="test",
                        keep_predictions=keep_predictions)


def train_and_test(english_dir: str | os.PathLike, foreign_dir: str | os.PathLike,
                   train_sentences: Sequence[Sentence], dev_sentences: Sequence[Sentence],
                   test_sentences: Sequence[Sentence], settings: UdSettings, workdir: str | os.PathLike) -> dict:
    """Zero-shot parsing of one bilingual model: train on the source side, select on the target dev
    set, parse the target test set; the parser is written under ``workdir`` (a scratch directory).

    Returns the test scores and the selected epoch: one point of the Figure 2 curve when called
    on each kept training checkpoint.
    """
    parser_dir = Path(workdir) / "parser"
    history = train_parser(english_dir, train_sentences, (foreign_dir, dev_sentences), settings, parser_dir,
                           progress=False)
    scores = evaluate_saved(parser_dir, foreign_dir, test_sentences, threads=settings.threads)
    selected = next((row["epoch"] for row in history if row["selected"]), settings.epochs)
    return {**scores, "epoch": selected}


def parse_and_write(train_dir: str | os.PathLike, target_dir: str | os.PathLike | None,
                    train_sentences: Sequence[Sentence], dev_path: str | os.PathLike, test_path: str | os.PathLike,
                    settings: UdSettings, outputs, *, variant: str, lang: str, mode: str,
                    checkpoint_dir: str | os.PathLike | None = None, checkpoint_every: int = 0) -> dict:
    """A parsing job of the workflow: train on ``train_dir``'s side, select on the dev treebank and
    parse the test treebank with ``target_dir``'s word embeddings (None: the training side's, as
    supervised parsing does). Writes ``outputs.parser``, ``outputs.scores`` (dev history and test
    row) and ``outputs.predictions`` (the test treebank with HEAD and DEPREL predicted, for the
    CoNLL 2018 scorer); returns the test scores."""
    from ramen.data.conllu import read_conllu, write_predictions

    history = train_parser(train_dir, train_sentences, (target_dir, list(read_conllu(dev_path))), settings,
                           outputs.parser, variant=variant, dev_lang=lang, mode=mode, dev_name=Path(dev_path).name,
                           checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every)
    scores = evaluate_saved(outputs.parser, target_dir, list(read_conllu(test_path)), threads=settings.threads,
                            keep_predictions=True)
    write_predictions(test_path, outputs.predictions, scores.pop("heads"), scores.pop("deprels"))
    selected = next((row["epoch"] for row in history if row["selected"]), settings.epochs)
    write_results(outputs.scores, history + [results_row(scores, variant=variant, lang=lang, split="test", mode=mode,
                                                         treebank=Path(test_path).name, epoch=selected)])
    return scores


def select_and_parse(run_dir: str | os.PathLike, target_dir: str | os.PathLike, dev_path: str | os.PathLike,
                     test_path: str | os.PathLike, outputs, *, variant: str, lang: str, threads: int | None = None) -> dict:
    """One target language's zero-shot parsing from a parser training shared by every language
    (``train_parser`` with ``keep_epochs``): the epoch whose parser has the best LAS on ``lang``'s
    dev treebank (its first ``max_dev_sentences``, as in a run that selects while it trains)
    parses the test treebank. Writes ``outputs.scores`` and ``outputs.predictions`` as
    :func:`parse_and_write` does; returns the test scores."""
    from ramen.data.conllu import read_conllu, write_predictions

    index = read_epochs(run_dir)
    dev = list(read_conllu(dev_path))[: index["settings"].get("max_dev_sentences")]

    def score(parser_dir):
        scores = evaluate_saved(parser_dir, target_dir, dev, threads=threads)
        logger.info("%s dev %s LAS %.4f", parser_dir.name, lang, scores["las"] or 0.0)
        return scores["las"] or 0.0, results_row(scores, variant=variant, lang=lang, split="dev", mode=index["mode"],
                                                 treebank=Path(dev_path).name)

    parser_dir, history = select_epoch(run_dir, score)
    scores = evaluate_saved(parser_dir, target_dir, list(read_conllu(test_path)), threads=threads,
                            keep_predictions=True)
    write_predictions(test_path, outputs.predictions, scores.pop("heads"), scores.pop("deprels"))
    selected = next(row["epoch"] for row in history if row["selected"])
    write_results(outputs.scores, history + [results_row(scores, variant=variant, lang=lang, split="test",
                                                         mode=index["mode"], treebank=Path(test_path).name,
                                                         epoch=selected)])
    return scores


# --------------------------------------------------------------------------- results


def results_row(scores: Mapping, *, variant: str, lang: str, split: str, mode: str, treebank: str = "",
                epoch: int | None = None, step: int | None = None, selected: bool | None = None,
                train_loss: float | None = None) -> dict:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return {"variant": variant, "lang": lang, "split": split, "task": TASK, "mode": mode, "treebank": treebank,
            "epoch": epoch, "step": step, "las": scores["las"], "uas": scores["uas"],
            "las_all": scores["las_all"], "uas_all": scores["uas_all"], "words": scores["words"],
            "sentences": scores["sentences"], "selected": selected, "train_loss": train_loss}


def write_results(path: str | os.PathLike, rows) -> int:
    return write_table(path, rows, RESULT_COLUMNS)
