"""Fetching external inputs: resumable HTTP downloads, archive members, Hugging Face snapshots.

Every function writes its output atomically: a download grows in ``<dest>.part``
(kept between attempts and between runs, so an interrupted download resumes with
an HTTP Range request) and is renamed onto ``dest`` only once it is complete,
has the expected sha256 and does not look like an HTML page.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import posixpath
import shutil
import socket
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from tqdm import tqdm

from ramen.errors import InputFormatError, RamenError
from ramen.io import atomic_path

log = logging.getLogger(__name__)

CHUNK = 1 << 20
USER_AGENT = "ramen-workflow/0.1"
# HTTP statuses worth retrying: timeouts, rate limits and server-side failures.
_RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
# Leading bytes of the archive and compression formats the workflow reads.
_MAGIC: dict[str, tuple[bytes, ...]] = {
    ".bz2": (b"BZh",),
    ".gz": (b"\x1f\x8b",),
    ".tgz": (b"\x1f\x8b",),
    ".zip": (b"PK\x03\x04", b"PK\x05\x06"),
    ".xz": (b"\xfd7zXZ\x00",),
}


class DownloadError(RamenError):
    """A download failed for a reason the user has to look at (URL, checksum, content)."""


def _expected_magic(dest: Path) -> tuple[bytes, ...] | None:
    return _MAGIC.get(dest.suffix.lower())


def looks_like_html(head: bytes) -> bool:
    """Whether the first bytes of a file are an HTML (or XHTML) page."""
    start = head.lstrip()[:512].lower()
    if start.startswith(b"<?xml"):  # XHTML; a MediaWiki dump also starts with an XML declaration
        return b"<html" in start
    return start.startswith((b"<!doctype html", b"<html", b"<head"))


def check_content(path: Path, url: str, content_type: str = "", name: Path | None = None) -> None:
    """Raise :class:`DownloadError` when ``path`` is an HTML page or lacks its format's magic bytes.

    The format is taken from the extension of ``name`` (default: ``path``).

    Mirrors and login walls answer a missing file with an HTML page and status
    200; without this check it would be saved under the archive's name.
    """
    with open(path, "rb") as handle:
        head = handle.read(512)
    name = name or path
    wants_html = name.suffix.lower() in (".html", ".htm")
    if not wants_html and ("text/html" in content_type.lower() or looks_like_html(head)):
        raise DownloadError(
            f"{url} returned an HTML page, not the expected file {name.name} "
            "(a login page, an error page or a moved link?): check the URL in the config"
        )
    magic = _expected_magic(name)
    if magic and not head.startswith(magic):
        raise DownloadError(
            f"{url} did not return a {name.suffix} file (it starts with {head[:16]!r}): "
            "check the URL in the config"
        )


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


class _Retry(Exception):
    """A transient failure: try again, resuming from what is on disk."""


class _Fatal(Exception):
    """A failure that trying again does not fix (a wrong URL, host or port): not retried."""


def _fetch_once(url: str, part: Path, timeout: float, progress: bool) -> str:
    """One HTTP attempt appending to ``part``; returns the Content-Type of the response."""
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": USER_AGENT}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and have:
            # The part file is already whole (or longer than the file): start again cleanly.
            part.unlink()
            raise _Retry(f"HTTP 416 for a resumed range of {url}; restarting") from error
        if error.code in _RETRY_STATUSES:
            raise _Retry(f"HTTP {error.code} {error.reason} for {url}") from error
        raise _Fatal(f"HTTP {error.code} {error.reason} for {url} (check the URL, or download the file "
                     "yourself and give its local path instead)") from error
    except (urllib.error.URLError, socket.timeout, ConnectionError, http.client.HTTPException) as error:
        if isinstance(getattr(error, "reason", error), ConnectionRefusedError):
            # Nothing listens there: a wrong host or port, which waiting does not fix.
            raise _Fatal(f"{url}: connection refused by {urllib.parse.urlsplit(url).netloc} (check the host and "
                         "port of the URL, or download the file yourself and give its local path "
                         "instead)") from error
        raise _Retry(f"cannot reach {url}: {error}") from error
    with response:
        if have and response.status != 206:
            have = 0  # the server ignored the Range header: it sends the whole file again
        length = response.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        mode = "ab" if have else "wb"
        received = 0
        bar = tqdm(total=total, initial=have, unit="B", unit_scale=True, desc=part.name[:-5],
                   disable=not progress, mininterval=5)
        try:
            with open(part, mode) as handle:
                while True:
                    try:
                        block = response.read(CHUNK)
                    except (http.client.IncompleteRead, socket.timeout, ConnectionError) as error:
                        raise _Retry(f"connection lost after {have + received} bytes of {url}: {error}") from error
                    if not block:
                        break
                    handle.write(block)
                    received += len(block)
                    bar.update(len(block))
        finally:
            bar.close()
        if length is not None and received < int(length):
            raise _Retry(f"connection closed after {have + received} of {total} bytes of {url}")
        return response.headers.get("Content-Type", "")


def download(
    url: str,
    dest: str | os.PathLike,
    *,
    sha256: str | None = None,
    retries: int = 5,
    backoff: float = 5.0,
    timeout: float = 60.0,
    progress: bool = True,
    setting: str = "",
) -> Path:
    """Download ``url`` to ``dest``, resuming a partial download, and verify it.

    Transient failures (connection lost, timeouts, HTTP 5xx/429) are retried
    ``retries`` times, waiting ``backoff``·2^k seconds, each attempt resuming
    from the bytes already in ``<dest>.part``. Raises :class:`DownloadError`
    at once for other HTTP errors (e.g. 404), when the checksum differs from
    ``sha256``, or when an HTML page arrives instead of the file; in those
    cases nothing is left at ``dest`` and the partial file is removed. A refused
    connection is not retried either. Every message names ``setting``, the config key
    that gives the URL (``<key>.url``; a wrong checksum names ``<key>.sha256``).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    where = f"config setting '{setting}': " if setting else ""
    content_type = ""
    for attempt in range(retries + 1):
        try:
            content_type = _fetch_once(url, part, timeout, progress)
            break
        except _Fatal as reason:
            raise DownloadError(f"{where}{reason}") from reason
        except _Retry as reason:
            if attempt == retries:
                raise DownloadError(
                    f"{where}{reason}; gave up after {retries + 1} attempts (rerun to resume from "
                    f"{part.stat().st_size if part.exists() else 0} bytes in {part})"
                ) from reason
            wait = backoff * 2**attempt
            log.warning("%s; retrying in %.1f s (attempt %d of %d)", reason, wait, attempt + 2, retries + 1)
            time.sleep(wait)
    try:
        check_content(part, url, content_type, name=dest)
    except DownloadError as error:
        part.unlink(missing_ok=True)
        raise DownloadError(f"{where}{error}") from None
    if sha256 and (actual := sha256_of(part)) != sha256.lower():
        part.unlink(missing_ok=True)
        checksum = f"config setting '{setting.removesuffix('.url')}.sha256': " if setting else ""
        raise DownloadError(f"{checksum}{url}: sha256 mismatch, expected {sha256.lower()} but the download has "
                            f"{actual} (a changed or corrupted file; fix the URL or the sha256 in the config)")
    os.replace(part, dest)
    return dest


