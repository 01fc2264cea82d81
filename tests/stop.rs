//! Stopping a run whose endpoint takes fewer requests at once than there are episodes in
//! flight (issue #25, "Ctrl-C lost paid work"): episodes that started first get the slots
//! first, so they finish — and are kept — as the baseline goes; the wall clock and Ctrl-C stop
//! the baseline within seconds, keeping every finished episode for the resume.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::util::{ppol, root};

/// A serial mock (one request at a time, `ms` each) and a run config on it: LLM episodes,
/// `max_concurrency = 1`, the baseline only.
fn setup(dir: &Path, base_url: &str, wall_clock: Option<f64>) -> std::path::PathBuf {
    let seed = root().join("seeds/offline_templates.py");
    let wall = wall_clock
        .map(|s| format!("max_wall_clock_s = {s}\n"))
        .unwrap_or_default();
    let text = format!(
        "[search]\niterations = 2\nseed_program = \"{}\"\n{wall}\n[episodes]\nbackend = \"llm\"\nmax_turns = 3\nval_max_turns = 3\nbaseline_trials = 3\n\n[llm]\nmax_concurrency = 1\nmax_retries = 1\n[llm.default]\nprovider = \"openai\"\nmodel = \"mock\"\nbase_url = \"{base_url}\"\n",
        seed.display()
    );
    let p = dir.join("run.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn serial_mock(rt: &tokio::runtime::Runtime, ms: u64) -> ppol::testing::mock_server::MockServer {
    use ppol::testing::mock_server::{serve_with, MockOptions, MockReply, MockScript};
    rt.block_on(serve_with(
        MockScript {
            default: MockReply::text("ok, thanks, I need to change my order please"),
            ..Default::default()
        },
        MockOptions {
            latency: Duration::from_millis(ms),
            slots: Some(1),
            ..Default::default()
        },
    ))
    .unwrap()
}

fn kept(run: &Path) -> usize {
    std::fs::read_to_string(run.join("baseline/partial.jsonl"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn the_wall_clock_stops_the_baseline_and_first_started_episodes_are_kept() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = serial_mock(&rt, 40);
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path(), &server.base_url(), Some(2.5));
    let run = tmp.path().join("run");
    let t0 = Instant::now();
    let out = ppol()
        .args(["evolve", "--config", cfg.to_str().unwrap(), "--out"])
        .arg(&run)
        .arg("--quiet")
        .output()
        .unwrap();
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("max_wall_clock_s reached during the baseline"),
        "{err}"
    );
    assert!(took < Duration::from_secs(15), "stopped after {took:?}");
    // ~60 requests of 40 ms in 2.5 s, an episode ~7 requests: in first-come order several
    // episodes are done; in lockstep none would be
    let n = kept(&run);
    assert!(n >= 3, "{n} baseline episodes kept\n{err}");
    assert!(err.contains(&format!("{n} of ")), "{err}");
    drop(rt);
}

#[test]
fn ctrl_c_stops_the_baseline_within_seconds_and_resume_pays_for_nothing_twice() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = serial_mock(&rt, 30);
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path(), &server.base_url(), None);
    let run = tmp.path().join("run");
    let mut child = ppol()
        .args(["evolve", "--config", cfg.to_str().unwrap(), "--out"])
        .arg(&run)
        .arg("--quiet")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while kept(&run) < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no baseline episode finished"
        );
        assert!(child.try_wait().unwrap().is_none());
        std::thread::sleep(Duration::from_millis(20));
    }
    let asked = Instant::now();
    // SAFETY: signalling our own child process by its pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "stopped {:?} after SIGINT",
        asked.elapsed()
    );
    assert_eq!(status.code(), Some(130));
    let before = kept(&run);
    assert!(before >= 2);
    let requests_before = server.requests();
    let ids = |p: &Path| -> Vec<String> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].to_string())
            .collect()
    };
    let kept_ids = ids(&run.join("baseline/partial.jsonl"));
    // resume: the kept episodes are reused, the rest played; the run completes
    let out = ppol()
        .args(["resume"])
        .arg(&run)
        .arg("--quiet")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all: Vec<serde_json::Value> = std::fs::read_to_string(run.join("baseline/episodes.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for id in &kept_ids {
        assert!(all.iter().any(|e| &e["id"].to_string() == id));
    }
    assert!(server.requests() > requests_before);
    drop(rt);
}

/// A process killed after it opened the cost ledger but before it wrote its log paid nothing:
/// the resume starts the run (found by .ci/hostile.sh's priced kill at 1.5 s under load); a
/// ledger that records calls without a log is still refused.
#[test]
fn a_run_killed_before_its_log_resumes_unless_it_paid_for_something() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let out = ppol()
        .args(["evolve", "--iterations", "1", "--quiet", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    for f in ["log.jsonl", "checkpoint.json", "discriminator.json"] {
        std::fs::remove_file(run.join(f)).unwrap();
    }
    for d in ["baseline", "best"] {
        let _ = std::fs::remove_dir_all(run.join(d));
    }
    let start = r#"{"process":1,"pid":1,"time":"2026-01-01T00:00:00Z","at":"start","roles":{}}"#;
    std::fs::write(run.join("costs.jsonl"), format!("{start}\n")).unwrap();
    let out = ppol()
        .args(["resume", "--quiet"])
        .arg(&run)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(run.join("log.jsonl")).unwrap();
    let call = r#"{"process":1,"pid":1,"time":"2026-01-01T00:00:01Z","at":"call","roles":{"agent":{"calls":1,"attempts":1,"failures":0,"cache_hits":0,"prompt_tokens":10,"completion_tokens":2,"usd":0.0}}}"#;
    std::fs::write(run.join("costs.jsonl"), format!("{start}\n{call}\n")).unwrap();
    let out = ppol()
        .args(["resume", "--quiet"])
        .arg(&run)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("log.jsonl is missing"), "{err}");
}
