"""Source families: what kind of language model a source checkpoint is, and what that decides.

    masked-lm  a masked LM (BERT, RoBERTa, ...): fastBPE foreign vocabulary, masked-LM objectives
    causal-lm  a causal LM (Llama, Qwen, Mistral, GPT-2, Pythia, Phi, ... layouts; also as GGUF):
               byte-level BPE foreign vocabulary, next-token objectives

An encoder-decoder (T5, BART, ...) is refused by name. The family is read from the checkpoint
(``config.json``, or a GGUF file's ``general.architecture``), never configured.

This module is the registry and is torch-free: the workflow reads it while the job graph is
built, and :func:`check_source` there reads each source's metadata and file headers only
(ramen.data.checkpoint_headers): its family is known, its weights are there and readable, its
tokenizer loads and has the tokens the family needs, and every variant's objective is one the
family trains. An entry names its implementations as ``"module:function"`` strings, imported
when a job runs.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ramen.data.checkpoint_headers import Checkpoint, check_weights, read_checkpoint, read_tokenizer
from ramen.errors import ConfigError

USE_INSTEAD = "use a masked LM (BERT, RoBERTa) or a causal LM (Llama, Qwen, GPT-2, ...)"


@dataclass(frozen=True)
class FamilyEntry:
    """A source family and how to recognise and check it before torch is imported.

    ``architectures``: endings of the class names in config.json's ``architectures`` that mark
    it; ``auto_mapping``: the transformers Auto mapping whose model types are of this family
    (read from its source, not imported); ``tokens``: the special-token roles its tokenizer must
    have. Objectives say which family they train (``ObjectiveEntry.family``, ramen.objectives).
    """

    description: str
    architectures: tuple[str, ...]
    auto_mapping: str
    tokens: tuple[str, ...] = ()


# The registry, in the order a model type known to several mappings is decided (BERT-like configs
# are in the masked and the causal mapping: masked wins).
FAMILIES: dict[str, FamilyEntry] = {
    "masked-lm": FamilyEntry("a masked LM", ("ForMaskedLM",), "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
                             tokens=("pad", "unk", "mask")),
    "causal-lm": FamilyEntry("a causal LM", ("ForCausalLM", "LMHeadModel"), "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
}
ENCODER_DECODER_MAPPING = "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"


@functools.cache
def auto_model_types(mapping: str) -> frozenset[str]:
    """The model types of one of transformers' Auto mappings, read from its source file:
    importing transformers takes seconds and pulls in torch."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    source = Path(list(spec.submodule_search_locations)[0], "models", "auto", "modeling_auto.py")
    text = source.read_text(encoding="utf-8")
    block = re.search(rf"^{mapping} = OrderedDict\(\s*\[(.*?)^\s*\]\s*\)", text, re.MULTILINE | re.DOTALL)
    if block is None:
        raise RuntimeError(f"{source}: no {mapping}; this transformers version is not one ramen reads")
    return frozenset(re.findall(r'^\s*\(\s*"([^"]+)"\s*,', block.group(1), re.MULTILINE))


def recognise(config: Mapping, setting: str = "source.model", where: str = "") -> str:
    """The family of a checkpoint's config (a mapping: config.json, or a model config's
    ``to_dict()``): its declared architecture first, then its model type. ConfigError for an
    encoder-decoder or a type of no family; ``where`` names the file."""
    where = f"{where}: " if where else ""
    for architecture in config.get("architectures") or []:
        for name, entry in FAMILIES.items():
            if architecture.endswith(entry.architectures):
                return name
    model_type = config.get("model_type", "")
    if config.get("is_encoder_decoder") or model_type in auto_model_types(ENCODER_DECODER_MAPPING):
        raise ConfigError(setting, f"{where}'{model_type}' is an encoder-decoder model, which ramen does not "
                          "transfer", USE_INSTEAD)
    for name, entry in FAMILIES.items():
        if model_type in auto_model_types(entry.auto_mapping):
            return name
    raise ConfigError(setting, f"{where}model type '{model_type}' is neither a masked nor a causal LM",
                      USE_INSTEAD)


def checkpoint_family(checkpoint: Checkpoint, setting: str = "source.model") -> str:
    return recognise(checkpoint.config, setting, str(checkpoint.config_file))


def check_source(path, setting: str = "source.model", objectives: Mapping[str, str] | None = None,
                 trains: Mapping[str, str] | None = None) -> str:
    """Check a source checkpoint from its metadata and headers only; its family.

    ``objectives`` maps the key of each variant's objective (``variants.<name>.objective``) to
    the objective's name, ``trains`` every objective's name to the family it trains (the
    objective registry's): each variant's must be this family. Every problem is a ConfigError
    naming ``setting`` (or the variant's key) and the file.
    """
    checkpoint = read_checkpoint(path, setting)
    family = checkpoint_family(checkpoint, setting)
    entry = FAMILIES[family]
    check_weights(checkpoint, setting)
    tokenizer = read_tokenizer(checkpoint, setting)
    for role in entry.tokens:
        token = tokenizer.specials.get(role)
        if token is None:
            raise ConfigError(setting, f"the tokenizer of {tokenizer.file} defines no {role} token, which "
                              f"{entry.description} source needs", f"use {entry.description} whose tokenizer "
                              f"has {', '.join(entry.tokens)} tokens")
        if tokenizer.vocabulary is not None and token not in tokenizer.vocabulary:
            raise ConfigError(setting, f"the {role} token {token!r} of {tokenizer.file} is not in its vocabulary",
                              "download the model again, or fix its tokenizer files")
    trains = trains or {}
    for key, objective in (objectives or {}).items():
        if trains.get(objective, family) != family:
            fitting = [name for name, its in trains.items() if its == family]
            raise ConfigError(key, f"objective '{objective}' trains {FAMILIES[trains[objective]].description} but the "
                              f"source ({setting}: {checkpoint.config_file}) is {entry.description}",
                              f"choose one of {fitting}")
    return family
