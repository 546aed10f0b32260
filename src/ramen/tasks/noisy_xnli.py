"""Zero-shot XNLI under character noise with a char2subword module in the model (§3.3): full mode
and hybrid mode.

Full mode replaces every table row by the module's embedding of that subword (special
tokens keep their rows: they have no characters). Hybrid mode keeps the table and embeds
with the module, as one token, each word the tokenizer would split into several pieces
(or map to the unknown token). Both reuse a fine-tuned XNLI classifier into which the
foreign table is swapped (:mod:`ramen.tasks.nli`, :mod:`ramen.tasks.swap`).
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace

import torch
from torch import nn

from ramen.char2subword.approximate import approximable_rows, subword_strings
from ramen.char2subword.module import Char2Subword
from ramen.char2subword.noise import noise_text
from ramen.errors import ConfigError

logger = logging.getLogger(__name__)

MODES = ("table", "full", "hybrid")


def full_mode_table(module: Char2Subword, vocab: Sequence[str], table: torch.Tensor,
                    special_tokens: Sequence[str]) -> torch.Tensor:
    """A copy of ``table`` whose subword rows are the module's embeddings."""
    out = table.detach().clone().float()
    rows = approximable_rows(vocab, special_tokens)
    strings = subword_strings(vocab)
    out[torch.from_numpy(rows)] = module.embed_all([strings[i] for i in rows])
    return out


def _segments(encoding, text_pair: tuple[str, str], normalise, unk_id: int, vocab_size: int,
              words: dict[str, int]) -> tuple:
    """Split an encoded pair into special-token parts and two segments of hybrid ids.

    Returns (parts, part_types, segments, segment_types, words seen, words backed off):
    ``parts`` are the special tokens before, between and after the two segments; a word of
    several pieces (or an unknown one) becomes one id past the table, numbered in ``words``.
    """
    ids, sequence_ids, word_ids, offsets = encoding.ids, encoding.sequence_ids, encoding.word_ids, encoding.offsets
    types = encoding.type_ids
    parts: list[list[int]] = [[], [], []]
    part_types: list[list[int]] = [[], [], []]
    groups: list[list[tuple[int, list[int]]]] = [[], []]
    for t, sequence in enumerate(sequence_ids):
        if sequence is None:
            slot = 0 if not groups[0] else (1 if not groups[1] else 2)
            parts[slot].append(ids[t])
            part_types[slot].append(types[t])
        elif groups[sequence] and groups[sequence][-1][0] == word_ids[t]:
            groups[sequence][-1][1].append(t)
        else:
            groups[sequence].append((word_ids[t], [t]))
    segments: list[list[int]] = [[], []]
    backed_off = pieces = 0
    for sequence, group_list in enumerate(groups):
        for _, positions in group_list:
            pieces += 1
            if len(positions) == 1 and ids[positions[0]] != unk_id:
                segments[sequence].append(ids[positions[0]])
                continue
            start, end = offsets[positions[0]][0], offsets[positions[-1]][1]
            word = normalise(text_pair[sequence][start:end])
            segments[sequence].append(vocab_size + words.setdefault(word, len(words)))
            backed_off += 1
    segment_types = [types[groups[s][0][1][0]] if groups[s] else s for s in (0, 1)]
    return parts, part_types, segments, segment_types, pieces, backed_off


def hybrid_encode_pairs(tokenizer, examples: Sequence, max_length: int, token_types: bool, vocab_size: int,
                        num_labels: int) -> tuple:
    """(EncodedPairs, new words, share of words backed off to the module) for hybrid mode.

    Words are those of the tokenizer's pre-tokenizer; the module sees each one as the
    tokenizer's normaliser leaves it (e.g. lowercased). Sequences are cut longest-first
    to ``max_length`` after merging, as the tokenizer's own truncation would.
    """
    from ramen.tasks.nli import EncodedPairs, label_of

    backend = tokenizer.backend_tokenizer
    normalise = backend.normalizer.normalize_str if backend.normalizer is not None else (lambda text: text)
    words: dict[str, int] = {}
    input_ids, type_ids, labels = [], [] if token_types else None, []
    total_words = total_backed_off = 0
    for index, example in enumerate(examples):
        labels.append(label_of(example, index, num_labels))
        encoding = tokenizer(example.premise, example.hypothesis, add_special_tokens=True).encodings[0]
        parts, part_types, segments, segment_types, pieces, backed_off = _segments(
            encoding, (example.premise, example.hypothesis), normalise, tokenizer.unk_token_id, vocab_size, words)
        total_words += pieces
        total_backed_off += backed_off
        budget = max_length - sum(len(p) for p in parts)
        while len(segments[0]) + len(segments[1]) > budget:
            segments[0 if len(segments[0]) >= len(segments[1]) else 1].pop()
        input_ids.append(parts[0] + segments[0] + parts[1] + segments[1] + parts[2])
        if type_ids is not None:
            type_ids.append(part_types[0] + [segment_types[0]] * len(segments[0]) + part_types[1]
                            + [segment_types[1]] * len(segments[1]) + part_types[2])
    share = total_backed_off / total_words if total_words else 0.0
    return EncodedPairs(input_ids, type_ids, labels), list(words), share


