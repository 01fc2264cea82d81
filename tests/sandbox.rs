//! Sandbox and generator-contract tests: hostile programs, seeds, LLM proxy, timing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ppol::dialogue::{Role, Turn};
use ppol::generate::generator::{
    generate_in, validate, GenerationOutcome, Program, Sandbox, SandboxConfig, Stage,
};
use ppol::llm::{CallRole, ChatModel, ChatRequest, ChatResponse, Usage};
use serde_json::json;

const SECRET: &str = "sk-test-SECRET-4f1d2c9e7b";

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/generators")
        .join(rel)
}

fn seed(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("seeds")
        .join(name)
}

/// Answers like a model would: a population JSON for stage-1 prompts, a persona array for
/// direct prompts, a roleplay paragraph otherwise.
struct FakeLlm {
    calls: AtomicUsize,
}

#[async_trait]
impl ChatModel for FakeLlm {
    fn describe(&self) -> String {
        "fake:test".into()
    }
    async fn chat(&self, request: &ChatRequest) -> ppol::Result<ChatResponse> {
        assert_eq!(request.role, CallRole::Generator);
        self.calls.fetch_add(1, Ordering::SeqCst);
        let prompt = &request.messages.last().unwrap().content;
        let text = if prompt.contains("Invent exactly") {
            let rows: Vec<_> = (0..12)
                .map(|i| {
                    json!({"persona_id": format!("Person {i}"), "description": "Busy. Direct.",
                       "axis_placement": {"terse": i % 2 == 0, "skeptical": "yes", "frustrated": 0},
                       "reasoning": "Plausible."})
                })
                .collect();
            format!(
                "Here you go:\n```json\n{}\n```",
                serde_json::to_string(&rows).unwrap()
            )
        } else if prompt.contains("different personas for this customer") {
            json!([{"persona_id": "a", "description": "d", "reasoning": "r", "text": "You type fast."},
                   {"persona_id": "b", "description": "d", "reasoning": "r", "text": ""}])
            .to_string()
        } else {
            format!("You answer briefly. ({} chars of prompt)", prompt.len())
        };
        Ok(ChatResponse {
            message: Turn::new(Role::Assistant, text),
            usage: Usage::default(),
            model: "fake".into(),
            cached: false,
            finish_reason: Some("stop".into()),
            notes: Vec::new(),
        })
    }
}

fn test_cfg(timeout: Duration) -> SandboxConfig {
    SandboxConfig {
        timeout,
        max_llm_calls: 20,
        ..SandboxConfig::default()
    }
}

fn stage(o: &GenerationOutcome) -> Option<Stage> {
    o.failure().map(|f| f.stage)
}

