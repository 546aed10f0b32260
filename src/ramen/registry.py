"""One registry type for what the config names and the code imports late: families, initialisers,
objectives, tasks and training stages.

A :class:`Registry` maps a name to an entry, a frozen dataclass of what the workflow reads while it
builds the job graph, plus the ``"module:name"`` (or ``"module"``) of the code it stands for. The
Snakefile reads registries, which must not import torch: an entry's code is imported on
:meth:`Entry.load`, and checked then against its entry type's :class:`Contract`, a
``typing.Protocol`` the code must keep. A broken entry fails when it loads, naming itself and what
is missing, not later inside a training loop; an unknown name is a ConfigError naming the setting
and the registered names.
"""

from __future__ import annotations

import abc
import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar, Generic, TypeVar

from ramen.errors import ConfigError


class ContractError(TypeError):
    """A registered entry's code does not keep its registry's contract: a bug in the entry or its
    module, not in the config."""


class Contract(abc.ABC):
    """What an entry's loaded code must be; :meth:`problems` lists how it falls short."""

    protocol: type | None

    @abc.abstractmethod
    def problems(self, loaded: Any, entry: Entry) -> list[str]:
        """Each way ``loaded`` (the entry's code) breaks the contract; empty when it keeps it."""

    def check(self, loaded: Any, entry: Entry) -> None:
        problems = self.problems(loaded, entry)
        if problems:
            raise ContractError(f"{entry.label} does not keep the {self.name} contract: {'; '.join(problems)}")

    @property
    def name(self) -> str:
        return self.protocol.__name__ if self.protocol is not None else type(self).__name__


@dataclass(frozen=True)
class Entry:
    """Base of every registry entry: the code it names (:attr:`target`) and the contract that code keeps.

    A subclass defines ``target`` and sets ``contract``; :class:`Registry` fills ``registered_as``.
    """

    contract: ClassVar[Contract]
    # Set by the registry holding the entry, so that errors name the entry as the config does.
    registered_as: str = field(default="", init=False, repr=False, compare=False)

    @property
    def target(self) -> str:
        """``"module:name"`` of the entry's code, or ``"module"`` for a whole module."""
        raise NotImplementedError

    @property
    def label(self) -> str:
        return f"{self.registered_as or 'entry'} ({self.target})"

    def load(self) -> Any:
        """The entry's code, imported now and checked against its contract."""
        loaded = import_target(self.target, self.label)
        self.contract.check(loaded, self)
        return loaded


E = TypeVar("E", bound=Entry)


class Registry(dict[str, E], Generic[E]):
    """Name -> entry, in registration order (the order tables and reports list them).

    ``kind`` names an entry in messages (``initialiser``); ``setting`` is the config key that
    chooses one, named by the ConfigError for an unknown name unless a caller names a fuller key.
    """

    def __init__(self, kind: str, setting: str, entries: Mapping[str, E]):
        super().__init__()
        self.kind, self.setting = kind, setting
        for name, entry in entries.items():
            self[name] = entry

    def __setitem__(self, name: str, entry: E) -> None:
        # Frozen entries: the name is the registry's to give, once it holds the entry.
        object.__setattr__(entry, "registered_as", f"{self.kind} {name!r}")
        super().__setitem__(name, entry)

    def entry(self, name: str, setting: str | None = None) -> E:
        """The entry registered as ``name``; ConfigError naming ``setting`` and the registered names otherwise."""
        try:
            return self[name]
        except (KeyError, TypeError):
            raise ConfigError(setting or self.setting, f"unknown {self.kind} {name!r}",
                              f"valid names: {', '.join(self)}") from None

    def load(self, name: str, setting: str | None = None) -> Any:
        """The code of the entry registered as ``name``, imported and checked now."""
        return self.entry(name, setting).load()


def import_target(target: str, label: str) -> Any:
    """The object ``"module:name"`` (or the module ``"module"``) names; ContractError when the
    module or the name is not there (a missing dependency of the module is raised as it is)."""
    module_name, _, member = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is None or not module_name.startswith(error.name):
            raise
        raise ContractError(f"{label}: no module {module_name!r}") from error
    if not member:
        return module
    try:
        return getattr(module, member)
    except AttributeError:
        raise ContractError(f"{label}: module {module_name!r} defines no {member!r}") from None


# --------------------------------------------------------------------------- contracts


