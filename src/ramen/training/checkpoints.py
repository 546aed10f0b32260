"""Numbered checkpoints that a killed job resumes from, written atomically and read back
strictly (the newest one that loads cleanly), RNG states, and the run id (:func:`fingerprint`)
that the checkpoints of a run live under."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, load_model, save_file
from torch import nn

from ramen.io import atomic_path
from ramen.modeling import frozen

log = logging.getLogger(__name__)


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    if not directory.exists():
        return []
    found = []
    for path in directory.glob("step-*"):
        try:
            found.append((int(path.name.split("-")[1]), path))
        except (IndexError, ValueError):
            continue
    return sorted(found)


def prune_checkpoints(directory: Path, keep_last: int, keep_every: int = 0) -> None:
    """Keep the last ``keep_last`` checkpoints and every ``keep_every``-th step."""
    checkpoints = list_checkpoints(directory)
    recent = {step for step, _ in checkpoints[-max(keep_last, 1):]}
    for step, path in checkpoints:
        if step in recent or (keep_every and step % keep_every == 0):
            continue
        shutil.rmtree(path, ignore_errors=True)


def remove_run(run_dir: Path) -> None:
    """Delete a finished run's checkpoints, and the job's directory above them once it is empty."""
    shutil.rmtree(run_dir, ignore_errors=True)
    try:
        run_dir.parent.rmdir()
    except OSError:  # other runs (other settings) of the same job are still there
        pass


def rng_state() -> dict[str, torch.Tensor]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for index, cuda_state in enumerate(torch.cuda.get_rng_state_all()):
            state[f"cuda{index}"] = cuda_state
    return state


def set_rng_state(state: Mapping[str, torch.Tensor]) -> None:
    torch.set_rng_state(state["torch"])
    cuda = [state[key] for key in sorted(k for k in state if k.startswith("cuda"))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def save_state(directory: Path, step: int, *, modules: Mapping[str, nn.Module] | None = None,
               tensors: Mapping[str, Mapping[str, torch.Tensor]] | None = None,
               objects: Mapping[str, object] | None = None, state: Mapping | None = None, keep_last: int = 2,
               keep_every: int = 0) -> Path:
    """One checkpoint, written atomically: ``<name>.safetensors`` per module (tied weights once;
    read back with :func:`read_module`) and per tensor dict, ``<name>.pt`` per optimiser/schedule
    state (tensors and plain values, read back with weights_only=True), ``state.json``. A crash
    mid-write leaves the previous checkpoints intact; at least two are kept, since rewriting the
    same step (an epoch's end) removes the old copy first."""
    target = directory / checkpoint_name(step)
    directory.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        tmp.mkdir()
        for name, module in (modules or {}).items():
            save_file(tied_once(module), str(tmp / f"{name}.safetensors"))
        for name, values in (tensors or {}).items():
            save_file(unshared(values), str(tmp / f"{name}.safetensors"))
        for name, value in (objects or {}).items():
            torch.save(value, tmp / f"{name}.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, **(state or {})}, indent=2))
    prune_checkpoints(directory, keep_last, keep_every)
    return target


def tied_once(module: nn.Module) -> dict[str, torch.Tensor]:
    """A module's tensors with each tied weight once, under its first name: :func:`read_module` ties
    the others back from the module itself. safetensors' own ``save_model`` records the aliases in
    the header's metadata, whose key order changes from process to process, so two runs' identical
    checkpoints would differ byte for byte."""
    seen, kept = set(), {}
    for name, value in module.state_dict().items():
        if frozen.is_nf4(value):  # its inner tensors (ramen.modeling.frozen)
            kept.update({key: inner.detach().contiguous().cpu() for key, inner in frozen.pack(name, value).items()})
            continue
        view = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape), tuple(value.stride()))
        if value.numel() and view in seen:
            continue
        seen.add(view)
        kept[name] = value.detach().contiguous().cpu()
    return kept


def unshared(values: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU tensors safetensors can write: tied weights (one storage, two names) are copied."""
    seen, result = set(), {}
    for key, value in values.items():
        value = value.detach().contiguous().cpu()
        pointer = (value.untyped_storage().data_ptr(), value.storage_offset())
        result[key] = value.clone() if pointer in seen else value
        seen.add(pointer)
    return result


def load_latest_state(directory: Path, restore: Callable[[Path, dict], None]) -> dict | None:
    """``restore(path, state)`` from the newest checkpoint that loads cleanly; its state.json, or
    None when there is none. ``restore`` reads the files with :func:`read_tensors` and
    :func:`read_object`; a truncated or corrupt checkpoint falls back to an older one."""
    for step, path in reversed(list_checkpoints(directory)):
        try:
            state = json.loads((path / "state.json").read_text())
            restore(path, state)
            log.info("resumed from %s (step %d)", path, state["step"])
            return state
        except Exception as error:
            log.warning("checkpoint %s is unreadable (%s: %s); trying the previous one",
                        path, type(error).__name__, error)
    return None


def read_tensors(path: Path, name: str) -> dict[str, torch.Tensor]:
    return load_file(str(path / f"{name}.safetensors"))


def read_module(path: Path, name: str, module: nn.Module) -> None:
    """Load a module saved by :func:`save_state` (every parameter and buffer, strictly)."""
    if not frozen.has_nf4(module):
        load_model(module, str(path / f"{name}.safetensors"))
        return
    state = load_file(str(path / f"{name}.safetensors"))
    frozen.unpack_into(module, state)
    missing, unexpected = module.load_state_dict(state, strict=False)
    # tied_once kept a tied weight under its first name; its other names are filled through it.
    first = {}
    for key, param in module.named_parameters(remove_duplicate=False):
        first.setdefault(id(param), key)
    aliases = {key for key, param in module.named_parameters(remove_duplicate=False) if first[id(param)] != key}
    if set(missing) - aliases or unexpected:
        raise RuntimeError(f"{path / name}: missing {sorted(set(missing) - aliases)}, unexpected {sorted(unexpected)}")


def read_object(path: Path, name: str):
    return torch.load(path / f"{name}.pt", weights_only=True)


def hash_files(digest, paths: Iterable[str | Path]) -> None:
    """Feed each file (every file below a directory, in name order) to ``digest``: name, then bytes."""
    for path in paths:
        for file in sorted(Path(path).rglob("*")) if Path(path).is_dir() else [Path(path)]:
            if file.is_file():
                digest.update(file.name.encode())
                with open(file, "rb") as handle:
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(block)


def fingerprint(values: Mapping, paths: Sequence[str | Path] = (), data: Iterable[str] = ()) -> str:
    """A short id of what fixes a run: settings, the contents of its starting files and its data.
    Checkpoints live under it, so a run with other settings or inputs starts afresh."""
    import hashlib

    digest = hashlib.blake2b(digest_size=6)
    digest.update(json.dumps(values, sort_keys=True, default=list).encode())
    hash_files(digest, paths)
    for item in data:
        digest.update(item.encode())
        digest.update(b"\0")
    return digest.hexdigest()
