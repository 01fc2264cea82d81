//! A population-level human-likeness (`[fitness] objective = "population"`): how hard a
//! candidate's *set* of dialogues is to tell from the search humans as a whole.
//!
//! Per candidate, fresh classifiers — a small random forest and the audit's logistic
//! regression — are cross-validated on the search humans (label 1) against the candidate's
//! dialogues (label 0), folds grouped by task and stratified by class, exactly the audit's test
//! ([`crate::fitness::audit::two_sample`]) at a per-candidate price. With `a` the mean of
//! the two AUCs, the human-likeness is `clamp(2·(1 − a), 0, 1)`: 1 when the classifiers do no
//! better than chance, 0 when they always tell the two apart.
//!
//! Unlike the paper's mean P(human) — a forest trained once on humans against the *plain*
//! simulator, which rewards "unlike the plain simulator" and is maximised by putting every
//! persona in its most human leaf — the test is refitted on each candidate, so whatever
//! separates the candidate from the humans is found and costs it: a mode the humans lack, a
//! behaviour they show that the candidate never does, or the wrong *proportions* of a mixture of
//! behaviours. The audit's humans (`run.human_holdout`) never reach it: the test is built from
//! the run's reference, which holds only the search humans.
//!
//! Fixed seeds: the same dialogues always score the same.

use serde::{Deserialize, Serialize};

use crate::fitness::audit::{two_sample, MIN_DIALOGUES, MIN_GROUPS};
use crate::fitness::features::Fingerprint;
use crate::fitness::reference::HumanReference;
use crate::{Error, Result};

/// Trees of each fold's forest (the audit uses 100; the objective runs per candidate).
pub const TREES: usize = 30;

/// Folds of the cross-validation (capped by the groups of each side).
pub const FOLDS: usize = 5;

/// Cross-validations averaged per candidate.
pub const REPEATS: usize = 2;

/// The seed of the folds and forests.
const SEED: u64 = 0x504f_5055;

/// What the population test says about one set of dialogues.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Population {
    /// `clamp(2·(1 − mean AUC), 0, 1)`.
    pub human_likeness: f64,
    /// Cross-validated AUC of the random forest (None: too few groups to make two folds).
    pub forest_auc: Option<f64>,
    /// Cross-validated AUC of the logistic regression.
    pub logistic_auc: Option<f64>,
    /// Simulated dialogues measured.
    pub n: usize,
}

/// A measurement with each dialogue's out-of-fold P(human) (in the order given; empty when
/// the test could not be made): which dialogues give the set away.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// The set's test.
    pub population: Population,
    /// P(human) of each dialogue by the classifiers that did not see it.
    pub p_human: Vec<f64>,
}

/// The humans' side of the test, prepared once per run.
#[derive(Debug, Clone)]
pub struct PopulationTest {
    humans: Vec<Vec<f64>>,
    keys: Vec<String>,
}

fn group(task: &str) -> String {
    format!("task:{task}")
}

impl PopulationTest {
    /// The test against the reference's humans (its cloud: dialogues with two or more
    /// messages). Too few humans or task groups is an error that says the counts.
    pub fn new(reference: &HumanReference) -> Result<Self> {
        let (humans, keys): (Vec<Vec<f64>>, Vec<String>) = reference
            .cloud_rows()
            .map(|r| {
                let key = match &r.task_id {
                    Some(t) => group(t),
                    None => format!("human:{}", r.id),
                };
                (r.features.clone(), key)
            })
            .unzip();
        let groups = keys.iter().collect::<std::collections::BTreeSet<_>>().len();
        if humans.len() < MIN_DIALOGUES || groups < MIN_GROUPS {
            return Err(Error::Insufficient(format!(
                "the population objective ([fitness] objective = \"population\") needs at least \
                 {MIN_DIALOGUES} search human dialogues with two or more messages in at least \
                 {MIN_GROUPS} task groups; the run has {} in {groups} (of {} loaded, after the \
                 hold-out): pass more human traces with --human, lower run.human_holdout, or \
                 use objective = \"paper\"",
                humans.len(),
                reference.n_dialogues
            )));
        }
        Ok(PopulationTest { humans, keys })
    }

    /// Human dialogues the test compares against.
    pub fn n_humans(&self) -> usize {
        self.humans.len()
    }

    /// Measure a set of fingerprints, each with its task (none, or too few groups for two
    /// folds: human-likeness 0).
    pub fn measure(&self, points: &[(String, Fingerprint)]) -> Population {
        self.measure_each(points).population
    }

    /// [`measure`](Self::measure), with each dialogue's out-of-fold P(human).
    pub fn measure_each(&self, points: &[(String, Fingerprint)]) -> Measured {
        let mut x = self.humans.clone();
        let mut keys = self.keys.clone();
        let mut y = vec![true; x.len()];
        for (task, f) in points {
            x.push(f.0.to_vec());
            keys.push(group(task));
            y.push(false);
        }
        let test = if points.is_empty() {
            None
        } else {
            two_sample(&x, &y, &keys, FOLDS, TREES, REPEATS, SEED)
        };
        let n_h = self.humans.len();
        Measured {
            population: Population {
                human_likeness: test.as_ref().map_or(0.0, |t| {
                    (2.0 * (1.0 - (t.forest_auc + t.logistic_auc) / 2.0)).clamp(0.0, 1.0)
                }),
                forest_auc: test.as_ref().map(|t| t.forest_auc),
                logistic_auc: test.as_ref().map(|t| t.logistic_auc),
                n: points.len(),
            },
            p_human: test.map_or_else(Vec::new, |t| t.p_human[n_h..].to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fitness::features::N_FEATURES;

    /// Rows of a two-mode mixture (`share_a` of mode A) over `tasks` tasks, with noise.
    fn mixture(n: usize, share_a: f64, seed: u64) -> Vec<(String, Fingerprint)> {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|i| {
                let a = (i as f64 + 0.5) / n as f64 <= share_a;
                let row: [f64; N_FEATURES] = std::array::from_fn(|j| {
                    let m = if a { 0.2 } else { 0.7 } + 0.01 * j as f64;
                    m + rng.random_range(-0.15..0.15)
                });
                (format!("{}", i % 6), Fingerprint(row))
            })
            .collect()
    }

    fn test_of(points: &[(String, Fingerprint)]) -> Result<PopulationTest> {
        Ok(PopulationTest {
            humans: points.iter().map(|(_, f)| f.0.to_vec()).collect(),
            keys: points.iter().map(|(t, _)| group(t)).collect(),
        })
    }

    #[test]
    fn the_same_mixture_scores_higher_than_a_wrong_proportion_or_one_mode() {
        let t = test_of(&mixture(60, 0.7, 1)).unwrap();
        let same = t.measure(&mixture(40, 0.7, 2));
        let wrong = t.measure(&mixture(40, 0.2, 3));
        let one_mode = t.measure(&mixture(40, 1.0, 4));
        assert!(same.human_likeness > 0.6, "{same:?}");
        assert!(
            same.human_likeness > wrong.human_likeness + 0.3,
            "{same:?} {wrong:?}"
        );
        assert!(
            same.human_likeness > one_mode.human_likeness + 0.2,
            "{one_mode:?}"
        );
        assert_eq!(t.measure(&[]).human_likeness, 0.0);
        // deterministic
        assert_eq!(t.measure(&mixture(40, 0.2, 3)), wrong);
    }
}
