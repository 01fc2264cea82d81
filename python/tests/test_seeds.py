"""The LLM seeds and the generator helper library against a weak model.

The seeds run here as plain modules with a scripted stand-in for ``ppol_llm`` (the sandbox's
LLM proxy), so the tests need neither the sandbox nor a model: they feed the kind of answers a
135M model writes (fences, single quotes, trailing commas, truncated arrays, lone objects,
prose) and check what comes out. The end-to-end path through the real sandbox is covered by
``tests/interop.rs``.
"""

import importlib.util
import json
import pathlib
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEEDS = ROOT / "seeds"
UTILS = ROOT / "generators" / "ppol" / "evolution" / "_generator_utils.py"
HELPERS = ROOT / "generators" / "ppol_personas.py"


class LLMError(RuntimeError):
    pass


def _real_ppol_llm():
    spec = importlib.util.spec_from_file_location("ppol_llm_real", ROOT / "generators" / "ppol_llm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PPOL_LLM = _real_ppol_llm()


class ScriptedLLM:
    """A stand-in for ``ppol_llm``: answers from a function of (prompt, request), counts calls."""

    def __init__(self, answer):
        self.answer = answer
        self.requests = []
        self.LLMError = LLMError

    def _one(self, req):
        self.requests.append(req)
        out = self.answer(req["prompt"], req)
        if isinstance(out, Exception):
            raise out
        return out

    def complete(self, prompt, system=None, temperature=0.7, max_tokens=800, schema=None):
        return self._one({"prompt": prompt, "system": system, "temperature": temperature,
                          "max_tokens": max_tokens, "schema": schema})

    # A schema-less endpoint: answers come back unconstrained (the mode is ``mode``).
    mode = "unconstrained"

    def _json(self, text):
        return PPOL_LLM.JsonAnswer(PPOL_LLM._parse_json(text), text, self.mode)

    def complete_json(self, prompt, schema, system=None, temperature=0.7, max_tokens=800):
        return self._json(self.complete(prompt, system, temperature, max_tokens, schema))

    def complete_many_json(self, requests, return_errors=False):
        return [a if isinstance(a, LLMError) else self._json(a)
                for a in self.complete_many(requests, return_errors)]

    def complete_many(self, requests, return_errors=False):
        out = []
        for r in requests:
            try:
                out.append(self._one(dict(r)))
            except LLMError as e:
                if not return_errors:
                    raise
                out.append(e)
        return out


def _provide(llm, monkeypatch):
    """What the sandbox provides beside the program: ``ppol_llm`` (here ``llm``), and the
    helper modules under ``generators/`` imported afresh (they bind ``ppol_llm`` at import)."""
    monkeypatch.setitem(sys.modules, "ppol_llm", llm)
    for name in [m for m in sys.modules if m in ("ppol", "ppol_personas") or m.startswith("ppol.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(ROOT / "generators"))


def load(path, llm, monkeypatch):
    _provide(llm, monkeypatch)
    spec = importlib.util.spec_from_file_location("seed_under_test_%s" % path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_utils(llm, monkeypatch):
    _provide(llm, monkeypatch)
    import ppol.evolution._generator_utils as utils  # noqa: E402

    return utils


TASK = "You want to exchange the t-shirt of order #W7209932 for a blue one.\n\nContext: domain=retail"

# What the 135M model wrote for the population prompt (measured), and friends.
FENCED_SINGLE_QUOTES = """Sure! Here are the personas:
```json
[{'persona_id': 'Busy Bob', 'description': "Bob's in a hurry.", 'axis_placement': {'terse': True, 'skeptical': 'yes'},},
 {'persona_id': 'calm_carla', 'description': 'Carla is patient.', 'axis_placement': {'frustrated': False}},]
```"""
TRUNCATED = '[{"persona_id": "a", "description": "A writes a lot."}, {"persona_id": "b", "description": "B is blunt", "axis_placement": {"terse": true, "skeptical": '
LONE_OBJECT = '```\n{"persona_id": "AYL-10283",\n     "description": "You received your order.",\n     "axis_placement": "worst possible way"\n}\n```'
PYTHON_DICT = 'Here is an example:\n```python\nimport json\ndata = {\n    "persona_id": 1234567890123456789,\n    "description": ["terse", "skeptical"]\n}\njson.dumps(data)\n```'
PROSE = "It's not possible to create a JSON array containing exactly 5 different people."
INSTRUCTION = "You are in a hurry and type short messages without greetings. " * 4


def test_the_helpers_live_in_one_module():
    """The JSON repair and the persona helpers are ``ppol_personas``'s alone: the seeds and the
    reference shim import them instead of carrying copies (they drifted apart before)."""
    helpers = ("def _repair_one", "def json_values", "def persona_rows", "def pad_population",
               "def fallback_instruction", "def clean_instruction", "def raw_excerpt")
    assert all(h in HELPERS.read_text() for h in helpers)
    for path in (SEEDS / "two_stage_llm.py", SEEDS / "direct_prompt.py", UTILS):
        code = path.read_text()
        assert "from ppol_personas import" in code, path
        assert not [h for h in helpers if h in code], path
        assert "_SMART_QUOTES" not in code, path


@pytest.mark.parametrize("text, expected", [
    (FENCED_SINGLE_QUOTES, ["Busy Bob", "calm_carla"]),
    (TRUNCATED, ["a", "b"]),
    ('{"persona_id": "x"} and also {"persona_id": "y"}', ["x", "y"]),
    ('{"personas": [{"persona_id": "x"}, {"persona_id": "y"}]}', ["x", "y"]),
    ('[{persona_id: "x", text: "t"}]', ["x"]),
    ('[{"persona_id": "x" "text": "t"} {"persona_id": "y"}]', ["x", "y"]),
    ('[{"persona_id": "q", "text": "he said "hi" to me"}]', ["q"]),
    ("[{'persona_id': 'it's_me', 'text': 'I can't go'}]", ["it's_me"]),
    ('[{"persona_id": "c", // a comment\n "text": "t"}, ]', ["c"]),
    (PROSE, []),
])
def test_json_repair(text, expected, monkeypatch):
    helpers = load(HELPERS, ScriptedLLM(lambda p, r: ""), monkeypatch)
    assert [r.get("persona_id") for r in helpers.persona_rows(text)] == expected


def test_repair_keeps_what_it_can_of_a_truncated_answer(monkeypatch):
    helpers = load(HELPERS, ScriptedLLM(lambda p, r: ""), monkeypatch)
    rows = helpers.persona_rows(TRUNCATED)
    assert rows[1]["axis_placement"] == {"terse": True}
    assert helpers.raw_excerpt("x" * 5000).startswith("x" * 2048)
    assert len(helpers.raw_excerpt("x" * 5000)) < 2100


def test_two_stage_retries_pads_and_falls_back_per_persona(monkeypatch, capsys):
    calls = {"population": 0, "expansion": 0}

    def answer(prompt, req):
        if "Invent exactly" in prompt:
            calls["population"] += 1
            # First answer: two usable objects in broken JSON; the retry: prose.
            return FENCED_SINGLE_QUOTES if calls["population"] == 1 else PROSE
        calls["expansion"] += 1
        if "Bob" in prompt and "previous answer" not in prompt:
            return LLMError("gave up after 5 attempt(s): timeout")
        if "Carla" in prompt:
            return ""  # empty twice: composed from the profile
        return INSTRUCTION

    llm = ScriptedLLM(answer)
    seed = load(SEEDS / "two_stage_llm.py", llm, monkeypatch)
    rows = list(seed.generate_personas_detailed(TASK, seed.DIVERSITY_AXES, 4))
    assert len(rows) == 4
    names = [a["behavior"] for a in seed.DIVERSITY_AXES]
    for r in rows:
        assert set(r["axis_placement"]) == set(names)
        assert all(isinstance(v, bool) for v in r["axis_placement"].values())
        assert len(r["expanded_instruction"].split()) >= 3
    assert len({r["persona_id"] for r in rows}) == 4
    # The pads are not copies: every persona has its own axis combination.
    assert len({tuple(sorted(r["axis_placement"].items())) for r in rows}) == 4
    assert rows[0]["axis_placement"]["terse"] and rows[0]["axis_placement"]["skeptical"]
    # Stage 1 was asked twice (the retry says why); max_tokens follows N, not 8000.
    pops = [r for r in llm.requests if "Invent exactly" in r["prompt"]]
    assert len(pops) == 2
    assert "only 2 of 4 usable objects" in pops[1]["prompt"]
    assert pops[0]["max_tokens"] == 250 * 4 + 400
    # Bob's expansion failed once and was retried; Carla's was composed without the model.
    carla = next(r for r in rows if r["persona_id"] == "calm_carla")
    assert carla["expanded_instruction"].startswith("You are the customer described here: Carla is patient")
    err = capsys.readouterr().err
    assert "padded 2" in err and "raw reply 1 (first 2 KB)" in err
    assert "expansion of calm_carla failed twice" in err


@pytest.mark.parametrize("first", [LONE_OBJECT, PYTHON_DICT])
def test_two_stage_survives_what_the_small_model_wrote(first, monkeypatch):
    def answer(prompt, req):
        return first if "Invent exactly" in prompt else INSTRUCTION

    seed = load(SEEDS / "two_stage_llm.py", ScriptedLLM(answer), monkeypatch)
    rows = seed.generate_personas_detailed(TASK, seed.DIVERSITY_AXES, 3)
    assert len(rows) == 3 and len({r["persona_id"] for r in rows}) == 3


def test_two_stage_without_any_profile_places_them_and_keeps_the_raw_replies(monkeypatch, capsys):
    # Stage 1 answers prose twice; stage 2 still writes every instruction.
    seed = load(SEEDS / "two_stage_llm.py",
                ScriptedLLM(lambda p, r: INSTRUCTION if "instruction" in p.lower() and "persona_id" not in p
                            else PROSE + " " + "z" * 3000), monkeypatch)
    rows = seed.generate_personas_detailed(TASK, seed.DIVERSITY_AXES, 3)
    assert [r["persona_id"] for r in rows] == ["profile_1", "profile_2", "profile_3"]
    placements = [tuple(sorted(r["axis_placement"].items())) for r in rows]
    assert len(set(placements)) == 3, placements
    assert all(r["expanded_instruction"] for r in rows)
    assert all("placed on the axes" in r["reasoning"] for r in rows)
    err = capsys.readouterr().err
    assert "the population answer contained no persona objects (2 attempts)" in err
    assert "raw reply 1 (first 2 KB): It's not possible" in err
    assert "raw reply 2 (first 2 KB)" in err


def test_direct_prompt_repairs_retries_and_cycles(monkeypatch, capsys):
    answers = iter([PROSE, '```json\n[{"persona_id": "a", "text": "You type in caps."}, {"persona_id": "b", "text": "You are polite'])
    llm = ScriptedLLM(lambda p, r: next(answers))
    seed = load(SEEDS / "direct_prompt.py", llm, monkeypatch)
    rows = seed.generate_personas_detailed(TASK, [], 5)
    assert [r["persona_id"] for r in rows] == ["a", "b", "a_2", "b_2", "a_3"]
    assert rows[1]["text"] == "You are polite"
    assert all(r["axis_placement"] == {} for r in rows)
    assert "previous answer contained no usable persona" in llm.requests[1]["prompt"]
    assert "cycled to 5" in capsys.readouterr().err


def test_direct_prompt_failure_carries_the_raw_reply(monkeypatch):
    seed = load(SEEDS / "direct_prompt.py", ScriptedLLM(lambda p, r: PROSE), monkeypatch)
    with pytest.raises(ValueError) as e:
        seed.generate_personas_detailed(TASK, [], 2)
    assert "no usable persona (2 attempts)" in str(e.value)
    assert "raw reply 1 (first 2 KB): " + PROSE in str(e.value)


PROSE_PERSONAS = """Sure! Here are two personas:

1. **Persona 1:** You are Dana, a nurse coming off a night shift. You type short messages on your phone, skip greetings, and get curt when the agent asks for details you already gave. You want the refund today and say so twice.

2. **Persona 2:** You are Mr. Okafor, a retired teacher who writes long, polite messages with full sentences. You ask the agent to explain each step, double-check every number, and only agree once you understand the fee."""

LONG_REFUSAL = ("I'm sorry, but as a customer service assistant I am not able to write personas for "
                "real customers, because that would mean inventing details about people who contact "
                "support and I do not have that information.")


def test_direct_prompt_takes_personas_written_as_prose(monkeypatch, capsys):
    seed = load(SEEDS / "direct_prompt.py", ScriptedLLM(lambda p, r: PROSE_PERSONAS), monkeypatch)
    rows = seed.generate_personas_detailed(TASK, [], 3)
    assert [r["persona_id"] for r in rows] == ["prose_1", "prose_2", "prose_1_2"]
    assert rows[0]["text"].startswith("You are Dana, a nurse coming off a night shift.")
    assert rows[0]["text"].endswith("say so twice.")
    assert rows[1]["text"].startswith("You are Mr. Okafor")
    assert "Persona" not in rows[1]["text"] and "**" not in rows[1]["text"]
    assert rows[0]["description"] == "You are Dana, a nurse coming off a night shift."
    err = capsys.readouterr().err
    assert "took 2 persona(s) from their prose" in err and "raw reply 1" in err
    # a refusal, however long, is not a persona
    seed = load(SEEDS / "direct_prompt.py", ScriptedLLM(lambda p, r: LONG_REFUSAL), monkeypatch)
    with pytest.raises(ValueError, match="no usable persona"):
        seed.generate_personas_detailed(TASK, [], 2)


def test_direct_prompt_takes_other_fields_when_text_is_missing(monkeypatch):
    seed = load(SEEDS / "direct_prompt.py",
                ScriptedLLM(lambda p, r: '[{"persona_id": "p", "persona": "You are brisk."}]'),
                monkeypatch)
    rows = seed.generate_personas_detailed(TASK, [], 2)
    assert rows[0]["text"] == "You are brisk."
    # A description alone is not a persona text (as in the reference): nothing usable.
    seed = load(SEEDS / "direct_prompt.py", ScriptedLLM(lambda p, r: LONE_OBJECT), monkeypatch)
    with pytest.raises(ValueError, match="no usable persona"):
        seed.generate_personas_detailed(TASK, [], 2)


def test_helper_library_has_the_same_survival(monkeypatch, capsys):
    state = {"n": 0}

    def answer(prompt, req):
        if "Invent exactly" in prompt:
            state["n"] += 1
            return TRUNCATED if state["n"] == 1 else LONE_OBJECT
        return LLMError("timeout") if "A writes" in prompt else INSTRUCTION

    utils = load_utils(ScriptedLLM(answer), monkeypatch)
    axes = [{"behavior": "terse", "definition": "d", "presence": {"true": "Short.", "false": "Long."}},
            {"behavior": "skeptical", "definition": "d", "presence": {"true": "Doubts.", "false": "Trusts."}}]
    pop = utils.generate_population(TASK, axes, 4)
    assert [p["persona_id"] for p in pop][:3] == ["a", "b", "ayl_10283"]
    assert len(pop) == 4
    # The pad takes a combination none of the model's profiles has.
    model_made = {tuple(p["axis_placement"].values()) for p in pop[:3]}
    assert tuple(pop[3]["axis_placement"].values()) not in model_made
    out = utils.expand_personas_parallel(TASK, pop, axes)
    a = next(p for p in out if p["persona_id"] == "a")
    assert a["expanded_instruction"].startswith("You are the customer described here: A writes a lot")
    assert "Long. Trusts." in a["expanded_instruction"]
    assert "failed twice" in capsys.readouterr().err
    with pytest.raises(ValueError, match="raw reply 2"):
        load_utils(ScriptedLLM(lambda p, r: PROSE), monkeypatch).generate_population(TASK, axes, 2)


def test_seed_rows_pass_json_round_trip(monkeypatch):
    """Rows are plain JSON (what the harness sends back)."""
    seed = load(SEEDS / "two_stage_llm.py",
                ScriptedLLM(lambda p, r: FENCED_SINGLE_QUOTES if "Invent" in p else INSTRUCTION),
                monkeypatch)
    rows = seed.generate_personas_detailed(TASK, seed.DIVERSITY_AXES, 2)
    assert json.loads(json.dumps(rows)) == rows
    assert isinstance(types.SimpleNamespace, type)


def _population_json(seed, n):
    names = [a["behavior"] for a in seed.DIVERSITY_AXES]
    return json.dumps({"personas": [
        {"persona_id": "p%d" % i, "description": "Person %d writes briefly." % i,
         "axis_placement": {k: bool((i >> j) & 1) for j, k in enumerate(names)},
         "reasoning": "Why not."} for i in range(n)]})


def test_two_stage_sends_schemas_and_records_where_each_persona_came_from(monkeypatch):
    def answer(prompt, req):
        if "Invent exactly" in prompt:
            return _population_json(seed, 3)
        if "Person 1 " in prompt:
            return INSTRUCTION  # prose instead of the JSON object: read as is
        if "Person 2 " in prompt:
            return '{"instruction": ""}'  # JSON without an instruction, twice
        return json.dumps({"instruction": INSTRUCTION})

    llm = ScriptedLLM(answer)
    seed = load(SEEDS / "two_stage_llm.py", llm, monkeypatch)
    rows = seed.generate_personas_detailed(TASK, seed.DIVERSITY_AXES, 3)
    assert [r["source"] for r in rows] == ["model-json", "repaired", "fallback"]
    assert rows[0]["expanded_instruction"] == INSTRUCTION.strip()
    assert rows[1]["expanded_instruction"] == INSTRUCTION.strip()
    assert rows[2]["expanded_instruction"].startswith("You are the customer described here")
    pop = next(r for r in llm.requests if "Invent exactly" in r["prompt"])
    people = pop["schema"]["properties"]["personas"]
    assert people["maxItems"] == 3 and people["minItems"] == 3
    placement = people["items"]["properties"]["axis_placement"]
    assert placement["required"] == [a["behavior"] for a in seed.DIVERSITY_AXES]
    assert all(v == {"type": "boolean"} for v in placement["properties"].values())
    # no maxLength: llama.cpp's grammar nests one optional rule per character and crawls
    assert '"maxLength"' not in json.dumps(pop["schema"])
    assert all(r["schema"] == seed.EXPANSION_SCHEMA for r in llm.requests if "Invent exactly" not in r["prompt"])
    # a large population leaves the array's length out of the schema
    assert "maxItems" not in seed.population_schema(seed.DIVERSITY_AXES, 20)["properties"]["personas"]


def test_two_stage_repaired_population_is_marked_repaired(monkeypatch):
    def answer(prompt, req):
        if "Invent exactly" in prompt:
            return "Sure!\n```json\n" + _population_json(seed, 3).replace('"', "'") + "\n```"
        return json.dumps({"instruction": INSTRUCTION})

    seed = load(SEEDS / "two_stage_llm.py", ScriptedLLM(answer), monkeypatch)
    rows = seed.generate_personas_detailed(TASK, seed.DIVERSITY_AXES, 3)
    assert [r["source"] for r in rows] == ["repaired"] * 3


def test_direct_prompt_records_where_each_persona_came_from(monkeypatch):
    persona = {"persona_id": "a", "description": "A.", "reasoning": "R.", "text": INSTRUCTION}
    for reply, sources in [
        (json.dumps({"personas": [persona, dict(persona, persona_id="b")]}), ["model-json", "model-json", "fallback"]),
        ("Here:\n" + json.dumps([persona]).replace('"', "'"), ["repaired", "fallback", "fallback"]),
    ]:
        llm = ScriptedLLM(lambda p, r, reply=reply: reply)
        seed = load(SEEDS / "direct_prompt.py", llm, monkeypatch)
        rows = seed.generate_personas_detailed(TASK, [], 3)
        assert [r["source"] for r in rows] == sources, reply
        assert llm.requests[0]["schema"]["properties"]["personas"]["items"]["required"] == [
            "persona_id", "description", "reasoning", "text"]


class _FakeChannel:
    """The host's side of ``ppol_llm``'s channel: answers each request from ``reply``."""

    def __init__(self, reply):
        self.reply = reply
        self.frames = []

    def call(self, frame):
        self.frames.append(frame)
        return {"type": "llm_result", "results": [self.reply(r) for r in frame["requests"]]}


def test_ppol_llm_sends_the_schema_and_says_how_the_answer_was_constrained():
    llm = _real_ppol_llm()
    modes = iter(["json_object", None, "unconstrained"])

    def reply(req):
        mode = next(modes)
        out = {"text": '{"a": 1}' if req["prompt"] != "prose" else "just words"}
        if mode:
            out["schema_mode"] = mode
        return out

    channel = _FakeChannel(reply)
    llm._install(channel, 7, True)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    ans = llm.complete_json("q", schema, max_tokens=10)
    assert (ans.value, ans.constrained, ans.mode) == ({"a": 1}, True, "json_object")
    assert channel.frames[0]["requests"][0]["schema"] == schema
    # complete() stays a str, and without a schema sends none
    assert llm.complete("plain") == '{"a": 1}'
    assert "schema" not in channel.frames[1]["requests"][0]
    [prose] = llm.complete_many_json([{"prompt": "prose", "schema": schema}])
    assert (prose.value, prose.text, prose.constrained) == (None, "just words", False)
    with pytest.raises(TypeError):
        llm.complete_json("q", "not a schema")
