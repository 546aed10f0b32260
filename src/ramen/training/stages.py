"""The RAMEN stages that touch models: head warm-up, foreign initialisation, bilingual training.

Each function reads and writes standard files (Hugging Face directories,
safetensors, TSV/CSV/JSON), so Snakemake rules, tests and notebooks call them alike.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ramen.vocab.encode import load_stream
from ramen.errors import ConfigError, RamenError
from ramen.initializers.common import initialisation_stats
from ramen.io import atomic_path
from ramen.modeling.bilingual import BilingualMaskedLM, load_source_mlm
from ramen.training.batches import SpecialIds
from ramen.training.core import is_main_process
from ramen.training.trainer import TrainSettings, run_fingerprint, train

log = logging.getLogger(__name__)


def load_tokenizer(directory: str | os.PathLike):
    """The tokenizer saved in a model, vocabulary or classifier directory (the one loader)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(directory)
    except (OSError, ValueError) as error:
        raise RamenError(f"{directory}: cannot load the tokenizer: {error}") from error


def ordered_vocab(tokenizer) -> list[str]:
    """Token strings in id order."""
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    tokens = [token for token, _ in by_id]
    if [index for _, index in by_id] != list(range(len(tokens))):
        raise ConfigError("tokenizer", f"{tokenizer.name_or_path}: token ids are not contiguous")
    return tokens


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
    bilingual training needs one that already predicts English tokens.
    """
    from ramen.objectives import DEFAULT_OBJECTIVE, get_objective
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


def _load_fasttext_model(path):
    import fasttext

    if Path(path).suffix != ".bin":
        raise ConfigError("peers.fasttext_models", f"{path} is not a fastText .bin model",
                          "WECHSEL needs the character n-grams that only a .bin model holds")
    return fasttext.load_model(str(path))


def _load_token_vectors(path) -> dict:
    from ramen.alignment.vectors import read_vec

    vectors = read_vec(path)
    return dict(zip(vectors.words, vectors.vectors))


def _load_alpha(path):
    from ramen.alignment.parallel import load_alpha

    return load_alpha(path)


def _load_char_module(path):
    from ramen.char2subword.module import load_module

    return load_module(path)[0]


def _load_dictionary(path):
    from ramen.reports.bli import read_dictionary

    return read_dictionary(path)


# How each kind of initialiser input (InitializerEntry.inputs) is read.
INPUT_LOADERS = {
    "parallel_alpha": _load_alpha,
    "monolingual_alpha": _load_alpha,
    "char_module": _load_char_module,
    "source_fasttext": _load_fasttext_model,
    "foreign_fasttext": _load_fasttext_model,
    "wechsel_dictionary": _load_dictionary,
    "token_vectors": _load_token_vectors,
}


def initialise_foreign(method: str, source_mlm_dir: str | os.PathLike, foreign_tokenizer_dir: str | os.PathLike,
                       inputs: Mapping[str, str | os.PathLike], seed: int, out_path: str | os.PathLike,
                       stats_path: str | os.PathLike, settings: Mapping | None = None) -> dict:
    """Build the foreign embedding table and output bias with the named initialiser.

    ``inputs`` maps the input kinds of the initialiser's registry entry to files (an
    optional kind may be absent); ``settings`` are its keyword settings (its config section).
    """
    from ramen.initializers import get_entry

    entry = get_entry(method)
    unknown = sorted(set(inputs) - set(entry.inputs))
    if unknown:
        raise ConfigError(f"variants.*.init: {method}", f"inputs {unknown} are not inputs of this initialiser",
                          f"it takes {sorted(entry.inputs)}")
    source_tokenizer = load_tokenizer(source_mlm_dir)
    foreign_tokenizer = load_tokenizer(foreign_tokenizer_dir)
    source = BilingualMaskedLM(load_source_mlm(source_mlm_dir), "source")
    generator = torch.Generator().manual_seed(seed)
    loaded = {entry.inputs[kind]: INPUT_LOADERS[kind](path) for kind, path in inputs.items() if path}
    result = entry(
        source.input_embeddings("source").weight.detach(), source.output_bias("source").detach(),
        ordered_vocab(foreign_tokenizer), ordered_vocab(source_tokenizer),
        **{"alpha": None, **loaded, **dict(settings or {})},
        generator=generator, special_tokens=list(foreign_tokenizer.all_special_tokens),
    )
    alpha = loaded.get("alpha")
    stats = {"method": method, "seed": seed, **initialisation_stats(result, alpha)}
    with atomic_path(out_path) as tmp:
        save_file({"embeddings": result.embeddings.contiguous(), "bias": result.bias.contiguous(),
                   "supported": result.supported.to(torch.uint8).contiguous()}, str(tmp))
    with atomic_path(stats_path) as tmp:
        Path(tmp).write_text(json.dumps(stats, indent=2, default=float))
    return stats


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
    """
    from ramen.objectives import get_entry, split_spec
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
    checkpoint_dir = Path(checkpoint_dir) / run_fingerprint(settings, starting_files, run)
    live = checkpoint_dir / "metrics.csv"
    rows = train(trained, settings, checkpoint_dir, live, device=device)
    if not is_main_process():  # under torchrun, rank 0 writes the outputs
        return
    finish_training(rows, live, metrics_out)
    trained.to("cpu")
    for lang in model.languages:
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
