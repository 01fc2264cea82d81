//! Scoring simulated dialogues against humans: P(human) from the discriminator, Chamfer
//! coverage of the human cloud per task, their weighted combination, and Dice D1–D4.
//!
//! One [`Scorer`] holds a run's fixed scoring context (the human reference, its prepared cloud,
//! the discriminator) and scores [`Rollout`]s — a simulated dialogue with its task and whether
//! it succeeded, or a conversation that failed to run. [`score`] and [`score_fingerprints`]
//! score dialogues once, without a run (`ppol score`). Both measure through the same code, and
//! the weighted combination λh·human_likeness + λb·coverage is computed in one place only:
//! [`Weights::combine`].

use std::path::Path;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::dialogue::Dialogue;
use crate::fitness::coverage::{dice, Chamfer, CoverageOptions, Dice, GroupedCoverage, HumanCloud};
use crate::fitness::discriminator::{Discriminator, ForestParams};
use crate::fitness::features::{
    fingerprint, fingerprint_many, FeatureSet, Fingerprint, FEATURE_NAMES,
};
use crate::fitness::population::PopulationTest;
use crate::fitness::reference::HumanReference;
use crate::fitness::settings::Objective;
use crate::fitness::traces::{self, LoadOptions};
use crate::{Error, Result};

/// The weights of the score: λh on human-likeness, λb on coverage.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Weights {
    /// Weight of human-likeness (mean P(human)).
    pub lambda_h: f64,
    /// Weight of coverage (mean Chamfer coverage over tasks).
    pub lambda_b: f64,
}

impl Weights {
    /// The paper's fixed weights (0.5, 0.5), used by the `ppol eval` table.
    pub const EQUAL: Weights = Weights {
        lambda_h: 0.5,
        lambda_b: 0.5,
    };

    /// Weights λh, λb.
    pub fn new(lambda_h: f64, lambda_b: f64) -> Self {
        Weights { lambda_h, lambda_b }
    }

    /// λh·human_likeness + λb·coverage: the one place the score is combined.
    pub fn combine(&self, human_likeness: f64, coverage: f64) -> f64 {
        self.lambda_h * human_likeness + self.lambda_b * coverage
    }
}

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

impl ScoreOptions {
    /// The weights.
    pub fn weights(&self) -> Weights {
        Weights::new(self.lambda_h, self.lambda_b)
    }
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
    let m = measure(reference, &cloud, discriminator, None, points);
    let weights = opts.weights();
    Ok(Score {
        human_likeness: m.human_likeness,
        coverage: m.coverage.mean,
        combined: weights.combine(m.human_likeness, m.coverage.mean),
        lambda_h: weights.lambda_h,
        lambda_b: weights.lambda_b,
        dice: m.dice,
        counts: ScoreCounts {
            n_dialogues: points.len(),
            n_without_user_turns,
            n_groups: m.coverage.groups.len(),
            n_human_points: cloud.len(),
            n_human_dialogues: reference.n_dialogues,
        },
        d_ref: cloud.d_ref,
        standardized: opts.coverage.standardize,
        feature_set: reference.feature_set,
        coverage_by_group: m.coverage.groups,
    })
}

/// What the discriminator and the human cloud say about a set of fingerprints.
struct Measured {
    /// P(human) per fingerprint (the run's discriminator's, or with the population objective
    /// the out-of-fold P(human) of its test).
    p_human: Vec<f64>,
    /// Mean P(human) (0 for no fingerprints).
    human_likeness: f64,
    /// Chamfer coverage per group and its mean.
    coverage: GroupedCoverage,
    /// Dice of the mean fingerprint against the human mean.
    dice: Dice,
}

