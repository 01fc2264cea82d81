"""Helpers for generator programs that ask a model for personas (standard library only).

The sandbox provides this module beside ``ppol_llm`` (``import ppol_personas``); the LLM seeds
(``seeds/two_stage_llm.py``, ``seeds/direct_prompt.py``), the reference shim
``ppol.evolution._generator_utils`` and programs the evolution writes share it instead of
carrying copies. It holds code only: every prompt, axis, schema bound and threshold stays a
literal of the program (where the evolution's structured edits can reach it) and is passed in.

* Reading a model's answer: ``json_values`` (every JSON value of an answer, repaired where
  needed: fences, chatter, single quotes, Python literals, unquoted keys, comments, missing or
  trailing commas, a truncated end), ``persona_rows`` (the persona objects in it),
  ``model_rows`` (the rows of an answer that parsed as JSON).
* Stage-1 profiles: ``ask_population`` (the requests, with one retry), ``parse_population`` /
  ``read_population`` (``source`` ``model-json`` or ``repaired``), ``pad_population`` (up to
  N, each pad on an unused axis combination), ``unique_ids``, ``corners``.
* Stage-2 instructions: ``expansion_prompt``, ``clean_instruction``, ``read_instruction``,
  ``fallback_instruction``.
* Prompt pieces: ``axis_lines``, ``active_traits``; schema: ``personas_object_schema``.
* Reporting: ``note`` (stderr, kept with the run), ``raw_excerpt``, ``raw_replies_text``.
"""

import json
import re
import sys

import ppol_llm

RAW_EXCERPT_CHARS = 2048  # default excerpt of a raw reply in failure messages (programs pass theirs)


def raw_excerpt(text, limit=RAW_EXCERPT_CHARS):
    """The first ``limit`` characters of a model's reply, for failure messages."""
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + " [...]"


def raw_replies_text(raws, limit=RAW_EXCERPT_CHARS):
    """One line per raw reply (its first ``limit`` characters), for failure messages."""
    return "\n".join("raw reply %d (first 2 KB): %s" % (i + 1, raw_excerpt(r, limit)) for i, r in enumerate(raws))


def note(message, who="ppol generator"):
    """Report a repair or fallback on stderr (kept with the run, shown with failures)."""
    print(who + ": " + message, file=sys.stderr, flush=True)


# --- JSON repair ---
FENCE = re.compile(r"```[A-Za-z0-9_-]*")
_SMART_QUOTES = {"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"}
_LITERALS = {"true": "true", "false": "false", "null": "null", "True": "true",
             "False": "false", "None": "null", "NaN": "null", "nan": "null"}
_DANGLING_KEY = re.compile(r'(?:,\s*)?"(?:[^"\\]|\\.)*"\s*:\s*$')
_LONE_KEY = re.compile(r'(?<=[{,])\s*"(?:[^"\\]|\\.)*"\s*$')
_TRAILING_COMMA = re.compile(r",\s*$")


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
    s = FENCE.sub(" ", "" if text is None else str(text))
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


def model_rows(value):
    """The persona rows of an answer that parsed as JSON: ``{"personas": [...]}`` or a bare
    list of objects; None otherwise."""
    if isinstance(value, dict):
        value = value.get("personas")
    if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        return value
    return None


# --- stage 1: profiles ---
def truthy(value):
    """A placement value as a bool (weak models write "yes", 1, "true", ...)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return False


def snake(value, fallback="persona"):
    """``value`` as a snake_case id (``fallback`` when nothing is left)."""
    return re.sub(r"[^a-z0-9]+", "_", str(value or "").lower()).strip("_") or fallback


def flat_text(value):
    """A row field as text (lists and objects of weak models are flattened)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (list, tuple)):
        return ", ".join(flat_text(v) for v in value if flat_text(v))
    if isinstance(value, dict):
        return "; ".join("%s: %s" % (k, flat_text(v)) for k, v in value.items())
    return str(value)


def profile(row, names):
    """A stage-1 profile from one answer row, or None when the row describes no one."""
    description = flat_text(row.get("description") or row.get("persona") or row.get("name") or row.get("text"))
    if not description and row.get("persona_id") in (None, ""):
        return None
    placement = row.get("axis_placement") or {}
    if not isinstance(placement, dict):
        placement = {}
    return {
        "persona_id": snake(row.get("persona_id") or row.get("name") or description[:40]),
        "description": description,
        "axis_placement": {name: truthy(placement.get(name, False)) for name in names},
        "reasoning": flat_text(row.get("reasoning")),
    }


