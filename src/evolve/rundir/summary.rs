//! The state of a run as its directory says, read in one place: whether it stopped (and why),
//! how far it got, its best program (id, code, train and validation numbers, lineage) and what
//! it cost. `ppol report` reads a run through [`RunOverview`]; `ppol eval` takes the program to
//! evaluate from [`best_code`].
//!
//! The run's best ([`RunBest`] defines it) is found from, in order:
//! 1. `best/program.json` (written from the checkpoint at every new best, and rebuilt by a
//!    resume);
//! 2. the `run_stopped` event, which names it with its own numbers;
//! 3. the log's `validation` / `validation_failed` events, with [`RunBest::displaces`] replayed;
//! 4. for a log without any validation, the last new train best, else the highest combined
//!    train score (first on ties).
//!
//! The costs come from `run_stopped.cost` (over every process of the run), else the cost
//! ledger (`costs.jsonl`), else the sum of the `candidate_evaluated` costs.
//!
//! Nothing here writes: old run directories and running ones are read the same way, and no
//! reader re-derives the best on its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::evolve::rundir::runlog::{self, CostSummary, EvalMetrics, Event, ProcessShare, Record};
use crate::evolve::rundir::{RunBest, RunDir};
use crate::Result;

/// Whether the run stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RunStatus {
    /// A `run_stopped` event ends the log.
    Stopped {
        /// Its time (RFC 3339).
        time: String,
        /// Why (`iterations`, `budget`, `interrupted`, ...).
        reason: String,
    },
    /// No `run_stopped` event: running, or killed.
    NotStopped {
        /// Time of the last event of the log.
        last_event: Option<String>,
    },
}

/// The run's best program, with its own numbers and where each came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestSummary {
    /// Program id.
    pub program_id: String,
    /// Its source file (`best/program.py`), when it exists.
    pub code_path: Option<PathBuf>,
    /// Its train metrics: `best/program.json`, or `run_stopped`, when they name it, else its
    /// last `candidate_evaluated`.
    pub train: Option<EvalMetrics>,
    /// Where `train` comes from.
    pub train_source: Option<String>,
    /// Its validation: `best/program.json`, or `run_stopped`, when they name it, else its last
    /// `validation` event.
    pub validation: Option<EvalMetrics>,
    /// Why its validation failed (from `best/program.json`).
    pub validation_failure: Option<String>,
    /// Program ids from the seed to it (inclusive), from `best/program.json` (empty when that
    /// file is missing: the log's parent ids give it, see [`lineage_from_log`]).
    pub lineage: Vec<String>,
}

/// The run's costs, with where they come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostsSummary {
    /// The cost summary (`{"roles": {...}, "total": {...}}` or the flat shape).
    pub summary: CostSummary,
    /// Where it comes from, as a phrase ("run_stopped, over every process of the run", ...).
    pub source: String,
    /// What each process of the run (`evolve`, then each `resume`) spent: from `run_stopped`,
    /// else from the cost ledger.
    pub processes: Vec<ProcessShare>,
    /// Why the cost ledger could not be read (then `processes` is empty).
    pub ledger_error: Option<String>,
}

/// A run directory's state, read once: see the [module](self) for the sources and their order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOverview {
    /// The run directory.
    pub dir: PathBuf,
    /// Stopped or not.
    #[serde(flatten)]
    pub status: RunStatus,
    /// Iterations: `run_stopped.iterations`, else the last iteration logged.
    pub iterations: u64,
    /// The run's best program.
    pub best: Option<BestSummary>,
    /// What the run cost.
    pub costs: CostsSummary,
}

impl RunOverview {
    /// Read the run directory `dir` (its `log.jsonl` must exist).
    pub fn read(dir: &Path) -> Result<RunOverview> {
        let log = runlog::read(&dir.join("log.jsonl"))?;
        let program = match dir.join("best/program.json") {
            p if p.exists() => Some(RunBest::load(&p)?),
            _ => None,
        };
        Ok(RunOverview::of(dir, &log, program.as_ref()))
    }

