//! The population objective and the audit's independence (issue #42): `[fitness] objective =
//! "population"` runs from its own seed and says when the humans are too few; `ppol eval
//! --human FILE` leaves out the humans the run searched on; `ppol bench recover` plants a
//! population and audits base, seed and evolved against humans the search never saw.

use serde_json::Value;

use crate::util::{root, run_ppol};

/// A small run: 3 personas of 2 tasks per candidate, a light audit.
const LIGHT: &str =
    "[fitness]\ncurriculum = false\nn_personas = 3\nbatch_size = 2\naudit_bootstrap = 20\n";

fn demo_humans() -> String {
    root()
        .join("fitness/demo/human.jsonl")
        .to_string_lossy()
        .into_owned()
}

fn evolve(dir: &std::path::Path, cfg: &str, extra: &[&str]) -> (i32, String) {
    let cfg_path = dir.join("cfg.toml");
    std::fs::write(&cfg_path, cfg).unwrap();
    let out = dir.join("run");
    let mut args = vec![
        "evolve",
        "--config",
        cfg_path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--iterations",
        "2",
        "--seed",
        "3",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let (code, _, err) = run_ppol(&args);
    (code, err)
}

#[test]
fn eval_with_the_runs_own_humans_leaves_them_out_and_says_how_many() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, err) = evolve(tmp.path(), LIGHT, &["--human", &demo_humans()]);
    assert_eq!(code, 0, "{err}");
    let run = tmp.path().join("run");
    let seen = std::fs::read_to_string(run.join("human_seen.sha256")).unwrap();
    let n_seen = seen.lines().count();
    let total = std::fs::read_to_string(demo_humans())
        .unwrap()
        .lines()
        .count();
    let held = std::fs::read_to_string(run.join("human_heldout.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(
        n_seen + held,
        total,
        "every human is searched on or held out"
    );
    let (code, out, err) = run_ppol(&[
        "eval",
        run.to_str().unwrap(),
        "--human",
        &demo_humans(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let sources = v["human_source"].to_string();
    assert!(
        sources.contains(&format!("{n_seen} of the {total} given dialogues left out")),
        "{sources}"
    );
    let human_row = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "human")
        .unwrap();
    assert_eq!(human_row["n_dialogues"].as_u64().unwrap() as usize, held);
}

#[test]
fn the_population_objective_runs_from_its_own_seed_and_refuses_too_few_humans() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = format!("{LIGHT}objective = \"population\"\n");
    let (code, err) = evolve(tmp.path(), &cfg, &[]);
    assert_eq!(code, 0, "{err}");
    let run = tmp.path().join("run");
    let best = std::fs::read_to_string(run.join("best/program.py")).unwrap();
    assert!(
        best.contains("PLACEMENT_WEIGHTS") && best.contains("cooperative"),
        "population seed"
    );
    let log = std::fs::read_to_string(run.join("log.jsonl")).unwrap();
    let hls: Vec<f64> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "candidate_evaluated")
        .map(|e| e["metrics"]["human_likeness"].as_f64().unwrap())
        .collect();
    assert!(!hls.is_empty());
    assert!(hls.iter().all(|h| (0.0..=1.0).contains(h)), "{hls:?}");

    // five humans: the objective says its minimum and the counts, and nothing is scored
    let few = tmp.path().join("few.jsonl");
    let text: String = std::fs::read_to_string(demo_humans())
        .unwrap()
        .lines()
        .take(5)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&few, text).unwrap();
    let dir2 = tmp.path().join("second");
    std::fs::create_dir_all(&dir2).unwrap();
    let cfg = "[run]\nhuman_holdout = 0.0\n[fitness]\nobjective = \"population\"\n";
    let (code, err) = evolve(&dir2, cfg, &["--human", few.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("population objective")
            && err.contains("at least 10")
            && err.contains("has 5"),
        "{err}"
    );
}

#[test]
fn bench_recover_plants_humans_and_audits_every_row() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("b");
    // a light audit: every resample refits, and a debug build is slow
    let cfg = tmp.path().join("light.toml");
    std::fs::write(
        &cfg,
        LIGHT.replace("audit_bootstrap = 20", "audit_bootstrap = 5"),
    )
    .unwrap();
    let (code, stdout, err) = run_ppol(&[
        "bench",
        "recover",
        "--config",
        cfg.to_str().unwrap(),
        "--only",
        "curt-crowd",
        "--seeds",
        "1",
        "--iterations",
        "1",
        "--objectives",
        "population",
        "--train-humans",
        "20",
        "--test-humans",
        "20",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let run = &v["runs"][0];
    assert_eq!(run["objective"], "population");
    let rows = run["audit"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r[0].as_str().unwrap()).collect();
    assert_eq!(names, ["base", "seed", "evolved"]);
    // the plain simulator is far from curt users
    assert!(rows[0][1]["auc"].as_f64().unwrap() > 0.8, "{rows:?}");
    // the planted humans are the world's own episodes on its train and test tasks
    let train = std::fs::read_to_string(out.join("curt-crowd/humans-train.jsonl")).unwrap();
    assert!(train.lines().count() >= 20);
    let (code, _, err) = run_ppol(&[
        "bench",
        "recover",
        "--only",
        "nope",
        "--out",
        tmp.path().join("c").to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("no mixture 'nope'") && err.contains("curt-crowd"),
        "{err}"
    );
}
