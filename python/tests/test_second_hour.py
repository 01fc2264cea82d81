"""From Python, what the second hour needs (issue #37): personas from a run's best program
(``generate(run=)``), and an evaluation table whose skipped rows are NaN, not 0.0, with the
evolved − seed row and its standard error."""

import json
import math

import pytest

import ppol_rs


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("second") / "run")
    ppol_rs.evolve(overrides={"search.iterations": 3, "search.seed": 1, "run.out": out})
    return out


def test_generate_from_a_run_takes_its_best_program_and_world(run_dir, tmp_path):
    every = ppol_rs.generate(run=run_dir, n=1)
    assert len(every) == 16, "every task of the run's world (demo)"
    some = ppol_rs.generate(run=run_dir, task="3", n=2)
    assert [p["task_id"] for p in some] == ["3", "3"]
    assert some == ppol_rs.generate(run_dir + "/best/program.py", domain="demo", task="3", n=2)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"task_id": "late", "context": "Your parcel is late."}) + "\n")
    mine = ppol_rs.generate(run=run_dir, task_file=tasks, n=3)
    assert [p["task_id"] for p in mine] == ["late"] * 3
    with pytest.raises(ppol_rs.ConfigError, match="not both"):
        ppol_rs.generate(ppol_rs.seed_program(), run=run_dir, n=1)
    with pytest.raises(ppol_rs.ConfigError, match="program=.* or .*run="):
        ppol_rs.generate(task="x")
    with pytest.raises(ppol_rs.RunError, match="no such run directory"):
        ppol_rs.generate(run=str(tmp_path / "nope"), n=1)


def test_skipped_rows_are_nan_and_evolved_minus_seed_has_its_standard_error(run_dir):
    table = ppol_rs.evaluate(run_dir, n=2, as_frame=False)
    direct = next(r for r in table["rows"] if r["name"] == "direct")
    assert direct["skipped"] and math.isnan(direct["score"]) and math.isnan(direct["dice"]["D1"])
    c = table["evolved_vs_seed"]
    rows = {r["name"]: r for r in table["rows"]}
    assert c["score"] == pytest.approx(rows["evolved"]["score"] - rows["seed"]["score"])
    assert c["standard_error"] > 0 and len(c["per_task"]) == 7
    pd = pytest.importorskip("pandas")
    frame = ppol_rs.evaluate(run_dir, n=2)
    assert isinstance(frame, pd.DataFrame)
    assert math.isnan(frame.loc["direct", "score"]), "a skipped row must not read as 0.0"
    assert frame["score"].drop(["direct", "evolved - seed"]).notna().all()
    diff = frame.loc["evolved - seed"]
    assert diff["score"] == pytest.approx(frame.loc["evolved", "score"] - frame.loc["seed", "score"])
    assert diff["dice_overall"] == pytest.approx(
        frame.loc["evolved", "dice_overall"] - frame.loc["seed", "dice_overall"])
    assert diff["standard_error"] == pytest.approx(c["standard_error"])
    assert math.isnan(frame.loc["seed", "standard_error"])