    /// The state of the run in `dir` from its log and `best/program.json`, already read.
    pub fn of(dir: &Path, log: &[Record], program: Option<&RunBest>) -> RunOverview {
        let stopped = last_stopped(log);
        let status = match stopped {
            Some((time, Event::RunStopped { reason, .. })) => RunStatus::Stopped {
                time: time.to_string(),
                reason: reason.clone(),
            },
            _ => RunStatus::NotStopped {
                last_event: log.last().map(|r| r.time.clone()),
            },
        };
        let iterations = match stopped {
            Some((_, Event::RunStopped { iterations, .. })) => *iterations,
            _ => last_iteration(log).unwrap_or(0),
        };
        let best = best_program_id(log, program).map(|id| {
            let train = best_train_metrics(log, program, &id);
            let validation = best_validation(log, program, &id);
            let code_path = Some(dir.join("best/program.py")).filter(|p| p.is_file());
            BestSummary {
                lineage: program
                    .filter(|p| p.program_id == id)
                    .map(|p| p.lineage.clone())
                    .unwrap_or_default(),
                code_path,
                train_source: train.as_ref().map(|t| t.1.clone()),
                train: train.map(|t| t.0),
                validation: validation.as_ref().and_then(|v| v.as_ref().ok().cloned()),
                validation_failure: validation.and_then(|v| v.err()),
                program_id: id,
            }
        });
        RunOverview {
            dir: dir.to_path_buf(),
            status,
            iterations,
            best,
            costs: costs(dir, log),
        }
    }
}

/// The program `ppol eval` evaluates — `best/program.py` — with its id when `best/program.json`
/// names it (the id names the code evaluated: both from `best/`).
pub fn best_code(run: &RunDir) -> Result<(String, Option<String>)> {
    match run.read_best() {
        Some(b) => Ok((b.code, Some(b.program_id))),
        None => Ok((run.best_code()?, None)),
    }
}

fn last_stopped(log: &[Record]) -> Option<(&str, &Event)> {
    log.iter()
        .rev()
        .find(|r| matches!(r.event, Event::RunStopped { .. }))
        .map(|r| (r.time.as_str(), &r.event))
}

/// The last iteration the log mentions (evaluated, failed or stopped candidates).
pub fn last_iteration(log: &[Record]) -> Option<u64> {
    log.iter()
        .filter_map(|r| match r.event {
            Event::CandidateEvaluated { iteration, .. }
            | Event::CandidateFailed { iteration, .. }
            | Event::CandidateStopped { iteration, .. } => Some(iteration),
            Event::ValidationFailed { iteration, .. } => Some(iteration),
            _ => None,
        })
        .max()
}

/// The run's best program: `best/program.json`, else `run_stopped`, else the log's validations
/// replayed ([`RunBest::displaces`]); a log without any falls back on the last new train best,
/// else the highest combined train score (first on ties).
pub fn best_program_id(log: &[Record], program: Option<&RunBest>) -> Option<String> {
    if let Some(b) = program {
        return Some(b.program_id.clone());
    }
    if let Some((
        _,
        Event::RunStopped {
            best_program_id: Some(id),
            ..
        },
    )) = last_stopped(log)
    {
        return Some(id.clone());
    }
    if let Some(id) = validated_best(log) {
        return Some(id.to_string());
    }
    let evaluated = || {
        log.iter().filter_map(|r| match &r.event {
            Event::CandidateEvaluated {
                program_id,
                metrics,
                new_best,
                ..
            } => Some((program_id, metrics, *new_best)),
            _ => None,
        })
    };
    if let Some((id, _, _)) = evaluated().rfind(|e| e.2) {
        return Some(id.clone());
    }
    evaluated()
        .fold(
            None,
            |best: Option<(&String, &EvalMetrics)>, (id, m, _)| match best {
                Some(b) if b.1.combined >= m.combined => Some(b),
                _ => Some((id, m)),
            },
        )
        .map(|(id, _)| id.clone())
}

