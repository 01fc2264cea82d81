//! `ppol episodes` → `ppol score` → `ppol export sft` on the demo domain, and the offline
//! scripted simulator on real τ² data against real human traces (needs ../shared).

use std::sync::Arc;

use ppol::episode::record::EpisodeStatus;
use ppol::episode::runner::{Backend, Tau2Runner};
use ppol::evolution::evaluate::EpisodeRunner;
use ppol::features::FeatureSet;
use ppol::reference::HumanReference;
use ppol::tau2::Domain;

use crate::util::{run_ppol, shared};

#[test]
fn episodes_score_and_export_on_the_demo_domain() {
    let tmp = tempfile::tempdir().unwrap();
    let eps = tmp.path().join("eps.jsonl");
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--domain",
        "demo",
        "--trials",
        "2",
        "--quiet",
        "-o",
        eps.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("wrote 16 episodes"), "{err}");
    assert!(err.contains("pass^k: pass^1="), "{err}");
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
            let humans = ppol::traces::load(
                &shared.join("human/tau_usi_airline_sample.jsonl"),
                &Default::default(),
            )
            .unwrap();
            let reference = HumanReference::build(&humans, FeatureSet::Ppol011, vec![]).unwrap();
            let base: Vec<_> = eps.iter().map(|e| e.to_dialogue()).collect();
            let d = ppol::score::train_discriminator(&reference, &base, &Default::default(), 5)
                .unwrap();
            let auc = d.training.grouped_auc.as_ref().unwrap().mean;
            eprintln!("grouped held-out AUC, τ-USI humans vs scripted plain simulator: {auc:.3}");
            assert!(auc >= 0.9, "AUC {auc}");
        }
    }
}
