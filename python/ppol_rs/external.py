"""External user simulators: persona policies in, dialogues out, JSONL over stdio.

Any program, in any language, can be a ppol user simulator: ppol starts it, writes one JSON
request per line to its stdin and reads one JSON response per line from its stdout. The
protocol is documented in ``EXTERNAL_PROTOCOL.md`` next to this file. The driver is ppol's
``external:COMMAND`` world (``src/simulate/world/external.rs``), what ``ppol evolve --world
external:...`` and ``ppol episodes`` play through; this module has

* :func:`run_external` — a thin wrapper over ``ppol_rs.episodes(world="external:...")``
  taking tasks as a list of dicts: every (task, persona) episode, written as ppol episode
  records that ``ppol score`` / :func:`ppol_rs.score` read;
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

import contextlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import warnings
from typing import IO, Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Union


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


def _toml(sections: Dict[str, Dict[str, Any]]) -> str:
    """A TOML document of ``{section: {key: value}}`` (strings, numbers, booleans, lists of
    strings; ``None`` leaves the key out). Strings are JSON-escaped, which TOML's basic strings read as is.

    >>> print(_toml({"world": {"processes": 2, "python": "/usr/bin/python3", "x": None}}))
    [world]
    processes = 2
    python = "/usr/bin/python3"
    <BLANKLINE>
    """
    out = []
    for name, keys in sections.items():
        out.append(f"[{name}]")
        for key, v in keys.items():
            if v is None:
                continue
            if isinstance(v, bool):
                text = "true" if v else "false"
            elif isinstance(v, (int, float)):
                text = repr(v)
            elif isinstance(v, list):  # of strings: a JSON array of them is a TOML array
                text = json.dumps([os.fspath(x) for x in v])
            else:
                text = json.dumps(os.fspath(v))
            out.append(f"{key} = {text}")
        out.append("")
    return "\n".join(out)


@contextlib.contextmanager
def _environment(env: Optional[Dict[str, str]]) -> Iterator[None]:
    """With ``env``, this process's environment is exactly ``env`` inside the block (the
    simulator processes ppol starts inherit it) and restored after it."""
    if env is None:
        yield
        return
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str) or not k or "=" in k:
            raise ValueError(f"env: {k!r}={v!r}: names and values must be strings (names without '=')")
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _task_file(tasks: Iterable[Dict[str, Any]], path: str) -> Dict[str, Any]:
    """Write ``tasks`` as a ppol task file at ``path``; returns each task's own ``domain``."""
    domains: Dict[str, Any] = {}
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(tasks):
            if not isinstance(t, dict) or "task_id" not in t:
                raise ValueError(f"tasks[{i}]: expected {{'task_id': ..., 'context': ...}}")
            tid = str(t["task_id"])
            if tid in domains:
                raise ValueError(f"tasks[{i}]: task_id {tid!r} is given twice")
            context = t.get("context", "")
            if not isinstance(context, str):
                raise ValueError(f"tasks[{i}]: context must be a string")
            domains[tid] = t.get("domain")
            f.write(json.dumps({"task_id": tid, "context": context}, ensure_ascii=False) + "\n")
    if not domains:
        raise ValueError("tasks: no tasks given")
    return domains


def _ppol_personas(personas: List[Dict[str, Any]], keep_task_ids: bool) -> List[Dict[str, Any]]:
    """Persona records (:func:`load_personas`) as ``ppol_rs.episodes(personas=...)`` takes
    them: ``task_id`` as a string, or dropped (the persona then plays every task) unless
    ``keep_task_ids``.

    >>> _ppol_personas([{"task_id": 7, "persona_id": "p", "text": "t"}], True)[0]["task_id"]
    '7'
    >>> "task_id" in _ppol_personas([{"task_id": 7, "persona_id": "p", "text": "t"}], False)[0]
    False
    """
    out = []
    for p in personas:
        q = dict(p)
        tid = q.pop("task_id", None)
        if keep_task_ids and tid is not None:
            q["task_id"] = str(tid)
        out.append(q)
    return out


