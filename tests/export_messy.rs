//! Issue 36 ("Training data from messy models: invalid calls, mixed types and the loss on the
//! right tokens"): one test per numbered item, named `r36_<item>_...`, through the CLI on
//! demo-domain episodes written here. The toolkit side (datasets 4.0.0 and 5 reading the rows,
//! apply_chat_template rendering them, the loss mask) is python/tests/test_toolkits.py.

use std::path::Path;

use serde_json::{json, Value};

use super::export::{read_rows as rows, write_episodes as write};
use super::util::{root, run_ppol};

const FORMATS: [&str; 4] = ["ppol", "openai", "hf", "llamafactory"];

fn episode(id: &str, task: &str, conversation: Value) -> Value {
    json!({
        "id": id, "task_id": task, "domain": "demo", "persona_id": "none",
        "conversation": conversation, "trial": 0, "seed": 1, "termination": "user_stop",
        "reward": 1.0, "status": "ok", "backend": "openai",
    })
}

fn call(id: &str, arguments: Value) -> Value {
    json!({"role": "assistant", "content": "", "tool_calls": [
        {"id": id, "name": "get_order_details", "arguments": arguments}]})
}

fn result(id: &str, text: &str) -> Value {
    json!({"role": "tool", "tool_call_id": id, "content": text})
}

fn say(role: &str, text: &str) -> Value {
    json!({"role": role, "content": text})
}

/// The calls of an exported row, as (name, arguments as an object), in any format; a string
/// where an object belongs fails.
fn calls_of(format: &str, row: &Value) -> Vec<(String, Value)> {
    let object = |v: &Value| -> Value {
        let v = match v {
            Value::String(s) if format != "hf" => serde_json::from_str(s).unwrap(),
            other => other.clone(),
        };
        assert!(v.is_object(), "{format}: arguments {v} are not an object");
        v
    };
    if format == "llamafactory" {
        let mut out = Vec::new();
        for t in row["conversations"].as_array().unwrap() {
            if t["from"] == "function_call" {
                let v: Value = serde_json::from_str(t["value"].as_str().unwrap()).unwrap();
                for c in v.as_array().cloned().unwrap_or_else(|| vec![v.clone()]) {
                    assert!(c["arguments"].is_object(), "{c}");
                    out.push((
                        c["name"].as_str().unwrap().to_string(),
                        c["arguments"].clone(),
                    ));
                }
            }
        }
        return out;
    }
    row["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|c| {
            (
                c["function"]["name"].as_str().unwrap().to_string(),
                object(&c["function"]["arguments"]),
            )
        })
        .collect()
}

