//! An independent audit of human-likeness: a classifier two-sample test (Lopez-Paz & Oquab,
//! "Revisiting Classifier Two-Sample Tests", ICLR 2017). For each condition, *fresh*
//! classifiers are trained to tell human dialogues from that condition's dialogues by their
//! fingerprints, cross-validated with folds grouped by task; their held-out ROC AUC is 0.5
//! when the two cannot be told apart and 1 when they always can.
//!
//! Nothing here is the run's discriminator, which the search optimises (and so may exploit):
//! two models of different families are trained anew on the audit's own humans —
//! the project's random forest ([`RandomForest`], the discriminator's settings) and an
//! L2-regularised logistic regression on standardised features ([`logistic::Logistic`]).
//!
//! # Method
//!
//! * **Rows**: the 19 features of each dialogue's user turns; dialogues without user text are
//!   left out and counted.
//! * **Groups**: the task id, or the dialogue itself when it has none (a task shared by both
//!   sides is one group). Folds never split a group, so a classifier is always tested on tasks
//!   it did not see; they are stratified by class, and there are at most as many as either side
//!   has groups, so every test fold holds both sides (see `split::assign_folds`).
//! * **AUC**: cross-validated, over the (human, other) pairs of each test fold: each fold's
//!   models rank only their own test rows. (Pooling the scores of all folds into one AUC
//!   compares models fitted on different folds, whose offsets differ with what each left out:
//!   with few groups that pushed AUCs of humans against humans far below 0.5.) The AUC is the
//!   mean of [`REPEATS`] cross-validations with other folds and forests each time (and, for
//!   the control, other halves): with a handful of tasks one assignment of folds moves it by
//!   tenths.
//! * **Interval**: a 95% bootstrap that refits: each resample draws the human groups with
//!   replacement and, separately, the other side's groups (copies of a group stay in one
//!   fold), and runs a cross-validation again, so it covers the variance of the fitting as
//!   well as the sampling of tasks (a resample that drew fewer than two distinct groups of a
//!   side is drawn again). A resample cross-validates on fewer distinct tasks than the sample,
//!   so its AUCs sit off the estimate: the interval is the resamples' 2.5–97.5% range moved so
//!   that their median falls on the estimate (and kept in [0, 1]). It is the spread of one
//!   cross-validation, wider than that of the mean of five: on the safe side.
//! * **Control**: the humans against themselves, split into two halves by task (another split
//!   for each repeat): what "indistinguishable" looks like with this many humans (it should
//!   sit near 0.5).
//! * **Separating features**: per feature, the single-feature AUC (humans as positives),
//!   the two means and the standardised mean difference, largest |AUC − 0.5| first.
//! * **Too few**: a side with fewer than [`MIN_DIALOGUES`] dialogues or [`MIN_GROUPS`] groups
//!   after dropping those without user text gives no AUC: the row says "too few" with the
//!   counts.
//!
//! An optional third opinion, an LLM [`judge`], is shown a human's and a simulated user's
//! turns of the same task (when tasks are shared) and asked which is real.

pub mod judge;
pub mod logistic;
mod split;
pub mod stats;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::dialogue::Dialogue;
use crate::fitness::discriminator::{roc_auc, ForestParams, RandomForest};
use crate::fitness::features::{fingerprint, FeatureSet, FEATURE_NAMES, N_FEATURES};
use crate::rng::mix;
use crate::{Error, Result};

pub use judge::{JudgeOptions, JudgeResult};

/// A side of an audit needs at least this many dialogues with user text.
pub const MIN_DIALOGUES: usize = 10;
/// ... and at least this many task groups (a group is a task, or a dialogue without one).
pub const MIN_GROUPS: usize = 2;
/// The control row's name.
pub const CONTROL_NAME: &str = "control (humans vs humans)";
/// Separating features listed per row.
pub const TOP_FEATURES: usize = 5;

