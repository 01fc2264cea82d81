"""External simulators over the JSONL-over-stdio protocol: run_external (a thin wrapper over
ppol's external: world, ``ppol_rs.episodes(world="external:...")``) against the example
simulator in this directory, end to end through ppol's loader and scorer; the failures the world
records (malformed lines, error responses, timeouts, early exits) raised or skipped after the
output is written; ppol's seeds; a rerun that plays only what is missing; env, cwd, processes."""

import json
import pathlib
import os
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
    # ppol episode records: the seed the simulator got is the episode's, the backend the command
    e = by_id["t2:verbose:0"]
    assert e["meta"]["seed"] == e["seed"] and e["status"] == "ok" and e["domain"] == "demo"
    assert e["backend"].startswith("external:") and "example_external_simulator.py" in e["backend"]
    assert by_id["t1:terse:0"]["persona"] == PERSONAS[0]["text"]

    lines = out.read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["id"] == "t1:terse:0"
    assert not (tmp_path / "sim.jsonl.partial").exists()
    loaded = ppol_rs.load_traces(out)
    assert len(loaded) == 4 and {d["task_id"] for d in loaded} == {"t1", "t2"}

    ref = ppol_rs.HumanReference.from_traces(DEMO / "human.jsonl")
    disc = ppol_rs.Discriminator.train(ref, DEMO / "baseline.jsonl", trees=20, folds=3)
    s = ppol_rs.score(ref, out, disc)
    assert 0.0 <= s["human_likeness"] <= 1.0 and 0.0 <= s["combined"] <= 1.0
    assert set(s["dice"]) == {"D1", "D2", "D3", "D4", "overall"}


def test_seeds_are_ppols_rule_and_the_episodes_those_of_ppol_episodes(tmp_path, personas):
    eps = run_external(SIM, personas, TASKS, tmp_path / "a.jsonl", timeout=30, seed=7, trials=2)
    seeds = [e["seed"] for e in eps]
    assert len(set(seeds)) == 8  # one per (task, persona, trial), not seed + request index
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    plain = [{k: v for k, v in p.items() if k != "task_id"} for p in PERSONAS]
    direct = ppol_rs.episodes(world="external:" + " ".join(SIM), task_file=tasks, personas=plain,
                              trials=2, seed=7, concurrency=1)
    assert [(e["id"], e["seed"], e["conversation"]) for e in eps] == \
        [(e["id"], e["seed"], e["conversation"]) for e in direct]
    # an episode's seed does not depend on what else is played beside it
    one = run_external(SIM, personas, TASKS[1:], tmp_path / "b.jsonl", timeout=30, seed=7, trials=2)
    assert [e["seed"] for e in one] == seeds[4:]


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
    assert [e["meta"]["seed"] for e in eps] == [e["seed"] for e in eps]


def test_empty_persona_gets_empty_block(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"task_id": "t1", "persona_id": "none", "text": "  "}) + "\n")
    sim = [sys.executable, "-c", "from ppol_rs.external import serve\n"
           "serve(lambda r: {'conversation': [], 'meta': {'block': r['persona_block']}})"]
    eps = run_external(sim, p, TASKS[:1], tmp_path / "o.jsonl", timeout=30)
    assert eps[0]["meta"] == {"block": ""}


def _run(tmp_path, personas, *flags, **kw):
    kw.setdefault("timeout", 30)
    return run_external(SIM + list(flags), personas, TASKS, tmp_path / "o.jsonl", **kw)


def _records(path):
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_malformed_line_fails_its_episode_and_the_rest_are_played(tmp_path, personas):
    with pytest.raises(ExternalSimulatorError,
                       match=r"episode t1:verbose:0 failed: stdout line 2 is not JSON .*: this is not json"):
        _run(tmp_path, personas, "--garbage-on", "t1:verbose:0")
    # the output is written first: the failure with its reason, the other episodes played by a
    # restarted simulator
    recs = _records(tmp_path / "o.jsonl")
    assert [r["status"] for r in recs.values()] == ["ok", "failed", "ok", "ok"]
    assert "this is not json" in recs["t1:verbose:0"]["error"]


def test_bad_conversation_is_named(tmp_path, personas):
    with pytest.raises(ExternalSimulatorError, match=r"episode t1:terse:0 failed: .*conversation.*robot"):
        # (the example then sleeps: the next episode fails on the timeout, and its simulator is
        # restarted for the rest)
        _run(tmp_path, personas, "--bad-role-on", "t1:terse:0", timeout=2)
    recs = _records(tmp_path / "o.jsonl")
    assert "robot" in recs["t1:terse:0"]["error"] and recs["t2:verbose:0"]["status"] == "ok"


def test_error_response_raises_or_is_skipped(tmp_path, personas, capfd):
    with pytest.raises(ExternalSimulatorError,
                       match=r"t2:terse:0 failed: the simulator reported an error: RuntimeError: persona not supported"):
        _run(tmp_path, personas, "--fail-on", "t2:terse:0")
    eps = _run(tmp_path, personas, "--fail-on", "t2:terse:0", on_error="skip")
    assert [e["id"] for e in eps] == ["t1:terse:0", "t1:verbose:0", "t2:verbose:0"]
    err = capfd.readouterr().err
    assert "ppol external: episode t2:terse:0 failed, skipped: the simulator reported an error" in err
    assert "example simulator: episode t1:terse:0" in err  # the child's stderr passes through
    assert _records(tmp_path / "o.jsonl")["t2:terse:0"]["status"] == "failed"