fn all_text(o: &GenerationOutcome) -> String {
    match o {
        GenerationOutcome::Ok { personas, .. } => serde_json::to_string(personas).unwrap(),
        GenerationOutcome::Failed(f) => serde_json::to_string(f).unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_programs_are_contained_and_the_sandbox_keeps_working() {
    // SAFETY (edition 2021): set before any sandbox runs; the child env is scrubbed anyway.
    std::env::set_var("OPENAI_API_KEY", SECRET);
    std::env::set_var("HTTPS_PROXY", "http://proxy.invalid:3128");
    let sandbox = Sandbox::new(test_cfg(Duration::from_secs(3)))
        .await
        .unwrap();
    eprintln!("{}", sandbox.report());

    let secret_dir = tempfile::tempdir().unwrap();
    let secret_file = secret_dir.path().join("credentials");
    std::fs::write(&secret_file, SECRET).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        // Like ~/.ssh/id_rsa or a credentials file: owner-only. (World-readable files stay
        // readable inside the sandbox; see generators/README.md.)
        std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let escape_dir = tempfile::tempdir().unwrap();
    let escape = escape_dir.path().join("escaped.txt");
    let escape_tmp = std::env::temp_dir().join(format!("ppol-escape-{}", std::process::id()));

    let ctx_home = json!({"host_pid": std::process::id(), "secret_file": secret_file}).to_string();
    let ctx_port = json!({ "port": port }).to_string();
    let ctx_write = json!({"paths": [escape, escape_tmp, "/ppol-escape-root.txt"]}).to_string();

    let cases: Vec<(&str, String, Option<Stage>)> = vec![
        ("env_secret", "task".into(), None),
        ("read_home", ctx_home, None),
        ("socket_local", ctx_port, None),
        ("socket_external", "task".into(), None),
        ("write_outside", ctx_write, None),
        ("fork_bomb", "task".into(), Some(Stage::Resource)),
        ("big_alloc", "task".into(), Some(Stage::Resource)),
        ("loop_forever", "task".into(), Some(Stage::Timeout)),
        ("print_megabytes", "task".into(), Some(Stage::Resource)),
        ("exit_mid_output", "task".into(), Some(Stage::Protocol)),
        ("garbage_on_pipe", "task".into(), Some(Stage::Protocol)),
        ("wrong_types", "task".into(), Some(Stage::Validate)),
        ("wrong_count", "task".into(), Some(Stage::Validate)),
        ("empty_text", "task".into(), Some(Stage::Validate)),
        ("duplicate_ids", "task".into(), Some(Stage::Validate)),
        ("raises", "task".into(), Some(Stage::Generate)),
        ("not_iterable", "task".into(), Some(Stage::Generate)),
        ("missing_axes", "task".into(), Some(Stage::Contract)),
        ("syntax_error", "task".into(), Some(Stage::Import)),
        ("exit_at_import", "task".into(), Some(Stage::Import)),
        ("setsid_escape", "task".into(), None),
    ];
    let runs = cases.iter().map(|(name, ctx, _)| {
        let program = Program::Path(fixture(&format!("hostile/{name}.py")));
        let sandbox = &sandbox;
        async move {
            let t = Instant::now();
            let o = generate_in(sandbox, &program, ctx, Some("t1"), 3, None, 7)
                .await
                .unwrap();
            (o, t.elapsed())
        }
    });
    let results = futures::future::join_all(runs).await;
    let mut report = Vec::new();
    for ((name, _, expected), (outcome, took)) in cases.iter().zip(&results) {
        let line = format!(
            "{name:16} -> {:?} in {:.2}s: {}",
            stage(outcome).map(|s| s.as_str()).unwrap_or("ok"),
            took.as_secs_f64(),
            all_text(outcome)
                .chars()
                .take(if std::env::var_os("PPOL_TEST_FULL").is_some() {
                    100_000
                } else {
                    300
                })
                .collect::<String>()
        );
        eprintln!("{line}");
        report.push(line);
        assert_eq!(stage(outcome), *expected, "{name}: {outcome:?}");
        // Without root there is no uid drop: the program runs as the host user and can read
        // that user's own 0600 files (documented limit); the environment is still scrubbed.
        let own_files_readable = sandbox.report().uid.is_none() && *name == "read_home";
        if !own_files_readable {
            assert!(
                !all_text(outcome).contains(SECRET),
                "{name} leaked the secret"
            );
        }
        assert!(
            !all_text(outcome).contains("proxy.invalid"),
            "{name} saw the proxy"
        );
        if let Some(f) = outcome.failure() {
            assert!(
                f.program.ends_with(&format!("{name}.py")),
                "failure names the file"
            );
        }
    }
    let by_name = |n: &str| &results[cases.iter().position(|c| c.0 == n).unwrap()];
    // Environment: only the scrubbed variables.
    let env_text = all_text(&by_name("env_secret").0);
    assert!(env_text.contains("PYTHONHASHSEED") && !env_text.contains("OPENAI"));
    // Reading secrets: the secret file is readable only if privileges could not be dropped.
    let t = all_text(&by_name("read_home").0);
    let host_environ = format!("/proc/{}/environ: PermissionError", std::process::id());
    assert!(t.contains(&host_environ), "{t}");
    if sandbox.report().uid.is_some() {
        assert!(t.contains("credentials: PermissionError"), "{t}");
    }
    // Network: the listener never saw a connection.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        listener.accept().is_err(),
        "a sandboxed program reached the host loopback"
    );
    let ext = all_text(&by_name("socket_external").0);
    assert!(
        !ext.contains("connected") && !ext.contains("udp sent"),
        "{ext}"
    );
    // Writes outside the run directory.
    assert!(
        !escape.exists() && !escape_tmp.exists() && !Path::new("/ppol-escape-root.txt").exists()
    );
    let w = all_text(&by_name("write_outside").0);
    assert!(w.contains("inside.txt: written"), "{w}");
    // Timeout: dead within timeout + 1 s (generous: 3 s timeout, < 4.5 s).
    let loop_took = by_name("loop_forever").1;
    assert!(
        loop_took < Duration::from_millis(4500),
        "loop took {loop_took:?}"
    );
    // The daemon that escaped the process group is gone.
    std::thread::sleep(Duration::from_millis(100));
    let daemons: Vec<_> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).contains("ppol-setsid-marker\0"))
        .collect();
    assert!(daemons.is_empty(), "the setsid daemon survived");
    if let Some(uid) = sandbox.report().uid {
        std::thread::sleep(Duration::from_millis(100));
        let left: Vec<_> = list_uids_at_or_above(uid)
            .into_iter()
            .filter(|(_, u)| *u < uid + 64)
            .collect();
        assert!(left.is_empty(), "processes left behind: {left:?}");
    }

    // After all of that, good programs still work through the same sandbox.
    let llm = Arc::new(FakeLlm {
        calls: AtomicUsize::new(0),
    });
    let ok = generate_in(
        &sandbox,
        &Program::Path(fixture("ok/llm_user.py")),
        "book a flight",
        Some("t2"),
        4,
        Some(llm.clone()),
        1,
    )
    .await
    .unwrap();
    let GenerationOutcome::Ok {
        personas,
        llm_calls,
        ..
    } = &ok
    else {
        panic!("{ok:?}")
    };
    assert_eq!(personas.len(), 4);
    assert_eq!(personas[0].persona_id, "persona_0");
    assert_eq!(personas[0].task_id.as_deref(), Some("t2"));
    assert!(personas[0].text.starts_with("You answer briefly."));
    assert!(personas[0]
        .reasoning
        .as_deref()
        .unwrap()
        .contains("cap of 20"));
    assert_eq!(*llm_calls, 20);
    assert_eq!(llm.calls.load(Ordering::SeqCst), 20);
}