/// The run's best as the log's validations say ([`RunBest::displaces`] replayed).
fn validated_best(log: &[Record]) -> Option<&str> {
    let mut best: Option<(&str, Option<&EvalMetrics>)> = None;
    for r in log {
        match &r.event {
            Event::Validation {
                program_id,
                metrics,
                ..
            } if RunBest::displaces(best.and_then(|b| b.1), Some(metrics)) => {
                best = Some((program_id, Some(metrics)));
            }
            Event::ValidationFailed { program_id, .. }
                if RunBest::displaces(best.and_then(|b| b.1), None) =>
            {
                best = Some((program_id, None));
            }
            _ => {}
        }
    }
    best.map(|b| b.0)
}

/// The train metrics of the best program `id` — its own: `best/program.json`, or
/// `run_stopped`, when they name it, else its last `candidate_evaluated` — with their source.
pub fn best_train_metrics(
    log: &[Record],
    program: Option<&RunBest>,
    id: &str,
) -> Option<(EvalMetrics, String)> {
    if let Some(b) = program.filter(|b| b.program_id == id) {
        return Some((b.train.clone(), "best/program.json".into()));
    }
    if let Some((
        _,
        Event::RunStopped {
            best_program_id: Some(stopped_id),
            best_metrics: Some(m),
            ..
        },
    )) = last_stopped(log)
    {
        if stopped_id == id {
            return Some((m.clone(), "run_stopped.best_metrics".into()));
        }
    }
    log.iter().rev().find_map(|r| match &r.event {
        Event::CandidateEvaluated {
            program_id,
            metrics,
            ..
        } if program_id == id => Some((metrics.clone(), format!("candidate_evaluated of {id}"))),
        _ => None,
    })
}

/// The validation of the best program `id` — its own: `best/program.json`, or `run_stopped`,
/// when they name it, else its last `validation` event; `Err` with the reason when
/// `best/program.json` says it failed.
pub fn best_validation(
    log: &[Record],
    program: Option<&RunBest>,
    id: &str,
) -> Option<std::result::Result<EvalMetrics, String>> {
    if let Some(b) = program.filter(|b| b.program_id == id) {
        match (&b.validation, &b.validation_failure) {
            (Some(m), _) => return Some(Ok(m.clone())),
            (None, Some(why)) => return Some(Err(why.clone())),
            (None, None) => {}
        }
    }
    if let Some((
        _,
        Event::RunStopped {
            best_program_id: Some(stopped_id),
            best_validation: Some(m),
            ..
        },
    )) = last_stopped(log)
    {
        if stopped_id == id {
            return Some(Ok(m.clone()));
        }
    }
    log.iter().rev().find_map(|r| match &r.event {
        Event::Validation {
            program_id,
            metrics,
            ..
        } if program_id == id => Some(Ok(metrics.clone())),
        _ => None,
    })
}

/// Why the run's best program `best_id` is still its seed, when it is (else None): no child
/// landed (every mutation failed before it could be played: "no LLM mutation landed" when the
/// run's mutations were LLM edits), or children were played and none beat the seed on
/// validation. From the log's `candidate_*` events, over every process of the run.
pub fn seed_still_best(log: &[Record], best_id: &str) -> Option<String> {
    let is_seed = log.iter().any(|r| {
        matches!(&r.event, Event::CandidateEvaluated { program_id, mutation, .. }
            if program_id == best_id && mutation == "seed")
    });
    if !is_seed {
        return None;
    }
    let outcomes = runlog::mutation_outcomes(log);
    let count = |pred: &dyn Fn(&str, &str) -> bool| -> u64 {
        outcomes
            .iter()
            .filter(|(k, _)| {
                let (op, outcome) = k.split_once(':').unwrap_or((k.as_str(), ""));
                pred(op, outcome)
            })
            .map(|(_, n)| n)
            .sum()
    };
    let attempted = count(&|_, _| true);
    let played = count(&|_, o| o == "applied" || o == "stopped-early");
    let llm = count(&|op, _| matches!(op, "structured" | "diff" | "rewrite"));
    let validated = log
        .iter()
        .filter(|r| {
            matches!(&r.event, Event::Validation { program_id, .. }
                | Event::ValidationStopped { program_id, .. }
                | Event::ValidationFailed { program_id, .. } if program_id != best_id)
        })
        .count();
    Some(if attempted == 0 {
        "no child was made: the run stopped after evaluating its seed".to_string()
    } else if played == 0 {
        format!(
            "no {}mutation landed: {attempted} attempted, none made a program that could be \
             played ({})",
            if llm > 0 { "LLM " } else { "" },
            runlog::mutation_outcomes_line(&outcomes)
        )
    } else {
        format!(
            "none beat the seed: {played} child program(s) were played, {validated} of them \
             validated against it, none above it"
        )
    })
}

