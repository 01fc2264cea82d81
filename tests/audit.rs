//! Human-likeness that cannot be gamed (issue #35): `ppol audit` (fresh classifiers, humans
//! against themselves and against the plain simulator), the audit in `ppol eval`, the LLM
//! judge against the mock server, and `[fitness] retrain_every` surviving kill -9.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::util::{root, run_ppol, shared};

fn demo(name: &str) -> String {
    root()
        .join("fitness/demo")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn json(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn interval(row: &Value, classifier: &str) -> (f64, f64, f64) {
    let i = &row[classifier];
    (
        i["auc"].as_f64().unwrap(),
        i["low"].as_f64().unwrap(),
        i["high"].as_f64().unwrap(),
    )
}

/// A small run for the tests: 3 personas of 2 tasks per candidate, a light audit.
const LIGHT: &str =
    "[fitness]\ncurriculum = false\nn_personas = 3\nbatch_size = 2\naudit_bootstrap = 20\n";

/// `ppol audit --human HUMAN CANDIDATE --bootstrap B --json`, which must succeed.
fn audit_json(human: &str, candidate: &str, bootstrap: &str) -> Value {
    let (code, out, err) = run_ppol(&[
        "audit",
        "--human",
        human,
        candidate,
        "--bootstrap",
        bootstrap,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    json(&out)
}

/// The headline property: the humans against themselves sit at 0.5 (their interval holds it)
/// and the plain simulator's row is told apart (AUC above 0.9), for both classifiers.
fn assert_control_at_half_and_baseline_apart(r: &Value) {
    for c in ["random_forest", "logistic"] {
        let (auc, low, high) = interval(&r["control"], c);
        assert!(
            low <= 0.5 && 0.5 <= high,
            "control {c}: {auc} [{low}, {high}]"
        );
        let (auc, low, high) = interval(&r["rows"][0], c);
        assert!(
            auc > 0.9 && low <= auc && auc <= high,
            "baseline {c}: {auc}"
        );
    }
}

/// `ppol evolve --config CFG --out OUT --quiet ARGS...`, which must succeed.
fn evolve(cfg: &Path, out: &Path, args: &[&str]) {
    let mut all = vec![
        "evolve",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ];
    all.extend_from_slice(args);
    let (code, _, err) = run_ppol(&all);
    assert_eq!(code, 0, "{err}");
}

/// The demo humans against themselves sit at 0.5; the plain simulator is told apart.
#[test]
fn audit_demo_control_holds_half_and_the_baseline_is_told_apart() {
    let r = audit_json(&demo("human.jsonl"), &demo("baseline.jsonl"), "50");
    assert_control_at_half_and_baseline_apart(&r);
    assert_eq!(r["rows"][0]["grouped_by"], "task");
    assert!(r["rows"][0]["top_features"].as_array().unwrap().len() == 5);
    assert!(r["judge"].as_str().unwrap().contains("offline"));
    assert!(r["method"]["description"]
        .as_str()
        .unwrap()
        .contains("bootstrap"));
}

/// Bad input: too few dialogues is a marked row and exit 1, too few humans exit 2, bad flags
/// and a prompt without its slots exit 2 naming them.
#[test]
fn audit_refuses_to_make_an_auc_from_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let few = tmp.path().join("few.jsonl");
    let text = std::fs::read_to_string(demo("baseline.jsonl")).unwrap();
    std::fs::write(&few, text.lines().take(6).collect::<Vec<_>>().join("\n")).unwrap();
    let (code, out, err) = run_ppol(&[
        "audit",
        "--human",
        &demo("human.jsonl"),
        few.to_str().unwrap(),
        &demo("baseline.jsonl"),
        "--bootstrap",
        "20",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("too few") && out.contains("6 dialogue(s)"),
        "{out}"
    );
    assert!(err.contains("1 of 3 rows had too few dialogues"), "{err}");
    // the humans themselves too few: an error with the counts
    let (code, _, err) = run_ppol(&[
        "audit",
        "--human",
        few.to_str().unwrap(),
        &demo("baseline.jsonl"),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("too few") && err.contains("6 dialogue(s)"),
        "{err}"
    );
    for (flag, value, named) in [
        ("--bootstrap", "0", "--bootstrap"),
        ("--folds", "1", "--folds"),
        ("--judge-pairs", "-1", "--judge-pairs"),
    ] {
        let (code, _, err) = run_ppol(&[
            "audit",
            "--human",
            &demo("human.jsonl"),
            &demo("baseline.jsonl"),
            flag,
            value,
        ]);
        assert_eq!(code, 2, "{flag} {value}");
        assert!(err.contains(named), "{err}");
    }
    let prompt = tmp.path().join("prompt.md");
    std::fs::write(&prompt, "Which is real? {user_a}").unwrap();
    let (code, _, err) = run_ppol(&[
        "audit",
        "--human",
        &demo("human.jsonl"),
        &demo("baseline.jsonl"),
        "--judge-prompt",
        prompt.to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("{user_b}") && err.contains("prompt.md"),
        "{err}"
    );
}

/// Dialogues whose user turns carry a marker only humans have (`zq`), and simulated ones.
fn marked(dir: &Path) -> (PathBuf, PathBuf) {
    let write = |name: &str, human: bool| {
        let p = dir.join(name);
        let lines: Vec<String> = (0..12)
            .map(|i| {
                let user = if human {
                    format!("zq need help with order {i}")
                } else {
                    format!("Hello! I would like help with my order number {i}, please.")
                };
                serde_json::json!({
                    "id": format!("{name}-{i}"),
                    "task_id": format!("t{}", i % 4),
                    "conversation": [
                        {"role": "assistant", "content": "Hi, how can I help?"},
                        {"role": "user", "content": user},
                    ],
                })
                .to_string()
            })
            .collect();
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        p
    };
    (write("humans.jsonl", true), write("sims.jsonl", false))
}

/// A mock judge that answers A when the prompt shows `user_a` (the human's marked first turn
/// in user A's place), else B: right on every pair.
async fn oracle(user_a: &str) -> ppol::testing::mock_server::MockServer {
    use ppol::testing::mock_server::{serve, MockReply, MockRule, MockScript};
    serve(MockScript {
        rules: vec![MockRule {
            contains: Some(user_a.into()),
            reply: MockReply::text("A"),
            ..Default::default()
        }],
        default: MockReply::text("B"),
        ..Default::default()
    })
    .await
    .unwrap()
}

/// The judge against the mock server: a script that recognises the human is right on every
/// pair; one that always answers A scores the share of pairs that showed the human first; an
/// answer that is neither is unanswered, never right or wrong.
#[tokio::test(flavor = "multi_thread")]
async fn the_judge_scores_scripted_answers() {
    use ppol::fitness::audit::judge::{self, JudgeOptions};
    use ppol::fitness::audit::stats::{wilson, Z95};
    use ppol::llm::LlmClient;
    use ppol::testing::mock_server::{serve, MockReply, MockScript};
    let tmp = tempfile::tempdir().unwrap();
    let (h, s) = marked(tmp.path());
    let load = |p: &Path| ppol::fitness::traces::load(p, &Default::default()).unwrap();
    let (humans, sims) = (load(&h), load(&s));
    let prompt = tmp.path().join("prompt.md");
    std::fs::write(&prompt, "A:\n{user_a}\nB:\n{user_b}\nWhich one is real?").unwrap();
    let opts = JudgeOptions::new(10, Some(&prompt), 3).unwrap();

    // an oracle: the human is A when A's turns start with the marker
    let oracle = oracle("A:\n- zq").await;
    let client = LlmClient::from_cli_value(&format!("openai:judge@{}", oracle.base_url())).unwrap();
    let r = judge::judge(&client, &humans, &sims, &opts, 1).await;
    assert_eq!((r.pairs, r.answered, r.correct), (10, 10, 10), "{r:?}");
    assert_eq!(r.paired_by, "task");
    assert_eq!(r.accuracy, wilson(10, 10, Z95));
    assert!(
        r.human_first > 0 && r.human_first < 10,
        "the order is randomised: {r:?}"
    );
    assert_eq!(oracle.requests(), 10);
    oracle.stop();

    // always A: right exactly when the human was shown first
    let always_a = serve(MockScript::always(MockReply::text("A")))
        .await
        .unwrap();
    let client =
        LlmClient::from_cli_value(&format!("openai:judge@{}", always_a.base_url())).unwrap();
    let r = judge::judge(&client, &humans, &sims, &opts, 1).await;
    assert_eq!(r.correct, r.human_first);
    assert_eq!(r.accuracy, wilson(r.human_first, 10, Z95));
    always_a.stop();

    // no usable answer
    let vague = serve(MockScript::always(MockReply::text("Both seem plausible.")))
        .await
        .unwrap();
    let client = LlmClient::from_cli_value(&format!("openai:judge@{}", vague.base_url())).unwrap();
    let r = judge::judge(&client, &humans, &sims, &opts, 1).await;
    assert_eq!((r.answered, r.accuracy), (0, None));
    assert!(r.unanswered[0].contains("not A or B"), "{r:?}");
    vague.stop();
}

/// End to end: `ppol audit --llm` against the mock server writes the judge's accuracy in each
/// row, next to the classifiers'.
#[tokio::test(flavor = "multi_thread")]
async fn audit_cli_runs_the_judge_on_a_configured_model() {
    let tmp = tempfile::tempdir().unwrap();
    let (h, s) = marked(tmp.path());
    let server = oracle("User A:\n- zq").await;
    let llm = format!("openai:judge@{}", server.base_url());
    let args: Vec<String> = [
        "audit",
        "--human",
        h.to_str().unwrap(),
        s.to_str().unwrap(),
        "--llm",
        &llm,
        "--judge-pairs",
        "6",
        "--bootstrap",
        "10",
        "--json",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        run_ppol(&a)
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let r = json(&out);
    let j = &r["rows"][0]["judge"];
    assert_eq!(
        (j["pairs"].as_u64(), j["correct"].as_u64()),
        (Some(6), Some(6))
    );
    assert_eq!(j["accuracy"]["share"].as_f64(), Some(1.0));
    assert!(
        r["judge"].as_str().unwrap().contains("reflection"),
        "{}",
        r["judge"]
    );
    assert_eq!(server.requests(), 6);
    server.stop();
}

/// `ppol eval --human H --json` carries, per row, HL and the audit of both classifiers with
/// their intervals; the human row is the control.
#[test]
fn eval_json_carries_hl_and_the_audit_of_every_row() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    // a light run and audit (each resample refits: 1,000 of them are minutes in a debug build)
    let cfg = tmp.path().join("run.toml");
    std::fs::write(&cfg, LIGHT).unwrap();
    // the run searches on the first three tasks' humans; eval audits against all of them, and
    // leaves out (and counts) the ones the run searched on
    let searched = tmp.path().join("searched.jsonl");
    let lines: String = std::fs::read_to_string(demo("human.jsonl"))
        .unwrap()
        .lines()
        .take(13)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&searched, lines).unwrap();
    evolve(
        &cfg,
        &out,
        &[
            "--iterations",
            "3",
            "--seed",
            "1",
            "--human",
            searched.to_str().unwrap(),
        ],
    );
    let (code, text, err) = run_ppol(&[
        "eval",
        out.to_str().unwrap(),
        "--human",
        &demo("human.jsonl"),
        "--n",
        "2",
    ]);
    assert!(
        text.contains("given dialogues left out: the run searched on them"),
        "{text}"
    );
    assert_eq!(code, 0, "{err}");
    // the text table shows the audit next to HL and says what each is
    assert!(
        text.contains("audit AUC [95%]") && text.contains("independent of HL"),
        "{text}"
    );
    assert!(text.contains("logistic AUC [95%]"), "{text}");
    // the JSON (what --json prints, also written to the run directory)
    let t = json(&std::fs::read_to_string(out.join("eval-test.json")).unwrap());
    assert!(t["audit"]["method"]["description"].is_string());
    assert!(t["audit"]["judge"].as_str().unwrap().contains("offline"));
    for row in t["rows"].as_array().unwrap() {
        let name = row["name"].as_str().unwrap();
        if row.get("skipped").is_some() {
            assert!(row.get("audit").is_none(), "{name}");
            continue;
        }
        assert!(row["human_likeness"].is_number(), "{name}");
        let a = &row["audit"];
        for c in ["random_forest", "logistic"] {
            let (auc, low, high) = interval(a, c);
            let unit = 0.0..=1.0;
            assert!(unit.contains(&auc) && low <= high, "{name} {c}");
            assert!(unit.contains(&low) && unit.contains(&high), "{name} {c}");
        }
        if name == "human" {
            assert_eq!(a["name"], "control (humans vs humans)");
        }
    }
    // the base row is told apart from the humans
    let base = &t["rows"][1];
    assert_eq!(base["name"], "base");
    assert!(interval(&base["audit"], "random_forest").0 > 0.9);
}

/// `ppol eval` of a run with a model asks the judge on that model: each simulated row gets its
/// accuracy, the human row (the control) none, and the table says which model judged.
#[tokio::test(flavor = "multi_thread")]
async fn eval_asks_the_judge_on_the_run_model() {
    use ppol::testing::mock_server::{serve, MockReply, MockRule, MockScript};
    let server = serve(MockScript {
        rules: vec![MockRule {
            contains: Some("Which user is the real person?".into()),
            reply: MockReply::text("A"),
            ..Default::default()
        }],
        default: MockReply::text("The terse personas read as human."),
        ..Default::default()
    })
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = crate::evolve::llm_config(tmp.path(), &server.base_url());
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str("[fitness]\naudit_bootstrap = 10\njudge_pairs = 3\n");
    std::fs::write(&cfg, text).unwrap();
    let out = tmp.path().join("run");
    let (cfg_s, out_s, human) = (
        cfg.to_str().unwrap().to_string(),
        out.to_str().unwrap().to_string(),
        demo("human.jsonl"),
    );
    let (code, stdout, err) = tokio::task::spawn_blocking(move || {
        let (code, _, err) = run_ppol(&["evolve", "--config", &cfg_s, "--out", &out_s, "--quiet"]);
        assert_eq!(code, 0, "{err}");
        run_ppol(&["eval", &out_s, "--human", &human, "--n", "2", "--json"])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let t = json(&stdout);
    let judge = t["audit"]["judge"].as_str().unwrap();
    assert!(
        judge.contains("mock-model") && judge.contains("reflection"),
        "{judge}"
    );
    let mut judged = 0;
    for row in t["rows"].as_array().unwrap() {
        let j = &row["audit"]["judge"];
        match row["name"].as_str().unwrap() {
            "human" => assert!(j.is_null()),
            name if row.get("skipped").is_none() => {
                // the mock always answers A: right exactly when the human was shown first
                assert_eq!(
                    (j["pairs"].as_u64(), j["answered"].as_u64()),
                    (Some(3), Some(3)),
                    "{name}"
                );
                assert_eq!(j["correct"], j["human_first"], "{name}");
                judged += 1;
            }
            _ => {}
        }
    }
    assert!(judged >= 3, "base, seed and evolved are judged");
    server.stop();
}

/// The evaluated programs and best of a run.
fn history(dir: &Path) -> (Vec<(u64, String, String)>, Vec<String>) {
    let log = ppol::evolve::runlog::read(&dir.join("log.jsonl")).unwrap();
    let mut evaluated = Vec::new();
    let mut retrained = Vec::new();
    for r in &log {
        match &r.event {
            ppol::evolve::runlog::Event::CandidateEvaluated {
                iteration,
                program_id,
                metrics,
                ..
            } => evaluated.push((*iteration, program_id.clone(), format!("{:?}", metrics))),
            e @ ppol::evolve::runlog::Event::DiscriminatorRetrained { .. } => {
                let mut v = serde_json::to_value(e).unwrap();
                v.as_object_mut().unwrap().remove("file");
                retrained.push(v.to_string());
            }
            ppol::evolve::runlog::Event::RunStopped {
                best_program_id,
                best_validation,
                ..
            } => retrained.push(format!("stopped: {best_program_id:?} {best_validation:?}")),
            _ => {}
        }
    }
    (evaluated, retrained)
}

/// `[fitness] retrain_every`: the discriminator is retrained on the elites' dialogues and the
/// archive rescored; a run killed at a checkpoint (after a retraining, and after one that was
/// done but not committed) and resumed ends exactly as an uninterrupted one: the same programs
/// with the same metrics, the same retrainings and the same best.
#[test]
fn retraining_survives_kill_9_and_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("run.toml");
    std::fs::write(
        &cfg,
        format!(
            "[search]\niterations = 5\nseed = 5\n{LIGHT}retrain_every = 2\nretrain_elites = 4\n"
        ),
    )
    .unwrap();
    let full = tmp.path().join("full");
    evolve(&cfg, &full, &[]);
    let (evaluated, events) = history(&full);
    let retrains = events.iter().filter(|e| e.contains("\"count\"")).count();
    assert_eq!(
        retrains, 2,
        "retrained after iterations 2 and 4: {events:?}"
    );
    assert!(full.join("retrain/discriminator-2.json").is_file());
    let cp: Value =
        serde_json::from_str(&std::fs::read_to_string(full.join("checkpoint.json")).unwrap())
            .unwrap();
    assert_eq!(cp["retraining"]["count"], 2);
    // the retrained forest scores differently from the first one (else nothing was retrained)
    let first = std::fs::read_to_string(full.join("discriminator.json")).unwrap();
    let second = std::fs::read_to_string(full.join("retrain/discriminator-1.json")).unwrap();
    assert_ne!(
        first.split("\"forest\"").nth(1),
        second.split("\"forest\"").nth(1)
    );

    // kill -9 after the 3rd commit (the first retraining committed with it), and right after
    // the second retraining, before anything committed it
    for point in ["checkpoint:3", "retrained:2"] {
        let killed = tmp.path().join(point.replace(':', "-"));
        let err = tmp.path().join(format!("{}.err", point.replace(':', "-")));
        let mut child = crate::restart::spawn(
            &[
                "evolve",
                "--config",
                cfg.to_str().unwrap(),
                "--out",
                killed.to_str().unwrap(),
                "--quiet",
                "--pause-at",
                point,
            ],
            &err,
        );
        crate::restart::wait_paused(&mut child, &err, point);
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped yet.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGKILL);
        }
        let _ = child.wait();
        let (code, _, err) = run_ppol(&["resume", killed.to_str().unwrap(), "--quiet"]);
        assert_eq!(code, 0, "resume after a kill at {point}: {err}");
        let (e2, ev2) = history(&killed);
        assert_eq!(e2, evaluated, "kill at {point}");
        assert_eq!(ev2, events, "kill at {point}");
    }
}

/// ../shared: the real τ-USI airline humans against themselves sit at 0.5 and against the plain
/// simulator's airline baseline above 0.9.
#[test]
fn shared_audit_of_real_airline_humans() {
    let Some(shared) = shared() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base.jsonl");
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--domain",
        "airline",
        "--tau2-data",
        shared.join("tau2").to_str().unwrap(),
        "--tasks",
        "all",
        "--quiet",
        "-o",
        base.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let humans = shared.join("human/tau_usi_airline_sample.jsonl");
    let r = audit_json(humans.to_str().unwrap(), base.to_str().unwrap(), "200");
    assert_control_at_half_and_baseline_apart(&r);
}
