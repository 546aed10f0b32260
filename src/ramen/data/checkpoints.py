"""Where a model checkpoint lies: a Hugging Face directory (``config.json``), a directory holding
one GGUF file, or a GGUF file itself. Torch-free, so every stage that reads a source model or its
tokenizer finds it the same way."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ramen.errors import ConfigError


@dataclass(frozen=True)
class SourceLocation:
    """A checkpoint's directory, and the GGUF file in it when it is one."""

    directory: Path
    gguf_file: str | None = None

    def load_kwargs(self) -> dict:
        """Keyword arguments of the Auto classes' ``from_pretrained`` for this checkpoint."""
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}


def is_gguf_source(path: str | os.PathLike) -> bool:
    """A ``.gguf`` file, or a directory without ``config.json`` holding one."""
    path = Path(path)
    if path.suffix == ".gguf":
        return path.is_file()
    return path.is_dir() and not (path / "config.json").exists() and any(path.glob("*.gguf"))


def locate_source(path: str | os.PathLike, setting: str = "source.model") -> SourceLocation:
    """A Hugging Face directory, a directory with exactly one ``.gguf`` file, or a ``.gguf`` file."""
    path = Path(path).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return SourceLocation(path.parent, path.name)
    if (path / "config.json").exists():
        return SourceLocation(path)
    found = sorted(p.name for p in path.glob("*.gguf")) if path.is_dir() else []
    if len(found) == 1:
        return SourceLocation(path, found[0])
    if found:
        raise ConfigError(setting, f"{path} holds several GGUF files {found}",
                          "name one of them: give the path of the .gguf file")
    raise ConfigError(setting, f"{path} holds neither a config.json nor a .gguf file",
                      "point it at a Hugging Face model directory or a GGUF file")
