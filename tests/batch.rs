//! The one batch layer (`ppol::simulate::batch`, issue #33) and the episodes it must never lose
//! (issue #34 item 1): kill -9 at random points of `ppol episodes` and `ppol eval`, then the
//! same command again, ends with exactly what an uninterrupted run writes, and each rerun plays
//! only what the killed process had not finished.

use std::path::Path;
use std::time::Duration;

use crate::util::{ppol, run_ppol};

/// A small deterministic generator of kill points (the test is the same every time).
struct Points(u64);

impl Points {
    fn next_ms(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + (self.0 >> 33) % (hi - lo)
    }
}

/// Start `args`, kill it with SIGKILL after `ms`; whether it was still running then.
fn kill_after(args: &[&str], ms: u64) -> bool {
    let mut child = ppol()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(ms));
    let running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    running
}

/// The complete lines of a partial file, each an episode record (a torn last line aside).
fn complete_lines(partial: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(partial).unwrap_or_default();
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    complete
        .lines()
        .map(|l| serde_json::from_str(l).expect("every complete line is an episode record"))
        .collect()
}

#[test]
fn issue34_item1_kill_9_of_episodes_at_ten_random_points_loses_no_finished_episode() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full.jsonl");
    let out = tmp.path().join("x.jsonl");
    let partial = tmp.path().join("x.jsonl.partial");
    let base = ["episodes", "--domain", "demo", "--trials", "60", "--quiet"];
    let with_out = |o: &Path| -> Vec<String> {
        base.iter()
            .map(|s| s.to_string())
            .chain(["-o".into(), o.to_str().unwrap().into()])
            .collect()
    };
    let args = with_out(&full);
    let started = std::time::Instant::now();
    let (code, _, err) = run_ppol(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");
    // kill points are drawn within the time the rest of the plan should take on this machine
    // (measured by the uninterrupted run), so that they land while episodes are being played
    let whole_ms = started.elapsed().as_millis() as u64;
    let expected = std::fs::read_to_string(&full).unwrap();
    let total = expected.lines().count() as u64;
    let args = with_out(&out);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut points = Points(34);
    let mut kept_before = 0usize;
    let mut kills = 0;
    for _ in 0..10 {
        let rest_ms = whole_ms * (total - kept_before as u64) / total;
        let ms = points.next_ms(rest_ms / 10 + 20, rest_ms * 7 / 10 + 40);
        if !kill_after(&args, ms) {
            // it finished before the kill point: with all it had kept
            assert!(kills >= 3, "only {kills} kills hit a running process");
            assert_eq!(std::fs::read_to_string(&out).unwrap(), expected);
            assert!(!partial.exists());
            return;
        }
        kills += 1;
        let kept = complete_lines(&partial);
        // nothing kept by an earlier process was lost, and what was kept is the same episodes
        assert!(
            kept.len() >= kept_before,
            "kill {kills} at {ms} ms: {} episodes kept, {kept_before} before",
            kept.len()
        );
        for e in &kept {
            let id = e["id"].as_str().unwrap();
            assert!(
                expected.contains(&format!("\"id\":\"{id}\"")),
                "{id} is not an episode of the plan"
            );
        }
        kept_before = kept.len();
    }
    assert!(kills >= 3, "only {kills} of 10 kills hit a running process");
    assert!(
        kept_before > 0,
        "no kill kept an episode: the test says nothing"
    );
    let mut args = args.clone();
    args.push("--json");
    let (code, stdout, err) = run_ppol(&args);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        summary["resumed"].as_u64().unwrap() as usize,
        kept_before,
        "the rerun plays only what is missing"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), expected);
    assert!(!partial.exists());
}

#[test]
fn issue34_item1_kill_9_of_eval_keeps_every_row_episode_and_the_rerun_gives_the_same_table() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let run_s = run.to_str().unwrap();
    let (code, _, err) = run_ppol(&["evolve", "--iterations", "2", "--quiet", "--out", run_s]);
    assert_eq!(code, 0, "{err}");
    // the uninterrupted table, then the kept rows removed
    let (code, expected, err) = run_ppol(&["eval", run_s, "--json", "--n", "6", "--quiet"]);
    assert_eq!(code, 0, "{err}");
    std::fs::remove_dir_all(run.join("eval-test")).unwrap();
    let mut points = Points(7);
    let mut kills = 0;
    for _ in 0..4 {
        let ms = points.next_ms(300, 3000);
        if kill_after(&["eval", run_s, "--n", "6", "--quiet"], ms) {
            kills += 1;
        }
        for f in std::fs::read_dir(run.join("eval-test"))
            .into_iter()
            .flatten()
        {
            let f = f.unwrap().path();
            if f.to_string_lossy().ends_with(".partial") {
                complete_lines(&f);
            }
        }
    }
    assert!(kills >= 1, "no kill hit a running eval");
    let (code, got, err) = run_ppol(&["eval", run_s, "--json", "--n", "6", "--quiet"]);
    assert_eq!(code, 0, "{err}");
    let rows =
        |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap()["rows"].clone();
    assert_eq!(rows(&got), rows(&expected));
    for row in ["base", "seed", "evolved"] {
        assert!(
            run.join(format!("eval-test/{row}.jsonl")).is_file(),
            "{row}"
        );
        assert!(!run.join(format!("eval-test/{row}.jsonl.partial")).exists());
    }
    assert!(run.join("eval-test/seed.personas.json").is_file());
    // a second eval plays nothing again
    let (code, _, err) = run_ppol(&["eval", run_s, "--n", "6"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("kept from an earlier run)"), "{err}");
    assert!(
        !err.contains("personas:"),
        "the kept personas are not generated again: {err}"
    );
}
