"""Initialisers for the foreign embedding table and output bias (RAMEN §2.1).

Every initialiser is a function that keeps :class:`Initializer`, checked when its entry loads.
Initialisers that need more than alpha take further keyword arguments: loaded rule inputs and
their settings, both declared by their registry entry.

Adding an initialiser: write one module in this package and add one entry to
``INITIALIZERS`` below; the shared definitions (``InitResult``, ``check_shapes``, ...) are in
:mod:`ramen.initializers.common`. Its :class:`InitializerEntry` says which rule inputs the
workflow gives it (kinds of ``init_input_paths`` in workflow/rules/inputs/init.smk, loaded by
``ramen.pipeline.initialise.INPUT_LOADERS``), which config section holds its settings and
whether training starts the whole model from scratch, which vocabularies (``replace``, ``extend``)
it can initialise, whether it reads each foreign token's segmentation by the source tokenizer, the
source model itself, and whether it fits rows in a loop that resumes from checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ramen.errors import ConfigError
from ramen.registry import Entry, FunctionContract, Registry

class Initializer(Protocol):
    """How ramen.pipeline.initialise and ramen.initializers.extension call an initialiser.

    The English input table (V_e, d) and output bias (V_e,) and the two vocabularies by position;
    ``alpha`` (p(e|f), a (V_f, V_e) sparse matrix, or None: always passed, so an initialiser that
    needs none defaults it to None), the generator of the random rows and the special tokens by
    keyword. The keywords its entry declares (see :func:`entry_keywords`) are passed too. It returns
    a ramen.initializers.common.InitResult. (Tensors are ``Any`` here: the registry imports no torch.)
    """

    def __call__(self, source_embeddings: Any, source_bias: Any, foreign_vocab: list[str], source_vocab: list[str],
                 /, *, alpha: Any, generator: Any, special_tokens: list[str]) -> Any: ...


def entry_keywords(entry: InitializerEntry) -> tuple[str, ...]:
    """The keywords the pipeline passes an entry's function beyond :class:`Initializer`'s. Its rule
    inputs are passed when the rule has them, so the function may default them; its settings
    section's keys are passed too, and the schema fixes those."""
    return (*entry.inputs.values(), *("pieces",) * entry.pieces, *("model", "bos_id") * entry.source_model,
            *("checkpoint_dir",) * entry.checkpoints)


@dataclass(frozen=True)
class InitializerEntry(Entry):
    """A registered initialiser and what the workflow gives it.

    ``function`` is ``"module:name"``, imported on first call: the Snakefile reads the registry
    while the job graph is built, which must not import torch. ``inputs`` maps a rule-input kind
    (``init_input_paths`` in workflow/rules/inputs/init.smk) to the keyword argument that receives the
    loaded file; ``settings`` names the ``peers`` config section passed as keyword arguments;
    ``from_scratch``: training re-draws the encoder and English table too (the model keeps only
    the architecture); ``vocabularies``: the ``variants.<name>.vocabulary`` values it serves;
    ``pieces``: it takes the keyword ``pieces``, each foreign token's source ids as the source
    tokenizer segments it (ramen.initializers.pieces), which the pipeline computes;
    ``source_model``: initialising an extension, it takes the keywords ``model``, the source causal
    LM the pipeline loaded, and ``bos_id``, the id a causal LM's training windows start with (None:
    none); ``checkpoints``: it fits rows in a loop and takes the keyword ``checkpoint_dir``, where a
    killed init job resumes from (under the rule's checkpoint directory, removed once the tables are
    saved; None: none).
    """

    contract = FunctionContract(Initializer, entry_keywords)

    function: str
    inputs: Mapping[str, str] = field(default_factory=dict)
    settings: str | None = None
    from_scratch: bool = False
    vocabularies: tuple[str, ...] = ("replace", "extend")
    pieces: bool = False
    source_model: bool = False
    checkpoints: bool = False

    @property
    def target(self) -> str:
        return self.function

    def __call__(self, *args, **kwargs):
        return self.load()(*args, **kwargs)


INITIALIZERS: Registry[InitializerEntry] = Registry("initialiser", "variants.<variant>.init", {
    "random": InitializerEntry("ramen.initializers.random:random_init"),
    "parallel": InitializerEntry("ramen.initializers.parallel:parallel_init", inputs={"parallel_alpha": "alpha"}),
    "monolingual": InitializerEntry("ramen.initializers.monolingual:monolingual_init",
                                    inputs={"monolingual_alpha": "alpha"}),
    "char2subword": InitializerEntry("ramen.initializers.char2subword:char2subword_init",
                                     inputs={"char_module": "module"}),
    "wechsel": InitializerEntry(
        "ramen.initializers.wechsel:wechsel_init", settings="wechsel",
        inputs={"source_fasttext": "source_model", "foreign_fasttext": "foreign_model",
                "wechsel_dictionary": "dictionary"},
    ),
    "focus": InitializerEntry("ramen.initializers.focus:focus_init", inputs={"token_vectors": "token_vectors"}),
    "overlap": InitializerEntry("ramen.initializers.overlap:overlap_init"),
    "mean": InitializerEntry("ramen.initializers.mean:mean_init"),
    # An extension keeps the source model, which scratch would draw anew.
    "scratch": InitializerEntry("ramen.initializers.scratch:scratch_init", from_scratch=True,
                                vocabularies=("replace",)),
    "fvt": InitializerEntry("ramen.initializers.fvt:fvt_init", pieces=True),
    "weighted_pieces": InitializerEntry("ramen.initializers.weighted_pieces:weighted_pieces_init", pieces=True,
                                        vocabularies=("extend",)),
    "parallel_fvt": InitializerEntry("ramen.initializers.parallel_fvt:parallel_fvt_init", pieces=True,
                                     inputs={"parallel_alpha": "alpha"}, settings="parallel_fvt",
                                     vocabularies=("extend",)),
    "distill": InitializerEntry("ramen.initializers.distill:distill_init", pieces=True, source_model=True,
                                checkpoints=True, inputs={"foreign_encoded": "text"}, settings="distill",
                                vocabularies=("extend",)),
})


def get_entry(name: str, *, setting: str = "variants.<variant>.init") -> InitializerEntry:
    """The registry entry of ``name``; ConfigError naming ``setting`` otherwise."""
    return INITIALIZERS.entry(name, setting)


def names_for(vocabulary: str) -> list[str]:
    """The registered initialisers that serve ``vocabulary`` (``replace`` or ``extend``), in registry order."""
    return [name for name, entry in INITIALIZERS.items() if vocabulary in entry.vocabularies]


def check_init_vocabulary(name: str, vocabulary: str, *, setting: str = "variants.<variant>.init") -> InitializerEntry:
    """The entry of ``name``; ConfigError naming ``setting`` when it does not serve ``vocabulary``."""
    entry = get_entry(name, setting=setting)
    if vocabulary not in entry.vocabularies:
        raise ConfigError(setting, f"initialiser '{name}' does not serve vocabulary: {vocabulary} (it serves "
                          f"{', '.join(entry.vocabularies)})",
                          f"with vocabulary: {vocabulary} choose one of: {', '.join(names_for(vocabulary))}")
    return entry