fn export(eps: &Path, format: &str, extra: &[&str]) -> (i32, Vec<Value>, String) {
    let out = eps.with_file_name(format!("{format}{}.jsonl", extra.join("")));
    let mut args = vec![
        "export",
        "sft",
        eps.to_str().unwrap(),
        "--all",
        "--format",
        format,
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    let (code, _, err) = run_ppol(&args);
    assert!(!err.contains("panicked"), "{err}");
    let rows = if out.exists() { rows(&out) } else { Vec::new() };
    (code, rows, err)
}

/// A good first answer, then a call whose arguments are invalid JSON, the tool's error, the
/// retry and the answer.
fn invalid_json_episode() -> Value {
    episode(
        "bad",
        "0",
        json!([
            say("assistant", "Hi! How can I help you today?"),
            say("user", "Status of #P1001?"),
            call("a", json!({"order_id": "#P1001"})),
            result("a", "placed"),
            say("assistant", "It is placed. Anything else?"),
            say("user", "And again?"),
            call("b", json!("{\"order_id\": \"#P1001\"")),
            result(
                "b",
                "Error: the arguments of get_order_details are not valid JSON",
            ),
            call("c", json!({"order_id": "#P1001"})),
            result("c", "placed"),
            say("assistant", "Still placed."),
        ]),
    )
}

#[test]
fn r36_1_invalid_json_arguments_are_not_training_targets_in_any_format() {
    let tmp = tempfile::tempdir().unwrap();
    let eps = tmp.path().join("eps.jsonl");
    write(&eps, &[invalid_json_episode()]);
    for format in FORMATS {
        let (code, rows, err) = export(&eps, format, &[]);
        assert_eq!(code, 0, "{format}: {err}");
        assert!(
            err.contains("warning: the agent made 1 bad call in 1 episode: 1 with arguments that are not valid JSON (get_order_details ×1); --bad-calls cut"),
            "{format}: {err}"
        );
        assert!(err.contains("1 bad call (--bad-calls cut)"), "{err}");
        // cut: the row keeps the first answer and ends before the bad call
        let calls = calls_of(format, &rows[0]);
        assert_eq!(
            calls,
            [("get_order_details".into(), json!({"order_id": "#P1001"}))]
        );
    }
    // drop-call: the bad call and its error are gone, the retry stays
    let (_, rows, _) = export(&eps, "hf", &["--bad-calls", "drop-call"]);
    assert_eq!(calls_of("hf", &rows[0]).len(), 2);
    assert!(!rows[0].to_string().contains("not valid JSON"));
    // drop-episode: nothing left to write, said
    let (code, _, err) = export(&eps, "openai", &["--bad-calls", "drop-episode"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("the agent made 1 bad call"), "{err}");
    // keep: as context, an object, weight 0
    for format in ["ppol", "openai", "hf"] {
        let (_, rows, _) = export(&eps, format, &["--bad-calls", "keep"]);
        let kept: Vec<&Value> = rows[0]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["weight"] == 0)
            .collect();
        assert_eq!(kept.len(), 1, "{format}");
        assert_eq!(
            calls_of(format, &rows[0])[1].1,
            json!({"_raw_arguments": "{\"order_id\": \"#P1001\""})
        );
    }
    let (code, _, err) = export(&eps, "hf", &["--bad-calls", "sometimes"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("use cut, drop-call, drop-episode or keep"),
        "{err}"
    );
}

#[test]
fn r36_2_an_argument_is_one_type_across_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let eps = tmp.path().join("eps.jsonl");
    let with = |id: &str, task: &str, order: Value| {
        episode(
            id,
            task,
            json!([
                say("user", "Status?"),
                call("a", json!({"order_id": order})),
                result("a", "placed"),
                say("assistant", "Placed."),
            ]),
        )
    };
    write(
        &eps,
        &[
            with("n", "0", json!(2378156)),
            with("s", "1", json!("#W2378156")),
            // a value no lossless conversion fits: a bad call, not a string in a number's place
            with("o", "2", json!({"id": 1})),
        ],
    );
    for format in FORMATS {
        let (code, rows, err) = export(&eps, format, &[]);
        assert_eq!(code, 0, "{err}");
        assert!(
            err.contains("get_order_details.order_id: 1 number → string (the tool's schema)"),
            "{err}"
        );
        assert!(err.contains("1 with an argument of a type its schema rules out"));
        let args: Vec<Value> = rows
            .iter()
            .flat_map(|r| calls_of(format, r))
            .map(|c| c.1)
            .collect();
        assert_eq!(
            args,
            [
                json!({"order_id": "2378156"}),
                json!({"order_id": "#W2378156"})
            ]
        );
    }
}

#[test]
fn r36_3_a_call_without_its_result_skips_the_episode_in_every_format() {
    let tmp = tempfile::tempdir().unwrap();
    let eps = tmp.path().join("eps.jsonl");
    let unanswered = episode(
        "unanswered",
        "0",
        json!([
            say("user", "Status?"),
            call("x", json!({"order_id": "#P1001"})),
            say("user", "hello??"),
            say("assistant", "Placed."),
        ]),
    );
    // a row may end on calls whose results were not recorded: that is a target, not an error
    let last = episode(
        "ends-on-calls",
        "1",
        json!([
            say("user", "Status?"),
            call("y", json!({"order_id": "#P1001"}))
        ]),
    );
    write(&eps, &[unanswered, last]);
    for format in FORMATS {
        let (code, rows, err) = export(&eps, format, &[]);
        assert_eq!(code, 1, "{format}: {err}");
        assert!(
            err.contains("warning: skipped 1 episode in every format: a tool call has no result ('unanswered' of "),
            "{format}: {err}"
        );
        assert!(
            err.contains("1 episode was not exported because its turns do not fit together"),
            "{err}"
        );
        assert_eq!(rows.len(), 1, "{format}");
        assert_eq!(calls_of(format, &rows[0]).len(), 1);
    }
}

#[test]
fn r36_4_a_result_without_its_call_skips_its_episode_not_the_export() {
    let tmp = tempfile::tempdir().unwrap();
    let eps = tmp.path().join("eps.jsonl");
    let orphan = episode(
        "orphan",
        "0",
        json!([
            say("user", "Status?"),
            result("zz", "placed"),
            say("assistant", "Placed."),
        ]),
    );
    write(&eps, &[orphan, invalid_json_episode()]);
    for format in FORMATS {
        let (code, rows, err) = export(&eps, format, &[]);
        assert_eq!(code, 1, "{format}: {err}");
        assert_eq!(rows.len(), 1, "{format}: the other episode is written");
        assert!(
            err.contains(
                "a tool result answers call 'zz' that no earlier agent turn made ('orphan' of "
            ),
            "{err}"
        );
    }
}

#[test]
fn r36_6_the_same_episode_id_in_two_inputs_is_refused_with_both_places() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.jsonl"), tmp.path().join("b.jsonl"));
    let ok = |id: &str| {
        episode(
            id,
            "0",
            json!([say("user", "hi"), say("assistant", "Hello.")]),
        )
    };
    write(&a, &[ok("0:none:0")]);
    std::fs::write(&b, format!("\n{}\n{}\n", ok("1:none:0"), ok("0:none:0"))).unwrap();
    let out = tmp.path().join("out.jsonl");
    let (code, _, err) = run_ppol(&[
        "export",
        "sft",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "{}: line 3: episode id '0:none:0' (demo) is also at {} line 1",
            b.display(),
            a.display()
        )),
        "{err}"
    );
    assert!(!out.exists(), "nothing is written");
    // ids are task:persona:trial: the same id in another domain is another episode
    let mut other = ok("0:none:0");
    other["domain"] = json!("elsewhere");
    write(&b, &[other]);
    let (code, _, err) = run_ppol(&[
        "export",
        "sft",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(rows(&out).len(), 2);
}

#[test]
fn r36_7_persona_ids_are_unique_within_a_runs_held_out_split() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = root().join("seeds/offline_templates.py");
    let gen = tmp.path().join("personas.jsonl");
    let (code, _, err) = run_ppol(&[
        "generate",
        "--program",
        seed.to_str().unwrap(),
        "--domain",
        "demo",
        "--split",
        "all",
        "-n",
        "3",
        "-o",
        gen.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let personas = rows(&gen);
    let ids: std::collections::BTreeSet<&str> = personas
        .iter()
        .map(|p| p["persona_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        (personas.len(), ids.len()),
        (48, 48),
        "16 tasks × 3 personas"
    );
    // a run's episodes, held out by persona: the count is the held-out rows' personas
    let eps = tmp.path().join("eps.jsonl");
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--domain",
        "demo",
        "--personas",
        gen.to_str().unwrap(),
        "--quiet",
        "-o",
        eps.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let out = tmp.path().join("train.jsonl");
    let (code, _, err) = run_ppol(&[
        "export",
        "sft",
        eps.to_str().unwrap(),
        "--all",
        "--heldout-fraction",
        "0.3",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let held = rows(&tmp.path().join("train.heldout.jsonl"));
    let pairs: std::collections::BTreeSet<(String, String)> = held
        .iter()
        .map(|r| {
            let m = &r["metadata"];
            (m["task_id"].to_string(), m["persona_id"].to_string())
        })
        .collect();
    assert!(
        err.contains(&format!(
            "wrote {} episodes of {} held-out personas",
            held.len(),
            pairs.len()
        )),
        "{err}"
    );
    assert_eq!(held.len(), pairs.len(), "one episode a persona");
}
