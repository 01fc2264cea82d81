//! Evaluating one candidate program on one batch of tasks: sandboxed generation of N personas
//! per task ([`SandboxGenerator`], [`generate_all`]), one episode per persona (through the
//! batch layer, [`play_jobs`] with a [`Play`]), then the run's [`Scorer`] ([`rollouts`]). The loop and `ppol eval`
//! ([`crate::evolve::heldout::table`]) both go through these steps. This module is the glue between episodes and fitness ([`score_episodes`]), and
//! says which metrics a program carries into the archive ([`program_metrics`]). Failures are
//! data: a generation failure makes the candidate `Failed`; an endpoint outage makes it
//! `Infrastructure` (re-queued, never scored 0).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use crate::evolve::rundir::runlog::{EvalMetrics, FailureInfo, PersonaOutcome};
use crate::fitness::features::Fingerprint;
use crate::fitness::score::{BatchScore, Rollout, Scorer, Weights};
use crate::fitness::settings::SelectBy;
use crate::generate::generator::{generate_in, GenerationOutcome};
use crate::generate::sandbox::Sandbox;
use crate::llm::ChatModel;
use crate::persona::Persona;
use crate::rng::{derive_seed, mix};
use crate::simulate::batch::{self, Batch, BudgetFn, Player};
use crate::simulate::episode::record::{Episode, EpisodeStatus};

/// A task as the generator sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskContext {
    /// Task id.
    pub task_id: String,
    /// The text passed as `task_context` to the generator.
    pub context: String,
}

/// How a candidate's episodes and generations are played and reported: the world's runner
/// through the batch layer ([`crate::simulate::batch`]), with the run's episode concurrency
/// and budget, and progress under `label` (`iteration 3: c12`, `validation of c12`, `eval:
/// seed`).
#[derive(Clone, Copy)]
pub struct Play<'a> {
    /// Who plays.
    pub player: Player<'a>,
    /// Episodes in flight at once.
    pub concurrency: usize,
    /// The budget check (None: no budget).
    pub budget: Option<BudgetFn<'a>>,
    /// Where progress goes (None: nowhere).
    pub progress: Option<&'a (dyn Fn(&batch::Progress) + Sync)>,
    /// What is evaluated, for progress lines.
    pub label: &'a str,
}

impl<'a> Play<'a> {
    /// The same with another label.
    pub fn labelled(self, label: &'a str) -> Self {
        Play { label, ..self }
    }
}

/// What a generation attempt produced.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
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

/// Persona generation through the sandbox.
pub struct SandboxGenerator {
    sandbox: Arc<Sandbox>,
    llm: Option<Arc<dyn ChatModel>>,
}

impl SandboxGenerator {
    /// A generator over a sandbox, with the LLM the programs may call (`ppol_llm`).
    pub fn new(sandbox: Arc<Sandbox>, llm: Option<Arc<dyn ChatModel>>) -> Self {
        SandboxGenerator { sandbox, llm }
    }
}

#[async_trait]
impl PersonaGenerator for SandboxGenerator {
    async fn generate(&self, code: &str, task: &TaskContext, n: usize, seed: u64) -> Generation {
        let program = crate::generate::sandbox::Program::Source {
            name: "candidate.py".into(),
            code: code.to_string(),
        };
        let outcome = generate_in(
            &self.sandbox,
            &program,
            &task.context,
            Some(&task.task_id),
            n,
            self.llm.clone(),
            seed,
        )
        .await;
        match outcome {
            Ok(GenerationOutcome::Ok { personas, .. }) => Generation::Personas(personas),
            Ok(GenerationOutcome::Failed(f)) => {
                let text = format!("{} {}", f.reason, f.stderr_tail);
                if text.contains("budget exhausted") || text.contains("gave up after") {
                    Generation::Infrastructure(format!(
                        "LLM unavailable during generation: {}",
                        f.reason
                    ))
                } else {
                    Generation::Failed(FailureInfo {
                        stage: format!("sandbox:{}", f.stage),
                        reason: f.reason,
                        stderr_tail: f.stderr_tail,
                        ..FailureInfo::default()
                    })
                }
            }
            Err(e) => Generation::Infrastructure(e.to_string()),
        }
    }
}

