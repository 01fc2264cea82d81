"""`ppol mock-server` (hidden verb) as a subprocess: ready line, scripted replies, the recorded
requests on the control route, --lifetime-s, and a clear error for a bad script."""

import json
import subprocess
import sys
import urllib.request

import pytest

CMD = [sys.executable, "-m", "ppol_rs", "mock-server"]


def _post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def _get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def test_ready_line_script_rules_and_recorded_requests(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps({
        "rules": [{"contains": "refund", "reply": {"content": "refund rule"}},
                  {"has_tools": True, "times": 1, "reply": {"content": "tools rule"}}],
        "queue": [{"content": "first"}],
        "default": {"content": "default"},
    }))
    proc = subprocess.Popen(CMD + ["--script", str(script), "--port", "0", "--lifetime-s", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(proc.stdout.readline())
        base = ready["base_url"]
        assert base == f"http://{ready['addr']}/v1" and ready["addr"].startswith("127.0.0.1:")
        chat = base + "/chat/completions"

        def ask(text, **extra):
            body = {"model": "m", "messages": [{"role": "user", "content": text}], **extra}
            return _post(chat, body)["choices"][0]["message"]["content"]

        tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
        assert ask("hello") == "first"
        assert ask("i want a refund") == "refund rule"
        assert ask("hi", tools=tools) == "tools rule"
        assert ask("hi", tools=tools) == "default"
        root = base.rsplit("/v1", 1)[0]
        bodies = _get(root + "/mock/requests")["bodies"]
        assert [b["messages"][0]["content"] for b in bodies] == ["hello", "i want a refund", "hi", "hi"]
        assert _get(root + "/mock/stats")["requests"] == 4
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_lifetime_ends_the_server_and_bad_script_is_reported(tmp_path):
    done = subprocess.run(CMD + ["--lifetime-s", "0.3"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout.splitlines()[0])["base_url"].startswith("http://127.0.0.1:")
    assert "mock-server stopped: 0 chat requests" in done.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"content": "ok"}\n{"contnet": "typo"}\n')
    done = subprocess.run(CMD + ["--script", str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "line 2" in done.stderr and done.stdout == ""


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_lifetime_must_be_positive(value):
    done = subprocess.run(CMD + [f"--lifetime-s={value}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--lifetime-s must be a positive number" in done.stderr
