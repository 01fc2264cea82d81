//! `evolve`, `resume`, a background evolution for notebooks, `evaluate` and `report`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::runtime;
use crate::evolve::config::RunConfig;
use crate::evolve::heldout::text::EvalReport;
use crate::evolve::run::{RunControl, RunSummary};
use crate::{Error, Result};

/// Run `ppol evolve` with a resolved configuration.
pub async fn evolve(cfg: RunConfig, control: RunControl) -> Result<RunSummary> {
    resolved(&cfg)?;
    crate::evolve::run::evolve(cfg, control).await
}

/// Continue a run from its last checkpoint, optionally raising its iterations.
pub async fn resume(
    dir: &Path,
    control: RunControl,
    iterations: Option<u64>,
) -> Result<RunSummary> {
    crate::evolve::run::resume(dir, control, iterations).await
}

/// The test support's stop once a new run's configuration is resolved (see
/// `super::stop_if_resolving`): the CLI and Python give the same configuration.
fn resolved(cfg: &RunConfig) -> Result<()> {
    super::stop_if_resolving("evolve", || {
        serde_json::to_value(cfg).unwrap_or(serde_json::Value::Null)
    })
}

/// A new run, or the continuation of one.
#[derive(Debug, Clone)]
pub enum EvolveStart {
    /// A new run with this configuration.
    New(Box<RunConfig>),
    /// `ppol resume DIR [--iterations N]`.
    Resume {
        /// The run directory.
        dir: PathBuf,
        /// New total of iterations.
        iterations: Option<u64>,
    },
}

/// The outcome slot of a background evolution.
type Outcome = Arc<(Mutex<Option<Result<RunSummary>>>, std::sync::Condvar)>;

/// An evolution running on its own thread (for notebooks): stop it, poll it, wait for it.
pub struct EvolutionHandle {
    stop: Arc<AtomicBool>,
    outcome: Outcome,
}

impl EvolutionHandle {
    /// Ask the run to stop after the current evaluation (it then writes its summary).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Whether the run has ended.
    pub fn done(&self) -> bool {
        self.outcome
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Wait up to `timeout` (forever with None); the outcome, or None if still running.
    /// The outcome stays available: later calls return it again.
    pub fn wait(&self, timeout: Option<std::time::Duration>) -> Option<Result<RunSummary>> {
        let (lock, cv) = &*self.outcome;
        let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        let guard = match timeout {
            None => cv
                .wait_while(guard, |o| o.is_none())
                .unwrap_or_else(|e| e.into_inner()),
            Some(t) => {
                cv.wait_timeout_while(guard, t, |o| o.is_none())
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
        };
        guard.as_ref().map(|r| match r {
            Ok(s) => Ok(s.clone()),
            Err(e) => Err(e.duplicate()),
        })
    }
}

/// Start an evolution on a background thread with its own runtime.
pub fn spawn_evolution(start: EvolveStart, mut control: RunControl) -> Result<EvolutionHandle> {
    if let EvolveStart::New(cfg) = &start {
        resolved(cfg)?;
    }
    let stop = control.stop.clone();
    control.stop = stop.clone();
    let outcome: Outcome = Arc::new((Mutex::new(None), std::sync::Condvar::new()));
    let slot = outcome.clone();
    std::thread::Builder::new()
        .name("ppol-evolve".into())
        .spawn(move || {
            let dir = match &start {
                EvolveStart::New(cfg) => cfg.run.out.clone().unwrap_or_default(),
                EvolveStart::Resume { dir, .. } => dir.clone(),
            };
            // A panic here (a bug) must reach `wait()` as an error: with nothing in the slot
            // the caller (a notebook's `ppol_rs.evolve`) would wait forever.
            let run = std::panic::AssertUnwindSafe(move || {
                runtime().and_then(|rt| {
                    rt.block_on(async move {
                        match start {
                            EvolveStart::New(cfg) => evolve(*cfg, control).await,
                            EvolveStart::Resume { dir, iterations } => {
                                resume(&dir, control, iterations).await
                            }
                        }
                    })
                })
            });
            let result = std::panic::catch_unwind(run).unwrap_or_else(|panic| {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".into());
                Err(Error::Run {
                    path: dir,
                    message: format!(
                        "the evolution stopped on an internal error (a bug in ppol: please \
                         report it): {why}; what it finished is kept, `ppol resume` continues"
                    ),
                })
            });
            let (lock, cv) = &*slot;
            *lock.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
            cv.notify_all();
        })
        .map_err(|e| Error::io("starting the evolution thread", "<thread>", e))?;
    Ok(EvolutionHandle { stop, outcome })
}

/// `ppol eval`: the paper's Table 1 on held-out tasks, with evolved − seed.
pub async fn evaluate(
    dir: &Path,
    split: Option<&str>,
    human: &[PathBuf],
    n: Option<usize>,
    placement: &crate::simulate::world::ray::Placement,
    progress: Option<&(dyn Fn(&crate::simulate::batch::Progress) + Sync)>,
) -> Result<EvalReport> {
    super::stop_if_resolving("eval", || {
        serde_json::json!({
            "run_dir": dir, "split": split, "human": human, "n": n,
            "executor": placement.executor, "ray_address": placement.ray_address,
        })
    })?;
    if let Some(n) = n {
        crate::limits::check("n", n, 1, crate::limits::MAX_PERSONAS)?;
    }
    crate::evolve::run::evaluate_run_at(dir, split, human, n, placement, progress).await
}

/// `ppol report`: the self-contained HTML report; returns its path.
pub fn report(dir: &Path, out: Option<&Path>) -> Result<PathBuf> {
    crate::report::write(dir, out)
}
