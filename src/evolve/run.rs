//! `ppol evolve` / `ppol resume` / `ppol eval`: the entry points the front ends call.
//!
//! [`evolve`] creates the run directory and starts an [`Evolution`]; [`resume`] reads the
//! checkpoint, cuts the log back to it and continues. The loop itself — one candidate per
//! step, the checkpoint as commit point — is [`crate::evolve::evolution`]; the run directory
//! is [`crate::evolve::rundir`]; `ppol eval` is [`crate::evolve::heldout`].

use std::path::Path;

use crate::evolve::config::RunConfig;
use crate::evolve::context::RunContext;
use crate::evolve::evolution::Evolution;
use crate::evolve::rundir::checkpoint::{State, CHECKPOINT_FORMAT};
use crate::evolve::rundir::runlog::{self, Event};
use crate::evolve::rundir::RunDir;
use crate::{Error, Result};

pub use crate::evolve::check::check_config;
pub use crate::evolve::evolution::{Progress, ProgressFn, RunControl, RunSummary};
pub use crate::evolve::heldout::{evaluate_run, evaluate_run_at, table_text};

/// Create a run directory and run the evolution.
pub async fn evolve(cfg: RunConfig, control: RunControl) -> Result<RunSummary> {
    check_config(&cfg)?;
    let path = RunDir::path_for(&cfg);
    let existed = path.exists();
    let dir = RunDir::create(&cfg)?;
    let result = match RunContext::new(cfg, dir).await {
        Ok(ctx) => run_then_shut_down(ctx, None, control).await,
        Err(e) => Err(e),
    };
    if result.is_err() {
        undo_empty_run(&path, existed);
    }
    result
}

/// After a run that failed before it made anything (the world could not open, a Ray cluster
/// could not be reached): remove what starting it wrote — `config.toml` and `run.lock`, and the
/// directory when this run made it — so that no half-made run is left to be taken for one.
/// A directory holding anything else (a log, baseline episodes that were paid for) is kept
/// whole: `ppol resume` continues from it.
fn undo_empty_run(path: &Path, existed: bool) {
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    let names: Vec<std::ffi::OsString> = entries.flatten().map(|e| e.file_name()).collect();
    let ours = |n: &std::ffi::OsString| n == "config.toml" || n == crate::evolve::rundir::LOCK_FILE;
    if !names.iter().all(ours) {
        return;
    }
    for n in &names {
        let _ = std::fs::remove_file(path.join(n));
    }
    if !existed {
        let _ = std::fs::remove_dir(path);
    }
}

/// Run the evolution, then stop the world's processes (simulators get `shutdown`), whatever
/// the outcome.
async fn run_then_shut_down(
    ctx: RunContext,
    checkpoint: Option<State>,
    control: RunControl,
) -> Result<RunSummary> {
    let world = ctx.world.clone();
    let result = match Evolution::start(ctx, checkpoint, control).await {
        Ok(e) => e.run().await,
        Err(e) => Err(e),
    };
    world.shutdown().await;
    result
}

/// Continue a run from its last checkpoint (after any stop, kill -9 included);
/// `extra_iterations` replaces `search.iterations` (the total, not a number to add).
pub async fn resume(
    dir: &Path,
    control: RunControl,
    extra_iterations: Option<u64>,
) -> Result<RunSummary> {
    let dir = RunDir::open_for_writing(dir)?;
    let mut cfg = dir.load_config()?;
    if let Some(n) = extra_iterations {
        cfg.search.iterations = n;
    }
    if !control.placement.is_empty() {
        control.placement.apply(&mut cfg.world)?;
        cfg.validate()?;
    }
    check_config(&cfg)?;
    let checkpoint: Option<State> = dir.read_checkpoint()?;
    if let Some(c) = &checkpoint {
        if c.format != CHECKPOINT_FORMAT {
            return Err(Error::parse(
                dir.checkpoint_path(),
                "format",
                format!("unsupported checkpoint format '{}'", c.format),
            ));
        }
    }
    check_history(&dir, checkpoint.as_ref())?;
    if let Some(c) = &checkpoint {
        let text = crate::io::read_to_string(&dir.checkpoint_path())?;
        crate::evolve::rundir::checkpoint::verify(&dir, &text, c)?;
    }
    // The checkpoint is the commit point: drop log lines written after it — but not the
    // money they record.
    crate::evolve::rundir::ledger::absorb(&dir)?;
    dir.truncate_log(checkpoint.as_ref().map(|c| c.log_seq))?;
    let ctx = RunContext::new(cfg, dir).await?;
    run_then_shut_down(ctx, checkpoint, control).await
}

/// Refuse to resume when the run's files disagree about how far it got, rather than lose its
/// history: a missing `log.jsonl` once the run has produced anything, a missing
/// `checkpoint.json` when the log records committed iterations, or a log that does not hold
/// the checkpoint's commit.
/// Whether the run's cost ledger records any LLM call (an unreadable one counts as yes).
fn ledger_records_calls(dir: &RunDir) -> bool {
    crate::evolve::rundir::ledger::read(&crate::evolve::rundir::ledger::path(dir)).map_or(
        true,
        |lines| {
            lines
                .iter()
                .any(|l| l.at != "start" || l.roles.values().any(|r| r.calls > 0))
        },
    )
}

fn check_history(dir: &RunDir, checkpoint: Option<&State>) -> Result<()> {
    let refuse = |message: String| {
        Err(Error::Run {
            path: dir.path().to_path_buf(),
            message,
        })
    };
    if !dir.log_path().exists() {
        let produced: Vec<&str> = [
            "checkpoint.json",
            "discriminator.json",
            "baseline",
            "best",
            "costs.jsonl",
        ]
        .into_iter()
        .filter(|f| dir.join(f).exists())
        // a ledger that records no call is only a process that started (killed before it
        // wrote its log): nothing was paid, nothing would be lost
        .filter(|f| *f != "costs.jsonl" || ledger_records_calls(dir))
        .collect();
        if produced.is_empty() {
            return Ok(()); // the run never started: it starts now
        }
        return refuse(format!(
            "log.jsonl is missing but the run has produced {}: its history would be lost \
             (restore log.jsonl, or start a new run with `ppol evolve`)",
            produced.join(", ")
        ));
    }
    let records = runlog::read(&dir.log_path())?;
    let commits: Vec<(u64, u64)> = records
        .iter()
        .filter_map(|r| match r.event {
            Event::Checkpoint { iteration } => Some((r.seq, iteration)),
            _ => None,
        })
        .collect();
    match checkpoint {
        None => match commits.last() {
            Some((_, iteration)) => refuse(format!(
                "checkpoint.json is missing but log.jsonl records {} commit(s), up to \
                 iteration {iteration}: resuming would start the run over (restore \
                 checkpoint.json, or start a new run with `ppol evolve`)",
                commits.len()
            )),
            None => Ok(()),
        },
        Some(c) => {
            if c.log_seq == 0 || commits.contains(&(c.log_seq, c.iteration)) {
                Ok(())
            } else {
                refuse(format!(
                    "log.jsonl does not hold the commit of checkpoint.json (iteration {} at \
                     seq {}; the log's last commit is {}): the log and the checkpoint are not \
                     of the same run state",
                    c.iteration,
                    c.log_seq,
                    commits.last().map_or("none".to_string(), |(s, i)| format!(
                        "iteration {i} at seq {s}"
                    ))
                ))
            }
        }
    }
}
