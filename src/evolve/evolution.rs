//! The evolution loop as a state machine: [`Evolution`] owns the run's [`State`], makes one
//! iteration per [`Evolution::step`] and saves the state at each [`Evolution::commit`].
//!
//! # One step
//!
//! 1. **Propose** a generation of candidates (`fill_generation`): the seed program alone when
//!    the archive is empty, else `search.generation_size` children (default: one), each of a
//!    parent sampled from the archive as it stands at the generation's start and made by the
//!    [`Mutator`] (their mutator calls run concurrently). A mutation that fails is recorded
//!    against its parent and its iteration ends there. The generation is part of the
//!    [`State`], so a resumed run evaluates exactly the proposals it had made.
//! 2. **Evaluate** it (`evaluate`, which reads the state but does not change it): personas
//!    generated in the sandbox for the iteration's batch of train tasks, one episode per
//!    persona, scored by the run's [`Scorer`], with its [`reflection`].
//! 3. **Record** the result (`record`): the archive, the run log, validation of a new best and
//!    `best/`. An infrastructure failure (an endpoint down after its retries) is not an
//!    iteration: the candidate is queued again, up to `search.max_requeues` times in a row.
//!
//! # The commit point
//!
//! [`Evolution::commit`] appends a `checkpoint` event and writes the [`State`] — the struct
//! itself, serialised — to `checkpoint.json` atomically. A resumed run cuts the log back to that
//! event and continues with the same per-iteration seeds, so an offline run killed at any point
//! and resumed ends exactly where an uninterrupted run does, and no committed evaluation is
//! repeated.
//!
//! [`Evolution::run`] is the driver: it checks the stop conditions between steps (iterations,
//! a stop request, the LLM budget, the wall clock, early stop) and commits after each one.
//!
//! # Candidates in parallel
//!
//! With `search.parallel_candidates = P`, the driver keeps up to P candidates of the current
//! generation in evaluation at once (each a tokio task: sandbox, episodes, scoring, reflection)
//! and records them strictly in iteration order, committing after each. Proposals depend only on
//! the archive at the generation's start and each evaluation only on its iteration and program,
//! so for a fixed `generation_size` the archive, the log and the best program are the same for
//! any P (the wall time is not). An evaluation still running when the run stops or is killed is
//! not recorded: the resumed run evaluates it again from the saved generation.
//!
//! # Validations
//!
//! A new train best or batch best is validated (final N, fixed weights, the validation tasks)
//! and the run's best — [`RunBest`]: the program that validates best, kept in the [`State`] and
//! written to `best/` — is the one `run_stopped` and every front end name; half of the children
//! are bred from it.
//! With generations of one (the default) the validation runs at the candidate's record. With
//! larger generations it runs in the background from the record on, queued in the [`State`],
//! and is applied (logged, `best/` written) when the generation after next is proposed, in
//! iteration order: proposals see the validations of the generations before the previous one,
//! which keeps runs the same for any parallelism while validations overlap the evaluations of
//! the next generation. A run that stops applies what is queued first (a stop request leaves it
//! queued: the resumed run validates it).

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::evolve::archive::Archive;
use crate::evolve::config::{MutationSection, RunConfig};
use crate::evolve::context::{pause_for_kill, RunContext};
use crate::evolve::evaluate::{
    evaluate_candidate, evaluate_in_stages, program_metric_names, program_metrics, rank,
    CandidateOutcome, StageOne, Staged, TaskContext,
};
use crate::evolve::mutation::dispatch::Mutator;
use crate::evolve::mutation::structural::axis_evidence;
use crate::evolve::mutation::{ChildFailure, FailureKind};
use crate::evolve::program::{code_hash, Program, ProgramId};
use crate::evolve::reflection::{self, Evidence};
use crate::evolve::rundir::RunBest;
use crate::evolve::runlog::{
    self, CostSummary, EvalMetrics, Event, FailureInfo, PersonaOutcome, ProcessShare, RunLog,
};
use crate::evolve::schedule::{BatchPlan, Schedule};
use crate::fitness::coverage::CoverageOptions;
use crate::fitness::reference::HumanReference;
use crate::fitness::score::{Scorer, Weights};
use crate::llm::client::{Accounting, RoleAccounting};
use crate::llm::{CallRole, ChatModel};
use crate::persona::Persona;
use crate::seed::{derive_seed, mix};
use crate::simulate::episode::record::Episode;
use crate::{Error, Result};

/// Identifier of the checkpoint format (`checkpoint.json`).
pub const CHECKPOINT_FORMAT: &str = "ppol-run/1";

/// What `evolve` reports as it goes (for progress bars and notebooks).
#[derive(Debug, Clone, Serialize)]
pub struct Progress {
    /// Iterations completed.
    pub iteration: u64,
    /// Iterations planned.
    pub iterations: u64,
    /// Best fitness so far: the archive's `fitness_metric` (`combined` by default) of its best
    /// program, on its train batch.
    pub best_combined: Option<f64>,
    /// What just happened.
    pub message: String,
}

/// Callback receiving progress.
pub type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// How a run ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSummary {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Why it stopped.
    pub reason: String,
    /// Iterations completed.
    pub iterations: u64,
    /// The run's best program ([`RunBest`]: the program that validates best, the one in
    /// `best/`).
    pub best_program_id: Option<String>,
    /// Its train metrics (those of its own evaluation).
    pub best_metrics: Option<EvalMetrics>,
    /// Its validation metrics (None when its validation failed).
    pub best_validation: Option<EvalMetrics>,
    /// Whether it ran offline.
    pub offline: bool,
    /// What became of every attempted child, over the whole run
    /// ([`runlog::mutation_outcomes`]).
    pub mutations: BTreeMap<String, u64>,
    /// Which operator made each program that became the run's best
    /// ([`crate::evolve::rundir::new_bests`]).
    #[serde(default)]
    pub new_bests: BTreeMap<String, u64>,
    /// LLM usage and cost over every process of the run (None offline).
    #[serde(default)]
    pub cost: Option<RoleAccounting>,
    /// What each process of the run (`evolve`, then each `resume`) spent.
    #[serde(default)]
    pub processes: Vec<ProcessShare>,
    /// Episodes the run played: baseline, candidates in full, stopped early by the cascade,
    /// validations (None for a run halted by the test hook).
    #[serde(default)]
    pub episodes: Option<runlog::EpisodeCounts>,
}

/// Options of a run beyond its configuration.
#[derive(Clone, Default)]
pub struct RunControl {
    /// Set to stop after the current evaluation (Ctrl-C, Python stop handle).
    pub stop: Arc<AtomicBool>,
    /// Progress callback.
    pub progress: Option<ProgressFn>,
    /// Test hook: stop (as if killed) after this many iterations of this process.
    pub halt_after: Option<u64>,
    /// Test hook: at this point — `baseline:N` (N more baseline episodes played and saved) or
    /// `checkpoint:N` (the N-th commit of this process) — say so on stderr and wait to be
    /// killed, with no LLM call in flight.
    pub pause_at: Option<String>,
}

