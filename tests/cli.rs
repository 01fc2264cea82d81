//! The command line, end to end, on fixtures shipped in tests/fixtures (no ../shared needed).

use crate::util::{root, run_ppol};

fn fixture(name: &str) -> String {
    root()
        .join("tests/fixtures/traces")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn fingerprint_writes_jsonl_in_input_order() {
    let (code, out, err) = run_ppol(&[
        "fingerprint",
        &fixture("dialogues.jsonl"),
        &fixture("dialogues.txt"),
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = lines.iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["j1", "j2", "j3", "dialogues:1", "dialogues:6"]);
    assert_eq!(lines[0]["task_id"], "t1");
    assert_eq!(lines[3]["task_id"], serde_json::Value::Null);
    let f = &lines[0]["features"];
    assert_eq!(f.as_object().unwrap().len(), 19);
    // "hey need a refund" (4) and "the blue one. why is this so hard" (8)
    assert_eq!(f["words_per_turn"], 6.0);
    assert_eq!(f["opening_length"], 4.0);
    assert_eq!(f["info_seeking_rate"], 0.5);
    // j3: user turns "where is my package", "ok"; tool traffic is ignored
    assert_eq!(lines[2]["features"]["acknowledgment_rate"], 0.5);
    // text format: continuation lines belong to the turn ("12 main st" + "springfield": 4 words)
    assert_eq!(lines[3]["features"]["words_per_turn"], 5.5);
}

#[test]
fn fingerprint_v2_differs_where_documented() {
    let (code, out, _) = run_ppol(&[
        "fingerprint",
        "--feature-set",
        "v2",
        &fixture("tau_usi_small.json"),
    ]);
    assert_eq!(code, 0);
    let v: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // "ok thx" is an acknowledgement in v2 (a chain), not in ppol-0.1.1
    assert_eq!(v[0]["features"]["acknowledgment_rate"], 0.5);
    let (_, out1, _) = run_ppol(&["fingerprint", &fixture("tau_usi_small.json")]);
    let v1: Vec<serde_json::Value> = out1
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(v1[0]["features"]["acknowledgment_rate"], 0.25);
}

#[test]
fn unknown_feature_set_is_rejected() {
    let (code, _, err) = run_ppol(&[
        "fingerprint",
        "--feature-set",
        "v9",
        &fixture("dialogues.jsonl"),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown feature set 'v9'"), "{err}");
}

#[test]
fn traces_stats_per_domain() {
    let (code, out, err) = run_ppol(&[
        "traces",
        "stats",
        "--json",
        &fixture("tau_usi_small.json"),
        &fixture("dialogues.jsonl"),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["domain"].as_str().unwrap()).collect();
    assert_eq!(names, ["airline", "retail", "demo", "other", "all"]);
    assert_eq!(rows[0]["dialogues"], 2);
    assert_eq!(rows[0]["tasks"], 1);
    // airline_0: 4 user turns kept ("ok thx" cut at /stop); airline_0_ann2: 2
    assert_eq!(rows[0]["user_turns"], 6);
    let (code, out, _) = run_ppol(&["traces", "stats", &fixture("tau_usi_small.json")]);
    assert_eq!(code, 0);
    assert!(out.lines().next().unwrap().starts_with("domain"));
}

#[test]
fn malformed_inputs_give_one_clear_error_each() {
    let cases = [
        ("bad_json_line.jsonl", "bad_json_line.jsonl: line 2: invalid JSON"),
        ("bad_content_type.jsonl", "bad_content_type.jsonl: line 2.conversation[0].content: expected a string, found an array"),
        ("bad_reference.json", "bad_reference.json: $[1].conversation[0]: missing key 'role'"),
        ("bad_tau_usi.json", "bad_tau_usi.json: $[\"airline_2\"].conversation: expected a list of turns, found an object"),
        ("bad_text.txt", "bad_text.txt: line 1: text before the first turn: expected a line starting with 'USER:' or 'ASSISTANT:'"),
    ];
    for (file, want) in cases {
        let (code, out, err) = run_ppol(&["fingerprint", &fixture(file)]);
        assert_eq!(code, 2, "{file}");
        assert!(out.is_empty(), "{file}: nothing written on error");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{file}: one error line, got {err}");
        assert!(lines[0].starts_with("error: "), "{err}");
        assert!(lines[0].contains(want), "{file}: {err}");
    }
    let (code, _, err) = run_ppol(&["fingerprint", "/nonexistent/x.jsonl"]);
    assert_eq!(code, 2);
    assert!(err.contains("reading '/nonexistent/x.jsonl'"), "{err}");
}

#[test]
fn reference_json_ids_and_tasks_come_from_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ref.json");
    let (code, _, err) = run_ppol(&[
        "reference",
        &fixture("reference_dialogs.json"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("2 dialogues in mean/std, 1 in the coverage cloud"),
        "{err}"
    );
    let r = ppol::fitness::reference::HumanReference::load(&out).unwrap();
    assert_eq!(r.fingerprints[0].id, "ref_1");
    assert_eq!(r.fingerprints[0].task_id.as_deref(), Some("late_order"));
    assert_eq!(r.feature_set, ppol::fitness::features::FeatureSet::Ppol011);
}

#[test]
fn readme_config_example_parses() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme
        .find("```toml\n[llm]")
        .expect("README has the [llm] example")
        + 8;
    let end = start + readme[start..].find("```").unwrap();
    let cfg = ppol::evolve::config::RunConfig::from_toml_str(
        &readme[start..end],
        std::path::Path::new("README.md"),
    )
    .unwrap();
    let llm = cfg.llm.expect("[llm] section");
    assert_eq!(
        llm.spec(ppol::llm::CallRole::Mutator).model,
        "gemini-3-flash"
    );
    assert_eq!(cfg.budget.max_usd, Some(25.0));
}

#[test]
fn mock_server_prints_a_ready_line_and_stops_after_its_lifetime() {
    let (code, out, err) = run_ppol(&["mock-server", "--port", "0", "--lifetime-s", "0.2"]);
    assert_eq!(code, 0, "{err}");
    let ready: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let addr = ready["addr"].as_str().unwrap();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    assert_eq!(ready["base_url"], format!("http://{addr}/v1"));
    assert!(
        err.contains("mock-server stopped: 0 chat requests"),
        "{err}"
    );
    let (code, _, err) = run_ppol(&["mock-server", "--lifetime-s=-1"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--lifetime-s must be a positive number"),
        "{err}"
    );
}
