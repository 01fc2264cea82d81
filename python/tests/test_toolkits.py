"""The ``openai``, ``hf`` and ``llamafactory`` exports as a trainer reads them: loaded with the
installed Hugging Face ``datasets`` (CI runs this file once with ``datasets`` 4.0.0, the version
LLaMA-Factory 0.9.5 pins, and once with 5.x: see ``.ci/toolkits``), then rendered by the
installed ``transformers``' ``apply_chat_template`` with ppol's shipped tools-aware ChatML
template (``ppol_rs/templates/chatml_tools.jinja``, strict, with ``{% generation %}`` markers)
and SmolLM2's own (``templates/smollm2.jinja``, which concatenates ``content``); the tokens
that carry loss are read from ``return_assistant_tokens_mask`` with a byte-level tokenizer
built here (no vocabulary download). Episodes from messy models — invalid-JSON and mixed-type
arguments (``ppol mock-server`` playing the agent, ``messy/mock_agent.json``), a call without
its result and a result without its call (an external world, ``messy/broken_world.py``) — are
exported in every format (issue 36). The ``openai`` rows are checked against the ``openai``
SDK's types when it is installed.

Runs the ``ppol`` binary (``$PPOL_BIN``, else ``target/debug/ppol``, built with the cargo
feature ``testing`` for ``ppol mock-server``) and imports ``ppol_rs/training.py`` by path, so
the virtualenv needs ``datasets``, ``transformers`` and ``pytest`` only. Skipped when they are
missing, unless ``PPOL_REQUIRE_TOOLKITS=1``.
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = pathlib.Path(__file__).resolve().parent / "templates"
MESSY = pathlib.Path(__file__).resolve().parent / "messy"


def _require(module):
    try:
        return __import__(module)
    except ImportError:
        if os.environ.get("PPOL_REQUIRE_TOOLKITS") == "1":
            pytest.fail(f"PPOL_REQUIRE_TOOLKITS=1 but {module} is not installed")
        pytest.skip(f"{module} is not installed (see .ci/toolkits)", allow_module_level=True)


datasets = _require("datasets")
transformers = _require("transformers")

_spec = importlib.util.spec_from_file_location("ppol_training", ROOT / "python" / "ppol_rs" / "training.py")
training = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(training)

DATASETS_MAJOR = int(datasets.__version__.split(".")[0])


def ppol_bin():
    b = os.environ.get("PPOL_BIN") or str(ROOT / "target" / "debug" / "ppol")
    if not os.path.exists(b):
        if os.environ.get("PPOL_REQUIRE_TOOLKITS") == "1":
            pytest.fail(f"no ppol binary at {b} (cargo build --features testing)")
        pytest.skip(f"no ppol binary at {b}")
    return b


def run(*args, ok=(0,), **kw):
    proc = subprocess.run([ppol_bin(), *map(str, args)], capture_output=True, text=True, **kw)
    assert proc.returncode in ok, proc.stderr
    return proc


def tokenizer():
    """A tokenizer object to call apply_chat_template on (the vocabulary does not matter for
    rendering text; nothing is downloaded)."""
    from tokenizers import Tokenizer, models

    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok)


TOOLS_TEMPLATE = training.chat_template()
SMOLLM2_TEMPLATE = (TEMPLATES / "smollm2.jinja").read_text()


def with_mock_agent(script, tmp, *episodes_args):
    """``ppol episodes ... --llm`` against ``ppol mock-server --script script`` (one episode at
    a time, so the script's rules fire in order)."""
    server = subprocess.Popen([ppol_bin(), "mock-server", "--script", str(script), "--port", "0", "--lifetime-s", "300"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ready = json.loads(server.stdout.readline())
        llm = tmp / "llm.toml"
        llm.write_text(f'max_retries = 0\n[default]\nprovider = "openai"\nmodel = "mock"\nbase_url = "{ready["base_url"]}"\ntimeout_s = 10\n')
        run("episodes", *episodes_args, "--llm", llm, "--concurrency", "1", "--quiet")
    finally:
        server.kill()
        server.wait()
        server.stdout.close()


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    """Scripted demo episodes (one call per agent turn) and an LLM episode played against
    ``ppol mock-server`` whose agent makes two calls in one turn."""
    tmp = tmp_path_factory.mktemp("toolkits")
    scripted = tmp / "scripted.jsonl"
    run("episodes", "--domain", "demo", "--tasks", "1,2,3,4,5,6,7,8", "--quiet", "-o", scripted)
    script = tmp / "mock.json"
    script.write_text(json.dumps({
        "rules": [
            {"has_tools": True, "times": 1, "reply": {"content": "", "tool_calls": [
                {"id": "a", "name": "find_customer_by_email", "arguments": {"email": "ada.moss@example.com"}},
                {"id": "b", "name": "get_order_details", "arguments": {"order_id": "#P1001"}}]}},
            {"has_tools": True, "reply": {"content": "Your order #P1001 is placed. Anything else?"}},
            {"contains": "Anything else", "reply": {"content": "no, thanks ###STOP###"}},
        ],
        "default": {"content": "Hi, what is the status of order #P1001? My email is ada.moss@example.com."},
    }))
    mocked = tmp / "mocked.jsonl"
    with_mock_agent(script, tmp, "--domain", "demo", "--tasks", "0", "-o", mocked)
    eps = [json.loads(line) for f in (scripted, mocked) for line in f.read_text().splitlines()]
    parallel = [t for e in eps for t in e["conversation"] if len(t.get("tool_calls", [])) > 1]
    assert len(parallel) == 1, "the mock's agent made two calls in one turn"
    return tmp, [scripted, mocked], eps


def export(tmp, files, fmt, *extra):
    out = tmp / f"{fmt}{''.join(extra)}.jsonl"
    proc = run("export", "sft", *files, "--all", "--format", fmt, "-o", out, *extra)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return out, rows, proc.stderr


def calls_of(eps):
    return [(c["name"], c["arguments"]) for e in eps for t in e["conversation"] for c in t.get("tool_calls", [])]


def test_every_export_loads_with_datasets_and_keeps_its_rows(episodes):
    tmp, files, eps = episodes
    for fmt in ("openai", "hf", "llamafactory"):
        out, rows, _ = export(tmp, files, fmt)
        assert len(rows) == len(eps)
        assert training.strip_nulls(rows) == rows, "the export writes no nulls"
        loaded = [dict(r) for r in datasets.load_dataset("json", data_files=str(out), split="train")]
        if DATASETS_MAJOR >= 5 or fmt == "llamafactory":
            assert loaded == rows, f"{fmt}: datasets {datasets.__version__} reads the rows back exactly"
        else:
            # datasets 4 pads every struct with the keys of all rows; stripping the nulls (what
            # TRL's SFTTrainer does) gives the rows back
            assert loaded != rows, f"{fmt}: datasets {datasets.__version__} was expected to pad"
            assert [training.strip_nulls(r) for r in loaded] == rows, fmt


def _rendered_calls(text):
    calls = []
    for chunk in text.split('<tool_call>\n{"name": "')[1:]:
        chunk = '{"name": "' + chunk
        call = json.loads(chunk.split("\n</tool_call>")[0])
        calls.append((call["name"], call["arguments"]))
    return calls


def test_every_export_renders_through_apply_chat_template(episodes):
    tmp, files, eps = episodes
    tok = tokenizer()
    want = calls_of(eps)
    for fmt in ("openai", "hf", "llamafactory"):
        out, _, _ = export(tmp, files, fmt)
        got = []
        for row in datasets.load_dataset("json", data_files=str(out), split="train"):
            messages, tools = training.chat_template_inputs(row)
            text = tok.apply_chat_template(messages, tools=tools, chat_template=TOOLS_TEMPLATE, tokenize=False)
            assert text.count("<tools>\n") == 1
            assert all(json.dumps(t, ensure_ascii=False) in text for t in tools)
            assert text.endswith("<|im_end|>\n") and "<|im_start|>assistant" in text
            got += _rendered_calls(text)
            # every tool result is rendered, in order after its call
            assert text.count("<tool_response>") == sum(1 for m in messages if m["role"] == "tool")
            # SmolLM2's template concatenates content: every message has a string
            tok.apply_chat_template(messages, chat_template=SMOLLM2_TEMPLATE, tokenize=False)
        # every call of the episodes, with its arguments, in order; two in one agent turn
        assert got == want, fmt
        if fmt != "llamafactory":
            assert '</tool_call>\n<tool_call>' in "".join(
                tok.apply_chat_template(*training.chat_template_inputs(r), chat_template=TOOLS_TEMPLATE, tokenize=False)
                for r in datasets.load_dataset("json", data_files=str(out), split="train")
            ), "the two calls of one turn are one assistant message"


def test_hf_rows_go_to_apply_chat_template_as_they_are_with_datasets_5(episodes):
    """With datasets 5 an hf row needs nothing: apply_chat_template(row["messages"],
    tools=row["tools"]); layout 1's JSON-string tools did not pass."""
    tmp, files, eps = episodes
    tok = tokenizer()
    out, rows, _ = export(tmp, files, "hf")
    row = datasets.load_dataset("json", data_files=str(out), split="train")[len(rows) - 1]
    if DATASETS_MAJOR < 5:
        row = training.strip_nulls(row)
    text = tok.apply_chat_template(row["messages"], tools=row["tools"], chat_template=TOOLS_TEMPLATE, tokenize=False)
    assert len(_rendered_calls(text)) == sum(len(t.get("tool_calls", [])) for t in eps[-1]["conversation"])
    old, old_rows, _ = export(tmp, files, "hf", "--format-version", "1")
    assert isinstance(old_rows[0]["tools"], str)
    with pytest.raises(ValueError, match="Tools should either be a JSON schema"):
        tok.apply_chat_template(old_rows[0]["messages"], tools=old_rows[0]["tools"], chat_template=TOOLS_TEMPLATE, tokenize=False)


def test_openai_layout_1_breaks_a_template_that_needs_content(episodes):
    """The reason for layout 2: an agent turn of calls without `content` fails SmolLM2's
    template; with `content: ""` it renders."""
    tmp, files, _ = episodes
    tok = tokenizer()
    _, rows, _ = export(tmp, files, "openai", "--format-version", "1")
    broken = [r for r in rows if any("tool_calls" in m and "content" not in m for m in r["messages"])]
    assert broken
    messages, _ = training.chat_template_inputs(broken[0])
    with pytest.raises(Exception):
        tok.apply_chat_template(messages, chat_template=SMOLLM2_TEMPLATE, tokenize=False)
    _, rows, stderr = export(tmp, files, "openai")
    assert all("content" in m for r in rows for m in r["messages"])
    # fewer than OpenAI's 10 examples: said
    assert f"OpenAI fine-tuning needs at least 10 training examples; this export has {len(rows)}" in stderr


def test_export_prints_token_lengths(episodes):
    tmp, files, _ = episodes
    _, rows, stderr = export(tmp, files, "hf")
    line = next(l for l in stderr.splitlines() if l.startswith("tokens per training record"))
    assert "estimated" in line and "median" in line and "a cutoff of" in line


# --- issue 36: training data from messy models ------------------------------------------------


@pytest.fixture(scope="module")
def messy(tmp_path_factory):
    """One episode file with what small models and loose harnesses write: a clean episode, one
    whose agent writes ``order_id`` as a number and later invalid-JSON arguments (both played
    by ``ppol mock-server``), and from an external world a call without its result, a result
    without its call, and an argument without schema that is a number in one call and a string
    in another."""
    tmp = tmp_path_factory.mktemp("messy")
    mocked, broken = tmp / "mocked.jsonl", tmp / "broken.jsonl"
    with_mock_agent(MESSY / "mock_agent.json", tmp, "--domain", "demo", "--tasks", "0,1", "-o", mocked)
    run("episodes", "--world", f"external:{sys.executable} {MESSY / 'broken_world.py'}",
        "--task-file", MESSY / "tasks.jsonl", "--quiet", "-o", broken)
    path = tmp / "messy.jsonl"
    path.write_text(mocked.read_text() + broken.read_text())
    eps = [json.loads(line) for line in path.read_text().splitlines()]
    calls = [c for e in eps for t in e["conversation"] for c in t.get("tool_calls", [])]
    assert any(isinstance(c["arguments"], str) for c in calls), "the mock's agent wrote invalid JSON"
    assert any(c["arguments"].get("order_id") == 1001 for c in calls if isinstance(c["arguments"], dict))
    return tmp, path


def export_messy(tmp, path, fmt, *extra):
    out = tmp / f"{fmt}{''.join(extra)}.jsonl"
    proc = run("export", "sft", path, "--all", "--format", fmt, "-o", out, *extra, ok=(0, 1))
    return out, [json.loads(line) for line in out.read_text().splitlines()], proc


def row_calls(row):
    """(name, arguments) of every call of a row as the file holds it, any format."""
    if "conversations" in row:
        out = []
        for turn in row["conversations"]:
            if turn["from"] == "function_call":
                calls = json.loads(turn["value"])
                out += [(c["name"], c["arguments"]) for c in (calls if isinstance(calls, list) else [calls])]
        return out
    return [(c["function"]["name"], c["function"]["arguments"]) for m in row["messages"] for c in m.get("tool_calls") or []]


def check_openai_sdk_types(rows):
    """The rows against the ``openai`` SDK's request types (each tool call on its own:
    pydantic validates an ``Iterable`` field lazily)."""
    try:
        import pydantic
        from openai.types.chat import ChatCompletionMessageFunctionToolCallParam, ChatCompletionMessageParam, ChatCompletionToolParam
    except ImportError:
        if os.environ.get("PPOL_REQUIRE_TOOLKITS") == "1":
            pytest.fail("PPOL_REQUIRE_TOOLKITS=1 but the openai package is not installed")
        return False
    messages = pydantic.TypeAdapter(list[ChatCompletionMessageParam])
    tools = pydantic.TypeAdapter(list[ChatCompletionToolParam])
    call = pydantic.TypeAdapter(ChatCompletionMessageFunctionToolCallParam)
    for r in rows:
        messages.validate_python(r["messages"])
        tools.validate_python(r["tools"])
        for m in r["messages"]:
            for c in m.get("tool_calls", []):
                call.validate_python(c)
                assert isinstance(json.loads(c["function"]["arguments"]), dict)
    return True


def load_and_render(out):
    """Every row of `out` loaded with datasets and rendered with the shipped template."""
    tok = tokenizer()
    rows = datasets.load_dataset("json", data_files=str(out), split="train")
    for row in rows:
        messages, tools = training.chat_template_inputs(row)
        tok.apply_chat_template(messages, tools=tools, chat_template=TOOLS_TEMPLATE, tokenize=False)
    return len(rows)


def test_r36_1_invalid_json_arguments_are_never_a_training_target(messy):
    tmp, path = messy
    for fmt in ("ppol", "openai", "hf", "llamafactory"):
        out, rows, proc = export_messy(tmp, path, fmt)
        assert "warning: the agent made 1 bad call in 1 episode: 1 with arguments that are not valid JSON (get_order_details ×1)" in proc.stderr, proc.stderr
        assert "--bad-calls cut" in proc.stderr
        for name, args in (c for r in rows for c in row_calls(r)):
            args = json.loads(args) if fmt in ("ppol", "openai") else args
            assert isinstance(args, dict) and training.RAW_ARGUMENTS_KEY not in args, (fmt, name, args)
        # the row of the episode with the bad call ends before the turn that made it
        last = [m for m in rows[1].get("messages", [])] or rows[1]["conversations"]
        ends = last[-1].get("content", last[-1].get("value"))
        assert ends == "I found an order. Can you confirm its number?" or fmt == "ppol", (fmt, ends)
        if fmt == "openai":
            check_openai_sdk_types(rows)
        if fmt != "ppol":
            assert load_and_render(out) == len(rows)
    # the other policies
    _, rows, proc = export_messy(tmp, path, "hf", "--bad-calls", "drop-call")
    assert "they and their results were taken out of their rows" in proc.stderr
    retry = [a for n, a in row_calls(rows[1])]
    assert retry == [{"order_id": "1001"}, {"order_id": "#P1001"}], retry
    assert not any("not valid JSON" in m["content"] for m in rows[1]["messages"] if m["role"] == "tool")
    _, rows, proc = export_messy(tmp, path, "openai", "--bad-calls", "drop-episode")
    assert len(rows) == 2 and "their episodes were skipped" in proc.stderr
    out, rows, proc = export_messy(tmp, path, "hf", "--bad-calls", "keep")
    kept = [m for m in rows[1]["messages"] if m.get("weight") == 0]
    assert [c["function"]["arguments"] for m in kept for c in m["tool_calls"]] == [
        {training.RAW_ARGUMENTS_KEY: '{"order_id": "#P1001"'}]
    assert load_and_render(out) == len(rows)
    out, rows, _ = export_messy(tmp, path, "openai", "--bad-calls", "keep")
    kept = [m for m in rows[1]["messages"] if m.get("weight") == 0]
    assert len(kept) == 1 and json.loads(kept[0]["tool_calls"][0]["function"]["arguments"]) == {
        training.RAW_ARGUMENTS_KEY: '{"order_id": "#P1001"'}
    check_openai_sdk_types(rows)


def test_r36_2_an_argument_has_one_type_in_a_file_under_datasets_4_and_5(messy):
    tmp, path = messy
    out, rows, proc = export_messy(tmp, path, "hf")
    assert "get_order_details.order_id: 1 number → string (the tool's schema)" in proc.stderr, proc.stderr
    assert "lookup.ref: 1 number → string (two kinds at one path in the file)" in proc.stderr
    loaded = [training.from_arrow(dict(r)) for r in datasets.load_dataset("json", data_files=str(out), split="train")]
    assert loaded == rows, f"datasets {datasets.__version__} reads the rows back"
    args = [a for r in rows for _, a in row_calls(r)]
    assert {type(a[k]) for a in args for k in a} == {str}
    assert {"order_id": "1001"} in args and {"ref": "5"} in args and {"ref": "A5", "since": "2024-05-21"} in args
    assert load_and_render(out) == len(rows)
    # datasets 4 reads the date as a timestamp; chat_template_inputs writes it back as text
    tok = tokenizer()
    text = "".join(tok.apply_chat_template(*training.chat_template_inputs(r), chat_template=TOOLS_TEMPLATE, tokenize=False)
                   for r in datasets.load_dataset("json", data_files=str(out), split="train"))
    assert '"since": "2024-05-21"' in text and "<datetime>" not in text


def test_r36_3_a_call_without_its_result_skips_the_episode_in_every_format(messy):
    tmp, path = messy
    for fmt in ("ppol", "openai", "hf", "llamafactory"):
        _, rows, proc = export_messy(tmp, path, fmt)
        assert proc.returncode == 1, proc.stderr
        assert "warning: skipped 1 episode in every format: a tool call has no result ('unanswered:none:0' of " in proc.stderr
        assert len(rows) == 3, fmt


def test_r36_4_a_result_without_its_call_skips_its_episode_not_the_export(messy):
    tmp, path = messy
    for fmt in ("ppol", "openai", "hf", "llamafactory"):
        out, rows, proc = export_messy(tmp, path, fmt)
        assert proc.returncode == 1 and out.exists() and len(rows) == 3, proc.stderr
        assert "a tool result answers call 'zz' that no earlier agent turn made ('orphan:none:0' of " in proc.stderr
        assert "2 episodes were not exported because their turns do not fit together" in proc.stderr


def _bytes_to_unicode():
    """GPT-2's byte <-> printable-character table (what a byte-level BPE tokenizer's tokens are
    spelled in)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


SPECIAL = ["<|im_start|>", "<|im_end|>"]


def byte_tokenizer():
    """A byte-level tokenizer without merges (one token a byte, ChatML's markers whole), made
    here: what apply_chat_template needs to map the template's generation spans to tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", additional_special_tokens=SPECIAL)


def trained_bytes(tok, messages, tools):
    """(the rendered text, a 0/1 loss flag per byte of it, the tokens that carry loss) from the
    template's assistant mask."""
    text = tok.apply_chat_template(messages, tools=tools, chat_template=TOOLS_TEMPLATE, tokenize=False)
    out = tok.apply_chat_template(messages, tools=tools, chat_template=TOOLS_TEMPLATE, tokenize=True,
                                  return_dict=True, return_assistant_tokens_mask=True)
    table = _bytes_to_unicode()
    flags = bytearray()
    data = bytearray()
    for piece, m in zip(tok.convert_ids_to_tokens(out["input_ids"]), out["assistant_masks"]):
        b = piece.encode() if piece in SPECIAL else bytes(table[c] for c in piece)
        data += b
        flags += bytes([m]) * len(b)
    assert bytes(data) == text.encode(), "the tokens spell the rendered text"
    return text, bytes(flags), sum(out["assistant_masks"])


def agent_spans(text, messages):
    """Byte ranges the agent wrote, found in the rendered text independently of the template's
    markers: each assistant turn from after ``<|im_start|>assistant\\n`` to its ``<|im_end|>``,
    unless the message has weight 0."""
    raw = text.encode()
    spans, at = [], 0
    weights = [m.get("weight", 1) for m in messages if m["role"] == "assistant"]
    head, end = b"<|im_start|>assistant\n", b"<|im_end|>"
    for w in weights:
        start = raw.index(head, at) + len(head)
        stop = raw.index(end, start) + len(end)
        if w != 0:
            spans.append((start, stop))
        at = stop
    assert raw.find(head, at) == -1
    return spans


def test_r36_5_the_loss_falls_on_the_agents_tokens_only(messy, episodes):
    """No token of the policy, the tool schemas, a user turn or a tool result carries loss; every
    token the agent wrote (text, calls, <|im_end|>) does; a weight-0 agent turn does not."""
    tmp, path = messy
    tok = byte_tokenizer()
    files = [export_messy(tmp, path, "hf")[0], export_messy(tmp, path, "hf", "--bad-calls", "keep")[0],
             export(*episodes[:2], "hf")[0]]
    trained = total = 0
    for out in files:
        for row in datasets.load_dataset("json", data_files=str(out), split="train"):
            messages, tools = training.chat_template_inputs(row)
            text, flags, masked = trained_bytes(tok, messages, tools)
            want = bytearray(len(flags))
            for a, b in agent_spans(text, messages):
                want[a:b] = b"\x01" * (b - a)
            assert flags == bytes(want), "the loss falls exactly on the agent's turns"
            raw = text.encode()
            # the named parts, each found where the template put it, carry no loss
            for m in messages:
                if m["role"] in ("system", "user", "tool") and m["content"]:
                    part = m["content"].encode()
                    pos = raw.index(part)
                    assert not any(flags[pos:pos + len(part)]), (m["role"], m["content"][:60])
            for t in tools or []:
                part = json.dumps(t, ensure_ascii=False).encode()
                pos = raw.index(part)
                assert not any(flags[pos:pos + len(part)]), t["function"]["name"]
            k, n = training.loss_tokens(tok, messages, tools, TOOLS_TEMPLATE)
            assert k == masked and 0 < k < n
            trained, total = trained + k, total + n
    print(f"loss on {trained} of {total} tokens ({100 * trained / total:.1f}%) with a byte-level tokenizer")
