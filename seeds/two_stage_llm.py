"""Seed generator: two-stage LLM persona generation over four behaviour axes.

Stage 1 asks the model once for a whole population (N profiles with an on/off placement on
every axis). Stage 2 expands every profile into a roleplay instruction, one request per
persona, sent together through ``ppol_llm.complete_many`` (the host runs them in parallel).
It uses ``ppol_llm`` (the host's LLM) and ``ppol_personas`` (the sandbox's helper module: JSON
repair, profiles, fallback instructions); every prompt, axis and threshold is a literal here.

Both stages send a JSON schema with their request (``ppol_llm.complete_json``): stage 1 the
population as ``{"personas": [...]}`` with a boolean per axis, stage 2 ``{"instruction": ...}``.
An endpoint that takes a schema (OpenAI's ``json_schema``, llama-cpp-python's ``json_object``)
constrains the model to it, so even a weak model answers with valid persona JSON; every persona
records where it came from in ``source``: ``model-json`` (both stages' JSON used as is),
``repaired`` (something was read by the JSON repair) or ``fallback`` (composed here).

It survives a weak model all the same: answers are read with JSON repair (fences, chatter, single quotes,
trailing commas, truncated arrays, objects without the array); a stage-1 answer with fewer
than N usable profiles is asked for once more and then padded from the usable ones (each pad
on an axis combination not yet used); a stage-2 expansion that fails or comes back empty is
retried once on its own and then composed from the profile and its traits. Each step is
reported on stderr, and a failure carries the first 2 KB of each raw reply.
"""

import ppol_llm
from ppol_personas import (ask_population, axis_lines, corners, expansion_prompt, fallback_instruction,
                           note, pad_population, personas_object_schema, raw_replies_text,
                           read_instruction, read_population, unique_ids)

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
POPULATION_TOKENS_PER_PERSONA = 250
EXPANSION_TEMPERATURE = 0.7
EXPANSION_MAX_TOKENS = 800
MIN_INSTRUCTION_WORDS = 3
RETRY_NOTE = "\n\nYour previous answer could not be used ({why}). Answer again with only the JSON object whose \"personas\" array holds {n} objects, nothing else."
# No maxLength in the schemas: llama.cpp turns one into as many nested optional grammar rules,
# which made constrained answers crawl; the request's max_tokens bounds the answer.
SCHEMA_MAX_ITEMS = 8  # the population's size is fixed in the schema only up to this many
SOURCES = ("model-json", "repaired", "fallback")  # from best to worst
RAW_EXCERPT_CHARS = 2048  # of each raw reply, in failure messages

POPULATION_SYSTEM = "You design realistic, varied customer personas for testing customer-service conversations. You answer with JSON only."

POPULATION_PROMPT = """A customer will contact a support agent about the following task:

<task>
{task}
</task>

Invent exactly {n} different people who could be this customer. Spread them across the behaviour axes below so that the group covers many different combinations, including unusual ones, rather than clustering on the most typical customer.

Behaviour axes (each is either present = true or absent = false):
{axes}

Return a JSON object {{"personas": [...]}} whose "personas" array holds exactly {n} objects, each with:
- "persona_id": a short snake_case name, unique in the array
- "description": two or three sentences about who this person is and how they come across
- "axis_placement": an object with a boolean for every axis name: {axis_names}
- "reasoning": one sentence on why this combination is plausible for this task

Output only the JSON object."""

EXPANSION_SYSTEM = "You write roleplay briefs that tell an actor how to play a customer in a text chat. You write in the second person and never mention tests, simulations, benchmarks or AI."

EXPANSION_PROMPT = """The customer's situation (keep every goal, fact and constraint in it exactly as given):

<task>
{task}
</task>

The person you are briefing:
{description}

Behaviour traits that are active for this person:
{traits}

Write a 150-250 word roleplay instruction in the second person ("You ...") for playing this customer. Ground it in the task and the profile. Spell out concrete habits: how long the messages are and how they are typed, how emotions show and change over the conversation, how you react when the agent asks for information, proposes something or refuses. Do not change or drop any goal or fact of the task, do not add new requests, and do not mention that this is a simulation, a test or an AI. Answer with a JSON object {{"instruction": "..."}} holding only the instruction."""

EXPANSION_SCHEMA = {
    "type": "object",
    "properties": {"instruction": {"type": "string"}},
    "required": ["instruction"],
    "additionalProperties": False,
}


def population_schema(axes, n):
    """The stage-1 answer's JSON schema: ``{"personas": [profile, ...]}``, a boolean for every
    axis; the array's length is fixed only for small populations (``SCHEMA_MAX_ITEMS``)."""
    names = [a["behavior"] for a in axes]
    profile = {
        "type": "object",
        "properties": {
            "persona_id": {"type": "string"},
            "description": {"type": "string"},
            "axis_placement": {
                "type": "object",
                "properties": {k: {"type": "boolean"} for k in names},
                "required": names,
                "additionalProperties": False,
            },
            "reasoning": {"type": "string"},
        },
        "required": ["persona_id", "description", "axis_placement", "reasoning"],
        "additionalProperties": False,
    }
    return personas_object_schema(profile, n, SCHEMA_MAX_ITEMS)


