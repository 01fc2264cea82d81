"""External simulators over the JSONL-over-stdio protocol: the driver (run_external) against
the example simulator in this directory, end to end through ppol's loader and scorer, and the
error reporting (malformed lines, error responses, timeouts, early exits)."""

import json
import pathlib
import subprocess
import sys
import time

import pytest

import ppol_rs
from ppol_rs.external import ExternalSimulatorError, load_personas, run_external
from ppol_rs.persona import HEADING, persona_block

from conftest import DEMO

HERE = pathlib.Path(__file__).resolve().parent
SIM = [sys.executable, str(HERE / "example_external_simulator.py")]

PERSONAS = [
    {"task_id": "t1", "persona_id": "terse", "description": "short lowercase turns",
     "axis_placement": {"terse": True, "verbose": False, "frustrated": False}, "text": "You type in short fragments."},
    {"task_id": "t2", "persona_id": "verbose", "description": "long polite turns",
     "axis_placement": {"terse": False, "verbose": True, "frustrated": True}, "text": "You write long, upset messages."},
]
TASKS = [
    {"task_id": "t1", "context": "return a broken desk lamp"},
    {"task_id": "t2", "context": "exchange a pair of shoes for a bigger size"},
]


@pytest.fixture
def personas(tmp_path):
    p = tmp_path / "personas.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in PERSONAS))
    return p


def test_end_to_end_loads_and_scores(tmp_path, personas):
    out = tmp_path / "sim.jsonl"
    eps = run_external(SIM, personas, TASKS, out, timeout=30, domain="demo")
    assert [e["id"] for e in eps] == ["t1:terse:0", "t1:verbose:0", "t2:terse:0", "t2:verbose:0"]
    by_id = {e["id"]: e for e in eps}
    terse_user = [t["content"] for t in by_id["t1:terse:0"]["conversation"] if t["role"] == "user"]
    verbose_user = [t["content"] for t in by_id["t1:verbose:0"]["conversation"] if t["role"] == "user"]
    # the persona's axis placement shaped the dialogue
    assert all(len(u.split()) <= 6 and u == u.lower() for u in terse_user)
    assert all("ridiculous" in u and len(u.split()) > 15 for u in verbose_user)
    assert by_id["t2:verbose:0"]["reward"] == 1.0
    assert by_id["t2:verbose:0"]["meta"]["seed"] == 3
    assert by_id["t1:terse:0"]["persona"] == PERSONAS[0]["text"]

    lines = out.read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["id"] == "t1:terse:0"
    loaded = ppol_rs.load_traces(out)
    assert len(loaded) == 4 and {d["task_id"] for d in loaded} == {"t1", "t2"}

    ref = ppol_rs.HumanReference.from_traces(DEMO / "human.jsonl")
    disc = ppol_rs.Discriminator.train(ref, DEMO / "baseline.jsonl", trees=20, folds=3)
    s = ppol_rs.score(ref, out, disc)
    assert 0.0 <= s["human_likeness"] <= 1.0 and 0.0 <= s["combined"] <= 1.0
    assert set(s["dice"]) == {"D1", "D2", "D3", "D4", "overall"}


def test_match_task_ids_and_persona_block_in_requests(tmp_path, personas):
    # a simulator that returns the request it got, so we can check what the driver sends
    sim = [sys.executable, "-c",
           "import json\nfrom ppol_rs.external import serve\n"
           "serve(lambda r: {'conversation': [{'role': 'user', 'content': 'x'}], 'meta': r})"]
    eps = run_external(sim, personas, TASKS, tmp_path / "o.jsonl", timeout=30, match_task_ids=True, trials=2)
    assert [e["id"] for e in eps] == ["t1:terse:0", "t1:terse:1", "t2:verbose:0", "t2:verbose:1"]
    req = eps[2]["meta"]
    assert req["type"] == "episode" and req["protocol"] == 1
    assert req["task_context"] == TASKS[1]["context"]
    assert req["persona"]["axis_placement"] == PERSONAS[1]["axis_placement"]
    assert req["persona_block"] == persona_block(PERSONAS[1]["text"])
    assert req["persona_block"].startswith(HEADING) and PERSONAS[1]["text"] in req["persona_block"]
    assert [e["meta"]["seed"] for e in eps] == [0, 1, 2, 3]


