"""Parity with the reference's own outputs, from Python (needs ../shared)."""

import json

import numpy as np

import ppol_rs


def expected(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def test_shared_feature_parity(shared):
    p = shared / "parity"
    pairs = [(p / f"{n}.jsonl", p / f"{n}.ppol-0.1.1.features.jsonl")
             for n in ["edge_cases", "synthetic_baseline", "synthetic_candidate", "synthetic_human"]]
    pairs.append((shared / "human" / "tau_usi_airline_sample.jsonl", p / "tau_usi_airline_sample.ppol-0.1.1.features.jsonl"))
    for src, exp in pairs:
        fp = ppol_rs.fingerprint(src, as_frame=False)
        want = expected(exp)
        assert fp.ids == [w["id"] for w in want]
        ref = np.array([[w["features"][n] for n in ppol_rs.FEATURE_NAMES] for w in want])
        assert np.max(np.abs(fp.values - ref)) <= 1e-9, src


def test_shared_coverage_and_dice_parity(shared):
    p = shared / "parity"
    ref = ppol_rs.HumanReference.from_traces(p / "synthetic_human.jsonl")
    # the discriminator does not enter coverage or Dice
    disc = ppol_rs.Discriminator.train(ref, p / "synthetic_baseline.jsonl", trees=10, folds=2)
    for raw, name in [(False, "coverage.json"), (True, "coverage-raw.json")]:
        with open(p / f"synthetic_candidate.ppol-0.1.1.{name}", encoding="utf-8") as f:
            want = json.load(f)
        s = ppol_rs.score(ref, p / "synthetic_candidate.jsonl", disc, raw=raw)
        assert abs(s["coverage"] - want["intra_set_diversity"]) <= 1e-9
        assert abs(s["d_ref"] - want["d_ref"]) <= 1e-9
        for k in ["D1", "D2", "D3", "D4", "overall"]:
            assert abs(s["dice"][k] - want["dice_alignment"][k]) <= 1e-9
