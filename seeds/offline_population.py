"""Seed generator without any LLM: a population of user kinds in proportions.

Each axis is one *kind* of user (a one-hot placement: a persona is of exactly one kind), its
playbook the turn-level mechanics of MECHANICS[kind]["true"], all of them played together. The
kinds' shares come from PLACEMENT_WEIGHTS (relative weights): the N personas of a task are
apportioned to the kinds by largest remainder, so a population of users — a mixture of
behaviours and its proportions — is what evolution edits. Everything it may edit is
module-level literal data: structural mutation adds, drops and rephrases kinds (axes), moves
their weights (perturb, steer-axis), and adds, drops, recombines and tunes their mechanics.
Output is deterministic given (task_context, n, PPOL_SEED).
"""

import os
import random
import re

DIVERSITY_AXES = [
    {
        "behavior": "terse",
        "definition": "A user who writes little: short fragments, lowercase, no pleasantries.",
        "presence": {
            "true": "Short sentences, little punctuation, small grammar slips left in.",
            "false": "Not this kind of user.",
        },
    },
    {
        "behavior": "chatty",
        "definition": "A user who writes a lot: greetings, background, thanks, asides.",
        "presence": {
            "true": "Long sentences, extra detail, lots of punctuation or emoji.",
            "false": "Not this kind of user.",
        },
    },
    {
        "behavior": "skeptical",
        "definition": "A user who doubts what the agent says and asks for proof.",
        "presence": {
            "true": "Challenges claims and asks for verification before agreeing.",
            "false": "Not this kind of user.",
        },
    },
    {
        "behavior": "frustrated",
        "definition": "A user who is irritated, impatient and blames the company.",
        "presence": {
            "true": "Accusatory, impatient, sometimes impolite; repeats demands.",
            "false": "Not this kind of user.",
        },
    },
    {
        "behavior": "ambiguous",
        "definition": "A user who shares information piecemeal and vaguely.",
        "presence": {
            "true": "Vague or partial answers, withholds details, trails off, needs prompting.",
            "false": "Not this kind of user.",
        },
    },
    {
        "behavior": "cooperative",
        "definition": "A user who answers exactly what is asked and follows the agent's lead.",
        "presence": {
            "true": "Direct and complete answers, but only to what is asked.",
            "false": "Not this kind of user.",
        },
    },
]

# Relative share of each kind in the population (a kind absent here weighs 0.5).
PLACEMENT_WEIGHTS = {
    "terse": 0.5,
    "chatty": 0.5,
    "skeptical": 0.5,
    "frustrated": 0.5,
    "ambiguous": 0.5,
    "cooperative": 0.5,
}

# The mechanics each kind plays (all of them); a kind without any plays its playbook.
MECHANICS = {
    "terse": {
        "true": [
            "Type in lowercase, with no greeting and no sign-off.",
            "Keep most messages under twelve words; fragments are fine.",
            "Answer a yes/no question with a single word.",
        ],
    },
    "chatty": {
        "true": [
            "Open with a friendly greeting and a sentence of background before you get to the point.",
            "Write in full, flowing sentences and add small asides about your day.",
            "Thank the agent at length when they help, and explain why it matters to you.",
        ],
    },
    "skeptical": {
        "true": [
            "Push back once when told no, and ask which rule says so.",
            "When the agent quotes a price, date or policy, ask how they know it is correct.",
        ],
    },
    "frustrated": {
        "true": [
            "Start irritated: mention that this is not the first time something has gone wrong.",
            "Use short commands like 'just fix it' or 'do it now' when progress stalls.",
            "Blame the company, not yourself, for the problem, and say so plainly.",
        ],
    },
    "ambiguous": {
        "true": [
            "Do not give your identifying details (order number, reservation code, user id) in your first message; wait to be asked.",
            "Describe the problem loosely at first ('something is wrong with my order') before naming it.",
            "Trail off sometimes ('I think it was... not sure') and let the agent prompt you.",
        ],
    },
    "cooperative": {
        "true": [
            "When asked for information, give exactly the requested details in one message.",
            "Confirm promptly when the agent proposes a reasonable action.",
        ],
    },
}

