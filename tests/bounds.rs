//! Nothing unbounded (issue #24, "Bounds"): every count and size has an upper bound, and a
//! value beyond it is one clear error (exit 2) naming the flag, key, file or line; input traces
//! that cannot be scored are refused or skipped with a warning naming the file and line; text
//! that reorders what a reader sees (Unicode bidi controls) never reaches a person raw.
//!
//! Streams and large files are made here (FIFOs fed by a thread, sparse files), never with
//! rlimits, and every run has a deadline: a read without bound is killed and fails the test.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{ppol, root};

/// The bidi embedding, override and isolate controls (what rustc's
/// `text_direction_codepoint_in_literal` lint names).
const BIDI: [char; 9] = [
    '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}',
    '\u{2069}',
];

fn bidi_count(text: &str) -> usize {
    text.chars().filter(|c| BIDI.contains(c)).count()
}

/// Run `cmd` (stdin from `stdin` bytes fed endlessly by a thread when given), killing it after
/// `deadline`; returns (exit code, stdout, stderr, elapsed). A killed run has code -1.
fn run_within(
    cmd: &mut Command,
    stdin: Option<Vec<u8>>,
    deadline: Duration,
) -> (i32, String, String, Duration) {
    let started = Instant::now();
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().expect("run ppol");
    if let Some(chunk) = stdin {
        let mut input = child.stdin.take().unwrap();
        std::thread::spawn(move || while input.write_all(&chunk).is_ok() {});
    }
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut s);
        s
    });
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code().unwrap_or(-1);
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break -1;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed();
    let out = String::from_utf8_lossy(&out_reader.join().unwrap()).into_owned();
    let err = String::from_utf8_lossy(&err_reader.join().unwrap()).into_owned();
    (code, out, err, elapsed)
}

fn ppol_within(args: &[&str], deadline_s: u64) -> (i32, String, String, Duration) {
    run_within(ppol().args(args), None, Duration::from_secs(deadline_s))
}

/// A FIFO in `dir` that a thread fills with `head` and then `fill` forever (until the reader
/// goes away).
fn endless_fifo(dir: &Path, name: &str, head: &'static [u8], fill: u8) -> PathBuf {
    let path = dir.join(name);
    let status = Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(status.success());
    let p = path.clone();
    std::thread::spawn(move || {
        let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&p) else {
            return;
        };
        let chunk = vec![fill; 1 << 20];
        if f.write_all(head).is_err() {
            return;
        }
        while f.write_all(&chunk).is_ok() {}
    });
    path
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

const TURN: &str = r#"{"role":"user","content":"hello there, I need to change my flight"}"#;

// ---------------------------------------------------------------------------------------------
// Sizes

#[test]
fn r24_a_trace_stream_without_line_breaks_stops_at_the_line_limit() {
    let dir = tempfile::tempdir().unwrap();
    // `ppol fingerprint /dev/zero` grew to 22 GB: a stream of zeros, then one of text
    let zeros = endless_fifo(dir.path(), "zeros", b"", 0);
    let out = dir.path().join("fp.jsonl");
    let (code, _, err, took) = ppol_within(&["fingerprint", &s(&zeros), "-o", &s(&out)], 120);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "{}: line 1: the line is longer than 64 MiB, the most ppol reads of one line",
            zeros.display()
        )),
        "{err}"
    );
    assert!(!out.exists());
    eprintln!("fingerprint of an endless stream refused after {took:?}");
    let text = endless_fifo(
        dir.path(),
        "text",
        b"USER: hi\nASSISTANT: hello\nUSER: ",
        b'a',
    );
    let (code, _, err, _) = ppol_within(&["reference", &s(&text), "-o", &s(&out)], 120);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(": line 3: the line is longer than 64 MiB"),
        "{err}"
    );
    // standard input, too
    let (code, _, err, _) = run_within(
        ppol().args(["traces", "stats", "-"]),
        Some(vec![b'x'; 1 << 16]),
        Duration::from_secs(120),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("<stdin>: line 1: the line is longer than 64 MiB"),
        "{err}"
    );
    // and a JSON Lines input that is not a trace file
    let personas = endless_fifo(dir.path(), "personas", b"", b' ');
    let (code, _, err, _) = ppol_within(
        &["episodes", "--personas", &s(&personas), "-o", &s(&out)],
        120,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("personas: line 1: the line is longer than 64 MiB"),
        "{err}"
    );
}

