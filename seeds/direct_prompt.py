"""Seed generator: DP-Personas baseline — one direct prompt, no behaviour axes.

One LLM call asks for N complete persona blocks as JSON, with a JSON schema
(``{"personas": [{"persona_id", "description", "reasoning", "text"}, ...]}``) that an endpoint
taking one (OpenAI's ``json_schema``, llama-cpp-python's ``json_object``) constrains the answer
to. Every persona records where it came from in ``source``: ``model-json`` (the model's JSON used
as is), ``repaired`` (read by the JSON repair from a malformed or prose answer) or ``fallback``
(a copy cycled in to reach N). If fewer valid ones come back they
are cycled (with suffixed ids) up to N, as the reference's baseline does. Unlike it, the
answer is read with JSON repair (fences, chatter, single quotes, trailing commas, truncated
arrays, objects without the array), "persona" or "instruction" stand in for a missing "text",
and an answer with no usable persona is asked for once more. When neither answer holds a JSON
persona, persona descriptions written as prose (a numbered list, paragraphs, at least
PROSE_MIN_WORDS words each, not a refusal) are taken as the personas' texts: this baseline's
personas are prose anyway. Only then does the program raise; the error carries the first 2 KB
of each raw reply. Repairs and prose fallbacks are reported on stderr. The JSON repair and the
reporting come from ``ppol_personas`` (the sandbox's helper module); the prompt and every
threshold are literals here.
"""

import re

import ppol_llm
from ppol_personas import FENCE, model_rows, note, persona_rows, personas_object_schema, raw_replies_text

DIVERSITY_AXES = []

TEMPERATURE = 0.8
TOKENS_PER_PERSONA = 700
MIN_TOKENS = 1800
TEXT_KEYS = ("text", "persona", "expanded_instruction", "instruction")
RAW_EXCERPT_CHARS = 2048  # of each raw reply, in failure messages

SYSTEM = "You write personas for people who contact customer support. You answer with JSON only."

PROMPT = """A customer contacts a support agent about this task:

<task>
{task}
</task>

Write {n} different personas for this customer. Each persona is a complete description, in the second person, of how this person behaves in a text chat with the agent: their background, how they write, what they feel, how they react to questions, proposals and refusals. Keep every goal and fact of the task unchanged and never mention tests, simulations or AI.

Return a JSON object {{"personas": [...]}} whose "personas" array holds {n} objects with "persona_id" (snake_case, unique), "description" (two or three sentences), "reasoning" (one sentence: what makes this persona different from the others) and "text" (the persona, 120-250 words)."""

# No maxLength in the schemas: llama.cpp turns one into as many nested optional grammar rules,
# which made constrained answers crawl; the request's max_tokens bounds the answer.
SCHEMA_MAX_ITEMS = 8  # the array's length is fixed in the schema only up to this many


def personas_schema(n):
    """The answer's JSON schema: ``{"personas": [{persona_id, description, reasoning, text}]}``."""
    persona = {
        "type": "object",
        "properties": {
            "persona_id": {"type": "string"},
            "description": {"type": "string"},
            "reasoning": {"type": "string"},
            "text": {"type": "string"},
        },
        "required": ["persona_id", "description", "reasoning", "text"],
        "additionalProperties": False,
    }
    return personas_object_schema(persona, n, SCHEMA_MAX_ITEMS)

PROSE_MIN_WORDS = 25
_PROSE_MARKER = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)]|#+|(?:\*\*)?persona\s*\d*\s*[:.)-])\s*", re.I)
_NOT_A_PERSONA = re.compile(r"^(?:i'?m sorry|i am sorry|sorry|i cannot|i can'?t|as an ai|it'?s not possible|it is not possible)", re.I)

RETRY_NOTE = "\n\nYour previous answer contained no usable persona. Answer again with only the JSON object whose \"personas\" array holds {n} objects, each with a non-empty \"text\"."


def _text(value):
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (list, tuple)):
        return " ".join(_text(v) for v in value if _text(v))
    return ""


def read_answer(answer):
    """The personas of an answer (a ``ppol_llm.JsonAnswer``), each with its ``source``:
    ``model-json`` for a JSON answer's rows with a string ``persona_id`` and ``text``, else
    ``repaired`` (coerced, or read with JSON repair from the raw text)."""
    rows = model_rows(answer.value)
    if rows is None:
        return _personas(answer.text)
    out = _personas_of(rows)
    for obj, p in zip([r for r in rows if _row_text(r)], out):
        exact = isinstance(obj.get("persona_id"), str) and isinstance(obj.get("text"), str) and obj["text"].strip()
        p["source"] = "model-json" if exact else "repaired"
    return out