def _write_config(path: str, sections: Dict[str, Dict[str, Any]]) -> str:
    """Write a run configuration of ``sections`` (:func:`_toml`) to ``path``; returns it."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(_toml(sections))
    return path


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
    shutdown_grace: Optional[float] = None,
    processes: int = 1,
    protocol: int = 1,
) -> List[Dict[str, Any]]:
    """Play every (task, persona, trial) episode on an external user simulator and write them
    as ppol episode records for ``ppol score``: ``ppol_rs.episodes(world="external:COMMAND",
    ...)`` with a task file made from ``tasks``.

    ppol's ``external:`` world is the driver (``EXTERNAL_PROTOCOL.md``): it starts ``command``
    (``processes`` copies of it at once, protocol version ``protocol``), sends each episode
    request (``task_context`` = the task's ``context``, the persona record and its
    ready-to-inject ``persona_block``, the episode's ``seed``), checks the answers, and kills
    and restarts a process that breaks the protocol, exits, or leaves an episode unanswered for
    ``timeout`` seconds (``[world] episode_timeout_s``): that episode is recorded as failed
    with the reason. With ``match_task_ids=True`` a persona only plays the task whose
    ``task_id`` it carries (as ``ppol generate`` writes them); by default every persona plays
    every task.

    The seed of an episode is ppol's: derived from ``seed`` and the episode itself (task,
    persona id, trial), as ``ppol episodes`` derives it, so an episode gets the same seed
    whatever else is played beside it and however many processes play them.

    ``out_path`` gets every episode in plan order once all are played — the records ``ppol
    episodes`` writes (``id`` ``<task>:<persona>:<trial>``, ``task_id``, ``domain``,
    ``conversation``, ``persona_id``, ``persona``, ``axis_placement``, ``trial``, ``seed``,
    ``termination``, ``reward``, ``status``, ``error``, ``backend`` = ``external:COMMAND``,
    ``meta`` = the simulator's) — failed episodes included, with ``status: "failed"`` and their
    reason in ``error``. While they are played they are appended to ``out_path + ".partial"``,
    so after an interruption (Ctrl-C: KeyboardInterrupt) the same call plays only what is
    missing. ``domain`` (or a task's own ``"domain"``) is the domain recorded in its episodes;
    without it, the world's (``external``, or a version-2 simulator's ``hello``).

    Returns the episodes that did not fail. A failed episode raises
    :class:`ExternalSimulatorError` naming the first failure's reason, after the output is
    written (``on_error="raise"``), or is printed with its reason on stderr and left out of the
    result (``"skip"``). ``env`` is the simulators' whole environment (this process's
    environment is set to it for the call and restored after, so other threads see it then);
    ``cwd`` their working directory (through ``env -C``). ``shutdown_grace`` is kept for old
    callers and has no effect: ppol gives a simulator 5 s after ``shutdown``.

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
    >>> eps[0]["id"], eps[0]["status"], eps[0]["conversation"][0]["content"]
    ('t1:terse:0', 'ok', 'hi: return a lamp')
    """
    import ppol_rs

    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if isinstance(command, (str, bytes)) or not command:
        raise ValueError("command must be a non-empty list: the program and its arguments")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if protocol not in (1, 2):
        raise ValueError(f"protocol must be 1 or 2, got {protocol!r}")
    if shutdown_grace is not None:
        warnings.warn("run_external(shutdown_grace=...) has no effect: ppol's external world gives "
                      "a simulator 5 s after shutdown", DeprecationWarning, stacklevel=2)
    argv = [os.fspath(a) for a in command]
    if cwd is not None:
        env_program = shutil.which("env")
        if env_program is None:
            raise ValueError("cwd= runs the simulator through `env -C DIR`, and no `env` is on the PATH")
        argv = [env_program, "-C", os.fspath(cwd), *argv]
    personas = _ppol_personas(load_personas(personas_path), match_task_ids)
    out = os.fspath(out_path)
    with tempfile.TemporaryDirectory(prefix="ppol-external-") as tmp:
        task_file = os.path.join(tmp, "tasks.jsonl")
        domains = _task_file(tasks, task_file)
        config = _write_config(os.path.join(tmp, "run.toml"), {"world": {
            "processes": processes, "protocol": protocol, "episode_timeout_s": float(timeout)}})
        with _environment(env):
            records = ppol_rs.episodes(
                world="external:" + shlex.join(argv), task_file=task_file, personas=personas,
                trials=trials, seed=seed, output=out, config=config,
                # at most one episode per version-1 process; a version-2 pool bounds its own
                concurrency=processes if protocol == 1 else 256,
            )
    if domain is not None or any(d is not None for d in domains.values()):
        for r in records:
            r["domain"] = domains.get(r["task_id"]) or domain or r["domain"]
        if os.path.isfile(out):
            _write_jsonl(out, records)
    failed = [r for r in records if r["status"] == "failed"]
    if failed and on_error == "raise":
        more = f" ({len(failed) - 1} more failed)" if len(failed) > 1 else ""
        raise ExternalSimulatorError(
            f"episode {failed[0]['id']} failed: {failed[0].get('error')}{more}; every episode, "
            f"the failed ones with their reason, is in {out}")
    for r in failed:
        print(f"ppol external: episode {r['id']} failed, skipped: {r.get('error')}", file=sys.stderr)
    return [r for r in records if r["status"] != "failed"]


def _write_jsonl(path: str, records: List[Dict[str, Any]]) -> None:
    tmp = f"{path}.tmp"
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
