//! The run log: an append-only JSONL file of typed events (`runs/<name>/log.jsonl`). It is the
//! source of truth for reports and evaluation tables; live state is never read by them.
//!
//! Every line is `{"seq": n, "time": "<RFC3339 UTC>", "event": "<kind>", ...fields}`. `seq` is
//! strictly increasing. Writers append whole lines and fsync; readers ignore a torn last line.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Error, Result};

/// Log format version, written in `run_started`.
pub const SCHEMA_VERSION: u32 = 1;

/// Metrics of one evaluation of a candidate (train batch or validation set).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EvalMetrics {
    /// λh·human_likeness + λb·coverage: the score the archive ranks by (with `lambda_h`, `lambda_b`).
    pub combined: f64,
    /// The reference's ramped training score (λb grows with N/N_final), when it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub combined_ramp: Option<f64>,
    /// Mean P(human) over all episodes.
    pub human_likeness: f64,
    /// Mean over tasks of Chamfer coverage.
    pub coverage: f64,
    /// Weight of human-likeness used.
    pub lambda_h: f64,
    /// Weight of coverage used.
    pub lambda_b: f64,
    /// Share of episodes with reward ≥ 1.
    pub success_rate: f64,
    /// Episodes that ran to an end.
    pub n_episodes: usize,
    /// Episodes that failed (counted, never silently dropped).
    pub n_failed_episodes: usize,
    /// Tasks in the batch.
    pub n_tasks: usize,
    /// Personas per task.
    pub n_personas: usize,
    /// Dice D1–D4 and overall of the batch's mean fingerprint against the human mean.
    pub dice: crate::fitness::coverage::Dice,
}

/// A persona generated during an evaluation, with its outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PersonaOutcome {
    /// Task id.
    pub task_id: String,
    /// Persona id.
    pub persona_id: String,
    /// Active axes.
    pub axes: Vec<String>,
    /// P(human) of its episode (None when the episode failed).
    pub p_human: Option<f64>,
    /// Reward of its episode.
    pub reward: Option<f64>,
}

/// A failed candidate or operation: what stage, why, and the tail of stderr when there is one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FailureInfo {
    /// `mutation:<kind>` | `sandbox:<stage>` | `validation` | `infrastructure`
    pub stage: String,
    /// Human-readable reason.
    pub reason: String,
    /// Last lines of stderr, when relevant.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr_tail: String,
    /// The first 2 KB of the model's answer when it could not be used (an unparsable
    /// mutation, a rewrite without a program).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub raw_reply: String,
    /// How the mutator prompt was cut to fit the model's context window, if it was.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prompt_fit: String,
}

/// Token and cost use per role, plus totals: an LLM client's accounting as JSON (`roles`,
/// `total`, `budget`, `models`), over every process of the run; in `run_stopped`, also
/// `processes`, what each process spent ([`ProcessShare`]).
pub type CostSummary = BTreeMap<String, Value>;

/// What one process of a run (`ppol evolve`, then each `ppol resume`) spent on LLM calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessShare {
    /// 1 for `ppol evolve`, then one more per `ppol resume`.
    pub process: u32,
    /// Its pid.
    pub pid: u32,
    /// When it started (RFC 3339).
    pub started: String,
    /// Its last recorded call (RFC 3339).
    pub last: String,
    /// LLM calls it made.
    pub calls: u64,
    /// Requests it sent (first attempts and retries).
    pub attempts: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// USD.
    pub usd: f64,
}

