"""`ppol mock-server` (hidden verb, in builds with the cargo feature `testing`) as a
subprocess: ready line, scripted replies, the recorded requests on the control route,
--lifetime-s, a clear error for a bad script, and the server behaviours (strictness, context
window, capacity, outages, replicas)."""

import json
import subprocess
import sys
import time
import urllib.error
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
    assert done.returncode == 2 and "--lifetime-s <LIFETIME_S>': must be a number of seconds above 0" in done.stderr


def _start(*flags):
    """Start `ppol mock-server` with flags; (process, [ready line per replica])."""
    proc = subprocess.Popen(CMD + ["--lifetime-s", "120", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    n = int(flags[flags.index("--replicas") + 1]) if "--replicas" in flags else 1
    return proc, [json.loads(proc.stdout.readline()) for _ in range(n)]


def _stop(proc):
    proc.kill()
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()


def _status(url, body):
    """POST and return (status, headers, JSON body), also for error statuses."""
    try:
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.headers, json.load(r)
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers, json.load(e)


def _chat(text, **extra):
    return {"model": "m", "messages": [{"role": "user", "content": text}], **extra}


def test_strict_llama_cpp_context_window_and_records():
    proc, [ready] = _start("--strict", "--n-ctx", "40", "--fill-context", "--serial")
    try:
        base, root = ready["base_url"], "http://" + ready["addr"]
        chat = base + "/chat/completions"
        status, _, body = _status(chat, _chat("x" * 200))
        assert status == 400 and "maximum context length is 40 tokens" in body["error"]["message"]
        null = {"model": "m", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}]}
        status, _, body = _status(chat, null)
        assert status == 500 and "got null" in body["error"]["message"]
        # No max_tokens: the reply fills the window (40 - 2 prompt tokens).
        status, _, body = _status(chat, _chat("hi"))
        assert status == 200 and body["usage"]["completion_tokens"] == 38
        assert body["choices"][0]["finish_reason"] == "length"
        status, _, body = _status(chat, _chat("hi", max_tokens=500, tool_choice="auto"))
        assert body["choices"][0]["message"]["content"] == "echo: hi"
        records = _get(root + "/mock/requests")["records"]
        assert [r["outcome"] for r in records] == ["invalid", "invalid", "answered", "answered"]
        assert (records[3]["max_tokens"], records[3]["effective_max_tokens"], records[3]["tool_choice"]) == (500, 38, "auto")
        stats = _get(root + "/mock/stats")
        assert stats["statuses"] == {"400": 1, "500": 1, "200": 2}
        assert stats["models"]["m"] == {"requests": 4, "completions": 2, "prompt_tokens": 4, "completion_tokens": 38 + 2}
    finally:
        _stop(proc)


def test_capacity_429_and_an_outage_from_the_control_route():
    proc, [ready] = _start("--max-in-flight", "1", "--busy-retry-after-s", "2")
    try:
        base, root = ready["base_url"], "http://" + ready["addr"]
        chat = base + "/chat/completions"
        _post(root + "/mock/replies", [{"stall": True}])
        # The stalled request holds the only place; the next one is turned away.
        import threading
        stalled = threading.Thread(target=lambda: _status_or_timeout(chat, _chat("a")), daemon=True)
        stalled.start()
        for _ in range(100):
            if _get(root + "/mock/stats")["in_flight"] == 1:
                break
            time.sleep(0.02)
        status, headers, body = _status(chat, _chat("b"))
        assert status == 429 and headers["Retry-After"] == "2" and body["error"]["type"] == "rate_limit_exceeded"
        assert _post(root + "/mock/outage", {"for_s": 0.5}) == {"down_for_s": 0.5}
        with pytest.raises(OSError):
            for _ in range(50):
                urllib.request.urlopen(root + "/health", timeout=5).close()
                time.sleep(0.02)
        for _ in range(200):
            try:
                stats = _get(root + "/mock/stats")
                break
            except OSError:
                time.sleep(0.05)
        # Back on the same port, with its counters: the stalled request was cut by the outage.
        assert (stats["outages"], stats["cut"], stats["rejected_busy"], stats["down"]) == (1, 1, 1, False)
    finally:
        _stop(proc)


def _status_or_timeout(url, body):
    try:
        _status(url, body)
    except OSError:
        pass


def test_replicas_print_one_ready_line_each_and_count_apart():
    proc, ready = _start("--replicas", "3")
    try:
        assert [r["replica"] for r in ready] == [0, 1, 2]
        assert len({r["addr"] for r in ready}) == 3
        _status(ready[2]["base_url"] + "/chat/completions", _chat("x"))
        counts = [_get("http://" + r["addr"] + "/mock/stats")["requests"] for r in ready]
        assert counts == [0, 0, 1]
    finally:
        _stop(proc)