/// Whether the run's world gives rewards: `Some(false)` when none of the episodes its log
/// records (the personas of evaluated candidates) carries a reward — a world without rewards
/// (`chat`, many `external:` simulators), shown as "no reward", not as a success rate of 0 —
/// `Some(true)` when one does, None when the log records no episode.
pub fn world_rewards(log: &[Record]) -> Option<bool> {
    let mut any = false;
    for r in log {
        if let Event::CandidateEvaluated { personas, .. } = &r.event {
            for p in personas {
                if p.reward.is_some() {
                    return Some(true);
                }
                any = true;
            }
        }
    }
    any.then_some(false)
}

/// How many tasks the run's split `split` (its test split: `run.test_split`) holds, as its
/// `run_started` event records them.
pub fn split_tasks(log: &[Record], split: &str) -> Option<usize> {
    log.iter().find_map(|r| match &r.event {
        Event::RunStarted { splits, .. } => splits.get(split).map(Vec::len),
        _ => None,
    })
}

/// The lineage of `best_id` from the parent ids of the log's `candidate_evaluated` events (the
/// first evaluation of each program is the one that created it), seed first.
pub fn lineage_from_log(log: &[Record], best_id: Option<&str>) -> Vec<String> {
    let mut parent: BTreeMap<&str, Option<&str>> = BTreeMap::new();
    for r in log {
        if let Event::CandidateEvaluated {
            program_id,
            parent_id,
            ..
        } = &r.event
        {
            parent
                .entry(program_id.as_str())
                .or_insert(parent_id.as_deref());
        }
    }
    let mut chain: Vec<String> = Vec::new();
    let mut cur = best_id;
    while let Some(id) = cur {
        if chain.iter().any(|c| c == id) {
            break; // a cycle in a corrupt log: stop rather than loop
        }
        chain.push(id.to_string());
        cur = parent.get(id).copied().flatten();
    }
    chain.reverse();
    chain
}

/// What the run cost: `run_stopped.cost`, else the cost ledger's last line, else the sum of the
/// `candidate_evaluated` costs.
fn costs(dir: &Path, log: &[Record]) -> CostsSummary {
    let ledger_path = dir.join("costs.jsonl");
    let ledger = crate::evolve::rundir::ledger::read(&ledger_path);
    let (summary, source) = match (last_stopped(log), &ledger) {
        (Some((_, Event::RunStopped { cost, .. })), _) => {
            (cost.clone(), "run_stopped, over every process of the run")
        }
        (_, Ok(lines)) if !lines.is_empty() => {
            let roles = &lines[lines.len() - 1].roles;
            let summary: CostSummary = [
                ("roles".to_string(), serde_json::json!(roles)),
                (
                    "total".to_string(),
                    serde_json::json!(crate::evolve::rundir::ledger::total(roles)),
                ),
            ]
            .into_iter()
            .collect();
            (
                summary,
                "the cost ledger (costs.jsonl), as there is no run_stopped event",
            )
        }
        _ => (
            sum_costs(log.iter().filter_map(|r| match &r.event {
                Event::CandidateEvaluated { cost, .. } => Some(cost),
                _ => None,
            })),
            "the sum of candidate_evaluated costs, as there is no run_stopped event",
        ),
    };
    let ledger_error = ledger.err().map(|e| e.to_string());
    let processes = match (&ledger_error, summary.get("processes")) {
        (Some(_), _) => Vec::new(),
        (None, Some(v)) => serde_json::from_value(v.clone()).unwrap_or_default(),
        (None, None) => {
            crate::evolve::rundir::ledger::process_shares(&ledger_path).unwrap_or_default()
        }
    };
    CostsSummary {
        summary,
        source: source.into(),
        processes,
        ledger_error,
    }
}