/// The state of a run between two iterations. It is the checkpoint: [`Evolution::commit`]
/// writes it as `checkpoint.json`, and a resumed run starts from it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// [`CHECKPOINT_FORMAT`].
    pub format: String,
    /// Iterations completed.
    pub iteration: u64,
    /// Sequence number of this commit's `checkpoint` event in the run log.
    pub log_seq: u64,
    /// The program archive (stored as its own JSON document, [`Archive::to_json`]).
    #[serde(with = "archive_as_json")]
    pub archive: Archive,
    /// Candidates to evaluate before new ones are made (re-queued after an infrastructure
    /// failure by checkpoints written before generations were kept; now they stay in
    /// `generation`).
    pub pending: VecDeque<Program>,
    /// The proposals of the current generation not yet recorded, in iteration order.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub generation: VecDeque<Proposed>,
    /// Infrastructure failures in a row.
    pub requeues: u32,
    /// Evaluations in a row without a new elite.
    pub stagnation: u64,
    /// The parent of every evaluated program, by id (for lineages).
    pub parents: BTreeMap<String, Option<String>>,
    /// The run's best so far: what `best/` holds ([`RunBest`]; None before any validation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best: Option<RunBest>,
    /// Checkpoints written before [`State::best`] kept the best validation's program id and
    /// metrics here; read (to rebuild `best` from the log), never written.
    #[serde(default, skip_serializing, rename = "best_validation")]
    pub legacy_best_validation: Option<(String, EvalMetrics)>,
    /// The best train score on each batch at the final persona count (key: the batch's tasks,
    /// persona count and human-likeness weight, joined by `|`).
    /// Train scores are only comparable within a batch, so a candidate that beats its batch's
    /// best is validated even when another batch holds the global train best.
    #[serde(default)]
    pub batch_best: BTreeMap<String, f64>,
    /// Generations proposed so far.
    #[serde(default)]
    pub generations: u64,
    /// Validations not yet applied, in iteration order (generations above one; see the
    /// [module docs](self)).
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub validations: VecDeque<QueuedValidation>,
    /// Wall-clock seconds spent up to this commit, over every process of the run.
    pub elapsed_s: f64,
    /// LLM usage and cost per role up to this commit, over every process of the run (None
    /// offline, and in checkpoints written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Accounting>,
    /// The cascade's references: the stage-1 scores of the candidates evaluated so far (played
    /// in full or stopped), by train batch (its task ids joined by `,`), in iteration order.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stage_scores: BTreeMap<String, Vec<f64>>,
    /// The first-stage score of the validation of the run's best ([`State::best`]): the bar
    /// of the cascade's validations (None: validations play in full).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_stage_score: Option<f64>,
}

impl State {
    /// The state of a new run: an empty archive seeded from the run's root seed.
    pub fn new(cfg: &RunConfig) -> Result<State> {
        Ok(State {
            format: CHECKPOINT_FORMAT.into(),
            iteration: 0,
            log_seq: 0,
            archive: Archive::new(cfg.archive.clone(), derive_seed(cfg.search.seed, "archive"))?,
            pending: VecDeque::new(),
            generation: VecDeque::new(),
            requeues: 0,
            stagnation: 0,
            parents: BTreeMap::new(),
            best: None,
            legacy_best_validation: None,
            batch_best: BTreeMap::new(),
            generations: 0,
            validations: VecDeque::new(),
            elapsed_s: 0.0,
            cost: None,
            stage_scores: BTreeMap::new(),
            best_stage_score: None,
        })
    }

    /// Program ids from the seed down to `id`.
    pub fn lineage(&self, id: &str) -> Vec<String> {
        let mut chain = vec![id.to_string()];
        let mut cur = id.to_string();
        while let Some(Some(p)) = self.parents.get(&cur) {
            if chain.contains(p) {
                break;
            }
            chain.push(p.clone());
            cur = p.clone();
        }
        chain.reverse();
        chain
    }

    /// The fitness (the archive's `fitness_metric`) of the archive's best program: the best
    /// train score, not the run's best ([`State::best`]).
    pub fn best_fitness(&self) -> Option<f64> {
        self.archive.best().and_then(|b| self.archive.fitness(b))
    }
}

/// The archive inside the checkpoint: the string [`Archive::to_json`] writes, so checkpoints
/// keep the `ppol-run/1` layout and the archive's own consistency checks run on load.
mod archive_as_json {
    use super::Archive;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(archive: &Archive, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&archive.to_json())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Archive, D::Error> {
        let text = String::deserialize(d)?;
        Archive::from_json(&text).map_err(serde::de::Error::custom)
    }
}

/// What one [`Evolution::step`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// An iteration is complete: a candidate was scored, or failed and was recorded.
    Iteration {
        /// What happened, for progress.
        message: String,
    },
    /// The candidate met an infrastructure failure and is queued again; this is not an
    /// iteration. Wait `backoff` before the next step.
    Requeued {
        /// How long to wait.
        backoff: Duration,
    },
    /// Infrastructure failures exceeded `search.max_requeues`: the run stops for this reason.
    Stop(String),
}

/// A candidate for iteration `iteration`.
struct Candidate {
    program: Program,
    island: usize,
    bar: Option<f64>,
}

/// A proposal of the current generation, waiting to be evaluated and recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Proposed {
    /// A program to evaluate on `iteration`.
    Candidate {
        /// Its iteration.
        iteration: u64,
        /// The program.
        program: Program,
        /// The island it joins.
        island: usize,
        /// The cascade's bar for its first stage, set from the state the generation was
        /// proposed from (None: it plays in full).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bar: Option<f64>,
    },
    /// The mutation of `parent` failed before a program existed.
    MutationFailed {
        /// Its iteration.
        iteration: u64,
        /// The parent it was made from.
        parent: Program,
        /// Why it failed.
        failure: ChildFailure,
    },
}

impl Proposed {
    /// The iteration it belongs to.
    pub fn iteration(&self) -> u64 {
        match self {
            Proposed::Candidate { iteration, .. } | Proposed::MutationFailed { iteration, .. } => {
                *iteration
            }
        }
    }
}

/// A validation of a new train best or batch best, waiting to be applied.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueuedValidation {
    /// The candidate's iteration.
    pub iteration: u64,
    /// The generation it was recorded in (see [`State::generations`]).
    pub generation: u64,
    /// The program.
    pub program: Program,
    /// Its train metrics.
    pub train: EvalMetrics,
    /// The cascade's bar for its first stage, set when it was queued (None: it plays in full).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bar: Option<f64>,
}

/// What a generation's proposal needs before its mutation runs.
enum Pick {
    /// Ready to evaluate (the seed, or a re-queued program).
    Ready(Proposed),
    /// A child of `parent` to make.
    Child {
        iteration: u64,
        island: usize,
        parent: Program,
        inspirations: Vec<crate::evolve::archive::Inspiration>,
        bar: Option<f64>,
    },
}

/// What evaluating a candidate needs, shared by the tasks that evaluate candidates in parallel.
#[derive(Clone)]
struct Bench {
    ctx: Arc<RunContext>,
    scorer: Arc<Scorer>,
    schedule: Schedule,
    train: Arc<Vec<TaskContext>>,
    val: Arc<Vec<TaskContext>>,
    reflection_model: Option<Arc<dyn ChatModel>>,
}

/// One evaluation in flight, in iteration order.
struct InFlight {
    iteration: u64,
    task: Option<tokio::task::JoinHandle<Evaluation>>,
}

/// A scored candidate, before it is recorded.
struct Scored {
    /// Its metrics: of every episode, or of the cascade's first stage when it stopped there.
    metrics: EvalMetrics,
    /// The score of the cascade's first stage (None without one).
    stage_score: Option<f64>,
    /// The bar that stage had to reach (None: it played in full whatever its score).
    bar: Option<f64>,
    personas: Vec<PersonaOutcome>,
    reflection: String,
    plan: BatchPlan,
    tasks: Vec<String>,
    /// Seconds the evaluation took (sandbox, episodes, scoring; not the reflection or the
    /// validation).
    seconds: f64,
}

