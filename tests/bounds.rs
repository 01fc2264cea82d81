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

use crate::util::ppol;

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