#[test]
fn r24_a_trace_file_over_the_size_limit_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("huge.jsonl");
    let mut f = std::fs::File::create(&p).unwrap();
    writeln!(f, "{{\"conversation\":[{TURN}]}}").unwrap();
    // sparse: 1 GiB + 1 byte on disk costs nothing
    f.set_len((1 << 30) + 1).unwrap();
    drop(f);
    let (code, _, err, took) = ppol_within(&["fingerprint", &s(&p)], 60);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "{}: file: 1073741825 bytes, larger than 1 GiB, the most ppol reads of one input file",
            p.display()
        )),
        "{err}"
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn r24_a_json_lines_line_over_the_limit_is_named_a_json_document_is_not_cut() {
    let dir = tempfile::tempdir().unwrap();
    let big = "x".repeat((64 << 20) + 10);
    let jsonl = dir.path().join("long.jsonl");
    std::fs::write(
        &jsonl,
        format!(
            "{{\"conversation\":[{TURN}]}}\n{{\"conversation\":[{{\"role\":\"user\",\"content\":\"{big}\"}}]}}\n"
        ),
    )
    .unwrap();
    let (code, _, err, _) = ppol_within(&["traces", "stats", &s(&jsonl)], 120);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "{}: line 2: the line is longer than 64 MiB",
            jsonl.display()
        )),
        "{err}"
    );
    // the same dialogue in a JSON array on one line is one document, bounded as a file
    let array = dir.path().join("long.json");
    std::fs::write(
        &array,
        format!(
            "[{{\"conversation\":[{{\"role\":\"user\",\"content\":\"{big}\"}}]}}, {{\"conversation\":[{TURN}]}}]"
        ),
    )
    .unwrap();
    let (code, out, err, _) = ppol_within(&["traces", "stats", "--json", &s(&array)], 120);
    assert_eq!(code, 0, "{err}");
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(stats[0]["dialogues"], 2);
}

// ---------------------------------------------------------------------------------------------
// Counts

/// A persona record without a task (it applies to every task).
fn persona_line(i: usize) -> String {
    format!(
        "{{\"persona_id\":\"p{i}\",\"text\":\"You are user {i}.\",\"description\":\"\",\"axes\":{{}}}}\n"
    )
}

#[test]
fn r24_episode_counts_have_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("e.jsonl");
    let out = s(&out);
    // `--trials 0` wrote one episode per task
    let (code, _, err, _) = ppol_within(&["episodes", "--trials", "0", "-o", &out], 60);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--trials"), "{err}");
    assert!(err.contains("at least 1"), "{err}");
    assert!(!Path::new(&out).exists());
    // `--trials 1000000000` reached 22 GB
    let (code, _, err, took) = ppol_within(&["episodes", "--trials", "1000000000", "-o", &out], 60);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--trials"), "{err}");
    assert!(err.contains("at most 1000"), "{err}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    let (code, _, err, _) = ppol_within(&["episodes", "--trials", "-1", "-o", &out], 60);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--trials") && err.contains("at least 1"),
        "{err}"
    );
    // within each bound, but too many episodes together: tasks × personas × trials
    let personas = dir.path().join("p.jsonl");
    std::fs::write(&personas, (0..200).map(persona_line).collect::<String>()).unwrap();
    let (code, _, err, took) = ppol_within(
        &[
            "episodes",
            "--personas",
            &s(&personas),
            "--trials",
            "1000",
            "-o",
            &out,
        ],
        60,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("more than 100000"), "{err}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    for (flag, value, says) in [
        ("--concurrency", "0", "at least 1"),
        ("--concurrency", "100000000", "at most 4096"),
        ("--max-turns", "1000000000", "at most 1000"),
        ("--max-tool-rounds", "0", "at least 1"),
    ] {
        let (code, _, err, _) = ppol_within(&["episodes", flag, value, "-o", &out], 60);
        assert_eq!(code, 2, "{flag} {value}: {err}");
        assert!(
            err.contains(flag) && err.contains(says),
            "{flag} {value}: {err}"
        );
    }
}