/// The result of evaluating a candidate.
enum Evaluation {
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

/// Why the driver stops before the next step.
enum Stop {
    /// The run is over, for this reason.
    Reason(String),
    /// The test hook `halt_after` fired: return as if killed.
    Halted,
}

/// A run in progress. See the [module docs](self).
pub struct Evolution {
    ctx: Arc<RunContext>,
    bench: Bench,
    mutator: Mutator,
    log: RunLog,
    control: RunControl,
    state: State,
    /// When this process took over, and the seconds spent before.
    started: Instant,
    prior_elapsed: f64,
    /// Iterations completed by this process (for the `halt_after` hook).
    iterations_here: u64,
    /// The queued validations running in the background, by iteration.
    validating: BTreeMap<u64, tokio::task::JoinHandle<Staged>>,
}

impl Evolution {
    /// Get a run ready for its first step: the human reference, the log's `run_started`, the
    /// baseline and discriminator (reused from the run directory when present), and the state
    /// — `checkpoint` when resuming (the log must already be cut back to it), else a new one.
    pub async fn start(
        ctx: RunContext,
        checkpoint: Option<State>,
        control: RunControl,
    ) -> Result<Evolution> {
        let cfg = &ctx.cfg; // checked by `run::evolve` / `run::resume` (`check_config`)
                            // `[mutation] max_tokens`, else `[llm.roles.mutator] max_tokens`, else the default
        let mutation = MutationSection {
            max_tokens: Some(cfg.mutation.completion_cap(cfg.llm.as_ref())),
            ..cfg.mutation.clone()
        };
        let mutator = Mutator::new(&mutation, &cfg.archive, ctx.model())?;
        let reference =
            HumanReference::build(&ctx.humans, cfg.run.feature_set, ctx.human_source.clone())?;
        reference.save(&ctx.dir.join("human_ref.json"))?;
        ctx.dir
            .write_jsonl("human_heldout.jsonl", &ctx.humans_heldout)?;
        let mut log = RunLog::open(&ctx.dir.log_path())?;
        if checkpoint.is_none() && log.next_seq() == 1 {
            log.append(run_started(&ctx))?;
        }
        // the baseline's progress, at most every 5 s (and at its end)
        let last_said = std::sync::Mutex::new(None::<Instant>);
        let baseline_progress = |done: usize, total: usize| {
            let mut last = last_said.lock().unwrap_or_else(|e| e.into_inner());
            if done == total || last.is_none_or(|t| t.elapsed().as_secs_f64() >= 5.0) {
                *last = Some(Instant::now());
                control.say(Progress {
                    iteration: 0,
                    iterations: cfg.search.iterations,
                    best_combined: None,
                    message: format!("baseline: {done}/{total} episodes"),
                });
            }
        };
        let (discriminator, baseline) = ctx
            .baseline_and_discriminator(
                &reference,
                control.pause_point("baseline"),
                &control.stop,
                cfg.search.max_wall_clock_s.and_then(|s| {
                    std::time::Instant::now()
                        .checked_add(std::time::Duration::try_from_secs_f64(s).ok()?)
                }),
                &baseline_progress,
            )
            .await?;
        let scorer = Scorer::new(
            reference,
            discriminator,
            CoverageOptions {
                standardize: cfg.fitness.standardize,
                n_clusters: cfg.fitness.n_clusters,
                seed: 0,
            },
        )?;
        let schedule = cfg.fitness.schedule();
        let records = runlog::read(&ctx.dir.log_path())?;
        if checkpoint.is_none()
            && !records
                .iter()
                .any(|r| r.event.kind() == "discriminator_trained")
        {
            let event = discriminator_trained(&scorer, &baseline, &ctx.train, &schedule);
            log.append(event)?;
            let auc = scorer.discriminator.training.grouped_auc.as_ref();
            control.say(Progress {
                iteration: 0,
                iterations: cfg.search.iterations,
                best_combined: None,
                message: match auc {
                    Some(a) => format!("discriminator grouped AUC {:.3}", a.mean),
                    None => "discriminator trained (too few groups for a held-out AUC)".into(),
                },
            });
        }
        let state = match checkpoint {
            Some(mut state) => {
                if state.best.is_none() {
                    // a checkpoint written before it kept the run's best: the log says which
                    // (the one in best/ when it is that program, for what the log lacks)
                    state.best = RunBest::from_log(&records).map(|b| match ctx.dir.read_best() {
                        Some(disk) if disk.program_id == b.program_id => disk,
                        _ => b,
                    });
                }
                log.append(Event::Resumed {
                    from_iteration: state.iteration,
                })?;
                state
            }
            None => State::new(cfg)?,
        };
        let reflection_model = if cfg.mutation.reflection {
            ctx.model()
        } else {
            None
        };
        let train = Arc::new(ctx.contexts(&ctx.train));
        let val = Arc::new(ctx.contexts(&ctx.val));
        let ctx = Arc::new(ctx);
        let evolution = Evolution {
            prior_elapsed: state.elapsed_s,
            bench: Bench {
                ctx: ctx.clone(),
                scorer: Arc::new(scorer),
                schedule,
                train,
                val,
                reflection_model,
            },
            ctx,
            mutator,
            log,
            control,
            state,
            started: Instant::now(),
            iterations_here: 0,
            validating: BTreeMap::new(),
        };
        evolution.restore_best().await?;
        Ok(evolution)
    }

    /// Make `best/` hold the run's best ([`State::best`]) again when it does not — removed, or
    /// written for a program after the checkpoint by an iteration a kill cut short: its program
    /// and numbers come from the checkpoint; the personas and episodes of its validation are
    /// kept when `best/` has them for this program, else made again by validating it (kept only
    /// when that reproduces the recorded validation, as an offline run always does).
    async fn restore_best(&self) -> Result<()> {
        let Some(best) = &self.state.best else {
            return Ok(());
        };
        let dir = &self.ctx.dir;
        let on_disk = dir.read_best();
        let has_records = ["personas.jsonl", "episodes.jsonl"]
            .iter()
            .all(|f| dir.join("best").join(f).is_file());
        if on_disk.as_ref() == Some(best) && has_records == best.validation.is_some() {
            return Ok(());
        }
        let what = match &on_disk {
            None => "is missing or incomplete".to_string(),
            Some(d) if d.program_id != best.program_id => {
                format!("holds {}, not the run's best", d.program_id)
            }
            Some(d) if d != best => "does not match the checkpoint".to_string(),
            Some(_) => "lacks its validation's personas or episodes".to_string(),
        };
        tracing::warn!(
            "{}/best {what}: rebuilding it for {} from the checkpoint",
            dir.path().display(),
            best.program_id
        );
        let Some(recorded) = &best.validation else {
            return dir.write_best(best, None::<(&[Persona], &[Episode])>);
        };
        if has_records
            && on_disk
                .as_ref()
                .is_some_and(|d| d.program_id == best.program_id)
        {
            return dir.write_best_program(best);
        }
        match self.bench.validate(&best.code).await {
            CandidateOutcome::Scored {
                metrics,
                persona_records,
                episodes,
                ..
            } if metrics == *recorded => {
                dir.write_best(best, Some((&persona_records[..], &episodes[..])))
            }
            outcome => {
                let why = match outcome {
                    CandidateOutcome::Scored { metrics, .. } => format!(
                        "validating it again gave combined {:.3}, not the recorded {:.3}",
                        metrics.combined, recorded.combined
                    ),
                    CandidateOutcome::Failed(f) => {
                        format!("validating it again failed ({}): {}", f.stage, f.reason)
                    }
                    CandidateOutcome::Infrastructure(why) => {
                        format!("validating it again failed: {why}")
                    }
                };
                tracing::warn!(
                    "best/personas.jsonl and best/episodes.jsonl of {} are left out: {}",
                    best.program_id,
                    crate::io::printable(&why)
                );
                dir.write_best(best, None::<(&[Persona], &[Episode])>)
            }
        }
    }