/// Episodes as fitness sees them: a failed episode has no dialogue to score.
pub fn rollouts(episodes: &[Episode]) -> Vec<Rollout> {
    episodes
        .iter()
        .map(|e| Rollout {
            task_id: e.task_id.clone(),
            dialogue: (e.status == EpisodeStatus::Ok).then(|| e.to_dialogue()),
            success: e.success(),
        })
        .collect()
}

/// The run-log metrics of a batch score (`n_personas`: personas per task, 0 when none).
pub fn eval_metrics(s: &BatchScore, n_personas: usize) -> EvalMetrics {
    EvalMetrics {
        combined: s.combined,
        combined_ramp: None,
        human_likeness: s.human_likeness,
        coverage: s.coverage,
        lambda_h: s.weights.lambda_h,
        lambda_b: s.weights.lambda_b,
        success_rate: s.success_rate,
        n_episodes: s.n_scored,
        n_failed_episodes: s.n_failed,
        n_tasks: s.n_tasks,
        n_personas,
        dice: s.dice,
    }
}

/// Score episodes with the run's scorer, as run-log metrics.
pub fn score_episodes(
    scorer: &Scorer,
    episodes: &[Episode],
    weights: Weights,
    n_personas: usize,
) -> EvalMetrics {
    eval_metrics(&scorer.score(&rollouts(episodes), weights), n_personas)
}

/// Put the ranking score in `combined`: with [`SelectBy::Fixed`], the `fixed` weights (so
/// programs scored at different curriculum stages are comparable), keeping the ramped score
/// of the training schedule in `combined_ramp`; with [`SelectBy::Ramp`], leave it.
pub fn rank(m: &mut EvalMetrics, select_by: SelectBy, fixed: Weights) {
    if select_by == SelectBy::Fixed {
        let ramp = m.combined;
        m.lambda_h = fixed.lambda_h;
        m.lambda_b = fixed.lambda_b;
        m.combined = fixed.combine(m.human_likeness, m.coverage);
        m.combined_ramp = Some(ramp);
    }
}

/// The metrics a program carries in the archive (its `fitness_metric` and descriptors are
/// chosen among them).
pub fn program_metrics(m: &EvalMetrics) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::from([
        ("combined".to_string(), m.combined),
        ("human_likeness".to_string(), m.human_likeness),
        ("coverage".to_string(), m.coverage),
        ("success_rate".to_string(), m.success_rate),
    ]);
    if let Some(r) = m.combined_ramp {
        out.insert("combined_ramp".into(), r);
    }
    out
}

/// The names of [`program_metrics`] in a run ranking by `select_by`.
pub fn program_metric_names(select_by: SelectBy) -> Vec<String> {
    let mut m = EvalMetrics::default();
    rank(&mut m, select_by, Weights::EQUAL);
    program_metrics(&m).into_keys().collect()
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
    weights: Weights,
    generator: &dyn PersonaGenerator,
    play: Play<'_>,
    scorer: &Scorer,
    seed: u64,
) -> CandidateOutcome {
    evaluate_in_stages(code, tasks, n, weights, generator, play, scorer, seed, None)
        .await
        .outcome
}

/// The first stage of a cascade evaluation ([`evaluate_in_stages`]).
pub struct StageOne<'a> {
    /// Personas per task it plays: the first ones the program wrote for each task.
    pub personas: usize,
    /// The weights of its score.
    pub weights: Weights,
    /// Its score from its metrics (the archive's fitness metric).
    pub score: &'a (dyn Fn(&EvalMetrics) -> f64 + Sync),
    /// The candidate stops after it when its score is below this (None: it plays on).
    pub bar: Option<f64>,
}

/// What [`evaluate_in_stages`] did.
#[derive(Debug, Clone)]
pub struct Staged {
    /// The outcome: of every episode, or — when `stopped` — of the first stage's only.
    pub outcome: CandidateOutcome,
    /// The first stage's score, when there was a first stage and its episodes were scored.
    pub stage_score: Option<f64>,
    /// Whether the candidate stopped after the first stage (its score was below the bar).
    pub stopped: bool,
}