fn list_uids_at_or_above(base: u32) -> Vec<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
            if let Ok(md) = std::fs::metadata(e.path()) {
                if md.uid() >= base {
                    out.push((pid, md.uid()));
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_forever_is_killed_within_timeout_plus_one_second() {
    let sandbox = Sandbox::new(test_cfg(Duration::from_secs(2)))
        .await
        .unwrap();
    let t = Instant::now();
    let o = generate_in(
        &sandbox,
        &Program::Path(fixture("hostile/loop_forever.py")),
        "x",
        None,
        2,
        None,
        0,
    )
    .await
    .unwrap();
    let took = t.elapsed();
    eprintln!("loop_forever with a 2 s timeout: failed after {took:?}");
    assert_eq!(stage(&o), Some(Stage::Timeout));
    assert!(took < Duration::from_millis(3500), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeds_run_and_satisfy_the_contract() {
    let sandbox = Sandbox::new(test_cfg(Duration::from_secs(30)))
        .await
        .unwrap();
    let llm: Arc<dyn ChatModel> = Arc::new(FakeLlm {
        calls: AtomicUsize::new(0),
    });
    let task = "Cancel reservation EHGLP3 for user emma_kim_9957; she wants a refund.";

    let off = Program::Path(seed("offline_templates.py"));
    let a = generate_in(&sandbox, &off, task, Some("7"), 10, None, 3)
        .await
        .unwrap();
    let b = generate_in(&sandbox, &off, task, Some("7"), 10, None, 3)
        .await
        .unwrap();
    let c = generate_in(&sandbox, &off, task, Some("7"), 10, None, 4)
        .await
        .unwrap();
    let pa = a.personas().unwrap_or_else(|| panic!("{a:?}"));
    assert_eq!(pa.len(), 10);
    assert_eq!(a.personas(), b.personas(), "offline seed is deterministic");
    assert_ne!(a.personas(), c.personas(), "the seed changes the output");
    let corners: std::collections::HashSet<String> = pa
        .iter()
        .map(|p| serde_json::to_string(&p.axis_placement).unwrap())
        .collect();
    assert_eq!(corners.len(), 10, "10 distinct corners of 16");
    assert_eq!(
        pa[0].axis_placement.keys().collect::<Vec<_>>(),
        ["terse", "skeptical", "frustrated", "ambiguous"]
    );

    let two = generate_in(
        &sandbox,
        &Program::Path(seed("two_stage_llm.py")),
        task,
        None,
        5,
        Some(llm.clone()),
        1,
    )
    .await
    .unwrap();
    let GenerationOutcome::Ok {
        personas,
        llm_calls,
        ..
    } = &two
    else {
        panic!("{two:?}")
    };
    assert_eq!((personas.len(), *llm_calls), (5, 6));
    assert_eq!(personas[0].persona_id, "person_0");
    assert_eq!(personas[0].axis_placement["skeptical"], json!(true));
    assert_eq!(personas[0].axis_placement["ambiguous"], json!(false));

    let dp = generate_in(
        &sandbox,
        &Program::Path(seed("direct_prompt.py")),
        task,
        None,
        3,
        Some(llm.clone()),
        1,
    )
    .await
    .unwrap();
    let ids: Vec<_> = dp
        .personas()
        .unwrap_or_else(|| panic!("{dp:?}"))
        .iter()
        .map(|p| p.persona_id.clone())
        .collect();
    assert_eq!(ids, ["a", "a_2", "a_3"]);

    // Odd strings (lone surrogate, emoji, newlines) survive the protocol.
    let odd = generate_in(
        &sandbox,
        &Program::Path(fixture("ok/odd_strings.py")),
        task,
        None,
        2,
        None,
        0,
    )
    .await
    .unwrap();
    let odd_text = &odd.personas().unwrap_or_else(|| panic!("{odd:?}"))[0].text;
    assert!(odd_text.starts_with("line one\nline two \u{1F600} ") && odd_text.ends_with(" end"));

    // A program written against the ppol 0.1.1 helper modules runs unchanged.
    let rs = generate_in(
        &sandbox,
        &Program::Path(fixture("ok/reference_style.py")),
        task,
        None,
        4,
        Some(llm.clone()),
        1,
    )
    .await
    .unwrap();
    let GenerationOutcome::Ok {
        personas,
        llm_calls,
        ..
    } = &rs
    else {
        panic!("{rs:?}")
    };
    assert_eq!((personas.len(), *llm_calls), (4, 6));
    assert_eq!(
        personas[0].axis_placement.keys().collect::<Vec<_>>(),
        ["terse", "skeptical"]
    );

    // Without an LLM the LLM seeds fail cleanly at the generate stage.
    let none = generate_in(
        &sandbox,
        &Program::Path(seed("two_stage_llm.py")),
        task,
        None,
        5,
        None,
        1,
    )
    .await
    .unwrap();
    assert_eq!(stage(&none), Some(Stage::Generate));
    assert!(none.failure().unwrap().reason.contains("LLMError"));
}

#[test]
fn validation_rules() {
    let axes = vec!["a".to_string(), "b".to_string()];
    let row = |id: &str, a: serde_json::Value| json!({"persona_id": id, "description": "d", "axis_placement": a, "text": "t"});
    let good = vec![
        row("X y", json!({"b": true, "a": false})),
        row("z", json!({"a": true, "b": true})),
    ];
    let ps = validate(&axes, &good, 2, false, 2, Some("9")).unwrap();
    assert_eq!(ps[0].persona_id, "x_y");
    assert_eq!(ps[0].axis_placement.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert!(validate(&axes, &good, 2, false, 3, None)
        .unwrap_err()
        .contains("expected 3"));
    let extra = vec![
        row("x", json!({"a": true, "b": true, "c": false})),
        row("z", json!({"a": true, "b": true})),
    ];
    assert!(validate(&axes, &extra, 2, false, 2, None)
        .unwrap_err()
        .contains("'c'"));
    let missing = vec![
        row("x", json!({"a": true})),
        row("z", json!({"a": true, "b": true})),
    ];
    assert!(validate(&axes, &missing, 2, false, 2, None)
        .unwrap_err()
        .contains("lacks axis 'b'"));
    let dup = vec![
        row("x", json!({"a": true, "b": true})),
        row("X", json!({"a": true, "b": true})),
    ];
    assert!(validate(&axes, &dup, 2, false, 2, None)
        .unwrap_err()
        .contains("duplicate"));
}

/// 1,000 offline-seed generations (N = 10). Run with
/// `cargo test --test integration sandbox::throughput -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn throughput_1000_offline_runs() {
    let mut cfg = test_cfg(Duration::from_secs(30));
    if std::env::var_os("PPOL_THROUGHPUT_PLAIN").is_some() {
        // For comparison only: no namespaces, no seccomp, no uid drop (rlimits stay).
        cfg.isolate_network = false;
        cfg.readonly_root = false;
        cfg.drop_privileges = false;
        cfg.seccomp = false;
    }
    let sandbox = Sandbox::new(cfg).await.unwrap();
    eprintln!("{}", sandbox.report());
    let program = Program::Source {
        name: "seeds/offline_templates.py".into(),
        code: std::fs::read_to_string(seed("offline_templates.py")).unwrap(),
    };
    let t = Instant::now();
    let runs = (0..1000).map(|i| {
        let sandbox = &sandbox;
        let program = &program;
        async move {
            let ctx = format!("Task number {i}: the customer wants to change a booking.");
            generate_in(sandbox, program, &ctx, None, 10, None, i)
                .await
                .unwrap()
        }
    });
    let results = futures::future::join_all(runs).await;
    let wall = t.elapsed();
    let ok = results.iter().filter(|o| o.personas().is_some()).count();
    eprintln!(
        "1000 offline generations (N=10): {:.1} s wall, {ok} ok, concurrency {}",
        wall.as_secs_f64(),
        sandbox.config().concurrency
    );
    assert_eq!(ok, 1000);
}

#[test]
fn cli_generate_with_a_scripted_llm_writes_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    let population = json!([
        {"persona_id": "Ann", "description": "d", "axis_placement": {"terse": true}, "reasoning": "r"},
        {"persona_id": "Bob", "description": "d", "axis_placement": {"ambiguous": "yes"}, "reasoning": "r"}
    ]);
    std::fs::write(
        &script,
        json!({"rules": [{"contains": "Invent exactly", "reply": population.to_string()}],
               "default": "You type in lowercase."})
        .to_string(),
    )
    .unwrap();
    let out = dir.path().join("out.jsonl");
    let code = ppol::front::cli::main_from([
        "ppol".to_string(),
        "generate".into(),
        "--program".into(),
        seed("two_stage_llm.py").display().to_string(),
        "--task".into(),
        "Change my flight to Friday.".into(),
        "-n".into(),
        "2".into(),
        "--llm".into(),
        format!("script:{}", script.display()),
        "-o".into(),
        out.display().to_string(),
    ]);
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    let text = std::fs::read_to_string(&out).unwrap();
    let rows: Vec<ppol::persona::Persona> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].persona_id, "bob");
    assert_eq!(rows[1].axis_placement["ambiguous"], json!(true));
    assert_eq!(rows[0].text, "You type in lowercase.");
}