fn measure(
    reference: &HumanReference,
    cloud: &HumanCloud,
    discriminator: &Discriminator,
    population: Option<&PopulationTest>,
    points: &[(String, Fingerprint)],
) -> Measured {
    let fps: Vec<Fingerprint> = points.iter().map(|(_, f)| *f).collect();
    let (p_human, human_likeness) = match population {
        // the population test's out-of-fold P(human): which dialogues give the set away
        Some(test) => {
            let m = test.measure_each(points);
            let p = if m.p_human.len() == points.len() {
                m.p_human
            } else {
                vec![0.0; points.len()]
            };
            (p, m.population.human_likeness)
        }
        None => {
            let rows: Vec<Vec<f64>> = fps.iter().map(|f| f.0.to_vec()).collect();
            let p = if rows.is_empty() {
                Vec::new()
            } else {
                discriminator.p_human(&rows)
            };
            let mean = if p.is_empty() {
                0.0
            } else {
                p.iter().sum::<f64>() / p.len() as f64
            };
            (p, mean)
        }
    };
    Measured {
        human_likeness,
        coverage: cloud.chamfer_by_group(points),
        dice: dice(&reference.mean_fingerprint(), &fps),
        p_human,
    }
}

/// One simulated conversation as fitness sees it: the task it belongs to (its coverage
/// group), its dialogue (`None` when the conversation failed to run: it counts against the
/// success rate and as failed, and is not scored) and whether it succeeded.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollout {
    /// Task id (the coverage group).
    pub task_id: String,
    /// The dialogue, when the conversation ran to an end.
    pub dialogue: Option<Dialogue>,
    /// Whether the task was accomplished.
    pub success: bool,
}

/// The score of a batch of rollouts.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchScore {
    /// The objective's human-likeness of the rollouts that ran (0 when none ran): with
    /// [`Objective::Paper`] the mean P(human), pooled, not per task; with
    /// [`Objective::Population`] how hard the set is to tell from the humans (see
    /// [`crate::fitness::population`]).
    pub human_likeness: f64,
    /// Mean over tasks of the two-sided Chamfer coverage.
    pub coverage: f64,
    /// [`Weights::combine`] of the two.
    pub combined: f64,
    /// The weights used.
    pub weights: Weights,
    /// Share of rollouts that succeeded (failed ones included; 0 for no rollouts).
    pub success_rate: f64,
    /// Rollouts that ran and were scored.
    pub n_scored: usize,
    /// Rollouts that failed to run.
    pub n_failed: usize,
    /// Distinct tasks among all rollouts.
    pub n_tasks: usize,
    /// Dice D1–D4 and overall of the scored rollouts' mean fingerprint against the human mean.
    pub dice: Dice,
    /// P(human) per rollout (None for failed ones), in rollout order.
    pub p_human: Vec<Option<f64>>,
    /// Fingerprint per rollout (None for failed ones), in rollout order.
    pub fingerprints: Vec<Option<Fingerprint>>,
}

/// The fixed scoring context of a run: the human reference, its prepared cloud, the
/// discriminator and, with the population objective, the humans' side of its test.
pub struct Scorer {
    /// The human reference.
    pub reference: HumanReference,
    /// The prepared human cloud.
    pub cloud: HumanCloud,
    /// The run's discriminator.
    pub discriminator: Discriminator,
    /// The population test of [`Objective::Population`] (None: the paper's mean P(human)).
    pub population: Option<PopulationTest>,
}

impl Scorer {
    /// The scoring context: the human cloud is prepared from `reference` with `coverage`
    /// (standardised or raw, optionally replaced by k-means centroids). The discriminator must
    /// have been trained on the reference's feature set.
    pub fn new(
        reference: HumanReference,
        discriminator: Discriminator,
        coverage: CoverageOptions,
    ) -> Result<Self> {
        discriminator.check_feature_set(reference.feature_set.name())?;
        let cloud = HumanCloud::new(&reference, coverage)?;
        Ok(Scorer {
            reference,
            cloud,
            discriminator,
            population: None,
        })
    }

    /// The scorer with `objective`'s human-likeness (the population objective prepares its
    /// test from the reference, and refuses too few humans with the counts).
    pub fn with_objective(mut self, objective: Objective) -> Result<Self> {
        self.population = match objective {
            Objective::Paper => None,
            Objective::Population => Some(PopulationTest::new(&self.reference)?),
        };
        Ok(self)
    }

    /// The objective this scorer measures human-likeness by.
    pub fn objective(&self) -> Objective {
        if self.population.is_some() {
            Objective::Population
        } else {
            Objective::Paper
        }
    }

