"""The stages of a causal-LM source (ramen.families: ``causal-lm``): a byte-level BPE foreign
vocabulary, the source saved as a standard directory (a GGUF file dequantised), and the
bilingual causal LM (ramen.modeling.causal): an input table per language and, where the source
does not tie them, output rows of its own (a bias where the source's output layer has one).

With ``vocabulary: extend`` the source's own tokenizer gains foreign tokens instead
(ramen.vocab.extend), their rows come from an initialiser (ramen.initializers.extension), and one
model reads and writes both languages (ramen.modeling.causal, the same class).

Served and tested (tests/unit/test_families.py): Llama (tied, untied), Mistral, Qwen2, Qwen3, Gemma
1-3 (text models), Phi-3, OLMo-2, BioGPT, besides GPT-2, Pythia and Phi. A source whose forward the model
cannot reproduce is refused from its config.json by the registry's ``check_config``
(ramen.modeling.layouts)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from safetensors.torch import load_file

from ramen.errors import InputFormatError
from ramen.io import atomic_path
from ramen.modeling.causal import BilingualCausalLM, ForeignTables, special_token_ids
from ramen.modeling.sources import causal_lm_parts as source_parts
from ramen.modeling.sources import load_source_causal_lm, load_source_tokenizer
from ramen.training.distributed import is_main_process
from ramen.vocab.byte_bpe import learn_byte_vocabulary as learn_vocabulary

__all__ = ["learn_vocabulary", "prepare_source", "load_source", "source_parts", "bilingual_model", "special_ids",
           "extend_vocabulary", "initialise_extension", "extended_model"]

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
        # A stale file, not a setting: the init rule ran against another tokenizer.
        raise InputFormatError(path, None, f"{tensors['embeddings'].shape[0]} rows but {lang}'s tokenizer has "
                               f"{rows}", "rerun the init rule for this language")
    return ForeignTables(tensors["embeddings"], tensors.get("output"), tensors.get("bias"))


def bilingual_model(source_dir: str | os.PathLike, source_lang: str, foreign: Mapping[str, str | os.PathLike],
                    rows: Mapping[str, int], *, from_scratch: bool = False, seed: int = 0) -> BilingualCausalLM:
    """The bilingual causal LM: the source's blocks, English table and output layer, and each
    foreign language's initial tables (``foreign``: language -> init file, of ``rows`` rows)."""
    initial = {lang: foreign_tables(path, rows[lang], lang) for lang, path in foreign.items()}
    return BilingualCausalLM(load_source_causal_lm(source_dir), source_lang, initial)


def extend_vocabulary(text_path: str | os.PathLike, source_dir: str | os.PathLike, tokenizer_out: str | os.PathLike,
                      *, new_tokens: int, min_frequency: int, keep_text: str | os.PathLike | None = None,
                      keep_lines: int = 0) -> dict:
    """The source's tokenizer extended by up to ``new_tokens`` tokens learned on the foreign text,
    none of which applies to a word of the first ``keep_lines`` lines of ``keep_text`` (source-language
    text); the extension's summary (its record without the per-token list)."""
    from ramen.vocab.extend import extend_tokenizer

    record = extend_tokenizer(load_source_tokenizer(source_dir), text_path, tokenizer_out, new_tokens=new_tokens,
                              min_frequency=min_frequency, keep=() if keep_text is None else keep_text,
                              keep_lines=keep_lines)
    return {key: value for key, value in record.items() if key not in ("tokens", "new_ids")}


def initialise_extension(method: str, source_dir: str | os.PathLike, tokenizer_dir: str | os.PathLike,
                         loaded: Mapping, seed: int, *, output_init: str = "input"):
    """The extended tables (source rows unchanged, new rows by ``method``, new output rows by
    ``output_init``) and their statistics."""
    import json

    from ramen.initializers.extension import initialise_new_rows
    from ramen.vocab.extend import RECORD
    from ramen.vocab.tokenizer import load_tokenizer

    source_tokenizer = load_source_tokenizer(source_dir)
    record = json.loads((Path(tokenizer_dir) / RECORD).read_text(encoding="utf-8"))
    model = load_source_causal_lm(source_dir)
    return initialise_new_rows(method, source_parts(model, source_tokenizer), source_tokenizer,
                               load_tokenizer(tokenizer_dir), record, seed=seed, inputs=loaded,
                               output_init=output_init, model=model)


def extended_model(source_dir: str | os.PathLike, source_lang: str, lang: str, init_path: str | os.PathLike,
                   first: int) -> BilingualCausalLM:
    """One causal LM over the extended vocabulary (the source's ``first`` tokens, then the new
    ones) that trains on the source and the foreign language's text alike."""
    tensors = load_file(str(init_path))
    tables = ForeignTables(tensors["embeddings"], tensors.get("output"), tensors.get("bias"))
    return BilingualCausalLM.extended(load_source_causal_lm(source_dir), tables, first, (source_lang, lang))