/// One event of the run log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// First line of a run.
    RunStarted {
        /// Log schema version.
        schema_version: u32,
        /// ppol version.
        ppol_version: String,
        /// Run name.
        name: String,
        /// The resolved configuration (TOML-equivalent JSON).
        config: Value,
        /// Root seed and the per-part seeds derived from it.
        seeds: BTreeMap<String, u64>,
        /// Whether the run is offline (scripted simulator, structural mutations).
        offline: bool,
        /// Model names per role (or "scripted").
        models: BTreeMap<String, String>,
        /// SHA-256 of prompt templates, the sandbox harness and the feature banks.
        hashes: BTreeMap<String, String>,
        /// Feature set.
        feature_set: String,
        /// Domain recorded in episodes.
        domain: String,
        /// The world (`retail`, `external:...`, `tau2:telecom`, `chat`); absent in logs
        /// written before worlds existed (then it is the domain).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        world: String,
        /// Task ids per split (train, val, test).
        splits: BTreeMap<String, Vec<String>>,
        /// Human trace sources and counts.
        human: Value,
    },
    /// The run's discriminator, trained on human traces vs baseline episodes.
    DiscriminatorTrained {
        /// Human dialogues in the cloud.
        n_human: usize,
        /// Baseline episodes.
        n_baseline: usize,
        /// Grouped held-out AUC (mean over folds).
        grouped_auc: Option<f64>,
        /// Top feature importances.
        top_features: Vec<(String, f64)>,
        /// Score of the baseline (no persona) on the train tasks.
        baseline: EvalMetrics,
    },
    /// The discriminator was retrained with the current elites' dialogues on the simulated
    /// side (`[fitness] retrain_every`) and the archive, the batch bests and the run's best
    /// were rescored with it.
    DiscriminatorRetrained {
        /// Iterations done when it was retrained.
        iteration: u64,
        /// Retrainings so far (this one included).
        count: u32,
        /// Human dialogues in the cloud.
        n_human: usize,
        /// Simulated dialogues: the baseline's and the elites'.
        n_simulator: usize,
        /// The elite programs whose dialogues were added.
        elites: Vec<String>,
        /// Grouped held-out AUC of the retrained forest.
        grouped_auc: Option<f64>,
        /// Top feature importances of the retrained forest.
        top_features: Vec<(String, f64)>,
        /// The archive's best and its fitness before and after the rescoring.
        best_before: Option<(String, f64)>,
        /// After.
        best_after: Option<(String, f64)>,
        /// The run's best's validation score before and after (None without one).
        validation_before: Option<f64>,
        /// After.
        validation_after: Option<f64>,
        /// Programs rescored (the archive's).
        rescored: usize,
        /// The retrained discriminator's file, relative to the run directory.
        file: String,
    },
    /// A candidate was evaluated on a train batch.
    CandidateEvaluated {
        /// Iteration (1-based).
        iteration: u64,
        /// Program id.
        program_id: String,
        /// Parent program id.
        parent_id: Option<String>,
        /// Second parent (crossover).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        second_parent_id: Option<String>,
        /// Island.
        island: usize,
        /// seed | diff | rewrite | structural | crossover
        mutation: String,
        /// One-line summary of the change.
        mutation_summary: String,
        /// How the mutator prompt was cut to fit the model's context window, if it was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt_fit: Option<String>,
        /// Curriculum epoch.
        epoch: u64,
        /// Batch within the epoch.
        batch_in_epoch: u64,
        /// Task ids of the batch.
        tasks: Vec<String>,
        /// Metrics.
        metrics: EvalMetrics,
        /// Whether it became an elite of a cell.
        new_elite: bool,
        /// Whether it has the archive's best train score so far (it is then validated; the
        /// run's best is the program that validates best, see `run_stopped`).
        new_best: bool,
        /// The score of its cascade's first stage (`[search] cascade`), when it had one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stage_score: Option<f64>,
        /// The bar that first stage had to reach to play on (None: it played in full whatever
        /// its first stage scored, as the seed and the first child on a batch do).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bar: Option<f64>,
        /// Personas and their outcomes.
        personas: Vec<PersonaOutcome>,
        /// The reflection attached to the program.
        reflection: String,
        /// SHA-256 of the program.
        code_hash: String,
        /// The program source.
        code: String,
        /// Seconds the evaluation took (sandbox, episodes, scoring; not its validation).
        seconds: f64,
        /// Cost of this evaluation.
        cost: CostSummary,
    },
    /// The cascade stopped a candidate after its first stage: its score there was below the
    /// bar of its batch. Its metrics are those of the episodes it played; it is not in the
    /// archive and is never validated.
    CandidateStopped {
        /// Iteration (1-based).
        iteration: u64,
        /// Program id.
        program_id: String,
        /// Parent program id.
        parent_id: Option<String>,
        /// Second parent (crossover).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        second_parent_id: Option<String>,
        /// Island it would have joined.
        island: usize,
        /// diff | rewrite | structural | crossover
        mutation: String,
        /// One-line summary of the change.
        mutation_summary: String,
        /// Curriculum epoch.
        epoch: u64,
        /// Batch within the epoch.
        batch_in_epoch: u64,
        /// Task ids of the batch.
        tasks: Vec<String>,
        /// The last stage it played (1).
        stage: u32,
        /// Its score there (the archive's fitness metric, fixed weights).
        stage_score: f64,
        /// The bar it did not reach.
        bar: f64,
        /// Metrics of the episodes it played (`n_personas`: personas per task played).
        metrics: EvalMetrics,
        /// Personas it played and their outcomes.
        personas: Vec<PersonaOutcome>,
        /// SHA-256 of the program.
        code_hash: String,
        /// The program source.
        code: String,
        /// Seconds the evaluation took.
        seconds: f64,
        /// Cost of the run so far.
        cost: CostSummary,
    },
    /// A candidate failed before it could be scored (never recorded as a score of 0).
    CandidateFailed {
        /// Iteration.
        iteration: u64,
        /// Program id (if a program was produced).
        program_id: Option<String>,
        /// Parent id.
        parent_id: Option<String>,
        /// Mutation kind.
        mutation: String,
        /// What failed.
        failure: FailureInfo,
        /// Whether the candidate was re-queued (infrastructure failure).
        requeued: bool,
    },
    /// The best program evaluated on the validation tasks.
    Validation {
        /// Iteration at which it ran.
        iteration: u64,
        /// Program id.
        program_id: String,
        /// Metrics with the final N and fixed weights.
        metrics: EvalMetrics,
    },
    /// The cascade stopped a validation after its first stage: its score there was below the
    /// first-stage validation score of the run's best, so it does not displace it.
    ValidationStopped {
        /// Iteration at which it ran.
        iteration: u64,
        /// Program id.
        program_id: String,
        /// The last stage it played (1).
        stage: u32,
        /// Its score there (fixed weights).
        stage_score: f64,
        /// The bar it did not reach.
        bar: f64,
        /// Metrics of the episodes it played.
        metrics: EvalMetrics,
    },
    /// The new best program's validation could not score it (its generation failed, or the
    /// LLM was unavailable): `best/program.json` says so and holds no validation metrics.
    ValidationFailed {
        /// Iteration at which it ran.
        iteration: u64,
        /// Program id.
        program_id: String,
        /// What failed.
        failure: FailureInfo,
    },
    /// A checkpoint was written.
    Checkpoint {
        /// Iteration.
        iteration: u64,
    },
    /// The run was resumed from a checkpoint.
    Resumed {
        /// Iteration of the checkpoint resumed from.
        from_iteration: u64,
    },
    /// The run stopped.
    RunStopped {
        /// iterations | budget | wall_clock | early_stop | interrupted | error
        reason: String,
        /// Iterations completed.
        iterations: u64,
        /// The run's best program (`best/`; see [`crate::evolve::rundir::RunBest`] for what
        /// "best" means).
        best_program_id: Option<String>,
        /// Its train metrics (those of its own `candidate_evaluated`).
        best_metrics: Option<EvalMetrics>,
        /// Its validation metrics (none when its validation failed, and in logs written
        /// before they were kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        best_validation: Option<EvalMetrics>,
        /// Total cost.
        cost: CostSummary,
        /// Mutation outcomes over the whole run (every process of it): see
        /// [`mutation_outcomes`].
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        mutations: BTreeMap<String, u64>,
        /// Which operator made each program that became the run's best (the seed excluded),
        /// by operator (`structured`, `diff`, `rewrite`, `structural`, `crossover`): see
        /// [`crate::evolve::rundir::new_bests`]. Landing an edit is necessary; this says which edits improved.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        new_bests: BTreeMap<String, u64>,
        /// Episodes the run played, over every process of it ([`episode_counts`]; absent in
        /// logs written before they were counted).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        episodes: Option<EpisodeCounts>,
    },
}