/// How an audit is run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AuditOptions {
    /// Feature set of the fingerprints.
    pub feature_set: FeatureSet,
    /// Folds of the grouped cross-validation (capped at the number of groups).
    pub folds: usize,
    /// Bootstrap resamples of the interval.
    pub bootstrap: usize,
    /// Seed of the folds, the forests and the resamples.
    pub seed: u64,
}

impl AuditOptions {
    /// Folds by default.
    pub const FOLDS: usize = 5;
    /// Bootstrap resamples by default.
    pub const BOOTSTRAP: usize = 200;
    /// Seed by default.
    pub const SEED: u64 = 0;

    /// Check the counts against [`crate::limits`] (errors name the flag).
    pub fn validate(&self) -> Result<()> {
        crate::limits::check("folds", self.folds, 2, crate::limits::MAX_FOLDS)?;
        crate::limits::check("bootstrap", self.bootstrap, 1, crate::limits::MAX_BOOTSTRAP)
    }

    /// What the audit did, in one paragraph (JSON, tables, the report).
    pub fn method(&self) -> AuditMethod {
        AuditMethod {
            feature_set: self.feature_set.name().into(),
            folds: self.folds,
            bootstrap: self.bootstrap,
            seed: self.seed,
            min_dialogues: MIN_DIALOGUES,
            description: format!(
                "fresh classifiers (random forest: {TREES} trees, depth 12, balanced; logistic \
                 regression: standardised features, L2 with C=1, balanced) trained to tell the \
                 humans from each condition's dialogues by their {} fingerprints; up to {}-fold \
                 cross-validation grouped by task (by dialogue where there is no task) and \
                 stratified by class; ROC AUC over the pairs of each test fold, mean of {REPEATS} \
                 cross-validations (0.5 = indistinguishable, 1 = always told apart), with a 95% \
                 bootstrap interval ({} resamples of each side's task groups with replacement, \
                 each cross-validated anew; their 2.5-97.5% range centred on the estimate)",
                self.feature_set.name(),
                self.folds,
                self.bootstrap
            ),
        }
    }
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            feature_set: FeatureSet::default(),
            folds: Self::FOLDS,
            bootstrap: Self::BOOTSTRAP,
            seed: Self::SEED,
        }
    }
}

/// The settings an audit ran with, and what it does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditMethod {
    /// Feature set.
    pub feature_set: String,
    /// Folds asked for (each row says how many it could use).
    pub folds: usize,
    /// Bootstrap resamples.
    pub bootstrap: usize,
    /// Seed.
    pub seed: u64,
    /// Dialogues each side needs ([`MIN_DIALOGUES`]).
    pub min_dialogues: usize,
    /// The method in words.
    pub description: String,
}

/// An AUC with its 95% bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AucInterval {
    /// Cross-validated AUC (over the pairs of each test fold).
    pub auc: f64,
    /// Lower bound of the 95% bootstrap interval (the resamples' 2.5–97.5% range, centred on
    /// the estimate).
    pub low: f64,
    /// Upper bound.
    pub high: f64,
}

impl std::fmt::Display for AucInterval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (low, high) = stats::outward(self.low, self.high);
        write!(f, "{:.3} [{low:.2}, {high:.2}]", self.auc)
    }
}

/// How one feature separates the two sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureSeparation {
    /// Feature name.
    pub feature: String,
    /// AUC of the feature alone, humans as positives (above 0.5: humans have larger values).
    pub auc: f64,
    /// Mean over the human dialogues.
    pub human_mean: f64,
    /// Mean over the other side's dialogues.
    pub candidate_mean: f64,
    /// (candidate − human mean) / the pooled standard deviation (0 when both are constant).
    pub std_diff: f64,
}