    /// Score rollouts: P(human) pooled over the rollouts that ran, coverage per task, the
    /// weighted combination, the success rate over all rollouts.
    pub fn score(&self, rollouts: &[Rollout], weights: Weights) -> BatchScore {
        let ran: Vec<(usize, &Dialogue)> = rollouts
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.dialogue.as_ref().map(|d| (i, d)))
            .collect();
        let set = self.reference.feature_set;
        let fps: Vec<Fingerprint> = ran.par_iter().map(|(_, d)| fingerprint(d, set)).collect();
        let points: Vec<(String, Fingerprint)> = ran
            .iter()
            .zip(&fps)
            .map(|((i, _), f)| (rollouts[*i].task_id.clone(), *f))
            .collect();
        let m = measure(
            &self.reference,
            &self.cloud,
            &self.discriminator,
            self.population.as_ref(),
            &points,
        );
        let mut p_human = vec![None; rollouts.len()];
        let mut fingerprints = vec![None; rollouts.len()];
        for (j, (i, _)) in ran.iter().enumerate() {
            p_human[*i] = Some(m.p_human[j]);
            fingerprints[*i] = Some(fps[j]);
        }
        let n_tasks = rollouts
            .iter()
            .map(|r| r.task_id.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let successes = rollouts.iter().filter(|r| r.success).count();
        BatchScore {
            human_likeness: m.human_likeness,
            coverage: m.coverage.mean,
            combined: weights.combine(m.human_likeness, m.coverage.mean),
            weights,
            success_rate: if rollouts.is_empty() {
                0.0
            } else {
                successes as f64 / rollouts.len() as f64
            },
            n_scored: ran.len(),
            n_failed: rollouts.len() - ran.len(),
            n_tasks,
            dice: m.dice,
            p_human,
            fingerprints,
        }
    }

    /// A short, computed critique (used offline, and as context for LLM reflection): which
    /// features of a fingerprint sit furthest from the human mean, in human std units, largest
    /// first.
    pub fn feature_gaps(&self, fp: &Fingerprint, top: usize) -> Vec<(String, f64)> {
        let mut gaps: Vec<(String, f64)> = FEATURE_NAMES
            .iter()
            .enumerate()
            .map(|(j, n)| {
                let sd = if self.reference.std[j] < 1e-9 {
                    1.0
                } else {
                    self.reference.std[j]
                };
                (n.to_string(), (fp.0[j] - self.reference.mean[j]) / sd)
            })
            .collect();
        gaps.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
        gaps.truncate(top);
        gaps
    }
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
    let (human, human_groups) = human_rows(reference);
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

/// The human side of a discriminator's training: the reference's cloud rows and their groups
/// (task id, else dialogue id).
pub fn human_rows(reference: &HumanReference) -> (Vec<Vec<f64>>, Vec<String>) {
    reference
        .cloud_rows()
        .map(|r| {
            (
                r.features.clone(),
                r.task_id.clone().unwrap_or_else(|| r.id.clone()),
            )
        })
        .unzip()
}

/// Load a human reference from a saved reference JSON, or build it from trace files (with
/// the dialogues the load left out, see [`traces::Skipped`]). A saved reference must have been
/// made with `set`.
pub fn load_reference(
    paths: &[std::path::PathBuf],
    set: FeatureSet,
) -> Result<(HumanReference, Vec<traces::Skipped>)> {
    if let [single] = paths {
        if single != Path::new("-") {
            let text = traces::read_text(single)?;
            let json = text.strip_prefix('\u{feff}').unwrap_or(&text);
            if HumanReference::sniff(json) {
                let r = HumanReference::from_json(json, single)?;
                if r.feature_set != set {
                    return Err(Error::FeatureSetMismatch {
                        what: format!("human reference '{}'", single.display()),
                        found: r.feature_set.name().into(),
                        expected: set.name().into(),
                    });
                }
                return Ok((r, Vec::new()));
            }
            let loaded = traces::parse_checked(&text, single, &LoadOptions::default())?;
            let r =
                HumanReference::build(&loaded.dialogues, set, vec![single.display().to_string()])?;
            return Ok((r, loaded.skipped));
        }
    }
    let loaded = traces::load_many_checked(paths, &LoadOptions::default())?;
    let r = HumanReference::build(
        &loaded.dialogues,
        set,
        paths.iter().map(|p| p.display().to_string()).collect(),
    )?;
    Ok((r, loaded.skipped))
}
