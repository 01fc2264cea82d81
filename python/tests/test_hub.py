"""`hf://` paths from Python, against a stand-in Hub on 127.0.0.1 (never the network), and the
cache shared with `huggingface_hub`: a file ppol downloaded is found by
`hf_hub_download(..., local_files_only=True)`, and one `huggingface_hub` downloaded is read by
ppol offline."""

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading

import pytest

import ppol_rs

COMMIT = "3" * 40


@pytest.fixture
def hub(monkeypatch, tmp_path):
    body = "".join(json.dumps(r) + "\n" for r in ppol_rs.demo_traces("human")).encode()
    files = {"data/human.jsonl": body, "data/other.jsonl": body[: body.index(b"\n") + 1]}
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _serve(self, with_body):
            seen.append((self.command, self.path))
            prefix = "/datasets/org/traces/resolve/main/"
            name = self.path[len(prefix):] if self.path.startswith(prefix) else None
            if name not in files:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = files[name]
            self.send_response(200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", '"%s"' % hashlib.sha1(data).hexdigest())
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if with_body:
                self.wfile.write(data)

        def do_HEAD(self):
            self._serve(False)

        def do_GET(self):
            self._serve(True)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    for k in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN_PATH"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    local = tmp_path / "human.jsonl"
    local.write_bytes(body)
    yield {"server": server, "seen": seen, "local": local, "home": tmp_path / "hf", "endpoint": endpoint}
    server.shutdown()
    server.server_close()


def test_fingerprint_of_a_hub_path_equals_the_local_file_and_works_offline(hub, monkeypatch):
    path = "hf://datasets/org/traces/data/human.jsonl"
    want = ppol_rs.fingerprint(str(hub["local"]), as_frame=False)
    got = ppol_rs.fingerprint(path, as_frame=False)
    assert (got.values == want.values).all() and got.ids == want.ids
    assert ("GET", "/datasets/org/traces/resolve/main/data/human.jsonl") in hub["seen"]
    hub["server"].shutdown()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = ppol_rs.fingerprint(path, as_frame=False)
    assert (again.values == want.values).all()
    with pytest.raises(ppol_rs.IoError, match="HF_HUB_OFFLINE is set and 'data/other.jsonl'"):
        ppol_rs.load_traces("hf://datasets/org/traces/data/other.jsonl")


def test_missing_hub_file_raises_an_io_error_naming_it(hub):
    with pytest.raises(ppol_rs.IoError, match=r"hf://datasets/org/traces/data/nope.jsonl.*404"):
        ppol_rs.load_traces("hf://datasets/org/traces/data/nope.jsonl")


def _hf_hub(code, env):
    pytest.importorskip("huggingface_hub")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_cache_is_shared_with_huggingface_hub(hub, monkeypatch):
    env = dict(os.environ)
    # ppol downloads; huggingface_hub finds it with the network off.
    ppol_rs.load_traces("hf://datasets/org/traces/data/human.jsonl")
    found = _hf_hub(
        "import huggingface_hub as h; print(h.hf_hub_download('org/traces', 'data/human.jsonl', "
        "repo_type='dataset', local_files_only=True))",
        {**env, "HF_HUB_OFFLINE": "1"},
    )
    with open(found, "rb") as f:
        assert f.read() == hub["local"].read_bytes()
    # huggingface_hub downloads another file; ppol reads it offline.
    _hf_hub(
        "import huggingface_hub as h; print(h.hf_hub_download('org/traces', 'data/other.jsonl', "
        "repo_type='dataset'))",
        env,
    )
    hub["server"].shutdown()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ds = ppol_rs.load_traces("hf://datasets/org/traces/data/other.jsonl")
    assert len(ds) == 1