/// Evaluate `code` on `tasks` with `n` personas per task, in two stages when `stage` is given
/// and asks for fewer than `n` personas per task: the first `stage.personas` personas of every
/// task play first; the candidate stops there when their score is below `stage.bar`, else the
/// other personas play. Every persona is generated up front, and each episode's seed depends
/// only on its task and persona index, so a candidate that plays on ends with exactly the
/// episodes and metrics of a one-stage evaluation.
#[allow(clippy::too_many_arguments)]
pub async fn evaluate_in_stages(
    code: &str,
    tasks: &[TaskContext],
    n: usize,
    weights: Weights,
    generator: &dyn PersonaGenerator,
    play: Play<'_>,
    scorer: &Scorer,
    seed: u64,
    stage: Option<&StageOne<'_>>,
) -> Staged {
    let done = |outcome| Staged {
        outcome,
        stage_score: None,
        stopped: false,
    };
    let gens = generate_all(code, tasks, n, generator, seed, play).await;
    let mut per_task: Vec<(&TaskContext, Vec<Persona>)> = Vec::new();
    for (t, g) in tasks.iter().zip(gens) {
        match g {
            Generation::Personas(mut ps) => {
                if ps.len() != n {
                    return done(CandidateOutcome::Failed(FailureInfo {
                        stage: "validation".into(),
                        reason: format!(
                            "task {}: expected {n} personas, got {}",
                            t.task_id,
                            ps.len()
                        ),
                        ..FailureInfo::default()
                    }));
                }
                for p in &mut ps {
                    p.task_id = Some(t.task_id.clone());
                }
                per_task.push((t, ps));
            }
            Generation::Failed(mut f) => {
                f.reason = format!("task {}: {}", t.task_id, f.reason);
                return done(CandidateOutcome::Failed(f));
            }
            Generation::Infrastructure(why) => return done(CandidateOutcome::Infrastructure(why)),
        }
    }
    let jobs = jobs(&per_task);
    let stage = stage.filter(|s| s.personas < n);
    let (episodes, stage_score, stopped) = match stage {
        None => (play_jobs(play, seed, &jobs).await, None, false),
        Some(stage) => {
            let first: Vec<_> = jobs
                .iter()
                .copied()
                .filter(|&(_, _, j)| j < stage.personas)
                .collect();
            let rest: Vec<_> = jobs
                .iter()
                .copied()
                .filter(|&(_, _, j)| j >= stage.personas)
                .collect();
            let played = play_jobs(play, seed, &first).await;
            if let Some(why) = infrastructure_failure(&played) {
                return done(CandidateOutcome::Infrastructure(why));
            }
            let m = score_episodes(scorer, &played, stage.weights, stage.personas);
            let score = (stage.score)(&m);
            if stage.bar.is_some_and(|bar| score < bar) {
                let outcome = scored(scorer, &first, played, weights, stage.personas, &per_task);
                return Staged {
                    outcome,
                    stage_score: Some(score),
                    stopped: true,
                };
            }
            // back in job order: task by task, persona by persona
            let mut first_eps = played.into_iter();
            let mut rest_eps = play_jobs(play, seed, &rest).await.into_iter();
            let episodes = jobs
                .iter()
                .map(|&(_, _, j)| {
                    let next = if j < stage.personas {
                        first_eps.next()
                    } else {
                        rest_eps.next()
                    };
                    next.expect("one episode per job")
                })
                .collect();
            (episodes, Some(score), false)
        }
    };
    if let Some(why) = infrastructure_failure(&episodes) {
        return done(CandidateOutcome::Infrastructure(why));
    }
    Staged {
        outcome: scored(scorer, &jobs, episodes, weights, n, &per_task),
        stage_score,
        stopped,
    }
}

/// The generation step: `n` personas of `code` for every task, all at once (task `i`'s seed is
/// `mix(seed, i)`), in task order, reported under `play`'s label while they run.
pub async fn generate_all(
    code: &str,
    tasks: &[TaskContext],
    n: usize,
    generator: &dyn PersonaGenerator,
    seed: u64,
    play: Play<'_>,
) -> Vec<Generation> {
    let label = format!("{}: personas", play.label);
    batch::join_reporting(
        &label,
        "tasks generated",
        tasks
            .iter()
            .enumerate()
            .map(|(i, t)| generator.generate(code, t, n, mix(seed, i as u64)))
            .collect(),
        play.progress,
    )
    .await
}

