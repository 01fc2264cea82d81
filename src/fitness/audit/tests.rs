use super::*;
use crate::dialogue::{Role, Turn};

/// A dialogue of `task` whose user says `lines`.
fn dialogue(id: &str, task: Option<&str>, lines: &[String]) -> Dialogue {
    let mut turns = Vec::new();
    for l in lines {
        turns.push(Turn::new(Role::Assistant, "How can I help you today?"));
        turns.push(Turn::new(Role::User, l.clone()));
    }
    let mut d = Dialogue::new(id, turns);
    d.task_id = task.map(str::to_string);
    d
}

/// Terse, varied, human-like users: short turns, some pushback, typos.
fn humans(n: usize, tasks: usize, salt: usize) -> Vec<Dialogue> {
    let bits = [
        "hi",
        "need refund",
        "order 4471",
        "why?? thats wrong",
        "ok",
        "no thats not it",
        "hm not sure",
        "cancel it pls",
        "what fee",
        "k thx",
    ];
    (0..n)
        .map(|i| {
            let k = (i * 7 + salt * 3) % bits.len();
            let lines: Vec<String> = (0..(2 + (i + salt) % 4))
                .map(|j| bits[(k + j * 3) % bits.len()].to_string())
                .collect();
            dialogue(
                &format!("h{salt}-{i}"),
                Some(&format!("t{}", i % tasks)),
                &lines,
            )
        })
        .collect()
}

/// The plain simulator: long, polite, front-loaded.
fn simulator(n: usize, tasks: usize) -> Vec<Dialogue> {
    (0..n)
        .map(|i| {
            let lines = vec![
                format!(
                    "Hello! I would like to request a refund for my order number {}, which \
                     arrived damaged. Could you please help me with this? Thank you so much.",
                    1000 + i
                ),
                "Thank you very much for your assistance, I really appreciate it.".to_string(),
            ];
            dialogue(&format!("s{i}"), Some(&format!("t{}", i % tasks)), &lines)
        })
        .collect()
}

#[test]
fn a_plain_simulator_is_told_apart_and_humans_are_not() {
    let h = humans(30, 6, 0);
    let opts = AuditOptions {
        bootstrap: 40,
        ..AuditOptions::default()
    };
    let r = audit(
        &h,
        vec!["h".into()],
        &[
            ("sim".into(), simulator(30, 6)),
            ("more humans".into(), humans(30, 6, 1)),
        ],
        &opts,
    )
    .unwrap();
    let sim = &r.rows[0];
    let rf = sim.random_forest.unwrap();
    let lr = sim.logistic.unwrap();
    assert!(rf.auc > 0.95 && lr.auc > 0.95, "{rf} {lr}");
    assert!(rf.low <= rf.auc && rf.auc <= rf.high);
    assert_eq!((sim.folds, sim.grouped_by.as_str()), (5, "task"));
    assert!(!sim.top_features.is_empty());
    let top = &sim.top_features[0];
    assert!((top.auc - 0.5).abs() >= (sim.top_features[4].auc - 0.5).abs());
    // the control: humans against themselves
    let c = &r.control;
    assert!(c.too_few.is_none(), "{c:?}");
    let (crf, clr) = (c.random_forest.unwrap(), c.logistic.unwrap());
    assert!(crf.low <= 0.5 && 0.5 <= crf.high, "control forest {crf}");
    assert!(clr.low <= 0.5 && 0.5 <= clr.high, "control logistic {clr}");
    assert_eq!(c.n_human + c.n_candidate, 30);
    // the same result for the same seed
    let again = audit(
        &h,
        vec!["h".into()],
        &[("sim".into(), simulator(30, 6))],
        &opts,
    )
    .unwrap();
    assert_eq!(again.rows[0], r.rows[0]);
    assert_eq!(again.control, r.control);
}

#[test]
fn too_few_is_a_marked_row_with_the_counts_never_an_auc() {
    let h = humans(20, 5, 0);
    let opts = AuditOptions {
        bootstrap: 20,
        ..AuditOptions::default()
    };
    // nine dialogues, plus one without user text
    let mut few = simulator(9, 3);
    few.push(dialogue("empty", Some("t0"), &["   ".to_string()]));
    let row = audit_pair("few", &h, &few, &opts);
    assert!(row.random_forest.is_none() && row.logistic.is_none());
    let why = row.too_few.unwrap();
    assert!(
        why.contains("9 dialogue(s) in 3 group(s)") && why.contains("1 more left out"),
        "{why}"
    );
    assert_eq!(row.dropped_candidate, 1);
    // one group only
    let one_task = simulator(12, 1);
    let why = audit_pair("one", &h, &one_task, &opts).too_few.unwrap();
    assert!(why.contains("in 1 group(s)"), "{why}");
    // a class empty after the drop
    let empty = vec![dialogue("e", None, &[String::new()]); 1];
    let row = audit_pair("empty", &h, &empty, &opts);
    assert!(row.too_few.unwrap().contains("0 dialogue(s)"));
    // humans too few for anything: an error naming the counts
    let e = audit(&humans(6, 3, 0), vec!["few.jsonl".into()], &[], &opts).unwrap_err();
    assert!(
        matches!(&e, Error::Insufficient(m) if m.contains("few.jsonl") && m.contains("6 dialogue(s)")),
        "{e}"
    );
    // a control needs four groups
    let c = control(&humans(12, 3, 0), &opts);
    assert!(c.too_few.unwrap().contains("12 in 3 group(s)"));
}

#[test]
fn without_tasks_dialogues_are_the_groups() {
    let strip = |ds: Vec<Dialogue>| -> Vec<Dialogue> {
        ds.into_iter()
            .map(|mut d| {
                d.task_id = None;
                d
            })
            .collect()
    };
    let opts = AuditOptions {
        bootstrap: 20,
        folds: 3,
        ..AuditOptions::default()
    };
    let row = audit_pair(
        "sim",
        &strip(humans(12, 4, 0)),
        &strip(simulator(12, 4)),
        &opts,
    );
    assert_eq!(row.grouped_by, "dialogue");
    assert_eq!(
        (row.n_groups_human, row.n_groups_candidate, row.folds),
        (12, 12, 3)
    );
    assert!(row.random_forest.unwrap().auc > 0.9);
    let text = render(&AuditReport {
        method: opts.method(),
        human: HumanSide {
            source: vec!["h".into()],
            n: 12,
            n_groups: 12,
            dropped: 0,
        },
        control: control(&strip(humans(12, 4, 0)), &opts),
        rows: vec![row],
        judge: judge::OFFLINE_NOTE.into(),
        notes: Vec::new(),
    });
    assert!(
        text.contains("sim") && text.contains("separated most by"),
        "{text}"
    );
}

#[test]
fn options_are_bounded() {
    let bad = AuditOptions {
        bootstrap: 0,
        ..AuditOptions::default()
    };
    assert!(matches!(bad.validate(), Err(Error::Config { key, .. }) if key == "bootstrap"));
    let bad = AuditOptions {
        folds: 1,
        ..AuditOptions::default()
    };
    assert!(matches!(bad.validate(), Err(Error::Config { key, .. }) if key == "folds"));
}

#[test]
fn issue43_item8_too_few_resamples_are_said_and_printed_bounds_hold_the_estimate() {
    assert!(bootstrap_note(1).is_some_and(|n| n.contains("too few for a 95% interval")));
    assert!(bootstrap_note(MIN_BOOTSTRAP).is_none());
    let i = AucInterval {
        auc: 0.994,
        low: 0.9612,
        high: 0.9945,
    };
    assert_eq!(i.to_string(), "0.994 [0.96, 1.00]");
}