impl Event {
    /// The event kind (`run_started`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Event::RunStarted { .. } => "run_started",
            Event::DiscriminatorTrained { .. } => "discriminator_trained",
            Event::DiscriminatorRetrained { .. } => "discriminator_retrained",
            Event::CandidateEvaluated { .. } => "candidate_evaluated",
            Event::CandidateStopped { .. } => "candidate_stopped",
            Event::CandidateFailed { .. } => "candidate_failed",
            Event::Validation { .. } => "validation",
            Event::ValidationStopped { .. } => "validation_stopped",
            Event::ValidationFailed { .. } => "validation_failed",
            Event::Checkpoint { .. } => "checkpoint",
            Event::Resumed { .. } => "resumed",
            Event::RunStopped { .. } => "run_stopped",
        }
    }
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Sequence number (1-based, strictly increasing).
    pub seq: u64,
    /// RFC3339 UTC time.
    pub time: String,
    /// The event.
    #[serde(flatten)]
    pub event: Event,
}

/// An append-only writer of the run log.
pub struct RunLog {
    path: PathBuf,
    file: std::fs::File,
    next_seq: u64,
}

impl RunLog {
    /// Open (creating if needed) the log at `path`; the next sequence number continues the file.
    /// A torn last line (from a kill mid-write) is cut off first.
    pub fn open(path: &Path) -> Result<Self> {
        let records = if path.exists() {
            read(path)?
        } else {
            Vec::new()
        };
        if path.exists() {
            // rewrite without a torn tail, if any
            let text = crate::io::read_to_string(path)?;
            if !text.is_empty() && !text.ends_with('\n') {
                let keep = text.rfind('\n').map(|i| &text[..=i]).unwrap_or("");
                crate::io::write_atomic(path, keep.as_bytes())?;
            }
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| Error::io("opening", path, e))?;
        let next_seq = records.last().map_or(1, |r| r.seq + 1);
        Ok(RunLog {
            path: path.to_path_buf(),
            file,
            next_seq,
        })
    }

