//! Cost and stop rules: when the driver stops (iterations, a stop request, the LLM budget, the
//! wall clock, early stop, the `halt_after` test hook), the LLM cost so far, and how a run
//! ends (`run_stopped` and its [`RunSummary`]).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use serde_json::{json, Value};

use crate::evolve::evolution::control::RunSummary;
use crate::evolve::evolution::Evolution;
use crate::evolve::rundir::runlog::{self, CostSummary, Event};
use crate::evolve::rundir::summary;
use crate::Result;

/// Why the driver stops before the next step.
pub(super) enum Stop {
    /// The run is over, for this reason.
    Reason(String),
    /// The test hook `halt_after` fired: return as if killed.
    Halted,
}

impl Evolution {
    /// The stop condition that holds before the next step, if any.
    pub(super) fn stop(&self) -> Option<Stop> {
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

    /// The LLM cost so far (a note offline).
    pub(super) fn cost(&self) -> CostSummary {
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
    pub(super) fn halted(&self) -> RunSummary {
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
            seed_still_best: None,
            rewards: None,
            test_tasks: None,
            humans: None,
        }
    }

    /// Log `run_stopped` and summarise the run; both name the run's best ([`State::best`]) with
    /// its own numbers.
    ///
    /// [`State::best`]: crate::evolve::rundir::checkpoint::State::best
    pub(super) fn finish(mut self, reason: String) -> Result<RunSummary> {
        let records = runlog::read(&self.ctx.dir.log_path()).unwrap_or_default();
        let best = self.state.best.take();
        let mutations = runlog::mutation_outcomes(&records);
        let new_bests = crate::evolve::rundir::new_bests(&records);
        let mut cost = self.cost();
        let processes = match &self.ctx.ledger {
            Some(_) => crate::evolve::rundir::ledger::process_shares(
                &crate::evolve::rundir::ledger::path(&self.ctx.dir),
            )?,
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
        let best_id = best.as_ref().map(|b| b.program_id.clone());
        Ok(RunSummary {
            seed_still_best: best_id
                .as_deref()
                .and_then(|id| summary::seed_still_best(&records, id)),
            rewards: summary::world_rewards(&records),
            test_tasks: summary::split_tasks(&records, &self.ctx.cfg.run.test_split),
            humans: Some(super::control::HumansUsed {
                objective: self.ctx.cfg.fitness.objective.name().into(),
                search: self.ctx.humans.len(),
                held_out: self.ctx.humans_heldout.len(),
            }),
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
    pub(super) fn baseline_episodes(&self) -> Option<u64> {
        let text = crate::io::read_to_string(&self.ctx.dir.join("baseline/episodes.jsonl")).ok()?;
        Some(text.lines().filter(|l| !l.trim().is_empty()).count() as u64)
    }
}
