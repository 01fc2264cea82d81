//! `ppol episodes` → `ppol score` → `ppol export sft` on the demo domain, and the offline
//! scripted simulator on real τ² data against real human traces (needs ../shared).

use std::sync::Arc;

use ppol::fitness::features::FeatureSet;
use ppol::fitness::reference::HumanReference;
use ppol::simulate::episode::record::EpisodeStatus;
use ppol::simulate::episode::runner::{Backend, Tau2Runner};
use ppol::simulate::episode::EpisodeRunner;
use ppol::simulate::tau2::Domain;

use crate::util::{run_ppol, shared};

#[test]
fn episodes_score_and_export_on_the_demo_domain() {
    let tmp = tempfile::tempdir().unwrap();
    let eps = tmp.path().join("eps.jsonl");
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--domain",
        "demo",
        "--tasks",
        "0,1,2,3,4,5,6,7",
        "--trials",
        "2",
        "--quiet",
        "-o",
        eps.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("wrote 16 episodes"), "{err}");
    assert!(err.contains("pass^1=1.000  pass^2=1.000"), "{err}");
    let (code, out, err) = run_ppol(&[
        "score",
        "--human",
        "fitness/demo/human.jsonl",
        "--baseline",
        "fitness/demo/baseline.jsonl",
        eps.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["counts"]["n_dialogues"], 16);
    let sft = tmp.path().join("sft.jsonl");
    let (code, _, err) = run_ppol(&[
        "export",
        "sft",
        eps.to_str().unwrap(),
        "-o",
        sft.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let first: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&sft)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first["messages"][0]["role"], "system");
    assert!(first["tools"].as_array().unwrap().len() >= 5);
    assert!(first["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["tool_calls"].is_array()));
    // a persona file restricts and multiplies the episodes
    let personas = tmp.path().join("p.jsonl");
    std::fs::write(&personas, "{\"task_id\": \"0\", \"persona_id\": \"brief\", \"axis_placement\": {\"terse\": true}, \"text\": \"Type short messages.\"}\n{\"persona_id\": \"any\", \"axis_placement\": {\"frustrated\": true}, \"text\": \"You are annoyed.\"}\n").unwrap();
    let eps2 = tmp.path().join("eps2.jsonl");
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--domain",
        "demo",
        "--tasks",
        "0,1",
        "--personas",
        personas.to_str().unwrap(),
        "--quiet",
        "-o",
        eps2.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("wrote 3 episodes"), "{err}");
    // a bad persona line is named
    std::fs::write(&personas, "{\"persona_id\": 3}\n").unwrap();
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--domain",
        "demo",
        "--personas",
        personas.to_str().unwrap(),
        "--quiet",
        "-o",
        eps2.to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("p.jsonl: line 1: not a persona record"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn shared_scripted_episodes_on_tau2_and_auc_against_real_humans() {
    let Some(shared) = shared() else { return };
    let data = shared.join("tau2");
    for (name, min_success) in [("retail", 0.9), ("airline", 0.9)] {
        let domain = Arc::new(Domain::load(name, Some(&data)).unwrap());
        let runner = Tau2Runner::new(domain.clone(), Backend::Scripted, 30);
        let ids: Vec<String> = domain.tasks.iter().map(|t| t.id.clone()).collect();
        let eps = futures::future::join_all(
            ids.iter()
                .enumerate()
                .map(|(i, id)| runner.run(id, None, 0, i as u64)),
        )
        .await;
        assert!(eps.iter().all(|e| e.status == EpisodeStatus::Ok));
        let success = eps.iter().filter(|e| e.success()).count() as f64 / eps.len() as f64;
        eprintln!("{name}: {} tasks, scripted success {success:.3}", eps.len());
        assert!(success >= min_success, "{name}: success {success}");
        if name == "airline" {
            let humans = ppol::fitness::traces::load(
                &shared.join("human/tau_usi_airline_sample.jsonl"),
                &Default::default(),
            )
            .unwrap();
            let reference = HumanReference::build(&humans, FeatureSet::Ppol011, vec![]).unwrap();
            let base: Vec<_> = eps.iter().map(|e| e.to_dialogue()).collect();
            let d = ppol::fitness::score::train_discriminator(
                &reference,
                &base,
                &Default::default(),
                5,
            )
            .unwrap();
            let auc = d.training.grouped_auc.as_ref().unwrap().mean;
            eprintln!("grouped held-out AUC, τ-USI humans vs scripted plain simulator: {auc:.3}");
            assert!(auc >= 0.9, "AUC {auc}");
        }
    }
}

fn llm_toml(dir: &std::path::Path, base_url: &str, extra: &str) -> std::path::PathBuf {
    let p = dir.join("llm.toml");
    std::fs::write(
        &p,
        format!("max_concurrency = 64\nmax_retries = 4\nbackoff_base_ms = 1\nbackoff_max_ms = 10\n{extra}\n[default]\nprovider = \"openai\"\nmodel = \"mock\"\nbase_url = \"{base_url}\"\ntimeout_s = 5\n"),
    )
    .unwrap();
    p
}

/// The mock plays both sides: the agent (requests with tools) answers and asks "anything else",
/// the user simulator (no tools) states a request, then stops.
///
/// `under_load`: the first 12 requests fail (6 × 429, 6 × 500) and every answer takes 20 ms.
/// Without the delay the mock can answer each request before the next one arrives, and
/// whether two were ever in flight at once depends on scheduling (seen: 1 run in 40 with
/// two copies of the test side by side).
fn two_sided_script(under_load: bool) -> ppol::testing::mock_server::MockScript {
    use ppol::testing::mock_server::{MockReply, MockRule, MockScript};
    let delay_ms = if under_load { 20 } else { 0 };
    let mut rules = Vec::new();
    if under_load {
        rules.push(MockRule {
            times: Some(6),
            reply: MockReply::status(429),
            ..Default::default()
        });
        rules.push(MockRule {
            times: Some(6),
            reply: MockReply::status(500),
            ..Default::default()
        });
    }
    rules.push(MockRule {
        has_tools: Some(true),
        reply: MockReply::text(
            "I have taken care of that. Is there anything else I can help with?",
        )
        .with_usage(10, 10)
        .with_delay(delay_ms),
        ..Default::default()
    });
    rules.push(MockRule {
        contains: Some("anything else".into()),
        reply: MockReply::text("no that's all, thanks ###STOP###")
            .with_usage(10, 10)
            .with_delay(delay_ms),
        ..Default::default()
    });
    MockScript {
        rules,
        default: MockReply::text("hi, i need to cancel my order")
            .with_usage(10, 10)
            .with_delay(delay_ms),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_concurrent_llm_episodes_against_the_mock() {
    let server = ppol::testing::mock_server::serve(two_sided_script(true))
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = llm_toml(tmp.path(), &server.base_url(), "");
    let out = tmp.path().join("eps.jsonl");
    let (cfg_s, out_s) = (cfg.display().to_string(), out.display().to_string());
    let (code, _, err) = tokio::task::spawn_blocking(move || {
        run_ppol(&[
            "episodes",
            "--domain",
            "demo",
            "--tasks",
            "0,1,2,3,4,5,6,7",
            "--trials",
            "25",
            "--llm",
            &cfg_s,
            "--concurrency",
            "200",
            "--quiet",
            "-o",
            &out_s,
        ])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("wrote 200 episodes"), "{err}");
    assert!(err.contains("(200 ok, 0 failed)"), "{err}");
    assert!(err.contains("retries"), "accounting printed: {err}");
    let eps = ppol::simulate::episode::record::load_episodes(&out).unwrap();
    assert!(eps
        .iter()
        .all(|e| e.termination == ppol::simulate::episode::Termination::UserStop));
    assert!(eps.iter().all(|e| e
        .conversation
        .iter()
        .filter(|t| t.role == ppol::dialogue::Role::User)
        .count()
        == 2));
    // 3 calls per episode plus the 12 injected errors, all answered by the mock
    assert!(server.requests() >= 600 + 12, "{}", server.requests());
    assert!(server.max_in_flight() > 1, "{}", server.max_in_flight());
}

#[tokio::test(flavor = "multi_thread")]
async fn llm_budget_stops_cleanly_and_cache_hits_skip_the_server() {
    let server = ppol::testing::mock_server::serve(two_sided_script(false))
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // The mock reports 10+10 tokens per call, but each call reserves its worst case first
    // (its prompt at a token per byte, plus the role's max_tokens, ~1-3k tokens here): a cap
    // of 6000 lets a few episodes finish and refuses the rest once what was spent plus the
    // next call's worst case would pass it.
    let cfg = llm_toml(
        tmp.path(),
        &server.base_url(),
        "[budget]\nmax_tokens = 6000\n",
    );
    let out = tmp.path().join("eps.jsonl");
    let (cfg_s, out_s) = (cfg.display().to_string(), out.display().to_string());
    let (code, _, err) = tokio::task::spawn_blocking(move || {
        run_ppol(&[
            "episodes",
            "--domain",
            "demo",
            "--tasks",
            "0,1,2,3,4,5,6,7",
            "--trials",
            "5",
            "--llm",
            &cfg_s,
            "--concurrency",
            "1",
            "--quiet",
            "-o",
            &out_s,
        ])
    })
    .await
    .unwrap();
    // Episodes the budget did not allow are failed: the work is partial (exit 1), and the
    // output holds every planned episode.
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("budget exhausted"), "{err}");
    assert!(err.contains("of 40 episodes failed"), "{err}");
    let eps = ppol::simulate::episode::record::load_episodes(&out).unwrap();
    assert_eq!(eps.len(), 40, "every planned episode is recorded");
    assert!(eps.iter().any(|e| e.status == EpisodeStatus::Ok));
    assert!(eps
        .iter()
        .any(|e| e.error.as_deref().is_some_and(|x| x.contains("budget"))));

    // cache: a second identical run is answered from disk
    let cache = tmp.path().join("cache");
    let cfg = llm_toml(
        tmp.path(),
        &server.base_url(),
        &format!("cache_dir = \"{}\"", cache.display()),
    );
    let cfg_s = cfg.display().to_string();
    let run = |o: String, c: String| {
        move || {
            run_ppol(&[
                "episodes", "--domain", "demo", "--tasks", "0", "--llm", &c, "--quiet", "-o", &o,
            ])
        }
    };
    let (code, _, err) = tokio::task::spawn_blocking(run(
        tmp.path().join("a.jsonl").display().to_string(),
        cfg_s.clone(),
    ))
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let before = server.requests();
    let (code, _, err) =
        tokio::task::spawn_blocking(run(tmp.path().join("b.jsonl").display().to_string(), cfg_s))
            .await
            .unwrap();
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        server.requests(),
        before,
        "cache hits must not reach the server"
    );
    let a = std::fs::read_to_string(tmp.path().join("a.jsonl")).unwrap();
    let b = std::fs::read_to_string(tmp.path().join("b.jsonl")).unwrap();
    let conv = |s: &str| {
        serde_json::from_str::<serde_json::Value>(s.lines().next().unwrap()).unwrap()
            ["conversation"]
            .clone()
    };
    assert_eq!(conv(&a), conv(&b));
}

#[test]
fn export_keeps_held_out_personas_out_of_training_and_summarises_clusters() {
    let tmp = tempfile::tempdir().unwrap();
    let personas = tmp.path().join("p.jsonl");
    let (code, _, err) = run_ppol(&[
        "generate",
        "--program",
        "seeds/offline_templates.py",
        "--domain",
        "demo",
        "--split",
        "0,1,2,3,4,5,6,7",
        "-n",
        "6",
        "-o",
        personas.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let eps = tmp.path().join("e.jsonl");
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--domain",
        "demo",
        "--personas",
        personas.to_str().unwrap(),
        "--trials",
        "2",
        "--quiet",
        "-o",
        eps.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let train = tmp.path().join("train.jsonl");
    let (code, out, err) = run_ppol(&[
        "export",
        "sft",
        eps.to_str().unwrap(),
        "-o",
        train.to_str().unwrap(),
        "--all",
        "--heldout-fraction",
        "0.3",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("persona cluster"), "{out}");
    assert!(out.contains("pass^2="), "{out}");
    let ids = |p: &std::path::Path| -> std::collections::BTreeSet<String> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["metadata"]["persona_id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    let (a, b) = (ids(&train), ids(&tmp.path().join("train.heldout.jsonl")));
    assert!(!a.is_empty() && !b.is_empty());
    assert!(
        a.is_disjoint(&b),
        "a persona is on both sides: {:?}",
        a.intersection(&b).collect::<Vec<_>>()
    );
    // every episode is in exactly one of the files
    let n = |p: &std::path::Path| std::fs::read_to_string(p).unwrap().lines().count();
    assert_eq!(n(&train) + n(&tmp.path().join("train.heldout.jsonl")), 96);
}
