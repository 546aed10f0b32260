"""Foreign initialisation, the rule ``init_foreign`` calls: an initialiser of the registry
(:mod:`ramen.initializers`) run on the source model's tables, with the inputs its entry names
read by :data:`INPUT_LOADERS`; one that fits rows in a loop resumes from checkpoints.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import save_file

from ramen.errors import ConfigError
from ramen.initializers import check_init_vocabulary
from ramen.families import FAMILIES, check_init, check_vocabulary, source_family
from ramen.initializers.common import initialisation_stats
from ramen.initializers.extension import initialise_rows
from ramen.initializers.pieces import segment_tokens
from ramen.io import atomic_path
from ramen.training.checkpoints import fingerprint, remove_run
from ramen.vocab.tokenizer import load_tokenizer, ordered_vocab


def _load_fasttext_model(path):
    import fasttext

    if Path(path).suffix != ".bin":
        raise ConfigError("peers.fasttext_models", f"{path} is not a fastText .bin model",
                          "WECHSEL needs the character n-grams that only a .bin model holds")
    return fasttext.load_model(str(path))


def _load_token_vectors(path) -> dict:
    from ramen.data.vectors import read_vec

    vectors = read_vec(path)
    return dict(zip(vectors.words, vectors.vectors))


def _load_alpha(path):
    from ramen.alignment.parallel import load_alpha

    return load_alpha(path)


def _load_char_module(path):
    from ramen.char2subword.module import load_module

    return load_module(path)[0]


def _load_dictionary(path):
    from ramen.data.dictionaries import read_dictionary

    return read_dictionary(path)


def _load_encoded(path):
    from ramen.vocab.encode import load_stream

    return load_stream(path)


# How each kind of initialiser input (InitializerEntry.inputs) is read.
INPUT_LOADERS = {
    "parallel_alpha": _load_alpha,
    "monolingual_alpha": _load_alpha,
    "char_module": _load_char_module,
    "source_fasttext": _load_fasttext_model,
    "foreign_fasttext": _load_fasttext_model,
    "wechsel_dictionary": _load_dictionary,
    "token_vectors": _load_token_vectors,
    "foreign_encoded": _load_encoded,
}


def initialise_foreign(method: str, source_dir: str | os.PathLike, foreign_tokenizer_dir: str | os.PathLike,
                       inputs: Mapping[str, str | os.PathLike], seed: int, out_path: str | os.PathLike,
                       stats_path: str | os.PathLike, settings: Mapping | None = None,
                       vocabulary: str = "replace", output_init: str = "input",
                       checkpoint_dir: str | os.PathLike | None = None) -> dict:
    """Build the foreign input table (and output rows and bias, as the source has them) with the
    named initialiser, for a source of any family (ramen.families: its ``load_source``).

    ``inputs`` maps the input kinds of the initialiser's registry entry to files (an
    optional kind may be absent); ``settings`` are its keyword settings (its config section).

    Writes ``embeddings``, ``supported`` and, where the source has them, ``bias`` (an output
    bias: every masked LM's) and ``output`` (output rows not tied to the input table) to
    ``out_path``; the initialisation statistics to ``stats_path``.

    ``vocabulary: extend``: ``foreign_tokenizer_dir`` is the source's tokenizer extended
    (ramen.vocab.extend) and the tables written are the extended ones, the source's rows first and
    unchanged, the new tokens' rows by the initialiser (the family's ``initialise_extension``), the
    new output rows by ``output_init`` (ramen.initializers.extension.OUTPUT_RULES).

    An initialiser that reads pieces (``InitializerEntry.pieces``) gets each foreign token's
    segmentation by the source tokenizer (ramen.initializers.pieces). One that fits rows in a loop
    (``InitializerEntry.checkpoints``) checkpoints under ``checkpoint_dir``, in a directory named by
    its settings, seed and input files (a fingerprint: other ones start afresh), which is removed
    once the tables are saved. The stats' ``seconds`` is the initialiser's wall time.
    """
    entry = check_init_vocabulary(method, vocabulary, setting=f"variants.*.init: {method}")
    if vocabulary == "replace" and output_init != "input":
        raise ConfigError("variants.*.output_init", f"'{output_init}' chooses the new output rows of an "
                          "extension; a replaced vocabulary's output rows follow its input rows",
                          "use output_init: input, or vocabulary: extend")
    unknown = sorted(set(inputs) - set(entry.inputs))
    if unknown:
        raise ConfigError(f"variants.*.init: {method}", f"inputs {unknown} are not inputs of this initialiser",
                          f"it takes {sorted(entry.inputs)}")
    family = source_family(source_dir)
    check_init(family, entry.from_scratch, f"variants.*.init: {method}", f" {source_dir}")
    loaded = {entry.inputs[kind]: INPUT_LOADERS[kind](path) for kind, path in inputs.items() if path}
    run_dir = None
    if entry.checkpoints:
        if checkpoint_dir is not None:
            run_dir = Path(checkpoint_dir) / fingerprint(
                {"method": method, "seed": seed, "settings": dict(settings or {})},
                [source_dir, foreign_tokenizer_dir, *(inputs[kind] for kind in sorted(inputs) if inputs[kind])])
        loaded["checkpoint_dir"] = run_dir
    stats = _build_and_save(entry, method, family, source_dir, foreign_tokenizer_dir, loaded, seed, out_path,
                            stats_path, settings, vocabulary, output_init)
    if run_dir is not None:
        remove_run(run_dir)  # the tables are the job's output now
    return stats


def _build_and_save(entry, method: str, family: str, source_dir, foreign_tokenizer_dir, loaded: dict, seed: int,
                    out_path, stats_path, settings: Mapping | None, vocabulary: str, output_init: str) -> dict:
    stages = FAMILIES[family]
    if vocabulary != "replace":
        check_vocabulary(family, vocabulary, "variants.*.vocabulary", f" {source_dir}")
        tables, stats = stages.load("initialise_extension")(method, source_dir, foreign_tokenizer_dir,
                                                            {"alpha": None, **loaded, **dict(settings or {})}, seed,
                                                            output_init=output_init)
        tensors = {"embeddings": tables.embeddings, "output": tables.output, "bias": tables.bias}
        return _save(tensors, {**stats, "vocabulary": vocabulary}, out_path, stats_path)
    source_tokenizer = load_tokenizer(source_dir)
    foreign_tokenizer = load_tokenizer(foreign_tokenizer_dir)
    parts = stages.load("source_parts")(stages.load("load_source")(source_dir), source_tokenizer)
    foreign_vocab, source_vocab = ordered_vocab(foreign_tokenizer), ordered_vocab(source_tokenizer)
    special = list(foreign_tokenizer.all_special_tokens)
    if entry.pieces:
        loaded["pieces"] = segment_tokens(foreign_vocab, source_tokenizer, special)
    # A replaced vocabulary's output rows follow its input rows' rule (output_init: input).
    new = initialise_rows(entry, parts.input_embeddings, parts.output_bias, foreign_vocab, source_vocab,
                          {"alpha": None, **loaded, **dict(settings or {})}, seed=seed, special_tokens=special,
                          output_rows=None if parts.tied else parts.output_rows)
    tensors = {"embeddings": new.embeddings, "supported": new.result.supported.to(torch.uint8), "bias": new.bias,
               "output": new.output}
    stats = {"method": method, "seed": seed, "tied": parts.tied, "output_bias": parts.output_bias is not None,
             "seconds": new.seconds, **initialisation_stats(new.result, loaded.get("alpha"))}
    return _save(tensors, stats, out_path, stats_path)


def _save(tensors: Mapping[str, torch.Tensor | None], stats: dict, out_path: str | os.PathLike,
          stats_path: str | os.PathLike) -> dict:
    with atomic_path(out_path) as tmp:
        save_file({name: tensor.detach().float().contiguous() if name != "supported" else tensor.contiguous()
                   for name, tensor in tensors.items() if tensor is not None}, str(tmp))
    with atomic_path(stats_path) as tmp:
        Path(tmp).write_text(json.dumps(stats, indent=2, default=float))
    return stats