    /// The state (as of the last step).
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Run to a stop condition, committing after every step; up to
    /// `search.parallel_candidates` evaluations of the current generation run at once.
    pub async fn run(mut self) -> Result<RunSummary> {
        let parallel = self.ctx.cfg.search.parallel_candidates.max(1);
        let mut inflight: VecDeque<InFlight> = VecDeque::new();
        let abort = |inflight: &mut VecDeque<InFlight>| {
            for f in inflight.drain(..) {
                if let Some(task) = f.task {
                    task.abort();
                }
            }
        };
        self.spawn_validations(); // those a resumed run had queued
        let reason = 'run: loop {
            match self.stop() {
                Some(Stop::Reason(reason)) => break reason,
                Some(Stop::Halted) => {
                    abort(&mut inflight);
                    self.abort_validations();
                    return Ok(self.halted());
                }
                None => {}
            }
            if self.state.generation.is_empty() {
                abort(&mut inflight);
                if !self.fill_generation().await? {
                    break 'run "interrupted".to_string();
                }
            }
            while inflight.len() < parallel.min(self.state.generation.len()) {
                let entry = &self.state.generation[inflight.len()];
                let task = match entry {
                    Proposed::Candidate {
                        iteration,
                        program,
                        bar,
                        ..
                    } => Some(tokio::spawn(self.bench.clone().evaluate(
                        *iteration,
                        program.clone(),
                        *bar,
                    ))),
                    Proposed::MutationFailed { .. } => None,
                };
                inflight.push_back(InFlight {
                    iteration: entry.iteration(),
                    task,
                });
            }
            let head = inflight
                .pop_front()
                .expect("a filled generation has a head");
            let entry = self
                .state
                .generation
                .pop_front()
                .expect("a filled generation has a head");
            debug_assert_eq!(head.iteration, entry.iteration());
            let evaluation = match head.task {
                // A stop request (Ctrl-C, SIGINT from a time limit) abandons the evaluations in
                // flight at once rather than after them: with a slow model one can take
                // minutes. Nothing is recorded for them; the proposal goes back to the saved
                // generation and a resumed run evaluates it again.
                Some(mut task) => match join_unless_stopped(&mut task, &self.control.stop).await {
                    Some(joined) => Some(joined.unwrap_or_else(|e| {
                        Evaluation::Infrastructure(format!("the evaluation task failed: {e}"))
                    })),
                    None => {
                        task.abort();
                        abort(&mut inflight);
                        self.state.generation.push_front(entry);
                        break 'run "interrupted".to_string();
                    }
                },
                None => None,
            };
            match self.record_proposed(entry, evaluation).await? {
                Step::Iteration { message } => {
                    self.commit()?;
                    self.iterations_here += 1;
                    self.say(message);
                    if self.control.pause_point("checkpoint") == Some(self.iterations_here as usize)
                    {
                        abort(&mut inflight);
                        pause_for_kill(&format!("checkpoint:{}", self.iterations_here)).await;
                    }
                }
                Step::Requeued { backoff } => {
                    // the candidate is back at the head of the generation; what was in
                    // flight behind it is evaluated again after it
                    abort(&mut inflight);
                    self.commit()?;
                    tokio::time::sleep(backoff).await;
                }
                Step::Stop(reason) => break reason,
            }
        };
        abort(&mut inflight);
        // The best program is validated before the run says how it ended; a stop request
        // leaves the queue to the resumed run.
        if reason != "interrupted"
            && !self.state.validations.is_empty()
            && self.apply_validations(None).await?
        {
            self.commit()?;
        }
        self.abort_validations();
        self.finish(reason)
    }

    /// One iteration: the next proposal of the generation (proposing a new generation when it
    /// is empty), evaluated and recorded. Nothing is saved until [`Evolution::commit`].
    pub async fn step(&mut self) -> Result<Step> {
        if self.state.generation.is_empty() && !self.fill_generation().await? {
            return Ok(Step::Stop("interrupted".into()));
        }
        let entry = self
            .state
            .generation
            .pop_front()
            .expect("a filled generation has a head");
        let evaluation = match &entry {
            Proposed::Candidate {
                iteration,
                program,
                bar,
                ..
            } => Some(
                self.bench
                    .clone()
                    .evaluate(*iteration, program.clone(), *bar)
                    .await,
            ),
            Proposed::MutationFailed { .. } => None,
        };
        self.record_proposed(entry, evaluation).await
    }

    /// Record a proposal of the generation with its evaluation (`None` for a failed mutation).
    async fn record_proposed(
        &mut self,
        entry: Proposed,
        evaluation: Option<Evaluation>,
    ) -> Result<Step> {
        debug_assert_eq!(entry.iteration(), self.state.iteration + 1);
        match (entry, evaluation) {
            (
                Proposed::MutationFailed {
                    iteration,
                    parent,
                    failure,
                },
                _,
            ) => self.record_mutation_failure(iteration, &parent, failure),
            (
                Proposed::Candidate {
                    iteration,
                    program,
                    island,
                    bar,
                },
                Some(evaluation),
            ) => {
                self.record(
                    iteration,
                    Candidate {
                        program,
                        island,
                        bar,
                    },
                    evaluation,
                )
                .await
            }
            (Proposed::Candidate { .. }, None) => {
                unreachable!("a candidate is recorded with its evaluation")
            }
        }
    }

    /// The commit point: append a `checkpoint` event and write the state after it.
    pub fn commit(&mut self) -> Result<()> {
        let rec = self.log.append(Event::Checkpoint {
            iteration: self.state.iteration,
        })?;
        self.state.log_seq = rec.seq;
        self.state.elapsed_s = self.elapsed();
        self.state.cost = self.ctx.client.as_ref().map(|c| c.accounting());
        self.ctx.dir.write_checkpoint(&self.state)
    }

    fn elapsed(&self) -> f64 {
        self.prior_elapsed + self.started.elapsed().as_secs_f64()
    }

    fn say(&self, message: String) {
        self.control.say(Progress {
            iteration: self.state.iteration,
            iterations: self.ctx.cfg.search.iterations,
            best_combined: self.state.best_fitness(),
            message,
        });
    }

    /// The stop condition that holds before the next step, if any.
    fn stop(&self) -> Option<Stop> {
        let (cfg, state) = (&self.ctx.cfg, &self.state);
        if state.iteration >= cfg.search.iterations {
            return Some(Stop::Reason("iterations".into()));
        }
        if self.control.stop.load(Ordering::SeqCst) {
            return Some(Stop::Reason("interrupted".into()));
        }
        if let Some(why) = self.ctx.client.as_ref().and_then(|c| c.budget_exhausted()) {
            self.say(format!("budget exhausted: {why}"));
            return Some(Stop::Reason("budget".into()));
        }
        // (the seed is always evaluated, so every run has a best program)
        if let (Some(max), true) = (cfg.search.max_wall_clock_s, state.iteration > 0) {
            if self.elapsed() >= max {
                return Some(Stop::Reason("wall_clock".into()));
            }
        }
        let patience = cfg.search.early_stop_evaluations;
        if patience > 0 && state.stagnation >= patience {
            return Some(Stop::Reason("early_stop".into()));
        }
        if self.control.halt_after == Some(self.iterations_here) {
            return Some(Stop::Halted);
        }
        None
    }

