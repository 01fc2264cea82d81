//! Issue #34, "Worlds that cannot hurt the run": simulator processes and everything they fork die
//! with ppol, on a normal exit and on `kill -9`; a simulator's
//! answers are held to the bounds of ppol's own episodes; an unanswered v2 request fails alone;
//! its stderr is escaped.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::util::{ppol, root};
use crate::worlds::fixture;

/// Live (not zombie) processes whose command line holds `mark`.
fn alive_with(mark: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmd).contains(mark) {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("Z");
        if state != "Z" && state != "X" {
            out.push(pid);
        }
    }
    out
}

/// Wait until `n` processes carry `mark` (or 30 s).
fn wait_for_processes(mark: &str, n: usize) -> usize {
    let started = Instant::now();
    loop {
        let k = alive_with(mark).len();
        if k >= n || started.elapsed() > Duration::from_secs(30) {
            return k;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Processes still carrying `mark` 2 s after ppol ended.
fn survivors_after_2s(mark: &str) -> Vec<u32> {
    std::thread::sleep(Duration::from_secs(2));
    alive_with(mark)
}

fn episodes_cmd(world: &str, out: &Path) -> std::process::Command {
    episodes_in(world, out, 2)
}

fn episodes_in(world: &str, out: &Path, processes: u32) -> std::process::Command {
    let mut cmd = ppol();
    cmd.args([
        "episodes",
        "--world",
        world,
        "--task-file",
        &fixture("tasks.jsonl"),
        "--world-processes",
        &processes.to_string(),
        "-o",
        out.to_str().unwrap(),
        "--quiet",
    ])
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped());
    cmd
}

fn orphans_case(kill: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let mark = format!(
        "ppol-orphan-mark-{}-{}",
        std::process::id(),
        tmp.path().file_name().unwrap().to_string_lossy()
    );
    let sleep = if kill { "--sleep-ms 400" } else { "" };
    let world = format!(
        "external:python3 {} --orphans {mark} {sleep}",
        fixture("hostile_sim.py")
    );
    let out = tmp.path().join("eps.jsonl");
    let mut child = episodes_cmd(&world, &out).spawn().unwrap();
    // two simulator processes, each with a child and a setsid daemon
    let seen = wait_for_processes(&mark, 6);
    assert!(seen >= 6, "the simulators started their children: {seen}");
    if kill {
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    } else {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let left = survivors_after_2s(&mark);
    assert!(
        left.is_empty(),
        "kill -9: {kill}: {} process(es) of the simulator outlived ppol: {left:?}",
        left.len()
    );
}

#[test]
fn issue34_item2_no_simulator_process_outlives_a_normal_exit() {
    orphans_case(false);
}

#[test]
fn issue34_item2_no_simulator_process_outlives_kill_9() {
    orphans_case(true);
}

fn read_jsonl(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn issue34_item3_a_simulator_answering_too_many_turns_is_cut_or_failed() {
    let tmp = tempfile::tempdir().unwrap();
    // 5,000 user turns: cut at --max-turns with a note
    let out = tmp.path().join("cut.jsonl");
    let world = format!(
        "external:python3 {} --turns 5000",
        fixture("hostile_sim.py")
    );
    let o = episodes_cmd(&world, &out)
        .args(["--tasks", "task_0", "--max-turns", "7"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let e = &read_jsonl(&out)[0];
    assert_eq!(e["termination"], "max_turns");
    assert_eq!(e["conversation"].as_array().unwrap().len(), 14);
    let note = e["notes"][0].as_str().unwrap();
    assert!(
        note.contains("5000 user turns") && note.contains("cut at max_turns = 7"),
        "{note}"
    );
    // 300,000 turns (22 MB): more than an episode may hold; a million (75 MB): more than a
    // protocol line may; both fail the episode with the reason
    for (turns, why) in [
        ("300000", "an episode may hold at most 16 MiB"),
        ("1000000", "a stdout line longer than 64 MiB"),
    ] {
        let out = tmp.path().join(format!("huge{turns}.jsonl"));
        let world = format!(
            "external:python3 {} --turns {turns}",
            fixture("hostile_sim.py")
        );
        let o = episodes_cmd(&world, &out)
            .args(["--tasks", "task_0"])
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let e = &read_jsonl(&out)[0];
        assert_eq!(e["status"], "failed");
        let error = e["error"].as_str().unwrap();
        assert!(error.contains(why), "{error}");
    }
}

#[test]
fn issue34_item6_an_unanswered_v2_request_fails_alone() {
    // one process taking two episodes at once, 0.7 s each; task_0 is never answered: when it
    // times out (2 s) another episode is in flight on the process and must not fail with it
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eps.jsonl");
    let world = format!(
        "external:python3 {} --v2 --hang-on task_0 --sleep-ms 700 --max-in-flight 2",
        fixture("hostile_sim.py")
    );
    let o = episodes_in(&world, &out, 1)
        .args([
            "--world-protocol",
            "2",
            "--episode-timeout-s",
            "2",
            "--tasks",
            "task_0,task_1,task_2,task_3,task_4,task_5",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let eps = read_jsonl(&out);
    let failed: Vec<&str> = eps
        .iter()
        .filter(|e| e["status"] == "failed")
        .map(|e| e["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        failed,
        ["task_0"],
        "only the unanswered request fails: {eps:?}"
    );
    let why = eps[0]["error"].as_str().unwrap();
    assert!(why.contains("other episode(s) in flight"), "{why}");
}

#[test]
fn issue34_item6_simulator_stderr_reaches_the_terminal_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eps.jsonl");
    let world = format!(
        "external:python3 {} --stderr-escapes",
        fixture("hostile_sim.py")
    );
    let o = episodes_cmd(&world, &out)
        .args(["--tasks", "task_0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("sim says \\u{1b}[2J"), "{err}");
    assert!(err.contains("\\u{202e}gnp.exe"), "{err}");
    assert!(!err.contains('\u{1b}') && !err.contains('\u{202e}') && !err.contains('\u{7}'));
}

/// A simulator flooding its stderr (50 MB per episode here) does not flood the terminal: at most
/// 1 MiB of each process's stderr is shown, then one line says the rest is not, and the
/// episodes are played (the pipe is drained, so the simulator never blocks on it).
#[test]
fn a_simulator_flooding_its_stderr_shows_one_mib_per_process() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eps.jsonl");
    let world = format!(
        "external:python3 {} --stderr-flood 50",
        fixture("hostile_sim.py")
    );
    let o = episodes_in(&world, &out, 1)
        .args(["--tasks", "task_0,task_1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        &err[err.len().saturating_sub(2000)..]
    );
    let notice = "wrote more than 1 MiB on stderr; the rest of its stderr is not shown";
    assert_eq!(err.matches(notice).count(), 1, "one process, one notice");
    assert!(
        err.len() < (1 << 20) + 64 * 1024,
        "{} bytes shown",
        err.len()
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 2);
}

#[test]
fn issue34_item6_a_missing_simulator_is_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eps.jsonl");
    let o = episodes_cmd("external:/nonexistent/sim --x", &out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("run.world") && err.contains("/nonexistent/sim"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn issue34_item3_bench_world_refuses_a_huge_count_naming_the_flag() {
    for n in ["1e9", "1000000000", "18446744073709551616"] {
        let o = ppol()
            .args(["bench", "world", "--episodes", n])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{n}: {err}");
        assert!(err.contains("--episodes"), "{n}: {err}");
    }
}

/// Every flag of every verb that takes a value, given `-1`: an error naming the flag in ppol's
/// own words (or, for a flag of free text, the value taken as text) — never clap's
/// "unexpected argument '-1'", nor Rust's "invalid digit found in string".
#[test]
fn issue34_item5_every_flag_meets_a_negative_number_with_its_own_message() {
    fn leaves(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<(Vec<String>, clap::Arg)>) {
        for a in cmd.get_arguments() {
            if a.get_action().takes_values() && !a.is_positional() && a.get_long().is_some() {
                out.push((path.clone(), a.clone()));
            }
        }
        for sc in cmd.get_subcommands() {
            let mut p = path.clone();
            p.push(sc.get_name().to_string());
            leaves(sc, p, out);
        }
    }
    let mut all = Vec::new();
    leaves(&ppol::front::cli::command(), Vec::new(), &mut all);
    assert!(all.len() > 80, "{}", all.len());
    let text_types = [
        std::any::TypeId::of::<String>(),
        std::any::TypeId::of::<std::path::PathBuf>(),
        std::any::TypeId::of::<std::ffi::OsString>(),
    ];
    let mut bad = Vec::new();
    for (path, arg) in &all {
        let long = format!("--{}", arg.get_long().unwrap());
        let mut argv = vec!["ppol".to_string()];
        argv.extend(path.iter().cloned());
        argv.push(long.clone());
        argv.push("-1".into());
        let shown = argv.join(" ");
        // a value taken, with another argument missing, is a value taken
        let parsed = ppol::front::cli::parse(&argv)
            .map(|_| ())
            .or_else(|e| match e.kind() {
                clap::error::ErrorKind::MissingRequiredArgument => Ok(()),
                _ => Err(e),
            });
        match parsed {
            Ok(()) => {
                let t = arg.get_value_parser().type_id();
                if !text_types.iter().any(|x| t == *x) {
                    bad.push(format!("{shown}: accepted, unchecked"));
                }
            }
            Err(e) => {
                let msg = e.to_string();
                if msg.contains("unexpected argument")
                    || msg.contains("invalid digit")
                    || !msg.contains(&long)
                {
                    bad.push(format!("{shown}: {}", msg.lines().next().unwrap_or("")));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{} flag(s):\n{}", bad.len(), bad.join("\n"));
}

/// Every duration setting above its bound (1e300 s) is one error naming the key or flag, before
/// any run directory exists; never a panic.
#[test]
fn issue34_item5_huge_durations_are_refused_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let llm = "[llm.default]\nprovider = \"openai\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9/v1\"\n";
    let cases = [
        (
            "world.episode_timeout_s",
            "[world]\nepisode_timeout_s = 1e300\n".to_string(),
        ),
        ("default.timeout_s", format!("{llm}timeout_s = 1e300\n")),
        ("default.deadline_s", format!("{llm}deadline_s = 1e300\n")),
        (
            "endpoint_wait_s",
            format!("[llm]\nendpoint_wait_s = 1e300\n{llm}"),
        ),
        (
            "search.max_wall_clock_s",
            "[search]\nmax_wall_clock_s = 1e300\n".to_string(),
        ),
        (
            "sandbox.timeout_s",
            "[sandbox]\ntimeout_s = 1e300\n".to_string(),
        ),
        (
            "world.episode_timeout_s",
            "[world]\nepisode_timeout_s = -1\n".to_string(),
        ),
    ];
    for (i, (key, toml)) in cases.iter().enumerate() {
        let cfg = tmp.path().join(format!("c{i}.toml"));
        std::fs::write(&cfg, toml).unwrap();
        let out = tmp.path().join(format!("run{i}"));
        let o = ppol()
            .args(["evolve", "--config", cfg.to_str().unwrap(), "--out"])
            .arg(&out)
            .arg("--quiet")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{key}: {err}");
        assert!(
            err.contains(key) && !err.contains("panicked"),
            "{key}: {err}"
        );
        assert!(!out.exists(), "{key}: the run directory was created");
    }
    for flag in ["1e300", "-1", "nan", "inf"] {
        let o = ppol()
            .args([
                "episodes",
                "--domain",
                "demo",
                "--episode-timeout-s",
                flag,
                "-o",
                "x",
            ])
            .current_dir(tmp.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag}: {err}");
        assert!(err.contains("--episode-timeout-s"), "{flag}: {err}");
    }
}

/// A generator program's wall clock counts its own time: with a model that takes 1.5 s per call
/// and a 1 s limit, `two_stage_llm.py` (two rounds of calls) still finishes and writes its
/// personas.
#[tokio::test(flavor = "multi_thread")]
async fn issue34_item7_a_slow_model_does_not_kill_the_generator() {
    use ppol::testing::mock_server::{serve_with, MockOptions, MockReply, MockRule, MockScript};
    let population = serde_json::json!([
        {"persona_id": "Ann", "description": "d", "axis_placement": {"terse": true}, "reasoning": "r"},
        {"persona_id": "Bob", "description": "d", "axis_placement": {"terse": false}, "reasoning": "r"}
    ]);
    let server = serve_with(
        MockScript {
            rules: vec![MockRule {
                contains: Some("Invent exactly".into()),
                reply: MockReply::text(population.to_string()),
                ..Default::default()
            }],
            default: MockReply::text("You type in lowercase."),
            ..Default::default()
        },
        MockOptions {
            latency: Duration::from_millis(1500),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("personas.jsonl");
    let args: Vec<String> = vec![
        "generate".into(),
        "--program".into(),
        root().join("seeds/two_stage_llm.py").display().to_string(),
        "--task".into(),
        "Change my flight to Friday.".into(),
        "-n".into(),
        "2".into(),
        "--llm".into(),
        format!("openai:mock@{}", server.base_url()),
        "--timeout".into(),
        "1".into(),
        "-o".into(),
        out.display().to_string(),
    ];
    let started = Instant::now();
    let o = tokio::task::spawn_blocking(move || ppol().args(&args).output().unwrap())
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        started.elapsed() > Duration::from_secs(3),
        "two rounds of 1.5 s calls"
    );
    assert!(server.requests() >= 2, "{}", server.requests());
    let rows = read_jsonl(&out);
    assert_eq!(rows.len(), 2, "{err}");
}