def exact_profile(row, names):
    """Whether a profile row is usable as the model wrote it (no coercion needed)."""
    placement = row.get("axis_placement")
    return (
        isinstance(row.get("persona_id"), str) and row["persona_id"].strip() != ""
        and isinstance(row.get("description"), str) and row["description"].strip() != ""
        and isinstance(placement, dict)
        and all(isinstance(placement.get(k), bool) for k in names)
    )


def unique_ids(profiles):
    """``profiles`` with repeated ids suffixed ``_2``, ``_3``, ... (in place, and returned)."""
    used = set()
    for p in profiles:
        base, pid, k = p["persona_id"], p["persona_id"], 2
        while pid in used:
            pid = "%s_%d" % (base, k)
            k += 1
        used.add(pid)
        p["persona_id"] = pid
    return profiles


def parse_population(text, axes, n):
    """The usable profiles of a population answer (at most ``n``), parsed with JSON repair,
    with ``axis_placement`` rebuilt to exactly the axis names (missing -> false)."""
    names = [a["behavior"] for a in axes]
    out = [p for p in (profile(r, names) for r in persona_rows(text)) if p]
    return unique_ids(out[:n])


def read_population(answer, axes, n):
    """The usable profiles of a stage-1 answer (a ``ppol_llm.JsonAnswer``), each with its
    ``source``: ``model-json`` when the answer is JSON and the row needed no repair or coercion,
    else ``repaired`` (read with JSON repair from the raw text)."""
    names = [a["behavior"] for a in axes]
    rows = model_rows(answer.value)
    if rows is None:
        out = parse_population(answer.text, axes, n)
        for p in out:
            p["source"] = "repaired"
        return out
    out = []
    for r in rows:
        p = profile(r, names)
        if p:
            p["source"] = "model-json" if exact_profile(r, names) else "repaired"
            out.append(p)
    return unique_ids(out[:n])


def ask_population(ask, prompt, retry_note, n, temperature, attempts=2):
    """Stage 1's requests: ``ask(prompt, temperature)`` -> (raw text, profiles) is called until
    ``n`` distinct profiles are in hand, at most ``attempts`` times; each retry adds
    ``retry_note`` (formatted with ``why`` and ``n``) to the prompt and 0.2 to the temperature
    (at most 1.0). An ``LLMError`` counts as an attempt with no reply. Returns (profiles at
    most ``n``, raw replies)."""
    raws, profiles = [], []
    for attempt in range(attempts):
        text = prompt
        if attempt:
            why = "no persona objects" if not profiles else "only %d of %d usable objects" % (len(profiles), n)
            text = prompt + retry_note.format(why=why, n=n)
        try:
            raw, found = ask(text, min(1.0, temperature + 0.2 * attempt))
        except ppol_llm.LLMError as e:
            raws.append("(no reply: LLMError: %s)" % e)
            continue
        raws.append(raw)
        seen = {p["persona_id"] for p in profiles}
        for p in found:
            if p["persona_id"] not in seen and len(profiles) < n:
                profiles.append(p)
        if len(profiles) >= n:
            break
    return profiles, raws


def corners(k):
    """All 2^k placements (as bit tuples), spread out: by number of active axes, alternating."""
    combos = [tuple((c >> b) & 1 for b in range(k)) for c in range(2 ** k)]
    return sorted(combos, key=lambda c: (sum(c) % 2, sum(c), c))


def pad_population(profiles, axes, n, source=None):
    """``profiles`` padded to ``n``: descriptions cycled from the usable ones, each pad on an
    axis combination not used yet (so the pads are not copies), each pad's ``source`` set to
    ``source`` when given. Returns (profiles, padded)."""
    names = [a["behavior"] for a in axes]
    out = [dict(p) for p in profiles[:n]]
    if not out or len(out) >= n:
        return out, 0
    used = {tuple(int(p["axis_placement"].get(k, False)) for k in names) for p in out}
    spare = [c for c in corners(len(names)) if c not in used] if names else []
    padded = 0
    while len(out) < n:
        src = profiles[padded % len(profiles)]
        p = dict(src)
        if spare:
            bits = spare.pop(0)
            p["axis_placement"] = {k: bool(b) for k, b in zip(names, bits)}
        else:
            p["axis_placement"] = dict(src["axis_placement"])
        p["reasoning"] = "Padded from %s: the model gave fewer usable profiles than asked." % src["persona_id"]
        if source is not None:
            p["source"] = source
        out.append(p)
        padded += 1
    return unique_ids(out), padded


