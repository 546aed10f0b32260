"""The training runs the rules launch (through :mod:`ramen.pipeline.launch`): the source's
preparation (a masked LM's English head warm-up) and bilingual training, each a training objective
on the core's step loop, for every source family: what differs by family is its registry entry's
(ramen.families), never a branch here.

Each function reads and writes standard files (Hugging Face directories,
safetensors, TSV/CSV/JSON), so Snakemake rules, tests and notebooks call them alike.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

from ramen.errors import ConfigError, InputFormatError
from ramen.families import FAMILIES, check_init, check_objective, check_vocabulary, source_entry, source_family
from ramen.families.metrics import finish_training
from ramen.training.distributed import is_main_process
from ramen.training.trainer import TrainSettings, run_fingerprint, train
from ramen.vocab.encode import load_stream
from ramen.vocab.tokenizer import load_tokenizer

log = logging.getLogger(__name__)


def warmup_head(source_dir: str | os.PathLike, english_data_dir: str | os.PathLike,
                settings: TrainSettings, out_dir: str | os.PathLike, checkpoint_dir: str | os.PathLike,
                metrics_out: str | os.PathLike, source_lang: str = "en", device: str = "cpu") -> None:
    """The source made ready for every later stage, as its family does it (ramen.families,
    ``prepare_source``): a masked LM's English head trained with the encoder frozen
    (``settings``), a causal LM saved as a standard directory. ``metrics_out``: the training's
    metrics (a header only when nothing trains)."""
    prepare = source_entry(source_dir).load("prepare_source")
    prepare(source_dir, english_data_dir, settings, out_dir, checkpoint_dir, metrics_out, source_lang, device)


def train_bilingual(source_dir: str | os.PathLike, foreign: Mapping[str, Mapping[str, str]],
                    data_dirs: Mapping[str, str], settings: TrainSettings, out_dirs: Mapping[str, str],
                    checkpoint_dir: str | os.PathLike, metrics_out: str | os.PathLike,
                    source_lang: str = "en", device: str = "cpu", objective: Mapping | None = None,
                    pairs_dir: str | os.PathLike | None = None, from_scratch: bool = False,
                    exclusions: Mapping[str, str] | None = None, vocabulary: str = "replace") -> None:
    """Train the bilingual model of the source's family with a training objective and export every
    language's side as a Hugging Face directory.

    ``foreign`` maps a language to {"init": safetensors path, "tokenizer": directory};
    ``data_dirs`` and ``out_dirs`` map every language (English included). ``objective``
    is {"name": ..., **its settings of the objectives config section} (ramen.objectives;
    None: masked-LM with default settings); ``pairs_dir`` holds the encoded translation pairs
    (encode_id_pairs) that objectives on pairs need. ``from_scratch``: the encoder and English
    table are drawn anew (seeded by the training seed); only the architecture and tokenizer stay.
    ``vocabulary: extend``: the one foreign language's tokenizer is the source's extended and its
    init file the extended tables; one model over that vocabulary trains on every language's text
    (each encoded with the extended tokenizer) and is every language's exported side. When
    ``train`` or a stage names ``lora``, the model's blocks get LoRA adapters (``settings.lora``);
    each exported side has them merged and keeps them in ``lora_adapter/`` (ramen.modeling.lora).
    """
    from ramen.objectives import get_entry, split_spec
    from ramen.objectives.base import BatchShape, ObjectiveSettings

    family = source_family(source_dir)
    stages = FAMILIES[family]
    name, values = split_spec(objective)
    entry = get_entry(name)
    check_objective(family, name, entry.family, "variants.*.objective", f" {source_dir}")
    check_init(family, from_scratch, "variants.*.init", f" {source_dir}")
    objective_settings = ObjectiveSettings.from_config(values)
    if vocabulary == "replace":
        tokenizers = {source_lang: load_tokenizer(source_dir)}
        for lang, paths in foreign.items():
            tokenizers[lang] = load_tokenizer(paths["tokenizer"])
        model = stages.load("bilingual_model")(
            source_dir, source_lang, {lang: paths["init"] for lang, paths in foreign.items()},
            {lang: len(tokenizers[lang]) for lang in foreign}, from_scratch=from_scratch, seed=settings.seed)
    else:
        check_vocabulary(family, vocabulary, "variants.*.vocabulary", f" {source_dir}")
        (lang, paths), = foreign.items()
        extended = load_tokenizer(paths["tokenizer"])
        tokenizers = {source_lang: extended, lang: extended}
        model = stages.load("extended_model")(source_dir, source_lang, lang, paths["init"],
                                              len(load_tokenizer(source_dir)))
    # exclusions: per language, sentences of its data its batches never draw (ramen.vocab.exclusions).
    streams = {lang: load_stream(data_dirs[lang], exclude=(exclusions or {}).get(lang)) for lang in model.languages}
    special_ids = stages.load("special_ids")
    specials = {lang: special_ids(tokenizers[lang]) for lang in model.languages}
    for lang in model.languages:
        if streams[lang].vocab_size != len(tokenizers[lang]):
            # A stale file, not a setting: the encoded data outlived its tokenizer.
            raise InputFormatError(data_dirs[lang], None, f"encoded with another vocabulary than {lang}'s tokenizer",
                                   "rerun the encode rule for this language")
    pairs = load_pairs(pairs_dir, name, [specials[lang] for lang in model.languages],
                       model.languages) if entry.uses_pairs else None
    trained = entry.load().build(model, streams, specials, BatchShape.of(settings), objective_settings, pairs)
    if settings.uses_lora:
        # Into the model the objective trains, before training: its checkpoints hold the adapters.
        trained.model.add_adapters(**asdict(settings.lora), seed=settings.seed)
    starting_files = [source_dir, *(paths["init"] for paths in foreign.values())]
    run = {"name": name, **values}
    if from_scratch:  # the same starting files as a random init: the run id must tell them apart
        run["from_scratch"] = True
    if vocabulary != "replace":
        run["vocabulary"] = vocabulary
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
            raise InputFormatError(pairs_dir, None, f"encoded with another vocabulary than {lang}'s tokenizer",
                                   "rerun the encode_pairs rule for this language")
    return pairs
