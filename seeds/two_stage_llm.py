"""Seed generator: two-stage LLM persona generation over four behaviour axes.

Stage 1 asks the model once for a whole population (N profiles with an on/off placement on
every axis). Stage 2 expands every profile into a roleplay instruction, one request per
persona, sent together through ``ppol_llm.complete_many`` (the host runs them in parallel).
Only the standard library and ``ppol_llm`` are used.

Both stages send a JSON schema with their request (``ppol_llm.complete_json``): stage 1 the
population as ``{"personas": [...]}`` with a boolean per axis, stage 2 ``{"instruction": ...}``.
An endpoint that takes a schema (OpenAI's ``json_schema``, llama-cpp-python's ``json_object``)
constrains the model to it, so even a weak model answers with valid persona JSON; every persona
records where it came from in ``source``: ``model-json`` (both stages' JSON used as is),
``repaired`` (something was read by the repair below) or ``fallback`` (composed here).

It survives a weak model all the same: answers are read with JSON repair (fences, chatter, single quotes,
trailing commas, truncated arrays, objects without the array); a stage-1 answer with fewer
than N usable profiles is asked for once more and then padded from the usable ones (each pad
on an axis combination not yet used); a stage-2 expansion that fails or comes back empty is
retried once on its own and then composed from the profile and its traits. Each step is
reported on stderr, and a failure carries the first 2 KB of each raw reply.
"""

import json
import re
import sys

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
POPULATION_TOKENS_PER_PERSONA = 250
EXPANSION_TEMPERATURE = 0.7
EXPANSION_MAX_TOKENS = 800
MIN_INSTRUCTION_WORDS = 3
RETRY_NOTE = "\n\nYour previous answer could not be used ({why}). Answer again with only the JSON object whose \"personas\" array holds {n} objects, nothing else."
# No maxLength in the schemas: llama.cpp turns one into as many nested optional grammar rules,
# which made constrained answers crawl; the request's max_tokens bounds the answer.
SCHEMA_MAX_ITEMS = 8  # the population's size is fixed in the schema only up to this many
SOURCES = ("model-json", "repaired", "fallback")  # from best to worst

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
    people = {"type": "array", "items": profile}
    if n <= SCHEMA_MAX_ITEMS:
        people["minItems"] = n
        people["maxItems"] = n
    return {
        "type": "object",
        "properties": {"personas": people},
        "required": ["personas"],
        "additionalProperties": False,
    }


def worst_source(*sources):
    """The least direct of ``sources`` (model-json < repaired < fallback)."""
    return max(sources, key=lambda s: SOURCES.index(s) if s in SOURCES else len(SOURCES))

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


def _snake(value, fallback="persona"):
    return re.sub(r"[^a-z0-9]+", "_", str(value or "").lower()).strip("_") or fallback


