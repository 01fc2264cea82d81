//! Evaluating one candidate program on one batch of tasks: sandboxed generation of N personas
//! per task, one episode per persona (all concurrently), fingerprints, P(human), per-task
//! Chamfer coverage and the weighted score. Failures are data: a generation failure makes the
//! candidate `Failed`; an endpoint outage makes it `Infrastructure` (re-queued, never scored 0).

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures::future::join_all;

use crate::evolve::runlog::{EvalMetrics, FailureInfo, PersonaOutcome};
use crate::fitness::coverage::{dice, HumanCloud};
use crate::fitness::discriminator::Discriminator;
use crate::fitness::features::{fingerprint_many, Fingerprint, FEATURE_NAMES};
use crate::fitness::reference::HumanReference;
use crate::persona::Persona;
use crate::seed::{derive_seed, mix};
use crate::simulate::episode::record::{Episode, EpisodeStatus};
use crate::simulate::episode::EpisodeRunner;

/// A task as the generator sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskContext {
    /// Task id.
    pub task_id: String,
    /// The text passed as `task_context` to the generator.
    pub context: String,
}

/// What a generation attempt produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Generation {
    /// Exactly N valid personas.
    Personas(Vec<Persona>),
    /// The program failed (crash, hang, schema violation, ...).
    Failed(FailureInfo),
    /// The infrastructure failed (LLM endpoint down after retries, budget spent).
    Infrastructure(String),
}

/// Runs a generator program for a task.
#[async_trait]
pub trait PersonaGenerator: Send + Sync {
    /// Generate `n` personas for `task` with the program `code`.
    async fn generate(&self, code: &str, task: &TaskContext, n: usize, seed: u64) -> Generation;
}

/// The fixed scoring context of a run.
pub struct Scorer {
    /// The human reference.
    pub reference: HumanReference,
    /// The prepared human cloud.
    pub cloud: HumanCloud,
    /// The run's discriminator.
    pub discriminator: Discriminator,
}

/// Scored episodes.
#[derive(Debug, Clone)]
pub struct Scored {
    /// Metrics.
    pub metrics: EvalMetrics,
    /// P(human) per episode (None for failed ones), in episode order.
    pub p_human: Vec<Option<f64>>,
    /// Fingerprints per episode (None for failed ones).
    pub fingerprints: Vec<Option<Fingerprint>>,
}

impl Scorer {
    /// The scoring context: the human cloud is prepared from `reference` (standardised or raw,
    /// optionally replaced by `n_clusters` k-means centroids).
    pub fn new(
        reference: HumanReference,
        discriminator: Discriminator,
        standardize: bool,
        n_clusters: usize,
    ) -> crate::Result<Self> {
        let cloud = HumanCloud::new(
            &reference,
            crate::fitness::coverage::CoverageOptions {
                standardize,
                n_clusters,
                seed: 0,
            },
        )?;
        Ok(Scorer {
            reference,
            cloud,
            discriminator,
        })
    }