/// One audited condition: humans against its dialogues.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRow {
    /// The condition (a file, a row of Table 1, or the control).
    pub name: String,
    /// Human dialogues used (for the control: the first half).
    pub n_human: usize,
    /// The condition's dialogues used (for the control: the second half).
    pub n_candidate: usize,
    /// Task groups among the human dialogues.
    pub n_groups_human: usize,
    /// Task groups among the condition's dialogues.
    pub n_groups_candidate: usize,
    /// Dialogues left out for having no user text (human side).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_human: usize,
    /// Dialogues left out for having no user text (the condition's side).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_candidate: usize,
    /// `task`, `dialogue`, or `task, else dialogue`.
    pub grouped_by: String,
    /// Folds used (0 when too few): at most the number of groups of either side, so that
    /// every test fold holds both.
    pub folds: usize,
    /// Bootstrap resamples that could be cross-validated (those that drew at least two groups
    /// of each side).
    #[serde(default)]
    pub resamples: usize,
    /// The random forest's cross-validated AUC with its interval (None when too few).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random_forest: Option<AucInterval>,
    /// The logistic regression's (None when too few).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logistic: Option<AucInterval>,
    /// The features that separate the two most, largest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top_features: Vec<FeatureSeparation>,
    /// Why there is no AUC, with the counts ("too few: ...").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub too_few: Option<String>,
    /// The LLM judge's accuracy on pairs of this condition, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<JudgeResult>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl AuditRow {
    /// The AUC cell of a table: `0.993 [0.97, 1.00]`, `too few` or `-`.
    pub fn cell(interval: Option<&AucInterval>, too_few: bool) -> String {
        match interval {
            Some(i) => i.to_string(),
            None if too_few => "too few".into(),
            None => "-".into(),
        }
    }
}

/// The human side of an audit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HumanSide {
    /// Where the humans came from.
    pub source: Vec<String>,
    /// Dialogues with user text.
    pub n: usize,
    /// Task groups.
    pub n_groups: usize,
    /// Dialogues left out for having no user text.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: usize,
}

/// How the audit of a table was made: the method, the humans and the judge (`ppol eval`; each
/// row carries its own [`AuditRow`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditSetup {
    /// How it was done.
    pub method: AuditMethod,
    /// The humans.
    pub human: HumanSide,
    /// What the LLM judge did, or why it did not run.
    pub judge: String,
}

/// The human side of `dialogues` (counts after leaving out those without user text).
pub fn human_side(dialogues: &[Dialogue], source: Vec<String>) -> HumanSide {
    let (kept, dropped) = with_user_text(dialogues);
    HumanSide {
        source,
        n: kept.len(),
        n_groups: kept
            .iter()
            .map(|d| group_key(d, "human"))
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        dropped,
    }
}

/// The result of `ppol audit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditReport {
    /// How it was done.
    pub method: AuditMethod,
    /// The humans.
    pub human: HumanSide,
    /// The humans against themselves, in two halves by task.
    pub control: AuditRow,
    /// One row per condition.
    pub rows: Vec<AuditRow>,
    /// What the LLM judge did, or why it did not run.
    pub judge: String,
    /// What the audit did beyond its method (a side sampled to its maximum, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The dialogues that have user text, and how many did not.
pub fn with_user_text(dialogues: &[Dialogue]) -> (Vec<&Dialogue>, usize) {
    let kept: Vec<&Dialogue> = dialogues
        .iter()
        .filter(|d| d.user_texts().any(|t| !t.trim().is_empty()))
        .collect();
    let dropped = dialogues.len() - kept.len();
    (kept, dropped)
}

/// One side's fingerprints and group keys.
struct Side {
    rows: Vec<Vec<f64>>,
    keys: Vec<String>,
    dropped: usize,
    has_task: usize,
}

impl Side {
    fn of(dialogues: &[Dialogue], set: FeatureSet, tag: &str) -> Side {
        let (kept, dropped) = with_user_text(dialogues);
        let rows = kept
            .par_iter()
            .map(|d| fingerprint(d, set).0.to_vec())
            .collect();
        let keys = kept.iter().map(|d| group_key(d, tag)).collect();
        Side {
            rows,
            keys,
            dropped,
            has_task: kept.iter().filter(|d| d.task_id.is_some()).count(),
        }
    }

    fn n_groups(&self) -> usize {
        self.keys
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    }
}

