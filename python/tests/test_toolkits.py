"""The ``openai``, ``hf`` and ``llamafactory`` exports as a trainer reads them: loaded with the
installed Hugging Face ``datasets`` (CI runs this file once with ``datasets`` 4.0.0, the version
LLaMA-Factory 0.9.5 pins, and once with 5.x: see ``.ci/toolkits``), then rendered by the
installed ``transformers``' ``apply_chat_template`` with the templates in ``templates/``: a
strict tools-aware ChatML template and SmolLM2's own (which concatenates ``content``).

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

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = pathlib.Path(__file__).resolve().parent / "templates"


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


def run(*args, **kw):
    proc = subprocess.run([ppol_bin(), *map(str, args)], capture_output=True, text=True, **kw)
    assert proc.returncode == 0, proc.stderr
    return proc


def tokenizer():
    """A tokenizer object to call apply_chat_template on (the vocabulary does not matter for
    rendering text; nothing is downloaded)."""
    from tokenizers import Tokenizer, models

    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok)


TOOLS_TEMPLATE = (TEMPLATES / "chatml_tools.jinja").read_text()
SMOLLM2_TEMPLATE = (TEMPLATES / "smollm2.jinja").read_text()


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    """Scripted demo episodes (one call per agent turn) and an LLM episode played against
    ``ppol mock-server`` whose agent makes two calls in one turn."""
    tmp = tmp_path_factory.mktemp("toolkits")
    scripted = tmp / "scripted.jsonl"
    run("episodes", "--domain", "demo", "--tasks", "0,1,2,3,4,5,6,7", "--quiet", "-o", scripted)
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
    server = subprocess.Popen([ppol_bin(), "mock-server", "--script", str(script), "--port", "0", "--lifetime-s", "300"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ready = json.loads(server.stdout.readline())
        llm = tmp / "llm.toml"
        llm.write_text(f'max_retries = 0\n[default]\nprovider = "openai"\nmodel = "mock"\nbase_url = "{ready["base_url"]}"\ntimeout_s = 10\n')
        mocked = tmp / "mocked.jsonl"
        run("episodes", "--domain", "demo", "--tasks", "0", "--llm", llm, "--quiet", "-o", mocked)
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
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
