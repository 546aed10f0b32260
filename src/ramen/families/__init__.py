"""Source families: what kind of language model a source checkpoint is, and what that decides.

    masked-lm  a masked LM (BERT, RoBERTa, ...): fastBPE foreign vocabulary, masked-LM objectives
    causal-lm  a causal LM (Llama, Qwen, Mistral, GPT-2, Pythia, Phi, ... layouts; also as GGUF):
               byte-level BPE foreign vocabulary, next-token objectives

An encoder-decoder (T5, BART, ...) is refused by name. The family is read from the checkpoint
(``config.json``, or a GGUF file's ``general.architecture``), never configured.

This module is the registry and is torch-free: the workflow reads it while the job graph is
built, and :func:`check_source` there reads each source's metadata and file headers only
(ramen.data.checkpoint_headers): its family is known, its weights are there and readable, its
tokenizer loads and has the tokens the family needs, and every variant's objective (and init)
is one the family trains. An entry names the module of its stages as a string, imported when a
job runs: a module of this package (ramen.families.masked_lm, .causal_lm), so that a family's code
lives with it. The pipeline's functions (ramen.pipeline.vocabulary, .initialise, .train) ask it
and never name a family. That module keeps :class:`FamilyStages` (and, for a family that offers
``vocabulary: extend``, :class:`ExtensionStages`), checked when its entry loads.

The objectives it trains are those whose ``ObjectiveEntry.family`` is its ``objectives``.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from ramen.data.checkpoint_headers import (Checkpoint, check_extensible_tokenizer, check_weights, read_checkpoint,
                                           read_tokenizer)
from ramen.errors import ConfigError
from ramen.modeling.layouts import causal_layout
from ramen.registry import Entry, MembersContract, Registry

USE_INSTEAD = "use a masked LM (BERT, RoBERTa) or a causal LM (Llama, Qwen, GPT-2, ...)"


@runtime_checkable
class FamilyStages(Protocol):
    """The stages of a family's module, called as ramen.pipeline's functions call them (a module's
    functions: ``self`` stands for the module)."""

    def learn_vocabulary(self, text_path: Any, source_dir: Any, tokenizer_out: Any, codes_out: Any, /, *,
                         merges: int, max_vocab_size: int | None, lowercase: bool | None,
                         min_symbol_count: int) -> dict:
        """The foreign tokenizer (rule learn_bpe); the summary figures."""

    def prepare_source(self, source_dir: Any, english_data_dir: Any, settings: Any, out_dir: Any,
                       checkpoint_dir: Any, metrics_out: Any, source_lang: str, device: str, /) -> None:
        """The source as every later stage reads it (rule warmup_head; ``metrics_out``: a CSV)."""

    def load_source(self, source_dir: Any, /) -> Any:
        """The source model."""

    def source_parts(self, model: Any, tokenizer: Any, /) -> Any:
        """Its tables and special tokens, which the initialisers start from (ramen.modeling.sources.SourceParts)."""

    def bilingual_model(self, source_dir: Any, source_lang: str, foreign: Mapping, rows: Mapping, /, *,
                        from_scratch: bool, seed: int) -> Any:
        """The bilingual model from the initial tables (``foreign``: language -> file); its
        ``export_language`` exports a side (ramen.modeling.export.export_side)."""

    def special_ids(self, tokenizer: Any, /) -> Any:
        """What its objectives' batches need."""


@runtime_checkable
class ExtensionStages(Protocol):
    """The further stages of a family that offers ``vocabulary: extend`` (``FamilyEntry.vocabularies``)."""

    def extend_vocabulary(self, text_path: Any, source_dir: Any, tokenizer_out: Any, /, *, new_tokens: int,
                          min_frequency: int, keep_text: Any, keep_lines: int) -> dict:
        """The source's tokenizer plus new foreign tokens, leaving the words of the first
        ``keep_lines`` lines of ``keep_text`` as the source encodes them (rule extend_vocabulary)."""

    def initialise_extension(self, method: str, source_dir: Any, tokenizer_dir: Any, loaded: Mapping, seed: int,
                             /, *, output_init: str) -> tuple[Any, dict]:
        """(tables, stats): the extended tables: source rows as they are, new rows from an
        initialiser, new output rows by ``output_init``."""

    def extended_model(self, source_dir: Any, source_lang: str, lang: str, init_path: Any, first: int, /) -> Any:
        """One model over the extended vocabulary, every language's side the same model."""


def _extension(entry: FamilyEntry) -> tuple[type, ...]:
    return (ExtensionStages,) if "extend" in entry.vocabularies else ()


@dataclass(frozen=True)
class FamilyEntry(Entry):
    """A source family and how to recognise and check it before torch is imported.

    ``architectures``: endings of the class names in config.json's ``architectures`` that mark
    it; ``auto_mapping``: the transformers Auto mapping whose model types are of this family
    (read from its source, not imported; None: recognised by its architectures only); ``tokens``:
    the special-token roles its tokenizer must have; ``implementation``: the module of its stages
    (see the module docstring); ``objectives``: the ``ObjectiveEntry.family`` of the objectives
    it trains (None: its own name); ``from_scratch``: whether ``init: scratch`` (the architecture
    drawn anew) is offered; ``causal``: whether its sides read left to right (the tasks pool the
    last token); ``vocabularies``: how a foreign vocabulary may be built for it (``replace``: a
    vocabulary of its own per language; ``extend``: the source's tokenizer plus new tokens);
    ``check_config``: a torch-free check of the checkpoint's config (config.json as a mapping, the
    setting, the file) that raises ConfigError for a source of the family its stages cannot serve.
    """

    contract = MembersContract(FamilyStages, kind=ModuleType, also=_extension)

    description: str
    architectures: tuple[str, ...]
    auto_mapping: str | None
    implementation: str
    tokens: tuple[str, ...] = ()
    objectives: str | None = None
    from_scratch: bool = False
    causal: bool = False
    vocabularies: tuple[str, ...] = ("replace",)
    check_config: Callable[[Mapping, str, str], object] | None = None

    @property
    def target(self) -> str:
        return self.implementation

    def load(self, member: str | None = None):
        """One of the family's stage functions (its module imported and checked now); None: the module."""
        module = super().load()
        return module if member is None else getattr(module, member)