/// The group of a dialogue: its task (shared by both sides), else the dialogue itself (kept
/// apart per side, `tag`).
fn group_key(d: &Dialogue, tag: &str) -> String {
    match &d.task_id {
        Some(t) => format!("task:{t}"),
        None => format!("{tag}:{}", d.id),
    }
}

/// Audit `candidate` against `human`: a row named `name`.
pub fn audit_pair(
    name: &str,
    human: &[Dialogue],
    candidate: &[Dialogue],
    opts: &AuditOptions,
) -> AuditRow {
    let h = Side::of(human, opts.feature_set, "human");
    let c = Side::of(candidate, opts.feature_set, "candidate");
    compare(name, vec![(h, c)], opts, false)
}

/// The control row: `human` against itself, split into two halves by task (by dialogue without
/// tasks). It needs [`MIN_DIALOGUES`] dialogues in all and [`MIN_GROUPS`] groups per half.
pub fn control(human: &[Dialogue], opts: &AuditOptions) -> AuditRow {
    let all = Side::of(human, opts.feature_set, "human");
    let name = CONTROL_NAME;
    if all.rows.len() < MIN_DIALOGUES || all.n_groups() < 2 * MIN_GROUPS {
        let mut row = empty_row(name, &all, &Side::empty());
        row.too_few = Some(format!(
            "too few: the control needs at least {MIN_DIALOGUES} human dialogues in at least \
             {} task groups (two per half); there are {} in {} group(s){}",
            2 * MIN_GROUPS,
            all.rows.len(),
            all.n_groups(),
            dropped_note(all.dropped, "")
        ));
        return row;
    }
    // a different split in halves for each repeat: the control averages over them
    let samples: Vec<(Side, Side)> = (0..REPEATS)
        .map(|r| {
            let first = split::halves(&all.keys, mix(mix(opts.seed, 0x4841_4c46), r as u64));
            let (mut a, mut b) = (Side::empty(), Side::empty());
            for (i, in_a) in first.iter().enumerate() {
                let side = if *in_a { &mut a } else { &mut b };
                side.rows.push(all.rows[i].clone());
                side.keys.push(all.keys[i].clone());
                side.has_task += usize::from(all.keys[i].starts_with("task:"));
            }
            a.dropped = all.dropped;
            (a, b)
        })
        .collect();
    // the halves are parts of one sample: the minimum of dialogues applied to the whole
    compare(name, samples, opts, true)
}

impl Side {
    fn empty() -> Side {
        Side {
            rows: Vec::new(),
            keys: Vec::new(),
            dropped: 0,
            has_task: 0,
        }
    }
}

fn dropped_note(n: usize, side: &str) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({n} more{side} left out: no user text)")
    }
}

fn empty_row(name: &str, h: &Side, c: &Side) -> AuditRow {
    let n = h.rows.len() + c.rows.len();
    let with_task = h.has_task + c.has_task;
    AuditRow {
        name: name.into(),
        n_human: h.rows.len(),
        n_candidate: c.rows.len(),
        n_groups_human: h.n_groups(),
        n_groups_candidate: c.n_groups(),
        dropped_human: h.dropped,
        dropped_candidate: c.dropped,
        grouped_by: if with_task == n {
            "task"
        } else if with_task == 0 {
            "dialogue"
        } else {
            "task, else dialogue"
        }
        .into(),
        folds: 0,
        resamples: 0,
        random_forest: None,
        logistic: None,
        top_features: Vec::new(),
        too_few: None,
        judge: None,
    }
}

/// Why a side cannot be audited, with its counts (None: it can).
fn too_few(what: &str, s: &Side, is_control_half: bool) -> Option<String> {
    let min = if is_control_half { 1 } else { MIN_DIALOGUES };
    if s.rows.len() < min || s.n_groups() < MIN_GROUPS {
        Some(format!(
            "{what}: {} dialogue(s) in {} group(s){} (at least {min} dialogues in {MIN_GROUPS} \
             groups needed)",
            s.rows.len(),
            s.n_groups(),
            dropped_note(s.dropped, "")
        ))
    } else {
        None
    }
}

