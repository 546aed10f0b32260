"""Downloads against a local HTTP server on 127.0.0.1: resume, checksums, HTTP errors, HTML pages."""

from __future__ import annotations

import bz2
import hashlib
import io
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import random
import socket
import time

import pytest

from ramen.data.download import DownloadError, download, extract_member
from ramen.errors import InputFormatError

# About 200 kB of incompressible bytes in a bzip2 stream (which starts with "BZh").
PAYLOAD = bz2.compress(random.Random(0).randbytes(200_000))


class FixtureServer(ThreadingHTTPServer):
    """Serves ``files`` by path; honours Range; ``drop_once`` paths lose the connection halfway once."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files: dict[str, tuple[bytes, str]] = {}
        self.drop_once: set[str] = set()
        self.unavailable: dict[str, int] = {}  # path -> how many more requests get HTTP 503
        self.requests: list[tuple[str, str | None]] = []

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FixtureServer

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_GET(self):
        range_header = self.headers.get("Range")
        self.server.requests.append((self.path, range_header))
        if self.server.unavailable.get(self.path):
            self.server.unavailable[self.path] -= 1
            self.send_error(503, "Service Unavailable")
            return
        if self.path not in self.server.files:
            self.send_error(404, "Not Found")
            return
        body, content_type = self.server.files[self.path]
        start = 0
        if range_header:
            start = int(range_header.removeprefix("bytes=").split("-")[0])
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        if self.path in self.server.drop_once:
            self.server.drop_once.discard(self.path)
            self.wfile.write(body[start:start + (len(body) - start) // 2])
            self.wfile.flush()
            self.close_connection = True
            return  # the client sees the connection end before Content-Length bytes
        self.wfile.write(body[start:])


@pytest.fixture
def server():
    httpd = FixtureServer()
    httpd.files["/data/corpus.xml.bz2"] = (PAYLOAD, "application/x-bzip2")
    httpd.files["/login.xml.bz2"] = (b"<!DOCTYPE html><html><body>Please log in</body></html>", "text/html")
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _fetch(url: str, dest: Path, **kwargs) -> Path:
    return download(url, dest, backoff=0.01, timeout=5, progress=False, **kwargs)


def test_download_succeeds_and_verifies_checksum(server, tmp_path):
    dest = tmp_path / "dl" / "corpus.xml.bz2"
    _fetch(f"{server.base}/data/corpus.xml.bz2", dest, sha256=hashlib.sha256(PAYLOAD).hexdigest())
    assert dest.read_bytes() == PAYLOAD
    assert not dest.with_name(dest.name + ".part").exists()
    assert server.requests == [("/data/corpus.xml.bz2", None)]


def test_interrupted_download_resumes_with_a_range_request(server, tmp_path):
    server.drop_once.add("/data/corpus.xml.bz2")
    dest = tmp_path / "corpus.xml.bz2"
    _fetch(f"{server.base}/data/corpus.xml.bz2", dest)
    assert dest.read_bytes() == PAYLOAD
    (first, no_range), (second, resumed_from) = server.requests
    assert first == second == "/data/corpus.xml.bz2" and no_range is None
    assert resumed_from == f"bytes={len(PAYLOAD) // 2}-"


def test_partial_file_from_an_earlier_run_is_resumed(server, tmp_path):
    dest = tmp_path / "corpus.xml.bz2"
    dest.with_name(dest.name + ".part").write_bytes(PAYLOAD[:1000])
    _fetch(f"{server.base}/data/corpus.xml.bz2", dest)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [("/data/corpus.xml.bz2", "bytes=1000-")]


def test_wrong_checksum_fails_clearly_and_leaves_nothing(server, tmp_path):
    dest = tmp_path / "corpus.xml.bz2"
    with pytest.raises(DownloadError, match=r"sha256 mismatch, expected 0{64} but the download has [0-9a-f]{64}"):
        _fetch(f"{server.base}/data/corpus.xml.bz2", dest, sha256="0" * 64)
    assert list(tmp_path.iterdir()) == []


def test_404_fails_at_once_naming_the_url(server, tmp_path):
    dest = tmp_path / "missing.zip"
    with pytest.raises(DownloadError, match=r"HTTP 404 Not Found for http://127\.0\.0\.1:\d+/missing\.zip"):
        _fetch(f"{server.base}/missing.zip", dest, retries=3)
    assert len(server.requests) == 1  # a 404 is not retried
    assert list(tmp_path.iterdir()) == []


def test_a_404_or_a_wrong_checksum_names_the_config_key_and_the_url(server, tmp_path):
    """Both named the URL only: with several inputs fetched, which setting to fix was a guess."""
    missing = f"{server.base}/missing.zip"
    with pytest.raises(DownloadError) as failure:
        _fetch(missing, tmp_path / "missing.zip", setting="tasks.xnli.test.fr.url")
    assert str(failure.value).startswith(f"config setting 'tasks.xnli.test.fr.url': HTTP 404 Not Found for {missing}")
    changed = f"{server.base}/data/corpus.xml.bz2"
    with pytest.raises(DownloadError) as failure:
        _fetch(changed, tmp_path / "corpus.xml.bz2", sha256="0" * 64, setting="corpora.fr[0].url")
    assert str(failure.value).startswith(f"config setting 'corpora.fr[0].sha256': {changed}: sha256 mismatch")
    assert list(tmp_path.iterdir()) == []


def test_html_page_instead_of_an_archive_fails(server, tmp_path):
    dest = tmp_path / "login.xml.bz2"
    with pytest.raises(DownloadError, match="returned an HTML page"):
        _fetch(f"{server.base}/login.xml.bz2", dest)
    assert list(tmp_path.iterdir()) == []


def test_wrong_magic_bytes_fail(server, tmp_path):
    server.files["/fake.zip"] = (b"just some text", "application/octet-stream")
    with pytest.raises(DownloadError, match=r"did not return a \.zip file"):
        _fetch(f"{server.base}/fake.zip", tmp_path / "fake.zip")


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on: a connection to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_refused_connection_fails_at_once_naming_the_setting_and_url(tmp_path):
    """It was retried with the default back-off for about 2.5 minutes, and the message named the
    URL but not the config key that gives it."""
    url = f"http://127.0.0.1:{free_port()}/file.bz2"
    started = time.monotonic()
    with pytest.raises(DownloadError) as failure:
        download(url, tmp_path / "file.bz2", progress=False, setting="corpora.fr[0].url")
    assert time.monotonic() - started < 30
    message = str(failure.value)
    assert message.startswith(f"config setting 'corpora.fr[0].url': {url}: connection refused"), message


def test_a_transient_server_error_is_retried(server, tmp_path):
    server.unavailable["/data/corpus.xml.bz2"] = 2
    dest = _fetch(f"{server.base}/data/corpus.xml.bz2", tmp_path / "corpus.xml.bz2", retries=2)
    assert dest.read_bytes() == PAYLOAD and len(server.requests) == 3
    server.unavailable["/data/corpus.xml.bz2"] = 3
    with pytest.raises(DownloadError, match=r"HTTP 503 Service Unavailable for .*gave up after 3 attempts"):
        _fetch(f"{server.base}/data/corpus.xml.bz2", tmp_path / "again.xml.bz2", retries=2)


# --- archive members ---------------------------------------------------------------


def tar_gz(path, member: str, data: bytes):
    """A gzip tar archive holding one file ``member``."""
    with tarfile.open(path, "w:gz") as bundle:
        info = tarfile.TarInfo(member)
        info.size = len(data)
        bundle.addfile(info, io.BytesIO(data))
    return path


def test_extract_member_from_zip_and_tgz(tmp_path):
    zipped = tmp_path / "XNLI-1.0.zip"
    with zipfile.ZipFile(zipped, "w") as bundle:
        bundle.writestr("XNLI-1.0/xnli.dev.tsv", "language\tgold_label\n")
    out = extract_member(zipped, "XNLI-1.0/xnli.dev.tsv", tmp_path / "out" / "dev.tsv")
    assert out.read_text() == "language\tgold_label\n"

    data = b"# sent_id = 1\n1\tBonjour\n"
    tgz = tar_gz(tmp_path / "ud.tgz", "ud-treebanks-v2.4/UD_French-GSD/fr_gsd-ud-dev.conllu", data)
    out = extract_member(tgz, "ud-treebanks-v2.4/UD_French-GSD/fr_gsd-ud-dev.conllu", tmp_path / "fr.conllu")
    assert out.read_bytes() == data
    with pytest.raises(InputFormatError, match=r"ud\.tgz: no member 'ud-treebanks-v2\.4/UD_French-GSD/fr_gsd-ud-train"):
        extract_member(tgz, "ud-treebanks-v2.4/UD_French-GSD/fr_gsd-ud-train.conllu", tmp_path / "t.conllu")
    assert not (tmp_path / "t.conllu").exists()


def test_a_tar_member_stored_under_dot_slash_is_found_by_its_plain_name(tmp_path):
    # The FLORES-200 release stores ./flores200_dataset/devtest/<code>.devtest; configs name the
    # member without the "./" (config/paper-decoder.yaml).
    data = "Le chat dort.\n".encode()
    tgz = tar_gz(tmp_path / "flores200_dataset.tar.gz", "./flores200_dataset/devtest/fra_Latn.devtest", data)
    out = extract_member(tgz, "flores200_dataset/devtest/fra_Latn.devtest", tmp_path / "fra.devtest")
    assert out.read_bytes() == data


def test_extract_member_from_corrupt_archive_names_it(tmp_path):
    broken = tmp_path / "broken.tgz"
    broken.write_bytes(b"\x1f\x8b\x08\x00" + b"garbage" * 50)
    with pytest.raises(InputFormatError, match=r"broken\.tgz: cannot read the archive"):
        extract_member(broken, "a/b.txt", tmp_path / "b.txt")
    assert not (tmp_path / "b.txt").exists()


def tar_with(path, names: dict[str, bytes]):
    with tarfile.open(path, "w:gz") as bundle:
        for name, data in names.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            bundle.addfile(info, io.BytesIO(data))
    return path


def test_a_member_matches_only_its_exact_normalised_name(tmp_path):
    """``member: evil.txt`` took the archive's ``../evil.txt`` and ``abs/evil.txt`` took
    ``/abs/evil.txt``: the stored names were stripped of every leading "." and "/"."""
    tgz = tar_with(tmp_path / "a.tgz", {"../evil.txt": b"climbs", "/abs/evil.txt": b"absolute"})
    for member in ("evil.txt", "abs/evil.txt"):
        with pytest.raises(InputFormatError, match=rf"no member '{member}' in the archive"):
            extract_member(tgz, member, tmp_path / "out.txt")
    zipped = tmp_path / "a.zip"
    with zipfile.ZipFile(zipped, "w") as bundle:
        bundle.writestr("../evil.txt", "climbs")
        bundle.writestr("dir/.hidden", "kept")
    with pytest.raises(InputFormatError, match=r"no member 'evil.txt' in the archive"):
        extract_member(zipped, "evil.txt", tmp_path / "out.txt")
    assert extract_member(zipped, "./dir//.hidden", tmp_path / "hidden").read_text() == "kept"
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize("member", ["/abs/evil.txt", "../evil.txt", "a/../../evil.txt"])
def test_an_absolute_or_climbing_member_is_refused_by_name(tmp_path, member):
    """The exact name ``/abs/evil.txt`` was reported missing in a message that listed it."""
    tgz = tar_with(tmp_path / "a.tgz", {"../evil.txt": b"climbs", "/abs/evil.txt": b"absolute"})
    with pytest.raises(InputFormatError, match="is an absolute name or climbs out of the archive: refused") as failure:
        extract_member(tgz, member, tmp_path / "out.txt")
    assert repr(member) in str(failure.value) and "no member" not in str(failure.value)
    assert not (tmp_path / "out.txt").exists()
