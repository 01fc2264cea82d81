//! Evaluating one candidate inside the loop: the [`Bench`] (what every evaluation task shares)
//! runs a program on its iteration's train batch in the cascade's stages, with its reflection,
//! and validates new bests on the validation tasks. The work itself is
//! [`crate::evolve::evaluate`]'s; this file adds the run's batch plan, seeds and cascade bars.

use std::sync::Arc;
use std::time::Instant;

use crate::evolve::archive::program::Program;
use crate::evolve::config::RunConfig;
use crate::evolve::context::RunContext;
use crate::evolve::evaluate::{
    evaluate_candidate, evaluate_in_stages, program_metrics, rank, CandidateOutcome, StageOne,
    Staged, TaskContext,
};
use crate::evolve::mutation::reflection::{self, Evidence};
use crate::evolve::rundir::checkpoint::State;
use crate::evolve::rundir::runlog::{EvalMetrics, FailureInfo, PersonaOutcome};
use crate::evolve::schedule::{BatchPlan, Schedule};
use crate::fitness::score::{Scorer, Weights};
use crate::llm::ChatModel;
use crate::rng::derive_seed;

/// What evaluating a candidate needs, shared by the tasks that evaluate candidates in parallel.
#[derive(Clone)]
pub(super) struct Bench {
    pub(super) ctx: Arc<RunContext>,
    pub(super) scorer: Arc<Scorer>,
    pub(super) schedule: Schedule,
    pub(super) train: Arc<Vec<TaskContext>>,
    pub(super) val: Arc<Vec<TaskContext>>,
    pub(super) reflection_model: Option<Arc<dyn ChatModel>>,
    /// Where the progress of its batches goes.
    pub(super) control: super::control::RunControl,
}

/// A scored candidate, before it is recorded.
pub(super) struct Scored {
    /// Its metrics: of every episode, or of the cascade's first stage when it stopped there.
    pub(super) metrics: EvalMetrics,
    /// The score of the cascade's first stage (None without one).
    pub(super) stage_score: Option<f64>,
    /// The bar that stage had to reach (None: it played in full whatever its score).
    pub(super) bar: Option<f64>,
    pub(super) personas: Vec<PersonaOutcome>,
    pub(super) reflection: String,
    pub(super) plan: BatchPlan,
    pub(super) tasks: Vec<String>,
    /// Seconds the evaluation took (sandbox, episodes, scoring; not the reflection or the
    /// validation).
    pub(super) seconds: f64,
    /// The fingerprint of each scored episode with its task (kept when the run retrains its
    /// discriminator, to rescore the candidate).
    pub(super) fingerprints: Vec<(String, Vec<f64>)>,
}

/// The result of evaluating a candidate.
pub(super) enum Evaluation {
    Scored(Box<Scored>),
    /// Stopped by the cascade after its first stage, whose score was below the bar.
    Stopped {
        scored: Box<Scored>,
        stage_score: f64,
        bar: f64,
    },
    Failed(FailureInfo),
    Infrastructure(String),
}

impl Bench {
    /// The cascade's bar for a child of iteration `k` proposed from `state`: the configured
    /// quantile of the stage-1 scores recorded on its batch, less the margin; None (play in
    /// full) with the cascade off, or when nothing was scored on its batch yet.
    pub(super) fn cascade_bar(&self, state: &State, k: u64) -> Option<f64> {
        let s = &self.ctx.cfg.search;
        if !s.cascade {
            return None;
        }
        let plan = self.schedule.plan(k, self.train.len());
        let refs = state.stage_scores.get(&self.stage_key(&plan))?;
        Some(quantile(refs, s.cascade_quantile)? - s.cascade_margin)
    }

