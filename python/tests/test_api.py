"""generate / episodes / evolve / resume / evaluate / report from Python."""

import asyncio
import json
import os
import sys

import pytest

import ppol_rs
from conftest import ROOT


def test_generate_then_episodes_with_personas():
    ps = ppol_rs.generate(ROOT / "seeds" / "offline_templates.py", domain="demo", task="0,1", n=2)
    assert [p["task_id"] for p in ps] == ["0", "0", "1", "1"]
    eps = ppol_rs.episodes("demo", "0,1", personas=ps)
    assert len(eps) == 4 and {e["persona_id"] for e in eps} == {p["persona_id"] for p in ps}
    free = ppol_rs.generate(ROOT / "seeds" / "offline_templates.py", "I want a refund for a broken kettle.", n=3)
    assert len(free) == 3 and all("task_id" not in p for p in free)
    with pytest.raises(ppol_rs.SandboxError, match="missing_axes.py failed at stage contract"):
        ppol_rs.generate(ROOT / "tests" / "fixtures" / "generators" / "hostile" / "missing_axes.py", "x", n=1)
    with pytest.raises(ppol_rs.DomainError):
        ppol_rs.episodes("no-such-domain")


def test_evolve_progress_stop_resume_evaluate_report(tmp_path):
    out = tmp_path / "run"
    seen = []
    run = ppol_rs.evolve_async(overrides={"search.iterations": 200, "run.out": str(out)}, progress=seen.append)
    while not seen or seen[-1]["iteration"] < 2:
        assert run.result(timeout=0.05) is None or seen
    run.stop()
    summary = run.result()
    assert summary["reason"] == "interrupted" and 2 <= summary["iterations"] < 200
    assert run.done()
    more = ppol_rs.resume(out, iterations=summary["iterations"] + 1)
    assert more["iterations"] == summary["iterations"] + 1
    df = ppol_rs.evaluate(out, n=3)
    assert list(df.index) == ["human", "base", "direct", "seed", "evolved", "evolved - seed"]
    assert df.loc["evolved", "human_likeness"] > df.loc["base", "human_likeness"]
    assert ppol_rs.report(out).endswith("report.html")


def test_evolve_async_is_awaitable_and_errors_are_specific(tmp_path):
    async def main():
        return await ppol_rs.evolve_async(overrides={"search.iterations": 1, "run.out": str(tmp_path / "a")})

    assert asyncio.run(main())["iterations"] == 1
    with pytest.raises(ppol_rs.ConfigError, match="search.itrations"):
        ppol_rs.evolve(overrides={"search.itrations": 2})
    with pytest.raises(ppol_rs.ConfigError, match="fitness.n_personas"):
        ppol_rs.evolve(overrides={"fitness.n_personas": 0})
    with pytest.raises(ppol_rs.RunError, match="ppol resume"):
        ppol_rs.evolve(overrides={"search.iterations": 1, "run.out": str(tmp_path / "a")})