def member_name(name: str) -> str:
    """An archive member's name as configs give it: ``./a//b`` is ``a/b``; an absolute name or one
    that climbs out (``/x``, ``../x``) keeps its ``/`` or ``..``, so it never matches a plain one."""
    return posixpath.normpath(name) if name else name


def _escapes(name: str) -> bool:
    return name.startswith("/") or name == ".." or name.startswith("../")


def extract_member(archive: str | os.PathLike, member: str, dest: str | os.PathLike) -> Path:
    """Copy one file out of a zip or tar archive (any compression) to ``dest``, streaming.

    ``member`` matches the member whose normalised name (:func:`member_name`) is exactly its own.
    Raises :class:`InputFormatError` naming the archive when it is corrupt, lacks ``member``
    (listing a few names it does hold), or when ``member`` is absolute or climbs out of the
    archive (such a name is refused, not extracted).
    """
    archive, dest = Path(archive), Path(dest)
    wanted = member_name(member)
    if _escapes(wanted):
        raise InputFormatError(archive, None, f"member {member!r} is an absolute name or climbs out of the "
                               "archive: refused", "name a member stored under a relative path")
    try:
        with atomic_path(dest) as tmp:
            if zipfile.is_zipfile(archive):
                with zipfile.ZipFile(archive) as bundle:
                    names = bundle.namelist()
                    found = [name for name in names if member_name(name) == wanted and not name.endswith("/")]  # not a folder
                    if not found:
                        _missing_member(archive, member, names)
                    with bundle.open(found[0]) as source, open(tmp, "wb") as target:
                        shutil.copyfileobj(source, target, CHUNK)
            else:
                # Streaming mode reads a .tgz once, front to back, without seeking.
                with tarfile.open(archive, "r|*") as bundle:
                    seen = []
                    for info in bundle:
                        if member_name(info.name) == wanted:
                            if not info.isfile():
                                raise InputFormatError(archive, None, f"{member} is not a regular file")
                            source = bundle.extractfile(info)
                            with open(tmp, "wb") as target:
                                shutil.copyfileobj(source, target, CHUNK)
                            break
                        if len(seen) < 2000:
                            seen.append(info.name)
                    else:
                        _missing_member(archive, member, seen)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as error:
        if isinstance(error, FileNotFoundError) and not archive.exists():
            raise
        raise InputFormatError(
            archive, None, f"cannot read the archive: {error}",
            "delete it and download it again (truncated or corrupt?)",
        ) from error
    return dest


