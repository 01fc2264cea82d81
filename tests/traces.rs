//! Loading traces and `ppol bench fingerprint`, end to end.

use std::path::PathBuf;

use ppol::fitness::traces::{self, LoadOptions};

use crate::util::{root, run_ppol, shared};

fn fixture(name: &str) -> String {
    root()
        .join("tests/fixtures/traces")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn invalid_utf8_is_reported_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("latin1.jsonl");
    let mut bytes = "\u{feff}{\"conversation\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n\n"
        .to_string()
        .into_bytes();
    bytes.extend_from_slice(b"{\"conversation\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}\n");
    std::fs::write(&p, &bytes).unwrap();
    let bad = bytes.iter().position(|&b| b == 0xe9).unwrap();
    let e = traces::load(&p, &LoadOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: line 3: not UTF-8 text (byte {bad} of the file); trace files must be UTF-8",
            p.display()
        )
    );
    // far into a file of many pieces (checked in parallel), the first bad byte is the one named
    let line = "{\"conversation\":[{\"role\":\"user\",\"content\":\"hello there\"}]}\n";
    let mut big = line.repeat(40_000).into_bytes();
    let at = line.len() * 30_000 + 10;
    big[at] = 0xff;
    big[line.len() * 35_000 + 10] = 0xfe;
    std::fs::write(&p, &big).unwrap();
    let e = traces::load(&p, &LoadOptions::default()).unwrap_err();
    assert!(
        e.to_string().contains(&format!(
            ": line 30001: not UTF-8 text (byte {at} of the file)"
        )),
        "{e}"
    );
}

/// The bench's stdout lines, checking the exit code.
fn bench(extra: &[&str]) -> String {
    let mut args = vec![
        "bench".to_string(),
        "fingerprint".into(),
        fixture("dialogues.jsonl"),
        "--repeat".into(),
        "2".into(),
        "--end-to-end-dialogues".into(),
        "20".into(),
        "--end-to-end-runs".into(),
        "2".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = run_ppol(&args);
    assert_eq!(code, 0, "{err}");
    out
}

#[test]
fn bench_fingerprint_reports_kernel_and_end_to_end() {
    let out = bench(&["--no-reference"]);
    assert!(out.contains("ppol (one core):"), "{out}");
    // 3 dialogues repeated to at least 20
    let e2e = out
        .lines()
        .find(|l| l.starts_with("end to end:"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        e2e.contains("21 dialogues read from one JSONL file"),
        "{e2e}"
    );
    assert!(e2e.contains("fastest of 2 runs"), "{e2e}");
    let ours = out
        .lines()
        .find(|l| l.starts_with("ppol fingerprint:"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        ours.contains(" s ") && ours.contains("dialogues/s"),
        "{ours}"
    );
    assert!(!out.contains("reference"), "{out}");
}

#[test]
fn bench_fingerprint_says_why_the_reference_was_not_measured() {
    let out = bench(&["--reference-python", "/nonexistent/python3"]);
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("reference ppol 0.1.1:"))
        .collect();
    assert_eq!(lines.len(), 2, "kernel and end to end: {out}");
    for l in lines {
        assert!(
            l.contains("not measured (") && l.contains("/nonexistent/python3"),
            "{l}"
        );
    }
    assert!(out.contains("ppol fingerprint:"), "{out}");
}

/// The reference package's virtual environment (`.venv-ref`, as .ci/shared makes it, or
/// `$PPOL_REFVENV`), when it exists.
fn reference_python() -> Option<PathBuf> {
    let venv = std::env::var_os("PPOL_REFVENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv-ref"));
    let py = venv.join("bin/python");
    if py.exists() {
        Some(py)
    } else {
        eprintln!("skipped: no reference package at {}", venv.display());
        None
    }
}

#[test]
fn shared_bench_end_to_end_matches_the_reference() {
    let Some(shared) = shared() else { return };
    let Some(python) = reference_python() else {
        return;
    };
    let sample = shared.join("human/tau_usi_airline_sample.jsonl");
    let (code, out, err) = run_ppol(&[
        "bench",
        "fingerprint",
        sample.to_str().unwrap(),
        "--repeat",
        "1",
        "--end-to-end-dialogues",
        "30",
        "--end-to-end-runs",
        "1",
        "--reference-python",
        python.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("speed-up (end to end):"))
        .unwrap_or_else(|| panic!("{out}"));
    let diff: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(diff, 0.0, "{line}");
    assert!(
        out.contains("end to end: process start -> 30 dialogues"),
        "{out}"
    );
}
