//! `[fitness]`: how candidates are scored — personas per task and its curriculum, the weights
//! of human-likeness and coverage, the coverage space, the discriminator and its folds — with
//! their defaults and their check. `evolve` turns them into its schedule; `fitness` owns them.

use serde::{Deserialize, Serialize};

use crate::fitness::discriminator::ForestParams;
use crate::limits::{self, check};
use crate::{Error, Result};

/// Fitness settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FitnessSection {
    /// Final personas per task.
    #[schemars(range(min = 1, max = crate::limits::MAX_PERSONAS))]
    pub n_personas: usize,
    /// Train tasks per evaluation.
    #[schemars(range(min = 1, max = crate::limits::MAX_BATCH))]
    pub batch_size: usize,
    /// Use the curriculum 5→8→10.
    pub curriculum: bool,
    /// (epoch threshold, N) pairs.
    pub n_personas_schedule: Vec<(u64, usize)>,
    /// What human-likeness (HL) the search climbs: `paper` (the mean P(human) of the run's
    /// discriminator, the reference's objective) or `population` (how hard the candidate's set of
    /// dialogues is to tell from the search humans as a whole: fresh classifiers are
    /// cross-validated per candidate, humans against its dialogues, and HL = 2·(1 − AUC),
    /// clamped to [0, 1]; it sees the proportions of a mixture of behaviours; needs at least
    /// 10 search humans in 2 task groups).
    pub objective: Objective,
    /// Weight of human-likeness (validation and eval; training uses 1 − λb·ramp).
    #[schemars(range(min = 0.0, max = 1.0))]
    pub lambda_h: f64,
    /// Weight of coverage.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub lambda_b: f64,
    /// Standardise the coverage space by the human mean/std. Default false, as in the paper's
    /// τ² runs (`PPol.evolve`'s own default is true).
    pub standardize: bool,
    /// K-means centroids replacing the human cloud (0 = off). Default 5: against a cloud of many
    /// humans, N ≈ 5–10 personas leave the two-sided Chamfer error above its saturation point
    /// (coverage 0, no gradient); the reference offers the same option for that reason. Set
    /// `standardize = true, n_clusters = 0` to reproduce `PPol.evolve`'s defaults.
    #[schemars(range(max = crate::limits::MAX_CLUSTERS))]
    pub n_clusters: usize,
    /// How the archive ranks programs: `fixed` (λh·HL + λb·coverage with the final weights, so
    /// programs scored at different curriculum stages are comparable; the reference ranks
    /// scores of different curriculum stages against each other) or `ramp` (the reference's
    /// ramped training score).
    pub select_by: SelectBy,
    /// Discriminator settings.
    pub discriminator: ForestParams,
    /// Folds of the grouped held-out AUC.
    #[schemars(range(min = 2, max = crate::limits::MAX_FOLDS))]
    pub folds: usize,
    /// Retrain the discriminator every K iterations (0 = never, the default): the current
    /// elites' dialogues join the simulated side, and the archive, the batch bests and the run's
    /// best are rescored with it so scores stay comparable. Off by default: on the offline
    /// airline setup (6 seeds, 30 iterations, README) the independent audit did not find the
    /// retrained search more human than the fixed one.
    #[schemars(range(max = crate::limits::MAX_ITERATIONS))]
    pub retrain_every: u64,
    /// How many of the archive's best programs give their dialogues to a retraining.
    #[schemars(range(min = 1, max = crate::limits::MAX_POPULATION))]
    pub retrain_elites: usize,
    /// Bootstrap resamples of the intervals of `ppol eval`'s audit (each refits the
    /// cross-validation: the audit's cost grows with it).
    #[schemars(range(min = 1, max = crate::limits::MAX_BOOTSTRAP))]
    pub audit_bootstrap: usize,
    /// Pairs per row shown to the LLM judge of `ppol eval`'s audit when the run has a model
    /// (0 = no judge; offline runs have none).
    #[schemars(range(max = crate::limits::MAX_JUDGE_PAIRS))]
    pub judge_pairs: usize,
    /// The judge's prompt file, with `{user_a}` and `{user_b}` (default: the shipped
    /// `fitness/judge_prompt.md`).
    pub judge_prompt: Option<std::path::PathBuf>,
}

