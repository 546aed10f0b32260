"""Registry of downstream evaluation tasks: one module, one entry and one rule file each.

An entry says everything the workflow needs to know about a task: where its code and its rules
live, which `targets.<key>` of the config ask for which files, and which files its `tasks.<name>`
config section lists, so that they are checked while the job graph is built and, for evaluation
files, kept out of the training text (decontamination). ``workflow/rules/common.smk`` reads this
registry and the Snakefile includes each entry's rule file; neither names a task.

Task modules import torch and transformers, so the registry names them by module path and
imports them only when a task is asked for; building the job graph stays cheap. A task module
shares no functions with the others (its rule file's scripts call its own), so its contract is
being a module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType

from ramen.errors import ConfigError
from ramen.registry import Entry, MembersContract, Registry

# How the files of one key of a task's config section are laid out (TaskFiles.layout).
LAYOUTS = ("by_language", "pairs", "parallel", "by_language_splits", "sources")
# Keys of a file entry that say where it is; the others describe the file (e.g. its format).
LOCATION_KEYS = ("path", "url", "sha256", "member")


@dataclass(frozen=True)
class TaskFiles:
    """Files under ``tasks.<task>.<key>``: checked while the job graph is built, and, for evaluation
    files (``decontaminate``), kept out of the training text of the models they evaluate.

    Evaluation files form decontamination units ``(unit, split, owner)``: the owner is the language
    whose models the files evaluate (a target language, or the source language for its own files),
    and the unit maps each file's language to its spec. Layouts of ``tasks.<task>.<key>``:

    - ``by_language``: ``{lang: file}``, one unit per language (``tasks.xnli.dev``);
    - ``pairs``: ``{lang: {source: file, lang: file}}``, one two-sided unit per target language
      (``tasks.retrieval.pairs``);
    - ``parallel``: ``{lang: file}`` line-aligned across languages, the source language's file
      shared: one two-sided unit per other language (``tasks.nmt.dev``);
    - ``by_language_splits``: ``{lang: {split: file}}``, one unit per language and each of
      ``splits`` (``tasks.ud.supervised``);
    - ``sources``: a list of source-language training files, each a path or download spec whose
      other keys describe it and are passed to its check (``tasks.xnli.train``).
    """

    key: str
    layout: str = "by_language"
    check: str = "lines"  # the input check its files get (ramen.data.input_checks kinds); lines: line-aligned sides
    unit: str = ""  # the unit's task name in decontamination checks; "" for the task's own
    splits: tuple[str, ...] = ("dev", "test")  # by_language_splits: the splits these files are
    decontaminate: bool = True  # False: training files, only checked

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"TaskFiles({self.key!r}): layout {self.layout!r} is not one of {LAYOUTS}")


@dataclass(frozen=True)
class TaskFile:
    """One file, or line-aligned sides, of a task's config section."""

    sides: dict  # {file language: spec}
    settings: dict  # {file language: its full key path}
    owner: str  # the language whose models it evaluates, or that trains on it
    check: str
    unit: tuple[str, str, str] | None  # its decontamination unit; None for a training file
    options: dict = field(default_factory=dict)  # for its check: a sources entry's description


@dataclass(frozen=True)
class Target:
    """What ``targets.<key>: [variants]`` asks ``rule all`` for.

    ``results`` is one file per named variant and configured language (``{variant}``,
    ``{lang}``); ``reports`` are made once when the key names any variant. ``needs`` are the
    settings every target language must have then, ``source_needs`` those of the source language
    (``{lang}``, ``{source}`` filled in). ``checkpoints``: the target scores the checkpoints kept
    during bilingual training, so its variants must train one. ``tables``: the key names tables
    ``{variant}_{src}-{tgt}`` that the task's own rules build, not variants of rule all.
    """

    results: str = ""
    reports: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    source_needs: tuple[str, ...] = ()
    checkpoints: bool = False
    tables: bool = False
    init_report: bool = False


@dataclass(frozen=True)
class TaskSpec(Entry):
    """One downstream task: its code, its rule file, its targets and the files of its config section."""

    contract = MembersContract(None, kind=ModuleType)

    module: str
    metric: str
    description: str
    rules: str  # its rule file, relative to workflow/
    targets: Mapping[str, Target] = field(default_factory=dict)
    files: tuple[TaskFiles, ...] = ()

    @property
    def target(self) -> str:
        return self.module

    def load(self) -> ModuleType:
        return super().load()