def call_problems(function: Callable, expected: inspect.Signature, extra: Iterable[str] = ()) -> list[str]:
    """How ``function`` cannot be called as ``expected`` says its callers call it.

    ``expected``'s positional parameters are passed by position, its keyword-only ones by name;
    those with a default may be left out, so the function must take every one and need no more
    than those without a default. ``extra``: further keywords passed, which the function must take
    and may need. A ``*args``/``**kwargs`` of ``expected`` stands for arguments it does not fix:
    then the function must take those it names and may need others.
    """
    try:
        actual = inspect.signature(function)
    except (TypeError, ValueError):
        return []  # a builtin without a signature: nothing to check against
    positional, keywords, optional = [], [], set()
    for parameter in expected.parameters.values():
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            positional.append(parameter.name)
        elif parameter.kind is parameter.KEYWORD_ONLY:
            keywords.append(parameter.name)
        if parameter.default is not parameter.empty:
            optional.add(parameter.name)
    keywords += [name for name in extra if name not in keywords]
    optional -= set(extra)
    # *args/**kwargs in expected: callers pass more than it names, so the function may need more.
    open_ended = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in expected.parameters.values())
    bind = actual.bind_partial if open_ended else actual.bind
    problems = []
    calls = {"every argument": (positional, keywords),
             "the required arguments only": ([n for n in positional if n not in optional],
                                             [n for n in keywords if n not in optional])}
    for what, (args, kwargs) in calls.items():
        try:
            bind(*args, **dict.fromkeys(kwargs))
        except TypeError as error:
            problems.append(f"called with {what} ({_call_text(args, kwargs)}): {error}")
    return list(dict.fromkeys(problems))


def _call_text(args: list[str], kwargs: list[str]) -> str:
    return ", ".join([*args, *(f"{name}=" for name in kwargs)])


def protocol_members(protocol: type) -> list[str]:
    """The public members a Protocol declares (methods, class attributes and annotated attributes)."""
    names: dict[str, None] = {}
    for cls in reversed(protocol.__mro__):
        if cls is object or not getattr(cls, "_is_protocol", False) or cls.__module__ == "typing":
            continue
        names.update(dict.fromkeys(n for n in (*vars(cls), *getattr(cls, "__annotations__", {}))
                                   if not n.startswith("_")))
    return list(names)


@dataclass(frozen=True)
class FunctionContract(Contract):
    """A function, called as ``protocol.__call__`` says, plus the keywords its entry declares
    (``keywords(entry)``), which it must take and may need."""

    protocol: type
    keywords: Callable[[Any], Iterable[str]] = lambda entry: ()

    def problems(self, loaded: Any, entry: Entry) -> list[str]:
        if not callable(loaded):
            return [f"{type(loaded).__name__} is not callable"]
        expected = inspect.signature(self.protocol.__call__)
        expected = expected.replace(parameters=list(expected.parameters.values())[1:])  # less self
        return call_problems(loaded, expected, self.keywords(entry))


@dataclass(frozen=True)
class MembersContract(Contract):
    """An object of ``kind`` (a module, a class) with a runtime-checkable protocol's members, each
    method callable as the protocol declares it; ``also(entry)``: further protocols the entry
    declares it keeps; ``concrete``: a class with no abstract method left."""

    protocol: type | None
    kind: type = object
    also: Callable[[Any], tuple[type, ...]] = lambda entry: ()
    concrete: bool = False

    @property
    def name(self) -> str:
        return self.protocol.__name__ if self.protocol is not None else self.kind.__name__

    def problems(self, loaded: Any, entry: Entry) -> list[str]:
        if not isinstance(loaded, self.kind):
            return [f"is a {type(loaded).__name__}, not a {self.kind.__name__}"]
        problems = []
        for protocol in (self.protocol, *self.also(entry)):
            if protocol is None:
                continue
            members = protocol_members(protocol)
            missing = [name for name in members if not hasattr(loaded, name)]
            if missing or not isinstance(loaded, protocol):
                problems.append(f"defines no {', '.join(missing) or 'members of ' + protocol.__name__}")
            for name in members:
                if name in missing:
                    continue
                problems += [f"{name}: {problem}" for problem in self._member_problems(protocol, name, loaded)]
        if self.concrete and inspect.isabstract(loaded):
            problems.append(f"leaves abstract: {', '.join(sorted(loaded.__abstractmethods__))}")
        return problems

    @staticmethod
    def _member_problems(protocol: type, name: str, loaded: Any) -> list[str]:
        declared = inspect.getattr_static(protocol, name, None)
        if not isinstance(declared, (staticmethod, classmethod)) and not inspect.isfunction(declared):
            return []  # an attribute: being there is all
        actual = getattr(loaded, name)
        if not callable(actual):
            return ["is not callable"]
        expected = inspect.signature(getattr(protocol, name))
        if isinstance(loaded, ModuleType) and inspect.isfunction(declared):
            # A module's function stands for a method: the protocol's self is not passed.
            expected = expected.replace(parameters=list(expected.parameters.values())[1:])
        return call_problems(actual, expected)