def _missing_member(archive: Path, member: str, names: list[str]) -> None:
    stem = member.rsplit("/", 1)[-1].split(".")[0]
    close = [name for name in names if stem and stem in name][:5] or names[:5]
    raise InputFormatError(
        archive, None, f"no member {member!r} in the archive",
        f"members include {close}; fix 'member' in the config",
    )


# Files enough to load a model and its tokenizer with transformers; other
# frameworks' weights (TF, Flax, ONNX) in the same repository are skipped.
# chat_template.jinja: where transformers now saves a decoder's chat template, kept with its tokenizer.
MODEL_FILES: tuple[str, ...] = (
    "*.json", "*.txt", "*.model", "*.safetensors", "vocab.*", "merges.txt", "*.jinja",
)


def snapshot_model(repo_id: str, dest: str | os.PathLike, revision: str | None = None) -> Path:
    """Download a Hugging Face model repository (config, tokenizer, safetensors) to ``dest``.

    The directory appears only once every file is there. Raises
    :class:`DownloadError` when the repository holds no ``config.json`` or no
    safetensors weights.
    """
    from huggingface_hub import snapshot_download

    dest = Path(dest)
    with atomic_path(dest) as tmp:
        try:
            snapshot_download(repo_id, revision=revision, local_dir=tmp, allow_patterns=list(MODEL_FILES))
        except Exception as error:  # the hub client raises many types; all mean the same to a user
            raise DownloadError(
                f"cannot download the Hugging Face model {repo_id!r}"
                f"{f' at revision {revision}' if revision else ''}: {error}"
            ) from error
        shutil.rmtree(tmp / ".cache", ignore_errors=True)
        if not (tmp / "config.json").exists() or not any(tmp.glob("*.safetensors")):
            raise DownloadError(f"Hugging Face repository {repo_id!r} holds no config.json or no safetensors weights")
    return dest
