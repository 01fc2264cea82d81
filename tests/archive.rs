//! Program database: MAP-Elites cells, flags, cap, migration, sampling, determinism, checkpoints.

use ppol::evolve::archive::{Archive, ArchiveConfig, InspirationKind, SampleMode};
use ppol::evolve::program::{Program, ProgramId};

fn prog(id: &str, combined: f64, human: f64, coverage: f64) -> Program {
    Program::seed(id, format!("# {id}\nDIVERSITY_AXES = []\n")).with_metrics([
        ("combined", combined),
        ("human_likeness", human),
        ("coverage", coverage),
    ])
}

fn small_cfg() -> ArchiveConfig {
    ArchiveConfig {
        num_islands: 3,
        population_size: 10,
        ..ArchiveConfig::default()
    }
}

#[test]
fn defaults_match_reference() {
    let c = ArchiveConfig::default();
    assert_eq!(
        (
            c.num_islands,
            c.population_size,
            c.archive_size,
            c.migration_interval
        ),
        (5, 50, 100, 5)
    );
    assert_eq!((c.migration_rate, c.elite_selection_ratio), (0.2, 0.2));
    assert_eq!((c.exploration_ratio, c.exploitation_ratio), (0.2, 0.7));
    assert!((c.random_ratio() - 0.1).abs() < 1e-12);
    assert_eq!((c.num_top_programs, c.num_diverse_programs), (2, 2));
    assert_eq!(c.feature_dimensions, ["human_likeness", "coverage"]);
    assert_eq!(
        (c.feature_bins, c.fitness_metric.as_str()),
        (10, "combined")
    );
}

