"""Seed generator: two-stage LLM persona generation over four behaviour axes.

Stage 1 asks the model once for a whole population (N profiles with an on/off placement on
every axis). Stage 2 expands every profile into a roleplay instruction, one request per
persona, sent together through ``ppol_llm.complete_many`` (the host runs them in parallel).
Only the standard library and ``ppol_llm`` are used.
"""

import json
import re

import ppol_llm

DIVERSITY_AXES = [
    {
        "behavior": "terse",
        "definition": "How much the user writes per message and how carefully.",
        "presence": {
            "true": "Writes short, clipped messages with little punctuation, skips pleasantries and leaves small grammar or spelling slips uncorrected.",
            "false": "Writes long, winding messages with extra detail, generous punctuation, exclamation marks or emoji, and full sentences.",
        },
    },
    {
        "behavior": "skeptical",
        "definition": "How readily the user accepts what the agent says.",
        "presence": {
            "true": "Questions the agent's statements, asks how it knows, wants confirmation or evidence before agreeing to anything.",
            "false": "Takes the agent's explanations at face value and follows its guidance without asking for proof.",
        },
    },
    {
        "behavior": "frustrated",
        "definition": "The user's emotional temperature toward the agent and the situation.",
        "presence": {
            "true": "Sounds irritated and blaming, can be curt or rude, repeats demands and pushes the agent to act now.",
            "false": "Stays calm and cooperative; any annoyance is mild and politely phrased.",
        },
    },
    {
        "behavior": "ambiguous",
        "definition": "How completely and directly the user shares information.",
        "presence": {
            "true": "Gives vague or partial answers, leaves out details, trails off, and only clarifies when the agent asks specifically.",
            "false": "Answers precisely and completely, but only what is asked, without volunteering unrelated details.",
        },
    },
]

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


def generate_personas_detailed(task_context, axes, n):
    population_prompt = POPULATION_PROMPT.format(
        task=task_context,
        n=n,
        axes=_axis_lines(axes),
        axis_names=", ".join(a["behavior"] for a in axes) or "(no axes: use an empty object)",
    )
    raw = ppol_llm.complete(
        population_prompt,
        system=POPULATION_SYSTEM,
        temperature=POPULATION_TEMPERATURE,
        max_tokens=POPULATION_MAX_TOKENS,
    )
    personas = parse_population(raw, axes, n)
    if not personas:
        raise ValueError("the population answer contained no persona objects")
    requests = [
        {
            "prompt": EXPANSION_PROMPT.format(
                task=task_context,
                description=p["description"] or p["persona_id"],
                traits=_traits(axes, p["axis_placement"]),
            ),
            "system": EXPANSION_SYSTEM,
            "temperature": EXPANSION_TEMPERATURE,
            "max_tokens": EXPANSION_MAX_TOKENS,
        }
        for p in personas
    ]
    texts = ppol_llm.complete_many(requests)
    for p, text in zip(personas, texts):
        p["expanded_instruction"] = text.strip()
    return personas