    /// The key of a batch's stage-1 scores: its task ids.
    fn stage_key(&self, plan: &BatchPlan) -> String {
        plan.task_indices
            .iter()
            .map(|&i| self.train[i].task_id.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Evaluate `program` on iteration `k`'s batch (the state is only read), in the cascade's
    /// two stages when it is on: below `bar` after the first, it stops there.
    pub(super) async fn evaluate(self, k: u64, program: Program, bar: Option<f64>) -> Evaluation {
        let started = Instant::now();
        let cfg = &self.ctx.cfg;
        let plan = self.schedule.plan(k, self.train.len());
        let batch: Vec<TaskContext> = plan
            .task_indices
            .iter()
            .map(|&i| self.train[i].clone())
            .collect();
        let metric = cfg.archive.fitness_metric.clone();
        let score = move |m: &EvalMetrics| {
            let pm = program_metrics(m);
            pm.get(&metric)
                .or(pm.get("combined"))
                .copied()
                .unwrap_or(0.0)
        };
        // the first stage is scored with the final weights whatever the curriculum's N, so
        // its scores on a batch compare across epochs
        let stage = StageOne {
            personas: cfg.search.cascade_personas,
            weights: final_weights(cfg),
            score: &score,
            bar,
        };
        let label = format!("iteration {k}: {}", program.id);
        let report = self.control.batch_reporter(k, cfg.search.iterations, false);
        let staged = evaluate_in_stages(
            &program.code,
            &batch,
            plan.n_personas,
            plan.weights(),
            &self.ctx.generator,
            self.ctx.play(false, &label, Some(&report)),
            &self.scorer,
            derive_seed(cfg.search.seed, "crn"),
            cfg.search.cascade.then_some(&stage),
        )
        .await;
        let (stage_score, stopped) = (staged.stage_score, staged.stopped);
        match staged.outcome {
            CandidateOutcome::Infrastructure(why) => Evaluation::Infrastructure(why),
            CandidateOutcome::Failed(f) => Evaluation::Failed(f),
            CandidateOutcome::Scored {
                mut metrics,
                personas,
                persona_records,
                episodes,
                p_human,
                fingerprints,
            } => {
                rank(&mut metrics, cfg.fitness.select_by, final_weights(cfg));
                let kept = kept_fingerprints(&episodes, &fingerprints);
                let evidence = Evidence {
                    personas: &persona_records,
                    episodes: &episodes,
                    p_human: &p_human,
                    fingerprints: &fingerprints,
                    metrics: &metrics,
                    context: batch.first().map(|t| t.context.as_str()).unwrap_or(""),
                };
                let seconds = started.elapsed().as_secs_f64();
                let tasks: Vec<String> = batch.iter().map(|t| t.task_id.clone()).collect();
                if let (true, Some(stage_score), Some(bar)) = (stopped, stage_score, bar) {
                    // no reflection: a stopped child never enters the archive to carry one
                    return Evaluation::Stopped {
                        stage_score,
                        bar,
                        scored: Box::new(Scored {
                            metrics,
                            stage_score: Some(stage_score),
                            bar: Some(bar),
                            personas,
                            reflection: String::new(),
                            tasks,
                            plan,
                            seconds,
                            fingerprints: kept,
                        }),
                    };
                }
                let label = format!("iteration {k}: {}: reflection", program.id);
                let reflection = crate::simulate::batch::join_reporting(
                    &label,
                    "answers",
                    vec![reflection::reflect(
                        &self.scorer,
                        &evidence,
                        self.reflection_model.as_deref(),
                    )],
                    Some(&report),
                )
                .await
                .pop()
                .unwrap_or_default();
                Evaluation::Scored(Box::new(Scored {
                    metrics,
                    stage_score,
                    bar,
                    personas,
                    reflection,
                    tasks,
                    plan,
                    seconds,
                    fingerprints: kept,
                }))
            }
        }
    }
}

impl Bench {
    /// The validation of `code` in the cascade's two stages when it is on: below `bar` after
    /// the first (the first personas of every validation task), it stops there.
    pub(super) async fn validate_in_stages(
        &self,
        id: &str,
        code: &str,
        bar: Option<f64>,
    ) -> Staged {
        let cfg = &self.ctx.cfg;
        let label = format!("validation of {id}");
        let report = self.control.batch_reporter(0, cfg.search.iterations, false);
        let combined = |m: &EvalMetrics| m.combined;
        let weights = Weights::new(self.schedule.lambda_h, self.schedule.lambda_b);
        let stage = StageOne {
            personas: cfg.search.cascade_personas,
            weights,
            score: &combined,
            bar,
        };
        evaluate_in_stages(
            code,
            &self.val,
            self.schedule.n_personas,
            weights,
            &self.ctx.generator,
            self.ctx.play(true, &label, Some(&report)),
            &self.scorer,
            derive_seed(cfg.search.seed, "validation"),
            cfg.search.cascade.then_some(&stage),
        )
        .await
    }

    /// The validation of `code`: final N, fixed weights, the validation tasks.
    pub(super) async fn validate(&self, id: &str, code: &str) -> CandidateOutcome {
        let label = format!("validation of {id}");
        let report = self
            .control
            .batch_reporter(0, self.ctx.cfg.search.iterations, false);
        evaluate_candidate(
            code,
            &self.val,
            self.schedule.n_personas,
            Weights::new(self.schedule.lambda_h, self.schedule.lambda_b),
            &self.ctx.generator,
            self.ctx.play(true, &label, Some(&report)),
            &self.scorer,
            derive_seed(self.ctx.cfg.search.seed, "validation"),
        )
        .await
    }
}

/// The `q`-quantile of `xs` (linear between order statistics); None when `xs` is empty.
fn quantile(xs: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(v[lo] + (v[hi] - v[lo]) * (pos - lo as f64))
}

/// The fingerprint of each scored episode (in episode order) with its task.
pub(super) fn kept_fingerprints(
    episodes: &[crate::simulate::episode::record::Episode],
    fingerprints: &[Option<crate::fitness::features::Fingerprint>],
) -> Vec<(String, Vec<f64>)> {
    episodes
        .iter()
        .zip(fingerprints)
        .filter_map(|(e, f)| f.map(|f| (e.task_id.clone(), f.0.to_vec())))
        .collect()
}

/// The final weights (validation, `ppol eval`, and ranking with `select_by = "fixed"`).
pub(super) fn final_weights(cfg: &RunConfig) -> Weights {
    Weights::new(cfg.fitness.lambda_h, cfg.fitness.lambda_b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cascade_bar_is_a_quantile_of_the_batch_scores() {
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[0.3], 0.9), Some(0.3));
        let xs = [0.4, 0.1, 0.3, 0.2, f64::NAN];
        assert_eq!(quantile(&xs, 0.0), Some(0.1));
        assert_eq!(quantile(&xs, 1.0), Some(0.4));
        assert!((quantile(&xs, 0.5).unwrap() - 0.25).abs() < 1e-12);
        assert!((quantile(&xs, 0.9).unwrap() - 0.37).abs() < 1e-12);
    }
}