    /// Sequence number the next event will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Append one event (whole line, flushed and synced).
    pub fn append(&mut self, event: Event) -> Result<Record> {
        let rec = Record {
            seq: self.next_seq,
            time: crate::io::now_rfc3339(),
            event,
        };
        let mut line = crate::io::to_json(&rec);
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|_| self.file.sync_data())
            .map_err(|e| Error::io("appending to", &self.path, e))?;
        self.next_seq += 1;
        Ok(rec)
    }
}

/// Read every complete record of a log (a torn last line is ignored; any other bad line is an error).
pub fn read(path: &Path) -> Result<Vec<Record>> {
    let text = crate::io::read_to_string(path)?;
    let n_lines = text.lines().count();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(r) => out.push(r),
            Err(_) if i + 1 == n_lines && !text.ends_with('\n') => break,
            Err(e) => {
                return Err(Error::parse(
                    path,
                    format!("line {}", i + 1),
                    format!("bad run-log record: {e}"),
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_read_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        let mut log = RunLog::open(&p).unwrap();
        log.append(Event::Checkpoint { iteration: 1 }).unwrap();
        log.append(Event::Resumed { from_iteration: 1 }).unwrap();
        drop(log);
        // simulate a kill mid-write
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"seq\":3,\"time\":\"x\",\"ev").unwrap();
        drop(f);
        let recs = read(&p).unwrap();
        assert_eq!(recs.len(), 2);
        let mut log = RunLog::open(&p).unwrap();
        assert_eq!(log.next_seq(), 3);
        log.append(Event::Checkpoint { iteration: 2 }).unwrap();
        let recs = read(&p).unwrap();
        assert_eq!(recs.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(recs[2].event.kind(), "checkpoint");
    }
}

/// One row of `ppol eval` (the paper's Table 1): a condition scored on held-out tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRow {
    /// human | base | direct | seed | evolved
    pub name: String,
    /// Mean P(human).
    pub human_likeness: f64,
    /// Mean over tasks of Chamfer coverage.
    pub coverage: f64,
    /// 0.5·human_likeness + 0.5·coverage (fixed weights, as the paper's "Score").
    pub score: f64,
    /// Dice D1–D4 and overall against the human mean.
    pub dice: crate::fitness::coverage::Dice,
    /// Share of episodes with reward ≥ 1 (humans: share with reward ≥ 1 in their traces, when known).
    pub success_rate: Option<f64>,
    /// Dialogues scored.
    pub n_dialogues: usize,
    /// Why the row could not be computed (e.g. "direct" needs an LLM endpoint), when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Personas the program wrote, of those asked for (persona rows only): the row scores what
    /// was generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub personas_generated: Option<(usize, usize)>,
    /// What failed, per task (`task 3: generation failed (import): ...`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
    /// The score on each task's dialogues alone (simulator rows), for the per-task spread.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub per_task: std::collections::BTreeMap<String, f64>,
    /// The independent audit of this row against the held-out humans: fresh classifiers'
    /// AUCs with 95% intervals (the human row: the humans against themselves, in halves by
    /// task), the separating features and the LLM judge; see [`crate::fitness::audit`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<crate::fitness::audit::AuditRow>,
    /// The row's dialogues (the ones scored), for the audit; not written.
    #[serde(skip)]
    pub dialogues: Vec<crate::dialogue::Dialogue>,
}

/// The output of `ppol eval` (`RUN_DIR/eval-<split>.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalTable {
    /// Split evaluated.
    pub split: String,
    /// Task ids.
    pub tasks: Vec<String>,
    /// Human traces used.
    pub human_source: Vec<String>,
    /// Rows in order human, base, direct, seed, evolved.
    pub rows: Vec<EvalRow>,
    /// The program of the `evolved` row: the run's best (`best/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_program_id: Option<String>,
    /// How the rows' audits were made (their results are in each row's `audit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<crate::fitness::audit::AuditSetup>,
}