    /// Score episodes: P(human) pooled over episodes that ran, coverage per task, weighted sum.
    pub fn score(
        &self,
        episodes: &[Episode],
        lambda_h: f64,
        lambda_b: f64,
        n_personas: usize,
    ) -> Scored {
        let ok: Vec<usize> = (0..episodes.len())
            .filter(|&i| episodes[i].status == EpisodeStatus::Ok)
            .collect();
        let dialogues: Vec<_> = ok.iter().map(|&i| episodes[i].to_dialogue()).collect();
        let fps = fingerprint_many(&dialogues, self.reference.feature_set);
        let rows: Vec<Vec<f64>> = fps.iter().map(|f| f.0.to_vec()).collect();
        let p = if rows.is_empty() {
            Vec::new()
        } else {
            self.discriminator.p_human(&rows)
        };
        let mut p_human = vec![None; episodes.len()];
        let mut fingerprints = vec![None; episodes.len()];
        for (j, &i) in ok.iter().enumerate() {
            p_human[i] = Some(p[j]);
            fingerprints[i] = Some(fps[j]);
        }
        let hl = if p.is_empty() {
            0.0
        } else {
            p.iter().sum::<f64>() / p.len() as f64
        };
        let points: Vec<(String, Fingerprint)> = ok
            .iter()
            .zip(&fps)
            .map(|(&i, f)| (episodes[i].task_id.clone(), *f))
            .collect();
        let coverage = self.cloud.chamfer_by_group(&points).mean;
        let n_tasks = episodes
            .iter()
            .map(|e| e.task_id.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let successes = episodes.iter().filter(|e| e.success()).count();
        let metrics = EvalMetrics {
            combined: lambda_h * hl + lambda_b * coverage,
            combined_ramp: None,
            human_likeness: hl,
            coverage,
            lambda_h,
            lambda_b,
            success_rate: if episodes.is_empty() {
                0.0
            } else {
                successes as f64 / episodes.len() as f64
            },
            n_episodes: ok.len(),
            n_failed_episodes: episodes.len() - ok.len(),
            n_tasks,
            n_personas,
            dice: dice(&self.reference.mean_fingerprint(), &fps),
        };
        Scored {
            metrics,
            p_human,
            fingerprints,
        }
    }

    /// A short, computed critique (used offline, and as context for LLM reflection): which
    /// features of the best and worst episodes sit furthest from the human mean, in human std units.
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

/// The result of evaluating a candidate.
#[derive(Debug, Clone)]
pub enum CandidateOutcome {
    /// Scored.
    Scored {
        /// Metrics.
        metrics: EvalMetrics,
        /// Personas with outcomes.
        personas: Vec<PersonaOutcome>,
        /// The personas themselves (in task order).
        persona_records: Vec<Persona>,
        /// All episodes.
        episodes: Vec<Episode>,
        /// P(human) per episode.
        p_human: Vec<Option<f64>>,
        /// Fingerprints per episode.
        fingerprints: Vec<Option<Fingerprint>>,
    },
    /// The program failed (recorded, fed back to the mutator, never scored).
    Failed(FailureInfo),
    /// Infrastructure failed; the candidate should be re-queued.
    Infrastructure(String),
}

/// Share of failed episodes above which a candidate's evaluation counts as an infrastructure failure.
pub const MAX_FAILED_EPISODE_SHARE: f64 = 0.5;

/// Evaluate `code` on `tasks` with `n` personas per task.
#[allow(clippy::too_many_arguments)]
pub async fn evaluate_candidate(
    code: &str,
    tasks: &[TaskContext],
    n: usize,
    lambda_h: f64,
    lambda_b: f64,
    generator: &dyn PersonaGenerator,
    runner: &dyn EpisodeRunner,
    scorer: &Scorer,
    seed: u64,
) -> CandidateOutcome {
    let gens = join_all(
        tasks
            .iter()
            .enumerate()
            .map(|(i, t)| generator.generate(code, t, n, mix(seed, i as u64))),
    )
    .await;
    let mut per_task: Vec<(&TaskContext, Vec<Persona>)> = Vec::new();
    for (t, g) in tasks.iter().zip(gens) {
        match g {
            Generation::Personas(mut ps) => {
                if ps.len() != n {
                    return CandidateOutcome::Failed(FailureInfo {
                        stage: "validation".into(),
                        reason: format!(
                            "task {}: expected {n} personas, got {}",
                            t.task_id,
                            ps.len()
                        ),
                        stderr_tail: String::new(),
                    });
                }
                for p in &mut ps {
                    p.task_id = Some(t.task_id.clone());
                }
                per_task.push((t, ps));
            }
            Generation::Failed(mut f) => {
                f.reason = format!("task {}: {}", t.task_id, f.reason);
                return CandidateOutcome::Failed(f);
            }
            Generation::Infrastructure(why) => return CandidateOutcome::Infrastructure(why),
        }
    }
    let jobs: Vec<(&str, &Persona, usize)> = per_task
        .iter()
        .flat_map(|(t, ps)| {
            ps.iter()
                .enumerate()
                .map(move |(j, p)| (t.task_id.as_str(), p, j))
        })
        .collect();
    let episodes: Vec<Episode> = join_all(jobs.iter().map(|&(task, p, j)| {
        runner.run(
            task,
            Some(p),
            0,
            mix(derive_seed(seed ^ 0x9e37_79b9, task), j as u64),
        )
    }))
    .await;
    let failed = episodes
        .iter()
        .filter(|e| e.status == EpisodeStatus::Failed)
        .count();
    if !episodes.is_empty() && failed as f64 > MAX_FAILED_EPISODE_SHARE * episodes.len() as f64 {
        let why = episodes
            .iter()
            .find_map(|e| e.error.clone())
            .unwrap_or_default();
        return CandidateOutcome::Infrastructure(format!(
            "{failed} of {} episodes failed; first error: {why}",
            episodes.len()
        ));
    }
    let scored = scorer.score(&episodes, lambda_h, lambda_b, n);
    let personas = jobs
        .iter()
        .zip(&episodes)
        .zip(&scored.p_human)
        .map(|((&(task, p, _), e), ph)| PersonaOutcome {
            task_id: task.to_string(),
            persona_id: p.persona_id.clone(),
            axes: p.active_axes().into_iter().map(str::to_string).collect(),
            p_human: *ph,
            reward: e.reward,
        })
        .collect();
    CandidateOutcome::Scored {
        metrics: scored.metrics,
        personas,
        persona_records: per_task.into_iter().flat_map(|(_, ps)| ps).collect(),
        episodes,
        p_human: scored.p_human,
        fingerprints: scored.fingerprints,
    }
}

/// Counts of personas' active axes (for logs).
pub fn axis_counts(personas: &[Persona]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for p in personas {
        for a in p.active_axes() {
            *m.entry(a.to_string()).or_insert(0) += 1;
        }
    }
    m
}
