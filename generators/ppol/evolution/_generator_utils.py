"""Sandbox shim of ``ppol.evolution._generator_utils`` (ppol 0.1.1 helper names).

Programs written for the reference import helpers from here; in the sandbox they run on top of
``ppol_llm`` (the host's LLM proxy). Signatures accept extra keyword arguments and ignore them
(model names, clients), since the host decides the model.

The code shared with the seeds (JSON repair, profiles, padding, fallback instructions) lives in
``ppol_personas``, the sandbox's helper module; its names are re-exported here. This module keeps
the reference's prompts (a bare JSON array, no schema) and its two entry points.

Unlike the reference, the helpers survive a weak model: answers are parsed with JSON repair
(``json_values``, ``persona_rows``), a population answer with fewer than N usable profiles is
asked for once more and then padded from the usable ones (each pad on an axis combination not
yet used), and an expansion that fails or comes back empty is retried once on its own and then
replaced by an instruction composed from the profile and its traits. Every such step is
reported on stderr (kept with the run), and a failure carries the first 2 KB of each raw reply.
"""

import ppol_llm
from ppol import llm  # noqa: F401  (re-exported: ``_generator_utils.llm.completion_text``)
from ppol_personas import (  # noqa: F401  (re-exported: the helper names of this module)
    RAW_EXCERPT_CHARS,
    active_traits,
    ask_population,
    axis_lines,
    clean_instruction,
    expansion_prompt,
    fallback_instruction,
    json_values,
    note,
    pad_population,
    parse_population,
    persona_rows,
    raw_excerpt,
    raw_replies_text,
    unique_ids,
)

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


def parse_personas_response(text, axes, n):
    """Tolerant parser of a population answer (see ``parse_population``)."""
    return parse_population(text, axes, n)


def format_axes(axes):
    """The axes as prompt lines."""
    return axis_lines(axes)


def active_traits_text(axes, placement):
    """The active traits (definition + playbook) in axis order, or the neutral baseline."""
    return active_traits(axes, placement, NEUTRAL_TRAITS)


RETRY_NOTE = "\n\nYour previous answer could not be used ({why}). Answer again with only the JSON array of {n} objects, nothing else."
MIN_INSTRUCTION_WORDS = 3


def generate_population(task_context, axes, n, temperature=POPULATION_TEMPERATURE,
                        max_tokens=POPULATION_MAX_TOKENS, **_ignored):
    """Stage 1: ``n`` profiles (``persona_id``, ``description``, ``axis_placement``,
    ``reasoning``). One LLM call; if it yields fewer than ``n`` usable profiles, one more
    (the prompt says what went wrong), then padding from the usable ones. No usable profile
    after both: ``ValueError`` with the first 2 KB of each raw reply."""
    prompt = POPULATION_PROMPT.format(
        task=task_context,
        n=n,
        axes=axis_lines(axes),
        axis_names=", ".join(a["behavior"] for a in axes) or "(no axes: use an empty object)",
    )

    def ask(text, temp):
        raw = ppol_llm.complete(text, system=POPULATION_SYSTEM, temperature=temp, max_tokens=max_tokens)
        return raw, parse_population(raw, axes, n)

    profiles, raws = ask_population(ask, prompt, RETRY_NOTE, n, temperature)
    if not profiles:
        note(raw_replies_text(raws))
        raise ValueError(
            "the population answer contained no persona objects (%d attempts)\n%s"
            % (len(raws), raw_replies_text(raws))
        )
    profiles, padded = pad_population(unique_ids(profiles), axes, n)
    if padded:
        note("stage 1 gave %d of %d usable profiles after %d attempt(s); padded %d from them. %s"
             % (n - padded, n, len(raws), padded, raw_replies_text(raws)))
    return profiles


def _expansion_request(task_context, persona, axes, temperature, max_tokens, retry=False):
    prompt = expansion_prompt(EXPANSION_PROMPT, task_context, persona, axes, NEUTRAL_TRAITS, retry)
    return {"prompt": prompt, "system": EXPANSION_SYSTEM,
            "temperature": min(1.0, temperature + (0.2 if retry else 0.0)), "max_tokens": max_tokens}


def expand_persona(task_context, persona, axes, temperature=EXPANSION_TEMPERATURE,
                   max_tokens=EXPANSION_MAX_TOKENS, **_ignored):
    """Stage 2 for one profile: its roleplay instruction."""
    return expand_personas_parallel(task_context, [persona], axes, temperature, max_tokens)[0]["expanded_instruction"]


def expand_personas_parallel(task_context, personas, axes, temperature=EXPANSION_TEMPERATURE,
                             max_tokens=EXPANSION_MAX_TOKENS, max_workers=None, **_ignored):
    """Stage 2: one LLM call per profile, all sent at once; returns the profiles with
    ``expanded_instruction`` filled in (``max_workers`` is ignored: the host sets parallelism).
    A failed or empty expansion is retried once on its own, then composed without the model
    (``fallback_instruction``); one bad expansion never sinks the set."""
    personas = [dict(p) for p in personas]
    requests = [_expansion_request(task_context, p, axes, temperature, max_tokens) for p in personas]
    answers = ppol_llm.complete_many(requests, return_errors=True)
    texts = [clean_instruction(a, MIN_INSTRUCTION_WORDS) for a in answers]
    bad = [i for i, t in enumerate(texts) if t is None]
    if bad:
        again = ppol_llm.complete_many(
            [_expansion_request(task_context, personas[i], axes, temperature, max_tokens, retry=True) for i in bad],
            return_errors=True,
        )
        for i, a in zip(bad, again):
            texts[i] = clean_instruction(a, MIN_INSTRUCTION_WORDS)
            if texts[i] is None:
                first = answers[i] if isinstance(answers[i], str) else "(no reply: %s)" % answers[i]
                note("expansion of %s failed twice; composed its instruction from the profile. %s"
                     % (personas[i]["persona_id"], raw_replies_text([first])))
                texts[i] = fallback_instruction(personas[i], axes)
    for p, text in zip(personas, texts):
        p["expanded_instruction"] = text
    return personas