    /// Propose the next generation: the re-queued programs and the seed first, else
    /// `search.generation_size` children (fewer when the run has fewer iterations left), their
    /// parents sampled in iteration order from the archive as it stands, their mutations made
    /// concurrently.
    async fn fill_generation(&mut self) -> Result<bool> {
        if !self.apply_validations(Some(self.state.generations)).await? {
            return Ok(false);
        }
        self.state.generations += 1;
        let k0 = self.state.iteration + 1;
        let left = self
            .ctx
            .cfg
            .search
            .iterations
            .saturating_sub(self.state.iteration)
            .max(1);
        let size = (self.ctx.cfg.search.generation_size() as u64).min(left);
        let state = &mut self.state;
        let mut picks = Vec::new();
        for k in k0..k0 + size {
            if let Some(program) = state.pending.pop_front() {
                let island = program.island;
                picks.push(Pick::Ready(Proposed::Candidate {
                    iteration: k,
                    program,
                    island,
                    bar: None,
                }));
                continue;
            }
            if state.archive.is_empty() {
                // the seed is evaluated alone: nothing can be bred before it is in the archive
                if !picks.is_empty() {
                    break;
                }
                let code = &self.ctx.seed_code;
                let mut program =
                    Program::seed(ProgramId::derive(k, &code_hash(code)), code.clone());
                program.iteration_found = k;
                picks.push(Pick::Ready(Proposed::Candidate {
                    iteration: k,
                    program,
                    island: 0,
                    bar: None,
                }));
                break;
            }
            let island = state.archive.next_island();
            let sampled = state.archive.sample_parent(island)?.program;
            let seed = mix(self.ctx.cfg.search.seed, k);
            // Train scores are batch-noisy; the program that validates best is the reliable
            // improvement, so half of the children are bred from it (on every island's batch).
            let validated = state
                .best
                .as_ref()
                .filter(|b| b.validation.is_some())
                .filter(|_| (mix(seed, 0x7661_6c69) % 10_000) < VALIDATED_PARENT_SHARE)
                .and_then(|b| state.archive.get(&ProgramId(b.program_id.clone())).cloned());
            let parent = validated.unwrap_or(sampled);
            let inspirations = state.archive.inspirations(&parent, island)?;
            let bar = self.bench.cascade_bar(state, k);
            picks.push(Pick::Child {
                iteration: k,
                island,
                parent,
                inspirations,
                bar,
            });
        }
        let (archive, mutator, stagnation) = (&state.archive, &self.mutator, state.stagnation);
        let root = self.ctx.cfg.search.seed;
        let made: Vec<Result<Proposed>> =
            futures::future::join_all(picks.into_iter().map(|pick| async move {
                match pick {
                    Pick::Ready(p) => Ok(p),
                    Pick::Child {
                        iteration,
                        island,
                        parent,
                        inspirations,
                        bar,
                    } => {
                        let seed = mix(root, iteration);
                        let made = mutator
                            .propose(archive, &parent, &inspirations, stagnation, seed)
                            .await?;
                        Ok(match made {
                            Ok(child) => {
                                let id = ProgramId::derive(iteration, &code_hash(&child.code));
                                let mut program = Program::child(
                                    &parent,
                                    id,
                                    child.code,
                                    iteration,
                                    child.mutation,
                                );
                                program.second_parent_id = child.second_parent;
                                program.island = island;
                                Proposed::Candidate {
                                    iteration,
                                    program,
                                    island,
                                    bar,
                                }
                            }
                            Err(failure) => Proposed::MutationFailed {
                                iteration,
                                parent,
                                failure,
                            },
                        })
                    }
                }
            }))
            .await;
        for p in made {
            self.state.generation.push_back(p?);
        }
        Ok(true)
    }

    /// A failed mutation: recorded against the parent; the iteration is spent.
    fn record_mutation_failure(
        &mut self,
        k: u64,
        parent: &Program,
        failure: ChildFailure,
    ) -> Result<Step> {
        let kind = failure.kind.as_str();
        let operator = failure
            .operator
            .clone()
            .unwrap_or_else(|| self.mutator.mode_name().into());
        match &failure.raw_reply {
            Some(raw) => tracing::info!(
                iteration = k,
                operator = operator.as_str(),
                "mutation failed ({kind}): {}\nraw reply (first 2 KB):\n{}",
                crate::io::printable(&failure.message),
                crate::io::printable(raw)
            ),
            None => tracing::info!(
                iteration = k,
                operator = operator.as_str(),
                "mutation failed ({kind}): {}",
                crate::io::printable(&failure.message)
            ),
        }
        self.state
            .archive
            .record_failure(&parent.id, failure.clone());
        self.log.append(Event::CandidateFailed {
            iteration: k,
            program_id: None,
            parent_id: Some(parent.id.0.clone()),
            mutation: operator,
            failure: FailureInfo {
                stage: format!("mutation:{kind}"),
                reason: failure.message.clone(),
                stderr_tail: failure.stderr_tail.clone().unwrap_or_default(),
                raw_reply: failure.raw_reply.clone().unwrap_or_default(),
                prompt_fit: failure.prompt_fit.clone().unwrap_or_default(),
            },
            requeued: false,
        })?;
        self.state.iteration = k;
        self.state.stagnation += 1;
        Ok(Step::Iteration {
            message: format!("iteration {k}: mutation failed ({kind})"),
        })
    }

