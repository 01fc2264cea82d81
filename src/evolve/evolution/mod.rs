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
//!    persona, scored by the run's [`Scorer`], with its
//!    [reflection](crate::evolve::mutation::reflection).
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
//!
//! # Files
//!
//! This file holds the [`Evolution`] itself: its start, the driver ([`Evolution::run`]),
//! [`Evolution::step`] and [`Evolution::commit`]. The rest, by job: `propose` (a generation's
//! proposals), `bench` (evaluating a candidate and validating a best), `record` (what an
//! iteration writes to the archive and the log), `validate` (the validation queue and the
//! run's best), `stop` (cost and stop rules, how a run ends) and `control` (progress, the
//! stop flag and test hooks, the summary). The [`State`] is the checkpoint and lives with the
//! run directory ([`crate::evolve::rundir::checkpoint`]).

mod bench;
mod control;
mod propose;
mod record;
mod retrain;
mod stop;
mod validate;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::dialogue::Dialogue;
use crate::evolve::archive::program::Program;
use crate::evolve::config::MutationSection;
use crate::evolve::context::{pause_for_kill, RunContext};
use crate::evolve::evaluate::{CandidateOutcome, Staged};
use crate::evolve::mutation::dispatch::Mutator;
use crate::evolve::rundir::checkpoint::{Proposed, State};
use crate::evolve::rundir::runlog::{self, Event, RunLog};
use crate::evolve::rundir::RunBest;
use crate::fitness::features::fingerprint_many;
use crate::fitness::reference::HumanReference;
use crate::fitness::score::Scorer;
use crate::persona::Persona;
use crate::simulate::episode::record::{Episode, EpisodeStatus};
use crate::Result;

use bench::{Bench, Evaluation};
use control::join_unless_stopped;
pub use control::{Progress, ProgressFn, RunControl, RunSummary};
use record::{discriminator_trained, run_started};
use stop::Stop;

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

/// One evaluation in flight, in iteration order.
struct InFlight {
    iteration: u64,
    task: Option<tokio::task::JoinHandle<Evaluation>>,
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
    /// Task and fingerprint of each baseline dialogue the discriminator was trained on (a run
    /// that retrains it only; see `retrain`).
    baseline_rows: Arc<Vec<(String, Vec<f64>)>>,
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
        // what the search saw, by content: `ppol eval --human FILE` leaves these out
        let seen: String = ctx
            .humans
            .iter()
            .map(|d| d.content_sha256() + "\n")
            .collect();
        crate::io::write_atomic(
            &ctx.dir.join(crate::evolve::rundir::SEEN_HUMANS),
            seen.as_bytes(),
        )?;
        ctx.dir
            .write_jsonl("human_heldout.jsonl", &ctx.humans_heldout)?;
        let mut log = RunLog::open(&ctx.dir.log_path())?;
        if checkpoint.is_none() && log.next_seq() == 1 {
            log.append(run_started(&ctx))?;
        }
        let (discriminator, baseline) = ctx
            .baseline_and_discriminator(
                &reference,
                control.pause_point("baseline"),
                &control.stop,
                cfg.search.max_wall_clock_s.and_then(|s| {
                    std::time::Instant::now()
                        .checked_add(std::time::Duration::try_from_secs_f64(s).ok()?)
                }),
                &control.batch_reporter(0, cfg.search.iterations, true),
            )
            .await?;
        let scorer = Scorer::new(reference, discriminator, cfg.fitness.coverage())?
            .with_objective(cfg.fitness.objective)?;
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
                detail: false,
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
        // a run that retrained goes on with the discriminator its checkpoint names
        let scorer = match Self::retrained_discriminator(&ctx.dir, &state.retraining)? {
            Some(discriminator) => Scorer {
                discriminator,
                ..scorer
            },
            None => scorer,
        };
        let baseline_rows = if cfg.fitness.retrain_every > 0 {
            let ok: Vec<Dialogue> = baseline
                .iter()
                .filter(|e| e.status == EpisodeStatus::Ok)
                .map(|e| e.to_dialogue())
                .collect();
            fingerprint_many(&ok, scorer.reference.feature_set)
                .into_iter()
                .zip(&ok)
                .map(|(f, d)| (d.group_key().to_string(), f.0.to_vec()))
                .collect()
        } else {
            Vec::new()
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
                control: control.clone(),
            },
            ctx,
            mutator,
            log,
            control,
            state,
            started: Instant::now(),
            iterations_here: 0,
            validating: BTreeMap::new(),
            baseline_rows: Arc::new(baseline_rows),
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
        match self.bench.validate(&best.program_id, &best.code).await {
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
            detail: false,
        });
    }
}
