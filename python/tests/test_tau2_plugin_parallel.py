"""The τ²-bench plug-in over ppol's tau2: world, without τ²: a stand-in ``tau2`` package (written
here to a temporary directory and put first on the PYTHONPATH of the τ² runner that ppol
starts) whose ``run_task`` sleeps, logs what it ran and how many ran at once, and can fail or
hang. Checks what the plug-in's own loop used to: episodes in parallel up to
``max_concurrency``, a rerun playing only what is missing, a failure keeping every finished
episode, Ctrl-C exiting 130 at once with what finished kept, bad command-line values named; and
that the LiteLLM arguments become ppol's per-role model settings (on ppol's mock server). The
real orchestrator is exercised in test_tau2_plugin.py."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import ppol_rs
import ppol_rs.tau2_plugin as plugin

TASKS = ["0", "1", "2"]
PERSONAS = [
    {"task_id": "0", "persona_id": f"p{i}", "text": f"Persona {i}."} for i in range(4)
]
PLAN = [f"{t}:p{i}:0" for t in TASKS for i in range(4)]
DEAD_URL = "http://127.0.0.1:9/v1"  # never called unless the stand-in is told to

FAKE_TAU2 = {
    # an empty LiteLLM too: the runner looks into it for its workarounds, and importing the real
    # one (when τ² is installed) takes seconds
    "litellm/__init__.py": "",
    "tau2/__init__.py": "",
    "tau2/agent/__init__.py": "",
    "tau2/agent/llm_agent.py": '''
class LLMAgent:
    system_prompt = "You are a retail agent."
    tools = []

    def __init__(self, *args, **kwargs):
        pass
''',
    "tau2/user/__init__.py": "",
    "tau2/user/user_simulator.py": '''
class UserSimulator:
    def __init__(self, **kwargs):
        self.kwargs = kwargs

    @property
    def system_prompt(self):
        return "You are a customer."
''',
    "tau2/data_model/__init__.py": "",
    "tau2/data_model/message.py": "class MultiToolMessage:\n    pass\n",
    "tau2/data_model/simulation.py": '''
class RewardInfo:
    def __init__(self, reward, reward_basis=None, info=None):
        self.reward, self.reward_basis, self.info = reward, reward_basis, info or {}

    def model_dump(self, mode=None):
        return {"reward": self.reward, "info": self.info}
''',
    "tau2/utils/__init__.py": "",
    "tau2/utils/llm_utils.py": "def generate(**kwargs):\n    raise NotImplementedError\n",
    "tau2/registry.py": '''
import types
from tau2.agent.llm_agent import LLMAgent


def _load(task_split_name="base"):
    return [types.SimpleNamespace(id=str(i), user_scenario=f"Scenario {i}.") for i in range(6)]


class _Registry:
    def __init__(self):
        self.users, self.agents = {}, {"llm_agent": LLMAgent}

    def get_domains(self):
        return ["retail"]

    def get_agents(self):
        return list(self.agents)

    def register_agent(self, cls, name):
        self.agents[name] = cls

    def get_agent_constructor(self, name):
        return self.agents[name]

    def get_users(self):
        return list(self.users)

    def register_user(self, cls, name):
        self.users[name] = cls

    def get_user_constructor(self, name):
        return self.users[name]

    def get_tasks_loader(self, domain):
        return _load

    def get_task_splits_loader(self, domain):
        return None


registry = _Registry()
''',
    "tau2/run.py": '''
"""run_task of the stand-in: FAKE_TAU2_LOG (a JSONL log of starts and ends), FAKE_TAU2_SECONDS,
FAKE_TAU2_FAIL ("task:persona text" fails), FAKE_TAU2_HANG (task ids that never end),
FAKE_TAU2_CALL (call both models once through their api_base)."""
import json, os, re, threading, time, types, urllib.request
from tau2.data_model.simulation import RewardInfo

_lock = threading.Lock()
_running = [0]


def evaluate_simulation(*args, **kwargs):
    return RewardInfo(reward=1.0)


def _log(**event):
    with _lock, open(os.environ["FAKE_TAU2_LOG"], "a") as f:
        f.write(json.dumps(event) + "\\n")


def _call(model, args):
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    req = urllib.request.Request(args["api_base"].rstrip("/") + "/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json", "Authorization": "Bearer " + args["api_key"]})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)["choices"][0]["message"]["content"]


def run_task(*, domain, task, agent, user, llm_agent, llm_args_agent, llm_user, llm_args_user,
             max_steps, max_errors, seed):
    from tau2.registry import registry

    registry.get_agent_constructor(agent)()
    block = registry.get_user_constructor(user).persona_block
    persona = re.search(r"Persona \\d+\\.", block).group(0)
    with _lock:
        _running[0] += 1
        running = _running[0]
    _log(event="start", task=task.id, persona=persona, running=running, pid=os.getpid(), agent=agent,
         max_steps=max_steps, max_errors=max_errors, seed=seed)
    try:
        if task.id in os.environ.get("FAKE_TAU2_HANG", "").split(","):
            time.sleep(600)
        time.sleep(float(os.environ.get("FAKE_TAU2_SECONDS", "0.2")))
        if os.environ.get("FAKE_TAU2_FAIL") == f"{task.id}:{persona}":
            raise ConnectionError(f"endpoint down (task {task.id})")
        said = "Hi! How can I help?"
        if os.environ.get("FAKE_TAU2_CALL"):
            said = _call(llm_agent, llm_args_agent) + " / " + _call(llm_user, llm_args_user)
        msgs = [types.SimpleNamespace(role="assistant", content=said, tool_calls=None),
                types.SimpleNamespace(role="user", content=f"{persona} ###STOP###", tool_calls=None)]
        return types.SimpleNamespace(messages=msgs, reward_info=RewardInfo(1.0), termination_reason="user_stop",
                                     duration=0.2, id=f"sim-{task.id}-{seed}")
    finally:
        with _lock:
            _running[0] -= 1
        _log(event="end", task=task.id, persona=persona)
''',
}


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The stand-in τ² on the PYTHONPATH of the processes ppol starts; returns its log."""
    root = tmp_path / "fake_tau2"
    for name, text in FAKE_TAU2.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    log = tmp_path / "tau2_log.jsonl"
    log.touch()
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(root) + (os.pathsep + path if path else ""))
    monkeypatch.setenv("FAKE_TAU2_LOG", str(log))
    monkeypatch.setenv("FAKE_TAU2_SECONDS", "0.2")
    return log


