//! `ppol evolve`, `resume`, `eval`, `report` end to end (offline), kill -9 + resume, and an
//! LLM-mode run against the mock OpenAI-compatible server.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ppol::evolve::runlog::{read, Event, FailureInfo};

use crate::util::{ppol, root, run_ppol};

fn evaluated(dir: &Path) -> Vec<(u64, String)> {
    read(&dir.join("log.jsonl"))
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::CandidateEvaluated {
                iteration,
                program_id,
                ..
            } => Some((iteration, program_id)),
            // a candidate the cascade stopped, with the score it stopped at
            Event::CandidateStopped {
                iteration,
                program_id,
                stage_score,
                ..
            } => Some((
                iteration,
                format!("stopped {program_id} at {stage_score:.12}"),
            )),
            _ => None,
        })
        .collect()
}

/// The episodes `run_stopped` counts.
fn stopped_episodes(dir: &Path) -> Option<ppol::evolve::runlog::EpisodeCounts> {
    read(&dir.join("log.jsonl"))
        .unwrap()
        .into_iter()
        .rev()
        .find_map(|r| match r.event {
            Event::RunStopped { episodes, .. } => episodes,
            _ => None,
        })
}

/// The cascade (on by default) stops a child whose first stage (2 personas per task) scores
/// below its batch's bar: it is logged as `candidate_stopped` with the metrics of what it
/// played, and is in neither the archive nor a validation; a child that reaches the bar ends
/// with the metrics of a one-stage evaluation; `run_stopped` and the summary count the
/// episodes, fewer than the same run plays with `--no-cascade`.
#[test]
fn the_cascade_stops_weak_children_and_nothing_takes_them_for_evaluated_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |name: &str, extra: &[&str]| {
        let out = tmp.path().join(name);
        let mut args = vec!["evolve", "--iterations", "8", "--seed", "5", "--out"];
        args.push(out.to_str().unwrap());
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = run_ppol(&args);
        assert_eq!(code, 0, "{stderr}");
        (out, stdout)
    };
    let (on, stdout) = run("on", &[]);
    let (off, _) = run("off", &["--no-cascade"]);
    let log = read(&on.join("log.jsonl")).unwrap();
    let checkpoint = std::fs::read_to_string(on.join("checkpoint.json")).unwrap();
    let mut stopped = Vec::new();
    let mut played = 0;
    for r in &log {
        match &r.event {
            Event::CandidateStopped {
                program_id,
                stage,
                stage_score,
                bar,
                metrics,
                personas,
                ..
            } => {
                assert_eq!(*stage, 1);
                assert!(stage_score < bar, "{stage_score} >= {bar}");
                assert_eq!(metrics.n_personas, 2);
                assert_eq!(personas.len(), 2 * metrics.n_tasks);
                assert_eq!(
                    metrics.n_episodes + metrics.n_failed_episodes,
                    personas.len()
                );
                assert!(
                    !checkpoint.contains(program_id.as_str()),
                    "{program_id} is in the archive"
                );
                stopped.push(program_id.clone());
                played += personas.len() as u64;
            }
            // a new best's validation stopped after its first stage counts as stopped early too
            Event::ValidationStopped { metrics, .. } => {
                played += (metrics.n_episodes + metrics.n_failed_episodes) as u64;
            }
            Event::CandidateEvaluated {
                stage_score, bar, ..
            } => {
                assert!(
                    stage_score.is_some(),
                    "every candidate has a first stage here"
                );
                if let (Some(s), Some(b)) = (stage_score, bar) {
                    assert!(s >= b, "{s} < {b} yet played in full");
                }
            }
            _ => {}
        }
    }
    assert!(!stopped.is_empty(), "the cascade stopped nothing");
    for r in &log {
        if let Event::Validation { program_id, .. } | Event::ValidationFailed { program_id, .. } =
            &r.event
        {
            assert!(!stopped.contains(program_id), "{program_id} was validated");
        }
    }
    assert!(!stopped.contains(&stopped_best(&on).unwrap()));
    let e = stopped_episodes(&on).unwrap();
    assert_eq!(
        (e.n_stopped, e.stopped_early),
        (stopped.len() as u64, played)
    );
    assert_eq!(
        e.total,
        e.baseline + e.candidates + e.stopped_early + e.validations
    );
    assert!(
        stdout.contains(&format!("stopped early {played} ")),
        "{stdout}"
    );
    assert!(stdout.contains("stopped-early"), "{stdout}");
    let f = stopped_episodes(&off).unwrap();
    assert_eq!((f.n_stopped, f.stopped_early), (0, 0));
    assert_eq!(f.baseline, e.baseline);
    assert!(e.total < f.total, "{e:?} vs {f:?}");
    assert!(
        stopped_early(&off) == 0
            && !read(&off.join("log.jsonl"))
                .unwrap()
                .iter()
                .any(|r| matches!(
                    &r.event,
                    Event::CandidateEvaluated {
                        stage_score: Some(_),
                        ..
                    }
                ))
    );
    // the seed plays in two stages with the cascade on, in one with it off: the same metrics
    let first = |dir: &Path| {
        read(&dir.join("log.jsonl"))
            .unwrap()
            .into_iter()
            .find_map(|r| match r.event {
                Event::CandidateEvaluated {
                    metrics, personas, ..
                } => Some((metrics, personas)),
                _ => None,
            })
    };
    assert_eq!(first(&on), first(&off));
}

/// How many candidates the cascade stopped in a run.
fn stopped_early(dir: &Path) -> usize {
    read(&dir.join("log.jsonl"))
        .unwrap()
        .iter()
        .filter(|r| matches!(r.event, Event::CandidateStopped { .. }))
        .count()
}

/// The validations a run logged: (iteration, program, combined), in log order.
fn validated(dir: &Path) -> Vec<(u64, String, String)> {
    read(&dir.join("log.jsonl"))
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::Validation {
                iteration,
                program_id,
                metrics,
            } => Some((iteration, program_id, format!("{:.12}", metrics.combined))),
            _ => None,
        })
        .collect()
}

