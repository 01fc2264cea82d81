//! `ppol evolve` / `ppol resume` / `ppol eval`: the entry points the front ends call.
//!
//! [`evolve`] creates the run directory and starts an [`Evolution`]; [`resume`] reads the
//! checkpoint, cuts the log back to it and continues. The loop itself — one candidate per
//! step, the checkpoint as commit point — is [`crate::evolve::evolution`]; the run directory
//! is [`crate::evolve::rundir`]; `ppol eval` is [`crate::evolve::eval`].

use std::path::Path;

use crate::evolve::config::RunConfig;
use crate::evolve::context::RunContext;
use crate::evolve::evolution::{check_config, Evolution, State, CHECKPOINT_FORMAT};
use crate::evolve::rundir::RunDir;
use crate::{Error, Result};

pub use crate::evolve::eval::{evaluate_run, table_text};
pub use crate::evolve::evolution::{Progress, ProgressFn, RunControl, RunSummary};

/// Create a run directory and run the evolution.
pub async fn evolve(cfg: RunConfig, control: RunControl) -> Result<RunSummary> {
    cfg.validate()?;
    check_config(&cfg)?;
    let dir = RunDir::create(&cfg)?;
    let ctx = RunContext::new(cfg, dir).await?;
    Evolution::start(ctx, None, control).await?.run().await
}

/// Continue a run from its last checkpoint (after any stop, kill -9 included);
/// `extra_iterations` replaces `search.iterations` (the total, not a number to add).
pub async fn resume(
    dir: &Path,
    control: RunControl,
    extra_iterations: Option<u64>,
) -> Result<RunSummary> {
    let dir = RunDir::open(dir);
    let mut cfg = dir.load_config()?;
    if let Some(n) = extra_iterations {
        cfg.search.iterations = n;
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
    // The checkpoint is the commit point: drop log lines written after it.
    dir.truncate_log(checkpoint.as_ref().map(|c| c.log_seq))?;
    let ctx = RunContext::new(cfg, dir).await?;
    Evolution::start(ctx, checkpoint, control)
        .await?
        .run()
        .await
}
