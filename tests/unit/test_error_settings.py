"""Every ConfigError names a config key that exists: each literal setting resolves in the schema.

Settings are collected from the code: ``ConfigError("key", ...)`` calls in src/ramen and the workflow's
scripts (by AST) and rule files (by pattern). A part of a key may be a placeholder, as the code writes
them: ``<variant>``, ``*`` or an f-string's ``{...}`` stand for any name of a mapping, ``[...]`` for any
index of a list (and only a list). A setting that starts with a placeholder (``f"{setting}.nodes"``)
extends a key its caller names, and is skipped.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text(encoding="utf-8"))
PLACEHOLDER = re.compile(r"^(<[^>]*>|\*|\{\})$")  # any name of a mapping, never a list's item
INDEX = "[]"  # any index of a list: what ``[...]`` in a key becomes
# Settings that name no key, each with why. Keep it empty: an entry here is an error message to fix.
NOT_KEYS: set[str] = set()


def _literal(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def config_error_settings() -> list[tuple[str, str]]:
    """(setting, where) of every ConfigError call whose setting is a (format) string literal."""
    found = []
    scripts = [*(REPO / "src" / "ramen").rglob("*.py"), *(REPO / "workflow" / "scripts").rglob("*.py")]
    for path in sorted(scripts):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == \
                    "ConfigError":
                arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "setting"),
                                                          None)
                setting = _literal(arg)
                if setting is not None:
                    found.append((setting, f"{path.relative_to(REPO)}:{node.lineno}"))
    rules = [REPO / "workflow" / "Snakefile", *(REPO / "workflow" / "rules").rglob("*.smk")]
    for path in sorted(rules):
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r'ConfigError\(\s*(f?)"([^"]*)"', text):
            setting = re.sub(r"\{[^}]*\}", "{}", match.group(2)) if match.group(1) else match.group(2)
            found.append((setting, f"{path.relative_to(REPO)}:{text.count(chr(10), 0, match.start()) + 1}"))
    return found


def _deref(node):
    while isinstance(node, dict) and "$ref" in node:
        target = SCHEMA
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _children(node, part: str) -> list:
    """The schema nodes ``part`` addresses under ``node``: a list's items only by index, a mapping's only by name."""
    node = _deref(node)
    if not isinstance(node, dict):
        return []
    found = [child for key in ("anyOf", "oneOf", "allOf") for sub in node.get(key, []) for child in _children(sub, part)]
    if part == INDEX or part.isdigit():
        # A list's items are addressed by index only (``languages[0]``, never ``languages.de``).
        return found + ([node["items"]] if isinstance(node.get("items"), dict) else [])
    anything = bool(PLACEHOLDER.match(part))
    properties = node.get("properties", {})
    found += list(properties.values()) if anything else [properties[part]] if part in properties else []
    if isinstance(node.get("additionalProperties"), dict) and (anything or part not in properties):
        found.append(node["additionalProperties"])  # a mapping keyed by name or language
    found += [sub for pattern, sub in node.get("patternProperties", {}).items() if anything or re.search(pattern, part)]
    return found


def resolves(setting: str) -> bool:
    """Whether the dotted key (``a.b[0].c``; what follows ``:`` is a value, not the key) is in the schema."""
    parts = []
    for part in setting.split(":")[0].strip().split("."):
        name, indices = re.fullmatch(r"([^\[]*)((?:\[[^\]]*\])*)", part).groups()
        if not name:
            return False  # an empty part (``a..b``, ``a.``) names nothing
        parts += [name, *[INDEX] * indices.count("[")]
    nodes = [SCHEMA]
    for part in parts:
        nodes = [child for node in nodes for child in _children(node, part)]
        if not nodes:
            return False
    return True


def test_the_resolver_finds_keys_and_refuses_others():
    assert resolves("variants.<variant>.init") and resolves("tasks.xnli.train[].splits")
    assert resolves("corpora.{}[{}].path") and resolves("peers.distill.lr") and resolves("threads.align")
    assert not resolves("byte_bpe.vocab_size") and not resolves("peers.distill.learning_rate")
    # A list is no mapping: its items are not addressable by a name or a language code.
    assert resolves("languages[0]") and resolves("languages[]") and resolves("corpora.<lang>")
    assert not resolves("languages.{}") and not resolves("languages.de") and not resolves("languages.<lang>")
    assert not resolves("corpora.{}.path") and not resolves("vocab_extension.json") and not resolves("tokenizer")


@pytest.mark.parametrize("setting, where", [(s, w) for s, w in config_error_settings()
                                             if not s.startswith("{}") and s not in NOT_KEYS])
def test_every_config_error_names_a_key_of_the_schema(setting, where):
    assert resolves(setting), f"{where}: ConfigError names {setting!r}, which is no key of config.schema.yaml"