# The registry, in the order a model type known to several mappings is decided (BERT-like configs
# are in the masked and the causal mapping: masked wins).
FAMILIES: Registry[FamilyEntry] = Registry("family", "source.model", {
    "masked-lm": FamilyEntry("a masked LM", ("ForMaskedLM",), "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
                             "ramen.families.masked_lm", tokens=("pad", "unk", "mask"), from_scratch=True),
    "causal-lm": FamilyEntry("a causal LM", ("ForCausalLM", "LMHeadModel"), "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
                             "ramen.families.causal_lm", causal=True, vocabularies=("replace", "extend"),
                             check_config=causal_layout),
})
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
        if entry.auto_mapping and model_type in auto_model_types(entry.auto_mapping):
            return name
    raise ConfigError(setting, f"{where}model type '{model_type}' is neither a masked nor a causal LM",
                      USE_INSTEAD)


def checkpoint_family(checkpoint: Checkpoint, setting: str = "source.model") -> str:
    return recognise(checkpoint.config, setting, str(checkpoint.config_file))


def source_family(path, setting: str = "source.model") -> str:
    """The family of the checkpoint at ``path`` (reads its config only)."""
    return checkpoint_family(read_checkpoint(path, setting), setting)


def source_entry(path, setting: str = "source.model") -> FamilyEntry:
    """The registry entry of the checkpoint at ``path``'s family."""
    return FAMILIES[source_family(path, setting)]


def trains(family: str) -> str:
    """The ``ObjectiveEntry.family`` of the objectives a family trains."""
    return FAMILIES[family].objectives or family


def check_objective(family: str, objective: str, objective_family: str, setting: str, source: str = "",
                    fitting: list[str] | None = None) -> None:
    """ConfigError naming ``setting`` when ``objective`` (which trains ``objective_family``) is not
    one the source's family trains; ``fitting``: the objectives it does train."""
    if objective_family != trains(family):
        of = FAMILIES.get(objective_family)
        raise ConfigError(setting, f"objective '{objective}' trains {of.description if of else objective_family} "
                          f"but the source{source} is {FAMILIES[family].description}",
                          f"choose one of {fitting}" if fitting else
                          f"choose an objective for {FAMILIES[family].description}")


def check_init(family: str, from_scratch: bool, setting: str, source: str = "") -> None:
    """ConfigError naming ``setting`` when an initialiser draws the model anew and the family does not offer it."""
    if from_scratch and not FAMILIES[family].from_scratch:
        raise ConfigError(setting, f"the source{source} is {FAMILIES[family].description}, which is not trained "
                          "from scratch here", f"choose another initialiser for {FAMILIES[family].description}")


def check_vocabulary(family: str, vocabulary: str, setting: str, source: str = "") -> None:
    """ConfigError naming ``setting`` when the family does not build a foreign vocabulary that way."""
    offered = FAMILIES[family].vocabularies
    if vocabulary not in offered:
        raise ConfigError(setting, f"vocabulary '{vocabulary}' is not offered for {FAMILIES[family].description} "
                          f"source{source}", f"choose one of {list(offered)}")


def check_source(path, setting: str = "source.model", objectives: Mapping[str, str] | None = None,
                 objective_families: Mapping[str, str] | None = None, scratch: tuple[str, ...] = (),
                 extended: tuple[str, ...] = ()) -> str:
    """Check a source checkpoint from its metadata and headers only; its family.

    ``objectives`` maps the key of each variant's objective (``variants.<name>.objective``) to
    the objective's name, ``objective_families`` every objective's name to the family it trains
    (the objective registry's): each variant's must be one this family trains. ``scratch``: the
    keys of variants whose initialiser draws the model anew (``variants.<name>.init``);
    ``extended``: the keys of variants that extend the source's vocabulary
    (``variants.<name>.vocabulary``): the family must offer it and the tokenizer be one it extends. Every
    problem is a ConfigError naming ``setting`` (or the variant's key) and the file.
    """
    checkpoint = read_checkpoint(path, setting)
    family = checkpoint_family(checkpoint, setting)
    entry = FAMILIES[family]
    if entry.check_config is not None:
        entry.check_config(checkpoint.config, setting, str(checkpoint.config_file))
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
    where = f" ({setting}: {checkpoint.config_file})"
    for key, objective in (objectives or {}).items():
        objective_family = (objective_families or {}).get(objective, trains(family))
        fitting = [name for name, its in (objective_families or {}).items() if its == trains(family)]
        check_objective(family, objective, objective_family, key, where, fitting)
    for key in scratch or ():
        check_init(family, True, key, where)
    for key in extended or ():
        check_vocabulary(family, "extend", key, where)
        check_extensible_tokenizer(checkpoint, key)
    return family
