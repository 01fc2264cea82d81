"""The ``ppol`` command that ``pip install .`` installs (``ppol_rs.__main__:main``) behaves like
the binary: the same help, the same exit codes, and Ctrl-C stops it (a Python process turns
SIGINT into KeyboardInterrupt, which a long command in Rust would never see)."""

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT


def console_script():
    script = pathlib.Path(sys.executable).with_name("ppol")
    if not script.exists():
        found = shutil.which("ppol")
        if found is None:
            pytest.skip("no ppol console script next to %s" % sys.executable)
        script = pathlib.Path(found)
    return [str(script)]


def binary():
    path = pathlib.Path(os.environ.get("PPOL_BIN", ROOT / "target" / "debug" / "ppol"))
    if not path.exists():
        pytest.skip("no ppol binary at %s (set PPOL_BIN)" % path)
    return [str(path)]


def run(cmd, *args, cwd=None):
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("args,code", [
    (["--help"], 0),
    (["eval", "--help"], 0),
    (["generate", "--help"], 0),
    (["--version"], 0),
    (["no-such-verb"], 2),
    (["eval", "no-such-run-dir"], 2),
])
def test_the_console_script_answers_as_the_binary_does(args, code):
    script, real = run(console_script(), *args), run(binary(), *args)
    assert (script.returncode, real.returncode) == (code, code), (script.stderr, real.stderr)
    assert script.stdout == real.stdout
    assert script.stderr.replace("\\", "/") == real.stderr.replace("\\", "/")


def wait_for(ready, proc, timeout=120):
    t0 = time.monotonic()
    while not ready():
        assert proc.poll() is None, "ppol ended before it was ready (%s)" % proc.returncode
        assert time.monotonic() - t0 < timeout, "not ready after %s s" % timeout
        time.sleep(0.05)


def interrupted(tmp_path, args, ready):
    """Start the console script with `args`, send SIGINT once `ready(stderr so far)` holds;
    returns (exit status, stdout, stderr, seconds from SIGINT to exit)."""
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "w") as o, open(err, "w") as e:
        with subprocess.Popen(console_script() + args, stdout=o, stderr=e) as proc:
            try:
                wait_for(lambda: ready(err.read_text()), proc)
                proc.send_signal(signal.SIGINT)
                t0 = time.monotonic()
                proc.wait(timeout=120)
                seconds = time.monotonic() - t0
            finally:
                proc.kill()
    return proc.returncode, out.read_text(), err.read_text(), seconds


def test_ctrl_c_stops_a_long_command(tmp_path):
    eps = tmp_path / "eps.jsonl"
    code, _, err, seconds = interrupted(
        tmp_path, ["episodes", "--tasks", "all", "--trials", "500", "-o", str(eps)],
        lambda err: "episodes: " in err)
    # as the binary: `episodes` stops at Ctrl-C with the finished episodes kept in OUT.partial
    # and exits 130, rather than a KeyboardInterrupt once all 8,000 episodes are played (~30 s)
    assert code == 130, err
    assert seconds < 10, "Ctrl-C took %.1f s to stop it" % seconds
    assert not eps.exists()
    partial = tmp_path / "eps.jsonl.partial"
    assert partial.exists() and len(partial.read_text().splitlines()) < 8000, err


def test_ctrl_c_stops_an_evolution_after_the_current_evaluation(tmp_path):
    run_dir = tmp_path / "run"
    code, out, err, _ = interrupted(
        tmp_path, ["evolve", "--iterations", "1000", "--quiet", "--out", str(run_dir)],
        lambda _: (run_dir / "checkpoint.json").exists())
    assert code == 130, err
    assert "stopping after the current evaluation" in err
    assert "stopped: interrupted" in out, out