def _text(value):
    """A row field as text (lists and objects of weak models are flattened)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value if _text(v))
    if isinstance(value, dict):
        return "; ".join("%s: %s" % (k, _text(v)) for k, v in value.items())
    return str(value)


def _profile(row, names):
    """A stage-1 profile from one answer row, or None when the row describes no one."""
    description = _text(row.get("description") or row.get("persona") or row.get("name") or row.get("text"))
    if not description and row.get("persona_id") in (None, ""):
        return None
    placement = row.get("axis_placement") or {}
    if not isinstance(placement, dict):
        placement = {}
    return {
        "persona_id": _snake(row.get("persona_id") or row.get("name") or description[:40]),
        "description": description,
        "axis_placement": {name: _truthy(placement.get(name, False)) for name in names},
        "reasoning": _text(row.get("reasoning")),
    }


def _unique_ids(profiles):
    used = set()
    for p in profiles:
        base, pid, k = p["persona_id"], p["persona_id"], 2
        while pid in used:
            pid = "%s_%d" % (base, k)
            k += 1
        used.add(pid)
        p["persona_id"] = pid
    return profiles


def _exact(row, names):
    """Whether a profile row is usable as the model wrote it (no coercion needed)."""
    placement = row.get("axis_placement")
    return (
        isinstance(row.get("persona_id"), str) and row["persona_id"].strip() != ""
        and isinstance(row.get("description"), str) and row["description"].strip() != ""
        and isinstance(placement, dict)
        and all(isinstance(placement.get(k), bool) for k in names)
    )


def model_rows(value):
    """The persona rows of an answer that parsed as JSON: ``{"personas": [...]}`` or a bare
    list of objects; None otherwise."""
    if isinstance(value, dict):
        value = value.get("personas")
    if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        return value
    return None


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
        p = _profile(r, names)
        if p:
            p["source"] = "model-json" if _exact(r, names) else "repaired"
            out.append(p)
    return _unique_ids(out[:n])


def parse_population(text, axes, n):
    """The usable profiles of a population answer (at most ``n``), parsed with JSON repair,
    with ``axis_placement`` rebuilt to exactly the axis names (missing -> false)."""
    names = [a["behavior"] for a in axes]
    out = [p for p in (_profile(r, names) for r in persona_rows(text)) if p]
    return _unique_ids(out[:n])


def _corners(k):
    """All 2^k placements (as bit tuples), spread out: by number of active axes, alternating."""
    combos = [tuple((c >> b) & 1 for b in range(k)) for c in range(2 ** k)]
    return sorted(combos, key=lambda c: (sum(c) % 2, sum(c), c))


def pad_population(profiles, axes, n):
    """``profiles`` padded to ``n``: descriptions cycled from the usable ones, each pad on an
    axis combination not used yet (so the pads are not copies). Returns (profiles, padded)."""
    names = [a["behavior"] for a in axes]
    out = [dict(p) for p in profiles[:n]]
    if not out or len(out) >= n:
        return out, 0
    used = {tuple(int(p["axis_placement"].get(k, False)) for k in names) for p in out}
    spare = [c for c in _corners(len(names)) if c not in used] if names else []
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
        p["source"] = "fallback"
        out.append(p)
        padded += 1
    return _unique_ids(out), padded


def note(message):
    """Report a repair or fallback on stderr (kept with the run, shown with failures)."""
    print("ppol generator: " + message, file=sys.stderr, flush=True)


def raw_replies_text(raws):
    return "\n".join("raw reply %d (first 2 KB): %s" % (i + 1, raw_excerpt(r)) for i, r in enumerate(raws))


def _traits(axes, placement):
    lines = []
    for axis in axes:  # axis order, not set order
        if placement.get(axis["behavior"]):
            playbook = (axis.get("presence") or {}).get("true", "")
            lines.append("- %s: %s %s" % (axis["behavior"], axis.get("definition", ""), playbook))
    return "\n".join(lines) if lines else NEUTRAL_TRAITS


def clean_instruction(text):
    """A stage-2 answer as an instruction: fences and surrounding quotes removed; None when it
    is too short to be one (fewer than ``MIN_INSTRUCTION_WORDS`` words)."""
    if not isinstance(text, str):
        return None
    t = _FENCE.sub(" ", text).strip().strip('"').strip()
    return t if len(t.split()) >= MIN_INSTRUCTION_WORDS else None


def read_instruction(answer):
    """A stage-2 answer (a ``ppol_llm.JsonAnswer`` or an ``LLMError``) as (instruction, source):
    the ``instruction`` of its JSON (``model-json``), else one read from a malformed JSON answer
    or the answer's prose (``repaired``); (None, None) when neither holds an instruction."""
    if not isinstance(answer, tuple):
        return None, None
    value = answer.value
    if isinstance(value, dict) and isinstance(value.get("instruction"), str):
        text = clean_instruction(value["instruction"])
        if text:
            return text, "model-json"
    raw = answer.text or ""
    if raw.lstrip()[:1] in ("{", "[") or "```" in raw:
        for v in json_values(raw):
            if isinstance(v, dict) and isinstance(v.get("instruction"), str):
                text = clean_instruction(v["instruction"])
                if text:
                    return text, "repaired"
        if raw.lstrip()[:1] in ("{", "["):
            return None, None
    text = clean_instruction(raw)
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


def _expansion_request(task_context, persona, axes, temperature, max_tokens, retry=False):
    prompt = EXPANSION_PROMPT.format(
        task=task_context,
        description=persona.get("description") or persona.get("persona_id", ""),
        traits=_traits(axes, persona.get("axis_placement") or {}),
    )
    if retry:
        prompt += "\n\nYour previous answer was empty or too short. Write the full instruction now."
    return {"prompt": prompt, "system": EXPANSION_SYSTEM, "schema": EXPANSION_SCHEMA,
            "temperature": min(1.0, temperature + (0.2 if retry else 0.0)), "max_tokens": max_tokens}


