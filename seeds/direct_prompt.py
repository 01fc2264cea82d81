"""Seed generator: DP-Personas baseline — one direct prompt, no behaviour axes.

One LLM call asks for N complete persona blocks as JSON, with a JSON schema
(``{"personas": [{"persona_id", "description", "reasoning", "text"}, ...]}``) that an endpoint
taking one (OpenAI's ``json_schema``, llama-cpp-python's ``json_object``) constrains the answer
to. Every persona records where it came from in ``source``: ``model-json`` (the model's JSON used
as is), ``repaired`` (read by the repair below from a malformed or prose answer) or ``fallback``
(a copy cycled in to reach N). If fewer valid ones come back they
are cycled (with suffixed ids) up to N, as the reference's baseline does. Unlike it, the
answer is read with JSON repair (fences, chatter, single quotes, trailing commas, truncated
arrays, objects without the array), "persona" or "instruction" stand in for a missing "text",
and an answer with no usable persona is asked for once more. When neither answer holds a JSON
persona, persona descriptions written as prose (a numbered list, paragraphs, at least
PROSE_MIN_WORDS words each, not a refusal) are taken as the personas' texts: this baseline's
personas are prose anyway. Only then does the program raise; the error carries the first 2 KB
of each raw reply. Repairs and prose fallbacks are reported on stderr.
"""

import json
import re
import sys

import ppol_llm

DIVERSITY_AXES = []

TEMPERATURE = 0.8
TOKENS_PER_PERSONA = 700
MIN_TOKENS = 1800
TEXT_KEYS = ("text", "persona", "expanded_instruction", "instruction")

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
    people = {"type": "array", "items": persona}
    if n <= SCHEMA_MAX_ITEMS:
        people["minItems"] = n
        people["maxItems"] = n
    return {
        "type": "object",
        "properties": {"personas": people},
        "required": ["personas"],
        "additionalProperties": False,
    }

PROSE_MIN_WORDS = 25
_PROSE_MARKER = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)]|#+|(?:\*\*)?persona\s*\d*\s*[:.)-])\s*", re.I)
_NOT_A_PERSONA = re.compile(r"^(?:i'?m sorry|i am sorry|sorry|i cannot|i can'?t|as an ai|it'?s not possible|it is not possible)", re.I)

RETRY_NOTE = "\n\nYour previous answer contained no usable persona. Answer again with only the JSON object whose \"personas\" array holds {n} objects, each with a non-empty \"text\"."


# --- ppol json repair: identical in seeds/two_stage_llm.py, seeds/direct_prompt.py and
# --- generators/ppol/evolution/_generator_utils.py (python/tests/test_seeds.py checks it) ---
_FENCE = re.compile(r"```[A-Za-z0-9_-]*")
_SMART_QUOTES = {"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"}
_LITERALS = {"true": "true", "false": "false", "null": "null", "True": "true",
             "False": "false", "None": "null", "NaN": "null", "nan": "null"}
_DANGLING_KEY = re.compile(r'(?:,\s*)?"(?:[^"\\]|\\.)*"\s*:\s*$')
_LONE_KEY = re.compile(r'(?<=[{,])\s*"(?:[^"\\]|\\.)*"\s*$')
_TRAILING_COMMA = re.compile(r",\s*$")
RAW_EXCERPT_CHARS = 2048


def raw_excerpt(text, limit=RAW_EXCERPT_CHARS):
    """The first ``limit`` characters of a model's reply, for failure messages."""
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + " [...]"


def _close(out, opener):
    """Close the innermost open structure of the repaired text ``out`` (a list of pieces)."""
    text = "".join(out)
    text = _DANGLING_KEY.sub("", text) if opener == "{" else text
    if opener == "{":
        text = _LONE_KEY.sub("", text)
    text = _TRAILING_COMMA.sub("", text)
    out[:] = [text, "}" if opener == "{" else "]"]


