"""Structural and LLM edits keep persona text grammatical (issue #37): fragments are recombined
only between whole sentences (cutting "If something is inconvenient, mention it lightly ..."
after "mention it" and joining "and polite even when ..." made "mention it and polite even
when ..."), and an LLM's sentence is checked as one before it replaces or joins others."""

import ast
import importlib.util
import random
import re

from conftest import ROOT

spec = importlib.util.spec_from_file_location("ppol_mutate_ast", ROOT / "generators" / "mutate_ast.py")
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)

SEED = (ROOT / "seeds" / "offline_templates.py").read_text()
SAMPLE = (ROOT / "tests" / "fixtures" / "generators" / "structural_sample.py").read_text()


def literals(code):
    return {name: ast.literal_eval(node) for name, node in m.literal_assignments(ast.parse(code)).items()}


def recombinations(code, seeds):
    """(parent a, parent b, child) of every recombination the mutator made over `seeds`."""
    out = []
    before = literals(code)
    for seed in seeds:
        try:
            new, done = m.Mutator(code, [], random.Random(seed)).run()
        except m.NoEdit:
            continue
        after = literals(new)
        for d in done:
            hit = re.match(r"recombined fragments (.+)\[(\d+)\]\+(.+)\[(\d+)\]$", d)
            if hit:
                path, i, _, j = hit.groups()
                values, child = eval(path, {}, before), eval(path, {}, after)
                out.append((values[int(i)], values[int(j)], child[int(i)]))
    return out


def test_recombined_fragments_are_made_of_whole_sentences():
    seen = recombinations(SAMPLE, range(300)) + recombinations(SEED, range(300))
    assert seen, "some seed recombines (STYLE_FRAGMENTS holds two-sentence fragments)"
    for a, b, child in seen:
        whole = set(m.sentences(a)) | set(m.sentences(b))
        assert all(s in whole for s in m.sentences(child)), (a, b, child)


def test_one_sentence_fragments_are_never_cut():
    a = "If something is inconvenient, mention it lightly ('that's a bit annoying') and move on."
    b = "Stay calm and polite even when the answer is not what you hoped for."
    assert m.split_points(a) == [] and m.split_points(b) == []
    assert all(m.recombine(random.Random(s), a, b) is None for s in range(50))
    # an ellipsis or a quoted aside is not the end of a sentence
    c = "Trail off sometimes ('I think it was... not sure') and let the agent prompt you. Then stop."
    assert m.sentences(c) == [
        "Trail off sometimes ('I think it was... not sure') and let the agent prompt you.",
        "Then stop.",
    ]


def test_an_llm_sentence_is_checked_as_a_sentence():
    target = "MECHANICS['terse']['true'][0]"
    code, done, skipped = m.apply_edits(SEED, [
        {"op": "set", "target": target, "text": "type in lowercase, with with no greeting"},
        {"op": "add", "target": "MECHANICS['skeptical']['true']", "text": "ask for the rule in writing"},
    ])
    after = literals(code)
    assert after["MECHANICS"]["terse"]["true"][0] == "Type in lowercase, with no greeting."
    assert after["MECHANICS"]["skeptical"]["true"][-1] == "Ask for the rule in writing."
    assert skipped == []
    # text that is not a sentence (a name in a list of names) is left as written
    code, _, _ = m.apply_edits(SAMPLE, [{"op": "set", "target": "OPENERS[0]", "text": "hey there"}])
    assert literals(code)["OPENERS"][0] == "hey there"
