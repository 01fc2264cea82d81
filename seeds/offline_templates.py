"""Seed generator without any LLM: balanced axis placements + template-composed roleplay text.

Everything that evolution may edit is module-level literal data (axes, playbooks, placement
weights, template fragments), so an AST editor can mutate it structurally. The code below the
data only samples and composes. Output is deterministic given (task_context, n, PPOL_SEED).
"""

import os
import random
import re

DIVERSITY_AXES = [
    {
        "behavior": "terse",
        "definition": "How much the user writes per message and how carefully.",
        "presence": {
            "true": "Short sentences, little punctuation, small grammar slips left in.",
            "false": "Long sentences, extra detail, lots of punctuation or emoji.",
        },
    },
    {
        "behavior": "skeptical",
        "definition": "How readily the user accepts what the agent says.",
        "presence": {
            "true": "Challenges claims and asks for verification before agreeing.",
            "false": "Follows the agent's guidance without asking for proof.",
        },
    },
    {
        "behavior": "frustrated",
        "definition": "The user's emotional temperature toward the agent.",
        "presence": {
            "true": "Accusatory, impatient, sometimes impolite; repeats demands.",
            "false": "Neutral and cooperative; at most a gentle sigh of frustration.",
        },
    },
    {
        "behavior": "ambiguous",
        "definition": "How completely the user shares information.",
        "presence": {
            "true": "Vague or partial answers, withholds details, trails off, needs prompting.",
            "false": "Direct and complete answers, but only to what is asked.",
        },
    },
]

# Probability that an axis is on; placements follow a low-discrepancy sequence with these rates.
PLACEMENT_WEIGHTS = {"terse": 0.5, "skeptical": 0.5, "frustrated": 0.5, "ambiguous": 0.5}

# How many mechanics to draw from each axis state.
MECHANICS_PER_AXIS = 2