def started(log):
    return [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "start"]


@pytest.fixture
def personas(tmp_path):
    p = tmp_path / "personas.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in PERSONAS))
    return p


def run(personas, out, **kw):
    kw.setdefault("api_base", DEAD_URL)
    return plugin.run_tau2_with_personas(
        personas, "retail", out, agent_llm="openai/a", user_llm="openai/u", task_ids=TASKS,
        progress=False, **kw,
    )


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_episodes_run_in_parallel_up_to_max_concurrency(fake, personas, tmp_path):
    out = tmp_path / "out.jsonl"
    eps = run(personas, out, max_concurrency=6)
    assert [e["id"] for e in eps] == PLAN
    assert [r["id"] for r in lines(out)] == PLAN and not (tmp_path / "out.jsonl.partial").exists()
    runs = started(fake)
    # 12 episodes of 0.2 s, 6 at a time: several overlap, never more than 6
    assert len(runs) == 12 and 2 <= max(e["running"] for e in runs) <= 6
    e = eps[5]
    assert e["status"] == "ok" and e["backend"].startswith("tau2:retail with ") and e["domain"] == "retail"
    assert e["conversation"][-1]["content"] == "Persona 1. ###STOP###" and e["reward"] == 1.0
    assert e["meta"]["tau2_simulation_id"] == f"sim-1-{e['seed']}" and e["meta"]["tau2_termination"] == "user_stop"
    # τ² got the plug-in's agent, max_steps and max_errors, and ppol's per-episode seed
    assert {(r["agent"], r["max_steps"], r["max_errors"]) for r in runs} == {("llm_agent:ppol_recorded", 100, 10)}
    assert sorted(r["seed"] for r in runs) == sorted(e["seed"] for e in eps) and len({e["seed"] for e in eps}) == 12


