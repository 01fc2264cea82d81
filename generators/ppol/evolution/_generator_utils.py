"""Sandbox shim of ``ppol.evolution._generator_utils`` (ppol 0.1.1 helper names).

Programs written for the reference import helpers from here; in the sandbox they run on top of
``ppol_llm`` (the host's LLM proxy). Signatures accept extra keyword arguments and ignore them
(model names, clients), since the host decides the model.
"""

import json
import re

import ppol_llm
from ppol import llm  # noqa: F401  (re-exported: ``_generator_utils.llm.completion_text``)

LLMError = ppol_llm.LLMError

POPULATION_TEMPERATURE = 0.8
POPULATION_MAX_TOKENS = 8000
EXPANSION_TEMPERATURE = 0.7
EXPANSION_MAX_TOKENS = 800

POPULATION_SYSTEM = "You design realistic, varied customer personas for testing customer-service conversations. You answer with JSON only."

POPULATION_PROMPT = """A customer will contact a support agent about the following task:

<task>
{task}
</task>

Invent exactly {n} different people who could be this customer. Spread them across the behaviour axes below so that the group covers many different combinations, including unusual ones, rather than clustering on the most typical customer.

Behaviour axes (each is either present = true or absent = false):
{axes}

Return a JSON array of exactly {n} objects, each with:
- "persona_id": a short snake_case name, unique in the array
- "description": two or three sentences about who this person is and how they come across
- "axis_placement": an object with a boolean for every axis name: {axis_names}
- "reasoning": one sentence on why this combination is plausible for this task

Output only the JSON array."""

EXPANSION_SYSTEM = "You write roleplay briefs that tell an actor how to play a customer in a text chat. You write in the second person and never mention tests, simulations, benchmarks or AI."

EXPANSION_PROMPT = """The customer's situation (keep every goal, fact and constraint in it exactly as given):

<task>
{task}
</task>

The person you are briefing:
{description}

Behaviour traits that are active for this person:
{traits}

Write a 150-250 word roleplay instruction in the second person ("You ...") for playing this customer. Ground it in the task and the profile. Spell out concrete habits: how long the messages are and how they are typed, how emotions show and change over the conversation, how you react when the agent asks for information, proposes something or refuses. Do not change or drop any goal or fact of the task, do not add new requests, and do not mention that this is a simulation, a test or an AI. Output only the instruction."""

NEUTRAL_TRAITS = "None: play a neutral baseline customer who is polite, clear and cooperative."


def _axis_lines(axes):
    lines = []
    for axis in axes:
        presence = axis.get("presence") or {}
        lines.append(
            "- {name}: {definition}\n  true: {on}\n  false: {off}".format(
                name=axis["behavior"],
                definition=axis.get("definition", ""),
                on=presence.get("true", ""),
                off=presence.get("false", ""),
            )
        )
    return "\n".join(lines) if lines else "(none)"


def _truthy(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return False


def _json_candidates(text):
    """Every top-level JSON value found in ``text`` (code fences and chatter are skipped)."""
    text = re.sub(r"```(?:json)?", " ", text)
    decoder = json.JSONDecoder()
    found = []
    i = 0
    while i < len(text):
        if text[i] in "[{":
            try:
                value, end = decoder.raw_decode(text, i)
            except ValueError:
                i += 1
                continue
            found.append(value)
            i = end
        else:
            i += 1
    return found


def parse_population(text, axes, n):
    """The first JSON array of dicts in ``text``, else all top-level objects; first ``n`` kept,
    with ``axis_placement`` rebuilt to exactly the axis names (missing -> false)."""
    values = _json_candidates(text)
    rows = None
    for v in values:
        if isinstance(v, list) and any(isinstance(x, dict) for x in v):
            rows = [x for x in v if isinstance(x, dict)]
            break
    if rows is None:
        rows = [v for v in values if isinstance(v, dict)]
    names = [a["behavior"] for a in axes]
    out = []
    used = set()
    for row in rows[:n]:
        placement = row.get("axis_placement") or {}
        if not isinstance(placement, dict):
            placement = {}
        pid = re.sub(r"[^a-z0-9]+", "_", str(row.get("persona_id") or "persona").lower()).strip("_") or "persona"
        base, k = pid, 2
        while pid in used:
            pid = "%s_%d" % (base, k)
            k += 1
        used.add(pid)
        out.append(
            {
                "persona_id": pid,
                "description": str(row.get("description") or "").strip(),
                "axis_placement": {name: _truthy(placement.get(name, False)) for name in names},
                "reasoning": str(row.get("reasoning") or "").strip(),
            }
        )
    return out


def _traits(axes, placement):
    lines = []
    for axis in axes:  # axis order, not set order
        if placement.get(axis["behavior"]):
            playbook = (axis.get("presence") or {}).get("true", "")
            lines.append("- %s: %s %s" % (axis["behavior"], axis.get("definition", ""), playbook))
    return "\n".join(lines) if lines else NEUTRAL_TRAITS



def parse_personas_response(text, axes, n):
    """Tolerant parser of a population answer (see ``parse_population``)."""
    return parse_population(text, axes, n)


def format_axes(axes):
    """The axes as prompt lines."""
    return _axis_lines(axes)


def active_traits_text(axes, placement):
    """The active traits (definition + playbook) in axis order, or the neutral baseline."""
    return _traits(axes, placement)


def generate_population(task_context, axes, n, temperature=POPULATION_TEMPERATURE,
                        max_tokens=POPULATION_MAX_TOKENS, **_ignored):
    """Stage 1: one LLM call for ``n`` profiles (``persona_id``, ``description``,
    ``axis_placement``, ``reasoning``)."""
    prompt = POPULATION_PROMPT.format(
        task=task_context,
        n=n,
        axes=_axis_lines(axes),
        axis_names=", ".join(a["behavior"] for a in axes) or "(no axes: use an empty object)",
    )
    raw = ppol_llm.complete(prompt, system=POPULATION_SYSTEM, temperature=temperature, max_tokens=max_tokens)
    return parse_population(raw, axes, n)


def expand_persona(task_context, persona, axes, temperature=EXPANSION_TEMPERATURE,
                   max_tokens=EXPANSION_MAX_TOKENS, **_ignored):
    """Stage 2 for one profile: its roleplay instruction."""
    return expand_personas_parallel(task_context, [persona], axes, temperature, max_tokens)[0]["expanded_instruction"]


def expand_personas_parallel(task_context, personas, axes, temperature=EXPANSION_TEMPERATURE,
                             max_tokens=EXPANSION_MAX_TOKENS, max_workers=None, **_ignored):
    """Stage 2: one LLM call per profile, all sent at once; returns the profiles with
    ``expanded_instruction`` filled in (``max_workers`` is ignored: the host sets parallelism)."""
    personas = [dict(p) for p in personas]
    requests = [
        {
            "prompt": EXPANSION_PROMPT.format(
                task=task_context,
                description=p.get("description") or p.get("persona_id", ""),
                traits=_traits(axes, p.get("axis_placement") or {}),
            ),
            "system": EXPANSION_SYSTEM,
            "temperature": temperature,
            "max_tokens": max_tokens,
        }
        for p in personas
    ]
    for p, text in zip(personas, ppol_llm.complete_many(requests)):
        p["expanded_instruction"] = text.strip()
    return personas