#[test]
fn r24_generate_counts_have_bounds_and_negative_numbers_are_numbers() {
    let program = s(&root().join("seeds/offline_templates.py"));
    for (n, says) in [
        ("1000000000", "at most 1000"),
        ("0", "at least 1"),
        ("-1", "at least 1"),
    ] {
        let (code, _, err, took) = ppol_within(
            &[
                "generate",
                "-p",
                &program,
                "--task",
                "book a flight",
                "-n",
                n,
            ],
            60,
        );
        assert_eq!(code, 2, "-n {n}: {err}");
        assert!(err.contains("-n") && err.contains(says), "-n {n}: {err}");
        assert!(!err.contains("unexpected argument"), "-n {n}: {err}");
        assert!(took < Duration::from_secs(20), "-n {n}: {took:?}");
    }
    let (code, _, err, _) = ppol_within(
        &[
            "generate",
            "-p",
            &program,
            "--task",
            "x",
            "--max-llm-calls",
            "-5",
        ],
        60,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--max-llm-calls"), "{err}");
    // not a count, but a number all the same: the flag is named
    let (code, _, err, _) = ppol_within(
        &["generate", "-p", &program, "--task", "x", "--seed", "-1"],
        60,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("invalid value '-1' for '--seed"), "{err}");
}

#[test]
fn r24_configuration_counts_have_bounds_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (section, key, value) in [
        ("fitness", "n_personas", "1000000000"),
        ("fitness", "n_clusters", "1000000000"),
        ("fitness", "batch_size", "1000000000"),
        ("fitness", "folds", "1000000000"),
        ("fitness.discriminator", "n_trees", "1000000000"),
        ("episodes", "baseline_trials", "1000000000"),
        ("episodes", "max_turns", "1000000000"),
        ("sandbox", "memory_mb", "9007199254740993"),
        ("sandbox", "concurrency", "1000000000"),
        ("sandbox", "max_llm_calls", "1000000000"),
        ("search", "iterations", "1000000000000"),
        ("archive", "num_islands", "1000000000"),
    ] {
        let c = dir.path().join("c.toml");
        std::fs::write(&c, format!("[{section}]\n{key} = {value}\n")).unwrap();
        let (code, _, err, _) = ppol_within(&["evolve", "--config", &s(&c), "--print-config"], 60);
        assert_eq!(code, 2, "{section}.{key}: {err}");
        assert!(
            err.contains(&format!("'{section}.{key}'")) && err.contains("at most"),
            "{section}.{key}: {err}"
        );
    }
    let c = dir.path().join("c.toml");
    std::fs::write(
        &c,
        "[fitness]\nn_personas_schedule = [[0, 5], [3, 100000]]\n",
    )
    .unwrap();
    let (code, _, err, _) = ppol_within(&["evolve", "--config", &s(&c), "--print-config"], 60);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("fitness.n_personas_schedule[1]"), "{err}");
    // a flag that overrides a key names the key
    let (code, _, err, _) = ppol_within(&["evolve", "--iterations", "-3", "--print-config"], 60);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--iterations") && err.contains("at least 1"),
        "{err}"
    );
}

#[test]
fn r24_score_clusters_have_a_bound() {
    let demo = |f: &str| s(&root().join("fitness/demo").join(f));
    let (code, _, err, _) = ppol_within(
        &[
            "score",
            &demo("candidates.jsonl"),
            "--human",
            &demo("human.jsonl"),
            "--baseline",
            &demo("baseline.jsonl"),
            "--clusters",
            "1000000000",
        ],
        60,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--clusters") && err.contains("at most 1000"),
        "{err}"
    );
}

