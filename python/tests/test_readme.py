"""The README's offline Python snippet runs as written (in a fresh directory: it writes runs/nb),
``EvolveRun.stop()`` returns only once the run has stopped, and the README's τ²-bench command
(in "What next") is one the plug-in's command line takes as written."""

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
    if hasattr(table, "index"):
        assert list(table.index) == ["human", "base", "direct", "seed", "evolved", "evolved - seed"]
    else:
        assert [r["name"] for r in table["rows"]] == ["human", "base", "direct", "seed", "evolved"]
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


def test_the_readme_tau2_command_is_taken_as_written(monkeypatch):
    import shlex

    from ppol_rs import tau2_plugin

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## What next") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    line = next(l for l in block.splitlines() if l.startswith("python -m ppol_rs.tau2_plugin"))
    argv = shlex.split(line)[3:]
    seen = {}

    def run(personas, domain, out, **kw):
        seen.update(personas=personas, domain=domain, out=out, **kw)
        return tau2_plugin.Tau2Episodes([], {})

    monkeypatch.setattr(tau2_plugin, "run_tau2_with_personas", run)
    assert tau2_plugin.main(argv) == 0
    assert seen["personas"] == "retail_personas.jsonl" and seen["domain"] == "retail"
    assert seen["out"] == "tau2_episodes.jsonl" and seen["api_base"] == "URL"
    # the file that command reads is the one the README's ppol generate line writes
    assert "-o retail_personas.jsonl" in block
