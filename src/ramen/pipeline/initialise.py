"""Foreign initialisation, the rule ``init_foreign`` calls: an initialiser of the registry
(:mod:`ramen.initializers`) run on the source model's tables, with the inputs its entry names
read by :data:`INPUT_LOADERS`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import save_file

from ramen.errors import ConfigError
from ramen.initializers import get_entry
from ramen.initializers.common import initialisation_stats
from ramen.io import atomic_path
from ramen.modeling.bilingual import BilingualMaskedLM, load_source_mlm
from ramen.modeling.sources import DECODER, source_family
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
    A causal-LM source also gets untied output rows where it has them (ramen.pipeline.decoder).
    """
    entry = get_entry(method)
    unknown = sorted(set(inputs) - set(entry.inputs))
    if unknown:
        raise ConfigError(f"variants.*.init: {method}", f"inputs {unknown} are not inputs of this initialiser",
                          f"it takes {sorted(entry.inputs)}")
    if source_family(source_mlm_dir) == DECODER:
        from ramen.pipeline.decoder import initialise_foreign_causal

        loaded = {entry.inputs[kind]: INPUT_LOADERS[kind](path) for kind, path in inputs.items() if path}
        return initialise_foreign_causal(method, source_mlm_dir, foreign_tokenizer_dir, loaded, seed, out_path,
                                         stats_path, settings)
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