OPENERS = [
    "You are a customer contacting support about this situation: {task}",
    "You are reaching out to customer service. Your situation: {task}",
    "You need help from a support agent. Here is what you want: {task}",
]

GROUNDING = [
    "Keep every goal, fact and constraint of your situation exactly as given; do not invent new requests.",
    "Your goals and private details stay exactly as described; only your way of talking is shaped below.",
]

CLOSERS = [
    "End the conversation once your goal is met or clearly impossible, in your own style.",
    "When everything is settled, close the chat in a way that fits how you have been talking.",
]

FIRST_NAMES = ["ava", "ben", "chloe", "dev", "elena", "farid", "grace", "hiro", "ines", "jamal",
               "kira", "liam", "maya", "noor", "omar", "priya", "quinn", "rosa", "sam", "tariq"]

OCCUPATIONS = ["nurse on night shifts", "retired teacher", "small-business owner", "graduate student",
               "delivery driver", "software tester", "parent of three", "freelance designer",
               "accountant", "restaurant manager"]


def _rng(task_context, n):
    extra = os.environ.get("PPOL_SEED", "0")
    # String seeds are hashed with SHA-512 by random (independent of PYTHONHASHSEED).
    return random.Random("%s\x00%d\x00%s" % (task_context, n, extra))


def _counts(names, n, rng):
    """Personas per kind: the weights apportioned to n by largest remainder (ties at random)."""
    weights = [max(0.0, float(PLACEMENT_WEIGHTS.get(k, 0.5))) for k in names]
    total = sum(weights)
    if total <= 0:
        weights, total = [1.0] * len(names), float(len(names))
    quotas = [n * w / total for w in weights]
    counts = [int(q) for q in quotas]
    order = sorted(range(len(names)), key=lambda j: (-(quotas[j] - counts[j]), rng.random()))
    for j in order[: n - sum(counts)]:
        counts[j] += 1
    return counts


def _summary(task_context):
    text = " ".join(task_context.split())
    return text if len(text) <= 600 else text[:600].rsplit(" ", 1)[0] + " ..."


def _compose(task_context, axis, rng):
    name = axis["behavior"]
    parts = [rng.choice(OPENERS).format(task=_summary(task_context)), rng.choice(GROUNDING)]
    pool = [m for m in MECHANICS.get(name, {}).get("true", []) if m]
    if not pool:
        pool = [(axis.get("presence") or {}).get("true", "")]
    parts.extend(m for m in pool if m)
    parts.append(rng.choice(CLOSERS))
    return " ".join(parts)


def _task_tag(task_context):
    # Persona ids carry a tag of the task they were written for (unique across tasks).
    return "%08x" % random.Random("persona_id\x00%s" % task_context).getrandbits(32)


def generate_personas_detailed(task_context, axes, n):
    rng = _rng(task_context, n)
    names = [a["behavior"] for a in axes]
    if not names:
        raise ValueError("DIVERSITY_AXES is empty: the population needs at least one kind of user")
    kinds = []
    for axis, count in zip(axes, _counts(names, n, rng)):
        kinds.extend([axis] * count)
    rng.shuffle(kinds)
    first_names = list(FIRST_NAMES)
    rng.shuffle(first_names)
    tag = _task_tag(task_context)
    used = set()
    personas = []
    for i, axis in enumerate(kinds):
        kind = axis["behavior"]
        first = first_names[i % len(first_names)]
        pid = re.sub(r"[^a-z0-9]+", "_", "%s_%s_%s" % (first, kind, tag)).strip("_")
        base, k = pid, 2
        while pid in used:
            pid = "%s_%d" % (base, k)
            k += 1
        used.add(pid)
        occupation = rng.choice(OCCUPATIONS)
        personas.append(
            {
                "persona_id": pid,
                "description": "%s is a %s. %s" % (first.capitalize(), occupation, axis.get("definition", "")),
                "axis_placement": {name: name == kind for name in names},
                "reasoning": "One of the %s users of this population." % kind,
                "expanded_instruction": _compose(task_context, axis, rng),
            }
        )
    return personas
