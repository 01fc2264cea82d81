"""ppol's Ray executor: a world's simulator processes in the actors of a Ray cluster.

ppol embeds this file's text and, for a world with ``[world] executor = "ray"``, writes it to a
private temporary directory and starts it with the interpreter ``[world] python`` (else
``$PPOL_RAY_PYTHON``, else ``python3``), which needs Ray (``pip install 'ray[default]'``) and
nothing of ppol::

    python3 ray_world.py --spec SPEC.json

To ppol it is one simulator process speaking the JSONL protocol, **version 2**
(``EXTERNAL_PROTOCOL.md`` beside this file): it answers ``hello`` once it has connected to the
cluster (``ray.init(address=...)``) and started ``actors`` actors, each reserving ``num_cpus``
CPUs, spread over the nodes (``SPREAD`` scheduling); each actor runs the world's own simulator
command (protocol 1 or 2, the user's ``external:`` command or τ²'s runner, whose text travels
in the spec's environment) as a subprocess on its node. Episode requests go to the actor with
the most free room; answers come back as they finish, each with ``meta.ray``: the node and
actor that played it, and the reason of every earlier attempt.

Faults. An actor, its worker process, its simulator process or its node that dies while an
episode is in flight: the episode is played again on another actor, at most ``retries`` times
(every attempt's reason recorded in ``meta.ray.retries``), else answered as an error with the
reasons; the dead actor is replaced (a replacement that cannot be placed within
``start_timeout_s`` leaves the cluster one actor smaller). An episode with no answer within
``episode_timeout_s`` is answered as an error and its actor is replaced, as ppol's local executor
restarts a hung process. A simulator that breaks the protocol fails its episode, unretried.
The seed of an episode is ppol's (derived from task, persona and trial), so a deterministic
simulator plays the same episode on any actor, node or retry.

Lifetime. The bridge exits when ppol closes its stdin (``shutdown``, or ppol's death: ppol holds
the pipe's only write end, so even ``kill -9`` of ppol closes it) or its parent changes; Ray then
destroys the actors of the bridge's job (they are not detached), and each actor's simulator
dies with its actor (``PR_SET_PDEATHSIG`` from the thread that owns it, its own process group
killed on a clean stop).

Start-up errors (Ray missing, a cluster that cannot be reached, a Ray version other than the
cluster's, actors that cannot be placed) are answered to the ``hello`` as
``{"type": "hello", "protocol": 2, "error": "KEY: what is wrong"}``; ppol stops with exit 2
naming the key.

Standard library and Ray only; ppol-rs need not be installed here nor on the workers.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

PROTOCOL = 2
INSTALL = "pip install 'ray[default]'"
MAX_LINE_BYTES = 64 << 20
"""Largest line a simulator may write (ppol's limit)."""
MAX_IN_FLIGHT = 256
"""The protocol's largest ``max_in_flight``."""
STOP_GRACE_S = 2.0
"""How long a simulator may take to exit after ``shutdown`` before its group is killed."""

_LOST = "_ppol_ray_lost"
"""Key of an actor's answer when its simulator process died (the episode is retried)."""
_BROKEN = "_ppol_ray_broken"
"""Key of an actor's answer when its simulator broke the protocol (the episode fails)."""


class StartError(Exception):
    """A start-up failure; ``key`` is the configuration key ppol names."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


# --------------------------------------------------------------------------------------------
# The actor side: one simulator process per actor.


def _pdeathsig() -> None:
    """In the child, before exec: SIGKILL when the thread that started it dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # pragma: no cover - not Linux
        pass


# The simulator runs under this supervisor (a Python process of the worker's interpreter):
# a child subreaper, so whatever the simulator leaves behind — a `setsid` daemon, a double
# fork — is reparented to it instead of to init; it gets SIGTERM when the actor's keeper thread
# dies (PR_SET_PDEATHSIG), and whenever it ends (the simulator exited, SIGTERM) it kills every
# process below it. As the local executor's supervisor does: nothing a simulator starts
# outlives its actor. Its stdin and stdout are the simulator's (inherited), untouched.
_SUPERVISOR = r"""
import ctypes, os, signal, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(36, 1)                 # PR_SET_CHILD_SUBREAPER
libc.prctl(1, signal.SIGTERM)     # PR_SET_PDEATHSIG
me = os.getpid()

def below():
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [me]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out

def end(code):
    for _ in range(50):
        pids = below()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.02)
    os._exit(code)

signal.signal(signal.SIGTERM, lambda *_: end(143))
if os.getppid() == 1:
    end(143)
try:
    child = subprocess.Popen(sys.argv[1:])
except OSError as e:
    sys.stderr.write(f"cannot start the simulator {sys.argv[1]!r}: {e}\n")
    end(127)
code = child.wait()
end(code if code >= 0 else 128 - code)
"""


class _Pending:
    __slots__ = ("event", "answer")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.answer: Optional[Dict[str, Any]] = None


class Simulator:
    """The world's simulator command as a subprocess speaking protocol 1 or 2.

    ``play``, ``list_tasks`` and ``hello`` may be called from several threads at once (a
    version-1 simulator gets one request at a time, in order). Methods return the simulator's
    answer, or ``{_LOST: reason}`` / ``{_BROKEN: reason}``.
    """

    def __init__(self, sim: Dict[str, Any]):
        self.protocol = int(sim["protocol"])
        argv = list(sim["argv"])
        if sim.get("worker_python"):
            argv[0] = sys.executable
        env = dict(os.environ)
        env.update(sim.get("env") or {})
        cwd = sim.get("cwd")
        # Ray's working_dir, else ppol's working directory where the node has it, else the
        # temporary root: the actor writes nothing of its own to disk
        if sim.get("use_working_dir") or not (cwd and os.path.isdir(cwd)):
            cwd = os.getcwd() if sim.get("use_working_dir") else tempfile.gettempdir()
        self.argv = argv
        self.lock = threading.Lock()
        self.pending: Dict[str, _Pending] = {}
        self.order: List[str] = []
        self.next = 0
        self.dead: Optional[str] = None
        started = threading.Event()
        failure: List[BaseException] = []

        exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=env.get("PATH"))
        if not exe or not os.access(os.path.join(cwd, exe) if not os.path.isabs(exe) else exe,
                                    os.X_OK):
            raise RuntimeError(f"cannot start the simulator {argv[0]!r}: not an executable "
                               f"here (looked in {cwd} and $PATH)")

        def keeper() -> None:
            # This thread starts the process and lives as long as it: the process gets SIGKILL
            # when the thread ends (PR_SET_PDEATHSIG), i.e. when the actor's process dies.
            try:
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", _SUPERVISOR, *argv], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=None, cwd=cwd, env=env,
                    start_new_session=True, preexec_fn=_pdeathsig)
            except BaseException as e:  # noqa: BLE001 - reported to the caller
                failure.append(e)
                started.set()
                return
            started.set()
            self._read()

        threading.Thread(target=keeper, name="ppol-simulator", daemon=True).start()
        started.wait()
        if failure:
            raise RuntimeError(f"cannot start the simulator {argv[0]!r}: {failure[0]}")

    def _die(self, reason: str, key: str = _LOST) -> None:
        with self.lock:
            if self.dead is None:
                self.dead = reason
            pending, self.pending, self.order = self.pending, {}, []
        self.kill()
        for p in pending.values():
            p.answer = {key: reason}
            p.event.set()

    def kill(self) -> None:
        # the supervisor first (it kills everything below it, daemons too), then the group
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(STOP_GRACE_S)
        except (OSError, AttributeError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (OSError, AttributeError):
            pass

    def _read(self) -> None:
        line_no = 0
        out = self.proc.stdout
        while True:
            line = out.readline(MAX_LINE_BYTES + 1)
            line_no += 1
            if not line:
                code = self.proc.wait()
                return self._die(f"the simulator process exited ({code}) without answering")
            if len(line) > MAX_LINE_BYTES:
                return self._die(f"stdout line {line_no} is longer than {MAX_LINE_BYTES} bytes",
                                 _BROKEN)
            if not line.strip():
                continue
            shown = line.strip()[:200].decode("utf-8", "replace")
            try:
                v = json.loads(line)
            except ValueError as e:
                return self._die(f"stdout line {line_no} is not JSON ({e}): {shown}", _BROKEN)
            if not isinstance(v, dict):
                return self._die(f"stdout line {line_no} is not a JSON object: {shown}", _BROKEN)
            kind = v.get("type")
            with self.lock:
                if kind == "hello":
                    key = "hello"
                elif kind == "tasks":
                    key = "list_tasks"
                elif self.protocol >= 2:
                    key = v.get("request_id")
                else:
                    key = self.order.pop(0) if self.order else None
                p = self.pending.pop(key, None) if isinstance(key, str) else None
            if p is None:
                if self.protocol < 2:
                    return self._die(f"stdout line {line_no}: an answer nobody asked for: {shown}",
                                     _BROKEN)
                continue  # a v2 answer to a request given up on
            p.answer = v
            p.event.set()

    def request(self, msg: Dict[str, Any], key: str) -> Dict[str, Any]:
        p = _Pending()
        data = (json.dumps(msg) + "\n").encode("utf-8")
        with self.lock:
            if self.dead is not None:
                return {_LOST: self.dead}
            self.pending[key] = p
            if self.protocol < 2 and key not in ("hello", "list_tasks"):
                self.order.append(key)
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except OSError as e:
                failed = f"the simulator closed its stdin ({e}): it exited or crashed"
            else:
                failed = None
        if failed:
            self._die(failed)
        p.event.wait()
        return p.answer or {_LOST: "no answer"}

    def episode(self, req: Dict[str, Any]) -> Dict[str, Any]:
        msg = dict(req)
        with self.lock:
            self.next += 1
            rid = f"a{self.next}"
        if self.protocol >= 2:
            msg["request_id"] = rid
        else:
            msg.pop("request_id", None)
            msg.pop("max_turns", None)
            msg["protocol"] = 1
        answer = self.request(msg, rid)
        if "request_id" in req and _LOST not in answer and _BROKEN not in answer:
            answer = dict(answer)
            answer["request_id"] = req["request_id"]
        if self.protocol < 2 and answer.get("type") in ("dialogue", "error") \
                and answer.get("id") != req.get("id"):
            self._die(f"the simulator answered id {answer.get('id')!r} while request "
                      f"{req.get('id')!r} was pending (a version-1 simulator answers in "
                      "request order)", _BROKEN)
            return {_BROKEN: self.dead}
        return answer

    def stop(self) -> None:
        with self.lock:
            alive = self.dead is None
            self.dead = self.dead or "stopped"
        if alive:
            try:
                self.proc.stdin.write(b'{"type": "shutdown"}\n')
                self.proc.stdin.close()
                self.proc.wait(STOP_GRACE_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


class SimulatorActor:
    """A Ray actor holding one simulator process (made remote by :func:`actor_class`)."""

    def __init__(self, sim: Dict[str, Any], max_in_flight: int, timeout_s: float):
        import ray

        self.sim = Simulator(sim)
        ctx = ray.get_runtime_context()
        self.where = {"node": ctx.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
                      "pid": self.sim.proc.pid}
        self.hello: Dict[str, Any] = {}
        if self.sim.protocol >= 2:
            box: List[Dict[str, Any]] = []
            t = threading.Thread(target=lambda: box.append(self.sim.request(
                {"type": "hello", "protocol": 2, "ppol": sim.get("ppol", "")}, "hello")),
                daemon=True)
            t.start()
            t.join(timeout_s)
            if not box:
                self.sim.kill()
                raise RuntimeError(f"no hello answer within {timeout_s:g} s (is it a version-2 "
                                   "simulator? a version-1 one needs [world] protocol = 1)")
            h = box[0]
            if _LOST in h or _BROKEN in h:
                raise RuntimeError(f"during the hello handshake: {h.get(_LOST) or h.get(_BROKEN)}")
            if h.get("type") != "hello" or h.get("protocol") != 2:
                self.sim.kill()
                raise RuntimeError(f"expected a version-2 hello answer, got {json.dumps(h)[:300]}")
            self.hello = h
        k = 1 if self.sim.protocol < 2 else self.hello.get("max_in_flight") or 1
        self.where["max_in_flight"] = max(1, min(int(k), max_in_flight))

    def info(self) -> Dict[str, Any]:
        return {"where": self.where, "hello": self.hello}

    def play(self, req: Dict[str, Any]) -> Dict[str, Any]:
        return self.sim.episode(req)

    def list_tasks(self) -> Dict[str, Any]:
        return self.sim.request({"type": "list_tasks"}, "list_tasks")

    def stop(self) -> None:
        self.sim.stop()


def actor_class(ray: Any) -> Any:
    return ray.remote(SimulatorActor)


# --------------------------------------------------------------------------------------------
# The driver side: ppol's simulator process.


class Slot:
    """One actor of the pool (``actor`` None while it is being replaced or once retired)."""

    def __init__(self, index: int):
        self.index = index
        self.actor: Any = None
        self.where: Dict[str, Any] = {}
        self.busy = 0
        self.capacity = 1
        self.generation = 0


class Bridge:
    def __init__(self, spec: Dict[str, Any], write):
        self.spec = spec
        self.write = write
        self.ray: Any = None
        self.cond = threading.Condition()
        self.slots: List[Slot] = []
        self.replacing = 0
        self.hello: Dict[str, Any] = {}
        self.node_ips: Dict[str, str] = {}
        self.retired: List[str] = []
        self.timeout = float(spec["episode_timeout_s"])
        self.start_timeout = float(spec["start_timeout_s"])
        self.stopping = False

    # ---- start-up

    def connect(self) -> None:
        address = self.spec["address"]
        resolved = resolve_address(address)
        host = resolved.split("://")[-1].rsplit(":", 1)[0].strip("[]")
        if host in ("127.0.0.1", "localhost", "::1") or host.startswith("127."):
            # Ray replaces a loopback address by the machine's network address unless clusters
            # are "disabled": then it keeps 127.0.0.1, the address the nodes registered with.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        # Never connect on a call made after the end (a replacement under way at exit): Ray
        # would otherwise start or join whatever cluster it finds.
        os.environ["RAY_ENABLE_AUTO_CONNECT"] = "0"
        # and never report usage statistics anywhere
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        try:
            import ray
        except ImportError as e:
            raise StartError("world.python", f"{sys.executable} cannot import ray ({e}): "
                             f"`{INSTALL}` there, or name an interpreter that has it with "
                             "[world] python (or $PPOL_RAY_PYTHON)")
        self.ray = ray
        check_reachable(address, resolved, self.start_timeout)
        connected = threading.Event()

        def watchdog() -> None:
            # ray.init retries for minutes against a head that accepts connections but does
            # not answer: give up after start_timeout_s, saying every 5 s that it waits.
            t0 = time.monotonic()
            while not connected.wait(min(5.0, max(0.0, t0 + self.start_timeout - time.monotonic()))):
                waited = time.monotonic() - t0
                if waited < self.start_timeout:
                    log(f"connecting to the Ray cluster at {address!r}: {waited:.0f} s "
                        f"(waiting at most {self.start_timeout:g} s)")
                    continue
                self.write({"type": "hello", "protocol": PROTOCOL, "error": str(StartError(
                    "world.ray.address", f"no answer from the Ray cluster at {address!r} "
                    f"({resolved}) within {self.start_timeout:g} s ([world.ray] "
                    "start_timeout_s)"))})
                os._exit(2)

        threading.Thread(target=watchdog, daemon=True).start()
        try:
            ray.init(address=resolved, runtime_env=self.spec.get("runtime_env"),
                     namespace=f"ppol-{os.getpid()}", logging_level="WARNING", log_to_driver=True)
        except Exception as e:  # noqa: BLE001 - classified below
            connected.set()
            text = str(e)
            if "version" in text.lower() and "mismatch" in text.lower():
                raise StartError("world.python", f"{sys.executable} (Ray {ray.__version__}, Python "
                                 f"{sys.version.split()[0]}) is not what the cluster runs: name an "
                                 "interpreter with the cluster's Python and Ray versions "
                                 f"(`pip install 'ray[default]==VERSION'`): {' '.join(text.split())}")
            if "runtime_env" in text or "RuntimeEnv" in type(e).__name__:
                raise StartError("world.ray.runtime_env", text)
            raise StartError("world.ray.address", f"cannot connect to the Ray cluster at "
                             f"{address!r}: {type(e).__name__}: {text}")
        connected.set()

    def start_actors(self) -> None:
        n = int(self.spec["actors"])
        self.slots = [Slot(i) for i in range(n)]
        refs = {}
        for s in self.slots:
            s.actor = self.new_actor()
            refs[s.index] = s.actor.info.remote()
        placed, unplaced_why = self.wait_placed(list(refs.values()))
        ready = set(placed)
        errors = []
        for s in self.slots:
            ref = refs[s.index]
            if ref not in ready:
                self.ray.kill(s.actor, no_restart=True)
                s.actor = None
                continue
            try:
                info = self.ray.get(ref)
            except Exception as e:  # noqa: BLE001 - the simulator's start failure
                errors.append(error_text(e))
                s.actor = None
                continue
            self.place(s, info)
        live = [s for s in self.slots if s.actor is not None]
        if not live:
            if errors:
                raise StartError("run.world", "the simulator could not start in a Ray actor: "
                                 + errors[0])
            total = float(self.ray.cluster_resources().get("CPU", 0.0))
            if total >= float(self.spec["num_cpus"]):
                # the cluster could hold one: the actors were placed, and what did not finish
                # is the simulator's start (a version-2 simulator that never answers `hello`)
                raise StartError("run.world", f"no actor finished starting within "
                                 f"{self.start_timeout:g} s ([world.ray] start_timeout_s), though "
                                 f"the cluster has {total:g} CPU(s) for actors of "
                                 f"{self.spec['num_cpus']}: the simulator did not answer its "
                                 "hello (a version-2 simulator answers `hello` first, see "
                                 "EXTERNAL_PROTOCOL.md), or it takes longer than that to start")
            raise StartError("world.ray.num_cpus", f"no actor could be placed within "
                             f"{self.start_timeout:g} s: each asks for {self.spec['num_cpus']} "
                             f"CPU(s); the cluster has {total:g} in all, "
                             f"{self.ray.available_resources().get('CPU', 0)} available "
                             "([world.ray] actors, num_cpus)")
        if len(live) < n:
            why = errors[0] if errors else unplaced_why
            log(f"{len(live)} of {n} actors started ({why}); playing on those")
            self.slots = live
        nodes = sorted({s.where["node"] for s in live})
        log(f"{len(live)} actors on {len(nodes)} node(s) of the cluster")

    def wait_placed(self, refs: List[Any], replacing: bool = False) -> Tuple[List[Any], str]:
        """The refs of actors that started within ``start_timeout_s``, and why the others did
        not; once one has (or, for a replacement, at once), waiting stops early when the rest
        cannot be placed (no free CPU for them for 10 s)."""
        t0 = time.monotonic()
        ready: List[Any] = []
        pending = list(refs)
        stalled_since = None
        said = t0
        why = f"not placed within {self.start_timeout:g} s ([world.ray] start_timeout_s)"
        while pending:
            left = self.start_timeout - (time.monotonic() - t0)
            if left <= 0:
                break
            done, pending = self.ray.wait(pending, num_returns=len(pending), timeout=min(left, 0.5))
            ready += done
            free = self.ray.available_resources().get("CPU", 0.0)
            if self.stopping:
                break
            now = time.monotonic()
            if pending and now - said >= 5:
                # never silent while the cluster makes room
                said = now
                log(f"placing actors: {len(ready)} of {len(refs)} started after {now - t0:.0f} s; "
                    f"each asks for {self.spec['num_cpus']} CPU(s), {free:g} free "
                    f"(waiting at most {self.start_timeout:g} s)")
            if (ready or replacing) and pending and free < float(self.spec["num_cpus"]):
                stalled_since = stalled_since or now
                if now - stalled_since > 10:
                    why = (
                        f"no free CPU for the rest for 10 s: each asks for "
                        f"{self.spec['num_cpus']} CPU(s) ([world.ray] actors, num_cpus)")
                    break
            else:
                stalled_since = None
        return ready, why

    def new_actor(self) -> Any:
        cls = actor_class(self.ray)
        k = int(self.spec["max_in_flight"])
        return cls.options(num_cpus=float(self.spec["num_cpus"]), scheduling_strategy="SPREAD",
                           max_concurrency=k + 4, max_restarts=0).remote(
            self.spec["simulator"], k, self.timeout)

    def node_ip(self, node: str, seen: str) -> str:
        """The node's address as the cluster records it (`ray start --node-ip-address`): what a
        worker process detects by itself is the machine's network address, which a node started
        on 127.0.0.1 does not use."""
        if node not in self.node_ips:
            try:
                self.node_ips = {n["NodeID"]: n["NodeManagerAddress"] for n in self.ray.nodes()}
            except Exception:  # noqa: BLE001 - the worker's own reading is the fallback
                pass
        return self.node_ips.get(node) or seen

    def place(self, s: Slot, info: Dict[str, Any]) -> None:
        where = dict(info["where"])
        where["node_ip"] = self.node_ip(where.get("node", ""), where.get("node_ip", ""))
        with self.cond:
            s.where = where
            s.capacity = int(s.where.pop("max_in_flight", 1))
            s.generation += 1
            if not self.hello:
                self.hello = info["hello"]
            self.cond.notify_all()

    def hello_answer(self) -> Dict[str, Any]:
        inner = self.hello
        room = sum(s.capacity for s in self.slots)
        answer = {"type": "hello", "protocol": PROTOCOL,
                  "name": f"ray({inner.get('name') or 'simulator'})",
                  "max_in_flight": max(1, min(MAX_IN_FLIGHT, room)),
                  "tasks": bool(inner.get("tasks"))}
        if inner.get("domain"):
            answer["domain"] = inner["domain"]
        return answer

    # ---- the pool

    def acquire(self) -> Optional[Slot]:
        """The live actor with the most free room; waits while all are busy or being replaced;
        None when none is left."""
        with self.cond:
            while True:
                live = [s for s in self.slots if s.actor is not None]
                free = [s for s in live if s.busy < s.capacity]
                if free:
                    s = max(free, key=lambda s: (s.capacity - s.busy, -s.index))
                    s.busy += 1
                    return s
                if not live and not self.replacing:
                    return None
                self.cond.wait(1.0)

    def release(self, s: Slot) -> None:
        with self.cond:
            s.busy -= 1
            self.cond.notify_all()

    def lose(self, s: Slot, generation: int, reason: str) -> None:
        """The actor of slot ``s`` (as of ``generation``) is gone or hung: kill it and start a
        replacement in the background."""
        with self.cond:
            if s.generation != generation or s.actor is None:
                return  # already replaced
            actor, s.actor = s.actor, None
            s.generation += 1
            self.replacing += 1
        log(f"actor {s.index} on node {s.where.get('node', '?')[:12]} lost: {reason}; replacing it")
        try:
            self.ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - it may be gone already
            pass
        threading.Thread(target=self.replace, args=(s,), daemon=True).start()

    def replace(self, s: Slot) -> None:
        try:
            if self.stopping:
                raise RuntimeError("the executor is stopping")
            actor = self.new_actor()
            ref = actor.info.remote()
            if not self.wait_placed([ref], replacing=True)[0]:
                self.ray.kill(actor, no_restart=True)
                raise RuntimeError("not placed: no node has a free CPU for it")
            info = self.ray.get(ref)
            with self.cond:
                s.actor = actor
            self.place(s, info)
        except Exception as e:  # noqa: BLE001 - the slot is retired
            why = error_text(e)
            log(f"actor {s.index} cannot be replaced ({why}); playing on the others")
            with self.cond:
                self.retired.append(why)
        finally:
            with self.cond:
                self.replacing -= 1
                self.cond.notify_all()

    # ---- requests

    def episode(self, req: Dict[str, Any]) -> None:
        try:
            self._episode(req)
        except Exception as e:  # noqa: BLE001 - never leave ppol waiting for an answer
            self.fail(req, f"internal error of the Ray executor: {error_text(e)}", [])

    def _episode(self, req: Dict[str, Any]) -> None:
        rid = req.get("request_id")
        retries = int(self.spec["retries"])
        attempts: List[Dict[str, Any]] = []
        while True:
            s = self.acquire()
            if s is None:
                why = "no Ray actor is left" + (f" (the last could not be replaced: "
                                                f"{self.retired[-1]})" if self.retired else "")
                return self.fail(req, why, attempts)
            generation, where = s.generation, dict(s.where, actor=s.index)
            try:
                try:
                    answer = self.ray.get(s.actor.play.remote(req), timeout=self.timeout)
                except self.ray.exceptions.GetTimeoutError:
                    self.lose(s, generation, f"episode {req.get('id')} hung")
                    return self.fail(req, f"no answer within {self.timeout:g} s ([world] "
                                     "episode_timeout_s): its actor was killed and is replaced",
                                     attempts)
                except Exception as e:  # noqa: BLE001 - the actor, worker or node died
                    answer = {_LOST: error_text(e)}
            finally:
                self.release(s)
            if _BROKEN in answer:
                self.lose(s, generation, answer[_BROKEN])
                return self.fail(req, answer[_BROKEN], attempts)
            if _LOST in answer:
                self.lose(s, generation, answer[_LOST])
                attempts.append(dict(where, reason=answer[_LOST]))
                if len(attempts) > retries:
                    return self.fail(req, f"lost {len(attempts)} time(s), more than [world.ray] "
                                     f"retries = {retries}", attempts)
                continue
            meta = answer.get("meta") if isinstance(answer.get("meta"), dict) else {}
            if answer.get("type") == "dialogue":
                answer["meta"] = dict(meta, ray=dict(where, retries=attempts))
            elif answer.get("type") == "error" and attempts:
                answer["message"] = f"{answer.get('message', '')} (after {describe(attempts)})"
            if rid is not None:
                answer["request_id"] = rid
            self.write(answer)
            return

    def fail(self, req: Dict[str, Any], why: str, attempts: List[Dict[str, Any]]) -> None:
        message = f"Ray executor: {why}" + (f"; {describe(attempts)}" if attempts else "")
        self.write({"type": "error", "id": req.get("id"), "request_id": req.get("request_id"),
                    "message": message})

    def list_tasks(self) -> None:
        s = self.acquire()
        if s is None:
            log("list_tasks: no Ray actor is left to list the tasks")
            self.write({"type": "tasks", "tasks": None, "error": "no Ray actor is left"})
            return
        try:
            answer = self.ray.get(s.actor.list_tasks.remote(), timeout=self.timeout)
        except Exception as e:  # noqa: BLE001
            answer = {_LOST: error_text(e)}
        finally:
            self.release(s)
        why = answer.get(_LOST) or answer.get(_BROKEN) or (
            answer.get("message") if answer.get("type") != "tasks" else None)
        if why:
            # the protocol has no error answer to list_tasks: say why on stderr, answer no list
            log(f"list_tasks: {why}")
            answer = {"type": "tasks", "tasks": None, "error": why}
        self.write(answer)

    def stop(self) -> None:
        self.stopping = True
        actors = [s.actor for s in self.slots if s.actor is not None]
        try:
            self.ray.wait([a.stop.remote() for a in actors], num_returns=len(actors),
                          timeout=STOP_GRACE_S + 1)
        except Exception:  # noqa: BLE001 - best effort; Ray kills them with the job anyway
            pass
        for a in actors:
            try:
                self.ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001
                pass


def describe(attempts: List[Dict[str, Any]]) -> str:
    return "earlier attempts: " + "; ".join(
        f"actor {a.get('actor')} on node {str(a.get('node', '?'))[:12]}: {a['reason']}"
        for a in attempts)


def error_text(e: BaseException) -> str:
    """A Ray exception in one line (its first lines name the actor and the cause)."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:600]}"


def log(msg: str) -> None:
    print(f"ppol ray executor: {msg}", file=sys.stderr, flush=True)


def resolve_address(address: str) -> str:
    """``auto`` as Ray reads it ($RAY_ADDRESS, else the cluster ``ray start`` started on this
    machine); other forms as given."""
    if address != "auto":
        return address
    env = os.environ.get("RAY_ADDRESS")
    if env:
        return env
    for base in (os.environ.get("RAY_TMPDIR"), tempfile.gettempdir(), "/tmp"):
        path = os.path.join(base or "/tmp", "ray", "ray_current_cluster")
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text:
            return text
    raise StartError("world.ray.address", "address = \"auto\" found no Ray cluster on this machine "
                     "(no $RAY_ADDRESS, no cluster started with `ray start --head`): start one, "
                     "or give [world.ray] address = \"HOST:PORT\" of its head")


def check_reachable(address: str, resolved: str, timeout: float) -> None:
    """Fail fast when the head's port does not accept connections (ray.init would retry for
    minutes)."""
    hostport = resolved.split("://", 1)[-1].split("/", 1)[0]
    if ":" not in hostport:
        return
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout, 5.0)):
            pass
    except (OSError, ValueError) as e:
        raise StartError("world.ray.address", f"cannot reach the Ray cluster at {address!r} "
                         f"({resolved}): {e}. Is its head running (`ray start --head`)? "
                         "[world.ray] address is the head's HOST:PORT (GCS, 6379 by default), "
                         "ray://HOST:10001 (Ray Client) or auto")


def watch_parent(ppid: int) -> None:
    def loop() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != ppid:
                os._exit(1)

    threading.Thread(target=loop, name="ppol-parent-watch", daemon=True).start()


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", required=True, help="JSON file written by ppol")
    ap.add_argument("--remove-spec", action="store_true",
                    help="remove the spec file (and its directory, when empty) once read")
    a = ap.parse_args(argv)
    with open(a.spec, encoding="utf-8") as f:
        spec = json.load(f)
    if a.remove_spec:
        # nothing of ppol's is left on disk, however ppol or this bridge end
        with contextlib.suppress(OSError):
            os.remove(a.spec)
            os.rmdir(os.path.dirname(os.path.abspath(a.spec)))
    # Stdout carries protocol lines only: Ray (and whatever it forwards) prints to stderr.
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out_lock = threading.Lock()

    def write(msg: Dict[str, Any]) -> None:
        with out_lock:
            proto.write(json.dumps(msg) + "\n")
            proto.flush()

    watch_parent(os.getppid())
    bridge = Bridge(spec, write)
    started = False
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except ValueError:
            log(f"a line from ppol that is not JSON: {line[:200]!r}")
            continue
        kind = req.get("type")
        if kind == "hello":
            try:
                bridge.connect()
                bridge.start_actors()
            except StartError as e:
                write({"type": "hello", "protocol": PROTOCOL, "error": str(e)})
                return 2
            started = True
            write(bridge.hello_answer())
        elif kind == "episode" and started:
            threading.Thread(target=bridge.episode, args=(req,), daemon=True).start()
        elif kind == "list_tasks" and started:
            threading.Thread(target=bridge.list_tasks, daemon=True).start()
        elif kind == "shutdown":
            break
        else:
            write({"type": "error", "request_id": req.get("request_id"), "id": req.get("id"),
                   "message": f"unexpected request {kind!r}"})
    if started:
        bridge.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
