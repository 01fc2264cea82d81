"""Seed generator: DP-Personas baseline — one direct prompt, no behaviour axes.

One LLM call asks for N complete persona blocks as JSON. If fewer valid ones come back they
are cycled (with suffixed ids) up to N; if none, the program raises.
"""

import json
import re

import ppol_llm

DIVERSITY_AXES = []

TEMPERATURE = 0.8
TOKENS_PER_PERSONA = 700
MIN_TOKENS = 1800

SYSTEM = "You write personas for people who contact customer support. You answer with JSON only."

PROMPT = """A customer contacts a support agent about this task:

<task>
{task}
</task>

Write {n} different personas for this customer. Each persona is a complete description, in the second person, of how this person behaves in a text chat with the agent: their background, how they write, what they feel, how they react to questions, proposals and refusals. Keep every goal and fact of the task unchanged and never mention tests, simulations or AI.

Return a JSON array of {n} objects with "persona_id" (snake_case, unique), "description" (two or three sentences), "reasoning" (one sentence: what makes this persona different from the others) and "text" (the persona, 120-250 words)."""


def _objects(text):
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
    for v in found:
        if isinstance(v, list) and any(isinstance(x, dict) for x in v):
            return [x for x in v if isinstance(x, dict)]
    return [v for v in found if isinstance(v, dict)]


def generate_personas_detailed(task_context, axes, n):
    raw = ppol_llm.complete(
        PROMPT.format(task=task_context, n=n),
        system=SYSTEM,
        temperature=TEMPERATURE,
        max_tokens=max(MIN_TOKENS, TOKENS_PER_PERSONA * n),
    )
    valid = []
    for obj in _objects(raw):
        text = obj.get("text") or obj.get("persona") or obj.get("expanded_instruction")
        if not isinstance(text, str) or not text.strip():
            continue
        pid = re.sub(r"[^a-z0-9]+", "_", str(obj.get("persona_id") or "persona").lower()).strip("_") or "persona"
        valid.append(
            {
                "persona_id": pid,
                "description": str(obj.get("description") or "").strip(),
                "axis_placement": {},
                "reasoning": str(obj.get("reasoning") or "").strip(),
                "text": text.strip(),
            }
        )
    if not valid:
        raise ValueError("the model returned no usable persona")
    out = []
    used = set()
    for i in range(n):
        p = dict(valid[i % len(valid)])
        pid, k = p["persona_id"], 2
        while pid in used:
            pid = "%s_%d" % (p["persona_id"], k)
            k += 1
        used.add(pid)
        p["persona_id"] = pid
        out.append(p)
    return out
