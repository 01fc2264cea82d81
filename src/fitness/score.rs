//! Scoring a set of simulated dialogues against humans: P(human) from the discriminator,
//! Chamfer coverage of the human cloud per task, their weighted combination, and Dice D1–D4.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::dialogue::Dialogue;
use crate::fitness::coverage::{dice, Chamfer, CoverageOptions, Dice, HumanCloud};
use crate::fitness::discriminator::{Discriminator, ForestParams};
use crate::fitness::features::{fingerprint_many, FeatureSet, Fingerprint, FEATURE_NAMES};
use crate::fitness::reference::HumanReference;
use crate::fitness::traces::{self, LoadOptions};
use crate::{Error, Result};

/// Weights and coverage settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScoreOptions {
    /// Weight of human-likeness.
    pub lambda_h: f64,
    /// Weight of coverage.
    pub lambda_b: f64,
    /// How the human cloud is prepared.
    pub coverage: CoverageOptions,
}

impl Default for ScoreOptions {
    fn default() -> Self {
        ScoreOptions {
            lambda_h: 0.5,
            lambda_b: 0.5,
            coverage: CoverageOptions::default(),
        }
    }
}

/// Counts behind a score.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScoreCounts {
    /// Simulated dialogues scored.
    pub n_dialogues: usize,
    /// Of which had no non-empty user turn (all-zero fingerprints, still scored as the reference does).
    pub n_without_user_turns: usize,
    /// Task groups in the coverage mean.
    pub n_groups: usize,
    /// Points in the human cloud (centroids when clustered).
    pub n_human_points: usize,
    /// Human dialogues in the reference mean.
    pub n_human_dialogues: usize,
}

/// The score of one set of simulated dialogues.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// Mean P(human) over all dialogues (pooled, not per task).
    pub human_likeness: f64,
    /// Mean over task groups of the two-sided Chamfer coverage.
    pub coverage: f64,
    /// λh·human_likeness + λb·coverage.
    pub combined: f64,
    /// The weights used.
    pub lambda_h: f64,
    /// The weights used.
    pub lambda_b: f64,
    /// Dice alignment of the mean fingerprint with the human mean.
    pub dice: Dice,
    /// Counts.
    pub counts: ScoreCounts,
    /// Reference distance of the human cloud.
    pub d_ref: f64,
    /// Whether coverage was computed in standardised space.
    pub standardized: bool,
    /// Feature set.
    pub feature_set: FeatureSet,
    /// Coverage per task group, in order of first appearance.
    pub coverage_by_group: Vec<(String, Chamfer)>,
}

/// Score fingerprints already computed (one group key per fingerprint).
pub fn score_fingerprints(
    reference: &HumanReference,
    discriminator: &Discriminator,
    points: &[(String, Fingerprint)],
    n_without_user_turns: usize,
    opts: &ScoreOptions,
) -> Result<Score> {
    discriminator.check_feature_set(reference.feature_set.name())?;
    if points.is_empty() {
        return Err(Error::Insufficient(
            "no simulated dialogues to score".into(),
        ));
    }
    let cloud = HumanCloud::new(reference, opts.coverage)?;
    if cloud.is_empty() {
        return Err(Error::Insufficient(
            "the human reference has no dialogue with two or more messages (the coverage cloud is empty)".into(),
        ));
    }
    let rows: Vec<Vec<f64>> = points.iter().map(|(_, f)| f.0.to_vec()).collect();
    let p = discriminator.p_human(&rows);
    let human_likeness = p.iter().sum::<f64>() / p.len() as f64;
    let grouped = cloud.chamfer_by_group(points);
    let fps: Vec<Fingerprint> = points.iter().map(|(_, f)| *f).collect();
    let d = dice(&reference.mean_fingerprint(), &fps);
    Ok(Score {
        human_likeness,
        coverage: grouped.mean,
        combined: opts.lambda_h * human_likeness + opts.lambda_b * grouped.mean,
        lambda_h: opts.lambda_h,
        lambda_b: opts.lambda_b,
        dice: d,
        counts: ScoreCounts {
            n_dialogues: points.len(),
            n_without_user_turns,
            n_groups: grouped.groups.len(),
            n_human_points: cloud.len(),
            n_human_dialogues: reference.n_dialogues,
        },
        d_ref: cloud.d_ref,
        standardized: opts.coverage.standardize,
        feature_set: reference.feature_set,
        coverage_by_group: grouped.groups,
    })
}

/// Score simulated dialogues (grouped by task id, else dialogue id).
pub fn score(
    reference: &HumanReference,
    discriminator: &Discriminator,
    candidates: &[Dialogue],
    opts: &ScoreOptions,
) -> Result<Score> {
    let fps = fingerprint_many(candidates, reference.feature_set);
    let points: Vec<(String, Fingerprint)> = candidates
        .iter()
        .zip(fps)
        .map(|(d, f)| (d.group_key().to_string(), f))
        .collect();
    let empty = candidates.iter().filter(|d| d.n_user_turns() == 0).count();
    score_fingerprints(reference, discriminator, &points, empty, opts)
}

/// Train a discriminator: the reference's cloud (human, label 1) against baseline dialogues
/// (simulator, label 0), groups = task ids, with a grouped held-out AUC.
pub fn train_discriminator(
    reference: &HumanReference,
    baseline: &[Dialogue],
    params: &ForestParams,
    folds: usize,
) -> Result<Discriminator> {
    let human: Vec<Vec<f64>> = reference.cloud_rows().map(|r| r.features.clone()).collect();
    let human_groups: Vec<String> = reference
        .cloud_rows()
        .map(|r| r.task_id.clone().unwrap_or_else(|| r.id.clone()))
        .collect();
    let fps = fingerprint_many(baseline, reference.feature_set);
    let sim: Vec<Vec<f64>> = fps.iter().map(|f| f.0.to_vec()).collect();
    let sim_groups: Vec<String> = baseline.iter().map(|d| d.group_key().to_string()).collect();
    let names: Vec<String> = FEATURE_NAMES.iter().map(|s| s.to_string()).collect();
    Discriminator::train(
        &human,
        &human_groups,
        &sim,
        &sim_groups,
        &names,
        reference.feature_set.name(),
        params,
        folds,
    )
}

/// Load a human reference from a saved reference JSON, or build it from trace files.
/// A saved reference must have been made with `set`.
pub fn load_reference(paths: &[std::path::PathBuf], set: FeatureSet) -> Result<HumanReference> {
    if let [single] = paths {
        if single != Path::new("-") {
            let text = crate::hub::read_to_string(single)?;
            if HumanReference::sniff(&text) {
                let r = HumanReference::from_json(&text, single)?;
                if r.feature_set != set {
                    return Err(Error::FeatureSetMismatch {
                        what: format!("human reference '{}'", single.display()),
                        found: r.feature_set.name().into(),
                        expected: set.name().into(),
                    });
                }
                return Ok(r);
            }
            let ds = traces::parse(&text, single, &LoadOptions::default())?;
            return HumanReference::build(&ds, set, vec![single.display().to_string()]);
        }
    }
    let ds = traces::load_many(paths, &LoadOptions::default())?;
    HumanReference::build(
        &ds,
        set,
        paths.iter().map(|p| p.display().to_string()).collect(),
    )
}
