"""Hugging Face snapshots through huggingface_hub against a local hub on 127.0.0.1 (HF_ENDPOINT).

The server answers the routes ``snapshot_download`` uses: the repository's
revision info, its file tree, and each file under ``/<repo>/resolve/<commit>/``.
The download itself runs in a fresh process, as in the workflow's rule, so that
``HF_ENDPOINT`` is read the way a user sets it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest
from safetensors.numpy import save

REPO = "tiny-org/tiny-bert"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
FILES = {
    "config.json": json.dumps({"model_type": "bert", "hidden_size": 4, "vocab_size": 5}).encode(),
    "vocab.txt": b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n",
    "tokenizer_config.json": b'{"do_lower_case": false}',
    "model.safetensors": save({"embeddings.weight": np.arange(20, dtype=np.float32).reshape(5, 4)}),
    "tf_model.h5": b"TensorFlow weights the workflow does not need",
}
ROOT = Path(__file__).resolve().parents[2]


class HubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _HubHandler)
        self.requests: list[tuple[str, str]] = []
        self.repos: dict[str, dict[str, bytes]] = {REPO: FILES}  # a test may add repositories

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _HubHandler(BaseHTTPRequestHandler):
    server: HubServer

    def log_message(self, *args):
        pass

    def _reply(self, status: int, body: bytes, headers: dict[str, str], send_body: bool) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _route(self, send_body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        self.server.requests.append((self.command, path))
        json_type = {"Content-Type": "application/json"}
        for repo, files in self.server.repos.items():
            if path.startswith((f"/api/models/{repo}/", f"/{repo}/")):
                break
        else:
            repo, files = REPO, {}
        info_prefix = f"/api/models/{repo}/revision/"
        tree_prefix = f"/api/models/{repo}/tree/{COMMIT}"
        file_prefix = f"/{repo}/resolve/{COMMIT}/"
        if files and path.startswith(info_prefix) and path[len(info_prefix):] in ("main", "v1", COMMIT):
            info = {"id": repo, "modelId": repo, "sha": COMMIT, "private": False,
                    "siblings": [{"rfilename": name} for name in files]}
            self._reply(200, json.dumps(info).encode(), json_type, send_body)
        elif files and path.rstrip("/") == tree_prefix:
            tree = [{"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                    for name, data in files.items()]
            self._reply(200, json.dumps(tree).encode(), json_type, send_body)
        elif path.startswith(file_prefix) and path[len(file_prefix):] in files:
            data = files[path[len(file_prefix):]]
            headers = {"Content-Type": "application/octet-stream", "X-Repo-Commit": COMMIT,
                       "ETag": f'"{hashlib.sha1(data).hexdigest()}"'}
            self._reply(200, data, headers, send_body)
        else:
            self._reply(404, b'{"error": "Repository not found"}',
                        {**json_type, "X-Error-Code": "RepoNotFound"}, send_body)

    def do_GET(self):
        self._route(send_body=True)

    def do_HEAD(self):
        self._route(send_body=False)


@pytest.fixture
def hub():
    httpd = HubServer()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _snapshot(hub: HubServer, tmp_path: Path, repo_id: str, dest: Path, revision: str | None):
    """Run ramen.data.download.snapshot_model in a fresh process pointed at the local hub."""
    env = {
        **os.environ, "HF_ENDPOINT": hub.base, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0",
        "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    code = ("import sys; from ramen.data.download import snapshot_model; "
            "snapshot_model(sys.argv[1], sys.argv[2], revision=sys.argv[3] or None)")
    return subprocess.run([sys.executable, "-c", code, repo_id, str(dest), revision or ""],
                          env=env, capture_output=True, text=True, timeout=60)


def test_snapshot_downloads_config_tokenizer_and_safetensors_only(hub, tmp_path):
    dest = tmp_path / "models" / "huggingface.co" / REPO
    result = _snapshot(hub, tmp_path, REPO, dest, "v1")
    assert result.returncode == 0, result.stderr
    wanted = ["config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]
    assert sorted(path.name for path in dest.iterdir()) == wanted  # no TF weights, no .cache
    for name in wanted:
        assert (dest / name).read_bytes() == FILES[name]
    assert ("GET", f"/api/models/{REPO}/revision/v1") in hub.requests  # the revision is asked for
    assert not any(path.endswith("tf_model.h5") for _, path in hub.requests)
    assert list(dest.parent.iterdir()) == [dest]  # the temporary directory is gone


def test_snapshot_of_a_missing_repository_fails_naming_it_and_leaves_nothing(hub, tmp_path):
    dest = tmp_path / "models" / "huggingface.co" / "tiny-org" / "no-such-model"
    result = _snapshot(hub, tmp_path, "tiny-org/no-such-model", dest, None)
    assert result.returncode != 0
    assert "DownloadError: cannot download the Hugging Face model 'tiny-org/no-such-model'" in result.stderr
    assert ("GET", "/api/models/tiny-org/no-such-model/revision/main") in hub.requests
    assert not dest.parent.exists() or not any(dest.parent.iterdir())


def test_a_causal_lm_snapshot_is_a_decoder_source_that_loads_as_one(hub, tmp_path):
    """``variants.<name>.model: {hf: ...}`` of a decoder: a Llama-layout repository with an untied
    head and a tokenizer.json; the original-format weights beside them are not fetched."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ramen.modeling.sources import DECODER, load_source_causal_lm, source_family
    from tiny_decoder import build_tiny_decoder_dir

    built = build_tiny_decoder_dir(tmp_path / "built", tie=False, seed=4)
    files = {path.name: path.read_bytes() for path in built.iterdir() if path.is_file()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(files)
    repo = "tiny-org/tiny-llama"
    hub.repos[repo] = {**files, "consolidated.00.pth": b"original-format weights the workflow does not need"}
    dest = tmp_path / "models" / "huggingface.co" / repo
    result = _snapshot(hub, tmp_path, repo, dest, None)
    assert result.returncode == 0, result.stderr
    assert sorted(path.name for path in dest.iterdir()) == sorted(files)
    assert not any(path.endswith(".pth") for _, path in hub.requests)
    assert source_family(dest) == DECODER
    model = AutoModelForCausalLM.from_pretrained(dest)
    reference = AutoModelForCausalLM.from_pretrained(built)
    assert type(model).__name__ == "LlamaForCausalLM" and not model.config.tie_word_embeddings
    for name, tensor in reference.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], tensor, msg=name)
    assert model.get_output_embeddings().weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    tokenizer = AutoTokenizer.from_pretrained(dest)
    text = "The cat sits on the mat."
    assert tokenizer(text)["input_ids"] == AutoTokenizer.from_pretrained(built)(text)["input_ids"]
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text
    assert tokenizer.chat_template and tokenizer.chat_template == AutoTokenizer.from_pretrained(built).chat_template
    source = load_source_causal_lm(dest)  # the path a decoder source takes in ramen
    torch.testing.assert_close(source.lm_head.weight, reference.lm_head.weight)
