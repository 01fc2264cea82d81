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
use ppol::generate::sandbox::Confinement;
use ppol::llm::{CallRole, ChatModel, ChatRequest, ChatResponse, Usage};
use serde_json::json;

const SECRET: &str = "sk-test-SECRET-4f1d2c9e7b";
/// Marker of the held-out human dialogues and the run log a program must not read.
const HELDOUT: &str = "HELDOUT-HUMAN-7c2e91";

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
            schema_mode: None,
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
    // The hostile suite is about containment: it runs only under the full confinement.
    assert_eq!(
        sandbox.report().confinement,
        Confinement::MinimalRoot,
        "{}",
        sandbox.report()
    );
    assert!(sandbox.report().pid_namespace && sandbox.report().seccomp);

    let secret_dir = tempfile::tempdir().unwrap();
    let secret_file = secret_dir.path().join("credentials");
    std::fs::write(&secret_file, SECRET).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        // Like ~/.ssh/id_rsa or a credentials file: owner-only.
        std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    // World-readable data of the run: held-out human dialogues and the run log.
    let data_dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let heldout = data_dir.path().join("heldout_humans.jsonl");
    let runlog = data_dir.path().join("log.jsonl");
    std::fs::write(&heldout, format!("{{\"dialogue\": \"{HELDOUT}\"}}\n")).unwrap();
    std::fs::write(&runlog, format!("{{\"candidate\": \"{HELDOUT}-log\"}}\n")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(data_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for f in [&heldout, &runlog] {
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let unix_path = data_dir.path().join("host.sock");
    let unix_listener = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
    unix_listener.set_nonblocking(true).unwrap();
    let abstract_name = format!("ppol-test-{}", std::process::id());
    let abstract_listener = {
        use std::os::linux::net::SocketAddrExt;
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        std::os::unix::net::UnixListener::bind_addr(&addr).unwrap()
    };
    abstract_listener.set_nonblocking(true).unwrap();
    let escape_dir = tempfile::tempdir().unwrap();
    let escape = escape_dir.path().join("escaped.txt");
    let escape_tmp = std::env::temp_dir().join(format!("ppol-escape-{}", std::process::id()));

    let ctx_home = json!({"host_pid": std::process::id(), "secret_file": secret_file}).to_string();
    let ctx_port = json!({ "port": port }).to_string();
    let ctx_write = json!({"paths": [escape, escape_tmp, "/ppol-escape-root.txt"]}).to_string();
    let ctx_heldout = json!({
        "paths": [heldout, runlog, checkout.join("Cargo.toml"), "/etc/hostname"],
        "dirs": [data_dir.path(), checkout, "/", "/root", "/home"],
    })
    .to_string();
    let ctx_unix = json!({"path": unix_path, "abstract": abstract_name}).to_string();

    // (label, fixture, task context, expected stage)
    // loop_forever first: runs wait for a slot in order, and its time is checked below.
    let cases: Vec<(&str, &str, String, Option<Stage>)> = vec![
        (
            "loop_forever",
            "loop_forever",
            "task".into(),
            Some(Stage::Timeout),
        ),
        ("env_secret", "env_secret", "task".into(), None),
        ("read_home", "read_home", ctx_home, None),
        ("read_heldout", "read_heldout", ctx_heldout, None),
        ("socket_local", "socket_local", ctx_port, None),
        ("socket_external", "socket_external", "task".into(), None),
        ("unix_socket_host", "unix_socket_host", ctx_unix, None),
        ("unshare_user", "unshare_user", "task".into(), None),
        ("write_outside", "write_outside", ctx_write, None),
        ("disk_fill", "disk_fill", "task".into(), None),
        ("memfd_hog", "memfd_hog", "task".into(), None),
        (
            "fork_bomb",
            "fork_bomb",
            "task".into(),
            Some(Stage::Resource),
        ),
        (
            "big_alloc",
            "big_alloc",
            "task".into(),
            Some(Stage::Resource),
        ),
        (
            "print_megabytes",
            "print_megabytes",
            "task".into(),
            Some(Stage::Resource),
        ),
        (
            "exit_mid_output",
            "exit_mid_output",
            "task".into(),
            Some(Stage::Protocol),
        ),
        (
            "garbage_on_pipe",
            "garbage_on_pipe",
            "task".into(),
            Some(Stage::Protocol),
        ),
        (
            "forged_result",
            "forged_result",
            "task".into(),
            Some(Stage::Protocol),
        ),
        (
            "wrong_types",
            "wrong_types",
            "task".into(),
            Some(Stage::Validate),
        ),
        (
            "wrong_count",
            "wrong_count",
            "task".into(),
            Some(Stage::Validate),
        ),
        (
            "empty_text",
            "empty_text",
            "task".into(),
            Some(Stage::Validate),
        ),
        (
            "duplicate_ids",
            "duplicate_ids",
            "task".into(),
            Some(Stage::Validate),
        ),
        ("long_id", "long_id", "task".into(), Some(Stage::Validate)),
        ("raises", "raises", "task".into(), Some(Stage::Generate)),
        (
            "escape_raise",
            "escape_sequences",
            "raise".into(),
            Some(Stage::Generate),
        ),
        ("escape_text", "escape_sequences", "text".into(), None),
        (
            "not_iterable",
            "not_iterable",
            "task".into(),
            Some(Stage::Generate),
        ),
        (
            "missing_axes",
            "missing_axes",
            "task".into(),
            Some(Stage::Contract),
        ),
        (
            "syntax_error",
            "syntax_error",
            "task".into(),
            Some(Stage::Import),
        ),
        (
            "exit_at_import",
            "exit_at_import",
            "task".into(),
            Some(Stage::Import),
        ),
        ("setsid_escape", "setsid_escape", "task".into(), None),
    ];
    let runs = cases.iter().map(|(_, file, ctx, _)| {
        let program = Program::Path(fixture(&format!("hostile/{file}.py")));
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
    for ((name, file, _, expected), (outcome, took)) in cases.iter().zip(&results) {
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
        assert!(
            !all_text(outcome).contains(SECRET),
            "{name} leaked the secret"
        );
        assert!(
            !all_text(outcome).contains(HELDOUT),
            "{name} read held-out data"
        );
        assert!(
            !all_text(outcome).contains("proxy.invalid"),
            "{name} saw the proxy"
        );
        if let Some(f) = outcome.failure() {
            assert!(
                f.program.ends_with(&format!("{file}.py")),
                "failure names the file"
            );
            // Nothing the program wrote reaches a terminal raw.
            for text in [&f.reason, &f.stderr_tail, &f.program] {
                assert!(
                    !text
                        .chars()
                        .any(|c| c.is_control() && c != '\n' && c != '\t'),
                    "{name}: raw control characters in {text:?}"
                );
            }
        }
        if let Some(personas) = outcome.personas() {
            for p in personas {
                for text in [&p.text, &p.description, &p.persona_id] {
                    assert!(
                        !text
                            .chars()
                            .any(|c| c.is_control() && c != '\n' && c != '\t'),
                        "{name}: raw control characters in {text:?}"
                    );
                }
            }
        }
    }
    let by_name = |n: &str| &results[cases.iter().position(|c| c.0 == n).unwrap()];
    // Environment: only the scrubbed variables.
    let env_text = all_text(&by_name("env_secret").0);
    assert!(env_text.contains("PYTHONHASHSEED") && !env_text.contains("OPENAI"));
    // Reading secrets: neither the host's environment nor an owner-only file is readable
    // (neither is even visible under the minimal root).
    let t = all_text(&by_name("read_home").0);
    let host_environ = format!("/proc/{}/environ", std::process::id());
    assert!(
        t.contains(&format!("{host_environ}: FileNotFoundError")),
        "{t}"
    );
    assert!(t.contains("credentials: FileNotFoundError"), "{t}");
    // Held-out data, the run log, the checkout, ppol's command line: none visible.
    let t = all_text(&by_name("read_heldout").0);
    assert!(t.contains("heldout_humans.jsonl: FileNotFoundError"), "{t}");
    assert!(t.contains("log.jsonl: FileNotFoundError"), "{t}");
    assert!(t.contains("Cargo.toml: FileNotFoundError"), "{t}");
    assert!(
        !t.contains("[package]") && !t.contains("deps/integration"),
        "{t}"
    );
    assert!(
        t.contains("pids: ['2']"),
        "only the program's own processes: {t}"
    );
    assert!(t.contains("/proc/1/cmdline: FileNotFoundError"), "{t}");
    // Network: neither listener saw a connection.
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
    assert!(
        unix_listener.accept().is_err() && abstract_listener.accept().is_err(),
        "a sandboxed program reached a unix socket of the host"
    );
    let t = all_text(&by_name("unix_socket_host").0);
    assert!(!t.contains("connected"), "{t}");
    assert_eq!(t.matches("PermissionError").count(), 2 * 3, "{t}");
    // No way to gain privileges inside: every attempt is refused by seccomp.
    let t = all_text(&by_name("unshare_user").0);
    for call in [
        "unshare(CLONE_NEWUSER)",
        "unshare(CLONE_NEWNS)",
        "setns",
        "mount",
        "chroot",
        "ptrace(PTRACE_ATTACH, 1)",
        "bpf",
        "keyctl",
        "io_uring_setup",
        "perf_event_open",
        "memfd_create",
        "clone(CLONE_NEWUSER)",
    ] {
        assert!(t.contains(&format!("{call}=EPERM")), "{call}: {t}");
    }
    // Writes outside the run directory.
    assert!(
        !escape.exists() && !escape_tmp.exists() && !Path::new("/ppol-escape-root.txt").exists()
    );
    let w = all_text(&by_name("write_outside").0);
    assert!(w.contains("inside.txt: written"), "{w}");
    // The disk: everything the program writes together is capped by its tmpfs.
    let t = by_name("disk_fill").0.personas().unwrap()[0].text.clone();
    let written: u64 = t
        .split("written=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX);
    let cap = sandbox.config().max_disk_bytes;
    assert!(
        written <= cap,
        "wrote {written} bytes with a {cap} byte cap: {t}"
    );
    assert!(t.contains("ENOSPC"), "{t}");
    // Memory outside RLIMIT_AS: memfd_create is refused, a shared mapping counts.
    let t = all_text(&by_name("memfd_hog").0);
    assert!(
        t.contains("memfd: PermissionError") && !t.contains("shared mmap: 1.5 GB"),
        "{t}"
    );
    // A forged result frame is caught on the host.
    let f = by_name("forged_result").0.failure().unwrap();
    assert!(f.reason.contains("declared"), "{}", f.reason);
    // Persona ids are capped, and the error names the limit.
    let f = by_name("long_id").0.failure().unwrap();
    assert!(f.reason.contains("limit is 64"), "{}", f.reason);
    // Escape sequences are neutralised in failures and stripped from personas.
    let f = by_name("escape_raise").0.failure().unwrap();
    assert!(f.reason.contains("\\u{1b}]0;pwned"), "{}", f.reason);
    assert!(
        f.stderr_tail.contains("stderr \\u{1b}"),
        "{}",
        f.stderr_tail
    );
    let ps = by_name("escape_text").0.personas().unwrap();
    assert!(
        ps[0].text.starts_with("text ]0;pwned[2J[31m"),
        "{}",
        ps[0].text
    );
    assert!(ps[0].text.ends_with(" end\nline two"), "{}", ps[0].text);
    // Timeout: dead within timeout + 1 s (generous: 3 s timeout, < 4.5 s).
    let loop_took = by_name("loop_forever").1;
    assert!(
        loop_took < Duration::from_millis(4500),
        "loop took {loop_took:?}"
    );
    // The daemon that escaped the process group is gone.
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        processes_with_marker("ppol-setsid-marker").is_empty(),
        "the setsid daemon survived"
    );
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

/// Pids of processes whose command line has `marker` as an argument.
fn processes_with_marker(marker: &str) -> Vec<u32> {
    let needle = format!("{marker}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let c = std::fs::read(e.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&c).contains(&needle).then_some(pid)
        })
        .collect()
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

    // The helper module the LLM seeds share (`ppol_personas`) is there for any program, also
    // one without an LLM, under the same confinement.
    let hm = generate_in(
        &sandbox,
        &Program::Path(fixture("ok/helper_module.py")),
        task,
        None,
        3,
        None,
        1,
    )
    .await
    .unwrap();
    let helped = hm.personas().unwrap_or_else(|| panic!("{hm:?}"));
    assert_eq!(
        helped
            .iter()
            .map(|p| p.persona_id.as_str())
            .collect::<Vec<_>>(),
        ["busy_bob", "busy_bob_2", "busy_bob_3"]
    );
    assert_eq!(helped[0].axis_placement["terse"], json!(true));
    assert!(helped[0]
        .text
        .starts_with("You are the customer described here: Bob is in a hurry"));

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

/// "Nothing escapes": kill -9 of ppol while a program runs leaves no process of the program
/// behind (not even a `setsid` daemon) — and the sandbox directory it left is swept by the
/// next start.
#[test]
fn killing_ppol_with_sigkill_kills_the_whole_run() {
    let work = tempfile::tempdir().unwrap();
    let marker = format!("ppol-kill9-marker-{}", std::process::id());
    let mut ppol = std::process::Command::new(env!("CARGO_BIN_EXE_ppol"))
        .args(["generate", "--program"])
        .arg(fixture("hostile/daemon_outlives_ppol.py"))
        .args(["--task", &json!({ "marker": marker }).to_string()])
        .args(["-n", "1", "--timeout", "120", "-o", "-"])
        .env("TMPDIR", work.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the daemon to be up.
    let t = Instant::now();
    while processes_with_marker(&marker).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the daemon never started"
        );
        assert!(ppol.try_wait().unwrap().is_none(), "ppol ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    let left_by_ppol: Vec<_> = std::fs::read_dir(work.path()).unwrap().flatten().collect();
    assert_eq!(left_by_ppol.len(), 1, "one sandbox directory");
    ppol.kill().unwrap(); // SIGKILL
    ppol.wait().unwrap();
    let t = Instant::now();
    while !processes_with_marker(&marker).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the run's daemon survived ppol: {:?}",
            processes_with_marker(&marker)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // ppol had no chance to remove its directory; it holds no file of the run (they were in
    // the run's own tmpfs), and the next start removes it.
    let stale = left_by_ppol[0].path();
    assert!(stale.exists());
    assert_eq!(
        ppol::generate::sandbox::sweep_stale_dirs(work.path()),
        1,
        "swept"
    );
    assert!(!stale.exists());
}

#[test]
fn only_stale_sandbox_directories_of_ours_are_swept() {
    let root = tempfile::tempdir().unwrap();
    // A finished process: its pid is free (or reused by another process with another start time).
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let me = std::process::id();
    let my_start: u64 = {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let rest = &stat[stat.rfind(')').unwrap() + 1..];
        rest.split_whitespace().nth(19).unwrap().parse().unwrap()
    };
    let make = |name: &str, owner: Option<String>| {
        let d = root.path().join(name);
        std::fs::create_dir_all(d.join("run-x/ppol")).unwrap();
        std::fs::write(d.join("run-x/program.py"), "x").unwrap();
        if let Some(o) = owner {
            std::fs::write(d.join(".ppol-owner"), o).unwrap();
        }
        d
    };
    let stale = make(
        &format!("ppol-gen-{gone_pid}-aaaa"),
        Some(format!("{gone_pid} 12345\n")),
    );
    let reused = make(
        &format!("ppol-gen-{me}-bbbb"),
        Some(format!("{me} {}\n", my_start + 1)),
    );
    let live = make(
        &format!("ppol-gen-{me}-cccc"),
        Some(format!("{me} {my_start}\n")),
    );
    let no_owner = make(&format!("ppol-gen-{gone_pid}-dddd"), None);
    let other_name = make("ppol-genius-1-eeee", Some(format!("{gone_pid} 1\n")));
    let mismatch = make(
        &format!("ppol-gen-{gone_pid}-ffff"),
        Some(format!("{me} {my_start}\n")),
    );
    assert_eq!(ppol::generate::sandbox::sweep_stale_dirs(root.path()), 2);
    assert!(!stale.exists() && !reused.exists());
    assert!(live.exists() && no_owner.exists() && other_name.exists() && mismatch.exists());
    // A symlink named like a sandbox directory is not followed.
    let target = tempfile::tempdir().unwrap();
    std::fs::write(target.path().join(".ppol-owner"), format!("{gone_pid} 1\n")).unwrap();
    std::os::unix::fs::symlink(
        target.path(),
        root.path().join(format!("ppol-gen-{gone_pid}-link")),
    )
    .unwrap();
    assert_eq!(ppol::generate::sandbox::sweep_stale_dirs(root.path()), 0);
    assert!(target.path().join(".ppol-owner").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_configuration_is_an_error_naming_the_key() {
    for secs in [-1.0, f64::NAN, f64::INFINITY, 0.0] {
        let e = SandboxConfig::timeout_from_secs(secs).unwrap_err();
        assert!(e.to_string().contains("sandbox.timeout_s"), "{e}");
    }
    let cfg = SandboxConfig {
        timeout: Duration::ZERO,
        ..SandboxConfig::default()
    };
    let e = Sandbox::new(cfg).await.unwrap_err();
    assert!(
        matches!(e, ppol::Error::Config { ref key, .. } if key == "sandbox.timeout_s"),
        "{e}"
    );
}

#[test]
fn ids_axes_and_text_are_checked_on_the_host() {
    use ppol::generate::generator::{check_axes, MAX_PERSONA_ID_CHARS};
    let axes = vec!["a".to_string()];
    let row = |id: &str| json!({"persona_id": id, "axis_placement": {"a": true}, "text": "t\u{1b}[2Jx\r\ny"});
    // Ids: capped after normalisation, the error names the limit.
    let long = "Ab ".repeat(40);
    let e = validate(&axes, &[row(&long)], 1, false, 1, None).unwrap_err();
    assert!(
        e.contains(&format!("the limit is {MAX_PERSONA_ID_CHARS}")),
        "{e}"
    );
    let ok = validate(
        &axes,
        &[row(&"x".repeat(MAX_PERSONA_ID_CHARS))],
        1,
        false,
        1,
        None,
    );
    assert!(ok.is_ok(), "{ok:?}");
    // Text loses its control characters (newlines stay).
    let p = &validate(&axes, &[row("Émile Zoë")], 1, false, 1, None).unwrap()[0];
    assert_eq!(p.text, "t[2Jx\ny");
    // Ids produced by validation match the persona schema's pattern.
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("generators/persona.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let id_schema = &schema["properties"]["persona_id"];
    let pattern = regex::Regex::new(id_schema["pattern"].as_str().unwrap()).unwrap();
    assert_eq!(
        id_schema["maxLength"].as_u64(),
        Some(MAX_PERSONA_ID_CHARS as u64)
    );
    for id in ["Émile Zoë", "A-b_C  9", "x", "日本 語"] {
        let p = &validate(&axes, &[row(id)], 1, false, 1, None).unwrap()[0];
        assert!(
            pattern.is_match(&p.persona_id),
            "{} from {id}",
            p.persona_id
        );
    }
    // Axis names the untrusted harness sends are checked like the harness does, and more.
    assert!(check_axes(&["terse".into(), "skeptical".into()]).is_ok());
    for bad in [
        vec!["a".to_string(), "a".to_string()],
        vec![" a".to_string()],
        vec!["".to_string()],
        vec!["a\u{1b}b".to_string()],
        vec!["x".repeat(101)],
        (0..65).map(|i| format!("a{i}")).collect(),
    ] {
        assert!(check_axes(&bad).is_err(), "{bad:?}");
        let rows: Vec<_> = (0..1)
            .map(|_| json!({"persona_id": "p", "text": "t"}))
            .collect();
        assert!(validate(&bad, &rows, 1, false, 1, None).is_err());
    }
}

#[test]
fn a_persona_source_is_a_short_label_that_reaches_the_record() {
    let axes = vec!["a".to_string()];
    let row = |source: serde_json::Value| json!({"persona_id": "p", "axis_placement": {"a": true}, "text": "t", "source": source});
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("generators/persona.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let pattern =
        regex::Regex::new(schema["properties"]["source"]["pattern"].as_str().unwrap()).unwrap();
    for label in ["model-json", "repaired", "fallback", "stage_2"] {
        let p = &validate(&axes, &[row(json!(label))], 1, false, 1, None).unwrap()[0];
        assert_eq!(p.source.as_deref(), Some(label));
        assert!(pattern.is_match(label));
        let line = serde_json::to_value(p).unwrap();
        assert_eq!(line["source"], label, "{line}");
    }
    let none = &validate(&axes, &[row(json!(null))], 1, false, 1, None).unwrap()[0];
    assert_eq!(none.source, None);
    assert!(serde_json::to_value(none).unwrap().get("source").is_none());
    for bad in [
        json!("Model JSON"),
        json!(""),
        json!("x".repeat(33)),
        json!(3),
        json!("a\u{1b}b"),
    ] {
        let e = validate(&axes, &[row(bad.clone())], 1, false, 1, None).unwrap_err();
        assert!(e.contains("source"), "{bad}: {e}");
    }
}

#[test]
fn the_prompt_format_writes_no_raw_control_characters() {
    use ppol::generate::generator::{format_personas, OutputFormat};
    let p = ppol::persona::Persona {
        task_id: Some("t\u{1b}[2J".into()),
        persona_id: "p".into(),
        description: String::new(),
        axis_placement: Default::default(),
        text: "be \u{1b}]0;title\u{7} brief\nsecond line".into(),
        reasoning: None,
        source: None,
    };
    for format in [
        OutputFormat::Prompt,
        OutputFormat::Jsonl,
        OutputFormat::Tau2,
    ] {
        let out = format_personas(std::slice::from_ref(&p), format);
        assert!(
            !out.chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t'),
            "{format:?}: {out:?}"
        );
    }
    let prompt = format_personas(std::slice::from_ref(&p), OutputFormat::Prompt);
    assert!(
        prompt.contains("be \\u{1b}]0;title\\u{7} brief\nsecond line"),
        "{prompt}"
    );
    assert!(
        prompt.starts_with("# task t\\u{1b}[2J / persona p"),
        "{prompt}"
    );
}