/// One sample of an audit: the rows of both sides (humans first, label `true`) and their group
/// keys (the same key on both sides is one group: a task both played).
struct Sample {
    x: Vec<Vec<f64>>,
    y: Vec<bool>,
    keys: Vec<String>,
}

impl Sample {
    fn of(h: Side, c: Side) -> Sample {
        let n_h = h.rows.len();
        let x: Vec<Vec<f64>> = h.rows.into_iter().chain(c.rows).collect();
        let y = (0..x.len()).map(|i| i < n_h).collect();
        let keys = h.keys.into_iter().chain(c.keys).collect();
        Sample { x, y, keys }
    }

    fn cross_validate(&self, rows: &[usize], k: usize, seed: u64) -> Option<Fit> {
        cross_validate(&self.x, &self.y, &self.keys, rows, k, TREES, seed)
    }
}

/// Audit side `h` (humans, label 1) against side `c` of each sample: one sample for a
/// condition, [`REPEATS`] splits of the humans in halves for the control (`control`: each half
/// then needs only [`MIN_GROUPS`] groups). The counts of the row are the first sample's.
fn compare(name: &str, samples: Vec<(Side, Side)>, opts: &AuditOptions, control: bool) -> AuditRow {
    let (h, c) = &samples[0];
    let mut row = empty_row(name, h, c);
    for (h, c) in &samples {
        let problems: Vec<String> = [
            too_few(if control { "first half" } else { "humans" }, h, control),
            too_few(
                if control { "second half" } else { "candidate" },
                c,
                control,
            ),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !problems.is_empty() {
            row.too_few = Some(format!("too few: {}", problems.join("; ")));
            return row;
        }
    }
    let samples: Vec<Sample> = samples.into_iter().map(|(h, c)| Sample::of(h, c)).collect();
    // the estimate: the mean of REPEATS cross-validations (other folds, forests and, for the
    // control, halves each time), steadier than one
    let fits: Vec<Option<Fit>> = (0..REPEATS)
        .into_par_iter()
        .map(|r| {
            let s = &samples[r % samples.len()];
            let all: Vec<usize> = (0..s.x.len()).collect();
            s.cross_validate(&all, opts.folds, mix(mix(opts.seed, 0x4553_5449), r as u64))
        })
        .collect();
    let Some(fits) = fits.into_iter().collect::<Option<Vec<Fit>>>() else {
        row.too_few = Some(format!(
            "too few: {} human and {} other groups cannot make two folds that each hold both",
            row.n_groups_human, row.n_groups_candidate
        ));
        return row;
    };
    row.folds = fits[0].folds;
    let mean = |pick: fn(&Fit) -> f64| fits.iter().map(pick).sum::<f64>() / fits.len() as f64;
    let resamplers: Vec<split::Resampler> = samples
        .iter()
        .map(|s| split::Resampler::new(&split::units(&s.keys, &s.y)))
        .collect();
    let replicates: Vec<Fit> = (0..opts.bootstrap)
        .into_par_iter()
        .filter_map(|b| {
            let mut rng = ChaCha8Rng::seed_from_u64(mix(mix(opts.seed, 0x424f_4f54), b as u64));
            let which = b % samples.len();
            let rows = resamplers[which].draw(&mut rng)?;
            samples[which].cross_validate(&rows, opts.folds, mix(opts.seed, b as u64 + 1))
        })
        .collect();
    row.resamples = replicates.len();
    let interval = |point: f64, pick: fn(&Fit) -> f64| {
        let mut v: Vec<f64> = replicates.iter().map(pick).collect();
        v.sort_by(f64::total_cmp);
        let shift = point - split::quantile_sorted(&v, 0.5);
        AucInterval {
            auc: point,
            low: (split::quantile_sorted(&v, 0.025) + shift).clamp(0.0, 1.0),
            high: (split::quantile_sorted(&v, 0.975) + shift).clamp(0.0, 1.0),
        }
    };
    if !replicates.is_empty() {
        row.random_forest = Some(interval(mean(|f| f.forest), |f| f.forest));
        row.logistic = Some(interval(mean(|f| f.logistic), |f| f.logistic));
    }
    row.top_features = separating_features(&samples[0].x, &samples[0].y);
    row
}

/// Cross-validations averaged into an audit's AUC.
pub const REPEATS: usize = 5;

/// Trees of the audit's forests (the discriminator's settings otherwise): enough for a stable
/// AUC, and a bootstrap that refits every fold stays affordable.
pub const TREES: usize = 100;

/// The cross-validated AUCs of one sample.
struct Fit {
    forest: f64,
    logistic: f64,
    folds: usize,
    /// Out-of-fold P(human) of each row of the sample (mean of the two classifiers).
    p_human: Vec<f64>,
}

/// Grouped, stratified cross-validation of the rows `rows` of `x` (an index may repeat: a
/// bootstrap sample; copies of a group share its key and so its fold). `k` is capped at the
/// number of groups of each class, so every test fold holds both; the AUC is over the pairs
/// (human, other) of the same test fold — each model ranks only its own fold, never against
/// another fold's model. None when fewer than two such folds can be made.
fn cross_validate(
    x: &[Vec<f64>],
    y: &[bool],
    keys: &[String],
    rows: &[usize],
    k: usize,
    trees: usize,
    seed: u64,
) -> Option<Fit> {
    let ys: Vec<bool> = rows.iter().map(|&i| y[i]).collect();
    let ks: Vec<String> = rows.iter().map(|&i| keys[i].clone()).collect();
    let units = split::units(&ks, &ys);
    let per_class = |h: bool| {
        units
            .iter()
            .filter(|u| {
                if h {
                    !u.human.is_empty()
                } else {
                    !u.other.is_empty()
                }
            })
            .count()
    };
    let k = k.min(per_class(true)).min(per_class(false));
    if k < 2 {
        return None;
    }
    let fold_of_unit = split::assign_folds(&units, k, seed);
    let mut fold = vec![0usize; rows.len()];
    for (u, f) in units.iter().zip(&fold_of_unit) {
        for &i in u.human.iter().chain(&u.other) {
            fold[i] = *f;
        }
    }
    // (concordant pairs, pairs) of each classifier in each fold, and the test rows' mean
    // P(human) of the two
    type FoldFit = ([(f64, f64); 2], Vec<(usize, f64)>);
    let per_fold: Vec<Option<FoldFit>> = (0..k)
        .into_par_iter()
        .map(|f| {
            let (train, test): (Vec<usize>, Vec<usize>) =
                (0..rows.len()).partition(|&j| fold[j] != f);
            let xtr: Vec<Vec<f64>> = train.iter().map(|&j| x[rows[j]].clone()).collect();
            let ytr: Vec<bool> = train.iter().map(|&j| ys[j]).collect();
            let xte: Vec<Vec<f64>> = test.iter().map(|&j| x[rows[j]].clone()).collect();
            let yte: Vec<bool> = test.iter().map(|&j| ys[j]).collect();
            let params = ForestParams {
                n_trees: trees,
                seed: mix(seed, f as u64),
                ..ForestParams::default()
            };
            let rf = RandomForest::fit(&xtr, &ytr, &params)
                .ok()?
                .predict_proba(&xte);
            let lr = logistic::Logistic::fit(&xtr, &ytr).predict_proba(&xte);
            let pos = yte.iter().filter(|&&l| l).count() as f64;
            let pairs = pos * (yte.len() as f64 - pos);
            let p: Vec<(usize, f64)> = test
                .iter()
                .zip(rf.iter().zip(&lr))
                .map(|(&j, (a, b))| (j, (a + b) / 2.0))
                .collect();
            Some((
                [
                    (roc_auc(&rf, &yte)? * pairs, pairs),
                    (roc_auc(&lr, &yte)? * pairs, pairs),
                ],
                p,
            ))
        })
        .collect();
    let mut sums = [(0.0, 0.0); 2];
    let mut p_human = vec![f64::NAN; rows.len()];
    for f in per_fold {
        let (aucs, p) = f?;
        for (s, (u, n)) in sums.iter_mut().zip(aucs) {
            s.0 += u;
            s.1 += n;
        }
        for (j, v) in p {
            p_human[j] = v;
        }
    }
    Some(Fit {
        forest: sums[0].0 / sums[0].1,
        logistic: sums[1].0 / sums[1].1,
        folds: k,
        p_human,
    })
}

/// A classifier two-sample test made cheap enough to run per candidate (the population
/// objective): the same test as the audit's estimate — rows labelled `true` (humans) against the
/// others, folds grouped by `keys` and stratified by class — with `trees` trees per forest,
/// averaged over `repeats` cross-validations. None when two folds that each hold both classes
/// cannot be made.
pub fn two_sample(
    x: &[Vec<f64>],
    y: &[bool],
    keys: &[String],
    folds: usize,
    trees: usize,
    repeats: usize,
    seed: u64,
) -> Option<TwoSample> {
    let all: Vec<usize> = (0..x.len()).collect();
    let fits: Vec<Fit> = (0..repeats.max(1))
        .map(|r| cross_validate(x, y, keys, &all, folds, trees, mix(seed, r as u64)))
        .collect::<Option<_>>()?;
    let n = fits.len() as f64;
    let p_human = (0..x.len())
        .map(|i| fits.iter().map(|f| f.p_human[i]).sum::<f64>() / n)
        .collect();
    Some(TwoSample {
        forest_auc: fits.iter().map(|f| f.forest).sum::<f64>() / n,
        logistic_auc: fits.iter().map(|f| f.logistic).sum::<f64>() / n,
        p_human,
    })
}

/// What [`two_sample`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct TwoSample {
    /// Cross-validated AUC of the random forests.
    pub forest_auc: f64,
    /// Cross-validated AUC of the logistic regressions.
    pub logistic_auc: f64,
    /// Each row's out-of-fold P(human), the mean of the two classifiers.
    pub p_human: Vec<f64>,
}

