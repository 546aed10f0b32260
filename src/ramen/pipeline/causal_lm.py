"""The stages of a causal-LM source (ramen.families: ``causal-lm``): a byte-level BPE foreign
vocabulary, the source saved as a standard directory (a GGUF file dequantised), and the
bilingual causal LM (ramen.modeling.causal): an input table per language and, where the source
does not tie them, output rows of its own (a bias where the source's output layer has one)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from safetensors.torch import load_file

from ramen.errors import ConfigError
from ramen.io import atomic_path
from ramen.modeling.causal import BilingualCausalLM, ForeignTables, special_token_ids
from ramen.modeling.sources import causal_lm_parts as source_parts
from ramen.modeling.sources import load_source_causal_lm, load_source_tokenizer
from ramen.training.distributed import is_main_process
from ramen.vocab.byte_bpe import learn_byte_vocabulary as learn_vocabulary

__all__ = ["learn_vocabulary", "prepare_source", "load_source", "source_parts", "bilingual_model", "special_ids"]

load_source = load_source_causal_lm
special_ids = special_token_ids


def prepare_source(source_dir: str | os.PathLike, english_data_dir: str | os.PathLike, settings,
                   out_dir: str | os.PathLike, checkpoint_dir: str | os.PathLike, metrics_out: str | os.PathLike,
                   source_lang: str = "en", device: str = "cpu") -> None:
    """The source as a standard Hugging Face directory (a GGUF file dequantised to fp32): a causal LM
    predicts its tokens already, so nothing trains, and every later stage reads one kind of directory."""
    if not is_main_process():
        return
    model = load_source_causal_lm(source_dir)
    tokenizer = load_source_tokenizer(source_dir)
    with atomic_path(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    with atomic_path(metrics_out) as tmp:
        Path(tmp).write_text("step,lr\n")  # no training: the header only, as for 0 steps


def foreign_tables(path: str | os.PathLike, rows: int, lang: str) -> ForeignTables:
    """A language's initial tables (ramen.pipeline.initialise's file), checked against its tokenizer."""
    tensors = load_file(str(path))
    if tensors["embeddings"].shape[0] != rows:
        raise ConfigError(f"languages.{lang}", f"initial table {path} has {tensors['embeddings'].shape[0]} rows "
                          f"but the tokenizer has {rows}", "rerun the init rule for this language")
    return ForeignTables(tensors["embeddings"], tensors.get("output"), tensors.get("bias"))


def bilingual_model(source_dir: str | os.PathLike, source_lang: str, foreign: Mapping[str, str | os.PathLike],
                    rows: Mapping[str, int], *, from_scratch: bool = False, seed: int = 0) -> BilingualCausalLM:
    """The bilingual causal LM: the source's blocks, English table and output layer, and each
    foreign language's initial tables (``foreign``: language -> init file, of ``rows`` rows)."""
    initial = {lang: foreign_tables(path, rows[lang], lang) for lang, path in foreign.items()}
    return BilingualCausalLM(load_source_causal_lm(source_dir), source_lang, initial)