    /// Record the evaluation of iteration `k`'s candidate.
    async fn record(
        &mut self,
        k: u64,
        candidate: Candidate,
        evaluation: Evaluation,
    ) -> Result<Step> {
        let Candidate {
            mut program,
            island,
            bar,
        } = candidate;
        let parent_id = program.parent_id.as_ref().map(|p| p.0.clone());
        match evaluation {
            Evaluation::Infrastructure(why) => {
                self.state.requeues += 1;
                let requeue = self.state.requeues <= self.ctx.cfg.search.max_requeues;
                self.log.append(Event::CandidateFailed {
                    iteration: k,
                    program_id: Some(program.id.0.clone()),
                    parent_id,
                    mutation: program.mutation.kind.as_str().into(),
                    failure: FailureInfo {
                        stage: "infrastructure".into(),
                        reason: why.clone(),
                        ..FailureInfo::default()
                    },
                    requeued: requeue,
                })?;
                if !requeue {
                    return Ok(Step::Stop(format!("infrastructure: {why}")));
                }
                // not an iteration: the same candidate is evaluated again next
                self.state.generation.push_front(Proposed::Candidate {
                    iteration: k,
                    program,
                    island,
                    bar,
                });
                Ok(Step::Requeued {
                    backoff: Duration::from_millis(500 * 2u64.pow(self.state.requeues.min(6))),
                })
            }
            Evaluation::Failed(f) => {
                if let Some(pid) = &program.parent_id {
                    let mut cf = ChildFailure::new(FailureKind::Sandbox, f.reason.clone());
                    cf.stage = Some(f.stage.clone());
                    cf.stderr_tail = (!f.stderr_tail.is_empty()).then(|| f.stderr_tail.clone());
                    cf.angle = program.mutation.angle.clone();
                    self.state.archive.record_failure(pid, cf);
                }
                self.log.append(Event::CandidateFailed {
                    iteration: k,
                    program_id: Some(program.id.0.clone()),
                    parent_id,
                    mutation: program.mutation.kind.as_str().into(),
                    failure: f.clone(),
                    requeued: false,
                })?;
                if self.state.archive.is_empty() {
                    // nothing to evolve from: the run stops, and says why in its log
                    let cost = self.cost();
                    self.log.append(Event::RunStopped {
                        reason: format!("seed_failed: {}: {}", f.stage, f.reason),
                        iterations: self.state.iteration,
                        best_program_id: None,
                        best_metrics: None,
                        best_validation: None,
                        cost,
                        mutations: BTreeMap::new(),
                        new_bests: BTreeMap::new(),
                        episodes: None,
                    })?;
                    return Err(Error::Run {
                        path: self.ctx.dir.path().to_path_buf(),
                        message: format!(
                            "the seed program failed ({}): {}\n{}",
                            f.stage, f.reason, f.stderr_tail
                        ),
                    });
                }
                self.state.requeues = 0;
                self.state.iteration = k;
                self.state.stagnation += 1;
                Ok(Step::Iteration {
                    message: format!("iteration {k}: candidate failed ({})", f.stage),
                })
            }
            Evaluation::Stopped {
                scored: s,
                stage_score,
                bar,
            } => {
                self.state.requeues = 0;
                let key = s.tasks.join(",");
                self.state
                    .stage_scores
                    .entry(key)
                    .or_default()
                    .push(stage_score);
                // an evaluation without a new elite, for early stopping
                self.state.stagnation += 1;
                self.log.append(Event::CandidateStopped {
                    iteration: k,
                    program_id: program.id.0.clone(),
                    parent_id,
                    second_parent_id: program.second_parent_id.as_ref().map(|p| p.0.clone()),
                    island,
                    mutation: program.mutation.kind.as_str().into(),
                    mutation_summary: program.mutation.summary.clone(),
                    epoch: s.plan.epoch,
                    batch_in_epoch: s.plan.batch_in_epoch,
                    tasks: s.tasks.clone(),
                    stage: 1,
                    stage_score,
                    bar,
                    metrics: s.metrics.clone(),
                    personas: s.personas,
                    code_hash: program.code_hash.clone(),
                    code: program.code.clone(),
                    seconds: s.seconds,
                    cost: self.cost(),
                })?;
                self.state.iteration = k;
                let islands = self.ctx.cfg.archive.num_islands;
                if islands > 0 {
                    self.state.archive.maybe_migrate(k / islands as u64);
                }
                Ok(Step::Iteration {
                    message: format!(
                        "iteration {k}: stopped after stage 1 (score {stage_score:.3} < bar {bar:.3})"
                    ),
                })
            }
            Evaluation::Scored(s) => {
                self.state.requeues = 0;
                if let Some(score) = s.stage_score {
                    self.state
                        .stage_scores
                        .entry(s.tasks.join(","))
                        .or_default()
                        .push(score);
                }
                program.metrics = program_metrics(&s.metrics);
                // what its personas say about each axis, for its structural children
                program.metrics.extend(axis_evidence(&s.personas));
                program.reflection = Some(s.reflection.clone());
                self.state
                    .parents
                    .insert(program.id.0.clone(), parent_id.clone());
                let added = self.state.archive.add(program.clone(), island)?;
                self.state.stagnation = if added.new_elite {
                    0
                } else {
                    self.state.stagnation + 1
                };
                self.log.append(Event::CandidateEvaluated {
                    iteration: k,
                    program_id: program.id.0.clone(),
                    parent_id,
                    second_parent_id: program.second_parent_id.as_ref().map(|p| p.0.clone()),
                    island,
                    mutation: program.mutation.kind.as_str().into(),
                    mutation_summary: program.mutation.summary.clone(),
                    prompt_fit: program.mutation.prompt_fit.clone(),
                    epoch: s.plan.epoch,
                    batch_in_epoch: s.plan.batch_in_epoch,
                    tasks: s.tasks.clone(),
                    metrics: s.metrics.clone(),
                    new_elite: added.new_elite,
                    new_best: added.new_best,
                    stage_score: s.stage_score,
                    bar: s.bar,
                    personas: s.personas,
                    reflection: s.reflection,
                    code_hash: program.code_hash.clone(),
                    code: program.code.clone(),
                    seconds: s.seconds,
                    cost: self.cost(),
                })?;
                let batch_best = s.plan.n_personas == self.bench.schedule.n_personas && {
                    let key = batch_key(&s.tasks, &s.plan);
                    let beats = self
                        .state
                        .batch_best
                        .get(&key)
                        .is_none_or(|b| s.metrics.combined > *b);
                    if beats {
                        self.state.batch_best.insert(key, s.metrics.combined);
                    }
                    beats
                };
                if added.new_best || batch_best {
                    let bar = self.validation_bar();
                    if self.ctx.cfg.search.generation_size() > 1 {
                        self.state.validations.push_back(QueuedValidation {
                            iteration: k,
                            generation: self.state.generations,
                            program: program.clone(),
                            train: s.metrics.clone(),
                            bar,
                        });
                        self.spawn_validations();
                    } else {
                        let outcome = self.bench.validate_in_stages(&program.code, bar).await;
                        self.apply_validation(k, &program, &s.metrics, outcome, bar)?;
                    }
                }
                self.state.iteration = k;
                let islands = self.ctx.cfg.archive.num_islands;
                if islands > 0 {
                    self.state.archive.maybe_migrate(k / islands as u64);
                }
                let m = &s.metrics;
                Ok(Step::Iteration {
                    message: format!(
                        "iteration {k}: combined {:.3} (HL {:.3}, cov {:.3}){}",
                        m.combined,
                        m.human_likeness,
                        m.coverage,
                        if added.new_best { " new best" } else { "" }
                    ),
                })
            }
        }
    }

    /// Start the queued validations that are not running yet (after a record, and for the
    /// queue of a resumed run).
    fn spawn_validations(&mut self) {
        for q in &self.state.validations {
            if !self.validating.contains_key(&q.iteration) {
                let (bench, code, bar) = (self.bench.clone(), q.program.code.clone(), q.bar);
                let task = tokio::spawn(async move { bench.validate_in_stages(&code, bar).await });
                self.validating.insert(q.iteration, task);
            }
        }
    }

    /// Apply the queued validations, in iteration order: those of generations before `before`
    /// (all with `None`), waiting for their tasks. `Ok(false)`: a stop request came while
    /// waiting (what is not applied stays queued).
    async fn apply_validations(&mut self, before: Option<u64>) -> Result<bool> {
        self.spawn_validations();
        while let Some(q) = self.state.validations.front() {
            if before.is_some_and(|g| q.generation >= g) {
                break;
            }
            let k = q.iteration;
            let Some(mut task) = self.validating.remove(&k) else {
                unreachable!("every queued validation was spawned");
            };
            let Some(joined) = join_unless_stopped(&mut task, &self.control.stop).await else {
                self.validating.insert(k, task);
                return Ok(false);
            };
            let outcome = joined.unwrap_or_else(|e| Staged {
                outcome: CandidateOutcome::Infrastructure(format!(
                    "the validation task failed: {e}"
                )),
                stage_score: None,
                stopped: false,
            });
            let q = self
                .state
                .validations
                .pop_front()
                .expect("the queue has this head");
            self.apply_validation(q.iteration, &q.program, &q.train, outcome, q.bar)?;
        }
        Ok(true)
    }

    /// Stop the validations running in the background (they stay queued in the state).
    fn abort_validations(&mut self) {
        for (_, task) in std::mem::take(&mut self.validating) {
            task.abort();
        }
    }

    /// Log the validation of a new train best or batch best (final N, fixed weights, the
    /// validation tasks) and make it the run's best when it [displaces](RunBest::displaces) the
    /// one held: a program that validates at least as well, or — while no validation has
    /// succeeded — one whose validation failed.
    fn apply_validation(
        &mut self,
        k: u64,
        program: &Program,
        train: &EvalMetrics,
        staged: Staged,
        bar: Option<f64>,
    ) -> Result<()> {
        let Staged {
            outcome,
            stage_score,
            stopped,
        } = staged;
        match outcome {
            CandidateOutcome::Scored { metrics, .. } if stopped => {
                // below the run's best after the first stage: it cannot displace it
                self.log.append(Event::ValidationStopped {
                    iteration: k,
                    program_id: program.id.0.clone(),
                    stage: 1,
                    stage_score: stage_score.unwrap_or_default(),
                    bar: bar.unwrap_or_default(),
                    metrics,
                })?;
                Ok(())
            }
            CandidateOutcome::Scored {
                metrics,
                persona_records,
                episodes,
                ..
            } => {
                self.log.append(Event::Validation {
                    iteration: k,
                    program_id: program.id.0.clone(),
                    metrics: metrics.clone(),
                })?;
                let displaced = self.offer_best(
                    program,
                    train,
                    Ok(&metrics),
                    Some((&persona_records, &episodes)),
                )?;
                if displaced {
                    self.state.best_stage_score = stage_score;
                }
                Ok(())
            }
            CandidateOutcome::Failed(failure) => self.validation_failed(k, program, train, failure),
            CandidateOutcome::Infrastructure(why) => self.validation_failed(
                k,
                program,
                train,
                FailureInfo {
                    stage: "infrastructure".into(),
                    reason: why,
                    ..FailureInfo::default()
                },
            ),
        }
    }

