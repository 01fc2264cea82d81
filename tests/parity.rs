//! Parity with the reference package ppol 0.1.1 on its own outputs in ../shared/parity
//! (skipped when ../shared is absent; required in the ../shared step of .ci/run).

use std::path::Path;

use ppol::fitness::coverage::{dice, CoverageOptions, HumanCloud};
use ppol::fitness::features::{fingerprint_many, FeatureSet, Fingerprint};
use ppol::fitness::reference::HumanReference;
use ppol::fitness::traces::{self, LoadOptions};

use crate::util::shared;

const TOL: f64 = 1e-9;

fn expected_features(path: &Path) -> Vec<(String, Fingerprint)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let f = Fingerprint::from_map(v["features"].as_object().unwrap()).unwrap();
            (v["id"].as_str().unwrap().to_string(), f)
        })
        .collect()
}

fn check_features(dialogues: &Path, expected: &Path) -> usize {
    let ds = traces::load(dialogues, &LoadOptions::default()).unwrap();
    let want = expected_features(expected);
    assert_eq!(ds.len(), want.len(), "{}", dialogues.display());
    let got = fingerprint_many(&ds, FeatureSet::Ppol011);
    for ((d, g), (id, w)) in ds.iter().zip(&got).zip(&want) {
        assert_eq!(&d.id, id);
        for (j, (a, b)) in g.0.iter().zip(w.0.iter()).enumerate() {
            assert!(
                (a - b).abs() <= TOL,
                "{}: dialogue {id}: feature {} = {a}, reference {b}",
                dialogues.display(),
                ppol::fitness::features::FEATURE_NAMES[j]
            );
        }
    }
    ds.len()
}

#[test]
fn shared_parity_features_every_file() {
    let Some(shared) = shared() else { return };
    let p = shared.join("parity");
    let mut n = 0;
    for name in [
        "edge_cases",
        "synthetic_baseline",
        "synthetic_candidate",
        "synthetic_human",
    ] {
        n += check_features(
            &p.join(format!("{name}.jsonl")),
            &p.join(format!("{name}.ppol-0.1.1.features.jsonl")),
        );
    }
    n += check_features(
        &shared.join("human/tau_usi_airline_sample.jsonl"),
        &p.join("tau_usi_airline_sample.ppol-0.1.1.features.jsonl"),
    );
    assert_eq!(n, 6 + 40 + 20 + 40 + 15);
}

fn check_coverage(standardize: bool, expected: &str) {
    let Some(shared) = shared() else { return };
    let p = shared.join("parity");
    let want: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(p.join(expected)).unwrap()).unwrap();
    let humans = traces::load(&p.join("synthetic_human.jsonl"), &LoadOptions::default()).unwrap();
    let reference = HumanReference::build(&humans, FeatureSet::Ppol011, vec![]).unwrap();
    assert_eq!(
        reference.n_dialogues as u64,
        want["n_human_dialogues_in_mean"].as_u64().unwrap()
    );
    let opts = CoverageOptions {
        standardize,
        n_clusters: 0,
        seed: 0,
    };
    let cloud = HumanCloud::new(&reference, opts).unwrap();
    assert_eq!(cloud.len() as u64, want["n_human_points"].as_u64().unwrap());
    let close = |a: f64, b: &serde_json::Value, what: &str| {
        let b = b.as_f64().unwrap();
        assert!(
            (a - b).abs() <= TOL,
            "{expected}: {what} = {a}, reference {b}"
        );
    };
    close(cloud.d_ref, &want["d_ref"], "d_ref");
    let cands = traces::load(
        &p.join("synthetic_candidate.jsonl"),
        &LoadOptions::default(),
    )
    .unwrap();
    let fps = fingerprint_many(&cands, FeatureSet::Ppol011);
    let points: Vec<(String, Fingerprint)> = cands
        .iter()
        .zip(&fps)
        .map(|(d, f)| (d.group_key().to_string(), *f))
        .collect();
    let grouped = cloud.chamfer_by_group(&points);
    let groups = want["groups"].as_object().unwrap();
    assert_eq!(grouped.groups.len(), groups.len());
    for (g, c) in &grouped.groups {
        let w = &groups[g];
        assert_eq!(c.n as u64, w["n"].as_u64().unwrap());
        close(
            c.coverage,
            &w["chamfer_coverage"],
            &format!("{g} chamfer_coverage"),
        );
        close(
            c.cover_humans,
            &w["diag_cover_humans"],
            &format!("{g} diag_cover_humans"),
        );
        close(
            c.stay_on_manifold,
            &w["diag_stay_on_manifold"],
            &format!("{g} diag_stay_on_manifold"),
        );
    }
    close(
        grouped.mean,
        &want["intra_set_diversity"],
        "intra_set_diversity",
    );
    let d = dice(&reference.mean_fingerprint(), &fps);
    let wd = &want["dice_alignment"];
    close(d.D1, &wd["D1"], "dice D1");
    close(d.D2, &wd["D2"], "dice D2");
    close(d.D3, &wd["D3"], "dice D3");
    close(d.D4, &wd["D4"], "dice D4");
    close(d.overall, &wd["overall"], "dice overall");
}

#[test]
fn shared_parity_coverage_standardized() {
    check_coverage(true, "synthetic_candidate.ppol-0.1.1.coverage.json");
}

#[test]
fn shared_parity_coverage_raw() {
    check_coverage(false, "synthetic_candidate.ppol-0.1.1.coverage-raw.json");
}