/// Every feature's separation, largest |AUC − 0.5| first, the first [`TOP_FEATURES`].
fn separating_features(x: &[Vec<f64>], y: &[bool]) -> Vec<FeatureSeparation> {
    let mut out: Vec<FeatureSeparation> = (0..N_FEATURES)
        .map(|j| {
            let col: Vec<f64> = x.iter().map(|r| r[j]).collect();
            let side = |human: bool| -> Vec<f64> {
                col.iter()
                    .zip(y)
                    .filter(|(_, &l)| l == human)
                    .map(|(v, _)| *v)
                    .collect()
            };
            let stats = |v: &[f64]| {
                let n = v.len().max(1) as f64;
                let m = v.iter().sum::<f64>() / n;
                let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n;
                (m, var)
            };
            let ((mh, vh), (mc, vc)) = (stats(&side(true)), stats(&side(false)));
            let sd = ((vh + vc) / 2.0).sqrt();
            FeatureSeparation {
                feature: FEATURE_NAMES[j].into(),
                auc: roc_auc(&col, y).unwrap_or(0.5),
                human_mean: mh,
                candidate_mean: mc,
                std_diff: if sd > 1e-12 { (mc - mh) / sd } else { 0.0 },
            }
        })
        .collect();
    out.sort_by(|a, b| {
        (b.auc - 0.5)
            .abs()
            .total_cmp(&(a.auc - 0.5).abs())
            .then_with(|| a.feature.cmp(&b.feature))
    });
    out.truncate(TOP_FEATURES);
    out
}

