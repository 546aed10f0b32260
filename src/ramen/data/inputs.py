"""External inputs named in the config: a local path, or where to fetch the file from.

Wherever the config names a file it accepts either a path string or a mapping:

* ``{path: local/file}`` or ``{url: https://..., sha256: <hex, optional>}``;
* either one plus ``member: dir/file`` for one file inside a zip or tar archive;
* ``{hf: owner/name, revision: <optional>}`` for a Hugging Face model snapshot.

:func:`resolve` maps each to the local path the rules read, and
:func:`fetch_jobs` lists what the download rules must produce. Downloads land
under ``download_dir`` at a path derived from the URL (host, then URL path),
so the same URL always resolves to the same file and two URLs never collide.
"""

from __future__ import annotations

import posixpath
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field

from ramen.errors import ConfigError

@dataclass(frozen=True)
class FetchJobs:
    """What the download rules produce, keyed by output path."""

    files: dict[str, dict]  # output -> {"url", "sha256"}
    members: dict[str, dict]  # output -> {"archive", "member"}
    models: dict[str, dict]  # output directory -> {"hf", "revision"}
    settings: dict[str, str] = field(default_factory=dict)  # output -> the first config key naming it

    def outputs(self) -> list[str]:
        return sorted({*self.files, *self.members, *self.models})


def is_spec(value) -> bool:
    """True for a mapping that names a file by path, URL, archive member or model id."""
    return isinstance(value, dict) and bool(value.keys() & {"path", "url", "hf"})


def _safe_relative(path: str, setting: str) -> str:
    path = posixpath.normpath(path.lstrip("/"))
    if path in ("", ".") or path.startswith("..") or "/../" in f"/{path}/":
        raise ConfigError(setting, f"{path!r} cannot name a file under the download directory")
    return path


def url_path(url: str, download_dir: str, setting: str = "url") -> str:
    """Local path of a download: ``<download_dir>/<host>/<URL path>`` (query dropped)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(setting, f"{url!r} is not an http(s) URL", "give a full URL or a local path")
    if not parts.path or parts.path.endswith("/"):
        raise ConfigError(setting, f"{url!r} names no file", "the URL must end in a file name")
    host = parts.hostname or parts.netloc
    return f"{download_dir}/{host}/{_safe_relative(urllib.parse.unquote(parts.path), setting)}"


def _archive_path(spec: dict, download_dir: str, setting: str) -> str:
    if "url" in spec:
        return url_path(spec["url"], download_dir, setting)
    return spec["path"]


def resolve(spec, download_dir: str, setting: str = "input") -> str:
    """The local path the workflow reads for one config value (a path or a mapping)."""
    if isinstance(spec, str):
        return spec
    if not is_spec(spec):
        raise ConfigError(setting, f"{spec!r} names no file", "give a path, {url: ...}, {path: ...} or {hf: ...}")
    if "hf" in spec:
        name = _safe_relative(spec["hf"], setting)
        revision = spec.get("revision")
        return f"{download_dir}/huggingface.co/{name}" + (f"@{revision}" if revision else "")
    if ("url" in spec) == ("path" in spec):
        raise ConfigError(setting, f"{spec!r}: give exactly one of 'url' and 'path'")
    if "path" in spec and spec.get("sha256"):
        raise ConfigError(setting, "sha256 is checked on downloads only", "drop it or give the url")
    archive = _archive_path(spec, download_dir, setting)
    member = spec.get("member")
    if not member:
        return archive
    if member.startswith("/"):
        # extract_member refuses such a stored name (ramen.data.download): said here, before any job.
        raise ConfigError(f"{setting}.member", f"{member!r} is an absolute name", "name a relative archive member")
    member = _safe_relative(member, f"{setting}.member")
    if "url" in spec:
        return f"{archive}.d/{member}"
    return f"{download_dir}/local/{_safe_relative(archive, setting)}.d/{member}"


def _walk(value, setting: str) -> Iterator[tuple[str, dict]]:
    if is_spec(value) and value.keys() & {"url", "hf", "member", "sha256"}:
        yield setting, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, f"{setting}.{key}" if setting else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, f"{setting}[{index}]")


def xnli_release_members(release) -> dict[str, dict]:
    """The XNLI 1.0 dev and test files inside the release archive that ``xnli_release`` names (a
    path or a download spec), by split; {} without one."""
    if not release:
        return {}
    release = {"path": release} if isinstance(release, str) else release
    return {split: {**release, "member": f"XNLI-1.0/xnli.{split}.tsv"} for split in ("dev", "test")}


def fetch_jobs(config: dict, download_dir: str) -> FetchJobs:
    """Every download, archive extraction and model snapshot the config asks for."""
    # The XNLI release is read through its dev and test members.
    config = {**config, "xnli_release": xnli_release_members(config.get("xnli_release"))}
    files: dict[str, dict] = {}
    members: dict[str, dict] = {}
    models: dict[str, dict] = {}
    settings: dict[str, str] = {}
    for setting, spec in _walk(config, ""):
        target = resolve(spec, download_dir, setting)
        if "hf" in spec:
            settings.setdefault(target, setting)
            models[target] = {"hf": spec["hf"], "revision": spec.get("revision")}
            continue
        archive = _archive_path(spec, download_dir, setting)
        sha256 = spec.get("sha256") or None
        if "url" in spec:
            settings.setdefault(archive, f"{setting}.url")
            known = files.get(archive)
            if known and known["sha256"] and sha256 and known["sha256"] != sha256:
                raise ConfigError(setting, f"{spec['url']} is given two different sha256 values")
            files[archive] = {"url": spec["url"], "sha256": sha256 or (known or {}).get("sha256")}
        if spec.get("member"):
            settings.setdefault(target, setting)
            members[target] = {"archive": archive, "member": spec["member"]}
    return FetchJobs(files, members, models, settings)