def _repair_one(s, i):
    """Repair the JSON value starting at ``s[i]`` (a ``[`` or ``{``). Returns (text, end,
    safe) where ``safe`` lists (text, stack) snapshots after each completed container."""
    out, stack, safe = [], [], []
    quote, last, n = None, None, len(s)
    while i < n:
        c = s[i]
        if quote:
            if c == "\\" and i + 1 < n:
                out.append(s[i:i + 2])
                i += 2
                continue
            if c == quote:
                # A quote that is not followed by a delimiter is part of the text (an
                # apostrophe in a single-quoted string, unescaped quotes in a double-quoted one).
                j = i + 1
                while j < n and s[j] in " \t":
                    j += 1
                if j < n and s[j] not in ",:}]\"'\r\n":
                    out.append("'" if c == "'" else '\\"')
                    i += 1
                    continue
                out.append('"')
                quote, last = None, "value"
            elif c == '"':
                out.append('\\"')
            elif c == "\n":
                out.append("\\n")
            elif c == "\t":
                out.append("\\t")
            elif c != "\r":
                out.append(c)
            i += 1
            continue
        if c in " \t\r\n":
            i += 1
            continue
        if (c == "/" and s[i:i + 2] == "//") or c == "#":
            while i < n and s[i] != "\n":
                i += 1
            continue
        if c in "]}":
            if stack:
                _close(out, stack.pop())
                last = "value"
                safe.append(("".join(out), tuple(stack)))
            i += 1
            if not stack:
                return "".join(out), i, safe
            continue
        if c == ",":
            if last in ("value",):
                out.append(",")
                last = "comma"
            i += 1
            continue
        if c == ":":
            out.append(":")
            last = "colon"
            i += 1
            continue
        # The start of a value (or key): a comma is missing after a complete value.
        if last == "value" and stack:
            out.append(",")
        if c in "[{":
            stack.append(c)
            out.append(c)
            last = "open"
            i += 1
            continue
        if c in "\"'":
            quote = c
            out.append('"')
            i += 1
            continue
        m = re.match(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", s[i:])
        if m:
            out.append(m.group(0))
            i += len(m.group(0))
            last = "value"
            continue
        m = re.match(r"[A-Za-z_][A-Za-z0-9_\-]*", s[i:])
        if m:
            word = m.group(0)
            i += len(word)
            j = i
            while j < n and s[j] in " \t":
                j += 1
            if j < n and s[j] == ":":
                out.append(json.dumps(word))  # an unquoted key
            elif word in _LITERALS:
                out.append(_LITERALS[word])
            else:
                # Unquoted text: up to the next delimiter.
                k = i
                while k < n and s[k] not in ",}]\n":
                    k += 1
                out.append(json.dumps((word + s[i:k]).strip()))
                i = k
            last = "value"
            continue
        i += 1  # anything else outside strings is dropped
    # Truncated: close the open string and structures.
    if quote:
        out.append('"')
    while stack:
        _close(out, stack.pop())
    return "".join(out), n, safe


def _loads_repaired(s, i):
    """One repaired value from ``s[i]``, cut back to the last complete element when closing
    alone does not parse. Returns (value or None, end)."""
    text, end, safe = _repair_one(s, i)
    try:
        return json.loads(text), end
    except ValueError:
        pass
    for snapshot, stack in reversed(safe[-50:]):
        out = [snapshot]
        for opener in reversed(stack):
            _close(out, opener)
        try:
            return json.loads("".join(out)), end
        except ValueError:
            continue
    return None, end


def json_values(text):
    """Every top-level JSON value in a model's answer, repaired where needed: code fences,
    chatter, single quotes, Python literals, unquoted keys, comments, missing or trailing
    commas, and a truncated end (the last complete elements are kept)."""
    s = _FENCE.sub(" ", "" if text is None else str(text))
    for a, b in _SMART_QUOTES.items():
        s = s.replace(a, b)
    decoder = json.JSONDecoder()
    found, i = [], 0
    while i < len(s):
        if s[i] not in "[{":
            i += 1
            continue
        try:
            value, end = decoder.raw_decode(s, i)
        except ValueError:
            value, end = _loads_repaired(s, i)
            if value is None:
                i += 1
                continue
        found.append(value)
        i = max(end, i + 1)
    return found


def persona_rows(text):
    """The persona objects of an answer: the first list of objects (also one under a key, as
    in ``{"personas": [...]}``), else every top-level object."""
    values = json_values(text)
    for v in values:
        if isinstance(v, list) and any(isinstance(x, dict) for x in v):
            return [x for x in v if isinstance(x, dict)]
        if isinstance(v, dict):
            for inner in v.values():
                if isinstance(inner, list) and inner and all(isinstance(x, dict) for x in inner):
                    return list(inner)
    return [v for v in values if isinstance(v, dict)]
# --- end of ppol json repair ---


def _text(value):
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (list, tuple)):
        return " ".join(_text(v) for v in value if _text(v))
    return ""


def model_rows(value):
    """The persona rows of an answer that parsed as JSON: ``{"personas": [...]}`` or a bare
    list of objects; None otherwise."""
    if isinstance(value, dict):
        value = value.get("personas")
    if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        return value
    return None


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
    for line in _FENCE.sub("", raw).splitlines():
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
    print("direct_prompt: " + message, file=sys.stderr, flush=True)


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
    excerpts = "\n".join("raw reply %d (first 2 KB): %s" % (i + 1, raw_excerpt(r)) for i, r in enumerate(raws))
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