def test_empty_persona_gets_empty_block(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"task_id": "t1", "persona_id": "none", "text": "  "}) + "\n")
    sim = [sys.executable, "-c", "from ppol_rs.external import serve\n"
           "serve(lambda r: {'conversation': [], 'meta': {'block': r['persona_block']}})"]
    eps = run_external(sim, p, TASKS[:1], tmp_path / "o.jsonl", timeout=30)
    assert eps[0]["meta"] == {"block": ""}


def _run(tmp_path, personas, *flags, **kw):
    kw.setdefault("timeout", 30)
    kw.setdefault("shutdown_grace", 2)
    return run_external(SIM + list(flags), personas, TASKS, tmp_path / "o.jsonl", **kw)


def test_malformed_line_is_named(tmp_path, personas):
    with pytest.raises(ExternalSimulatorError, match=r"request 't1:verbose:0': stdout line 2 is not JSON .*: this is not json"):
        _run(tmp_path, personas, "--garbage-on", "t1:verbose:0")
    assert not (tmp_path / "o.jsonl").exists()


def test_bad_conversation_is_named(tmp_path, personas):
    with pytest.raises(ExternalSimulatorError, match=r"stdout line 1: conversation\[0\]: role 'robot'"):
        _run(tmp_path, personas, "--bad-role-on", "t1:terse:0", shutdown_grace=0.5)


def test_error_response_raises_or_is_skipped(tmp_path, personas, capfd):
    with pytest.raises(ExternalSimulatorError, match=r"'t2:terse:0': external simulator reported an error: RuntimeError: persona not supported"):
        _run(tmp_path, personas, "--fail-on", "t2:terse:0")
    eps = _run(tmp_path, personas, "--fail-on", "t2:terse:0", on_error="skip")
    assert [e["id"] for e in eps] == ["t1:terse:0", "t1:verbose:0", "t2:verbose:0"]
    err = capfd.readouterr().err
    assert "(skipped)" in err
    assert "example simulator: episode t1:terse:0" in err  # the child's stderr passes through


def test_timeout_kills_the_simulator(tmp_path, personas):
    t0 = time.monotonic()
    with pytest.raises(ExternalSimulatorError, match=r"'t1:verbose:0': no response within 1 s \(external simulator killed\)"):
        _run(tmp_path, personas, "--hang-on", "t1:verbose:0", timeout=1)
    assert time.monotonic() - t0 < 20


def test_early_exit_is_reported(tmp_path, personas):
    with pytest.raises(ExternalSimulatorError, match=r"'t1:verbose:0': external simulator ended its output \(exit code 3\)"):
        _run(tmp_path, personas, "--exit-on", "t1:verbose:0")


def test_unstartable_command_and_bad_personas(tmp_path, personas):
    with pytest.raises(ExternalSimulatorError, match="cannot start external simulator"):
        run_external([str(tmp_path / "nope")], personas, TASKS, tmp_path / "o.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(PERSONAS[0]) + "\n\n{oops\n")
    with pytest.raises(ValueError, match=r"bad.jsonl: line 3: not JSON"):
        load_personas(bad)


def test_example_simulator_speaks_the_protocol_directly():
    req = {"type": "episode", "id": "a:b:0", "task_id": "a", "task_context": "lamp",
           "persona": {"persona_id": "b", "axis_placement": {"terse": True}, "text": "t"},
           "persona_block": "", "seed": 0}
    proc = subprocess.run(SIM, input=json.dumps(req) + "\n" + '{"type": "shutdown"}\n',
                          capture_output=True, text=True, timeout=60, check=True)
    (line,) = proc.stdout.splitlines()
    msg = json.loads(line)
    assert msg["type"] == "dialogue" and msg["id"] == "a:b:0" and msg["conversation"][1]["role"] == "user"