#[test]
fn r24_the_operations_python_calls_have_the_same_bounds() {
    use ppol::front::ops;
    let domain = ops::load_domain("demo", None).unwrap();
    let request = |trials: u32| ops::EpisodesRequest {
        world: ops::WorldChoice::builtin("demo", None).unwrap(),
        tasks: domain.tasks[0].id.clone(),
        personas: None,
        trials,
        llm: None,
        max_turns: None,
        max_tool_rounds: None,
        user_temperature: None,
        seed: 0,
        concurrency: 4,
        output: None,
        stop: None,
    };
    for (trials, says) in [(0, "at least 1"), (1_000_000_000, "at most 1000")] {
        let e = ops::block_on(ops::episodes(request(trials), &|_| {}))
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(e.contains("'trials'") && e.contains(says), "{e}");
    }
    let e = ops::block_on(ops::generate(ops::GenerateRequest {
        program: ppol::generate::generator::Program::Path(
            root().join("seeds/offline_templates.py"),
        ),
        tasks: vec![ops::TaskRef {
            task_id: None,
            context: "x".into(),
        }],
        n: Some(1_000_000_000),
        llm: None,
        seed: 0,
        sandbox: Default::default(),
    }))
    .unwrap()
    .unwrap_err()
    .to_string();
    assert!(e.contains("'n'") && e.contains("at most 1000"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Input traces that cannot be scored

#[test]
fn r24_dialogues_without_user_text_are_skipped_with_a_warning_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let demo = |f: &str| s(&root().join("fitness/demo").join(f));
    let mut text = std::fs::read_to_string(root().join("fitness/demo/candidates.jsonl")).unwrap();
    let n_real = text.lines().filter(|l| !l.trim().is_empty()).count();
    text.push_str("{\"id\":\"empty\",\"conversation\":[]}\n");
    text.push_str(
        "{\"id\":\"agent_only\",\"conversation\":[{\"role\":\"assistant\",\"content\":\"Hi!\"}]}\n",
    );
    text.push_str("{\"id\":\"nulls\",\"conversation\":[{\"role\":\"user\",\"content\":null},{\"role\":\"assistant\",\"content\":\"Hi\"},{\"role\":\"user\"}]}\n");
    let cands = dir.path().join("cands.jsonl");
    std::fs::write(&cands, &text).unwrap();
    let (code, out, err, _) = ppol_within(
        &[
            "score",
            &s(&cands),
            "--human",
            &demo("human.jsonl"),
            "--baseline",
            &demo("baseline.jsonl"),
        ],
        120,
    );
    assert_eq!(code, 0, "{err}");
    for (line, id) in [
        (n_real + 1, "empty"),
        (n_real + 2, "agent_only"),
        (n_real + 3, "nulls"),
    ] {
        assert!(
            err.contains(&format!(
                "warning: {}: line {line}: dialogue '{id}' has no user text",
                cands.display()
            )),
            "{id}: {err}"
        );
    }
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["counts"]["n_dialogues"], n_real, "{v}");
    assert_eq!(v["counts"]["n_without_user_turns"], 0, "{v}");
    // `ppol fingerprint` keeps one row per dialogue: the silent ones get the reference's
    // all-zero vector, each with a warning
    let (code, out, err, _) = ppol_within(&["fingerprint", &s(&cands)], 60);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), n_real + 3, "{err}");
    for (row, id) in rows[n_real..].iter().zip(["empty", "agent_only", "nulls"]) {
        assert_eq!(row["id"], id);
        let values = row["features"].as_object().unwrap();
        assert!(values.values().all(|v| v.as_f64() == Some(0.0)), "{row}");
        assert!(
            err.contains(&format!("dialogue '{id}' has no user text")),
            "{id}: {err}"
        );
    }
    assert!(err.contains("its fingerprint is all zeros"), "{err}");
    // a file of nothing but such dialogues is refused
    let human = dir.path().join("human.jsonl");
    std::fs::write(
        &human,
        "{\"conversation\":[]}\n{\"conversation\":[{\"role\":\"user\",\"content\":\"  \"}]}\n",
    )
    .unwrap();
    let (code, _, err, _) = ppol_within(
        &[
            "reference",
            &s(&human),
            "-o",
            &s(&dir.path().join("r.json")),
        ],
        60,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{}: ", human.display())), "{err}");
    assert!(err.contains("no dialogue with user text"), "{err}");
}

