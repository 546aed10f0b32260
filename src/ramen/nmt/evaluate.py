"""Translating a test set with beam search, detokenised sacreBLEU, and decoding time."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from ramen.nmt.data import EncodedText, FrozenBert, NmtTokenizer, pad_batch
from ramen.nmt.model import TransformerNmt
from ramen.nmt.search import SearchSettings, beam_search


@dataclass
class Translation:
    hypotheses: list[str]
    seconds: float        # wall time of encoding, search and (fused models) the BERT forward pass


def translate(model: TransformerNmt, tokenizer: NmtTokenizer, source: EncodedText, target_lang: str,
              search: SearchSettings, batch_size: int, bert: FrozenBert | None = None,
              bert_source: EncodedText | None = None, device: str = "cpu") -> Translation:
    """Beam-search every source sentence, in batches of similar length; hypotheses in input order."""
    model.to(device).eval()
    order = np.argsort(source.lengths(), kind="stable")
    outputs: list[list[int]] = [[] for _ in range(len(source))]
    start = time.perf_counter()
    for first in tqdm(range(0, len(order), batch_size), desc="translate", unit=" batches", mininterval=10):
        indices = order[first:first + batch_size]
        source_ids = pad_batch([source[i] for i in indices], tokenizer.pad_id).to(device)
        bert_states = bert_padding = None
        if bert is not None:
            bert_states, bert_padding = bert(pad_batch([bert_source[i] for i in indices], bert.pad_id))
        best = beam_search(model, source_ids, tokenizer.bos_id, tokenizer.eos_id, search, bert_states, bert_padding)
        for index, ids in zip(indices, best):
            outputs[index] = ids
    seconds = time.perf_counter() - start
    return Translation([tokenizer.decode(ids, target_lang) for ids in outputs], seconds)


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacreBLEU (13a tokenisation, mixed case) of detokenised text against raw references."""
    return bleu_with_signature(hypotheses, references)[0]


def bleu_with_signature(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, str]:
    """The BLEU score and sacreBLEU's signature string (what to quote next to the figure)."""
    from sacrebleu.metrics import BLEU

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    metric = BLEU()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return float(score.score), str(metric.get_signature())


def set_threads(threads: int) -> None:
    torch.set_num_threads(max(int(threads), 1))
