//! The validation queue: a new train best or batch best is validated (final N, fixed weights,
//! the validation tasks), at its record with generations of one, else in the background and
//! applied in iteration order (see the [module docs](super)); [`Evolution::offer_best`] is the
//! one place the run's best ([`RunBest`]) changes.

use crate::evolve::archive::program::Program;
use crate::evolve::evaluate::{CandidateOutcome, Staged};
use crate::evolve::evolution::bench::kept_fingerprints;
use crate::evolve::evolution::control::join_unless_stopped;
use crate::evolve::evolution::Evolution;
use crate::evolve::rundir::runlog::{EvalMetrics, Event, FailureInfo};
use crate::evolve::rundir::RunBest;
use crate::persona::Persona;
use crate::simulate::episode::record::Episode;
use crate::Result;

impl Evolution {
    /// Start the queued validations that are not running yet (after a record, and for the
    /// queue of a resumed run).
    pub(super) fn spawn_validations(&mut self) {
        for q in &self.state.validations {
            if !self.validating.contains_key(&q.iteration) {
                let (bench, id, code, bar) = (
                    self.bench.clone(),
                    q.program.id.clone(),
                    q.program.code.clone(),
                    q.bar,
                );
                let task =
                    tokio::spawn(
                        async move { bench.validate_in_stages(id.as_str(), &code, bar).await },
                    );
                self.validating.insert(q.iteration, task);
            }
        }
    }

    /// Apply the queued validations, in iteration order: those of generations before `before`
    /// (all with `None`), waiting for their tasks. `Ok(false)`: a stop request came while
    /// waiting (what is not applied stays queued).
    pub(super) async fn apply_validations(&mut self, before: Option<u64>) -> Result<bool> {
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
    pub(super) fn abort_validations(&mut self) {
        for (_, task) in std::mem::take(&mut self.validating) {
            task.abort();
        }
    }

    /// Log the validation of a new train best or batch best (final N, fixed weights, the
    /// validation tasks) and make it the run's best when it [displaces](RunBest::displaces) the
    /// one held: a program that validates at least as well, or — while no validation has
    /// succeeded — one whose validation failed.
    pub(super) fn apply_validation(
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
                fingerprints,
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
                    let rows = kept_fingerprints(&episodes, &fingerprints);
                    self.keep_best_validation(&program.id.0, &metrics, &rows)?;
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
    pub(super) fn validation_failed(
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
    ///
    /// [`State::best`]: crate::evolve::rundir::checkpoint::State::best
    pub(super) fn offer_best(
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
    pub(super) fn validation_bar(&self) -> Option<f64> {
        let s = &self.ctx.cfg.search;
        s.cascade
            .then_some(self.state.best_stage_score)
            .flatten()
            .map(|b| b - s.cascade_margin)
    }
}