def personas_object_schema(item, n, max_items):
    """The JSON schema of an answer ``{"personas": [item, ...]}``; the array's length is fixed
    to ``n`` only for small populations (``n <= max_items``)."""
    people = {"type": "array", "items": item}
    if n <= max_items:
        people["minItems"] = n
        people["maxItems"] = n
    return {
        "type": "object",
        "properties": {"personas": people},
        "required": ["personas"],
        "additionalProperties": False,
    }


# --- prompt pieces ---
def axis_lines(axes):
    """The axes as prompt lines (name, definition, both playbooks), or ``(none)``."""
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


def active_traits(axes, placement, neutral):
    """The active traits (definition + playbook) in axis order, or ``neutral`` when none is."""
    lines = []
    for axis in axes:  # axis order, not set order
        if placement.get(axis["behavior"]):
            playbook = (axis.get("presence") or {}).get("true", "")
            lines.append("- %s: %s %s" % (axis["behavior"], axis.get("definition", ""), playbook))
    return "\n".join(lines) if lines else neutral


# --- stage 2: instructions ---
EXPANSION_RETRY = "\n\nYour previous answer was empty or too short. Write the full instruction now."


def expansion_prompt(template, task_context, persona, axes, neutral, retry=False):
    """A stage-2 prompt: ``template`` filled with the task, the profile's description and its
    active traits (``neutral`` when none is); a retry says the last answer was unusable."""
    prompt = template.format(
        task=task_context,
        description=persona.get("description") or persona.get("persona_id", ""),
        traits=active_traits(axes, persona.get("axis_placement") or {}, neutral),
    )
    return prompt + EXPANSION_RETRY if retry else prompt


def clean_instruction(text, min_words=3):
    """A stage-2 answer as an instruction: fences and surrounding quotes removed; None when it
    is too short to be one (fewer than ``min_words`` words)."""
    if not isinstance(text, str):
        return None
    t = FENCE.sub(" ", text).strip().strip('"').strip()
    return t if len(t.split()) >= min_words else None


def read_instruction(answer, min_words=3):
    """A stage-2 answer (a ``ppol_llm.JsonAnswer`` or an ``LLMError``) as (instruction, source):
    the ``instruction`` of its JSON (``model-json``), else one read from a malformed JSON answer
    or the answer's prose (``repaired``); (None, None) when neither holds an instruction."""
    if not isinstance(answer, tuple):
        return None, None
    value = answer.value
    if isinstance(value, dict) and isinstance(value.get("instruction"), str):
        text = clean_instruction(value["instruction"], min_words)
        if text:
            return text, "model-json"
    raw = answer.text or ""
    if raw.lstrip()[:1] in ("{", "[") or "```" in raw:
        for v in json_values(raw):
            if isinstance(v, dict) and isinstance(v.get("instruction"), str):
                text = clean_instruction(v["instruction"], min_words)
                if text:
                    return text, "repaired"
        if raw.lstrip()[:1] in ("{", "["):
            return None, None
    text = clean_instruction(raw, min_words)
    return (text, "repaired") if text else (None, None)


def fallback_instruction(persona, axes):
    """An instruction composed without the model: the profile and the playbook of every axis."""
    lines = []
    description = persona.get("description") or persona.get("persona_id", "a customer")
    lines.append("You are the customer described here: %s" % description.rstrip("."))
    placement = persona.get("axis_placement") or {}
    for axis in axes:
        presence = axis.get("presence") or {}
        on = bool(placement.get(axis["behavior"]))
        play = presence.get("true" if on else "false", "")
        if play:
            lines.append(play.rstrip("."))
    lines.append("Keep every goal and fact of your situation exactly as given, share details when the agent asks for them, and say when you are done")
    return ". ".join(lines) + "."