/// Episodes a run played, by what they were played for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeCounts {
    /// The baseline's (the plain simulator on the train and validation tasks, which the
    /// discriminator learns from).
    pub baseline: u64,
    /// Candidates' train batches, played in full (the seed's included).
    pub candidates: u64,
    /// First stages that the cascade stopped there (candidates' and validations').
    pub stopped_early: u64,
    /// Validations of new bests.
    pub validations: u64,
    /// All of them.
    pub total: u64,
    /// Candidates played in full.
    pub n_candidates: u64,
    /// Candidates the cascade stopped after their first stage.
    pub n_stopped: u64,
    /// Validations played in full.
    #[serde(default)]
    pub n_validations: u64,
    /// Validations the cascade stopped after their first stage.
    #[serde(default)]
    pub n_validations_stopped: u64,
    /// Episodes of all of them that failed (the baseline's, when its file gives their number).
    #[serde(default)]
    pub failed: u64,
}

/// Count the episodes a run's log records (so the counts cover every process of a resumed
/// run): each evaluation's episodes, failed ones included; `baseline`: the baseline's episodes
/// (else the discriminator's count of them, which leaves out failed ones).
pub fn episode_counts(records: &[Record], baseline: Option<u64>) -> EpisodeCounts {
    let played = |m: &EvalMetrics| (m.n_episodes + m.n_failed_episodes) as u64;
    let mut c = EpisodeCounts::default();
    let mut trained = 0;
    for r in records {
        if let Event::CandidateEvaluated { metrics, .. }
        | Event::CandidateStopped { metrics, .. }
        | Event::Validation { metrics, .. }
        | Event::ValidationStopped { metrics, .. } = &r.event
        {
            c.failed += metrics.n_failed_episodes as u64;
        }
        match &r.event {
            Event::DiscriminatorTrained { n_baseline, .. } => trained = *n_baseline as u64,
            Event::CandidateEvaluated { metrics, .. } => {
                c.candidates += played(metrics);
                c.n_candidates += 1;
            }
            Event::CandidateStopped { metrics, .. } => {
                c.stopped_early += played(metrics);
                c.n_stopped += 1;
            }
            Event::Validation { metrics, .. } => {
                c.validations += played(metrics);
                c.n_validations += 1;
            }
            Event::ValidationStopped { metrics, .. } => {
                c.stopped_early += played(metrics);
                c.n_validations_stopped += 1;
            }
            _ => {}
        }
    }
    c.baseline = baseline.unwrap_or(trained);
    // the discriminator learns from the baseline's episodes that did not fail
    c.failed += c.baseline.saturating_sub(trained);
    c.total = c.baseline + c.candidates + c.stopped_early + c.validations;
    c
}