def noisy_examples(examples: Sequence, rate: float, seed: int, operations: Sequence[str], min_length: int) -> list:
    """A copy of NLI examples with seeded character noise in premise and hypothesis."""
    rng = random.Random(seed)
    return [replace(example, premise=noise_text(example.premise, rng, rate, operations, min_length),
                    hypothesis=noise_text(example.hypothesis, rng, rate, operations, min_length))
            for example in examples]


def evaluate_modes(classifier_dir: str | os.PathLike, embedding_dir: str | os.PathLike,
                   modules: Mapping[str, Char2Subword], conditions: Mapping[str, Sequence], *,
                   modes: Sequence[str] = MODES, batch_size: int = 128, threads: int | None = None) -> list[dict]:
    """Accuracy of the classifier with ``embedding_dir``'s table in each mode, for each module and condition.

    ``modules`` maps a stage name (e.g. "approx", "final") to a module; ``conditions`` maps a
    name (e.g. "clean", "noisy") to examples. One row per (mode, stage, condition); table
    mode has stage "-".
    """
    from ramen.tasks.nli import LABELS, accuracy_report, evaluate, load_classifier, predict_encoded, read_classifier_info
    from ramen.tasks.swap import set_word_embeddings, swap_embeddings
    from ramen.tasks.common import torch_threads
    from ramen.vocab.tokenizer import ordered_vocab

    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        raise ConfigError("char2subword.noisy_xnli.modes", f"unknown modes {unknown}", f"choose from {list(MODES)}")
    rows = []
    with torch_threads(threads):
        info = read_classifier_info(classifier_dir)
        max_length = int(info.get("settings", {}).get("max_length", 128))
        classifier = load_classifier(classifier_dir)
        tokenizer = swap_embeddings(classifier, embedding_dir)
        table_module = classifier.word_embeddings()
        table = table_module.weight.detach().clone()
        vocab = ordered_vocab(tokenizer)
        num_labels = classifier.head.out_features

        def install(weight: torch.Tensor) -> None:
            set_word_embeddings(classifier, nn.Embedding.from_pretrained(weight.to(table.dtype), freeze=True,
                                                                         padding_idx=table_module.padding_idx))

        for mode in modes:
            for stage, module in ({"-": None} if mode == "table" else modules).items():
                if mode == "full":
                    install(full_mode_table(module, vocab, table, tokenizer.all_special_tokens))
                for condition, examples in conditions.items():
                    backed_off = 0.0 if mode == "table" else 1.0
                    if mode == "hybrid":
                        encoded, words, backed_off = hybrid_encode_pairs(
                            tokenizer, examples, max_length, classifier.uses_token_types, len(table), num_labels)
                        extra = module.embed_all(words) if words else table.new_zeros(0, table.shape[1])
                        install(torch.cat([table, extra.to(table.dtype)]))
                        report = accuracy_report(encoded.labels, predict_encoded(classifier, encoded, batch_size),
                                                 LABELS[:num_labels])
                    else:
                        if mode == "table":
                            install(table)
                        report = evaluate(classifier, tokenizer, examples, batch_size, max_length)
                    rows.append({"mode": mode, "stage": stage, "condition": condition, "accuracy": report["accuracy"],
                                 "n": report["n"], "module_share": backed_off})
                    logger.info("%s", rows[-1])
    return rows


def comparison_rows(rows: Sequence[Mapping], clean: str = "clean", noisy: str = "noisy") -> list[dict]:
    """One row per (mode, stage): clean and noisy accuracy side by side and their difference."""
    by_key: dict[tuple, dict] = {}
    for row in rows:
        entry = by_key.setdefault((row["mode"], row["stage"]), {"mode": row["mode"], "stage": row["stage"],
                                                                 "n": row["n"]})
        entry[f"accuracy_{row['condition']}"] = row["accuracy"]
        entry[f"module_share_{row['condition']}"] = row["module_share"]
    out = []
    for entry in by_key.values():
        if f"accuracy_{clean}" in entry and f"accuracy_{noisy}" in entry:
            entry["change"] = entry[f"accuracy_{noisy}"] - entry[f"accuracy_{clean}"]
        out.append(entry)
    return out


def noisy_xnli(classifier_dir, embedding_dir, modules: Mapping[str, Char2Subword], examples: Sequence,
               settings: Mapping, batch_size: int = 128, threads: int | None = None) -> list[dict]:
    """Clean vs noised accuracy (``settings``: rate, seed, operations, min_length, modes) per mode and module."""
    noised = noisy_examples(examples, settings["rate"], settings["seed"], settings["operations"],
                            settings["min_length"])
    changed = sum(a != b for a, b in zip(examples, noised))
    logger.info("noise changed %d of %d pairs", changed, len(examples))
    rows = evaluate_modes(classifier_dir, embedding_dir, modules, {"clean": examples, "noisy": noised},
                          modes=settings["modes"], batch_size=batch_size, threads=threads)
    return comparison_rows(rows)


NOISY_XNLI_COLUMNS = ("variant", "lang", "mode", "stage", "n", "noise_rate", "accuracy_clean", "accuracy_noisy",
                      "change", "module_share_clean", "module_share_noisy")


def write_noisy_xnli(rows: Sequence[Mapping], path, *, variant: str, lang: str, rate: float) -> None:
    from ramen.char2subword.evaluate import write_tsv

    write_tsv([{"variant": variant, "lang": lang, "noise_rate": rate, **row} for row in rows], NOISY_XNLI_COLUMNS,
              path)
