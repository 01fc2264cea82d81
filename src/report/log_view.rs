//! Extraction, second step: the events of `log.jsonl` sorted by what the page shows of them
//! (candidates evaluated and failed, validations, the run's start and stop, checkpoints).
//! The run's best program and its costs are not derived here: [`crate::evolve::rundir::summary`]
//! reads them, for the report and every other reader.

use crate::evolve::runlog::{EvalMetrics, Event, Record};

/// A `candidate_evaluated` event: a candidate scored in full on its train batch.
pub(crate) struct Evaluated<'a> {
    pub(crate) iteration: u64,
    pub(crate) program_id: &'a str,
    pub(crate) mutation: &'a str,
    pub(crate) summary: &'a str,
    pub(crate) metrics: &'a EvalMetrics,
    pub(crate) new_best: bool,
    pub(crate) seconds: f64,
}

/// A `candidate_failed` or `validation_failed` event.
pub(crate) struct Failed<'a> {
    pub(crate) iteration: u64,
    pub(crate) program_id: Option<&'a str>,
    pub(crate) mutation: &'a str,
    pub(crate) stage: &'a str,
    pub(crate) reason: &'a str,
    pub(crate) raw_reply: &'a str,
    pub(crate) prompt_fit: &'a str,
    pub(crate) requeued: bool,
}

/// The log's events by kind, borrowed from the records.
pub(crate) struct LogView<'a> {
    pub(crate) started: Option<&'a Record>,
    pub(crate) stopped: Option<&'a Record>,
    pub(crate) discriminator: Option<&'a Event>,
    /// `discriminator_retrained` events (`[fitness] retrain_every`), in order.
    pub(crate) retrained: Vec<&'a Event>,
    pub(crate) evaluated: Vec<Evaluated<'a>>,
    pub(crate) failed: Vec<Failed<'a>>,
    pub(crate) validations: Vec<(u64, &'a str, &'a EvalMetrics)>,
    pub(crate) resumed: Vec<u64>,
    pub(crate) checkpoints: usize,
    pub(crate) last_time: Option<&'a str>,
}

impl<'a> LogView<'a> {
    pub(crate) fn new(log: &'a [Record]) -> Self {
        let mut v = LogView {
            started: None,
            stopped: None,
            discriminator: None,
            retrained: Vec::new(),
            evaluated: Vec::new(),
            failed: Vec::new(),
            validations: Vec::new(),
            resumed: Vec::new(),
            checkpoints: 0,
            last_time: log.last().map(|r| r.time.as_str()),
        };
        for r in log {
            match &r.event {
                Event::RunStarted { .. } => {
                    v.started.get_or_insert(r);
                }
                Event::RunStopped { .. } => v.stopped = Some(r),
                e @ Event::DiscriminatorTrained { .. } => v.discriminator = Some(e),
                e @ Event::DiscriminatorRetrained { .. } => v.retrained.push(e),
                Event::CandidateEvaluated {
                    iteration,
                    program_id,
                    mutation,
                    mutation_summary,
                    metrics,
                    new_best,
                    seconds,
                    ..
                } => v.evaluated.push(Evaluated {
                    iteration: *iteration,
                    program_id,
                    mutation,
                    summary: mutation_summary,
                    metrics,
                    new_best: *new_best,
                    seconds: *seconds,
                }),
                Event::CandidateFailed {
                    iteration,
                    program_id,
                    mutation,
                    failure,
                    requeued,
                    ..
                } => v.failed.push(Failed {
                    iteration: *iteration,
                    program_id: program_id.as_deref(),
                    mutation,
                    stage: &failure.stage,
                    reason: &failure.reason,
                    raw_reply: &failure.raw_reply,
                    prompt_fit: &failure.prompt_fit,
                    requeued: *requeued,
                }),
                Event::Validation {
                    iteration,
                    program_id,
                    metrics,
                } => {
                    v.validations.push((*iteration, program_id, metrics));
                }
                Event::Checkpoint { .. } => v.checkpoints += 1,
                Event::Resumed { from_iteration } => v.resumed.push(*from_iteration),
                Event::ValidationFailed {
                    iteration,
                    program_id,
                    failure,
                } => v.failed.push(Failed {
                    iteration: *iteration,
                    program_id: Some(program_id),
                    mutation: "validation",
                    stage: &failure.stage,
                    reason: &failure.reason,
                    raw_reply: &failure.raw_reply,
                    prompt_fit: &failure.prompt_fit,
                    requeued: false,
                }),
                // counted in the facts (episodes played, mutation outcomes); never a score
                // of the curves, which are those of full evaluations
                Event::CandidateStopped { .. } | Event::ValidationStopped { .. } => {}
            }
        }
        v
    }

    pub(crate) fn baseline(&self) -> Option<&'a EvalMetrics> {
        match self.discriminator {
            Some(Event::DiscriminatorTrained { baseline, .. }) => Some(baseline),
            _ => None,
        }
    }
}
