"""The stages of a masked-LM source (ramen.families: ``masked-lm``): a fastBPE foreign vocabulary,
the English head warmed up before anything else, and the bilingual masked LM
(ramen.modeling.bilingual) with one tied output layer and bias per language."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file

from ramen.errors import InputFormatError
from ramen.families.metrics import finish_training
from ramen.modeling.bilingual import BilingualMaskedLM, load_source_mlm
from ramen.modeling.sources import masked_lm_parts as source_parts
from ramen.training.batches import SpecialIds
from ramen.training.distributed import is_main_process
from ramen.training.trainer import TrainSettings, run_fingerprint, train
from ramen.vocab.bpe import train_foreign_tokenizer as learn_vocabulary
from ramen.vocab.encode import load_stream
from ramen.vocab.tokenizer import load_tokenizer

__all__ = ["learn_vocabulary", "prepare_source", "load_source", "source_parts", "bilingual_model", "special_ids"]

load_source = load_source_mlm
special_ids = SpecialIds.from_tokenizer


def prepare_source(source_dir: str | os.PathLike, english_data_dir: str | os.PathLike, settings: TrainSettings,
                   out_dir: str | os.PathLike, checkpoint_dir: str | os.PathLike, metrics_out: str | os.PathLike,
                   source_lang: str = "en", device: str = "cpu") -> None:
    """Train only the MLM head on English (masked-LM, ``settings.train``: the head) with the
    encoder frozen, then save an English masked LM.

    Encoder-only checkpoints (such as all-MiniLM-L6-v2) have no MLM head, and bilingual training
    needs one that already predicts English tokens.
    """
    from ramen.objectives import DEFAULT_OBJECTIVE, get_objective
    from ramen.objectives.base import BatchShape, ObjectiveSettings

    tokenizer = load_tokenizer(source_dir)
    torch.manual_seed(settings.seed)  # a missing head is initialised randomly: make it reproducible
    model = BilingualMaskedLM(load_source_mlm(source_dir), source_lang)
    streams = {source_lang: load_stream(english_data_dir)}
    specials = {source_lang: SpecialIds.from_tokenizer(tokenizer)}
    objective = get_objective(DEFAULT_OBJECTIVE).build(model, streams, specials, BatchShape.of(settings),
                                                       ObjectiveSettings())
    checkpoint_dir = Path(checkpoint_dir) / run_fingerprint(settings, [source_dir], {"name": DEFAULT_OBJECTIVE})
    live = checkpoint_dir / "metrics.csv"
    rows = train(objective, settings, checkpoint_dir, live, device=device)
    if is_main_process():  # under torchrun, rank 0 writes the outputs
        finish_training(rows, live, metrics_out)
        objective.to("cpu").export_language(source_lang, tokenizer, out_dir)


def fresh_model(source_mlm: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A model of the source's architecture with every weight drawn anew (the from-scratch baseline)."""
    from transformers import AutoModelForMaskedLM

    torch.manual_seed(seed)
    return AutoModelForMaskedLM.from_config(source_mlm.config, attn_implementation="sdpa")


def bilingual_model(source_dir: str | os.PathLike, source_lang: str, foreign: Mapping[str, str | os.PathLike],
                    rows: Mapping[str, int], *, from_scratch: bool = False, seed: int = 0) -> BilingualMaskedLM:
    """The bilingual masked LM: the source's encoder and head, each foreign language's initial
    table and bias (``foreign``: language -> init file, of ``rows`` rows). ``from_scratch``: the
    encoder and English table are drawn anew (seeded by ``seed``)."""
    initial = {}
    for lang, path in foreign.items():
        tensors = load_file(path)
        if tensors["embeddings"].shape[0] != rows[lang]:
            # A stale file, not a setting: the init rule ran against another tokenizer.
            raise InputFormatError(path, None, f"{tensors['embeddings'].shape[0]} rows but {lang}'s tokenizer has "
                                   f"{rows[lang]}", "rerun the init rule for this language")
        initial[lang] = (tensors["embeddings"], tensors["bias"])
    source = load_source_mlm(source_dir)
    if from_scratch:
        source = fresh_model(source, seed)
    return BilingualMaskedLM(source, source_lang, initial)
