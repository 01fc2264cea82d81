"""The core API from Python: traces, fingerprints, reference, discriminator, score, errors."""

import json
import subprocess
import sys

import numpy as np
import pytest

import ppol_rs
from conftest import DEMO, FIXTURES


def test_load_traces_every_format():
    ds = ppol_rs.load_traces([str(FIXTURES / "dialogues.jsonl"), FIXTURES / "dialogues.txt"])
    assert [d["id"] for d in ds] == ["j1", "j2", "j3", "dialogues:1", "dialogues:6"]
    usi = ppol_rs.load_traces(FIXTURES / "tau_usi_small.json", domain="airline")
    assert [d["id"] for d in usi] == ["airline_0", "airline_0_ann2"]
    assert usi[0]["meta"]["instruction"].startswith("Your user id is test_user_1")
    assert usi[0]["conversation"][-1]["content"] == "ok thx"


def test_fingerprint_numpy_and_pandas():
    fp = ppol_rs.fingerprint(FIXTURES / "dialogues.jsonl", as_frame=False)
    assert isinstance(fp.values, np.ndarray) and fp.values.shape == (3, 19)
    assert fp.feature_names == ppol_rs.FEATURE_NAMES
    assert fp.ids == ["j1", "j2", "j3"] and fp.task_ids == ["t1", "t1", "t2"]
    assert fp.values[0, 0] == 6.0
    df = ppol_rs.fingerprint(FIXTURES / "dialogues.jsonl")
    assert list(df.columns) == ["task_id"] + ppol_rs.FEATURE_NAMES
    assert df.loc["j1", "words_per_turn"] == 6.0
    v2 = ppol_rs.fingerprint(FIXTURES / "tau_usi_small.json", feature_set="v2", as_frame=False)
    assert v2.values[0, ppol_rs.FEATURE_NAMES.index("acknowledgment_rate")] == 0.5


def test_fingerprint_accepts_dicts_and_matches_cli():
    ds = ppol_rs.load_traces(FIXTURES / "dialogues.jsonl")
    a = ppol_rs.fingerprint(ds, as_frame=False).values
    out = subprocess.run(
        [sys.executable, "-m", "ppol_rs", "fingerprint", str(FIXTURES / "dialogues.jsonl")],
        check=True, capture_output=True, text=True,
    ).stdout
    b = np.array([[json.loads(l)["features"][n] for n in ppol_rs.FEATURE_NAMES] for l in out.splitlines()])
    assert np.array_equal(a, b)


def test_reference_discriminator_score_round_trip(tmp_path):
    ref = ppol_rs.HumanReference.from_traces(DEMO / "human.jsonl")
    assert ref.n_dialogues == 25 and ref.feature_set == "ppol-0.1.1"
    assert ref.mean.shape == (19,) and ref.fingerprints.shape == (25, 19)
    ref.save(tmp_path / "ref.json")
    ref2 = ppol_rs.HumanReference.load(tmp_path / "ref.json")
    assert np.array_equal(ref2.mean, ref.mean)
    disc = ppol_rs.Discriminator.train(ref, DEMO / "baseline.jsonl", folds=3)
    assert disc.grouped_auc is not None and disc.grouped_auc > 0.8
    disc.save(tmp_path / "disc.json")
    disc2 = ppol_rs.Discriminator.load(tmp_path / "disc.json")
    x = ppol_rs.fingerprint(DEMO / "candidates.jsonl", as_frame=False).values
    assert np.array_equal(disc.p_human(x), disc2.p_human(x))
    s_cand = ppol_rs.score(ref, DEMO / "candidates.jsonl", disc)
    s_base = ppol_rs.score(ref, DEMO / "baseline.jsonl", disc)
    assert set(s_cand["dice"]) == {"D1", "D2", "D3", "D4", "overall"}
    assert s_cand["human_likeness"] > s_base["human_likeness"]
    assert s_cand["combined"] == pytest.approx(0.5 * s_cand["human_likeness"] + 0.5 * s_cand["coverage"])


def test_errors_are_specific_classes():
    with pytest.raises(ppol_rs.ParseError, match=r"bad_content_type.jsonl: line 2.conversation\[0\].content"):
        ppol_rs.fingerprint(FIXTURES / "bad_content_type.jsonl")
    with pytest.raises(ppol_rs.IoError, match="nope.jsonl"):
        ppol_rs.load_traces("nope.jsonl")
    with pytest.raises(ppol_rs.ConfigError, match="unknown feature set"):
        ppol_rs.fingerprint(FIXTURES / "dialogues.jsonl", feature_set="v9")
    with pytest.raises(ppol_rs.ParseError, match=r"traces\[0\]: expected a dialogue dict"):
        ppol_rs.fingerprint([42])
    assert issubclass(ppol_rs.ParseError, ppol_rs.Error) and issubclass(ppol_rs.Error, Exception)
    ref = ppol_rs.HumanReference.from_traces(DEMO / "human.jsonl", feature_set="v2")
    with pytest.raises(ppol_rs.FeatureSetMismatch):
        disc = ppol_rs.Discriminator.train(ppol_rs.HumanReference.from_traces(DEMO / "human.jsonl"), DEMO / "baseline.jsonl", folds=2)
        ppol_rs.score(ref, DEMO / "candidates.jsonl", disc)


def test_python_m_runs_the_cli():
    r = subprocess.run([sys.executable, "-m", "ppol_rs", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("ppol ")
    r = subprocess.run([sys.executable, "-m", "ppol_rs", "fingerprint", "missing.jsonl"], capture_output=True, text=True)
    assert r.returncode == 2 and "missing.jsonl" in r.stderr
