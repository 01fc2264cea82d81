//! `ppol audit` / `ppol_rs.audit`: the independent audit of human-likeness (see
//! [`crate::fitness::audit`]) of trace files or dialogues against humans, with the optional LLM
//! judge when a model is given.

use std::path::PathBuf;

use crate::dialogue::Dialogue;
use crate::fitness::audit::{self, judge, AuditOptions, AuditReport, JudgeOptions};
use crate::fitness::features::FeatureSet;
use crate::fitness::traces::Skipped;
use crate::front::ops::{block_on, load_traces, TraceSource};
use crate::llm::{ChatModel, LlmClient, LlmConfig};
use crate::rng::mix;
use crate::Result;

/// What `ppol audit` needs. `None` takes the default ([`AuditOptions`], [`JudgeOptions`]).
#[derive(Debug, Clone)]
pub struct AuditRequest {
    /// The humans.
    pub human: TraceSource,
    /// Keep only human dialogues of this domain (τ-USI files mix airline and retail).
    pub human_domain: Option<String>,
    /// The conditions to audit, by name.
    pub candidates: Vec<(String, TraceSource)>,
    /// Feature set (default `ppol-0.1.1`).
    pub feature_set: Option<FeatureSet>,
    /// Folds (default [`AuditOptions::FOLDS`]).
    pub folds: Option<usize>,
    /// Bootstrap resamples (default [`AuditOptions::BOOTSTRAP`]).
    pub bootstrap: Option<usize>,
    /// Seed (default [`AuditOptions::SEED`]).
    pub seed: Option<u64>,
    /// The judge's model (None: no judge, and the report says so).
    pub llm: Option<LlmConfig>,
    /// Judge pairs per condition (default [`JudgeOptions::PAIRS`]; 0 = no judge).
    pub judge_pairs: Option<usize>,
    /// The judge's prompt file (default: the shipped `fitness/judge_prompt.md`).
    pub judge_prompt: Option<PathBuf>,
}

impl AuditRequest {
    /// Default of `--llm` (Python: `llm=None`): no judge.
    pub const LLM: &'static str = "offline";

    /// The audit's options, checked against [`crate::limits`].
    pub fn options(&self) -> Result<AuditOptions> {
        let d = AuditOptions::default();
        let opts = AuditOptions {
            feature_set: self.feature_set.unwrap_or(d.feature_set),
            folds: self.folds.unwrap_or(d.folds),
            bootstrap: self.bootstrap.unwrap_or(d.bootstrap),
            seed: self.seed.unwrap_or(d.seed),
        };
        opts.validate()?;
        Ok(opts)
    }
}

/// Load the humans and every condition, audit each against the humans (with the control), and
/// ask the judge when a model is given. Returns the report and the dialogues the loads left
/// out (no user text) for the front end to warn about.
///
/// # Errors
/// A bad trace file (naming it); too few humans ([`crate::Error::Insufficient`] with the
/// counts); a bad option or judge prompt ([`crate::Error::Config`] naming it).
pub fn audit(req: &AuditRequest) -> Result<(AuditReport, Vec<Skipped>)> {
    audit_with(req, None)
}

/// [`audit()`], telling `heartbeat` every few seconds that the audit is still at work (a line
/// to show; `ppol audit` prints it on stderr).
pub fn audit_with(
    req: &AuditRequest,
    heartbeat: Option<&(dyn Fn(&str) + Sync)>,
) -> Result<(AuditReport, Vec<Skipped>)> {
    let opts = req.options()?;
    let pairs = req.judge_pairs.unwrap_or(JudgeOptions::PAIRS);
    // resolved: every option with its default applied, whichever front end left it unset
    super::stop_if_resolving("audit", || {
        let resolved = AuditRequest {
            feature_set: Some(opts.feature_set),
            folds: Some(opts.folds),
            bootstrap: Some(opts.bootstrap),
            seed: Some(opts.seed),
            judge_pairs: Some(pairs),
            ..req.clone()
        };
        serde_json::json!(format!("{resolved:#?}"))
    })?;
    let judge_opts = JudgeOptions::new(pairs, req.judge_prompt.as_deref(), opts.seed)?;
    let mut humans = load_traces(&req.human, req.human_domain.as_deref())?;
    let mut skipped = std::mem::take(&mut humans.skipped);
    let mut notes = Vec::new();
    let humans_loaded = sample_side(humans.dialogues, "the humans", opts.seed, 0, &mut notes);
    let mut candidates: Vec<(String, Vec<Dialogue>)> = Vec::new();
    for (i, (name, source)) in req.candidates.iter().enumerate() {
        let loaded = load_traces(source, None)?;
        skipped.extend(loaded.skipped);
        let ds = sample_side(loaded.dialogues, name, opts.seed, i as u64 + 1, &mut notes);
        candidates.push((name.clone(), ds));
    }
    let client = req.llm.as_ref().map(LlmClient::from_config).transpose()?;
    let total = humans_loaded.len() + candidates.iter().map(|(_, d)| d.len()).sum::<usize>();
    let every = std::time::Duration::from_secs(5);
    let mut report = with_heartbeat(heartbeat, every, total, candidates.len(), || {
        audit::audit(&humans_loaded, req.human.describe(), &candidates, &opts)
    })?;
    report.notes.extend(notes);
    match (&client, pairs) {
        (None, _) => {}
        (Some(_), 0) => report.judge = "skipped: --judge-pairs 0".into(),
        (Some(c), _) => {
            let model: &dyn ChatModel = c;
            report.judge = judge_opts.describe(&model.describe_for(judge::ROLE));
            let human = &humans_loaded;
            let results = block_on(async {
                let mut out = Vec::new();
                for (i, (_, ds)) in candidates.iter().enumerate() {
                    out.push(judge::judge(model, human, ds, &judge_opts, mix(1, i as u64)).await);
                }
                out
            })?;
            for (row, r) in report.rows.iter_mut().zip(results) {
                row.judge = Some(r);
            }
        }
    }
    Ok((report, skipped))
}