#[test]
fn r24_duplicate_dialogue_ids_are_refused_naming_both_places() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("dup.jsonl");
    std::fs::write(
        &p,
        format!(
            "{{\"id\":\"a\",\"conversation\":[{TURN}]}}\n{{\"id\":\"b\",\"conversation\":[{TURN}]}}\n\n{{\"id\":\"a\",\"conversation\":[{TURN}]}}\n"
        ),
    )
    .unwrap();
    let (code, _, err, _) = ppol_within(&["fingerprint", &s(&p)], 60);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "{}: line 4: dialogue id 'a' is also the id of line 1",
            p.display()
        )),
        "{err}"
    );
    // the same file twice is the same dialogues twice
    let one = dir.path().join("one.jsonl");
    std::fs::write(
        &one,
        format!("{{\"id\":\"a\",\"conversation\":[{TURN}]}}\n"),
    )
    .unwrap();
    let (code, _, err, _) = ppol_within(&["fingerprint", &s(&one), &s(&one)], 60);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("dialogue id 'a' is also the id of"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Bidi controls

/// A generator program whose personas carry bidi controls and right-to-left text.
const BIDI_PROGRAM: &str = r#"
DIVERSITY_AXES = []

def generate_personas_detailed(task_context, axes, n):
    return [{
        "persona_id": "p%d" % i,
        "description": "Reads \u202eevil\u202c text, \u05e9\u05dc\u05d5\u05dd and \u0645\u0631\u062d\u0628\u0627 \u2066iso\u2069.",
        "axis_placement": {},
        "reasoning": "why \u202dLRO\u202c",
        "expanded_instruction": "You are user %d. Say \u202egnp.exe\u202c and \u05e9\u05dc\u05d5\u05dd." % i,
    } for i in range(n)]
"#;

#[test]
fn r24_bidi_controls_never_reach_a_reader_raw() {
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("bidi.py");
    std::fs::write(&program, BIDI_PROGRAM).unwrap();
    // generate's JSONL: escaped in the JSON text, the same string once parsed
    let out = dir.path().join("g.jsonl");
    let (code, stdout, err, _) = ppol_within(
        &[
            "generate",
            "-p",
            &s(&program),
            "--task",
            "book \u{202e}a flight",
            "-n",
            "2",
            "-o",
            &s(&out),
        ],
        120,
    );
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(bidi_count(&text), 0, "{text}");
    assert!(text.contains("\\u202e"), "{text}");
    assert!(
        text.contains("שלום"),
        "right-to-left letters stay as they are: {text}"
    );
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert!(first["text"]
        .as_str()
        .unwrap()
        .contains("\u{202e}gnp.exe\u{202c}"));
    assert_eq!(bidi_count(&stdout) + bidi_count(&err), 0, "{stdout}{err}");
    // the same run to the terminal, in every format
    for format in ["jsonl", "tau2", "prompt"] {
        let (code, stdout, err, _) = ppol_within(
            &[
                "generate",
                "-p",
                &s(&program),
                "--task",
                "x",
                "-n",
                "1",
                "--format",
                format,
            ],
            120,
        );
        assert_eq!(code, 0, "{err}");
        assert_eq!(bidi_count(&stdout), 0, "{format}: {stdout}");
        assert!(stdout.contains("שלום"), "{format}: {stdout}");
    }
    // a run whose programs write such personas, and its report
    let run = dir.path().join("run");
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[run]\nout = {:?}\n[search]\niterations = 2\nseed_program = {:?}\n",
            s(&run),
            s(&program)
        ),
    )
    .unwrap();
    let (code, stdout, err, _) = ppol_within(&["evolve", "--config", &s(&config), "--quiet"], 300);
    assert_eq!(code, 0, "{err}");
    assert_eq!(bidi_count(&stdout) + bidi_count(&err), 0, "{stdout}{err}");
    // every text file of the run directory (log, personas, episodes, baseline) too
    for entry in walk(&run) {
        if let Ok(text) = std::fs::read_to_string(&entry) {
            assert_eq!(bidi_count(&text), 0, "{}", entry.display());
        }
    }
    let (code, _, err, _) = ppol_within(&["report", &s(&run)], 120);
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert_eq!(bidi_count(&html), 0, "raw bidi controls in report.html");
    assert!(html.contains("\\u{202e}"), "shown as escapes");
    assert!(html.contains("שלום") && html.contains("مرحبا"));
}

