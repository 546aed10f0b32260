"""The training runs the rules launch (through :mod:`ramen.pipeline.launch`): the English head's
warm-up and bilingual training, each a training objective on the core's step loop.

Each function reads and writes standard files (Hugging Face directories,
safetensors, TSV/CSV/JSON), so Snakemake rules, tests and notebooks call them alike.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file

from ramen.vocab.encode import load_stream
from ramen.errors import ConfigError
from ramen.io import atomic_path
from ramen.modeling.bilingual import BilingualMaskedLM, load_source_mlm
from ramen.modeling.sources import DECODER, source_family
from ramen.training.batches import SpecialIds
from ramen.training.distributed import is_main_process
from ramen.training.trainer import TrainSettings, run_fingerprint, train
from ramen.vocab.tokenizer import load_tokenizer

log = logging.getLogger(__name__)


def finish_training(rows: list[dict], live_metrics: Path, metrics_out: str | os.PathLike) -> None:
    """Copy the metrics kept beside the checkpoints to the rule's output (a header only for 0 steps)."""
    with atomic_path(metrics_out) as tmp:
        if live_metrics.exists():
            shutil.copyfile(live_metrics, tmp)
        else:
            tmp.write_text("step,lr\n")


def warmup_head(source_model_dir: str | os.PathLike, english_data_dir: str | os.PathLike,
                settings: TrainSettings, out_dir: str | os.PathLike, checkpoint_dir: str | os.PathLike,
                metrics_out: str | os.PathLike, source_lang: str = "en", device: str = "cpu") -> None:
    """Train only the MLM head on English (masked-LM, ``settings.train``: the head) with the
    encoder frozen, then save an English masked LM.

    Encoder-only checkpoints (such as all-MiniLM-L6-v2) have no MLM head, and
    bilingual training needs one that already predicts English tokens. A causal-LM source predicts
    its tokens already: it is saved as a standard directory instead (ramen.pipeline.decoder).
    """
    from ramen.objectives import DEFAULT_OBJECTIVE, get_objective

    if source_family(source_model_dir) == DECODER:
        from ramen.pipeline.decoder import save_source_causal

        if is_main_process():
            save_source_causal(source_model_dir, out_dir, metrics_out)
        return
    from ramen.objectives.base import BatchShape, ObjectiveSettings

    tokenizer = load_tokenizer(source_model_dir)
    torch.manual_seed(settings.seed)  # a missing head is initialised randomly: make it reproducible
    model = BilingualMaskedLM(load_source_mlm(source_model_dir), source_lang)
    streams = {source_lang: load_stream(english_data_dir)}
    specials = {source_lang: SpecialIds.from_tokenizer(tokenizer)}
    objective = get_objective(DEFAULT_OBJECTIVE).build(model, streams, specials, BatchShape.of(settings),
                                                       ObjectiveSettings())
    checkpoint_dir = Path(checkpoint_dir) / run_fingerprint(settings, [source_model_dir],
                                                            {"name": DEFAULT_OBJECTIVE})
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