_XNLI_NEEDS = ("tasks.xnli.dev.{lang}", "tasks.xnli.test.{lang}")
_UD_NEEDS = ("tasks.ud.dev.{lang}", "tasks.ud.test.{lang}")
_UD_SOURCE_NEEDS = ("tasks.ud.train.{source}",)
_RETRIEVAL_NEEDS = ("tasks.retrieval.pairs.{lang}",)
_PAPER_TABLES = ("results/report/paper_tables.md", "results/report/headline.tsv")

TASKS: Registry[TaskSpec] = Registry("task", "tasks", {
    "xnli": TaskSpec(
        module="ramen.tasks.xnli",
        metric="accuracy",
        description="zero-shot cross-lingual natural language inference (paper §3.4, §4.1)",
        rules="rules/xnli.smk",
        targets={
            "xnli": Target("results/xnli/{variant}_{lang}.tsv", ("results/report/xnli_summary.tsv",), _XNLI_NEEDS,
                           init_report=True),
            "xnli_curves": Target(reports=("results/report/xnli_curves.png",), needs=_XNLI_NEEDS, checkpoints=True),
        },
        files=(TaskFiles("train", "sources", check="nli", decontaminate=False),
               TaskFiles("dev", check="nli"), TaskFiles("test", check="nli")),
    ),
    "ud": TaskSpec(
        module="ramen.tasks.ud",
        metric="las",
        description="UD dependency parsing with a biaffine parser, zero-shot and supervised (§4.2, §5.3)",
        rules="rules/ud.smk",
        targets={
            "ud": Target("results/ud/{variant}_{lang}.tsv", _PAPER_TABLES, _UD_NEEDS, _UD_SOURCE_NEEDS),
            "ud_supervised": Target("results/ud/supervised/{variant}_{lang}.tsv", _PAPER_TABLES,
                                    ("tasks.ud.supervised.{lang}",)),
            "ud_curves": Target(reports=("results/report/ud_curves.png",), needs=_UD_NEEDS,
                                source_needs=_UD_SOURCE_NEEDS, checkpoints=True),
        },
        files=(
            TaskFiles("train", check="conllu", decontaminate=False),
            TaskFiles("dev", check="conllu"),
            TaskFiles("test", check="conllu"),
            TaskFiles("supervised", "by_language_splits", check="conllu", unit="ud_supervised"),
            TaskFiles("supervised", "by_language_splits", check="conllu", splits=("train",), decontaminate=False),
        ),
    ),
    "retrieval": TaskSpec(
        module="ramen.tasks.retrieval",
        metric="accuracy",
        description="sentence retrieval between the source and a target language (a cheap zero-shot check)",
        rules="rules/retrieval.smk",
        targets={
            "retrieval": Target("results/retrieval/{variant}_{lang}.tsv", needs=_RETRIEVAL_NEEDS),
            "curves": Target(reports=("results/report/curves.png",), needs=_RETRIEVAL_NEEDS, checkpoints=True),
        },
        files=(TaskFiles("pairs", "pairs"),),
    ),
    "sib200": TaskSpec(
        module="ramen.tasks.sib200",
        metric="accuracy",
        description="zero-shot SIB-200 topic classification, 7 topics on FLORES-200 sentences (encoders and decoders)",
        rules="rules/sib200.smk",
        targets={"sib200": Target("results/sib200/{variant}_{lang}.tsv", needs=("tasks.sib200.test.{lang}",),
                                  source_needs=("tasks.sib200.train.{source}", "tasks.sib200.dev.{source}"))},
        files=(TaskFiles("train", check="sib200", decontaminate=False), TaskFiles("dev", check="sib200"),
               TaskFiles("test", check="sib200")),
    ),
    "language_modeling": TaskSpec(
        module="ramen.tasks.language_modeling",
        metric="bits_per_byte",
        description="bits per UTF-8 byte of held-out text and greedy continuations, for causal-LM variants",
        rules="rules/language_modeling.smk",
        targets={"bits_per_byte": Target("results/language_modeling/{variant}_{lang}.tsv",
                                         reports=("results/report/language_modeling.tsv",
                                                  "results/report/language_modeling.png"),
                                         needs=("tasks.language_modeling.text.{lang}",))},
        files=(TaskFiles("text"), TaskFiles("other_text")),
    ),
    "nmt": TaskSpec(
        module="ramen.nmt.pipeline",
        metric="bleu",
        description="BERT-fused NMT between the source and a foreign language (§5.4)",
        rules="rules/nmt.smk",
        targets={"nmt": Target(tables=True)},  # built by `make demo-nmt` (rule nmt_all)
        # tasks.nmt.train, when given, is read by the NMT rules (rules/nmt.smk).
        files=(TaskFiles("dev", "parallel"), TaskFiles("test", "parallel")),
    ),
})


