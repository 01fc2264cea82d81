"""External user simulators: persona policies in, dialogues out, JSONL over stdio.

Any program, in any language, can be a ppol user simulator: ppol (the *driver*) starts it,
writes one JSON request per line to its stdin and reads one JSON response per line from its
stdout. The protocol is documented in ``EXTERNAL_PROTOCOL.md`` next to this file. This module
has both sides:

* :func:`run_external` — the driver: sends every (task, persona) episode, validates the answers
  and writes a JSONL trace file that ``ppol score`` / :func:`ppol_rs.score` read;
* :func:`serve` — a helper for simulator authors writing in Python: reads requests, calls a
  handler, writes responses.

>>> import io, json
>>> from ppol_rs.external import serve
>>> requests = io.StringIO(json.dumps({"type": "episode", "id": "t:p:0", "task_id": "t",
...     "task_context": "return a lamp", "persona": {"persona_id": "p", "text": "terse"},
...     "persona_block": "...", "seed": 0}) + "\\n" + '{"type": "shutdown"}\\n')
>>> out = io.StringIO()
>>> serve(lambda req: [{"role": "user", "content": "lamp broken"}], stdin=requests, stdout=out)
1
>>> json.loads(out.getvalue())["conversation"][0]["content"]
'lamp broken'
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from typing import IO, Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

from ppol_rs.persona import persona_block

__all__ = [
    "PROTOCOL_VERSION",
    "ExternalSimulatorError",
    "load_personas",
    "normalize_conversation",
    "run_external",
    "serve",
]

PROTOCOL_VERSION = 1
"""Version of the JSONL-over-stdio protocol (sent as ``protocol`` in every request)."""

ROLES = ("user", "assistant", "tool", "system")

PathLike = Union[str, "os.PathLike[str]"]


class ExternalSimulatorError(RuntimeError):
    """The external simulator misbehaved: bad JSON, wrong shape, an error response, a timeout,
    or it exited early. The message names the request id and, for bad output, the stdout line.

    >>> str(ExternalSimulatorError("stdout line 3: not JSON"))
    'stdout line 3: not JSON'
    """


def load_personas(path: PathLike) -> List[Dict[str, Any]]:
    """Read a persona file written by ``ppol generate`` (JSONL: ``task_id``, ``persona_id``,
    ``description``, ``axis_placement``, ``text``). Blank lines are skipped; a bad line raises
    ``ValueError`` naming the file and line.

    >>> import json, os, tempfile
    >>> fd, p = tempfile.mkstemp(suffix=".jsonl")
    >>> with os.fdopen(fd, "w") as f:
    ...     _ = f.write(json.dumps({"task_id": "t1", "persona_id": "p1", "text": "Be terse."}) + "\\n")
    >>> [r["persona_id"] for r in load_personas(p)]
    ['p1']
    >>> os.remove(p)
    """
    out: List[Dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: line {n}: not JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{path}: line {n}: a persona record must be a JSON object")
            for key in ("persona_id", "text"):
                if not isinstance(rec.get(key), str):
                    raise ValueError(f"{path}: line {n}: `{key}` must be a string")
            rec.setdefault("task_id", None)
            rec.setdefault("description", "")
            rec.setdefault("axis_placement", {})
            out.append(rec)
    return out


def normalize_conversation(conversation: Any, where: str = "conversation") -> List[Dict[str, Any]]:
    """Check a conversation and bring it to the shape ppol's trace loader reads.

    Each turn needs a ``role`` in user/assistant/tool/system; ``content`` becomes a string
    (``None`` → ``""``); ``tool_calls`` and ``tool_call_id`` are kept when present. Anything
    else raises ``ValueError`` naming ``where`` and the turn.

    >>> normalize_conversation([{"role": "assistant", "content": None, "x": 1}])
    [{'role': 'assistant', 'content': ''}]
    >>> normalize_conversation([{"role": "robot", "content": "hi"}])
    Traceback (most recent call last):
    ...
    ValueError: conversation[0]: role 'robot' is not one of user, assistant, tool, system
    """
    if not isinstance(conversation, list):
        raise ValueError(f"{where}: must be a list of turns, got {type(conversation).__name__}")
    turns = []
    for i, t in enumerate(conversation):
        if not isinstance(t, dict):
            raise ValueError(f"{where}[{i}]: a turn must be an object")
        role = t.get("role")
        if role not in ROLES:
            raise ValueError(f"{where}[{i}]: role {role!r} is not one of {', '.join(ROLES)}")
        content = t.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise ValueError(f"{where}[{i}]: content must be a string or null")
        turn: Dict[str, Any] = {"role": role, "content": content}
        if t.get("tool_calls"):
            turn["tool_calls"] = t["tool_calls"]
        if t.get("tool_call_id") is not None:
            turn["tool_call_id"] = t["tool_call_id"]
        turns.append(turn)
    return turns


class _Child:
    """The external process, with a reader thread so reads can time out."""

    def __init__(self, command: Sequence[str], env: Optional[Dict[str, str]], cwd: Optional[PathLike]):
        try:
            self.proc = subprocess.Popen(
                list(command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,  # passes through
                text=True,
                encoding="utf-8",
                bufsize=1,
                env=env,
                cwd=cwd,
            )
        except OSError as e:
            raise ExternalSimulatorError(f"cannot start external simulator {list(command)!r}: {e}") from None
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self.line_no = 0
        self.reader = threading.Thread(target=self._read, name="ppol-external-reader", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                self.lines.put(line)
        except (OSError, ValueError):
            pass
        finally:
            self.lines.put(None)

    def send(self, msg: Dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(msg, ensure_ascii=False) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise ExternalSimulatorError(
                f"external simulator closed its stdin (exit code {self.proc.poll()}) "
                f"before request {msg.get('id')!r}"
            ) from None

    def recv(self, deadline: float, request_id: str) -> Optional[str]:
        """The next non-blank stdout line, ``None`` at end of output; raises on timeout."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise queue.Empty
            line = self.lines.get(timeout=left)
            if line is None:
                self.lines.put(None)  # stay at EOF
                return None
            self.line_no += 1
            if line.strip():
                return line

    def close(self, grace: float) -> Optional[int]:
        """Send shutdown, close stdin, wait ``grace`` seconds, then kill."""
        if self.proc.poll() is None:
            try:
                self.send({"type": "shutdown"})
            except ExternalSimulatorError:
                pass
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


