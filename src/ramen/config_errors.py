"""One short message for a config that fails its schema: the key, where it is, what is allowed.

jsonschema's own message prints the whole schema of the section at fault (thousands of lines
for a typo); a user needs the setting's path and the allowed values instead.
"""

from __future__ import annotations

import os
import re

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match


def _where(path) -> str:
    parts = []
    for part in path:
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
    return "".join(parts).lstrip(".") or "the top level"


def _allowed(schema: dict, root: dict) -> list[str]:
    while "$ref" in schema:
        schema = root["definitions"][schema["$ref"].rsplit("/", 1)[1]]
    return sorted(schema.get("properties", {}))


def short_validation_error(config: dict, schema_path: str | os.PathLike) -> str:
    """The message for the most relevant schema violation of ``config`` ("" if it is valid)."""
    with open(schema_path, encoding="utf-8") as handle:
        schema = yaml.safe_load(handle)
    error = best_match(Draft202012Validator(schema).iter_errors(config))
    if error is None:
        return ""
    where = _where(error.absolute_path)
    if error.validator == "additionalProperties":
        unexpected = re.findall(r"'([^']+)'", error.message.split("(", 1)[-1])
        allowed = _allowed(error.schema, schema)
        return (f"config: unknown key {', '.join(repr(key) for key in unexpected)} in {where}; "
                f"allowed keys there: {', '.join(allowed)} (check the spelling, or remove it)")
    if error.validator == "required":
        return f"config: {where} lacks a required key: {error.message}"
    message = error.message if len(error.message) <= 300 else error.message[:300] + "..."
    return f"config setting '{where}': {message}"