#[test]
fn config_errors_name_the_key() {
    let bad = ArchiveConfig {
        migration_rate: 1.5,
        ..ArchiveConfig::default()
    };
    let e = Archive::new(bad, 0).unwrap_err().to_string();
    assert!(e.contains("archive.migration_rate"), "{e}");
    // shares summing past 1 are scaled down to sum to 1 (no random draws), not refused
    let scaled = ArchiveConfig {
        exploration_ratio: 0.5,
        exploitation_ratio: 0.7,
        ..ArchiveConfig::default()
    };
    scaled.validate().unwrap();
    let (explore, exploit) = scaled.draw_ratios();
    assert!((explore - 0.5 / 1.2).abs() < 1e-12 && (exploit - 0.7 / 1.2).abs() < 1e-12);
    assert_eq!(scaled.random_ratio(), 0.0);
    assert_eq!(ArchiveConfig::default().draw_ratios(), (0.2, 0.7));
    // a migration rate of 0 is no migration, as an interval of 0 is
    let still = ArchiveConfig {
        migration_rate: 0.0,
        ..ArchiveConfig::default()
    };
    still.validate().unwrap();
    assert!(!still.migrates() && ArchiveConfig::default().migrates());
    let bad = ArchiveConfig {
        feature_dimensions: vec!["a".into(), "a".into()],
        ..ArchiveConfig::default()
    };
    assert!(bad
        .validate()
        .unwrap_err()
        .to_string()
        .contains("feature_dimensions"));
    let bad = ArchiveConfig {
        num_islands: 0,
        ..ArchiveConfig::default()
    };
    assert!(bad
        .validate()
        .unwrap_err()
        .to_string()
        .contains("num_islands"));
    // Unknown keys are rejected, missing keys take defaults.
    assert!(serde_json::from_str::<ArchiveConfig>(r#"{"num_island": 3}"#).is_err());
    // In a run configuration the section is [archive], and that is the key the error names.
    for (toml, key) in [
        ("[archive]\nnum_islands = 0\n", "archive.num_islands"),
        ("[archive]\nfeature_bins = 5000\n", "archive.feature_bins"),
        (
            "[archive]\nfitness_metric = \" \"\n",
            "archive.fitness_metric",
        ),
    ] {
        let e =
            ppol::evolve::config::RunConfig::from_toml_str(toml, std::path::Path::new("c.toml"))
                .unwrap_err()
                .to_string();
        assert!(e.contains(key) && !e.contains("database"), "{toml}: {e}");
    }
    let c: ArchiveConfig = serde_json::from_str(r#"{"feature_bins": 4}"#).unwrap();
    assert_eq!((c.feature_bins, c.num_islands), (4, 5));
}

#[test]
fn fixed_range_binning() {
    let a = Archive::new(ArchiveConfig::default(), 0).unwrap();
    assert_eq!(a.cell_of(&[0.0, 0.999]), vec![0, 9]);
    assert_eq!(a.cell_of(&[1.0, 0.25]), vec![9, 2]);
    assert_eq!(a.cell_of(&[-3.0, 7.0]), vec![0, 9]);
    assert_eq!(a.cell_of(&[0.1, 0.35]), vec![1, 3]);
}

#[test]
fn cells_elites_and_best_flags() {
    let mut a = Archive::new(small_cfg(), 1).unwrap();
    let o = a.add(prog("a", 0.5, 0.31, 0.52), 0).unwrap();
    assert!(o.new_cell && o.new_elite && o.new_best);
    assert_eq!(o.cell, vec![3, 5]);

    // Same cell, worse: kept in the population, not an elite, not best.
    let o = a.add(prog("b", 0.4, 0.33, 0.55), 0).unwrap();
    assert!(!o.new_cell && !o.new_elite && !o.new_best);
    assert_eq!(o.displaced, None);

    // Same cell, better: displaces the elite, new best.
    let o = a.add(prog("c", 0.6, 0.35, 0.58), 0).unwrap();
    assert!(!o.new_cell && o.new_elite && o.new_best);
    assert_eq!(o.displaced, Some(ProgramId::from("a")));

    // New cell but worse than the best.
    let o = a.add(prog("d", 0.2, 0.9, 0.1), 0).unwrap();
    assert!(o.new_cell && o.new_elite && !o.new_best);

    // The same cell on another island is a different cell; equal fitness is not a new best.
    let o = a.add(prog("e", 0.6, 0.31, 0.52), 1).unwrap();
    assert!(o.new_cell && o.new_elite && !o.new_best);

    assert_eq!(a.best().unwrap().id.as_str(), "c");
    assert_eq!(a.len(), 5);
    let elites: Vec<_> = a
        .island_elites(0)
        .into_iter()
        .map(|(c, p)| (c, p.id.0.clone()))
        .collect();
    assert_eq!(
        elites,
        vec![(vec![3, 5], "c".to_string()), (vec![9, 1], "d".to_string())]
    );
    let s = &a.island_stats()[0];
    assert_eq!((s.population, s.occupied_cells), (4, 2));
    assert_eq!(s.best.as_ref().unwrap().as_str(), "c");
    assert_eq!(a.get(&"b".into()).unwrap().descriptors, vec![0.33, 0.55]);
    assert_eq!(a.get(&"b".into()).unwrap().island, 0);
}

#[test]
fn add_rejects_bad_programs() {
    let mut a = Archive::new(small_cfg(), 1).unwrap();
    a.add(prog("a", 0.5, 0.3, 0.5), 0).unwrap();
    let e = a.add(prog("a", 0.7, 0.3, 0.5), 0).unwrap_err().to_string();
    assert!(e.contains("already"), "{e}");
    let e = a.add(prog("z", 0.7, 0.3, 0.5), 3).unwrap_err().to_string();
    assert!(e.contains("island 3"), "{e}");
    let p = Program::seed("m", "x = 1").with_metrics([("combined", 0.5), ("human_likeness", 0.5)]);
    let e = a.add(p, 0).unwrap_err().to_string();
    assert!(e.contains("'coverage'"), "{e}");
    let p = prog("n", f64::NAN, 0.5, 0.5);
    let e = a.add(p, 0).unwrap_err().to_string();
    assert!(e.contains("'combined'"), "{e}");
    assert_eq!(a.len(), 1);
}

#[test]
fn custom_descriptor_names() {
    let cfg = ArchiveConfig {
        feature_dimensions: vec!["terse_share".into()],
        feature_bins: 4,
        fitness_metric: "score".into(),
        ..ArchiveConfig::default()
    };
    let mut a = Archive::new(cfg, 0).unwrap();
    let p = Program::seed("x", "x=1").with_metrics([("score", 0.1), ("terse_share", 0.6)]);
    assert_eq!(a.add(p, 2).unwrap().cell, vec![2]);
}

#[test]
fn population_cap_drops_worst_non_elite() {
    let cfg = ArchiveConfig {
        num_islands: 2,
        population_size: 3,
        archive_size: 1,
        ..ArchiveConfig::default()
    };
    let mut a = Archive::new(cfg, 0).unwrap();
    // All in one cell: only the cell elite and the best are protected.
    for (i, f) in [0.5, 0.3, 0.4, 0.2].iter().enumerate() {
        let o = a.add(prog(&format!("p{i}"), *f, 0.5, 0.5), 0).unwrap();
        if i < 3 {
            assert!(o.evicted.is_empty());
        } else {
            // p3 (0.2) is the worst non-elite: it is itself evicted.
            assert_eq!(o.evicted, vec![ProgramId::from("p3")]);
        }
    }
    let o = a.add(prog("p4", 0.45, 0.5, 0.5), 0).unwrap();
    assert_eq!(o.evicted, vec![ProgramId::from("p1")]);
    // A new cell elite with low fitness is protected; the worst non-elite goes.
    let o = a.add(prog("p5", 0.01, 0.05, 0.95), 0).unwrap();
    assert!(o.new_cell);
    assert_eq!(o.evicted, vec![ProgramId::from("p2")]);
    let ids: Vec<_> = a
        .island_programs(0)
        .iter()
        .map(|p| p.id.0.clone())
        .collect();
    assert_eq!(ids, ["p0", "p4", "p5"]);
    assert_eq!(a.evicted_total(), 3);
    assert!(a.get(&"p1".into()).is_none());
    // Other islands are untouched by island 0's cap.
    a.add(prog("q", 0.1, 0.5, 0.5), 1).unwrap();
    assert_eq!(a.island_programs(1).len(), 1);
}

#[test]
fn migration_ring_copies_top_share() {
    let cfg = ArchiveConfig {
        num_islands: 3,
        population_size: 20,
        migration_interval: 5,
        migration_rate: 0.2,
        ..ArchiveConfig::default()
    };
    let mut a = Archive::new(cfg, 0).unwrap();
    for isl in 0..3 {
        for k in 0..10 {
            let f = 0.1 * isl as f64 + 0.01 * k as f64;
            a.add(prog(&format!("i{isl}k{k}"), f, 0.05 * k as f64, 0.3), isl)
                .unwrap();
        }
    }
    assert!(a.maybe_migrate(0).is_empty());
    assert!(a.maybe_migrate(3).is_empty());
    let m = a.maybe_migrate(5);
    // floor(0.2 * 10) = 2 per island, ring 0→1→2→0.
    assert_eq!(m.len(), 6);
    for mig in &m {
        assert_eq!(mig.to_island, (mig.from_island + 1) % 3);
        let copy = a.get(&mig.copy).unwrap();
        let src = a.get(&mig.source).unwrap();
        assert_eq!(copy.island, mig.to_island);
        assert_eq!(copy.code, src.code);
        assert_eq!(copy.migrated_from.as_ref(), Some(&mig.source));
    }
    let from0: Vec<_> = m
        .iter()
        .filter(|x| x.from_island == 0)
        .map(|x| x.source.0.clone())
        .collect();
    assert_eq!(from0, ["i0k9", "i0k8"]);
    assert_eq!(m[0].copy.as_str(), "i0k9@1");
    // Idempotent per generation; the next round skips code already present.
    assert!(a.maybe_migrate(5).is_empty());
    let m2 = a.maybe_migrate(10);
    assert!(m2.iter().all(|x| {
        let copy = a.get(&x.copy).unwrap();
        a.island_programs(x.to_island)
            .iter()
            .filter(|p| p.code_hash == copy.code_hash)
            .count()
            == 1
    }));
    // Migrants never beat the best they copy.
    assert_eq!(a.best().unwrap().id.as_str(), "i2k9");
}

#[test]
fn next_island_round_robin() {
    let mut a = Archive::new(small_cfg(), 0).unwrap();
    let v: Vec<usize> = (0..7).map(|_| a.next_island()).collect();
    assert_eq!(v, [0, 1, 2, 0, 1, 2, 0]);
}

fn populated(seed: u64) -> Archive {
    let mut a = Archive::new(small_cfg(), seed).unwrap();
    for isl in 0..3 {
        for k in 0..8 {
            let f = ((isl * 8 + k) as f64 * 0.37).fract();
            let h = ((k as f64) * 0.13).fract();
            let c = ((k as f64) * 0.29 + 0.05).fract();
            a.add(prog(&format!("i{isl}k{k}"), f, h, c), isl).unwrap();
        }
    }
    a
}

#[test]
fn parent_sampling_proportions() {
    let mut a = populated(7);
    let n = 20_000;
    let mut counts = [0usize; 3];
    for _ in 0..n {
        let s = a.sample_parent(1).unwrap();
        counts[match s.mode {
            SampleMode::Exploration => 0,
            SampleMode::Exploitation => 1,
            SampleMode::Random => 2,
        }] += 1;
        assert!(!s.fell_back);
        if s.mode != SampleMode::Random {
            assert_eq!(s.program.island, 1);
        }
    }
    let frac: Vec<f64> = counts.iter().map(|c| *c as f64 / n as f64).collect();
    for (got, want) in frac.iter().zip([0.2, 0.7, 0.1]) {
        assert!((got - want).abs() < 0.015, "{frac:?}");
    }
}

#[test]
fn exploitation_prefers_elites_and_empty_island_falls_back() {
    let mut a = Archive::new(small_cfg(), 3).unwrap();
    // Island 0: a single cell with one elite and worse programs.
    a.add(prog("top", 0.9, 0.5, 0.5), 0).unwrap();
    for k in 0..9 {
        a.add(prog(&format!("w{k}"), 0.1, 0.5, 0.5), 0).unwrap();
    }
    let mut top = 0;
    let mut exploit = 0;
    for _ in 0..2000 {
        let s = a.sample_parent(0).unwrap();
        if s.mode == SampleMode::Exploitation {
            exploit += 1;
            top += usize::from(s.program.id.as_str() == "top");
        }
    }
    // Pool = the cell elite ∪ the top 20% (2 of 10): "top" and the best of the rest.
    assert!(exploit > 1000);
    let share = top as f64 / exploit as f64;
    assert!((share - 0.5).abs() < 0.06, "{share}");
    // An empty island falls back to the whole archive.
    let s = a.sample_parent(2).unwrap();
    assert!(s.fell_back || s.mode == SampleMode::Random);
    assert!(Archive::new(small_cfg(), 0)
        .unwrap()
        .sample_parent(0)
        .is_err());
}

#[test]
fn inspirations_top_and_diverse() {
    let mut a = populated(11);
    let parent = a.get(&"i0k3".into()).unwrap().clone();
    let ins = a.inspirations(&parent, 0).unwrap();
    let top: Vec<_> = ins
        .iter()
        .filter(|i| i.kind == InspirationKind::Top)
        .collect();
    let diverse: Vec<_> = ins
        .iter()
        .filter(|i| i.kind == InspirationKind::Diverse)
        .collect();
    assert_eq!((top.len(), diverse.len()), (2, 2));
    assert!(ins.iter().all(|i| i.program.id != parent.id));
    let mut island0: Vec<_> = a
        .island_programs(0)
        .into_iter()
        .filter(|p| p.id != parent.id)
        .collect();
    island0.sort_by(|x, y| y.metrics["combined"].total_cmp(&x.metrics["combined"]));
    assert_eq!(top[0].program.id, island0[0].id);
    assert_eq!(top[1].program.id, island0[1].id);
    let pcell = a.cell_of(&parent.descriptors);
    for d in diverse {
        assert_ne!(a.cell_of(&d.program.descriptors), pcell);
        assert!(top.iter().all(|t| t.program.id != d.program.id));
    }
}

fn script(a: &mut Archive, steps: usize, tag: &str) -> Vec<String> {
    let mut log = Vec::new();
    for step in 0..steps {
        let island = a.next_island();
        let parent = a.sample_parent(island).unwrap();
        let ins = a.inspirations(&parent.program, island).unwrap();
        log.push(format!(
            "{island}:{:?}:{}:{}",
            parent.mode,
            parent.program.id,
            ins.iter()
                .map(|i| i.program.id.0.clone())
                .collect::<Vec<_>>()
                .join("+")
        ));
        let f = (parent.program.metrics["combined"] + 0.173 * (step as f64 + 1.0)).fract();
        let child = Program::child(
            &parent.program,
            format!("{tag}{step}"),
            format!("{}# step {step}\n", parent.program.code),
            step as u64,
            ppol::evolve::program::MutationInfo::new(
                ppol::evolve::program::MutationKind::Diff,
                "x",
            ),
        )
        .with_metrics([
            ("combined", f),
            ("human_likeness", (f * 7.0).fract()),
            ("coverage", (f * 3.0).fract()),
        ]);
        let o = a.add(child, island).unwrap();
        log.push(format!("{o:?}"));
        for m in a.maybe_migrate(step as u64) {
            log.push(format!("{m:?}"));
        }
    }
    log
}

#[test]
fn deterministic_given_seed() {
    let mut a = populated(5);
    let mut b = populated(5);
    let mut c = populated(6);
    let la = script(&mut a, 60, "c");
    assert_eq!(la, script(&mut b, 60, "c"));
    assert_ne!(la, script(&mut c, 60, "c"));
    assert_eq!(a.to_json(), b.to_json());
}

#[test]
fn checkpoint_round_trip_continues_identically() {
    let mut uninterrupted = populated(9);
    let mut first = script(&mut uninterrupted, 25, "c");
    first.extend(script(&mut uninterrupted, 40, "d"));

    let mut resumed = populated(9);
    let mut log = script(&mut resumed, 25, "c");
    let json = resumed.to_json();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("archive.json");
    resumed.save(&path).unwrap();
    drop(resumed);
    let mut reloaded = Archive::load(&path).unwrap();
    assert_eq!(reloaded.to_json(), json);
    log.extend(script(&mut reloaded, 40, "d"));
    assert_eq!(log, first);
    assert_eq!(reloaded.to_json(), uninterrupted.to_json());
    assert!(json.contains("\"format\": \"ppol-archive/1\""));
    assert!(json.contains("\"rng_word_pos\""));
}

#[test]
fn checkpoint_rejects_inconsistent_state() {
    let a = populated(1);
    let json = a.to_json();
    let broken = json.replacen("\"i0k0\"", "\"nope\"", 1);
    assert!(Archive::from_json(&broken).is_err());
    let wrong = json.replace("ppol-archive/1", "ppol-archive/0");
    assert!(Archive::from_json(&wrong)
        .unwrap_err()
        .to_string()
        .contains("format"));
    assert!(Archive::from_json("{").is_err());
}

#[test]
fn failures_and_children_per_parent() {
    use ppol::evolve::mutation::{ChildFailure, DiffError, FailureKind};
    use ppol::evolve::program::{MutationInfo, MutationKind};
    let mut a = Archive::new(small_cfg(), 2).unwrap();
    a.add(prog("p", 0.5, 0.5, 0.5), 0).unwrap();
    let pid = ProgramId::from("p");
    a.record_failure(
        &pid,
        ppol::evolve::mutation::failure_from_diff_error(&DiffError::NoBlocks),
    );
    a.record_failure(
        &pid,
        ChildFailure::new(FailureKind::Syntax, "line 3: invalid syntax"),
    );
    a.record_failure(
        &"unknown".into(),
        ChildFailure::new(FailureKind::Syntax, "x"),
    );
    assert_eq!(a.consecutive_failures(&pid), 2);
    assert_eq!(a.recent_failures(&pid)[1].message, "line 3: invalid syntax");
    assert!(a.recent_failures(&"unknown".into()).is_empty());

    let parent = a.get(&pid).unwrap().clone();
    for k in 0..3 {
        let c = Program::child(
            &parent,
            format!("c{k}"),
            format!("x = {k}\n"),
            k,
            MutationInfo::new(MutationKind::Diff, "d"),
        )
        .with_metrics([
            ("combined", 0.1),
            ("human_likeness", 0.1 * k as f64),
            ("coverage", 0.2),
        ]);
        a.add(c, 0).unwrap();
    }
    // A success resets the consecutive count; the history is kept for the prompt.
    assert_eq!(a.consecutive_failures(&pid), 0);
    a.record_failure(&pid, ChildFailure::new(FailureKind::Sandbox, "timeout"));
    assert_eq!(a.consecutive_failures(&pid), 1);
    assert_eq!(a.recent_failures(&pid).len(), 3);
    for _ in 0..10 {
        a.record_failure(&pid, ChildFailure::new(FailureKind::Sandbox, "again"));
    }
    assert_eq!(
        a.recent_failures(&pid).len(),
        ppol::evolve::archive::MAX_FAILURES_PER_PARENT
    );
    let kids: Vec<_> = a
        .recent_children(&pid, 2)
        .iter()
        .map(|p| p.id.0.clone())
        .collect();
    assert_eq!(kids, ["c1", "c2"]);
    // Failures survive a checkpoint.
    let b = Archive::from_json(&a.to_json()).unwrap();
    assert_eq!(b.recent_failures(&pid), a.recent_failures(&pid));
    assert_eq!(b.consecutive_failures(&pid), a.consecutive_failures(&pid));
}

#[test]
fn add_recomputes_code_hash() {
    let mut a = Archive::new(small_cfg(), 2).unwrap();
    let mut p = prog("p", 0.5, 0.5, 0.5);
    p.code = "changed after construction\n".into();
    a.add(p, 0).unwrap();
    assert_eq!(
        a.get(&"p".into()).unwrap().code_hash,
        ppol::evolve::program::code_hash("changed after construction\n")
    );
    assert!(a
        .find_code(&ppol::evolve::program::code_hash(
            "changed after construction\n"
        ))
        .is_some());
}