def worst_source(*sources):
    """The least direct of ``sources`` (model-json < repaired < fallback)."""
    return max(sources, key=lambda s: SOURCES.index(s) if s in SOURCES else len(SOURCES))


NEUTRAL_TRAITS = "None: play a neutral baseline customer who is polite, clear and cooperative."


def _expansion_request(task_context, persona, axes, temperature, max_tokens, retry=False):
    prompt = expansion_prompt(EXPANSION_PROMPT, task_context, persona, axes, NEUTRAL_TRAITS, retry)
    return {"prompt": prompt, "system": EXPANSION_SYSTEM, "schema": EXPANSION_SCHEMA,
            "temperature": min(1.0, temperature + (0.2 if retry else 0.0)), "max_tokens": max_tokens}


def _population(task_context, axes, n):
    """Stage 1 with one retry and padding; with no usable profile at all, profiles placed on
    distinct axis combinations (the raw replies go to stderr)."""
    prompt = POPULATION_PROMPT.format(
        task=task_context,
        n=n,
        axes=axis_lines(axes),
        axis_names=", ".join(a["behavior"] for a in axes) or "(no axes: use an empty object)",
    )
    max_tokens = min(POPULATION_MAX_TOKENS, POPULATION_TOKENS_PER_PERSONA * n + 400)

    def ask(text, temperature):
        answer = ppol_llm.complete_json(text, population_schema(axes, n), system=POPULATION_SYSTEM,
                                        temperature=temperature, max_tokens=max_tokens)
        return answer.text, read_population(answer, axes, n)

    profiles, raws = ask_population(ask, prompt, RETRY_NOTE, n, POPULATION_TEMPERATURE)
    replies = raw_replies_text(raws, RAW_EXCERPT_CHARS)
    if not profiles and all(r.startswith("(no reply: LLMError") for r in raws):
        # the model never answered: an unavailable LLM is not a weak one
        raise ValueError(
            "the population answer contained no persona objects (%d attempts)\n%s" % (len(raws), replies)
        )
    if not profiles:
        # No usable profile at all: place the personas on distinct axis combinations here and
        # let stage 2 write each one's instruction, rather than losing the whole candidate.
        names = [a["behavior"] for a in axes]
        spread = corners(len(names))[1:] or [()] if names else [()]
        profiles = [
            {
                "persona_id": "profile_%d" % (i + 1),
                "description": "",
                "axis_placement": {k: bool(b) for k, b in zip(names, spread[i % len(spread)])},
                "reasoning": "Stage 1 gave no usable profile (%d attempts): placed on the axes "
                             "by the program; stage 2 wrote the instruction." % len(raws),
                "source": "fallback",
            }
            for i in range(n)
        ]
        note("the population answer contained no persona objects (%d attempts); %d profiles "
             "placed on axis combinations instead. %s" % (len(raws), n, replies))
        return profiles
    profiles, padded = pad_population(unique_ids(profiles), axes, n, source="fallback")
    if padded:
        note("stage 1 gave %d of %d usable profiles after %d attempt(s); padded %d from them. %s"
             % (n - padded, n, len(raws), padded, replies))
    return profiles


def generate_personas_detailed(task_context, axes, n):
    personas = _population(task_context, axes, n)
    requests = [
        _expansion_request(task_context, p, axes, EXPANSION_TEMPERATURE, EXPANSION_MAX_TOKENS)
        for p in personas
    ]
    answers = ppol_llm.complete_many_json(requests, return_errors=True)
    read = [read_instruction(a, MIN_INSTRUCTION_WORDS) for a in answers]
    bad = [i for i, (t, _) in enumerate(read) if t is None]
    if bad:
        again = ppol_llm.complete_many_json(
            [_expansion_request(task_context, personas[i], axes, EXPANSION_TEMPERATURE,
                                EXPANSION_MAX_TOKENS, retry=True) for i in bad],
            return_errors=True,
        )
        for i, a in zip(bad, again):
            read[i] = read_instruction(a, MIN_INSTRUCTION_WORDS)
            if read[i][0] is None:
                first = answers[i]
                first = first.text if isinstance(first, tuple) else "(no reply: %s)" % first
                note("expansion of %s failed twice; composed its instruction from the profile. %s"
                     % (personas[i]["persona_id"], raw_replies_text([first], RAW_EXCERPT_CHARS)))
                read[i] = (fallback_instruction(personas[i], axes), "fallback")
    for p, (text, source) in zip(personas, read):
        p["expanded_instruction"] = text
        p["source"] = worst_source(p.get("source", "fallback"), source)
    return personas
