"""The study page in a real headless browser: an annotator answers every item, reloads midway
(progress kept), downloads the answers, and `study_analyze` un-blinds the download.

Needs Chromium (Debian's ``chromium`` package: /usr/bin/chromium, or ``$PPOL_CHROMIUM``) and the
``playwright`` Python package (no browser download: the system Chromium is driven through
``executable_path``). ``.ci/browser`` installs both and runs this file with
``PPOL_REQUIRE_BROWSER=1``; without them the tests skip with a message, unless that variable is
set, in which case they fail.
"""

import json
import os
import pathlib
import shutil

import pytest

import ppol_rs

REQUIRE = os.environ.get("PPOL_REQUIRE_BROWSER") == "1"


def _chromium():
    for c in (os.environ.get("PPOL_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if c and os.path.exists(c):
            return c
    return None


def _need(what):
    if REQUIRE:
        pytest.fail(f"PPOL_REQUIRE_BROWSER=1 but {what} (run .ci/browser)")
    pytest.skip(f"{what}: install with `apt-get install chromium` and `pip install playwright` (see .ci/browser)")


@pytest.fixture(scope="module")
def browser():
    exe = _chromium()
    if exe is None:
        _need("Chromium is not installed")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need("the playwright package is not installed")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    d = tmp_path_factory.mktemp("study")
    files = {}
    for kind in ("human", "baseline", "candidates"):
        path = d / f"{kind}.jsonl"
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in ppol_rs.demo_traces(kind))
        files[kind] = path
    made = ppol_rs.study_make(
        {"humans": files["human"], "base": files["baseline"], "evolved": files["candidates"]},
        d / "out",
        per_condition=4,
        attention_checks=2,
        seed=11,
    )
    with open(made["key"]) as f:
        key = json.load(f)
    return made, key, d


def _choice(i):
    return ("human", "bot", "unsure")[i % 3]


def annotate(browser, page_path, downloads, annotator, choose, reload_after=None):
    """Answer every item of the page as `choose(i, transcript_text)` says; returns the saved
    download's path and the answers given, by position."""
    ctx = browser.new_context(accept_downloads=True)
    outside = []

    def guard(route):
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    ctx.route("**/*", guard)
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(pathlib.Path(page_path).as_uri())
    assert page.is_disabled("#start")
    page.fill("#annotator", annotator)
    page.click("#start")
    n = len(json.loads(page.text_content("#study-data"))["items"])
    given = []
    i = 0
    while i < n:
        assert page.text_content("#progress") == f"Conversation {i + 1} of {n}"
        text = page.text_content("#transcript")
        assert page.is_disabled("#next") or i < len(given)
        answer = choose(i, text)
        page.click(f'.answer[data-answer="{answer}"]')
        assert page.get_attribute(f'.answer[data-answer="{answer}"]', "aria-pressed") == "true"
        given = given[:i] + [answer]
        if reload_after is not None and i == reload_after:
            # Progress survives a reload: same annotator, same item, same answer.
            page.reload()
            assert page.input_value("#annotator") == annotator
            page.click("#start")
            assert page.text_content("#progress") == f"Conversation {i + 1} of {n}"
            assert page.get_attribute(f'.answer[data-answer="{answer}"]', "aria-pressed") == "true"
            reload_after = None
        page.click("#next")
        i += 1
        if i == 2 and len(given) == 2 and annotator.endswith("1"):
            # Back and forward again: the earlier answer is still selected.
            page.click("#back")
            assert page.get_attribute(f'.answer[data-answer="{given[1]}"]', "aria-pressed") == "true"
            page.click("#next")
    assert page.is_visible("#done")
    assert page.text_content("#answered") == f"{n} of {n}"
    with page.expect_download() as dl:
        page.click("#download")
    target = pathlib.Path(downloads) / f"{annotator}.json"
    dl.value.save_as(target)
    assert dl.value.suggested_filename == f"answers-{annotator}.json"
    ctx.close()
    assert not outside, f"the page reached outside the file: {outside}"
    assert not errors, errors
    return target, given


def test_annotators_answer_download_and_the_download_is_analyzed(browser, study):
    made, key, d = study
    items = key["items"]
    expected_attention = {i: k["expected"] for i, k in enumerate(items) if k["condition"] == "attention-check"}

    def careful(i, text):
        if "attention check" in text:
            return "bot" if 'answer "Bot"' in text else "human"
        # never shown: ids, condition names, tool traffic
        for k in items:
            for field in ("dialogue_id", "condition", "source"):
                if k[field] and k[field] != "attention-check":
                    assert k[field] not in text
        return _choice(i)

    first, given = annotate(browser, made["page"], d, "ann-1", careful, reload_after=3)
    # The second annotator clicks Human everywhere: fails the first check (right answer: bot).
    second, _ = annotate(browser, made["page"], d, "ann-2", lambda i, t: "human")

    with open(first) as f:
        sheet = json.load(f)
    assert sheet["study_id"] == made["study_id"] and sheet["annotator"] == "ann-1"
    assert [a["item"] for a in sheet["answers"]] == [k["item"] for k in items]
    assert [a["judgement"] for a in sheet["answers"]] == given
    for i, want in expected_attention.items():
        assert given[i] == want

    r = ppol_rs.study_analyze([first, second], made["key"])
    assert r["included"] == ["ann-1"]
    assert r["excluded"][0]["annotator"] == "ann-2"
    assert "attention check" in r["excluded"][0]["reason"]
    for c in r["conditions"]:
        mine = [given[i] for i, k in enumerate(items) if k["condition"] == c["condition"]]
        assert c["n"] == len(mine) == 4
        assert c["n_human"] == mine.count("human")
        assert c["n_unsure"] == mine.count("unsure")
        assert c["judged_human"]["share"] == pytest.approx(mine.count("human") / 4)
    both = ppol_rs.study_analyze([first, second], made["key"], keep_failed_attention=True)
    assert both["included"] == ["ann-1", "ann-2"]
    assert both["agreement"]["n_items"] == 12
