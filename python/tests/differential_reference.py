"""Differential check: ppol's fingerprints vs the reference package ppol 0.1.1 on generated dialogues.

Not a pytest module: run by `.ci/shared` with a Python that has `ppol==0.1.1` (installed with
`--no-deps`) and numpy. Dialogues are built from fragments chosen to hit every pattern bank and
the reference's quirks (curly apostrophes, ALL-CAPS words, digit runs, e-mails, `$` before a final
newline, whitespace-only turns, repeated trigrams, non-ASCII text). Exits non-zero on any
difference above 1e-9.
"""

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile

FRAGMENTS = [
    "please", "pls", "thanks", "thank you", "sorry", "excuse me", "if you don't mind", "no worries",
    "— furthermore", "however", "regarding", ";)", "ok", "Ok.", "thanks!!", "  Yes ", "ok thanks",
    "got it", "makes sense", "let me check", "I would be happy to", "our records show", "rest assured",
    "maybe", "i'm not sure", "I’m not sure", "dunno", "hmmm", "kind of", "definitely", "Certainly!",
    "100%", "100%sure", "i'm sure", "exactly", "what exactly", "are you sure", "i already told you",
    "I’ve already told you", "that's not right", "like i said", "scroll up", "what do you mean",
    "huh?", "what?", "sorry?", "i don't know what", "come again", "wait, what", "what is the status",
    "any update", "how do i", "somewhat about", "anywhere can i", "do you know", "i need the",
    "frustrated", "ugh", "argh", "oh come on", "ridiculous", "never mind", "forget it", "seriously?",
    "this is taking forever", "useless", "scam", "ly", "lying", "terrible", "a joke", "do your job",
    "instead", "actually, let", "how about", "or maybe", "scratch that", "forget that",
    "CANCEL", "SUBSCRIPTION", "PLEASE", "#W2378156", "order #w2378156", "12345678901", "123456",
    "19122", "jane.doe@example.com", "mia_li_3668", "EHGLP3", "i want a refund", "café", "naïve",
    "ÉTÉ", "日本語", "😀", "!!!", "?", "\n", "", "   ", "don't", "can't", "it's",
]


def make_dialogue(rng: random.Random, i: int) -> dict:
    n_user = rng.choice([0, 1, 1, 2, 2, 3, 4, 5, 6, 8, 12])
    conv = []
    repeated = " ".join(rng.sample(FRAGMENTS[:40], 2))
    for t in range(n_user):
        k = rng.choice([0, 1, 1, 2, 3, 5, 8])
        parts = [rng.choice(FRAGMENTS) for _ in range(k)]
        if rng.random() < 0.15:
            parts.append(repeated)
        sep = rng.choice([" ", " ", ", ", ". ", "\n"])
        text = sep.join(parts)
        if rng.random() < 0.1:
            text += "\n"
        if rng.random() < 0.05:
            text = "   "
        conv.append({"role": "user", "content": text})
        conv.append({"role": "assistant", "content": "Sure, let me check that for you."})
    return {"id": f"gen{i}", "task_id": f"t{i % 7}", "conversation": conv}


def load_reference_extractor():
    spec = importlib.util.find_spec("ppol")
    if spec is None:
        sys.exit("the reference package is not installed: pip install --no-deps ppol==0.1.1 numpy")
    path = os.path.join(list(spec.submodule_search_locations)[0], "fingerprinting.py")
    s = importlib.util.spec_from_file_location("ppol_ref_fingerprinting", path)
    m = importlib.util.module_from_spec(s)
    sys.modules[s.name] = m
    s.loader.exec_module(m)
    return m.BehavioralFingerprintExtractor()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ppol", required=True, help="path of the ppol binary")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--human", action="append", default=[], help="extra JSONL traces to compare")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    dialogues = [make_dialogue(rng, i) for i in range(args.n)]
    for path in args.human:
        with open(path, encoding="utf-8") as f:
            dialogues += [json.loads(line) for line in f if line.strip()]
    ex = load_reference_extractor()
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "d.jsonl")
        with open(src, "w", encoding="utf-8") as f:
            for d in dialogues:
                f.write(json.dumps(d) + "\n")
        out = subprocess.run([args.ppol, "fingerprint", src], check=True, capture_output=True, text=True).stdout
    ours = [json.loads(line) for line in out.splitlines()]
    assert len(ours) == len(dialogues)
    worst = (0.0, None)
    bad = 0
    for d, o in zip(dialogues, ours):
        ref = ex.compute_fingerprint(d["conversation"]).to_dict()
        for k, v in ref.items():
            diff = abs(o["features"][k] - v)
            if diff > worst[0]:
                worst = (diff, (d["id"], k, o["features"][k], v))
            if diff > 1e-9:
                bad += 1
    print(f"differential check: {len(dialogues)} dialogues, max |difference| {worst[0]:.3e}")
    if bad:
        print(f"FAILED: {bad} feature values differ by more than 1e-9; worst: {worst[1]}")
        sys.exit(1)


if __name__ == "__main__":
    main()
