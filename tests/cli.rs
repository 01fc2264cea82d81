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
        err.contains("'--lifetime-s <LIFETIME_S>': must be a number of seconds above 0"),
        "{err}"
    );
}

/// One HTTP/1.1 request on a fresh connection: (status, body).
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    (head[9..12].parse().unwrap(), body.to_string())
}

#[test]
fn mock_server_flags_set_replicas_latency_strictness_and_the_context_window() {
    use std::io::BufRead;
    let mut child = crate::util::ppol()
        .args([
            "mock-server",
            "--replicas",
            "2",
            "--serial",
            "--latency-ms",
            "150",
            "--strict",
            "--n-ctx",
            "20",
            "--lifetime-s",
            "60",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let ready: Vec<serde_json::Value> = (0..2)
        .map(|_| serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap())
        .collect();
    let addr = |i: usize| ready[i]["addr"].as_str().unwrap().to_string();
    assert_ne!(addr(0), addr(1));
    assert_eq!(
        (ready[0]["replica"].clone(), ready[1]["replica"].clone()),
        (0.into(), 1.into())
    );

    let chat = |i: usize, body: serde_json::Value| {
        http(&addr(i), "POST", "/v1/chat/completions", &body.to_string())
    };
    // 100 characters: 26 tokens, over the 20-token window.
    let (status, body) = chat(
        0,
        serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(100)}]}),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("maximum context length is 20 tokens"),
        "{body}"
    );
    let (status, body) = chat(
        1,
        serde_json::json!({"model": "m", "messages": [{"role": "assistant", "content": null}]}),
    );
    assert_eq!(status, 500, "{body}");
    let t = std::time::Instant::now();
    let (status, body) = chat(
        1,
        serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(status, 200, "{body}");
    assert!(t.elapsed() >= std::time::Duration::from_millis(150));
    // Counters are per replica.
    let stats = |i: usize| -> serde_json::Value {
        serde_json::from_str(&http(&addr(i), "GET", "/mock/stats", "").1).unwrap()
    };
    let (s0, s1) = (stats(0), stats(1));
    assert_eq!(
        (s0["requests"].clone(), s1["requests"].clone()),
        (1.into(), 2.into())
    );
    assert_eq!(s0["statuses"]["400"], 1);
    assert_eq!(
        (s1["statuses"]["500"].clone(), s1["statuses"]["200"].clone()),
        (1.into(), 1.into())
    );
    child.kill().unwrap();
    child.wait().unwrap();

    // Flags that need each other, and bad values, are one-line errors with exit code 2.
    for (args, needle) in [
        (&["--fill-context"][..], "--n-ctx"),
        (&["--down-after-requests", "3"][..], "--down-for-s"),
        (&["--serial", "--slots", "2"][..], "--slots"),
        (
            &["--tokens-per-s", "0"][..],
            "'--tokens-per-s <T>': must be a number above 0",
        ),
        (
            &["--down-after-requests", "3", "--down-for-s=-1"][..],
            "'--down-for-s <S>': must be a number of seconds above 0",
        ),
        (
            &["--replicas", "0"][..],
            "'--replicas <K>': must be at least 1",
        ),
    ] {
        let mut all = vec!["mock-server", "--lifetime-s", "5"];
        all.extend_from_slice(args);
        let (code, out, err) = run_ppol(&all);
        assert_eq!((code, out.as_str()), (2, ""), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn bench_evolve_reports_gains_on_held_out_humans() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bench");
    let args = [
        "bench",
        "evolve",
        "--seeds",
        "2",
        "--iterations",
        "2",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ];
    let (code, stdout, err) = run_ppol(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for (i, r) in runs.iter().enumerate() {
        assert_eq!(r["seed"], i as u64 + 1);
        assert_eq!(r["iterations"], 2);
        assert!(r["wall_s"].as_f64().unwrap() > 0.0 && r["cpu_s"].as_f64().unwrap() > 0.0);
        assert!(r["n_heldout"].as_u64().unwrap() > 0);
        // the episodes it played, as its run_stopped counts them
        let e = &r["episodes"];
        let n = |k: &str| e[k].as_u64().unwrap();
        assert!(n("baseline") > 0 && n("candidates") > 0, "{e}");
        assert_eq!(
            n("total"),
            n("baseline") + n("candidates") + n("stopped_early") + n("validations")
        );
        assert_eq!(r["cascade"], true);
        let score = |name: &str| {
            r["table"]["rows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|row| row["name"] == name)
                .unwrap_or_else(|| panic!("no {name} row"))["score"]
                .as_f64()
                .unwrap()
        };
        let gain = v["evolved_minus_seed"][i].as_f64().unwrap();
        assert!((gain - (score("evolved") - score("seed"))).abs() < 1e-12);
        let gain = v["evolved_minus_base"][i].as_f64().unwrap();
        assert!((gain - (score("evolved") - score("base"))).abs() < 1e-12);
        let dir = out.join(format!("seed-{}", i + 1));
        assert!(dir.join("eval-test.json").is_file() && dir.join("best/program.py").is_file());
    }
    // the runs are kept: a second benchmark into the same directory is refused
    let (code, _, err) = run_ppol(&args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("seed-1") && err.contains("exists"), "{err}");
}

/// `--compare-cascade` plays every seed with the cascade on and off, keeps both runs, and says
/// what each played.
#[test]
fn bench_evolve_compares_the_cascade_on_and_off() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bench");
    let base = [
        "bench",
        "evolve",
        "--seeds",
        "1",
        "--iterations",
        "3",
        "--compare-cascade",
        "--out",
    ];
    let mut args = base.to_vec();
    args.extend([out.to_str().unwrap(), "--json"]);
    let (code, stdout, err) = run_ppol(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let off = &v["cascade_off"];
    assert_eq!(v["runs"][0]["cascade"], true);
    assert_eq!(off["runs"][0]["cascade"], false);
    assert_eq!(off["runs"][0]["episodes"]["stopped_early"], 0);
    assert_eq!(off["evolved_minus_seed"].as_array().unwrap().len(), 1);
    for arm in ["cascade-on", "cascade-off"] {
        assert!(
            out.join(arm).join("seed-1/eval-test.json").is_file(),
            "{arm}"
        );
    }
    // the text form: both arms, then their comparison
    let text_out = tmp.path().join("text");
    let mut args = base.to_vec();
    args.push(text_out.to_str().unwrap());
    let (code, stdout, err) = run_ppol(&args);
    assert_eq!(code, 0, "{err}");
    for needle in [
        "== cascade on",
        "== cascade off",
        "== cascade on vs off",
        "episodes played: on ",
        "standard error",
    ] {
        assert!(stdout.contains(needle), "{needle}: {stdout}");
    }
}

/// A world the settings cannot play (a task file for a built-in world) is refused when the
/// configuration is read: exit 2 naming the key and where its value came from, before the run
/// directory exists. The Ray executor with a world ppol plays itself (`chat`, the built-in
/// worlds) is accepted: it has no simulator processes to place, and plays locally.
#[test]
fn settings_a_world_cannot_take_are_refused_before_the_run_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let out_s = out.display().to_string();
    let tasks = root().join("tests/fixtures/worlds/tasks.jsonl");
    let tasks_s = tasks.display().to_string();
    let cfg = tmp.path().join("run.toml");
    std::fs::write(
        &cfg,
        format!(
            "[run]\nworld = \"chat\"\n\n[world]\nexecutor = \"ray\"\ntask_file = {tasks_s:?}\n"
        ),
    )
    .unwrap();
    let parsed = ppol::evolve::config::RunConfig::load(&cfg).unwrap();
    assert!(parsed.world.ignores_executor(&parsed.world_spec()));
    let cases: [(&[&str], &str, &str); 1] = [(
        &["--domain", "demo", "--task-file", &tasks_s],
        "'world.task_file'",
        "(from the flag --task-file)",
    )];
    for (flags, key, origin) in cases {
        let mut args = vec!["evolve", "--out", &out_s];
        args.extend_from_slice(flags);
        let (code, _, err) = run_ppol(&args);
        assert_eq!(code, 2, "{flags:?}: {err}");
        assert!(
            err.contains(key) && err.contains(origin),
            "{flags:?}: {err}"
        );
        assert!(!out.exists(), "{flags:?}: the run directory was created");
    }
}

/// Every verb that takes a run directory says the same of a path that is none: missing, or a
/// file.
#[test]
fn verbs_taking_a_run_directory_agree_on_a_path_that_is_none() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let missing = tmp.path().join("missing").display().to_string();
    let file = file.display().to_string();
    for (path, what) in [
        (&missing, "no such run directory"),
        (&file, "not a directory"),
    ] {
        let verbs: [Vec<&str>; 4] = [
            vec!["eval", path],
            vec!["resume", path],
            vec!["report", path],
            vec!["generate", "--run", path, "-n", "1"],
        ];
        for args in verbs {
            let (code, _, err) = run_ppol(&args);
            assert_eq!(code, 2, "{args:?}: {err}");
            assert!(
                err.contains(&format!("run directory '{path}': {what} (expected a run directory made by `ppol evolve --out DIR`)")),
                "{args:?}: {err}"
            );
        }
    }
}

/// A standard output that cannot be written (`/dev/full`) is an error with its reason and exit
/// 2 in every verb that prints, never a panic (exit 101).
#[test]
fn a_full_stdout_is_an_error_not_a_panic() {
    let human = root().join("fitness/demo/human.jsonl");
    let base = root().join("fitness/demo/baseline.jsonl");
    let cand = root().join("fitness/demo/candidates.jsonl");
    let (h, b, c) = (
        human.to_str().unwrap(),
        base.to_str().unwrap(),
        cand.to_str().unwrap(),
    );
    let cases: Vec<Vec<&str>> = vec![
        vec!["traces", "stats", h],
        vec!["audit", "--human", h, b, "--bootstrap", "5"],
        vec!["score", "--human", h, "--baseline", b, c],
        vec!["fingerprint", h],
    ];
    for args in cases {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = crate::util::ppol()
            .args(&args)
            .stdout(full)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.contains("No space left on device"), "{args:?}: {err}");
    }
}