def test_max_concurrency_one_runs_them_one_after_another_and_processes_share_them(fake, personas, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_TAU2_SECONDS", "0.01")
    eps = run(personas, tmp_path / "out.jsonl", max_concurrency=1, max_steps=7, max_errors=2, agent="ppol_llm_agent")
    assert len(eps) == 12 and max(e["running"] for e in started(fake)) == 1
    assert {(r["agent"], r["max_steps"], r["max_errors"]) for r in started(fake)} == {("ppol_llm_agent:ppol_recorded", 7, 2)}
    fake.write_text("")
    monkeypatch.setenv("FAKE_TAU2_SECONDS", "0.3")
    run(personas, tmp_path / "two.jsonl", max_concurrency=4, processes=2)
    assert len({e["pid"] for e in started(fake)}) == 2
    with pytest.raises(ValueError, match="max_concurrency"):
        run(personas, tmp_path / "other.jsonl", max_concurrency=0)
    with pytest.raises(ValueError, match="max_steps must be at most 1000"):
        run(personas, tmp_path / "other.jsonl", max_steps=5000)


def test_a_rerun_plays_only_what_is_missing(fake, personas, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_TAU2_SECONDS", "0.01")
    out = tmp_path / "out.jsonl"
    first = run(personas, out)
    # the same command again: everything is in the output, nothing is played
    fake.write_text("")
    assert [e["id"] for e in run(personas, out)] == PLAN and started(fake) == []
    # as an interruption leaves it: three episodes and a torn fourth line in OUT.partial, no OUT
    kept = out.read_text().splitlines()[:3]
    (tmp_path / "out.jsonl.partial").write_text("\n".join(kept) + "\n" + kept[0][:25])
    out.unlink()
    eps = run(personas, out)
    assert len(started(fake)) == 9
    assert [e["id"] for e in eps] == PLAN and [e["seed"] for e in eps] == [e["seed"] for e in first]
    assert out.read_text().splitlines()[:3] == kept
    # an output of another plan, or of the plug-in's records of before, is not replaced
    with pytest.raises(ValueError, match=r"holds 8 episode\(s\) that are not in this run"):
        plugin.run_tau2_with_personas(personas, "retail", out, agent_llm="a", user_llm="u",
                                      task_ids=["0"], api_base=DEAD_URL, progress=False)
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({"id": "0:p0:0", "termination": "user_stop", "agent_cost": 0.0}) + "\n")
    with pytest.raises(ValueError, match=r"old.jsonl: line 1 is not a ppol episode record .*EPISODE_MIGRATION"):
        run(personas, old)


def test_a_failure_keeps_every_finished_episode(fake, personas, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_TAU2_SECONDS", "0.01")
    monkeypatch.setenv("FAKE_TAU2_FAIL", "1:Persona 2.")
    out = tmp_path / "out.jsonl"
    with pytest.raises(plugin.EpisodesFailed, match=r"τ² episode 1:p2:0 failed: .*ConnectionError: endpoint down") as e:
        run(personas, out, max_concurrency=2)
    assert len(e.value.episodes) == 12
    recs = {r["id"]: r for r in lines(out)}
    assert list(recs) == PLAN and [i for i, r in recs.items() if r["status"] != "ok"] == ["1:p2:0"]
    assert "endpoint down" in recs["1:p2:0"]["error"]
    # skipping instead: the others are returned, the failed one listed with its reason
    eps = run(personas, tmp_path / "skip.jsonl", max_concurrency=4, on_error="skip")
    assert [e["id"] for e in eps] == [i for i in PLAN if i != "1:p2:0"]
    assert list(eps.failed) == ["1:p2:0"] and "endpoint down" in eps.failed["1:p2:0"]
    # the same call once the endpoint is back plays only the failed episode
    monkeypatch.delenv("FAKE_TAU2_FAIL")
    fake.write_text("")
    eps = run(personas, out)
    assert [(r["task"], r["persona"]) for r in started(fake)] == [("1", "Persona 2.")]
    assert [e["id"] for e in eps] == PLAN and eps.failed == {}


def cli(personas, out, *extra):
    return plugin.main(["--personas", str(personas), "--domain", "retail", "--agent-llm", "openai/a",
                        "--user-llm", "openai/u", "--task-ids", ",".join(TASKS), "--api-base", DEAD_URL,
                        "-o", str(out), *extra])


def test_the_cli_takes_max_concurrency_and_names_bad_values(fake, personas, tmp_path, capfd):
    capsys = capfd  # the τ² runner's stderr too
    out = tmp_path / "cli.jsonl"
    assert cli(personas, out, "--max-concurrency", "3") == 0
    assert len(lines(out)) == 12 and max(e["running"] for e in started(fake)) <= 3
    err = capsys.readouterr().err
    assert "τ² episodes: 12/12 episodes" in err and "12 τ² episodes in" in err
    assert cli(personas, out, "--max-concurrency", "0") == 2
    assert "max_concurrency must be an integer at least 1, got 0" in capsys.readouterr().err
    assert cli(personas, out, "--agent-llm-args", '{"max_tokens": 96') == 2
    assert "argument --agent-llm-args: not JSON" in capsys.readouterr().err
    assert cli(personas, out, "--user-llm-args", "[1]") == 2
    assert "argument --user-llm-args: not a JSON object: '[1]'" in capsys.readouterr().err
    assert cli(personas, out, "--user-llm-args", '{"top_k": 5}') == 2
    assert "llm_args_user['top_k']: ppol's OpenAI-compatible client has no setting" in capsys.readouterr().err
    assert cli(personas, out, "--agent-llm", "anthropic/claude-3-5-sonnet") == 2
    assert "'anthropic/' is another LiteLLM provider" in capsys.readouterr().err
    assert cli(personas, out, "--agent", "no_such_agent") == 2
    assert "τ² has no agent 'no_such_agent'" in capsys.readouterr().err


def test_llm_args_become_ppols_per_role_model_settings(fake, personas, tmp_path, monkeypatch, capsys):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [{"model": "a", "reply": {"content": "agent here"}}],
                                  "default": {"content": "user here"}}))
    mock = subprocess.Popen([sys.executable, "-m", "ppol_rs", "mock-server", "--script", str(script),
                             "--lifetime-s", "120"], stdout=subprocess.PIPE, text=True)
    try:
        url = json.loads(mock.stdout.readline())["base_url"]
        monkeypatch.setenv("FAKE_TAU2_CALL", "1")
        monkeypatch.setenv("SECRET_FOR_TEST", "sk-test-123")
        code = plugin.main(["--personas", str(personas), "--domain", "retail", "--agent-llm", "openai/a",
                            "--user-llm", "u", "--task-ids", "0", "--api-base", url, "--quiet",
                            "--api-key-env", "SECRET_FOR_TEST", "-o", str(tmp_path / "o.jsonl"),
                            "--agent-llm-args", '{"max_tokens": 96, "timeout": 120, "stop": ["functions."]}',
                            "--user-llm-args", '{"temperature": 0, "num_retries": 1}'])
        assert code == 0, capsys.readouterr().err
        root = url.rsplit("/v1", 1)[0]
        with __import__("urllib.request").request.urlopen(f"{root}/mock/requests", timeout=10) as r:
            seen = json.load(r)
    finally:
        mock.kill()
        mock.wait()
        mock.stdout.close()
    recs = lines(tmp_path / "o.jsonl")
    assert [e["conversation"][0]["content"] for e in recs] == ["agent here / user here"] * 4
    by_model = {b["model"]: b for b in seen["bodies"]}
    assert by_model["a"]["max_tokens"] == 96 and "temperature" not in by_model["a"]
    assert by_model["a"]["stop"] == ["functions."] and "stop" not in by_model["u"]
    assert by_model["u"]["temperature"] == 0
    assert {h.get("authorization") for h in seen["headers"]} == {"Bearer sk-test-123"}
    assert "sk-test-123" not in (tmp_path / "o.jsonl").read_text()