impl Default for FitnessSection {
    fn default() -> Self {
        FitnessSection {
            n_personas: 10,
            batch_size: 5,
            curriculum: true,
            n_personas_schedule: vec![(1, 5), (2, 8), (3, 10)],
            objective: Objective::Paper,
            lambda_h: 0.5,
            lambda_b: 0.5,
            standardize: false,
            n_clusters: 5,
            select_by: SelectBy::Fixed,
            discriminator: ForestParams::default(),
            folds: 5,
            retrain_every: 0,
            retrain_elites: 10,
            audit_bootstrap: crate::fitness::audit::AuditOptions::BOOTSTRAP,
            judge_pairs: crate::fitness::audit::JudgeOptions::PAIRS,
            judge_prompt: None,
        }
    }
}

impl FitnessSection {
    /// How a run prepares the human cloud for coverage (k-means seed 0, as the reference).
    pub fn coverage(&self) -> crate::fitness::coverage::CoverageOptions {
        crate::fitness::coverage::CoverageOptions {
            standardize: self.standardize,
            n_clusters: self.n_clusters,
            seed: 0,
        }
    }

    /// Check the values serde cannot (the error names the key).
    pub fn validate(&self) -> Result<()> {
        check(
            "fitness.n_personas",
            self.n_personas,
            1,
            limits::MAX_PERSONAS,
        )?;
        check("fitness.batch_size", self.batch_size, 1, limits::MAX_BATCH)?;
        for (i, (threshold, n)) in self.n_personas_schedule.iter().enumerate() {
            if let Err(why) = limits::in_range(n, &1, &limits::MAX_PERSONAS) {
                return Err(Error::config(
                    format!("fitness.n_personas_schedule[{i}]"),
                    format!("({threshold}, {n}): the number of personas {why}"),
                ));
            }
        }
        check(
            "fitness.n_clusters",
            self.n_clusters,
            0,
            limits::MAX_CLUSTERS,
        )?;
        limits::fraction("fitness.lambda_h", self.lambda_h, true)?;
        limits::fraction("fitness.lambda_b", self.lambda_b, true)?;
        if self.lambda_h + self.lambda_b <= 0.0 {
            return Err(Error::config(
                "fitness.lambda_h",
                "fitness.lambda_h and fitness.lambda_b are both 0: every score would be 0",
            ));
        }
        let d = &self.discriminator;
        check(
            "fitness.discriminator.n_trees",
            d.n_trees,
            1,
            limits::MAX_TREES,
        )?;
        if d.max_depth == Some(0) {
            return Err(Error::config(
                "fitness.discriminator.max_depth",
                "must be at least 1 (leave it out for unlimited depth)",
            ));
        }
        if let Some(depth) = d.max_depth {
            check(
                "fitness.discriminator.max_depth",
                depth,
                1,
                limits::MAX_DEPTH,
            )?;
        }
        limits::at_least(
            "fitness.discriminator.min_samples_split",
            d.min_samples_split,
            2,
        )?;
        limits::at_least(
            "fitness.discriminator.min_samples_leaf",
            d.min_samples_leaf,
            1,
        )?;
        check(
            "fitness.retrain_every",
            self.retrain_every,
            0,
            limits::MAX_ITERATIONS,
        )?;
        check(
            "fitness.retrain_elites",
            self.retrain_elites,
            1,
            limits::MAX_POPULATION,
        )?;
        check(
            "fitness.audit_bootstrap",
            self.audit_bootstrap,
            1,
            limits::MAX_BOOTSTRAP,
        )?;
        check(
            "fitness.judge_pairs",
            self.judge_pairs,
            0,
            limits::MAX_JUDGE_PAIRS,
        )?;
        check("fitness.folds", self.folds, 2, limits::MAX_FOLDS)
    }
}

/// Which score the archive ranks programs by.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SelectBy {
    /// Final weights for every stage.
    #[default]
    Fixed,
    /// The reference's ramped weights.
    Ramp,
}

/// The human-likeness a search climbs (`[fitness] objective`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    /// The paper's: the mean P(human) of the run's discriminator.
    #[default]
    Paper,
    /// A classifier two-sample test per candidate: 2·(1 − cross-validated AUC), clamped.
    Population,
}

impl Objective {
    /// The name in a configuration.
    pub fn name(self) -> &'static str {
        match self {
            Objective::Paper => "paper",
            Objective::Population => "population",
        }
    }
}