def _population(task_context, axes, n):
    """Stage 1 with one retry and padding; with no usable profile at all, profiles placed on
    distinct axis combinations (the raw replies go to stderr)."""
    prompt = POPULATION_PROMPT.format(
        task=task_context,
        n=n,
        axes=_axis_lines(axes),
        axis_names=", ".join(a["behavior"] for a in axes) or "(no axes: use an empty object)",
    )
    max_tokens = min(POPULATION_MAX_TOKENS, POPULATION_TOKENS_PER_PERSONA * n + 400)
    raws, profiles = [], []
    for attempt in range(2):
        ask = prompt
        if attempt:
            why = "no persona objects" if not profiles else "only %d of %d usable objects" % (len(profiles), n)
            ask = prompt + RETRY_NOTE.format(why=why, n=n)
        try:
            answer = ppol_llm.complete_json(ask, population_schema(axes, n), system=POPULATION_SYSTEM,
                                            temperature=min(1.0, POPULATION_TEMPERATURE + 0.2 * attempt),
                                            max_tokens=max_tokens)
        except ppol_llm.LLMError as e:
            raws.append("(no reply: LLMError: %s)" % e)
            continue
        raws.append(answer.text)
        seen = {p["persona_id"] for p in profiles}
        for p in read_population(answer, axes, n):
            if p["persona_id"] not in seen and len(profiles) < n:
                profiles.append(p)
        if len(profiles) >= n:
            break
    if not profiles and all(r.startswith("(no reply: LLMError") for r in raws):
        # the model never answered: an unavailable LLM is not a weak one
        raise ValueError(
            "the population answer contained no persona objects (%d attempts)\n%s"
            % (len(raws), raw_replies_text(raws))
        )
    if not profiles:
        # No usable profile at all: place the personas on distinct axis combinations here and
        # let stage 2 write each one's instruction, rather than losing the whole candidate.
        names = [a["behavior"] for a in axes]
        corners = _corners(len(names))[1:] or [()] if names else [()]
        profiles = [
            {
                "persona_id": "profile_%d" % (i + 1),
                "description": "",
                "axis_placement": {k: bool(b) for k, b in zip(names, corners[i % len(corners)])},
                "reasoning": "Stage 1 gave no usable profile (%d attempts): placed on the axes "
                             "by the program; stage 2 wrote the instruction." % len(raws),
                "source": "fallback",
            }
            for i in range(n)
        ]
        note("the population answer contained no persona objects (%d attempts); %d profiles "
             "placed on axis combinations instead. %s" % (len(raws), n, raw_replies_text(raws)))
        return profiles
    profiles, padded = pad_population(_unique_ids(profiles), axes, n)
    if padded:
        note("stage 1 gave %d of %d usable profiles after %d attempt(s); padded %d from them. %s"
             % (n - padded, n, len(raws), padded, raw_replies_text(raws)))
    return profiles


def generate_personas_detailed(task_context, axes, n):
    personas = _population(task_context, axes, n)
    requests = [
        _expansion_request(task_context, p, axes, EXPANSION_TEMPERATURE, EXPANSION_MAX_TOKENS)
        for p in personas
    ]
    answers = ppol_llm.complete_many_json(requests, return_errors=True)
    read = [read_instruction(a) for a in answers]
    bad = [i for i, (t, _) in enumerate(read) if t is None]
    if bad:
        again = ppol_llm.complete_many_json(
            [_expansion_request(task_context, personas[i], axes, EXPANSION_TEMPERATURE,
                                EXPANSION_MAX_TOKENS, retry=True) for i in bad],
            return_errors=True,
        )
        for i, a in zip(bad, again):
            read[i] = read_instruction(a)
            if read[i][0] is None:
                first = answers[i]
                first = first.text if isinstance(first, tuple) else "(no reply: %s)" % first
                note("expansion of %s failed twice; composed its instruction from the profile. %s"
                     % (personas[i]["persona_id"], raw_replies_text([first])))
                read[i] = (fallback_instruction(personas[i], axes), "fallback")
    for p, (text, source) in zip(personas, read):
        p["expanded_instruction"] = text
        p["source"] = worst_source(p.get("source", "fallback"), source)
    return personas