def test_issue43_item9_dict_overrides_merge_and_world_conflicts_are_refused(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text("[search]\nseed = 5\niterations = 9\n")
    s = ppol_rs.evolve(str(cfg), overrides={"search": {"iterations": 1}, "run.out": str(tmp_path / "r")})
    assert s["iterations"] == 1
    with open(tmp_path / "r" / "config.toml", encoding="utf-8") as f:
        assert "seed = 5" in f.read(), "the file's [search] seed survives a dict override"
    with pytest.raises(ppol_rs.ConfigError, match="disagree"):
        ppol_rs.evolve(overrides={"run.world": "retail"}, world="demo")
    with pytest.raises(ppol_rs.ConfigError, match="disagree"):
        ppol_rs.evolve(overrides={"run": {"world": "retail"}}, world="demo")


def test_worlds_from_python(tmp_path):
    """world= and task_file= reach every verb: episodes and evolve in an external world whose
    simulator does not import ppol; domain= and world= together are one clear error."""
    sim = os.path.join(ROOT, "tests", "fixtures", "worlds", "my_sim.py")
    tasks = os.path.join(ROOT, "tests", "fixtures", "worlds", "tasks.jsonl")
    world = f"external:{sys.executable} {sim}"
    eps = ppol_rs.episodes(tasks="task_0,task_1", world=world, task_file=tasks)
    assert [e["status"] for e in eps] == ["ok", "ok"]
    assert eps[0]["domain"] == "external"
    ps = ppol_rs.generate(ppol_rs.seed_program("offline_templates"), task="task_3", task_file=tasks, n=2)
    assert len(ps) == 2 and ps[0]["task_id"] == "task_3"
    s = ppol_rs.evolve(world=world, task_file=tasks,
                       overrides={"search.iterations": 2, "run.out": str(tmp_path / "run")})
    assert s["iterations"] == 2
    with pytest.raises(ppol_rs.ConfigError, match="give one of them"):
        ppol_rs.episodes("retail", world="retail")


def test_counts_and_sizes_have_the_command_lines_bounds(tmp_path):
    # issue #24: the same bounds as the command line, from the same checks
    with pytest.raises(ppol_rs.ConfigError, match="'trials': must be at least 1"):
        ppol_rs.episodes("demo", "0", trials=0)
    with pytest.raises(ppol_rs.ConfigError, match="'trials': must be at most 1000"):
        ppol_rs.episodes("demo", "0", trials=10**9)
    with pytest.raises(ppol_rs.ConfigError, match="'n': must be at most 1000"):
        ppol_rs.generate(ROOT / "seeds" / "offline_templates.py", "x", n=10**9)
    with pytest.raises(ppol_rs.ConfigError, match="fitness.n_personas"):
        ppol_rs.evolve(overrides={"fitness.n_personas": 10**9, "run.out": str(tmp_path / "run")})
    # a persona file that never ends is refused at the line limit, not read into memory
    import threading

    fifo = tmp_path / "personas.jsonl"
    os.mkfifo(fifo)

    def feed():
        try:
            with open(fifo, "wb") as f:
                while True:
                    f.write(b" " * (1 << 20))
        except OSError:
            pass

    threading.Thread(target=feed, daemon=True).start()
    with pytest.raises(ppol_rs.ParseError, match="line 1: the line is longer than 64 MiB"):
        ppol_rs.episodes("demo", "0", personas=fifo)


def test_input_traces_without_user_text_warn_and_repeated_ids_are_refused(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(
        '{"id": "a", "conversation": [{"role": "user", "content": "hi"}]}\n'
        '{"id": "e", "conversation": [{"role": "assistant", "content": "hello"}]}\n'
    )
    with pytest.warns(UserWarning, match="t.jsonl: line 2: dialogue 'e' has no user text"):
        ds = ppol_rs.load_traces(p)
    assert [d["id"] for d in ds] == ["a"]
    with pytest.warns(UserWarning, match="line 2: dialogue 'e' has no user text"):
        ppol_rs.HumanReference.from_traces(p)
    with pytest.raises(ppol_rs.ParseError, match="dialogue id 'a' is also the id of line 1"):
        ppol_rs.load_traces([{"id": "a", "conversation": [{"role": "user", "content": "x"}]}] * 2)


def test_a_generator_program_that_is_not_a_program_says_what_is_wrong(tmp_path):
    with pytest.raises(ppol_rs.IoError, match="not a regular file \\(a character device\\)"):
        ppol_rs.generate("/dev/null", "x")
    (tmp_path / "empty.py").write_text("")
    with pytest.raises(ppol_rs.IoError, match="the file is empty"):
        ppol_rs.generate(tmp_path / "empty.py", "x")
    with pytest.raises(ppol_rs.IoError, match="does not exist"):
        ppol_rs.generate(tmp_path / "missing.py", "x")


def test_population_objective_from_python(tmp_path):
    """[fitness] objective = "population" through overrides=: the run starts from the population
    seed, its summary names the objective and the humans, and too few humans is InsufficientData."""
    out = tmp_path / "pop"
    s = ppol_rs.evolve(overrides={"search.iterations": 1, "run.out": str(out), "fitness.objective": "population",
                                  "fitness.curriculum": False, "fitness.n_personas": 3, "fitness.batch_size": 2})
    assert s["humans"]["objective"] == "population" and s["humans"]["search"] > 0
    assert "PLACEMENT_WEIGHTS" in (out / "best" / "program.py").read_text()
    few = tmp_path / "few.jsonl"
    few.write_text("".join((ROOT / "fitness" / "demo" / "human.jsonl").read_text().splitlines(True)[:5]))
    with pytest.raises(ppol_rs.InsufficientData, match="population objective"):
        ppol_rs.evolve(overrides={"search.iterations": 1, "run.out": str(tmp_path / "few"), "run.human": [str(few)],
                                  "run.human_holdout": 0.0, "fitness.objective": "population"})