/// Bootstrap resamples below which an interval is not called a 95% interval.
pub const MIN_BOOTSTRAP: usize = 20;

/// What a report says of intervals from too few resamples (None from [`MIN_BOOTSTRAP`] up).
pub fn bootstrap_note(bootstrap: usize) -> Option<String> {
    (bootstrap < MIN_BOOTSTRAP).then(|| {
        let note = format!(
            "the intervals come from {bootstrap} bootstrap resample(s): too few for a 95% \
             interval (their range, at least {MIN_BOOTSTRAP} needed; default {})",
            AuditOptions::BOOTSTRAP
        );
        tracing::warn!("{note}");
        note
    })
}

/// Audit every condition against `human`, with the control. Fails when the humans themselves
/// are too few to audit anything ([`Error::Insufficient`] with the counts); a condition with
/// too few dialogues is a row marked `too_few`.
pub fn audit(
    human: &[Dialogue],
    human_source: Vec<String>,
    candidates: &[(String, Vec<Dialogue>)],
    opts: &AuditOptions,
) -> Result<AuditReport> {
    opts.validate()?;
    let side = Side::of(human, opts.feature_set, "human");
    if let Some(why) = too_few("human dialogues", &side, false) {
        return Err(Error::Insufficient(format!(
            "the audit's humans ({}) are too few: {why}",
            human_source.join(", ")
        )));
    }
    let rows = candidates
        .iter()
        .map(|(name, ds)| audit_pair(name, human, ds, opts))
        .collect();
    Ok(AuditReport {
        method: opts.method(),
        human: HumanSide {
            source: human_source,
            n: side.rows.len(),
            n_groups: side.n_groups(),
            dropped: side.dropped,
        },
        control: control(human, opts),
        rows,
        judge: judge::OFFLINE_NOTE.into(),
        notes: bootstrap_note(opts.bootstrap).into_iter().collect(),
    })
}

