//! What a run reports and how it is steered from outside: [`Progress`] (and its callback),
//! [`RunControl`] (stop flag, test hooks) and the [`RunSummary`] a run ends with.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::evolve::rundir::runlog::{self, EvalMetrics, ProcessShare};
#[cfg(doc)]
use crate::evolve::rundir::summary;
use crate::llm::client::RoleAccounting;

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
    /// What just happened, or what the run waits for.
    pub message: String,
    /// Whether this reports work in progress (a batch's episodes, a generation waiting on its
    /// model) rather than a step of the run: a front end may show it less often (the CLI shows
    /// it in its progress bar, and off a terminal at most every 20 s).
    #[serde(default)]
    pub detail: bool,
}

/// Least time between two reports of a batch's finished episodes.
pub const BATCH_REPORT_GAP: Duration = Duration::from_secs(2);

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
    /// The run's best program ([`RunBest`](crate::evolve::rundir::RunBest): the program that
    /// validates best, the one in `best/`).
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
    /// Why the run's best is still its seed program, when it is
    /// ([`summary::seed_still_best`]: no mutation landed, or none beat the seed).
    #[serde(default)]
    pub seed_still_best: Option<String>,
    /// Whether the world gives rewards ([`summary::world_rewards`]): `Some(false)` is shown
    /// as "no reward", not as a success rate of 0.
    #[serde(default)]
    pub rewards: Option<bool>,
    /// Tasks of the run's test split: what `ppol eval` compares evolved and seed on.
    #[serde(default)]
    pub test_tasks: Option<usize>,
    /// Which humans the scores were computed on: the objective, the search humans' count and
    /// the count held out for `ppol eval`'s audit (None for a run halted by the test hook).
    #[serde(default)]
    pub humans: Option<HumansUsed>,
}

/// The humans behind a run's scores.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HumansUsed {
    /// `paper` or `population`.
    pub objective: String,
    /// Human dialogues the objective, the best selection and early stopping saw.
    pub search: usize,
    /// Human dialogues held out (`run.human_holdout`), seen only by `ppol eval`.
    pub held_out: usize,
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
    /// Test hook: at this point — `baseline:N` (N more baseline episodes played and saved),
    /// `checkpoint:N` (the N-th commit of this process) or `retrained:N` (the run's N-th
    /// retraining of its discriminator done, not yet committed) — say so on stderr and wait
    /// to be killed, with no LLM call in flight.
    pub pause_at: Option<String>,
    /// Where the simulators are played this time, over the run's `[world]` (`ppol resume
    /// --executor`, `--ray-address`).
    pub placement: crate::simulate::world::ray::Placement,
}

impl RunControl {
    /// The N of the `pause_at` test hook when it names this point.
    pub(super) fn pause_point(&self, point: &str) -> Option<usize> {
        let (p, n) = self.pause_at.as_deref()?.split_once(':')?;
        (p == point).then(|| n.parse().ok()).flatten()
    }

    pub(super) fn say(&self, progress: Progress) {
        if let Some(p) = &self.progress {
            p(&progress);
        }
    }

    /// A batch's progress as the run's detail: the batch's line (what is in flight and for
    /// how long) at iteration `iteration` once the batch has run for [`BATCH_REPORT_GAP`]
    /// (a quick batch says nothing), then at most every [`BATCH_REPORT_GAP`] while episodes
    /// finish, at its end, and every heartbeat while none does. With `steps`, the batch's
    /// first and last reports are steps of the run, not details, and always said (the
    /// baseline's).
    pub(super) fn batch_reporter(
        &self,
        iteration: u64,
        iterations: u64,
        steps: bool,
    ) -> impl Fn(&crate::simulate::batch::Progress) + Sync + '_ {
        let started = std::time::Instant::now();
        let last = std::sync::Mutex::new(None::<std::time::Instant>);
        move |p: &crate::simulate::batch::Progress| {
            let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
            let edge = !p.heartbeat && (last.is_none() || p.done == p.total);
            let due = last.is_none_or(|t| t.elapsed() >= BATCH_REPORT_GAP);
            let slow = started.elapsed() >= BATCH_REPORT_GAP;
            if (steps && edge) || (slow && (p.heartbeat || due || p.done == p.total)) {
                *last = Some(std::time::Instant::now());
                self.say(Progress {
                    iteration,
                    iterations,
                    best_combined: None,
                    message: p.line(),
                    detail: !(steps && edge),
                });
            }
        }
    }
}

/// Wait for `task`, checking `stop` every 200 ms: `None` when a stop is requested first (the
/// task is left running; the caller aborts or keeps it).
pub(super) async fn join_unless_stopped<T>(
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
