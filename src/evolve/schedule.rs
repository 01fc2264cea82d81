//! What each iteration evaluates: the sliding batch of train tasks, the persona count N from
//! the curriculum, and the score weights (the reference's semantics, ppol-spec §5.1–5.4).

use serde::{Deserialize, Serialize};

use crate::fitness::score::Weights;

/// The curriculum and batch settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// Final personas per task.
    pub n_personas: usize,
    /// Tasks per train batch.
    pub batch_size: usize,
    /// Use the curriculum (else always `n_personas`).
    pub curriculum: bool,
    /// (epoch threshold, N) pairs; with more than 100 train tasks, stages advance every
    /// `large_pool_stage_iterations` iterations instead.
    pub n_personas_schedule: Vec<(u64, usize)>,
    /// Iterations per curriculum stage for large train pools.
    pub large_pool_stage_iterations: u64,
    /// Weight of coverage at the final N (λb); λh = 1 − λb·min(1, N/N_final) in training.
    pub lambda_b: f64,
    /// Weight of human-likeness in validation and `eval` (fixed weights there).
    pub lambda_h: f64,
}

impl Default for Schedule {
    /// The schedule of the default `[fitness]` settings (which own the defaults).
    fn default() -> Self {
        let f = crate::fitness::settings::FitnessSection::default();
        Schedule {
            n_personas: f.n_personas,
            batch_size: f.batch_size,
            curriculum: f.curriculum,
            n_personas_schedule: f.n_personas_schedule,
            large_pool_stage_iterations: 20,
            lambda_b: f.lambda_b,
            lambda_h: f.lambda_h,
        }
    }
}

/// The reference's threshold above which the curriculum is keyed by iteration.
pub const LARGE_TRAIN_POOL: usize = 100;

/// Where iteration k (1-based) sits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchPlan {
    /// Curriculum epoch (1-based).
    pub epoch: u64,
    /// Batch within the epoch (1-based).
    pub batch_in_epoch: u64,
    /// Batches per epoch.
    pub steps_per_epoch: u64,
    /// Indices into the train task list.
    pub task_indices: Vec<usize>,
    /// Personas per task.
    pub n_personas: usize,
    /// Weight of human-likeness.
    pub lambda_h: f64,
    /// Weight of coverage.
    pub lambda_b: f64,
}

impl BatchPlan {
    /// The score weights of this iteration.
    pub fn weights(&self) -> Weights {
        Weights::new(self.lambda_h, self.lambda_b)
    }
}

impl Schedule {
    /// The plan of iteration `k` (1-based) over `n_tasks` train tasks.
    pub fn plan(&self, k: u64, n_tasks: usize) -> BatchPlan {
        assert!(
            k >= 1 && n_tasks >= 1,
            "iteration and task count start at 1"
        );
        let bs = self.batch_size.clamp(1, n_tasks);
        let steps = n_tasks.div_ceil(bs) as u64;
        let batch_in_epoch = (k - 1) % steps + 1;
        let epoch = (k - 1) / steps + 1;
        let start = (batch_in_epoch - 1) as usize * bs;
        let task_indices = (0..bs).map(|i| (start + i) % n_tasks).collect();
        let n = self.n_for(epoch, k, n_tasks);
        let lambda_b = self.lambda_b * (n as f64 / self.n_personas.max(1) as f64).min(1.0);
        BatchPlan {
            epoch,
            batch_in_epoch,
            steps_per_epoch: steps,
            task_indices,
            n_personas: n,
            lambda_h: 1.0 - lambda_b,
            lambda_b,
        }
    }

    /// N for an epoch / iteration.
    pub fn n_for(&self, epoch: u64, k: u64, n_tasks: usize) -> usize {
        if !self.curriculum || self.n_personas_schedule.is_empty() {
            return self.n_personas;
        }
        let mut sched = self.n_personas_schedule.clone();
        sched.sort_by_key(|(t, _)| *t);
        if n_tasks > LARGE_TRAIN_POOL {
            let stage = ((k - 1) / self.large_pool_stage_iterations.max(1)) as usize;
            return sched[stage.min(sched.len() - 1)].1;
        }
        sched
            .iter()
            .rev()
            .find(|(t, _)| *t <= epoch)
            .map_or(self.n_personas, |(_, n)| *n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_batch_wraps_from_the_front() {
        let s = Schedule {
            batch_size: 4,
            ..Default::default()
        };
        // 10 tasks, batch 4 → 3 steps; the third batch is [8, 9, 0, 1]
        let p = s.plan(3, 10);
        assert_eq!((p.epoch, p.batch_in_epoch, p.steps_per_epoch), (1, 3, 3));
        assert_eq!(p.task_indices, [8, 9, 0, 1]);
        let p = s.plan(4, 10);
        assert_eq!((p.epoch, p.batch_in_epoch), (2, 1));
        assert_eq!(p.task_indices, [0, 1, 2, 3]);
        // batch larger than the pool is clamped
        assert_eq!(
            Schedule {
                batch_size: 9,
                ..Default::default()
            }
            .plan(1, 3)
            .task_indices,
            [0, 1, 2]
        );
    }

    #[test]
    fn curriculum_and_weight_ramp_match_the_reference() {
        let s = Schedule::default();
        // 5 tasks, batch 5: one batch per epoch
        let ws: Vec<(usize, f64, f64)> = (1..=4)
            .map(|k| {
                let p = s.plan(k, 5);
                (p.n_personas, p.lambda_h, p.lambda_b)
            })
            .collect();
        assert_eq!(
            ws,
            [
                (5, 0.75, 0.25),
                (8, 0.6, 0.4),
                (10, 0.5, 0.5),
                (10, 0.5, 0.5)
            ]
        );
        // large pool: keyed by iteration, 20 per stage
        assert_eq!(s.plan(20, 150).n_personas, 5);
        assert_eq!(s.plan(21, 150).n_personas, 8);
        assert_eq!(s.plan(41, 150).n_personas, 10);
        let off = Schedule {
            curriculum: false,
            ..Default::default()
        };
        assert_eq!(off.plan(1, 5).n_personas, 10);
    }
}