/// The report as text: one line per row with both classifiers' AUCs and intervals, the
/// features that separate most, and the judge.
pub fn render(report: &AuditReport) -> String {
    let m = &report.method;
    let mut s = format!(
        "humans: {} ({} dialogues in {} task groups{})\n",
        report.human.source.join(", "),
        report.human.n,
        report.human.n_groups,
        dropped_note(report.human.dropped, "")
    );
    s.push_str(&format!(
        "{:<28} {:>5} {:>5}  {:<21} {:<21} {}\n",
        "condition", "n_h", "n", "forest AUC [95%]", "logistic AUC [95%]", "judge accuracy [95%]"
    ));
    for r in std::iter::once(&report.control).chain(&report.rows) {
        s.push_str(&row_line(r));
    }
    for r in std::iter::once(&report.control).chain(&report.rows) {
        if let Some(why) = &r.too_few {
            s.push_str(&format!("{}: {why}\n", r.name));
        } else if !r.top_features.is_empty() {
            s.push_str(&format!(
                "{}: separated most by {}\n",
                r.name,
                features_line(r)
            ));
        }
    }
    s.push_str(&format!(
        "method: {}; at least {} dialogues per side\njudge: {}\n",
        m.description, m.min_dialogues, report.judge
    ));
    for n in &report.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}

/// One row of the text table.
pub fn row_line(r: &AuditRow) -> String {
    let too_few = r.too_few.is_some();
    let name: String = if r.name.chars().count() > 28 {
        let tail: String = r
            .name
            .chars()
            .rev()
            .take(27)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("…{tail}")
    } else {
        r.name.clone()
    };
    format!(
        "{:<28} {:>5} {:>5}  {:<21} {:<21} {}\n",
        name,
        r.n_human,
        r.n_candidate,
        AuditRow::cell(r.random_forest.as_ref(), too_few),
        AuditRow::cell(r.logistic.as_ref(), too_few),
        r.judge.as_ref().map_or("-".to_string(), |j| j.to_string())
    )
}

/// `short_utterance_rate (humans 0.290 vs 0.010; alone it separates with AUC 0.91), ...`:
/// the three features that separate most, each with the AUC of the better direction.
pub fn features_line(r: &AuditRow) -> String {
    r.top_features
        .iter()
        .take(3)
        .map(|f| {
            format!(
                "{} (humans {:.3} vs {:.3}; alone it separates with AUC {:.2})",
                f.feature,
                f.human_mean,
                f.candidate_mean,
                f.auc.max(1.0 - f.auc)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