fn stopped_best(dir: &Path) -> Option<String> {
    read(&dir.join("log.jsonl"))
        .unwrap()
        .into_iter()
        .rev()
        .find_map(|r| match r.event {
            Event::RunStopped {
                best_program_id, ..
            } => best_program_id,
            _ => None,
        })
}

#[test]
fn offline_evolve_eval_report() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (code, stdout, stderr) = run_ppol(&[
        "evolve",
        "--iterations",
        "4",
        "--seed",
        "3",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.starts_with("ppol evolve: OFFLINE run"), "{stderr}");
    assert!(
        stdout.contains("stopped: iterations after 4 iterations"),
        "{stdout}"
    );
    for f in [
        "config.toml",
        "log.jsonl",
        "human_ref.json",
        "discriminator.json",
        "baseline/episodes.jsonl",
        "checkpoint.json",
        "best/program.py",
        "best/program.json",
        "best/personas.jsonl",
        "best/episodes.jsonl",
    ] {
        assert!(out.join(f).exists(), "missing {f}");
    }
    let log = read(&out.join("log.jsonl")).unwrap();
    let kinds: Vec<&str> = log.iter().map(|r| r.event.kind()).collect();
    assert_eq!(kinds.first(), Some(&"run_started"));
    assert_eq!(kinds.last(), Some(&"run_stopped"));
    assert!(kinds.contains(&"discriminator_trained"));
    let n_done = log
        .iter()
        .filter(|r| {
            matches!(
                r.event.kind(),
                "candidate_evaluated" | "candidate_failed" | "candidate_stopped"
            )
        })
        .count();
    assert_eq!(n_done, 4);
    // sequence numbers strictly increase
    assert!(log.windows(2).all(|w| w[0].seq < w[1].seq));

    let (code, json, stderr) = run_ppol(&["eval", out.to_str().unwrap(), "--json", "--n", "4"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let names: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["human", "base", "direct", "seed", "evolved"]);
    let rows = v["rows"].as_array().unwrap();
    assert!(rows[2]["skipped"].as_str().unwrap().contains("LLM"));
    for r in [&rows[1], &rows[3], &rows[4]] {
        for k in [
            "human_likeness",
            "coverage",
            "score",
            "success_rate",
            "n_dialogues",
        ] {
            assert!(r[k].is_number(), "{k} in {r}");
        }
        assert!(r["dice"]["overall"].is_number());
    }
    // the persona conditions are more human-like than the plain simulator
    assert!(
        rows[4]["human_likeness"].as_f64().unwrap() > rows[1]["human_likeness"].as_f64().unwrap()
    );

    let (code, stdout, stderr) = run_ppol(&["report", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(stdout.contains("report.html"));
    assert!(html.contains("<svg") && !html.contains("<script"));

    // a second evolve into the same directory is refused, naming resume
    let (code, _, stderr) = run_ppol(&[
        "evolve",
        "--iterations",
        "1",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("ppol resume"), "{stderr}");
}

/// kill -9 at a point that depends on the seed of this test, then `ppol resume`: the final best
/// and the sequence of evaluated programs equal an uninterrupted run's, with no iteration
/// evaluated twice.
#[test]
fn kill_9_then_resume_matches_an_uninterrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    let (code, _, stderr) = run_ppol(&[
        "evolve",
        "--iterations",
        "8",
        "--seed",
        "3",
        "--out",
        full.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{stderr}");
    // the cascade stops candidates of this run (4 of its 7 children): the kill falls before,
    // between or after them, and the resumed run stops the same ones
    assert!(stopped_early(&full) >= 2, "{:?}", evaluated(&full));

    let killed = tmp.path().join("killed");
    // kill after 2..=5 checkpoints, chosen from the clock so repeated runs probe other points
    let target = 2
        + (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
            % 4) as usize;
    let mut child = ppol()
        .args([
            "evolve",
            "--iterations",
            "8",
            "--seed",
            "3",
            "--out",
            killed.to_str().unwrap(),
            "--quiet",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        let n = std::fs::read_to_string(killed.join("log.jsonl"))
            .map(|t| t.matches("\"event\":\"checkpoint\"").count())
            .unwrap_or(0);
        if n >= target || t0.elapsed() > Duration::from_secs(120) {
            break;
        }
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    unsafe {
        libc::kill(child.id() as i32, libc::SIGKILL);
    }
    let _ = child.wait();
    let before = evaluated(&killed).len();
    let (code, _, stderr) = run_ppol(&["resume", killed.to_str().unwrap(), "--quiet"]);
    assert_eq!(
        code, 0,
        "resume failed after kill at checkpoint {target}: {stderr}"
    );
    let a = evaluated(&full);
    let b = evaluated(&killed);
    let iters: Vec<u64> = b.iter().map(|(i, _)| *i).collect();
    let mut dedup = iters.clone();
    dedup.dedup();
    assert_eq!(iters, dedup, "an iteration was evaluated twice");
    assert_eq!(
        a, b,
        "killed at {target} checkpoints ({before} evaluations logged before the kill)"
    );
    assert_eq!(stopped_best(&full), stopped_best(&killed));
    assert_eq!(stopped_episodes(&full), stopped_episodes(&killed));
    let kinds: Vec<String> = read(&killed.join("log.jsonl"))
        .unwrap()
        .iter()
        .map(|r| r.event.kind().to_string())
        .collect();
    assert!(kinds.contains(&"resumed".to_string()) || before == 8);
}

pub(crate) fn llm_config(dir: &Path, base_url: &str) -> PathBuf {
    let seed = root().join("seeds/offline_templates.py");
    let text = format!(
        "[run]\nname = \"llm-test\"\n[search]\niterations = 3\nseed = 2\nseed_program = \"{}\"\n[episodes]\nbackend = \"scripted\"\n\
         [mutation]\nedit_format = \"diff\"\n[llm]\nmax_retries = 1\nbackoff_base_ms = 1\nbackoff_max_ms = 5\n[llm.default]\nprovider = \"openai\"\nmodel = \"mock-model\"\nbase_url = \"{}\"\n",
        seed.display(),
        base_url
    );
    let p = dir.join("llm.toml");
    std::fs::write(&p, text).unwrap();
    p
}

async fn llm_run(diff: &str) -> (PathBuf, tempfile::TempDir, u64) {
    use ppol::testing::mock_server::{serve, MockReply, MockRule, MockScript};
    let script = MockScript {
        rules: vec![MockRule {
            contains: Some("<<<<<<< SEARCH".into()),
            reply: MockReply::text(diff),
            ..Default::default()
        }],
        default: MockReply::text(
            "The terse personas read as human; the skeptical ones push back too often.",
        ),
        ..Default::default()
    };
    let server = serve(script).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = llm_config(tmp.path(), &server.base_url());
    let out = tmp.path().join("run");
    let cfg_s = cfg.to_str().unwrap().to_string();
    let out_s = out.to_str().unwrap().to_string();
    let res = tokio::task::spawn_blocking(move || {
        run_ppol(&["evolve", "--config", &cfg_s, "--out", &out_s, "--quiet"])
    })
    .await
    .unwrap();
    assert_eq!(res.0, 0, "{}", res.2);
    assert!(res.2.starts_with("ppol evolve: LLM run"), "{}", res.2);
    (out, tmp, server.requests())
}

#[tokio::test(flavor = "multi_thread")]
async fn llm_mode_applies_valid_diffs() {
    let diff = "Make the users terser and less skeptical.\n<<<<<<< SEARCH\nPLACEMENT_WEIGHTS = {\"terse\": 0.5, \"skeptical\": 0.5, \"frustrated\": 0.5, \"ambiguous\": 0.5}\n=======\nPLACEMENT_WEIGHTS = {\"terse\": 0.8, \"skeptical\": 0.2, \"frustrated\": 0.4, \"ambiguous\": 0.5}\n>>>>>>> REPLACE\n";
    let (out, _tmp, requests) = llm_run(diff).await;
    let log = read(&out.join("log.jsonl")).unwrap();
    let diffs = log
        .iter()
        .filter(|r| matches!(&r.event, Event::CandidateEvaluated { mutation, code, .. } if mutation == "diff" && code.contains("\"terse\": 0.8")))
        .count();
    assert!(diffs >= 1, "no diff was applied");
    // reflections came from the model
    assert!(log.iter().any(|r| matches!(&r.event, Event::CandidateEvaluated { reflection, .. } if reflection.contains("skeptical ones push back"))));
    assert!(
        requests >= 3,
        "mutator and reflection calls reach the endpoint ({requests})"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn llm_mode_records_invalid_diffs_and_continues() {
    let diff = "<<<<<<< SEARCH\nTHIS LINE IS NOT IN THE PROGRAM\n=======\nx = 1\n>>>>>>> REPLACE\n";
    let (out, _tmp, _) = llm_run(diff).await;
    let log = read(&out.join("log.jsonl")).unwrap();
    let failures: Vec<String> = log
        .iter()
        .filter_map(|r| match &r.event {
            Event::CandidateFailed { failure, .. } => {
                Some(format!("{}: {}", failure.stage, failure.reason))
            }
            _ => None,
        })
        .collect();
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(
        failures
            .iter()
            .all(|f| f.starts_with("mutation:diff-not-applied")),
        "{failures:?}"
    );
    assert!(matches!(
        log.last().unwrap().event,
        Event::RunStopped { iterations: 3, .. }
    ));
}

fn stop_reason(dir: &Path) -> (String, u64) {
    read(&dir.join("log.jsonl"))
        .unwrap()
        .into_iter()
        .rev()
        .find_map(|r| match r.event {
            Event::RunStopped {
                reason, iterations, ..
            } => Some((reason, iterations)),
            _ => None,
        })
        .unwrap()
}

/// The reference's early stop never fires (ppol-spec §5.7); ours stops after K evaluations in a
/// row without a new elite, and the wall-clock limit stops between evaluations.
#[test]
fn early_stop_and_wall_clock_stop_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("c.toml");
    std::fs::write(&cfg, "[search]\niterations = 200\nseed = 4\nearly_stop_evaluations = 2\n[archive]\nnum_islands = 1\nfeature_bins = 2\n").unwrap();
    let out = tmp.path().join("early");
    let (code, stdout, err) = run_ppol(&[
        "evolve",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
    let (reason, iterations) = stop_reason(&out);
    assert_eq!(reason, "early_stop", "{stdout}");
    assert!(iterations < 200);
    // the last two evaluations made no new elite, the one before did
    let elites: Vec<bool> = read(&out.join("log.jsonl"))
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::CandidateEvaluated { new_elite, .. } => Some(new_elite),
            Event::CandidateFailed { .. } | Event::CandidateStopped { .. } => Some(false),
            _ => None,
        })
        .collect();
    let n = elites.len();
    assert!(
        n >= 3 && !elites[n - 1] && !elites[n - 2] && elites[..n - 2].iter().any(|e| *e),
        "{elites:?}"
    );

    std::fs::write(
        &cfg,
        "[search]\niterations = 200\nseed = 4\nmax_wall_clock_s = 0.001\n",
    )
    .unwrap();
    let out = tmp.path().join("clock");
    let (code, _, err) = run_ppol(&[
        "evolve",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    // the wall clock bounds the baseline too (issue #25): a run out of time before it has
    // evaluated anything stops there, says what it kept, and exits 130
    assert_eq!(code, 130, "{err}");
    assert!(
        err.contains("max_wall_clock_s reached during the baseline"),
        "{err}"
    );
    assert!(!out.join("checkpoint.json").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn llm_budget_stops_the_run_cleanly() {
    use ppol::testing::mock_server::{serve, MockReply, MockRule, MockScript};
    let diff = "<<<<<<< SEARCH\nPLACEMENT_WEIGHTS = {\"terse\": 0.5, \"skeptical\": 0.5, \"frustrated\": 0.5, \"ambiguous\": 0.5}\n=======\nPLACEMENT_WEIGHTS = {\"terse\": 0.7, \"skeptical\": 0.5, \"frustrated\": 0.5, \"ambiguous\": 0.5}\n>>>>>>> REPLACE\n";
    let script = MockScript {
        rules: vec![MockRule {
            contains: Some("<<<<<<< SEARCH".into()),
            reply: MockReply::text(diff).with_usage(10, 10),
            ..Default::default()
        }],
        default: MockReply::text("fine").with_usage(10, 10),
        ..Default::default()
    };
    let server = serve(script).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = llm_config(tmp.path(), &server.base_url());
    let mut text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("iterations = 3", "iterations = 10");
    text.push_str("[budget]\nmax_tokens = 50\n");
    std::fs::write(&cfg, text).unwrap();
    let out = tmp.path().join("run");
    let (cfg_s, out_s) = (cfg.display().to_string(), out.display().to_string());
    let (code, stdout, err) = tokio::task::spawn_blocking(move || {
        run_ppol(&["evolve", "--config", &cfg_s, "--out", &out_s, "--quiet"])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("stopped: budget"), "{stdout}");
    let (reason, iterations) = stop_reason(&out);
    assert_eq!(reason, "budget");
    assert!(iterations < 10);
    assert!(out.join("best/program.py").exists());
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn run_started_hashes(dir: &Path) -> std::collections::BTreeMap<String, String> {
    match read(&dir.join("log.jsonl")).unwrap().remove(0).event {
        Event::RunStarted { hashes, .. } => hashes,
        e => panic!("first event is {}", e.kind()),
    }
}

/// The run log's `feature_banks` hash is the SHA-256 of the banks file the feature set is
/// compiled from (it was the hash of the set's name, which does not change when a bank does).
#[test]
fn run_log_hashes_the_feature_banks_text() {
    let tmp = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    for (set, file) in [("ppol-0.1.1", "ppol-0.1.1.banks"), ("v2", "v2.banks")] {
        let cfg = tmp.path().join(format!("{set}.toml"));
        std::fs::write(
            &cfg,
            format!("[run]\nfeature_set = \"{set}\"\n[search]\niterations = 1\n"),
        )
        .unwrap();
        let out = tmp.path().join(set);
        let (code, _, err) = run_ppol(&[
            "evolve",
            "--config",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--quiet",
        ]);
        assert_eq!(code, 0, "{err}");
        let banks = std::fs::read(root().join("fitness").join(file)).unwrap();
        let logged = run_started_hashes(&out)["feature_banks"].clone();
        assert_eq!(logged, sha256_hex(&banks), "{set}");
        // and every file the sandbox gives a program: the helpers are part of what ran
        let hashes = run_started_hashes(&out);
        for support in ["harness.py", "ppol_llm.py", "ppol_personas.py"] {
            let text = std::fs::read(root().join("generators").join(support)).unwrap();
            assert_eq!(hashes[support], sha256_hex(&text), "{support}");
        }
        seen.push(logged);
    }
    assert_ne!(seen[0], seen[1]);
}

/// `[archive] fitness_metric` decides the best program, and progress reports the best
/// program's value of that metric (not its `combined`).
#[tokio::test(flavor = "multi_thread")]
async fn progress_reports_the_configured_fitness_metric() {
    use ppol::evolve::config::RunConfig;
    use ppol::evolve::run::{evolve, Progress, RunControl};
    use std::sync::{Arc, Mutex};
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = RunConfig::default();
    cfg.run.out = Some(tmp.path().join("run"));
    cfg.search.iterations = 6;
    cfg.search.seed = 7;
    cfg.archive.fitness_metric = "human_likeness".into();
    let seen: Arc<Mutex<Vec<Progress>>> = Arc::default();
    let sink = seen.clone();
    let control = RunControl {
        progress: Some(Arc::new(move |p: &Progress| {
            sink.lock().unwrap().push(p.clone())
        })),
        ..Default::default()
    };
    let summary = evolve(cfg, control).await.unwrap();
    let log = read(&summary.run_dir.join("log.jsonl")).unwrap();
    let scored: Vec<(String, f64, f64)> = log
        .iter()
        .filter_map(|r| match &r.event {
            Event::CandidateEvaluated {
                program_id,
                metrics,
                ..
            } => Some((program_id.clone(), metrics.human_likeness, metrics.combined)),
            _ => None,
        })
        .collect();
    assert!(scored.len() >= 2, "{scored:?}");
    let best_hl = scored.iter().map(|s| s.1).fold(f64::MIN, f64::max);
    let best = scored.iter().find(|s| s.1 == best_hl).unwrap();
    assert_eq!(summary.best_program_id.as_deref(), Some(best.0.as_str()));
    let last = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last.best_combined, Some(best_hl), "{last:?}");
    assert_ne!(
        best.1, best.2,
        "human_likeness and combined coincide: the test proves nothing"
    );
}

/// The loop as a state machine: a step changes the state and logs the evaluation, nothing is
/// saved until `commit`, and the checkpoint is the state itself.
#[tokio::test(flavor = "multi_thread")]
async fn step_then_commit_saves_the_state_as_the_checkpoint() {
    use ppol::evolve::config::RunConfig;
    use ppol::evolve::context::RunContext;
    use ppol::evolve::evolution::{Evolution, Step};
    use ppol::evolve::rundir::checkpoint::State;
    use ppol::evolve::rundir::RunDir;
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = RunConfig::default();
    cfg.run.out = Some(tmp.path().join("run"));
    cfg.search.iterations = 3;
    let dir = RunDir::create(&cfg).unwrap();
    let ctx = RunContext::new(cfg, dir.clone()).await.unwrap();
    let mut evo = Evolution::start(ctx, None, Default::default())
        .await
        .unwrap();
    assert_eq!(evo.state().iteration, 0);
    let step = evo.step().await.unwrap();
    assert!(matches!(step, Step::Iteration { .. }), "{step:?}");
    assert_eq!(evo.state().iteration, 1);
    assert_eq!(
        evo.state().archive.len(),
        1,
        "the seed program is in the archive"
    );
    assert!(
        !dir.checkpoint_path().exists(),
        "a step alone saves nothing"
    );
    let last = read(&dir.log_path()).unwrap().pop().unwrap();
    assert_eq!(
        last.event.kind(),
        "validation",
        "the seed is the first best"
    );
    evo.commit().unwrap();
    let saved: State = dir.read_checkpoint().unwrap().unwrap();
    let last = read(&dir.log_path()).unwrap().pop().unwrap();
    assert_eq!(last.event, Event::Checkpoint { iteration: 1 });
    assert_eq!(saved.log_seq, last.seq);
    assert_eq!(saved.iteration, 1);
    assert_eq!(saved.archive.to_json(), evo.state().archive.to_json());
    assert!(dir.join("best/program.py").exists());
}

/// Settings only a run can check are refused before the run directory exists: a fitness
/// metric programs do not carry, and LLM mutation without an LLM (which used to panic at the
/// first mutation).
#[test]
fn run_settings_are_refused_before_anything_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    for (toml, key) in [
        (
            "[archive]\nfitness_metric = \"score\"\n",
            "archive.fitness_metric",
        ),
        ("[mutation]\nmode = \"llm\"\n", "mutation.mode"),
        ("[mutation]\ntemperature = 7.0\n", "mutation.temperature"),
    ] {
        let cfg = tmp.path().join("c.toml");
        std::fs::write(&cfg, toml).unwrap();
        let out = tmp.path().join("run");
        let (code, _, err) = run_ppol(&[
            "evolve",
            "--config",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--quiet",
        ]);
        assert_eq!(code, 2, "{toml}: {err}");
        assert!(err.contains(key), "{toml}: {err}");
        assert!(!out.exists(), "{toml}: the run directory was created");
    }
}

/// A new train best is the best of its own batch; `best/` keeps the program that validates
/// best (seed 6 on the demo finds a train best that validates worse than an earlier one). The
/// cascade is off: with it, a validation below the best's stops after its first stage and is no
/// `validation` event, so the case would not show in the log.
#[test]
fn best_is_the_program_that_validates_best() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (code, _, err) = run_ppol(&[
        "evolve",
        "--iterations",
        "20",
        "--seed",
        "6",
        "--no-cascade",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
    let validations: Vec<(String, f64)> = read(&out.join("log.jsonl"))
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::Validation {
                program_id,
                metrics,
                ..
            } => Some((program_id, metrics.combined)),
            _ => None,
        })
        .collect();
    let max = validations
        .iter()
        .map(|v| v.1)
        .fold(f64::NEG_INFINITY, f64::max);
    assert!(
        validations.last().unwrap().1 < max,
        "the run no longer shows the case: {validations:?}"
    );
    let best: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("best/program.json")).unwrap())
            .unwrap();
    let first_max = validations.iter().find(|v| v.1 == max).unwrap();
    assert_eq!(best["program_id"], first_max.0.as_str(), "{validations:?}");
    assert_eq!(best["validation"]["combined"].as_f64(), Some(max));
}

/// The text of the report's summary fact `name` (`<dt>name</dt><dd>TEXT</dd>`).
fn report_fact(html: &str, name: &str) -> Option<String> {
    let start = html.find(&format!("<dt>{name}</dt><dd>"))? + name.len() + 13;
    let end = start + html[start..].find("</dd>")?;
    Some(html[start..end].to_string())
}

/// One best program (issue #24): the run's best is the program that validates best, and the
/// log's `run_stopped`, `best/program.json`, the CLI summary, the report and `eval` all name
/// it, each with that program's own train score (its `candidate_evaluated`) and validation
/// score (its `validation`). Before, `run_stopped` and the CLI named the train best (it00010)
/// with the validated program's validation, `best/` held it00003, and the report labelled
/// it00003 with it00010's train score. (The cascade is off: with it, validations below the
/// best's stop after their first stage, and this run no longer shows the case. Seed 3: since
/// structural recombination keeps whole sentences, seed 1's train best validates best.)
#[test]
fn the_run_names_one_best_program_with_its_own_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (code, stdout, err) = run_ppol(&[
        "evolve",
        "--iterations",
        "10",
        "--seed",
        "3",
        "--no-cascade",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
    let log = read(&out.join("log.jsonl")).unwrap();
    let mut train = std::collections::BTreeMap::new();
    let mut validation = std::collections::BTreeMap::new();
    let mut train_best = None;
    for r in &log {
        match &r.event {
            Event::CandidateEvaluated {
                program_id,
                metrics,
                new_best,
                ..
            } => {
                train.insert(program_id.clone(), metrics.combined);
                if *new_best {
                    train_best = Some(program_id.clone());
                }
            }
            Event::Validation {
                program_id,
                metrics,
                ..
            } => {
                validation.insert(program_id.clone(), metrics.combined);
            }
            _ => {}
        }
    }
    // the case this test is about: the train best is not the program that validates best
    let max = validation
        .values()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let best = validation
        .iter()
        .rev()
        .find(|(_, v)| **v == max)
        .map(|(id, _)| id.clone())
        .unwrap();
    assert_ne!(
        train_best.as_deref(),
        Some(best.as_str()),
        "the run no longer shows the case: {validation:?}"
    );
    let (own_train, own_val) = (train[&best], validation[&best]);
    let f3 = |x: f64| format!("{x:.3}");

    // the log
    let stopped = std::fs::read_to_string(out.join("log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["event"] == "run_stopped")
        .unwrap();
    assert_eq!(stopped["best_program_id"], best.as_str(), "run_stopped");
    assert_eq!(
        stopped["best_metrics"]["combined"].as_f64(),
        Some(own_train)
    );
    assert_eq!(
        stopped["best_validation"]["combined"].as_f64(),
        Some(own_val)
    );

    // best/
    let program: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("best/program.json")).unwrap())
            .unwrap();
    assert_eq!(program["program_id"], best.as_str(), "best/program.json");
    assert_eq!(program["metrics"]["combined"].as_f64(), Some(own_train));
    assert_eq!(program["validation"]["combined"].as_f64(), Some(own_val));

    // the CLI summary
    assert!(
        stdout.contains(&format!("best program {best}")),
        "the CLI must name {best}: {stdout}"
    );
    assert!(
        stdout.contains(&format!("train combined {}", f3(own_train)))
            && stdout.contains(&format!("validation: combined {}", f3(own_val))),
        "the CLI must give {best}'s own numbers (train {}, validation {}): {stdout}",
        f3(own_train),
        f3(own_val)
    );

    // the report
    let (code, _, err) = run_ppol(&["report", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let fact = report_fact(&html, "best score (train)").expect("a best score (train) fact");
    assert!(
        fact.starts_with(&f3(own_train)) && fact.ends_with(&best),
        "report: {fact} (expected {} · {best})",
        f3(own_train)
    );
    let fact =
        report_fact(&html, "best score (validation)").expect("a best score (validation) fact");
    assert!(
        fact.starts_with(&f3(own_val)) && fact.ends_with(&best),
        "report: {fact} (expected {} · {best})",
        f3(own_val)
    );

    // eval names the program it evaluates
    let (code, json, err) = run_ppol(&["eval", out.to_str().unwrap(), "--json", "--n", "2"]);
    assert_eq!(code, 0, "{err}");
    let table: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(table["best_program_id"], best.as_str(), "eval");
}

/// Offline children never repeat an evaluated program: a crossover that rebuilds one (the
/// inspiration is often the parent's own parent) becomes a structural edit, and structural
/// edits are retried with other seeds. Before, 6 of the README run's 10 evaluations were
/// repeats.
#[test]
fn offline_children_are_not_evaluated_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (code, _, err) = run_ppol(&[
        "evolve",
        "--iterations",
        "10",
        "--seed",
        "1",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
    let hashes: Vec<String> = read(&out.join("log.jsonl"))
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            Event::CandidateEvaluated { code_hash, .. }
            | Event::CandidateStopped { code_hash, .. } => Some(code_hash),
            _ => None,
        })
        .collect();
    assert_eq!(hashes.len(), 10);
    let distinct: std::collections::BTreeSet<&String> = hashes.iter().collect();
    assert_eq!(distinct.len(), hashes.len(), "{hashes:?}");
}

/// A mutator that never writes a usable answer: after `rewrite_after_failures` unparsable
/// diffs the loop asks for a full rewrite, after as many programless rewrites it makes a
/// structural edit, and the run goes on. Each failure keeps the model's raw reply, and
/// `run_stopped` counts the outcomes per operator.
#[tokio::test(flavor = "multi_thread")]
async fn a_weak_mutator_falls_back_to_rewrite_then_structural() {
    use ppol::testing::mock_server::{serve, MockReply, MockRule, MockScript};
    let script = MockScript {
        rules: vec![MockRule {
            contains: Some("<<<<<<< SEARCH".into()),
            reply: MockReply::text("I would make the personas WEAK_REPLY_MARKER more human."),
            ..Default::default()
        }],
        default: MockReply::text("The personas read as human enough."),
        ..Default::default()
    };
    let server = serve(script).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = llm_config(tmp.path(), &server.base_url());
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("iterations = 3", "iterations = 4")
        .replace("[mutation]\n", "[mutation]\nrewrite_after_failures = 1\n");
    std::fs::write(&cfg, text).unwrap();
    let out = tmp.path().join("run");
    let (cfg_s, out_s) = (
        cfg.to_str().unwrap().to_string(),
        out.to_str().unwrap().to_string(),
    );
    let res = tokio::task::spawn_blocking(move || {
        run_ppol(&["evolve", "--config", &cfg_s, "--out", &out_s, "--quiet"])
    })
    .await
    .unwrap();
    assert_eq!(res.0, 0, "{}", res.2);
    let log = read(&out.join("log.jsonl")).unwrap();
    let attempts: Vec<(String, String, String)> = log
        .iter()
        .filter_map(|r| match &r.event {
            Event::CandidateFailed {
                mutation, failure, ..
            } => Some((
                mutation.clone(),
                failure.stage.clone(),
                failure.raw_reply.clone(),
            )),
            Event::CandidateEvaluated { mutation, .. } if mutation != "seed" => {
                Some((mutation.clone(), "applied".into(), String::new()))
            }
            _ => None,
        })
        .collect();
    let ops: Vec<(&str, &str)> = attempts
        .iter()
        .map(|(m, s, _)| (m.as_str(), s.as_str()))
        .collect();
    assert_eq!(
        ops[..3],
        [
            ("diff", "mutation:unparsable"),
            ("rewrite", "mutation:no-program"),
            ("structural", "applied"),
        ],
        "{attempts:?}"
    );
    assert!(attempts[0].2.contains("WEAK_REPLY_MARKER"), "{attempts:?}");
    assert!(!attempts[1].2.is_empty(), "{attempts:?}");
    let counts = log
        .iter()
        .find_map(|r| match &r.event {
            Event::RunStopped { mutations, .. } => Some(mutations.clone()),
            _ => None,
        })
        .expect("run_stopped");
    assert_eq!(counts.get("diff:unparsable"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("rewrite:no-program"), Some(&1), "{counts:?}");
    assert!(
        counts.get("structural:applied").copied().unwrap_or(0) >= 1,
        "{counts:?}"
    );
    assert!(res.1.contains("mutations: "), "{}", res.1);
}

/// `ppol eval` scores what a program generated: a task whose generation fails is reported with
/// its reason and the share of personas generated, and the row is still computed from the
/// other tasks (it used to be skipped as a whole).
#[test]
fn eval_scores_what_was_generated_and_reports_failed_tasks() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let (code, _, stderr) = run_ppol(&[
        "evolve",
        "--iterations",
        "1",
        "--seed",
        "1",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{stderr}");
    // the best program now fails on the test task about transfers (task 7), only there
    let best = out.join("best/program.py");
    let program = std::fs::read_to_string(&best).unwrap().replace(
        "def generate_personas_detailed(task_context, axes, n):\n",
        "def generate_personas_detailed(task_context, axes, n):\n    if 'price match' in task_context:\n        raise ValueError('TASK7_MARKER')\n",
    );
    assert!(program.contains("TASK7_MARKER"));
    std::fs::write(&best, program).unwrap();
    let (code, stdout, stderr) = run_ppol(&["eval", out.to_str().unwrap(), "--json", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    let table: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = table["rows"].as_array().unwrap();
    let evolved = rows.iter().find(|r| r["name"] == "evolved").unwrap();
    assert!(evolved.get("skipped").is_none(), "{evolved}");
    let n = evolved["personas_generated"][1].as_u64().unwrap();
    assert_eq!(
        evolved["personas_generated"][0].as_u64().unwrap(),
        n * 6 / 7,
        "6 of the 7 held-out tasks generate"
    );
    let failures = evolved["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{failures:?}");
    let f = failures[0].as_str().unwrap();
    assert!(
        f.starts_with("task 7: generation failed") && f.contains("TASK7_MARKER"),
        "{f}"
    );
    assert!(evolved["n_dialogues"].as_u64().unwrap() > 0);
    // the seed row is untouched
    let seed = rows.iter().find(|r| r["name"] == "seed").unwrap();
    assert_eq!(seed["personas_generated"][0], seed["personas_generated"][1]);
    let (_, text, _) = run_ppol(&["eval", out.to_str().unwrap(), "--quiet"]);
    assert!(
        text.contains("evolved: task 7: generation failed"),
        "{text}"
    );
}

/// A new best whose validation fails is logged (`validation_failed`, with the reason), and
/// `best/` says so: `program.json` has no validation metrics but the failure, and there are no
/// empty `personas.jsonl` / `episodes.jsonl` files.
#[test]
fn a_failed_validation_is_logged_and_best_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    // a first run tells which task the run validates on
    let probe = tmp.path().join("probe");
    let (code, _, stderr) = run_ppol(&[
        "evolve",
        "--iterations",
        "1",
        "--seed",
        "1",
        "--out",
        probe.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let log = read(&probe.join("log.jsonl")).unwrap();
    let val = match &log[0].event {
        Event::RunStarted { splits, .. } => splits["val"][0].clone(),
        e => panic!("{e:?}"),
    };
    let tasks: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("src/simulate/tau2/demo/tasks.json")).unwrap(),
    )
    .unwrap();
    let reason = tasks
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == val.as_str())
        .unwrap()["user_scenario"]["instructions"]["reason_for_call"]
        .as_str()
        .unwrap()
        .to_string();
    // the seed program fails on the validation task only
    let (out, code, stderr) = evolve_with_patched_seed(
        tmp.path(),
        &format!(
            "    if {:?} in task_context:\n        raise ValueError('VAL_MARKER')\n",
            reason
        ),
        "iterations = 1\nseed = 1",
    );
    assert_eq!(code, 0, "{stderr}");
    let log = read(&out.join("log.jsonl")).unwrap();
    let failed: Vec<&FailureInfo> = log
        .iter()
        .filter_map(|r| match &r.event {
            Event::ValidationFailed { failure, .. } => Some(failure),
            _ => None,
        })
        .collect();
    assert!(!failed.is_empty(), "no validation_failed event");
    assert!(
        failed[0].reason.contains("VAL_MARKER") || failed[0].stderr_tail.contains("VAL_MARKER"),
        "{failed:?}"
    );
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("best/program.json")).unwrap())
            .unwrap();
    assert!(info["validation"].is_null(), "{info}");
    assert!(
        info["validation_failure"]
            .as_str()
            .unwrap()
            .contains("sandbox:"),
        "{info}"
    );
    assert!(!out.join("best/personas.jsonl").exists());
    assert!(!out.join("best/episodes.jsonl").exists());
    assert!(out.join("best/program.py").exists());
}

/// A seed program that fails leaves nothing to evolve: the run exits with an error naming it,
/// and its log ends with `run_stopped` giving the reason (with the LLM cost so far).
#[test]
fn a_failing_seed_stops_the_run_with_a_logged_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, code, stderr) = evolve_with_patched_seed(
        tmp.path(),
        "    raise ValueError('SEED_MARKER')\n",
        "iterations = 2",
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("the seed program failed"), "{stderr}");
    let log = read(&out.join("log.jsonl")).unwrap();
    match &log.last().unwrap().event {
        Event::RunStopped { reason, .. } => {
            assert!(
                reason.starts_with("seed_failed: sandbox:") && reason.contains("SEED_MARKER"),
                "{reason}"
            )
        }
        e => panic!("the log ends with {e:?}"),
    }
}

/// `ppol evolve` (offline) in `dir/run` with the offline seed program, `body` inserted at the top
/// of its `generate_personas_detailed`, and `search` settings: (run dir, exit code, stderr).
fn evolve_with_patched_seed(dir: &Path, body: &str, search: &str) -> (PathBuf, i32, String) {
    let marker = "def generate_personas_detailed(task_context, axes, n):\n";
    let seed = std::fs::read_to_string(root().join("seeds/offline_templates.py"))
        .unwrap()
        .replace(marker, &format!("{marker}{body}"));
    let seed_path = dir.join("seed.py");
    std::fs::write(&seed_path, seed).unwrap();
    let cfg = dir.join("run.toml");
    std::fs::write(
        &cfg,
        format!(
            "[search]\n{search}\nseed_program = {:?}\n",
            seed_path.to_str().unwrap()
        ),
    )
    .unwrap();
    let out = dir.join("run");
    let (code, _, stderr) = run_ppol(&[
        "evolve",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    (out, code, stderr)
}

/// `search.parallel_candidates` changes the wall time, not the result: with the generation
/// size fixed, 1 and 4 candidates in flight give the same log of evaluations, archive and best
/// program; and a run killed mid-generation resumes to the same end.
#[test]
fn parallel_candidates_give_the_same_run_as_one_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    // a high cascade bar, so that some children of the run are stopped after their first
    // stage: their bars are set when their generation is proposed, whatever is in flight
    let cfg = tmp.path().join("cascade.toml");
    std::fs::write(&cfg, "[search]\ncascade_quantile = 0.9\n").unwrap();
    let cfg = cfg.to_str().unwrap().to_string();
    let run = |name: &str, parallel: &str, extra: &[&str]| {
        let out = tmp.path().join(name);
        let mut args = vec![
            "evolve",
            "--config",
            &cfg,
            "--iterations",
            "9",
            "--seed",
            "4",
            "--generation-size",
            "4",
            "--parallel-candidates",
            parallel,
            "--out",
            out.to_str().unwrap(),
            "--quiet",
        ];
        args.extend_from_slice(extra);
        let (code, _, stderr) = run_ppol(&args);
        (out, code, stderr)
    };
    let (one, code, stderr) = run("one", "1", &[]);
    assert_eq!(code, 0, "{stderr}");
    let (four, code, stderr) = run("four", "4", &[]);
    assert_eq!(code, 0, "{stderr}");
    let a = evaluated(&one);
    assert!(a.len() >= 6, "{a:?}");
    assert!(stopped_early(&one) >= 1, "{a:?}");
    assert_eq!(a, evaluated(&four));
    assert_eq!(stopped_best(&one), stopped_best(&four));
    // validations run in the background and are applied a generation later, in order
    let v = validated(&one);
    assert!(v.len() >= 2, "{v:?}");
    assert_eq!(v, validated(&four));
    let archive = |dir: &Path| {
        let state: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("checkpoint.json")).unwrap())
                .unwrap();
        state["archive"].as_str().unwrap().to_string()
    };
    assert_eq!(archive(&one), archive(&four));
    assert_eq!(
        std::fs::read_to_string(one.join("best/program.py")).unwrap(),
        std::fs::read_to_string(four.join("best/program.py")).unwrap()
    );
    // halted after 3 iterations of this process (in the middle of the second generation,
    // with later candidates in flight), then resumed with 4 in flight
    let (halted, code, stderr) = run("halted", "4", &["--halt-after", "3"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(evaluated(&halted).len() < a.len());
    let (code, _, stderr) = run_ppol(&["resume", halted.to_str().unwrap(), "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(a, evaluated(&halted), "no evaluation lost or repeated");
    assert_eq!(v, validated(&halted), "no validation lost or repeated");
    assert_eq!(archive(&one), archive(&halted));
}

/// SIGINT (Ctrl-C, or `timeout -s INT` around a slow real model) stops an LLM run at once:
/// the evaluation in flight is abandoned — not recorded, evaluated again on resume — instead
/// of being waited for (with a slow model that took minutes, and the caller's kill -9 came
/// first). The run still ends with `run_stopped` ("interrupted") and resumes to its end.
#[test]
fn sigint_abandons_the_evaluation_in_flight() {
    use ppol::testing::mock_server::{serve_with, MockOptions, MockReply, MockScript};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt
        .block_on(serve_with(
            MockScript {
                default: MockReply::text("ok, thanks"),
                ..Default::default()
            },
            MockOptions {
                latency: Duration::from_millis(700),
                ..Default::default()
            },
        ))
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = llm_config(tmp.path(), &server.base_url());
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "[episodes]\nbackend = \"scripted\"\n",
        "[episodes]\nbackend = \"llm\"\nmax_turns = 6\nval_max_turns = 6\nbaseline_trials = 1\n",
    );
    std::fs::write(&cfg, text).unwrap();
    let out = tmp.path().join("run");
    let mut child = ppol()
        .args(["evolve", "--config", cfg.to_str().unwrap(), "--out"])
        .arg(&out)
        .arg("--quiet")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // wait until the seed's evaluation is under way (the discriminator is trained first)
    let t0 = Instant::now();
    while !std::fs::read_to_string(out.join("log.jsonl"))
        .unwrap_or_default()
        .contains("discriminator_trained")
    {
        assert!(t0.elapsed() < Duration::from_secs(120), "no discriminator");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let asked = Instant::now();
    // SAFETY: signalling our own child process by its pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    let took = asked.elapsed();
    // one episode of the seed's evaluation is 6 turns × 2 calls × 0.7 s ≈ 8 s
    assert!(
        took < Duration::from_secs(4),
        "stopped {took:?} after SIGINT"
    );
    assert!(status.code().is_some(), "{status:?}");
    let log = read(&out.join("log.jsonl")).unwrap();
    assert!(
        log.iter().any(
            |r| matches!(&r.event, Event::RunStopped { reason, .. } if reason == "interrupted")
        ),
        "{:?}",
        log.iter().map(|r| r.event.kind()).collect::<Vec<_>>()
    );
    assert!(
        evaluated(&out).is_empty(),
        "the abandoned seed was not recorded"
    );
    drop(rt);
}
