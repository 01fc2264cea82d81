"""ppol_rs.audit: the independent audit of human-likeness from Python (DataFrame and dict), its
bad input, and the LLM judge against `ppol mock-server`."""

import json
import subprocess
import sys

import pytest

import ppol_rs
from conftest import DEMO


def test_audit_frame_control_and_baseline():
    df = ppol_rs.audit(DEMO / "human.jsonl", {"base": ppol_rs.demo_traces("baseline")}, bootstrap=30)
    assert list(df.index) == ["control (humans vs humans)", "base"]
    assert df.loc["base", "forest_auc"] > 0.9 and df.loc["base", "logistic_auc"] > 0.9
    c = df.loc["control (humans vs humans)"]
    assert c["forest_low"] <= 0.5 <= c["forest_high"]
    assert c["n_human"] + c["n_candidate"] == 25
    assert len(df.loc["base", "top_features"].split(", ")) == 5
    assert df.attrs["report"]["judge"].startswith("skipped")
    # trace files: one row per path; the dict without pandas
    r = ppol_rs.audit(DEMO / "human.jsonl", [DEMO / "baseline.jsonl"], bootstrap=10, as_frame=False)
    assert r["rows"][0]["name"].endswith("baseline.jsonl")
    assert r["method"]["bootstrap"] == 10 and r["rows"][0]["resamples"] == 10


def test_audit_bad_input():
    few = ppol_rs.demo_traces("baseline")[:6]
    df = ppol_rs.audit(DEMO / "human.jsonl", {"few": few}, bootstrap=10)
    assert "6 dialogue(s)" in df.loc["few", "too_few"]
    assert df["forest_auc"].isna()["few"]
    with pytest.raises(ppol_rs.InsufficientData, match="6 dialogue"):
        ppol_rs.audit(few, {"base": DEMO / "baseline.jsonl"})
    with pytest.raises(ppol_rs.ConfigError, match="bootstrap"):
        ppol_rs.audit(DEMO / "human.jsonl", {"base": few}, bootstrap=0)
    with pytest.raises(ppol_rs.ConfigError, match="candidates"):
        ppol_rs.audit(DEMO / "human.jsonl", [{"id": "x"}])


def test_audit_judge_against_the_mock_server(tmp_path):
    script = tmp_path / "judge.json"
    # the demo's plain simulator always opens "Hello!", "Hi!" or "Hi there!", which no demo
    # human does: a judge that answers B when user A opens so, else A, is always right
    rules = [{"contains": f"User A:\n- {g}", "reply": {"content": "B"}} for g in ("Hello!", "Hi!", "Hi there!")]
    script.write_text(json.dumps({"rules": rules, "default": {"content": "A"}}))
    with subprocess.Popen([sys.executable, "-m", "ppol_rs", "mock-server", "--script", str(script),
                           "--port", "0", "--lifetime-s", "120"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as proc:
        try:
            base = json.loads(proc.stdout.readline())["base_url"]
            r = ppol_rs.audit(DEMO / "human.jsonl", {"base": DEMO / "baseline.jsonl"}, bootstrap=10,
                              llm=f"openai:judge@{base}", judge_pairs=8, as_frame=False)
        finally:
            proc.kill()
    j = r["rows"][0]["judge"]
    assert (j["pairs"], j["answered"], j["correct"]) == (8, 8, 8)
    assert j["paired_by"] == "task" and 0 < j["human_first"] < 8
    assert j["accuracy"]["share"] == 1.0 and 0.6 < j["accuracy"]["low"] < 0.7  # Wilson, 8 of 8
    assert "reflection" in r["judge"]