/// Numeric counters of one role (`calls`, `prompt_tokens`, `usd`, ...).
pub type Counters = BTreeMap<String, f64>;

/// Per-role counters pulled out of a cost summary, whatever its exact shape: either
/// `{"roles": {role: {...}}, "total": {...}}` or `{role: {...}, ..., "total": {...}}`.
pub fn cost_rows(cost: &CostSummary) -> (Vec<(String, Counters)>, Option<Counters>) {
    fn numbers(v: &Value) -> Option<Counters> {
        let m: Counters = v
            .as_object()?
            .iter()
            .filter_map(|(k, v)| v.as_f64().map(|x| (k.clone(), x)))
            .collect();
        (!m.is_empty()).then_some(m)
    }
    let roles: Vec<(String, Counters)> = match cost.get("roles").and_then(Value::as_object) {
        Some(r) => r
            .iter()
            .filter_map(|(k, v)| numbers(v).map(|n| (k.clone(), n)))
            .collect(),
        None => cost
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "total" | "budget" | "models"))
            .filter_map(|(k, v)| numbers(v).map(|n| (k.clone(), n)))
            .collect(),
    };
    (roles, cost.get("total").and_then(numbers))
}

/// The sum of cost summaries, per role and in total.
pub fn sum_costs<'a>(costs: impl Iterator<Item = &'a CostSummary>) -> CostSummary {
    let mut roles: BTreeMap<String, Counters> = BTreeMap::new();
    let mut total: Counters = BTreeMap::new();
    for c in costs {
        let (rs, t) = cost_rows(c);
        for (role, nums) in rs {
            let r = roles.entry(role).or_default();
            for (k, v) in nums {
                *r.entry(k).or_default() += v;
            }
        }
        for (k, v) in t.into_iter().flatten() {
            *total.entry(k).or_default() += v;
        }
    }
    let mut out = CostSummary::new();
    out.insert(
        "roles".into(),
        serde_json::to_value(&roles).unwrap_or(Value::Null),
    );
    if !total.is_empty() {
        out.insert(
            "total".into(),
            serde_json::to_value(&total).unwrap_or(Value::Null),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(c: f64) -> EvalMetrics {
        EvalMetrics {
            combined: c,
            ..EvalMetrics::default()
        }
    }

    fn evaluated(k: u64, parent: Option<&str>, combined: f64, new_best: bool) -> Event {
        Event::CandidateEvaluated {
            iteration: k,
            program_id: format!("p{k}"),
            parent_id: parent.map(str::to_string),
            second_parent_id: None,
            island: 0,
            mutation: "structural".into(),
            mutation_summary: String::new(),
            prompt_fit: None,
            epoch: 0,
            batch_in_epoch: 0,
            tasks: Vec::new(),
            metrics: m(combined),
            new_elite: true,
            new_best,
            stage_score: None,
            bar: None,
            personas: Vec::new(),
            reflection: String::new(),
            code_hash: String::new(),
            code: String::new(),
            seconds: 0.0,
            cost: Default::default(),
        }
    }

    fn records(events: Vec<Event>) -> Vec<Record> {
        events
            .into_iter()
            .enumerate()
            .map(|(i, event)| Record {
                seq: i as u64 + 1,
                time: format!("t{i}"),
                event,
            })
            .collect()
    }

    /// The four sources of the run's best, each used only when the ones before it are missing.
    #[test]
    fn the_best_comes_from_program_json_then_run_stopped_then_validations_then_train() {
        let mut log = records(vec![
            evaluated(1, None, 0.3, true),
            evaluated(2, Some("p1"), 0.9, false),
            evaluated(3, Some("p1"), 0.5, true),
        ]);
        // no validation: the last new train best
        assert_eq!(best_program_id(&log, None).as_deref(), Some("p3"));
        assert_eq!(lineage_from_log(&log, Some("p3")), ["p1", "p3"]);
        // no new best either: the highest combined
        let plain = records(vec![
            evaluated(1, None, 0.3, false),
            evaluated(2, Some("p1"), 0.9, false),
        ]);
        assert_eq!(best_program_id(&plain, None).as_deref(), Some("p2"));
        // validations replayed
        log.extend(records(vec![Event::Validation {
            iteration: 2,
            program_id: "p2".into(),
            metrics: m(0.7),
        }]));
        assert_eq!(best_program_id(&log, None).as_deref(), Some("p2"));
        let (train, source) = best_train_metrics(&log, None, "p2").unwrap();
        assert_eq!(
            (train.combined, source.as_str()),
            (0.9, "candidate_evaluated of p2")
        );
        assert_eq!(best_validation(&log, None, "p2"), Some(Ok(m(0.7))));
        // best/program.json wins over everything
        let program = RunBest {
            program_id: "p1".into(),
            train: m(0.3),
            validation: None,
            validation_failure: Some("sandbox: boom".into()),
            lineage: vec!["p1".into()],
            mutation: crate::evolve::archive::program::MutationInfo::seed(),
            iteration_found: 0,
            code: String::new(),
        };
        let overview = RunOverview::of(Path::new("/nonexistent"), &log, Some(&program));
        let best = overview.best.unwrap();
        assert_eq!(best.program_id, "p1");
        assert_eq!(best.train_source.as_deref(), Some("best/program.json"));
        assert_eq!(best.validation_failure.as_deref(), Some("sandbox: boom"));
        assert_eq!(
            overview.status,
            RunStatus::NotStopped {
                last_event: Some("t0".into())
            }
        );
        assert_eq!(overview.iterations, 3);
    }

    /// Why the best is still the seed: no child, no mutation landed (LLM or not), none beat it.
    #[test]
    fn a_seed_that_stays_best_says_why() {
        let mut seed = evaluated(1, None, 0.3, true);
        if let Event::CandidateEvaluated { mutation, .. } = &mut seed {
            *mutation = "seed".into();
        }
        let failed = |k: u64, op: &str, stage: &str| Event::CandidateFailed {
            iteration: k,
            program_id: None,
            parent_id: Some("p1".into()),
            mutation: op.into(),
            failure: runlog::FailureInfo {
                stage: stage.into(),
                reason: "x".into(),
                ..Default::default()
            },
            requeued: false,
        };
        let log = records(vec![seed.clone()]);
        assert_eq!(
            seed_still_best(&log, "p1").as_deref(),
            Some("no child was made: the run stopped after evaluating its seed")
        );
        let log = records(vec![
            seed.clone(),
            failed(2, "structured", "mutation:unparsable"),
            failed(3, "diff", "mutation:mutator-call"),
        ]);
        let why = seed_still_best(&log, "p1").unwrap();
        assert!(
            why.starts_with("no LLM mutation landed: 2 attempted, none made a program"),
            "{why}"
        );
        let log = records(vec![
            seed,
            evaluated(2, Some("p1"), 0.2, false),
            Event::Validation {
                iteration: 2,
                program_id: "p2".into(),
                metrics: m(0.1),
            },
        ]);
        assert_eq!(
            seed_still_best(&log, "p1").as_deref(),
            Some(
                "none beat the seed: 1 child program(s) were played, 1 of them validated \
                 against it, none above it"
            )
        );
        assert_eq!(seed_still_best(&log, "p2"), None, "p2 is no seed");
        assert_eq!(world_rewards(&log), None, "no persona recorded");
    }

    #[test]
    fn cost_summaries_of_either_shape() {
        let flat: CostSummary = serde_json::from_value(serde_json::json!({
            "user-sim": {"calls": 3, "prompt_tokens": 10, "completion_tokens": 5, "usd": 0.5},
            "total": {"calls": 3, "usd": 0.5},
            "models": {"user-sim": "x"}
        }))
        .unwrap();
        let (roles, total) = cost_rows(&flat);
        assert_eq!(roles.len(), 1);
        assert_eq!(total.unwrap()["usd"], 0.5);
        let summed = sum_costs([&flat, &flat].into_iter());
        let (roles, total) = cost_rows(&summed);
        assert_eq!(roles[0].1["calls"], 6.0);
        assert_eq!(total.unwrap()["usd"], 1.0);
    }
}