def _pairs(
    personas: List[Dict[str, Any]], tasks: List[Dict[str, Any]], match_task_ids: bool
) -> List[tuple]:
    if match_task_ids:
        by_id = {t["task_id"]: t for t in tasks}
        return [(by_id[p["task_id"]], p) for p in personas if p.get("task_id") in by_id]
    return [(t, p) for t in tasks for p in personas]


def run_external(
    command: Sequence[str],
    personas_path: PathLike,
    tasks: Iterable[Dict[str, Any]],
    out_path: PathLike,
    *,
    timeout: float = 120.0,
    trials: int = 1,
    seed: int = 0,
    match_task_ids: bool = False,
    on_error: str = "raise",
    domain: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
    cwd: Optional[PathLike] = None,
    shutdown_grace: float = 5.0,
) -> List[Dict[str, Any]]:
    """Drive an external user simulator over the JSONL-over-stdio protocol and write its
    dialogues as JSONL traces for ``ppol score``.

    ``command`` is started once; for every task × persona (× ``trials``) it receives an
    ``episode`` request (``task_context`` = the task's ``context``, the persona record and its
    ready-to-inject ``persona_block``) and must answer with one ``dialogue`` (or ``error``)
    line within ``timeout`` seconds. With ``match_task_ids=True`` a persona only runs on the
    task whose ``task_id`` it carries (as ``ppol generate`` writes them); by default every
    persona runs on every task. Episodes are written to ``out_path`` in request order, one
    line ``{"id": "<task>:<persona>:<trial>", "task_id", "domain", "conversation",
    "persona_id", "persona", "axis_placement", "reward"?, "meta"?, "simulator"}``.

    Errors (:class:`ExternalSimulatorError`): malformed output (names the stdout line), a
    response for another id, an ``error`` response (``on_error="skip"`` logs it on stderr and
    goes on), a timeout (the process is killed), or the program exiting early. The process
    always gets a ``shutdown`` line and is killed after ``shutdown_grace`` seconds if needed.

    >>> import json, os, sys, tempfile
    >>> d = tempfile.mkdtemp()
    >>> personas = os.path.join(d, "personas.jsonl")
    >>> with open(personas, "w") as f:
    ...     _ = f.write(json.dumps({"task_id": "t1", "persona_id": "terse", "text": "Be terse.",
    ...                             "axis_placement": {"terse": True}}) + "\\n")
    >>> sim = ("from ppol_rs.external import serve; serve(lambda r: "
    ...        "[{'role': 'user', 'content': 'hi: ' + r['task_context']}])")
    >>> eps = run_external([sys.executable, "-c", sim], personas,
    ...                    [{"task_id": "t1", "context": "return a lamp"}],
    ...                    os.path.join(d, "out.jsonl"), timeout=60)
    >>> eps[0]["id"], eps[0]["conversation"][0]["content"]
    ('t1:terse:0', 'hi: return a lamp')
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    personas = load_personas(personas_path)
    task_list = []
    for i, t in enumerate(tasks):
        if not isinstance(t, dict) or "task_id" not in t:
            raise ValueError(f"tasks[{i}]: expected {{'task_id': ..., 'context': ...}}")
        task_list.append(t)
    pairs = _pairs(personas, task_list, match_task_ids)
    episodes: List[Dict[str, Any]] = []
    child = _Child(command, env, cwd)
    name = os.path.basename(str(command[0])) if command else "?"
    try:
        n = 0
        for task, persona in pairs:
            for trial in range(trials):
                rid = f"{task['task_id']}:{persona['persona_id']}:{trial}"
                request = {
                    "type": "episode",
                    "protocol": PROTOCOL_VERSION,
                    "id": rid,
                    "task_id": task["task_id"],
                    "task_context": task.get("context", ""),
                    "persona": persona,
                    "persona_block": persona_block(persona["text"]) if persona["text"].strip() else "",
                    "seed": seed + n,
                    "trial": trial,
                }
                n += 1
                child.send(request)
                ep = _receive(child, rid, timeout, on_error)
                if ep is None:
                    continue
                record = {
                    "id": rid,
                    "task_id": task["task_id"],
                    "domain": task.get("domain", domain),
                    "conversation": ep["conversation"],
                    "persona_id": persona["persona_id"],
                    "persona": persona["text"],
                    "axis_placement": persona.get("axis_placement", {}),
                    "trial": trial,
                    "simulator": name,
                }
                if ep.get("reward") is not None:
                    record["reward"] = ep["reward"]
                if ep.get("meta") is not None:
                    record["meta"] = ep["meta"]
                episodes.append(record)
    finally:
        child.close(shutdown_grace)
    _write_jsonl(out_path, episodes)
    return episodes


def _receive(child: _Child, rid: str, timeout: float, on_error: str) -> Optional[Dict[str, Any]]:
    try:
        line = child.recv(time.monotonic() + timeout, rid)
    except queue.Empty:
        child.proc.kill()
        raise ExternalSimulatorError(
            f"request {rid!r}: no response within {timeout:g} s (external simulator killed)"
        ) from None
    where = f"stdout line {child.line_no}"
    if line is None:
        code = child.proc.wait()
        raise ExternalSimulatorError(
            f"request {rid!r}: external simulator ended its output (exit code {code}) without answering"
        )
    shown = line.strip()
    shown = shown if len(shown) <= 200 else shown[:200] + "..."
    try:
        msg = json.loads(line)
    except json.JSONDecodeError as e:
        raise ExternalSimulatorError(f"request {rid!r}: {where} is not JSON ({e.msg}): {shown}") from None
    if not isinstance(msg, dict):
        raise ExternalSimulatorError(f"request {rid!r}: {where} is not a JSON object: {shown}")
    kind = msg.get("type")
    if msg.get("id") != rid:
        raise ExternalSimulatorError(
            f"request {rid!r}: {where} answers id {msg.get('id')!r} (responses must come in request order)"
        )
    if kind == "error":
        text = f"request {rid!r}: external simulator reported an error: {msg.get('message', '')}"
        if on_error == "skip":
            print(f"ppol external: {text} (skipped)", file=sys.stderr)
            return None
        raise ExternalSimulatorError(text)
    if kind != "dialogue":
        raise ExternalSimulatorError(
            f"request {rid!r}: {where} has type {kind!r}, expected 'dialogue' or 'error'"
        )
    try:
        conversation = normalize_conversation(msg.get("conversation"), f"{where}: conversation")
    except ValueError as e:
        raise ExternalSimulatorError(f"request {rid!r}: {e}") from None
    reward = msg.get("reward")
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
        raise ExternalSimulatorError(f"request {rid!r}: {where}: reward must be a number or null")
    meta = msg.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise ExternalSimulatorError(f"request {rid!r}: {where}: meta must be an object")
    return {"conversation": conversation, "reward": reward, "meta": meta}


def _write_jsonl(path: PathLike, records: List[Dict[str, Any]]) -> None:
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


Handler = Callable[[Dict[str, Any]], Union[List[Dict[str, Any]], Dict[str, Any]]]


def serve(handler: Handler, stdin: Optional[IO[str]] = None, stdout: Optional[IO[str]] = None) -> int:
    """Run a Python user simulator on the protocol: read requests, answer with ``handler``.

    ``handler(request)`` gets the ``episode`` request (a dict with ``id``, ``task_id``,
    ``task_context``, ``persona``, ``persona_block``, ``seed``) and returns either the
    conversation (a list of turns) or a dict ``{"conversation": [...], "reward"?: float,
    "meta"?: {...}}``. An exception becomes an ``error`` response; the loop goes on. Returns the
    number of requests answered when ``shutdown`` arrives or stdin ends. Don't print to stdout
    in the handler (it carries the protocol); use stderr for logs.

    >>> import io
    >>> out = io.StringIO()
    >>> serve(lambda r: 1 / 0, stdin=io.StringIO('{"type": "episode", "id": "a"}\\n'), stdout=out)
    1
    >>> out.getvalue()
    '{"type": "error", "id": "a", "message": "ZeroDivisionError: division by zero"}\\n'
    """
    inp = sys.stdin if stdin is None else stdin
    out = sys.stdout if stdout is None else stdout
    answered = 0

    def write(msg: Dict[str, Any]) -> None:
        out.write(json.dumps(msg, ensure_ascii=False) + "\n")
        out.flush()

    for line in inp:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except json.JSONDecodeError as e:
            write({"type": "error", "id": None, "message": f"request is not JSON: {e.msg}"})
            continue
        kind = req.get("type") if isinstance(req, dict) else None
        if kind == "shutdown":
            break
        rid = req.get("id") if isinstance(req, dict) else None
        if kind != "episode":
            write({"type": "error", "id": rid, "message": f"unknown request type {kind!r}"})
            continue
        answered += 1
        try:
            result = handler(req)
            if isinstance(result, list):
                result = {"conversation": result}
            if not isinstance(result, dict) or "conversation" not in result:
                raise TypeError("handler must return a list of turns or a dict with 'conversation'")
            msg = {"type": "dialogue", "id": rid, "task_id": req.get("task_id")}
            msg["conversation"] = normalize_conversation(result["conversation"])
            for key in ("reward", "meta"):
                if result.get(key) is not None:
                    msg[key] = result[key]
        except Exception as e:  # noqa: BLE001 — reported to the driver
            msg = {"type": "error", "id": rid, "message": f"{type(e).__name__}: {e}"}
        write(msg)
    return answered