#[test]
fn r24_bidi_controls_in_traces_are_escaped_on_the_study_page_and_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("t.jsonl");
    let mut text = String::new();
    for i in 0..4 {
        text.push_str(&format!(
            "{{\"id\":\"d{i}\u{202e}\",\"domain\":\"air\u{2067}line\",\"conversation\":[{{\"role\":\"user\",\"content\":\"I want \u{202e}a refund\u{202c} שלום {i}\"}},{{\"role\":\"assistant\",\"content\":\"ok \u{2066}x\u{2069}\"}}]}}\n"
        ));
    }
    std::fs::write(&traces, &text).unwrap();
    let study = dir.path().join("study");
    let (code, _, err, _) = ppol_within(
        &[
            "study",
            "make",
            "--condition",
            &format!("a={}", s(&traces)),
            "--condition",
            &format!("b={}", s(&traces)),
            "--attention-checks",
            "0",
            "--per-condition",
            "0",
            "-o",
            &s(&study),
        ],
        60,
    );
    assert_eq!(code, 0, "{err}");
    // what annotators read shows the controls as escapes, right-to-left letters as they are
    for f in ["study.html", "label_studio_tasks.json"] {
        let page = std::fs::read_to_string(study.join(f)).unwrap();
        assert_eq!(bidi_count(&page), 0, "{f}");
        // the visible escape, itself escaped once more inside JSON
        assert!(page.contains("\\\\u{202e}a refund"), "{f}");
        assert!(page.contains("שלום"), "{f}");
    }
    let key = std::fs::read_to_string(study.join("key.json")).unwrap();
    assert_eq!(bidi_count(&key), 0, "{key}");
    assert!(key.contains("d0\\u202e"), "{key}");
    let (code, stdout, err, _) = ppol_within(&["traces", "stats", &s(&traces)], 60);
    assert_eq!(code, 0, "{err}");
    assert_eq!(bidi_count(&stdout), 0, "{stdout}");
    let (code, stdout, err, _) = ppol_within(&["fingerprint", &s(&traces)], 60);
    assert_eq!(code, 0, "{err}");
    assert_eq!(bidi_count(&stdout), 0, "{stdout}");
    let row: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(row["id"], "d0\u{202e}", "the same string once parsed");
}

// ---------------------------------------------------------------------------------------------
// Messages

#[test]
fn r24_a_generator_program_that_is_not_a_program_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.py");
    std::fs::write(&empty, "").unwrap();
    let missing = dir.path().join("missing.py");
    for (program, says) in [
        (
            PathBuf::from("/dev/null"),
            "not a regular file (a character device)",
        ),
        (dir.path().to_path_buf(), "not a regular file (a directory)"),
        (empty, "the file is empty"),
        (missing, "does not exist"),
    ] {
        let (code, _, err, _) = ppol_within(&["generate", "-p", &s(&program), "--task", "x"], 60);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!(
                "error: reading generator program '{}': {says}",
                program.display()
            )),
            "{}: {err}",
            program.display()
        );
    }
}