def _row_text(obj):
    return next((_text(obj.get(k)) for k in TEXT_KEYS if _text(obj.get(k))), "")


def _personas(raw):
    return _personas_of(persona_rows(raw))


def _personas_of(rows):
    out = []
    for obj in rows:
        text = _row_text(obj)
        if not text:
            continue
        pid = re.sub(r"[^a-z0-9]+", "_", str(obj.get("persona_id") or obj.get("name") or "persona").lower()).strip("_") or "persona"
        out.append(
            {
                "persona_id": pid,
                "description": _text(obj.get("description")),
                "axis_placement": {},
                "reasoning": _text(obj.get("reasoning")),
                "text": text,
                "source": "repaired",
            }
        )
    return out


def _prose_personas(raw):
    """Persona descriptions an answer wrote as prose: blocks split at blank lines and list
    markers, JSON-looking lines dropped, each kept when it has PROSE_MIN_WORDS words or more and
    does not open with a refusal."""
    if raw.startswith("(no reply"):
        return []
    blocks, cur = [], []
    for line in FENCE.sub("", raw).splitlines():
        stripped = line.replace("**", "").strip()
        looks_json = stripped[:1] in "{}[]" and stripped != "" or re.search(r'"\s*:', stripped)
        if not stripped or looks_json or _PROSE_MARKER.match(stripped):
            if cur:
                blocks.append(" ".join(cur))
            cur = []
            while not looks_json and _PROSE_MARKER.match(stripped):
                rest = _PROSE_MARKER.sub("", stripped, count=1)
                if rest == stripped:
                    break
                stripped = rest
            stripped = "" if looks_json else stripped
        if stripped:
            cur.append(stripped)
    if cur:
        blocks.append(" ".join(cur))
    out = []
    for block in blocks:
        text = re.sub(r"\s+", " ", block).strip()
        if len(text.split()) < PROSE_MIN_WORDS or _NOT_A_PERSONA.match(text):
            continue
        first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0][:200]
        out.append(
            {
                "persona_id": "prose_%d" % (len(out) + 1),
                "description": first,
                "axis_placement": {},
                "reasoning": "taken from a prose answer (no JSON persona in it)",
                "text": text,
                "source": "repaired",
            }
        )
    return out


def _note(message):
    note(message, who="direct_prompt")


def generate_personas_detailed(task_context, axes, n):
    raws, valid = [], []
    for attempt in range(2):
        prompt = PROMPT.format(task=task_context, n=n)
        if attempt:
            prompt += RETRY_NOTE.format(n=n)
        try:
            answer = ppol_llm.complete_json(
                prompt,
                personas_schema(n),
                system=SYSTEM,
                temperature=min(1.0, TEMPERATURE + 0.2 * attempt),
                max_tokens=max(MIN_TOKENS, TOKENS_PER_PERSONA * n),
            )
        except ppol_llm.LLMError as e:
            raws.append("(no reply: LLMError: %s)" % e)
            continue
        raws.append(answer.text)
        valid = read_answer(answer)
        if valid:
            break
    excerpts = raw_replies_text(raws, RAW_EXCERPT_CHARS)
    if not valid:
        seen = set()
        for r in raws:
            for p in _prose_personas(r):
                if p["text"] not in seen:
                    seen.add(p["text"])
                    p["persona_id"] = "prose_%d" % (len(valid) + 1)
                    valid.append(p)
        if valid:
            _note("no JSON persona in %d answer(s); took %d persona(s) from their prose. %s"
                  % (len(raws), len(valid), excerpts))
    if not valid:
        _note(excerpts)
        raise ValueError("the model returned no usable persona (%d attempts)\n%s" % (len(raws), excerpts))
    if len(valid) < n or len(raws) > 1:
        _note("%d usable persona(s) for %d asked after %d attempt(s); cycled to %d. %s"
              % (len(valid), n, len(raws), n, excerpts))
    out = []
    used = set()
    for i in range(n):
        p = dict(valid[i % len(valid)])
        if i >= len(valid):
            p["source"] = "fallback"  # a copy cycled in to reach n
        pid, k = p["persona_id"], 2
        while pid in used:
            pid = "%s_%d" % (p["persona_id"], k)
            k += 1
        used.add(pid)
        p["persona_id"] = pid
        out.append(p)
    return out