INTERRUPTED = [sys.executable, "-m", "ppol_rs.tau2_plugin", "--domain", "retail", "--agent-llm", "openai/a",
               "--user-llm", "openai/u", "--task-ids", ",".join(TASKS), "--api-base", DEAD_URL,
               "--max-concurrency", "2", "--quiet"]


def test_ctrl_c_stops_at_once_and_keeps_what_finished(fake, personas, tmp_path, monkeypatch):
    """SIGINT while episodes sit in calls that ignore it (task 2's hang like a stuck LiteLLM
    call): the command exits 130 within seconds, says what it kept, and every kept record is
    whole; the same command then plays only the rest."""
    monkeypatch.setenv("FAKE_TAU2_SECONDS", "0.05")
    monkeypatch.setenv("FAKE_TAU2_HANG", "2")
    out = tmp_path / "out.jsonl"
    partial = tmp_path / "out.jsonl.partial"
    proc = subprocess.Popen(INTERRUPTED + ["--personas", str(personas), "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        # tasks 0 and 1 (8 episodes) finish; then both in-flight episodes hang on task 2
        while time.monotonic() < deadline and (not partial.exists() or len(lines(partial)) < 8):
            time.sleep(0.05)
        assert len(lines(partial)) == 8
        time.sleep(0.3)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert time.monotonic() - sent < 10
    assert f"interrupted: 8 of 12 episodes are kept in {partial}; the same command plays the rest" in err
    # in the order they finished
    assert sorted(r["id"] for r in lines(partial)) == sorted(i for i in PLAN if not i.startswith("2:"))
    assert not out.exists()
    monkeypatch.delenv("FAKE_TAU2_HANG")
    fake.write_text("")
    done = subprocess.run(INTERRUPTED + ["--personas", str(personas), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(r["task"] for r in started(fake)) == ["2"] * 4
    assert [r["id"] for r in lines(out)] == PLAN
