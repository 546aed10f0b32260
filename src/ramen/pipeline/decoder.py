"""The stages of a decoder source: foreign initialisation and bilingual causal training.

They mirror :func:`ramen.pipeline.initialise.initialise_foreign` and
:func:`ramen.pipeline.train.train_bilingual`, which hand over to them when the source checkpoint
is a causal LM (ramen.modeling.sources.source_family). The initialiser registry is the same;
what differs is the output layer: a source that does not tie it to the input table gets foreign
output rows made by the same mixture over its output rows, and a source whose output layer has
a bias gets a foreign bias.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ramen.errors import ConfigError
from ramen.io import atomic_path
from ramen.modeling.causal import BilingualCausalLM, ForeignTables, special_token_ids
from ramen.modeling.sources import DECODER, load_source_causal_lm, load_source_tokenizer, source_parts

def save_source_causal(source_dir: str | os.PathLike, out_dir: str | os.PathLike,
                       metrics_out: str | os.PathLike | None = None) -> None:
    """The decoder source as a standard Hugging Face directory (a GGUF file dequantised to fp32), where
    an encoder source gets its warmed-up masked-LM head: a causal LM already predicts its tokens,
    and every later stage then reads one kind of directory."""
    model = load_source_causal_lm(source_dir)
    tokenizer = load_source_tokenizer(source_dir)
    with atomic_path(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    if metrics_out is not None:
        with atomic_path(metrics_out) as tmp:
            Path(tmp).write_text("step,lr\n")  # no training: the header only, as for 0 steps


def initialise_foreign_causal(method: str, source_dir: str | os.PathLike, foreign_tokenizer_dir: str | os.PathLike,
                              loaded: Mapping[str, object], seed: int, out_path: str | os.PathLike,
                              stats_path: str | os.PathLike, settings: Mapping | None = None) -> dict:
    """The foreign input table (and output rows, bias, as the source has them) by the named initialiser.

    ``loaded`` are the initialiser's inputs, read (ramen.pipeline.initialise.INPUT_LOADERS) and keyed
    by its keyword arguments.

    Writes ``embeddings``, ``supported`` and, where the source has them, ``output`` (untied output
    rows) and ``bias`` to ``out_path``; the initialisation statistics to ``stats_path``.
    """
    from ramen.initializers import get_entry
    from ramen.initializers.common import apply_mixture, initialisation_stats
    from ramen.vocab.tokenizer import load_tokenizer, ordered_vocab

    entry = get_entry(method)
    if entry.from_scratch:
        raise ConfigError(f"variants.*.init: {method}", "a decoder source is not trained from scratch here",
                          "choose another initialiser for decoder sources")
    source_tokenizer = load_source_tokenizer(source_dir)
    foreign_tokenizer = load_tokenizer(foreign_tokenizer_dir)
    parts = source_parts(load_source_causal_lm(source_dir), source_tokenizer)
    bias = parts.output_bias if parts.output_bias is not None else torch.zeros(parts.input_embeddings.shape[0])
    foreign_vocab, source_vocab = ordered_vocab(foreign_tokenizer), ordered_vocab(source_tokenizer)
    special = list(foreign_tokenizer.all_special_tokens)

    def initialise(matrix: torch.Tensor):
        return entry(matrix, bias, foreign_vocab, source_vocab, **{"alpha": None, **loaded, **dict(settings or {})},
                     generator=torch.Generator().manual_seed(seed), special_tokens=special)

    result = initialise(parts.input_embeddings)
    tensors = {"embeddings": result.embeddings, "supported": result.supported.to(torch.uint8)}
    if parts.output_bias is not None:
        tensors["bias"] = result.bias
    if not parts.tied:
        # The same rule over the output rows: the recorded mixture when the initialiser mixes,
        # otherwise the initialiser again (equally seeded) on the output rows.
        if result.mixture is not None:
            tensors["output"], _, _ = apply_mixture(result.mixture, parts.output_rows,
                                                    generator=torch.Generator().manual_seed(seed))
        else:
            tensors["output"] = initialise(parts.output_rows).embeddings
    stats = {"method": method, "seed": seed, "tied": parts.tied, "output_bias": parts.output_bias is not None,
             **initialisation_stats(result, loaded.get("alpha"))}
    with atomic_path(out_path) as tmp:
        save_file({name: tensor.detach().float().contiguous() if name != "supported" else tensor.contiguous()
                   for name, tensor in tensors.items()}, str(tmp))
    with atomic_path(stats_path) as tmp:
        Path(tmp).write_text(json.dumps(stats, indent=2, default=float))
    return stats


def foreign_tables(path: str | os.PathLike, rows: int, lang: str) -> ForeignTables:
    """A language's initial tables (initialise_foreign_causal's file), checked against its tokenizer."""
    tensors = load_file(str(path))
    if tensors["embeddings"].shape[0] != rows:
        raise ConfigError(f"languages.{lang}", f"initial table {path} has {tensors['embeddings'].shape[0]} rows "
                          f"but the tokenizer has {rows}", "rerun the init rule for this language")
    return ForeignTables(tensors["embeddings"], tensors.get("output"), tensors.get("bias"))


def causal_training(source_dir: str | os.PathLike, foreign: Mapping[str, Mapping[str, str]],
                    data_dirs: Mapping[str, str], settings, source_lang: str = "en", objective: Mapping | None = None,
                    exclusions: Mapping[str, str] | None = None):
    """The bilingual causal LM and its next-token objective on every language, the tokenizers and the
    run's objective settings: what :func:`ramen.pipeline.train.train_bilingual` trains and exports for a
    causal-LM source (arguments as there)."""
    from ramen.objectives import OBJECTIVES, get_entry, split_spec
    from ramen.objectives.base import BatchShape, ObjectiveSettings
    from ramen.vocab.encode import load_stream
    from ramen.vocab.tokenizer import load_tokenizer

    name, values = split_spec(objective)
    entry = get_entry(name)
    if entry.family != DECODER:
        causal = sorted(key for key, entry in OBJECTIVES.items() if entry.family == DECODER)
        raise ConfigError("variants.*.objective", f"'{name}' is a masked-LM objective; the source is a causal LM",
                          f"set the variant's objective to one of {causal}")
    tokenizers = {source_lang: load_source_tokenizer(source_dir)}
    initial = {}
    for lang, paths in foreign.items():
        tokenizers[lang] = load_tokenizer(paths["tokenizer"])
        initial[lang] = foreign_tables(paths["init"], len(tokenizers[lang]), lang)
    model = BilingualCausalLM(load_source_causal_lm(source_dir), source_lang, initial)
    streams = {lang: load_stream(data_dirs[lang], exclude=(exclusions or {}).get(lang)) for lang in model.languages}
    for lang in model.languages:
        if streams[lang].vocab_size != len(tokenizers[lang]):
            raise ConfigError(f"languages.{lang}", f"{data_dirs[lang]} was encoded with another vocabulary",
                              "rerun the encode rule for this language")
    specials = {lang: special_token_ids(tokenizers[lang]) for lang in model.languages}
    trained = entry.load().build(model, streams, specials, BatchShape.of(settings),
                                 ObjectiveSettings.from_config(values))
    return trained, tokenizers, {"name": name, **values}