def test_timeout_kills_the_simulator(tmp_path, personas):
    t0 = time.monotonic()
    with pytest.raises(ExternalSimulatorError, match=r"t1:verbose:0 failed: no answer within 1 s"):
        _run(tmp_path, personas, "--hang-on", "t1:verbose:0", timeout=1)
    assert time.monotonic() - t0 < 20
    assert _records(tmp_path / "o.jsonl")["t2:verbose:0"]["status"] == "ok"


def test_early_exit_is_reported(tmp_path, personas):
    with pytest.raises(ExternalSimulatorError,
                       match=r"t1:verbose:0 failed: the simulator ended its output \(exit status: 3\)"):
        _run(tmp_path, personas, "--exit-on", "t1:verbose:0")


def test_unstartable_command_and_bad_input(tmp_path, personas):
    # a command that cannot start is bad input, as `ppol episodes --world external:/nope` (exit 2)
    with pytest.raises(ppol_rs.ConfigError, match="nope.*cannot start|cannot start.*nope"):
        run_external([str(tmp_path / "nope")], personas, TASKS, tmp_path / "o.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(PERSONAS[0]) + "\n\n{oops\n")
    with pytest.raises(ValueError, match=r"bad.jsonl: line 3: not JSON"):
        load_personas(bad)
    with pytest.raises(ValueError, match=r"tasks\[1\]: task_id 't1' is given twice"):
        run_external(SIM, personas, [TASKS[0], TASKS[0]], tmp_path / "o.jsonl")
    with pytest.raises(ValueError, match="command must be a non-empty list"):
        run_external("python3 sim.py", personas, TASKS, tmp_path / "o.jsonl")
    with pytest.raises(ppol_rs.ConfigError, match="world.processes"):
        run_external(SIM, personas, TASKS, tmp_path / "o.jsonl", processes=0)


COUNTING_SIM = """
import os, sys
from ppol_rs.external import serve
def handle(r):
    with open(sys.argv[1], "a") as f:
        f.write(r["id"] + "\\n")
    return {"conversation": [{"role": "user", "content": r["id"]}],
            "meta": {"pid": os.getpid(), "cwd": os.getcwd(), "x": os.environ.get("PPOL_TEST_X"),
                     "home": os.environ.get("HOME")}}
serve(handle)
"""


def test_a_rerun_plays_only_what_an_interrupted_run_left(tmp_path, personas):
    sim = tmp_path / "sim.py"
    sim.write_text(COUNTING_SIM)
    log = tmp_path / "played.txt"
    out = tmp_path / "o.jsonl"
    run_external([sys.executable, str(sim), str(log)], personas, TASKS, out, timeout=30)
    full = out.read_text().splitlines()
    # as a Ctrl-C leaves it: two episodes in the partial file (and a torn third), no output
    (tmp_path / "o.jsonl.partial").write_text("\n".join(full[:2]) + "\n" + full[2][:30])
    out.unlink()
    log.unlink()
    eps = run_external([sys.executable, str(sim), str(log)], personas, TASKS, out, timeout=30)
    assert log.read_text().split() == ["t2:terse:0", "t2:verbose:0"]
    assert [e["id"] for e in eps] == [json.loads(line)["id"] for line in full]
    assert out.read_text().splitlines()[:2] == full[:2]
    assert not (tmp_path / "o.jsonl.partial").exists()


def test_env_cwd_and_processes(tmp_path, personas):
    sim = tmp_path / "sim.py"
    sim.write_text(COUNTING_SIM)
    work = tmp_path / "work"
    work.mkdir()
    before = dict(os.environ)
    env = {"PPOL_TEST_X": "1", "PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    eps = run_external([sys.executable, str(sim), str(tmp_path / "log.txt")], personas, TASKS,
                       tmp_path / "o.jsonl", timeout=30, env=env, cwd=work, processes=2)
    assert {e["meta"]["cwd"] for e in eps} == {str(work)}
    assert {(e["meta"]["x"], e["meta"]["home"]) for e in eps} == {("1", None)}  # the whole environment
    assert len({e["meta"]["pid"] for e in eps}) == 2
    assert dict(os.environ) == before
    assert all(e["backend"].startswith("external:") and " -C " in e["backend"] for e in eps)


def test_example_simulator_speaks_the_protocol_directly():
    req = {"type": "episode", "id": "a:b:0", "task_id": "a", "task_context": "lamp",
           "persona": {"persona_id": "b", "axis_placement": {"terse": True}, "text": "t"},
           "persona_block": "", "seed": 0}
    proc = subprocess.run(SIM, input=json.dumps(req) + "\n" + '{"type": "shutdown"}\n',
                          capture_output=True, text=True, timeout=60, check=True)
    (line,) = proc.stdout.splitlines()
    msg = json.loads(line)
    assert msg["type"] == "dialogue" and msg["id"] == "a:b:0" and msg["conversation"][1]["role"] == "user"
