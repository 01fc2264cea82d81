"""`ppol export sft --format openai|hf|ppol`: each format read back by its toolkit's reader.

* ``hf`` is loaded with Hugging Face ``datasets.load_dataset("json", data_files=...)``, the
  reader TRL's SFTTrainer is fed from (skipped when ``datasets`` is not installed).
* ``openai`` has no offline validator in the ``openai`` package, so :func:`check_openai_record`
  follows OpenAI's documented chat fine-tuning format: only ``messages`` / ``tools`` /
  ``parallel_tool_calls`` at the top, known roles and keys per role, at least one assistant
  message, tool calls with ids and JSON-string arguments of a declared tool, each answered by a
  ``tool`` message with that id before the conversation moves on.
"""

import json
import os
import subprocess
import sys

import pytest

import ppol_rs

OPENAI_TOP = {"messages", "tools", "parallel_tool_calls"}
OPENAI_KEYS = {
    "system": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "weight", "refusal"},
    "tool": {"role", "content", "tool_call_id"},
}


def check_openai_record(rec):
    assert set(rec) <= OPENAI_TOP, set(rec) - OPENAI_TOP
    tools = rec.get("tools", [])
    names = set()
    for t in tools:
        assert t["type"] == "function"
        f = t["function"]
        assert isinstance(f["name"], str) and f["name"]
        assert isinstance(f.get("parameters", {}), dict)
        names.add(f["name"])
    msgs = rec["messages"]
    assert isinstance(msgs, list) and msgs
    assert any(m["role"] == "assistant" for m in msgs), "no assistant message to train on"
    assert msgs[-1]["role"] == "assistant"
    pending = []
    for i, m in enumerate(msgs):
        role = m["role"]
        assert role in OPENAI_KEYS, role
        assert set(m) <= OPENAI_KEYS[role], (i, set(m) - OPENAI_KEYS[role])
        if role != "tool":
            assert not pending, f"message {i} ({role}) before tool calls {pending} were answered"
        if role in ("system", "user"):
            assert isinstance(m["content"], str)
        elif role == "assistant":
            calls = m.get("tool_calls")
            if calls is None:
                assert isinstance(m["content"], str)
                continue
            assert "content" not in m or m["content"] is None or isinstance(m["content"], str)
            assert calls, "empty tool_calls"
            if rec.get("parallel_tool_calls") is False:
                assert len(calls) == 1
            for c in calls:
                assert set(c) == {"id", "type", "function"}
                assert c["type"] == "function" and isinstance(c["id"], str) and c["id"]
                assert c["function"]["name"] in names, c["function"]["name"]
                assert isinstance(c["function"]["arguments"], str)
                assert isinstance(json.loads(c["function"]["arguments"]), dict)
                pending.append(c["id"])
        else:
            assert m["tool_call_id"] in pending, (i, m["tool_call_id"], pending)
            pending.remove(m["tool_call_id"])
            assert isinstance(m["content"], str)
    assert not pending
    assert isinstance(rec["parallel_tool_calls"], bool)


@pytest.fixture(scope="module")
def episodes_file(tmp_path_factory):
    """Demo episodes (with tool calls) whose personas are p0..p5, so a hold-out can split them."""
    eps = ppol_rs.episodes("demo", "all", trials=2)
    assert any(t.get("tool_calls") for e in eps for t in e["conversation"])
    path = tmp_path_factory.mktemp("exports") / "eps.jsonl"
    with open(path, "w") as f:
        for i, e in enumerate(eps):
            e["persona_id"] = f"p{i % 6}"
            f.write(json.dumps(e) + "\n")
    return path, eps


def test_openai_records_follow_the_fine_tuning_format(episodes_file):
    path, eps = episodes_file
    r = ppol_rs.export_sft([path], all=True, format="openai")
    assert len(r["train"]) == len(eps)
    n_calls = 0
    for rec in r["train"]:
        check_openai_record(rec)
        n_calls += sum(len(m.get("tool_calls", [])) for m in rec["messages"])
    assert n_calls > 0
    # every call of the episodes is exported, with its arguments intact
    want = sum(len(t.get("tool_calls", [])) for e in eps for t in e["conversation"])
    assert n_calls == want


def test_hf_rows_load_with_datasets_and_keep_arguments(episodes_file, tmp_path):
    try:
        import datasets
    except ImportError:
        if os.environ.get("PPOL_REQUIRE_TOOLKITS") == "1":
            pytest.fail("PPOL_REQUIRE_TOOLKITS=1 but the datasets package is not installed")
        pytest.skip("Hugging Face datasets is not installed (pip install datasets; see .ci/browser)")
    path, eps = episodes_file
    out = tmp_path / "train.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "ppol_rs", "export", "sft", str(path), "--all", "--format", "hf", "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "as hf records" in proc.stderr
    ds = datasets.load_dataset("json", data_files=str(out), split="train")
    assert set(ds.column_names) == {"messages", "tools"}
    assert len(ds) == len(eps)
    by_id = {}
    for e in eps:
        for t in e["conversation"]:
            for c in t.get("tool_calls", []):
                by_id.setdefault(c["name"], []).append(c["arguments"])
    n_calls = 0
    for row in ds:
        tools = json.loads(row["tools"])  # a JSON string: Arrow would pad merged schemas with nulls
        names = {t["function"]["name"] for t in tools}
        assert all(t["type"] == "function" and "parameters" in t["function"] for t in tools)
        pending = {}
        for m in row["messages"]:
            assert m["role"] in ("system", "user", "assistant", "tool")
            assert isinstance(m["content"], str)
            for c in m.get("tool_calls") or []:
                n_calls += 1
                assert c["type"] == "function" and c["function"]["name"] in names
                args = c["function"]["arguments"]
                assert isinstance(args, dict)  # an object, as chat templates expect
                # Arrow merges the argument keys of all tools; TRL drops the None padding.
                args = {k: v for k, v in args.items() if v is not None}
                assert args in by_id[c["function"]["name"]]
                pending[c["id"]] = c["function"]["name"]
            if m["role"] == "tool":
                assert pending.pop(m["tool_call_id"]) == m["name"]
        assert not pending
        assert row["messages"][-1]["role"] == "assistant"
    assert n_calls > 0


def test_held_out_personas_stay_apart_in_every_format(episodes_file):
    path, eps = episodes_file
    sizes = set()
    for fmt in ("ppol", "openai", "hf"):
        r = ppol_rs.export_sft([path], all=True, heldout_fraction=0.4, seed=3, format=fmt)
        assert r["heldout"] and r["train"], fmt
        assert len(r["train"]) + len(r["heldout"]) == len(eps)
        held = set(r["heldout_personas"])
        assert held and held < {f"p{i}" for i in range(6)}
        n_held = sum(1 for i, _ in enumerate(eps) if f"p{i % 6}" in held)
        assert len(r["heldout"]) == n_held, fmt
        sizes.add((len(r["train"]), len(r["heldout"])))
    assert len(sizes) == 1, "the split does not depend on the format"
    ppol = ppol_rs.export_sft([path], all=True, heldout_fraction=0.4, seed=3)
    assert {rec["metadata"]["persona_id"] for rec in ppol["heldout"]} == set(ppol["heldout_personas"])


def test_default_format_is_unchanged_and_unknown_formats_are_refused(episodes_file):
    path, _ = episodes_file
    rec = ppol_rs.export_sft([path], all=True)["train"][0]
    assert set(rec) == {"messages", "tools", "metadata"}
    with pytest.raises(ppol_rs.ConfigError, match="unknown export format 'jsonl'; use ppol, openai or hf"):
        ppol_rs.export_sft([path], format="jsonl")