def train_bilingual(source_mlm_dir: str | os.PathLike, foreign: Mapping[str, Mapping[str, str]],
                    data_dirs: Mapping[str, str], settings: TrainSettings, out_dirs: Mapping[str, str],
                    checkpoint_dir: str | os.PathLike, metrics_out: str | os.PathLike,
                    source_lang: str = "en", device: str = "cpu", objective: Mapping | None = None,
                    pairs_dir: str | os.PathLike | None = None, from_scratch: bool = False,
                    exclusions: Mapping[str, str] | None = None) -> None:
    """Train the bilingual model with a training objective and export every language's side as a
    Hugging Face directory.

    ``foreign`` maps a language to {"init": safetensors path, "tokenizer": directory};
    ``data_dirs`` and ``out_dirs`` map every language (English included). ``objective``
    is {"name": ..., **its settings of the objectives config section} (ramen.objectives;
    None: masked-LM with default settings); ``pairs_dir`` holds the encoded translation pairs
    (encode_id_pairs) that objectives on pairs need. ``from_scratch``: the encoder and English
    table are drawn anew (seeded by the training seed); only the architecture and tokenizer stay.
    A causal-LM source trains a bilingual causal LM instead (ramen.pipeline.decoder).
    """
    from ramen.objectives import get_entry, split_spec

    if source_family(source_mlm_dir) == DECODER:
        if pairs_dir or from_scratch:
            raise ConfigError("variants.*", "a causal-LM source trains on monolingual text from its own weights",
                              "leave translation-pair objectives and init: scratch to masked-LM sources")
        from ramen.pipeline.decoder import causal_training

        trained, tokenizers, run = causal_training(source_mlm_dir, foreign, data_dirs, settings, source_lang,
                                                   objective, exclusions)
        starting_files = [source_mlm_dir, *(paths["init"] for paths in foreign.values())]
        return train_and_export(trained, tokenizers, settings, starting_files, run, checkpoint_dir, metrics_out,
                                out_dirs, device)
    from ramen.objectives.base import BatchShape, ObjectiveSettings

    name, values = split_spec(objective)
    entry = get_entry(name)
    objective_settings = ObjectiveSettings.from_config(values)
    tokenizers = {source_lang: load_tokenizer(source_mlm_dir)}
    initial = {}
    for lang, paths in foreign.items():
        tokenizers[lang] = load_tokenizer(paths["tokenizer"])
        tensors = load_file(paths["init"])
        if tensors["embeddings"].shape[0] != len(tokenizers[lang]):
            raise ConfigError(f"languages.{lang}", f"initial table {paths['init']} has "
                              f"{tensors['embeddings'].shape[0]} rows but the tokenizer has {len(tokenizers[lang])}",
                              "rerun the init rule for this language")
        initial[lang] = (tensors["embeddings"], tensors["bias"])
    source_mlm = load_source_mlm(source_mlm_dir)
    if from_scratch:
        source_mlm = fresh_model(source_mlm, settings.seed)
    model = BilingualMaskedLM(source_mlm, source_lang, initial)
    # exclusions: per language, sentences of its data its batches never draw (ramen.vocab.exclusions).
    streams = {lang: load_stream(data_dirs[lang], exclude=(exclusions or {}).get(lang)) for lang in model.languages}
    specials = {lang: SpecialIds.from_tokenizer(tokenizers[lang]) for lang in model.languages}
    for lang in model.languages:
        if streams[lang].vocab_size != len(tokenizers[lang]):
            raise ConfigError(f"languages.{lang}", f"{data_dirs[lang]} was encoded with another vocabulary",
                              "rerun the encode rule for this language")
    pairs = load_pairs(pairs_dir, name, [specials[lang] for lang in model.languages],
                       model.languages) if entry.uses_pairs else None
    trained = entry.load().build(model, streams, specials, BatchShape.of(settings), objective_settings, pairs)
    starting_files = [source_mlm_dir, *(paths["init"] for paths in foreign.values())]
    run = {"name": name, **values}
    if from_scratch:  # the same starting files as a random init: the run id must tell them apart
        run["from_scratch"] = True
    train_and_export(trained, tokenizers, settings, starting_files, run, checkpoint_dir, metrics_out, out_dirs,
                     device)


def train_and_export(trained, tokenizers: Mapping, settings: TrainSettings, starting_files, run: Mapping,
                     checkpoint_dir: str | os.PathLike, metrics_out: str | os.PathLike, out_dirs: Mapping[str, str],
                     device: str) -> None:
    """Train an objective (or resume it) under its run id, then export every language's side."""
    checkpoint_dir = Path(checkpoint_dir) / run_fingerprint(settings, starting_files, run)
    live = checkpoint_dir / "metrics.csv"
    rows = train(trained, settings, checkpoint_dir, live, device=device)
    if not is_main_process():  # under torchrun, rank 0 writes the outputs
        return
    finish_training(rows, live, metrics_out)
    trained.to("cpu")
    for lang in trained.model.languages:
        trained.export_language(lang, tokenizers[lang], out_dirs[lang])


def load_pairs(pairs_dir: str | os.PathLike | None, name: str, specials, langs):
    """The encoded translation pairs an objective on pairs trains on (source side first)."""
    from ramen.objectives.base import PairedStreams

    if not pairs_dir:
        raise ConfigError("variants.*.objective", f"objective '{name}' needs encoded translation pairs",
                          "configure `parallel` for this language")
    pairs = PairedStreams(load_stream(Path(pairs_dir) / "source"), load_stream(Path(pairs_dir) / "foreign"))
    for side, special, lang in zip((pairs.source, pairs.foreign), specials, langs):
        if side.vocab_size != special.vocab_size:
            raise ConfigError(f"languages.{lang}", f"{pairs_dir} was encoded with another vocabulary",
                              "rerun the encode_pairs rule for this language")
    return pairs