    /// Log a failed validation of a new train best or batch best; it becomes the run's best
    /// (without validation results) only while no validation has succeeded.
    fn validation_failed(
        &mut self,
        k: u64,
        program: &Program,
        train: &EvalMetrics,
        failure: FailureInfo,
    ) -> Result<()> {
        tracing::warn!(
            iteration = k,
            program = program.id.0.as_str(),
            "validation of the new best failed ({}): {}",
            failure.stage,
            crate::io::printable(&failure.reason)
        );
        let why = format!("{}: {}", failure.stage, failure.reason);
        self.log.append(Event::ValidationFailed {
            iteration: k,
            program_id: program.id.0.clone(),
            failure,
        })?;
        if self.offer_best(program, train, Err(&why), None)? {
            self.state.best_stage_score = None;
        }
        Ok(())
    }

    /// The one place the run's best changes: when `program` (validated as `validation`)
    /// [displaces](RunBest::displaces) the best held, it becomes [`State::best`] and `best/` is
    /// written with it (and the personas and episodes of its validation).
    fn offer_best(
        &mut self,
        program: &Program,
        train: &EvalMetrics,
        validation: std::result::Result<&EvalMetrics, &str>,
        records: Option<(&[Persona], &[Episode])>,
    ) -> Result<bool> {
        let held = self.state.best.as_ref().and_then(|b| b.validation.as_ref());
        if !RunBest::displaces(held, validation.ok()) {
            return Ok(false);
        }
        let best = RunBest::of(
            program,
            train,
            validation,
            self.state.lineage(&program.id.0),
        );
        self.ctx.dir.write_best(&best, records)?;
        self.state.best = Some(best);
        Ok(true)
    }

    /// The cascade's bar for a validation queued now: the first-stage validation score of the
    /// run's best, less the margin (None: it plays in full — the cascade is off, or the run's
    /// best has no such score).
    fn validation_bar(&self) -> Option<f64> {
        let s = &self.ctx.cfg.search;
        s.cascade
            .then_some(self.state.best_stage_score)
            .flatten()
            .map(|b| b - s.cascade_margin)
    }

    /// The LLM cost so far (a note offline).
    fn cost(&self) -> CostSummary {
        match &self.ctx.client {
            Some(c) => match serde_json::to_value(c.accounting()) {
                Ok(Value::Object(m)) => m.into_iter().collect(),
                _ => BTreeMap::new(),
            },
            None => BTreeMap::from([(
                "total".to_string(),
                json!({"calls": 0, "usd": 0.0, "note": "offline run: no LLM calls"}),
            )]),
        }
    }

    /// What the `halt_after` hook returns: the state as a kill would leave it (nothing logged).
    fn halted(&self) -> RunSummary {
        RunSummary {
            run_dir: self.ctx.dir.path().to_path_buf(),
            reason: "halted (test hook)".into(),
            iterations: self.state.iteration,
            best_program_id: None,
            best_metrics: None,
            best_validation: None,
            offline: self.ctx.cfg.offline(),
            mutations: BTreeMap::new(),
            new_bests: BTreeMap::new(),
            cost: None,
            processes: Vec::new(),
            episodes: None,
        }
    }

    /// Log `run_stopped` and summarise the run; both name the run's best ([`State::best`]) with
    /// its own numbers.
    fn finish(mut self, reason: String) -> Result<RunSummary> {
        let records = runlog::read(&self.ctx.dir.log_path()).unwrap_or_default();
        let best = self.state.best.take();
        let mutations = runlog::mutation_outcomes(&records);
        let new_bests = crate::evolve::rundir::new_bests(&records);
        let mut cost = self.cost();
        let processes = match &self.ctx.ledger {
            Some(_) => {
                crate::evolve::ledger::process_shares(&crate::evolve::ledger::path(&self.ctx.dir))?
            }
            None => Vec::new(),
        };
        if !processes.is_empty() {
            cost.insert("processes".into(), json!(processes));
        }
        let total = self.ctx.client.as_ref().map(|c| c.accounting().total);
        let episodes = runlog::episode_counts(&records, self.baseline_episodes());
        self.log.append(Event::RunStopped {
            reason: reason.clone(),
            iterations: self.state.iteration,
            best_program_id: best.as_ref().map(|b| b.program_id.clone()),
            best_metrics: best.as_ref().map(|b| b.train.clone()),
            best_validation: best.as_ref().and_then(|b| b.validation.clone()),
            cost,
            mutations: mutations.clone(),
            new_bests: new_bests.clone(),
            episodes: Some(episodes),
        })?;
        Ok(RunSummary {
            run_dir: self.ctx.dir.path().to_path_buf(),
            reason,
            iterations: self.state.iteration,
            best_program_id: best.as_ref().map(|b| b.program_id.clone()),
            best_metrics: best.as_ref().map(|b| b.train.clone()),
            best_validation: best.and_then(|b| b.validation),
            offline: self.ctx.cfg.offline(),
            mutations,
            new_bests,
            cost: total,
            processes,
            episodes: Some(episodes),
        })
    }

    /// The baseline's episodes (all of them, failed ones included), from its file.
    fn baseline_episodes(&self) -> Option<u64> {
        let text = crate::io::read_to_string(&self.ctx.dir.join("baseline/episodes.jsonl")).ok()?;
        Some(text.lines().filter(|l| !l.trim().is_empty()).count() as u64)
    }
}

impl Bench {
    /// The cascade's bar for a child of iteration `k` proposed from `state`: the configured
    /// quantile of the stage-1 scores recorded on its batch, less the margin; None (play in
    /// full) with the cascade off, or when nothing was scored on its batch yet.
    fn cascade_bar(&self, state: &State, k: u64) -> Option<f64> {
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
    async fn evaluate(self, k: u64, program: Program, bar: Option<f64>) -> Evaluation {
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
        let staged = evaluate_in_stages(
            &program.code,
            &batch,
            plan.n_personas,
            plan.weights(),
            &self.ctx.generator,
            self.ctx.runner.as_ref(),
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
                        }),
                    };
                }
                let reflection =
                    reflection::reflect(&self.scorer, &evidence, self.reflection_model.as_deref())
                        .await;
                Evaluation::Scored(Box::new(Scored {
                    metrics,
                    stage_score,
                    bar,
                    personas,
                    reflection,
                    tasks,
                    plan,
                    seconds,
                }))
            }
        }
    }
}

impl Bench {
    /// The validation of `code` in the cascade's two stages when it is on: below `bar` after
    /// the first (the first personas of every validation task), it stops there.
    async fn validate_in_stages(&self, code: &str, bar: Option<f64>) -> Staged {
        let cfg = &self.ctx.cfg;
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
            self.ctx.val_runner.as_ref(),
            &self.scorer,
            derive_seed(cfg.search.seed, "validation"),
            cfg.search.cascade.then_some(&stage),
        )
        .await
    }

    /// The validation of `code`: final N, fixed weights, the validation tasks.
    async fn validate(&self, code: &str) -> CandidateOutcome {
        evaluate_candidate(
            code,
            &self.val,
            self.schedule.n_personas,
            Weights::new(self.schedule.lambda_h, self.schedule.lambda_b),
            &self.ctx.generator,
            self.ctx.val_runner.as_ref(),
            &self.scorer,
            derive_seed(self.ctx.cfg.search.seed, "validation"),
        )
        .await
    }
}