/// One episode to play: the task id, the persona, and the persona's index within its task.
pub type Job<'a> = (&'a str, &'a Persona, usize);

/// The episodes to play for generated personas: task by task, persona by persona.
pub fn jobs<'a>(per_task: &'a [(&'a TaskContext, Vec<Persona>)]) -> Vec<Job<'a>> {
    per_task
        .iter()
        .flat_map(|(t, ps)| {
            ps.iter()
                .enumerate()
                .map(move |(j, p)| (t.task_id.as_str(), p, j))
        })
        .collect()
}

/// The seed of the episode of persona `j` of `task` (it depends only on `seed`, its task and
/// its persona index).
pub fn persona_seed(seed: u64, task: &str, j: usize) -> u64 {
    mix(derive_seed(seed ^ 0x9e37_79b9, task), j as u64)
}

/// The batch layer's jobs of generated personas' episodes (seeded by [`persona_seed`]).
pub fn planned_jobs(seed: u64, jobs: &[Job<'_>]) -> Vec<batch::Job> {
    jobs.iter()
        .map(|&(task, p, j)| batch::Job {
            task_id: task.to_string(),
            persona: Some(p.clone()),
            trial: 0,
            seed: persona_seed(seed, task, j),
        })
        .collect()
}

/// The play step: one episode per job through the batch layer, in job order.
pub async fn play_jobs(play: Play<'_>, seed: u64, jobs: &[Job<'_>]) -> Vec<Episode> {
    play_planned(play, &planned_jobs(seed, jobs)).await
}

/// Play planned jobs through the batch layer with `play`'s settings, in job order, keeping them
/// in `sink` as they finish when there is one (no stop: every job is played; the run abandons
/// a whole evaluation when it must stop). Errors: the sink's files.
pub async fn play_into(
    play: Play<'_>,
    planned: &[batch::Job],
    sink: Option<batch::SinkPaths>,
) -> crate::Result<Vec<Episode>> {
    let mut b = Batch::new(play.label, planned).concurrency(play.concurrency);
    if let Some(check) = play.budget {
        b = b.budget(check);
    }
    if let Some(p) = play.progress {
        b = b.progress(p);
    }
    if let Some(s) = sink {
        b = b.sink(s);
    }
    let played = b.play(play.player).await?;
    Ok(played.episodes.into_iter().flatten().collect())
}

/// [`play_into`] without a sink.
pub async fn play_planned(play: Play<'_>, planned: &[batch::Job]) -> Vec<Episode> {
    match play_into(play, planned, None).await {
        Ok(episodes) => episodes,
        // only a sink's files can fail, and there is none
        Err(e) => planned
            .iter()
            .map(|j| {
                Episode::failed(
                    &j.task_id,
                    j.persona.as_ref(),
                    j.trial,
                    j.seed,
                    play.player.domain,
                    play.player.backend,
                    e.to_string(),
                )
            })
            .collect(),
    }
}

/// Too many failed episodes: an infrastructure failure, with the first error.
fn infrastructure_failure(episodes: &[Episode]) -> Option<String> {
    let failed = episodes
        .iter()
        .filter(|e| e.status == EpisodeStatus::Failed)
        .count();
    if episodes.is_empty() || failed as f64 <= MAX_FAILED_EPISODE_SHARE * episodes.len() as f64 {
        return None;
    }
    let why = episodes
        .iter()
        .find_map(|e| e.error.clone())
        .unwrap_or_default();
    Some(format!(
        "{failed} of {} episodes failed; first error: {why}",
        episodes.len()
    ))
}

/// The scored outcome of `episodes`, one per job (`n`: personas per task played).
fn scored(
    scorer: &Scorer,
    jobs: &[Job<'_>],
    episodes: Vec<Episode>,
    weights: Weights,
    n: usize,
    per_task: &[(&TaskContext, Vec<Persona>)],
) -> CandidateOutcome {
    let scored = scorer.score(&rollouts(&episodes), weights);
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
        metrics: eval_metrics(&scored, n),
        personas,
        persona_records: per_task
            .iter()
            .flat_map(|(_, ps)| ps.iter().take(n).cloned())
            .collect(),
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