/// At most [`crate::limits::MAX_AUDIT_DIALOGUES`] dialogues of one side: a larger side is a
/// seeded uniform sample of that many, and `notes` says so (the audit's time grows with the
/// dialogues; its intervals at this size are already narrow).
fn sample_side(
    ds: Vec<Dialogue>,
    name: &str,
    seed: u64,
    side: u64,
    notes: &mut Vec<String>,
) -> Vec<Dialogue> {
    sample_at_most(
        ds,
        crate::limits::MAX_AUDIT_DIALOGUES,
        name,
        seed,
        side,
        notes,
    )
}

fn sample_at_most(
    ds: Vec<Dialogue>,
    max: usize,
    name: &str,
    seed: u64,
    side: u64,
    notes: &mut Vec<String>,
) -> Vec<Dialogue> {
    use rand::SeedableRng;
    let n = ds.len();
    if n <= max {
        return ds;
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(mix(mix(seed, 0xa0d17), side));
    let mut picked = rand::seq::index::sample(&mut rng, n, max).into_vec();
    picked.sort_unstable();
    let mut picked = picked.into_iter().peekable();
    // the sampled dialogues in their files' order
    let keep: Vec<Dialogue> = ds
        .into_iter()
        .enumerate()
        .filter_map(|(i, d)| (picked.next_if_eq(&i).is_some()).then_some(d))
        .collect();
    notes.push(format!(
        "{name}: a seeded sample of {max} of its {n} dialogues was audited (at most {max} per \
         side; `--seed` picks another)"
    ));
    keep
}

/// Run the audit, telling `heartbeat` every few seconds that it is still at work (an audit of
/// many dialogues takes a while, and used to print nothing until it was done).
fn with_heartbeat<T: Send>(
    heartbeat: Option<&(dyn Fn(&str) + Sync)>,
    every: std::time::Duration,
    dialogues: usize,
    rows: usize,
    work: impl FnOnce() -> T + Send,
) -> T {
    let Some(heartbeat) = heartbeat else {
        return work();
    };
    let done = (std::sync::Mutex::new(false), std::sync::Condvar::new());
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let (lock, cv) = &done;
            let mut finished = lock.lock().unwrap_or_else(|e| e.into_inner());
            while !*finished {
                let (guard, wait) = cv
                    .wait_timeout(finished, every)
                    .unwrap_or_else(|e| e.into_inner());
                finished = guard;
                if !*finished && wait.timed_out() {
                    heartbeat(&format!(
                        "audit: still at work after {} s ({dialogues} dialogues: {rows} \
                         condition(s) and the control, each with cross-validated classifiers \
                         and bootstrap resamples)",
                        started.elapsed().as_secs()
                    ));
                }
            }
        });
        let out = work();
        let (lock, cv) = &done;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialogue::{Role, Turn};

    #[test]
    fn a_long_audit_says_it_is_still_at_work_and_a_short_one_says_nothing() {
        let lines = std::sync::Mutex::new(Vec::<String>::new());
        let beat = |l: &str| lines.lock().unwrap().push(l.to_string());
        let every = std::time::Duration::from_millis(20);
        let out = with_heartbeat(Some(&beat), every, 40_000, 2, || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            7
        });
        assert_eq!(out, 7);
        let seen = lines.lock().unwrap().clone();
        assert!(seen.len() >= 3, "{seen:?}");
        assert!(seen[0].contains("audit: still at work") && seen[0].contains("40000 dialogues"));
        lines.lock().unwrap().clear();
        let long = std::time::Duration::from_secs(60);
        assert_eq!(with_heartbeat(Some(&beat), long, 10, 1, || 1), 1);
        assert!(
            lines.lock().unwrap().is_empty(),
            "done before the first beat: silent"
        );
    }

    #[test]
    fn a_side_over_the_maximum_is_a_seeded_sample_in_file_order_and_said() {
        let ds = |n: usize| -> Vec<Dialogue> {
            (0..n)
                .map(|i| Dialogue::new(format!("d{i}"), vec![Turn::new(Role::User, "hi")]))
                .collect()
        };
        let ids = |v: &[Dialogue]| v.iter().map(|d| d.id.clone()).collect::<Vec<_>>();
        let mut notes = Vec::new();
        let a = sample_at_most(ds(25), 10, "evolved", 1, 2, &mut notes);
        assert_eq!(a.len(), 10);
        let pos: Vec<usize> = a.iter().map(|d| d.id[1..].parse().unwrap()).collect();
        assert!(pos.windows(2).all(|w| w[0] < w[1]), "file order: {pos:?}");
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].contains("evolved: a seeded sample of 10 of its 25"),
            "{notes:?}"
        );
        let again = sample_at_most(ds(25), 10, "evolved", 1, 2, &mut Vec::new());
        assert_eq!(ids(&a), ids(&again), "seeded");
        let other = sample_at_most(ds(25), 10, "evolved", 2, 2, &mut Vec::new());
        assert_ne!(ids(&a), ids(&other), "another seed, another sample");
        let mut none = Vec::new();
        assert_eq!(sample_at_most(ds(10), 10, "x", 1, 0, &mut none).len(), 10);
        assert!(
            none.is_empty(),
            "a side within the maximum is audited whole"
        );
    }
}
