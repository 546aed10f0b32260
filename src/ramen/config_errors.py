"""One short message for a config that fails its schema: the setting's full path, what is wrong,
what is allowed.

jsonschema's own message prints the whole schema of the section at fault (thousands of lines
for a typo); a user needs the setting's path and the allowed values instead. Overrides of a
section (``variants.<v>.training``, ``tasks.ud.supervised_settings``) are checked here against
their section's schema, less its required keys: the schema cannot say "the training section,
every key optional" without a second copy of it.

With ``fill_defaults`` the schema's ``default:`` values fill in what the config leaves out, as
Snakemake's ``validate(..., set_default=True)`` does, in the same pass: the workflow reads and
walks the schema once per start, and a cluster job starts Snakemake once or twice.
"""

from __future__ import annotations

import copy
import difflib
import os
import re

import yaml
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError, best_match

TYPE_NAMES = {"integer": "an integer", "number": "a number", "boolean": "true or false", "string": "a string",
              "array": "a list", "object": "a mapping", "null": "null"}


def _where(path) -> str:
    parts = []
    for part in path:
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
    return "".join(parts).lstrip(".") or "the top level"


def _resolve(schema: dict, root: dict) -> dict:
    while "$ref" in schema:
        schema = root["definitions"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _message(error: ValidationError, root: dict, prefix: tuple = ()) -> str:
    path = (*prefix, *error.absolute_path)
    where = _where(path)
    if error.validator == "additionalProperties":
        allowed = sorted(_resolve(error.schema, root).get("properties", {}))
        unexpected = [key for key in error.instance if key not in allowed]
        key = unexpected[0] if unexpected else re.findall(r"'([^']+)'", error.message)[0]
        close = difflib.get_close_matches(str(key), allowed, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return (f"config setting '{_where((*path, key))}': unknown key{hint}; allowed keys in {where}: "
                f"{', '.join(allowed)} (check the spelling, or remove it)")
    if error.validator == "required":
        return f"config: {where} lacks a required key: {error.message}"
    if error.validator == "type":
        wanted = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        names = " or ".join(TYPE_NAMES.get(name, name) for name in wanted)
        hint = ""
        if "number" in wanted and isinstance(error.instance, str) and _is_float(error.instance):
            hint = " (YAML reads 1e-5 as a string: write 1.0e-5)"
        return f"config setting '{where}': {error.instance!r} is not {names}{hint}"
    message = error.message if len(error.message) <= 300 else error.message[:300] + "..."
    return f"config setting '{where}': {message}"


def _first(validator: Draft202012Validator, value, root: dict, prefix: tuple = ()) -> str:
    error = best_match(validator.iter_errors(value))
    return "" if error is None else _message(error, root, prefix)


def _overrides(config: dict) -> list[tuple[tuple, str, object]]:
    """(path, schema definition or section path, value) of every override of a section."""
    found = []
    for name, variant in (config.get("variants") or {}).items():
        if isinstance(variant, dict) and "training" in variant:
            found.append((("variants", name, "training"), "training", variant["training"]))
    ud = (config.get("tasks") or {}).get("ud") or {}
    if "supervised_settings" in ud:
        found.append((("tasks", "ud", "supervised_settings"), "tasks.ud.settings", ud["supervised_settings"]))
    return found


def _section_schema(root: dict, name: str) -> dict:
    """A definition by name, or the schema of a dotted config section."""
    if "." not in name:
        return root["definitions"][name]
    schema = root
    for part in name.split("."):
        schema = _resolve(schema["properties"][part], root)
    return schema


def _filling(validator_class):
    """``validator_class`` that also sets each absent property that has a default."""
    check_properties = validator_class.VALIDATORS["properties"]

    def properties(validator, spec, instance, schema):
        if validator.is_type(instance, "object"):
            for key, child in spec.items():
                if "default" in child:
                    instance.setdefault(key, copy.deepcopy(child["default"]))
        yield from check_properties(validator, spec, instance, schema)

    return validators.extend(validator_class, {"properties": properties})


FillingValidator = _filling(Draft202012Validator)


def load_schema(schema_path: str | os.PathLike) -> dict:
    with open(schema_path, encoding="utf-8") as handle:
        # libyaml's loader where PyYAML has it: five times faster on the schema, at every start
        return yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def config_problem(config: dict, schema_path: str | os.PathLike, fill_defaults: bool = False) -> str:
    """The message for the most relevant schema violation of ``config`` ("" if it is valid),
    overrides of a section included, then a key of a per-language mapping that names no language;
    ``fill_defaults`` sets the schema's defaults in ``config``."""
    schema = load_schema(schema_path)
    problem = _first((FillingValidator if fill_defaults else Draft202012Validator)(schema), config, schema)
    if problem:
        return problem
    if problem := unused_language_key(config, schema):
        return problem
    for path, section, value in _overrides(config):
        # Every key optional: an override names only what it changes.
        optional = {**_section_schema(schema, section), "required": []}
        problem = _first(Draft202012Validator({**optional, "definitions": schema["definitions"]}), value, schema, path)
        if problem:
            return problem
    return ""


def _language_key_problem(value, schema: dict, root: dict, path: tuple, languages: set[str]) -> str:
    schema = _resolve(schema, root)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            if problem := _language_key_problem(item, schema["items"], root, (*path, index), languages):
                return problem
    if not isinstance(value, dict):
        return ""
    for alternative in schema.get("oneOf", []):
        if _resolve(alternative, root).get("type") == "object":
            if problem := _language_key_problem(value, alternative, root, path, languages):
                return problem
    if schema.get("x-per-language"):
        for key in value:
            if key not in languages:
                return (f"config setting '{_where((*path, key))}': {key!r} names no language (a key here is "
                        f"one of {', '.join(sorted(languages))}; fix or remove it)")
    properties, others = schema.get("properties", {}), schema.get("additionalProperties")
    for key, item in value.items():
        child = properties.get(key, others if isinstance(others, dict) else None)
        if child is not None:
            if problem := _language_key_problem(item, child, root, (*path, key), languages):
                return problem
    return ""


def unused_language_key(config: dict, schema: dict) -> str:
    """The first key of a per-language mapping (``x-per-language`` in the schema) that names no
    language ("" if there is none): such a key was ignored, whether a typo or a path.

    A key is a language of the run (``languages``, ``source.lang``) or one the workflow supports
    (the schema's ``definitions.language``): a config may list the inputs of more languages than
    a run selects (``--config languages=[fr,ru]`` on config/paper.yaml)."""
    languages = {*(config.get("languages") or []), (config.get("source") or {}).get("lang"),
                 *_resolve(schema["definitions"]["language"], schema).get("enum", [])}
    return _language_key_problem(config, schema, schema, (), {lang for lang in languages if isinstance(lang, str)})


def yaml_problem(path: str | os.PathLike) -> str:
    """``file:line:column: what is wrong`` for a config file that is not valid YAML, cannot be read
    or holds no mapping of settings ("" if it is a config)."""
    if os.path.isdir(path):
        return f"{path}: is a directory, not a config file (give the YAML file itself)"
    try:
        with open(path, encoding="utf-8") as handle:
            content = yaml.safe_load(handle)
    except OSError as error:
        return f"{path}: cannot be read: {error.strerror or error} (check the path)"
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = error.problem or error.context or "unreadable"
        if error.context and error.problem:  # e.g. "while parsing a flow sequence", opened earlier
            started = f" from line {error.context_mark.line + 1}" if error.context_mark else ""
            problem += f" ({error.context}{started})"
        return f"{where}: not valid YAML: {problem}"
    except yaml.YAMLError as error:
        return f"{path}: not valid YAML: {error}"
    if content is None:
        return f"{path}: holds no settings (it is empty or comments only; write the run's settings in it)"
    if not isinstance(content, dict):
        return (f"{path}: holds no settings: its top level is {str(content)[:40]!r}, not a mapping of keys "
                "such as source, languages, corpora")
    return ""


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SNAKEFILE = os.path.join(REPO, "workflow", "Snakefile")


def run_problem(configfiles: list[str | os.PathLike], targets: list[str] | None = None,
                snakefile: str | os.PathLike = SNAKEFILE) -> str:
    """The first problem a dry run of these config files finds ("" if there is none).

    The workflow itself is parsed and its job graph built, in this process and with no job run,
    so every check of the dry run is made here too: the schema, the registries (initialisers,
    objectives, tasks), the settings checked together, every input file and model directory, and
    whatever the Snakefile checks next. ``targets``: what the run asks for (its default target)."""
    from pathlib import Path

    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, Quietness, ResourceSettings

    try:
        with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
            workflow = api.workflow(resource_settings=ResourceSettings(cores=1),
                                    config_settings=ConfigSettings(configfiles=[Path(p).resolve() for p in configfiles]),
                                    snakefile=Path(snakefile))
            dag = workflow.dag(DAGSettings(targets=set(targets or [])))
            dag.execute_workflow(executor="dryrun")
    except Exception as error:  # every problem the dry run raises is the answer, whatever its type
        return str(_ramen_cause(error) or error).strip() or type(error).__name__
    return ""


def _ramen_cause(error: BaseException) -> BaseException | None:
    """The ramen error behind ``error``: Snakemake wraps one raised in an input function in a
    message of several lines (its traceback included), which says nothing more."""
    from ramen.errors import RamenError

    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, RamenError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def main(argv: list[str] | None = None) -> int:
    """Check config files as ``snakemake -n --configfile`` would: first their YAML (Snakemake reads
    them before the workflow starts and does not say where a syntax error is) and every setting
    against the schema, then everything the dry run checks (run_problem), from the current
    directory, where the config's relative paths point."""
    import argparse
    from pathlib import Path

    from snakemake.utils import update_config

    parser = argparse.ArgumentParser(prog="python -m ramen.config_errors", description=main.__doc__)
    parser.add_argument("configs", nargs="+", help="config files, merged left to right as --configfile does")
    parser.add_argument("--target", action="append", dest="targets", metavar="TARGET",
                        help="what the run asks for, as on snakemake's command line (default: its default target)")
    parser.add_argument("--schema", default=str(Path(REPO) / "workflow" / "schemas" / "config.schema.yaml"))
    parser.add_argument("--snakefile", default=SNAKEFILE)
    args = parser.parse_args(argv)
    config: dict = {}
    for path in args.configs:
        problem = yaml_problem(path)
        if problem:
            print(problem)
            return 1
        with open(path, encoding="utf-8") as handle:
            update_config(config, yaml.safe_load(handle))
    problem = config_problem(config, args.schema) or config_problem(config, args.schema, fill_defaults=True)
    if not problem:
        problem = run_problem(args.configs, args.targets, args.snakefile)
    print(problem or f"{', '.join(args.configs)}: every setting is valid, and a dry run finds no problem")
    return 1 if problem else 0


if __name__ == "__main__":
    raise SystemExit(main())
