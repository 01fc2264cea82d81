"""The README's offline Python snippet runs as written (in a fresh directory: it writes runs/nb),
and ``EvolveRun.stop()`` returns only once the run has stopped."""

import os
import re

import pytest

import ppol_rs
from conftest import ROOT


def readme_python_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Python") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_python_snippet_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(readme_python_block(), "README.md", "exec"), scope)
    assert scope["summary"]["iterations"] == 5
    table = scope["table"]
    names = list(table.index) if hasattr(table, "index") else [r["name"] for r in table["rows"]]
    assert names == ["human", "base", "direct", "seed", "evolved"]
    assert len(scope["personas"]) == 5 and len(scope["episodes"]) == 5
    assert "Some(" not in capsys.readouterr().out, "progress messages are not Rust debug output"


def test_stop_waits_until_the_run_has_stopped(tmp_path):
    out = str(tmp_path / "run")
    run = ppol_rs.evolve_async(overrides={"search.iterations": 50, "run.out": out})
    # wait for the first evaluation so that the run has a best program to stop with
    import time

    t0 = time.monotonic()
    while not os.path.exists(os.path.join(out, "checkpoint.json")):
        assert time.monotonic() - t0 < 120
        time.sleep(0.05)
    summary = run.stop()
    assert run.done() and summary["reason"] == "interrupted"
    table = ppol_rs.evaluate(out, n=2, as_frame=False)
    assert [r["name"] for r in table["rows"]][-1] == "evolved"