impl EpisodeCounts {
    /// One line: `2,015 episodes (3 failed): baseline 90, candidates 1,325 (30), stopped early 0 (0),
    /// validations 600`.
    pub fn line(&self) -> String {
        format!(
            "{} episodes ({} failed): baseline {}, candidates in full {} ({}), validations in \
             full {} ({}), stopped early {} ({} candidates, {} validations)",
            self.total,
            self.failed,
            self.baseline,
            self.candidates,
            self.n_candidates,
            self.validations,
            self.n_validations,
            self.stopped_early,
            self.n_stopped,
            self.n_validations_stopped
        )
    }
}

/// What became of every attempted child of a run, counted from its log (so the counts cover
/// every process of a resumed run): keys are `OPERATOR:OUTCOME`, e.g. `diff:applied`,
/// `diff:unparsable` (no readable SEARCH/REPLACE block), `diff:not-applicable` (the SEARCH lines
/// are not in the program), `rewrite:no-program`, `diff:syntax`, `diff:mutator-call` (the model
/// call failed), `diff:failed-contract` (the child broke the generator contract or returned bad
/// personas), `diff:failed-in-sandbox` (it raised, timed out or hit a limit), and
/// `*:infrastructure` (an evaluation that could not run; the candidate was re-queued or the run
/// stopped), `diff:stopped-early` (the cascade stopped it after its first stage). The seed program is not an attempt and is not counted.
pub fn mutation_outcomes(records: &[Record]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for r in records {
        let (op, outcome) = match &r.event {
            Event::CandidateEvaluated { mutation, .. } => (mutation.as_str(), "applied"),
            Event::CandidateStopped { mutation, .. } => (mutation.as_str(), "stopped-early"),
            Event::CandidateFailed {
                mutation, failure, ..
            } => {
                let outcome = match failure.stage.as_str() {
                    "mutation:diff-not-applied" => "not-applicable",
                    "mutation:unparsable" | "mutation:no-program" => {
                        if mutation == "rewrite" {
                            "no-program"
                        } else {
                            "unparsable"
                        }
                    }
                    "mutation:syntax" => "syntax",
                    "mutation:mutator-call" | "mutation:evaluation" => "mutator-call",
                    "infrastructure" => "infrastructure",
                    "validation" | "sandbox:contract" | "sandbox:validate" => "failed-contract",
                    s if s.starts_with("sandbox:") => "failed-in-sandbox",
                    _ => "failed",
                };
                (mutation.as_str(), outcome)
            }
            _ => continue,
        };
        if op == "seed" {
            continue;
        }
        *out.entry(format!("{op}:{outcome}")).or_insert(0) += 1;
    }
    out
}

/// [`crate::evolve::rundir::new_bests`] as one line (`structured 2, structural 1`).
pub fn new_bests_line(counts: &BTreeMap<String, u64>) -> String {
    counts
        .iter()
        .map(|(op, n)| format!("{op} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// [`mutation_outcomes`] as one line (`diff: 3 applied, 2 unparsable; rewrite: 1 no-program`).
pub fn mutation_outcomes_line(counts: &BTreeMap<String, u64>) -> String {
    let mut by_op: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (k, n) in counts {
        let (op, outcome) = k.split_once(':').unwrap_or((k.as_str(), ""));
        by_op.entry(op).or_default().push(format!("{n} {outcome}"));
    }
    by_op
        .into_iter()
        .map(|(op, v)| format!("{op}: {}", v.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}