def targets(tasks: Mapping[str, TaskSpec] | None = None) -> dict[str, Target]:
    """Every ``targets.<key>`` the tasks declare; a key declared twice is an error."""
    found: dict[str, Target] = {}
    for name, spec in (TASKS if tasks is None else tasks).items():
        for key, target in spec.targets.items():
            if key in found:
                raise ValueError(f"task registry: targets.{key} is declared twice (again by task {name!r})")
            found[key] = target
    return found


def check_task_config(tasks_config: Mapping, targets_config: Mapping, other_targets: Iterable[str] = ()) -> None:
    """Every ``tasks.<name>`` section belongs to a registered task and every ``targets.<key>`` to a
    registered task's target (or to ``other_targets``, the workflow's own reports)."""
    for name in tasks_config:
        if name not in TASKS:
            raise ConfigError(f"tasks.{name}", f"no registered task is called {name!r}",
                              f"registered tasks (ramen.tasks.TASKS): {', '.join(TASKS)}")
    known = [*targets(), *other_targets]
    for key in targets_config:
        if key not in known:
            raise ConfigError(f"targets.{key}", "no registered task declares this target",
                              f"known targets: {', '.join(known)}")


def task_files(tasks_config: Mapping, source_lang: str) -> list[TaskFile]:
    """Every file the registered tasks' config sections list (see TaskFiles)."""
    found: list[TaskFile] = []
    for name, spec in TASKS.items():
        section = tasks_config.get(name) or {}
        for files in spec.files:
            unit = files.unit or name
            entries = section.get(files.key) or {}
            where = f"tasks.{name}.{files.key}"

            def add(sides, settings, owner, split, options=None, files=files, unit=unit):
                found.append(TaskFile(sides, settings, owner, files.check,
                                      (unit, split, owner) if files.decontaminate else None, options or {}))

            if files.layout == "sources":
                for index, entry in enumerate(section.get(files.key) or []):
                    described = {key: value for key, value in entry.items() if key not in LOCATION_KEYS}
                    add({source_lang: entry}, {source_lang: f"{where}[{index}]"}, source_lang, files.key,
                        {"source": described})
                continue
            if files.layout == "by_language":
                for lang, path in entries.items():
                    add({lang: path}, {lang: f"{where}.{lang}"}, lang, files.key)
            elif files.layout == "pairs":
                for lang, pair in entries.items():
                    add(dict(pair), {side: f"{where}.{lang}.{side}" for side in pair}, lang, files.key)
            elif files.layout == "parallel":
                for lang in entries:
                    if lang != source_lang:
                        sides = [side for side in (source_lang, lang) if side in entries]
                        add({side: entries[side] for side in sides}, {side: f"{where}.{side}" for side in sides},
                            lang, files.key)
            else:  # by_language_splits
                for lang, splits in entries.items():
                    for split in files.splits:
                        if split in splits:
                            add({lang: splits[split]}, {lang: f"{where}.{lang}.{split}"}, lang, split)
    return found


def evaluation_units(tasks_config: Mapping, source_lang: str) -> dict[tuple[str, str, str], dict]:
    """Every evaluation file of the config, grouped by what it evaluates:
    ``{(unit, split, owner): {file language: spec}}`` (see TaskFiles)."""
    return {file.unit: file.sides for file in task_files(tasks_config, source_lang) if file.unit}


def requested_files(requested: Mapping[str, list[str]], languages: Iterable[str]) -> list[str]:
    """The files ``rule all`` builds for the variants each ``targets.<key>`` names (``requested``,
    with "all" already expanded): per-variant results first, then each report once."""
    languages = list(languages)
    results, reports = [], []
    for key, target in targets().items():  # the registry's order, not the config file's
        variants = requested.get(key)
        if not variants:
            continue
        if target.results:
            results += [target.results.format(variant=v, lang=lang) for v in variants for lang in languages]
        reports += target.reports
    return results + list(dict.fromkeys(reports))


def language_needs(requested: Mapping[str, list[str]], source_lang: str) -> tuple[list, list]:
    """The task settings the requested targets read: (of the source language, of each target language
    with ``{lang}`` left to fill)."""
    source, per_language = [], []
    for key, target in targets().items():  # the registry's order, not the config file's
        if requested.get(key):
            source += [need.format(source=source_lang) for need in target.source_needs]
            per_language += target.needs
    return list(dict.fromkeys(source)), list(dict.fromkeys(per_language))


def table_targets() -> list[str]:
    """The ``targets`` keys that name tables ``{variant}_{src}-{tgt}`` rather than variants."""
    return [key for key, target in targets().items() if target.tables]


def checkpoint_targets() -> list[str]:
    """The ``targets`` keys that score checkpoints of bilingual training."""
    return [key for key, target in targets().items() if target.checkpoints]
