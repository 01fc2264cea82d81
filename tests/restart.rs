//! Nothing lost across restarts: one writer per run directory (`run.lock`), a strict `ppol
//! resume` (issue #12), and LLM costs, budget and baseline episodes that survive kill -9
//! (issue #17).

use std::path::Path;
use std::time::{Duration, Instant};

use ppol::evolve::runlog::{read, Event};

use crate::util::{ppol, run_ppol};

/// An offline run of `iterations` into `dir` (exit 0 expected).
fn offline_run(dir: &Path, iterations: &str) {
    let (code, _, stderr) = run_ppol(&[
        "evolve",
        "--iterations",
        iterations,
        "--seed",
        "7",
        "--out",
        dir.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{stderr}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn wait_for(what: &str, timeout: Duration, mut until: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !until() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sigkill(child: &mut std::process::Child) {
    // SAFETY: kill(2) on the pid of a child we spawned and have not reaped yet.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGKILL);
    }
    let _ = child.wait();
}

/// A second writer (`evolve --out` the same directory, or `resume`) exits 2 at once naming the
/// directory and the holder's pid; readers (`report`) work meanwhile; after kill -9 of the
/// holder the kernel has released the lock and `resume` proceeds.
#[test]
fn a_second_writer_is_refused_while_readers_work() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let cfg = tmp.path().join("c.toml");
    std::fs::write(&cfg, "[search]\niterations = 100000\nseed = 3\n").unwrap();
    let mut holder = ppol()
        .args(["evolve", "--config", cfg.to_str().unwrap()])
        .args(["--out", run.to_str().unwrap(), "--quiet"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = holder.id();
    wait_for("a first checkpoint", Duration::from_secs(120), || {
        std::fs::read_to_string(run.join("log.jsonl"))
            .is_ok_and(|t| t.contains("\"event\":\"checkpoint\""))
    });
    for args in [
        vec![
            "evolve",
            "--iterations",
            "3",
            "--out",
            run.to_str().unwrap(),
        ],
        vec!["resume", run.to_str().unwrap()],
    ] {
        let t0 = Instant::now();
        let (code, _, stderr) = run_ppol(&[args.as_slice(), &["--quiet"]].concat());
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "not refused at once"
        );
        assert!(
            stderr.contains(run.to_str().unwrap())
                && stderr.contains(&format!("pid {pid}"))
                && stderr.contains("run.lock"),
            "{args:?}: {stderr}"
        );
    }
    let (code, _, stderr) = run_ppol(&["report", run.to_str().unwrap()]);
    assert_eq!(
        code, 0,
        "a reader must work while the run holds the lock: {stderr}"
    );
    assert!(
        holder.try_wait().unwrap().is_none(),
        "the holder was disturbed"
    );
    sigkill(&mut holder);
    let (code, stdout, stderr) = run_ppol(&[
        "resume",
        run.to_str().unwrap(),
        "--iterations",
        "1",
        "--quiet",
    ]);
    assert_eq!(code, 0, "the lock of a killed process is gone: {stderr}");
    assert!(stdout.contains("stopped: iterations"), "{stdout}");
}

/// `resume` never quietly starts over or runs on defaults: a missing or empty `config.toml`,
/// a missing `log.jsonl` once the run has produced files, a missing `checkpoint.json` when the
/// log records commits, and a log that lacks the checkpoint's commit are errors naming the
/// file; a run that never started does start; temporaries of a killed writer are swept.
#[test]
fn resume_refuses_lost_files_and_sweeps_temporaries() {
    let tmp = tempfile::tempdir().unwrap();
    let done = tmp.path().join("done");
    offline_run(&done, "2");
    let case = |name: &str, damage: &dyn Fn(&Path)| -> (i32, String) {
        let d = tmp.path().join(name);
        copy_dir(&done, &d);
        damage(&d);
        let (code, _, stderr) = run_ppol(&[
            "resume",
            d.to_str().unwrap(),
            "--iterations",
            "3",
            "--quiet",
        ]);
        (code, stderr)
    };
    let (code, e) = case("no-config", &|d| {
        std::fs::remove_file(d.join("config.toml")).unwrap()
    });
    assert!(code == 2 && e.contains("config.toml is missing"), "{e}");
    let (code, e) = case("empty-config", &|d| {
        std::fs::write(d.join("config.toml"), "# nothing\n\n").unwrap()
    });
    assert!(
        code == 2 && e.contains("config.toml") && e.contains("empty"),
        "{e}"
    );
    let (code, e) = case("no-log", &|d| {
        std::fs::remove_file(d.join("log.jsonl")).unwrap()
    });
    assert!(code == 2 && e.contains("log.jsonl is missing"), "{e}");
    let (code, e) = case("no-checkpoint", &|d| {
        std::fs::remove_file(d.join("checkpoint.json")).unwrap()
    });
    assert!(
        code == 2 && e.contains("checkpoint.json is missing") && e.contains("2 commit(s)"),
        "{e}"
    );
    let (code, e) = case("short-log", &|d| {
        let text = std::fs::read_to_string(d.join("log.jsonl")).unwrap();
        let cut: Vec<&str> = text.lines().take(3).collect();
        std::fs::write(d.join("log.jsonl"), cut.join("\n") + "\n").unwrap();
    });
    assert!(code == 2 && e.contains("does not hold the commit"), "{e}");

    // temporaries of interrupted atomic writes are removed when the run is opened for writing
    let (code, e) = case("tmp", &|d| {
        std::fs::write(d.join(".ppol-tmp-AbC123"), "half").unwrap();
        std::fs::write(d.join("best/.tmpXyZ"), "half").unwrap();
    });
    assert_eq!(code, 0, "{e}");
    let d = tmp.path().join("tmp");
    assert!(!d.join(".ppol-tmp-AbC123").exists() && !d.join("best/.tmpXyZ").exists());

    // a run killed before it wrote its log never started: resume starts it
    let fresh = tmp.path().join("fresh");
    std::fs::create_dir_all(&fresh).unwrap();
    std::fs::copy(done.join("config.toml"), fresh.join("config.toml")).unwrap();
    let (code, _, e) = run_ppol(&["resume", fresh.to_str().unwrap(), "--quiet"]);
    assert_eq!(code, 0, "{e}");
    assert!(read(&fresh.join("log.jsonl"))
        .unwrap()
        .iter()
        .any(|r| matches!(r.event, Event::RunStopped { .. })));
}