impl RunControl {
    /// The N of the `pause_at` test hook when it names this point.
    fn pause_point(&self, point: &str) -> Option<usize> {
        let (p, n) = self.pause_at.as_deref()?.split_once(':')?;
        (p == point).then(|| n.parse().ok()).flatten()
    }

    fn say(&self, progress: Progress) {
        if let Some(p) = &self.progress {
            p(&progress);
        }
    }
}

/// Wait for `task`, checking `stop` every 200 ms: `None` when a stop is requested first (the
/// task is left running; the caller aborts or keeps it).
async fn join_unless_stopped<T>(
    task: &mut tokio::task::JoinHandle<T>,
    stop: &AtomicBool,
) -> Option<std::result::Result<T, tokio::task::JoinError>> {
    loop {
        match tokio::time::timeout(Duration::from_millis(200), &mut *task).await {
            Ok(joined) => return Some(joined),
            Err(_) if stop.load(Ordering::SeqCst) => return None,
            Err(_) => {}
        }
    }
}

/// Share (in 1/10,000) of children bred from the best-validated program rather than from the
/// archive's draw.
const VALIDATED_PARENT_SHARE: u64 = 5_000;

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

/// The key of a train batch: its tasks, persona count and human-likeness weight.
fn batch_key(tasks: &[String], plan: &BatchPlan) -> String {
    format!(
        "{}|{}|{:.4}",
        tasks.join(","),
        plan.n_personas,
        plan.lambda_h
    )
}

/// The final weights (validation, `ppol eval`, and ranking with `select_by = "fixed"`).
fn final_weights(cfg: &RunConfig) -> Weights {
    Weights::new(cfg.fitness.lambda_h, cfg.fitness.lambda_b)
}

/// The one check of a run's settings, before it creates or pays for anything, in order: every
/// section's values ([`RunConfig::validate`], each section's own `validate`), what only a run
/// can check (the archive's metrics, below, and the mutation settings, [`Mutator::check`]),
/// then the files and directories it reads ([`RunConfig::check_inputs`]). `run::evolve` and
/// `run::resume` call it; the front ends call it (as `evolve::run::check_config`) before they
/// start a run, so a bad setting is exit 2 / `ConfigError` at once.
pub fn check_config(cfg: &RunConfig) -> Result<()> {
    cfg.validate()?;
    check_metric_names(cfg)?;
    Mutator::check(&cfg.mutation, &cfg.archive, !cfg.offline())?;
    cfg.check_inputs()
}

/// The archive ranks and bins programs by metrics they carry: `fitness_metric` and every
/// descriptor must be one of them, or the first evaluation would fail after being paid for.
fn check_metric_names(cfg: &RunConfig) -> Result<()> {
    let known = program_metric_names(cfg.fitness.select_by);
    let check = |key: &str, name: &str| -> Result<()> {
        if known.iter().any(|k| k == name) {
            Ok(())
        } else {
            Err(Error::config(
                key,
                format!(
                    "unknown metric '{name}' (programs carry: {})",
                    known.join(", ")
                ),
            ))
        }
    };
    check("archive.fitness_metric", &cfg.archive.fitness_metric)?;
    for d in &cfg.archive.feature_dimensions {
        check("archive.feature_dimensions", d)?;
    }
    Ok(())
}

/// The first event of a run: configuration, seeds, models and the hashes of every embedded text.
fn run_started(ctx: &RunContext) -> Event {
    let cfg = &ctx.cfg;
    let mut seeds = BTreeMap::from(
        ["archive", "baseline", "val_split", "human_holdout"]
            .map(|part| (part.to_string(), derive_seed(cfg.search.seed, part))),
    );
    seeds.insert("root".to_string(), cfg.search.seed);
    let models: BTreeMap<String, String> = CallRole::ALL
        .iter()
        .map(|r| {
            (
                r.as_str().to_string(),
                ctx.client
                    .as_ref()
                    .map_or("scripted (offline)".into(), |c| c.describe_role(*r)),
            )
        })
        .collect();
    let mut hashes: BTreeMap<String, String> = crate::evolve::mutation::template_hashes()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    hashes.insert(
        "harness.py".into(),
        code_hash(crate::generate::sandbox::HARNESS_PY),
    );
    hashes.insert(
        "feature_banks".into(),
        code_hash(cfg.run.feature_set.banks().1),
    );
    hashes.insert("seed_program".into(), code_hash(&ctx.seed_code));
    Event::RunStarted {
        schema_version: runlog::SCHEMA_VERSION,
        ppol_version: env!("CARGO_PKG_VERSION").into(),
        name: cfg.run.name.clone(),
        config: serde_json::to_value(cfg).unwrap_or(Value::Null),
        seeds,
        offline: cfg.offline(),
        models,
        hashes,
        feature_set: cfg.run.feature_set.name().into(),
        domain: ctx.world.domain(),
        world: ctx.world.label(),
        splits: BTreeMap::from([
            ("train".into(), ctx.train.clone()),
            ("val".into(), ctx.val.clone()),
            ("test".into(), ctx.test.clone()),
        ]),
        human: json!({"sources": ctx.human_source, "n_run": ctx.humans.len(), "n_heldout": ctx.humans_heldout.len()}),
    }
}

/// The discriminator's training summary, with the baseline's score on the train tasks.
fn discriminator_trained(
    scorer: &Scorer,
    baseline: &[Episode],
    train: &[String],
    schedule: &Schedule,
) -> Event {
    let train: std::collections::BTreeSet<&String> = train.iter().collect();
    let base_train: Vec<Episode> = baseline
        .iter()
        .filter(|e| train.contains(&e.task_id))
        .cloned()
        .collect();
    let weights = Weights::new(schedule.lambda_h, schedule.lambda_b);
    let training = &scorer.discriminator.training;
    Event::DiscriminatorTrained {
        n_human: training.n_human,
        n_baseline: training.n_simulator,
        grouped_auc: training.grouped_auc.as_ref().map(|a| a.mean),
        top_features: training.top_features.clone(),
        baseline: crate::evolve::evaluate::score_episodes(scorer, &base_train, weights, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_archive_metrics_are_named_before_anything_runs() {
        let mut cfg = RunConfig::default();
        assert!(check_metric_names(&cfg).is_ok());
        cfg.archive.fitness_metric = "human_likeness".into();
        assert!(check_metric_names(&cfg).is_ok());
        cfg.archive.fitness_metric = "score".into();
        let e = check_metric_names(&cfg).unwrap_err().to_string();
        assert!(
            e.contains("archive.fitness_metric") && e.contains("'score'"),
            "{e}"
        );
        cfg.archive.fitness_metric = "combined".into();
        cfg.archive.feature_dimensions = vec!["coverage".into(), "dice".into()];
        let e = check_metric_names(&cfg).unwrap_err().to_string();
        assert!(
            e.contains("archive.feature_dimensions") && e.contains("'dice'"),
            "{e}"
        );
    }

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

    #[test]
    fn the_state_round_trips_through_its_checkpoint_text() {
        let cfg = RunConfig::default();
        let mut state = State::new(&cfg).unwrap();
        let seed = Program::seed("s", "x = 1\n").with_metrics([
            ("combined", 0.4),
            ("human_likeness", 0.3),
            ("coverage", 0.5),
        ]);
        state.archive.add(seed, 0).unwrap();
        state.parents.insert("c".into(), Some("s".into()));
        state.parents.insert("s".into(), None);
        state.iteration = 3;
        let text = serde_json::to_string(&state).unwrap();
        let back: State = serde_json::from_str(&text).unwrap();
        assert_eq!(back.iteration, 3);
        assert_eq!(back.archive.to_json(), state.archive.to_json());
        assert_eq!(back.lineage("c"), ["s", "c"]);
        // the archive is stored as a string, as in every `ppol-run/1` checkpoint
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(v["archive"].is_string());
    }
}