# Concrete, turn-level mechanics per axis state.
MECHANICS = {
    "terse": {
        "true": [
            "Type in lowercase, with no greeting and no sign-off.",
            "Keep most messages under twelve words; fragments are fine.",
            "Skip commas and question marks now and then, and leave a typo or two uncorrected.",
            "Answer a yes/no question with a single word.",
            "Never restate what the agent just said; just reply to it.",
        ],
        "false": [
            "Open with a friendly greeting and a sentence of background before you get to the point.",
            "Write in full, flowing sentences and add small asides about your day.",
            "Use exclamation marks and the occasional emoji when something goes well!",
            "Thank the agent at length when they help, and explain why it matters to you.",
            "Restate your understanding of the agent's proposal in your own words before replying.",
        ],
    },
    "skeptical": {
        "true": [
            "Push back once when told no, and ask which rule says so.",
            "When the agent quotes a price, date or policy, ask how they know it is correct.",
            "Ask the agent to repeat the key details back to you before you confirm anything.",
            "Say you read something different online and ask them to double-check.",
        ],
        "false": [
            "Accept the agent's explanation the first time it is given.",
            "Confirm promptly when the agent proposes a reasonable action.",
            "Assume the agent knows the rules better than you do and follow their lead.",
        ],
    },
    "frustrated": {
        "true": [
            "Start irritated: mention that this is not the first time something has gone wrong.",
            "If the agent asks for something you already gave, say so sharply and repeat it once.",
            "Use short commands like 'just fix it' or 'do it now' when progress stalls.",
            "Blame the company, not yourself, for the problem, and say so plainly.",
        ],
        "false": [
            "Stay calm and polite even when the answer is not what you hoped for.",
            "If something is inconvenient, mention it lightly ('that's a bit annoying') and move on.",
            "Thank the agent for each step that moves things forward.",
        ],
    },
    "ambiguous": {
        "true": [
            "Do not give your identifying details (order number, reservation code, user id) in your first message; wait to be asked.",
            "Answer one requested field at a time, and leave the others out until asked again.",
            "Describe the problem loosely at first ('something is wrong with my order') before naming it.",
            "Trail off sometimes ('I think it was... not sure') and let the agent prompt you.",
        ],
        "false": [
            "When asked for information, give exactly the requested details in one message.",
            "State your request clearly in one sentence once the agent asks how they can help.",
            "Do not volunteer details nobody asked for; answer precisely what is asked.",
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

EMOTION_ARCS = [
    "Your mood shifts slowly: you warm up a little when real progress is made and cool down when it stalls.",
    "Your mood stays steady unless the agent refuses something; then it shows in your next two messages.",
    "You start guarded and relax only after the agent has handled one concrete step well.",
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

TRAIT_ADJECTIVES = {
    "terse": {"true": "clipped", "false": "chatty"},
    "skeptical": {"true": "doubtful", "false": "trusting"},
    "frustrated": {"true": "irritated", "false": "patient"},
    "ambiguous": {"true": "vague", "false": "precise"},
}

DESCRIPTION_TEMPLATES = [
    "{Name} is a {occupation} dealing with this issue between other obligations. In conversation {name} comes across as {adjectives}.",
    "{Name}, a {occupation}, wants this sorted without fuss. {Name} tends to be {adjectives} when talking to support.",
]

REASONING_TEMPLATES = [
    "A {occupation} juggling this request could plausibly be {adjectives}.",
    "This combination ({adjectives}) is common among busy customers with a concrete goal like this one.",
]

GOLDEN_STEPS = [0.6180339887, 0.7548776662, 0.5698402910, 0.8191725134, 0.4301597090, 0.6823278038]


def _rng(task_context, n):
    extra = os.environ.get("PPOL_SEED", "0")
    # String seeds are hashed with SHA-512 by random (independent of PYTHONHASHSEED).
    return random.Random("%s\x00%d\x00%s" % (task_context, n, extra))


def _placements(axes, n, rng):
    names = [a["behavior"] for a in axes]
    offsets = [rng.random() for _ in names]
    steps = [GOLDEN_STEPS[j % len(GOLDEN_STEPS)] + 0.013 * (j // len(GOLDEN_STEPS)) for j in range(len(names))]
    corners = 2 ** len(names)
    seen = set()
    out = []
    i = 0
    while len(out) < n:
        corner = tuple(
            ((offsets[j] + i * steps[j]) % 1.0) < PLACEMENT_WEIGHTS.get(name, 0.5)
            for j, name in enumerate(names)
        )
        i += 1
        if corner in seen and len(seen) < corners and i < 64 * (n + corners):
            continue
        if len(seen) >= corners:
            seen.clear()
        seen.add(corner)
        out.append(dict(zip(names, corner)))
    return out


def _summary(task_context):
    text = " ".join(task_context.split())
    return text if len(text) <= 600 else text[:600].rsplit(" ", 1)[0] + " ..."


def _compose(task_context, axes, placement, rng):
    parts = [rng.choice(OPENERS).format(task=_summary(task_context)), rng.choice(GROUNDING)]
    for axis in axes:
        name = axis["behavior"]
        state = "true" if placement.get(name) else "false"
        pool = list(MECHANICS.get(name, {}).get(state, []))
        if not pool:
            pool = [(axis.get("presence") or {}).get(state, "")]
        rng.shuffle(pool)
        parts.extend(m for m in pool[:MECHANICS_PER_AXIS] if m)
    parts.append(rng.choice(EMOTION_ARCS))
    parts.append(rng.choice(CLOSERS))
    return " ".join(parts)


def _task_tag(task_context):
    # Persona ids carry a tag of the task they were written for, so that they are unique across
    # the tasks of a generated set (a held-out split then counts personas exactly). Drawn from
    # its own generator: the personas' text and placements do not change with it.
    return "%08x" % random.Random("persona_id\x00%s" % task_context).getrandbits(32)


def generate_personas_detailed(task_context, axes, n):
    rng = _rng(task_context, n)
    placements = _placements(axes, n, rng)
    names = list(FIRST_NAMES)
    rng.shuffle(names)
    tag = _task_tag(task_context)
    used = set()
    personas = []
    for i, placement in enumerate(placements):
        first = names[i % len(names)]
        adjectives = [
            TRAIT_ADJECTIVES.get(a["behavior"], {}).get("true" if placement[a["behavior"]] else "false", "")
            for a in axes
        ]
        adjectives = [a for a in adjectives if a] or ["even-tempered"]
        pid = re.sub(r"[^a-z0-9]+", "_", "%s_%s_%s" % (first, adjectives[0], tag)).strip("_")
        base, k = pid, 2
        while pid in used:
            pid = "%s_%d" % (base, k)
            k += 1
        used.add(pid)
        occupation = rng.choice(OCCUPATIONS)
        adj_text = ", ".join(adjectives[:-1]) + (" and " if len(adjectives) > 1 else "") + adjectives[-1]
        fill = {"name": first, "Name": first.capitalize(), "occupation": occupation, "adjectives": adj_text}
        personas.append(
            {
                "persona_id": pid,
                "description": rng.choice(DESCRIPTION_TEMPLATES).format(**fill),
                "axis_placement": placement,
                "reasoning": rng.choice(REASONING_TEMPLATES).format(**fill),
                "expanded_instruction": _compose(task_context, axes, placement, rng),
            }
        )
    return personas
