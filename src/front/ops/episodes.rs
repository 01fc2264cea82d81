//! `episodes`: a plan of (task, persona, trial) jobs played through the one batch layer
//! ([`crate::simulate::batch`]: concurrency, stop, budget, incremental output, progress).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use serde::Serialize;

use super::llm_client;
use crate::llm::{Accounting, ChatModel, LlmClient, LlmConfig};
use crate::persona::Persona;
use crate::simulate::batch::{self, Batch, Player, SinkPaths, Stopped};
use crate::simulate::episode::record::{pass_hat_k, Episode, EpisodeStatus};
use crate::simulate::episode::runner::Backend;
use crate::simulate::settings::EpisodesSection;
use crate::simulate::world::World;
pub use crate::simulate::world::WorldChoice;
use crate::{limits, Error, Result};

/// What `ppol episodes` needs.
pub struct EpisodesRequest {
    /// The world.
    pub world: WorldChoice,
    /// Tasks: `all`, a split name, or comma-separated task ids.
    pub tasks: String,
    /// Personas (a persona without `task_id` fits every task); None: the plain simulator.
    pub personas: Option<Vec<Persona>>,
    /// Trials per (task, persona), 1 ..= [`limits::MAX_TRIALS`]; at most
    /// [`limits::MAX_EPISODES`] episodes in all.
    pub trials: u32,
    /// The LLM user simulator and agent (None: the offline scripted simulator).
    pub llm: Option<LlmConfig>,
    /// User turns before an episode is cut (default: `episodes.val_max_turns`).
    pub max_turns: Option<usize>,
    /// Tool-call rounds per LLM agent turn (default: `episodes.max_tool_rounds`).
    pub max_tool_rounds: Option<usize>,
    /// User-simulator temperature (default: `episodes.user_temperature`).
    pub user_temperature: Option<f32>,
    /// Root seed.
    pub seed: u64,
    /// Episodes in flight at once (the LLM client also bounds requests).
    pub concurrency: usize,
    /// Write episodes to this JSONL file: appended to `OUT.partial` as they finish, so a rerun
    /// of the same request plays only what is missing, and to `OUT` in plan order once all
    /// are played ([`SinkPaths::beside`]); None: keep them in memory only.
    pub output: Option<PathBuf>,
    /// Set to stop: no episode starts after it, those in flight are dropped, the finished ones
    /// are kept in `OUT.partial` (None: play the whole plan).
    pub stop: Option<Arc<AtomicBool>>,
}

impl EpisodesRequest {
    /// Default of `tasks` (`--tasks`, `tasks=`).
    pub const TASKS: &'static str = "all";
    /// Default of `trials` (`--trials`, `trials=`).
    pub const TRIALS: u32 = 1;
    /// Default of `seed` (`--seed`, `seed=`).
    pub const SEED: u64 = 0;
    /// Default of `concurrency` (`--concurrency`, `concurrency=`, the benches): episodes in
    /// flight at once; the LLM client bounds requests on its own.
    pub const CONCURRENCY: usize = crate::simulate::settings::DEFAULT_CONCURRENCY;
    /// Default of `--llm` (Python: `llm=None`): no LLM of its own, so the configuration's
    /// `[llm]`, else the offline scripted simulator.
    pub const LLM: &'static str = "offline";

    /// Fill what the front end left unset from the `[episodes]` section of its configuration
    /// (`--config` / `config=`, else the defaults): `max_turns` from `val_max_turns`,
    /// `max_tool_rounds`, `user_temperature`. The CLI and Python both call this, so they play
    /// the same episodes from the same configuration.
    pub fn with_settings(mut self, episodes: &EpisodesSection) -> Self {
        self.max_turns = self.max_turns.or(Some(episodes.val_max_turns));
        self.max_tool_rounds = self.max_tool_rounds.or(Some(episodes.max_tool_rounds));
        self.user_temperature = self.user_temperature.or(Some(episodes.user_temperature));
        self
    }
}

/// What `ppol episodes` was asked, as the CLI's flags or Python's arguments give it: the one
/// value both front ends build, turned into an [`EpisodesRequest`] by
/// [`EpisodesInput::resolve`] with the same defaults, checks and messages for both.
#[derive(Default)]
pub struct EpisodesInput {
    /// A run configuration (`--config`, `config=`): its world, `[episodes]` and `[llm]` apply
    /// where nothing else sets them.
    pub config: Option<PathBuf>,
    /// The world, its task file and τ² data given by flags or keyword arguments, with their
    /// origins.
    pub overrides: super::Overrides,
    /// Tasks: `all`, a split name, or comma-separated task ids.
    pub tasks: String,
    /// Personas (None: the plain simulator).
    pub personas: Option<Vec<Persona>>,
    /// Trials per (task, persona).
    pub trials: u32,
    /// The `--llm` / `llm=` grammar (None or `offline`: the configuration's `[llm]`, else the
    /// offline scripted simulator).
    pub llm: Option<String>,
    /// User turns before an episode is cut (default: `episodes.val_max_turns`).
    pub max_turns: Option<usize>,
    /// Tool-call rounds per LLM agent turn (default: `episodes.max_tool_rounds`).
    pub max_tool_rounds: Option<usize>,
    /// Root seed.
    pub seed: u64,
    /// Episodes in flight at once.
    pub concurrency: usize,
    /// The output file (None: in memory only).
    pub output: Option<PathBuf>,
    /// The stop flag.
    pub stop: Option<Arc<AtomicBool>>,
}

impl EpisodesInput {
    /// Resolve: the configuration in its layers, the world it names, the LLM, and the
    /// `[episodes]` settings for what was left unset.
    pub fn resolve(self) -> Result<EpisodesRequest> {
        let cfg = super::load_config(self.config.as_deref(), &self.overrides)?;
        let llm = match self.llm.as_deref() {
            Some(spec) => super::parse_llm(spec)?,
            None => None,
        }
        .or_else(|| cfg.llm.clone());
        let request = EpisodesRequest {
            world: cfg.world(),
            tasks: self.tasks,
            personas: self.personas,
            trials: self.trials,
            llm,
            max_turns: self.max_turns,
            max_tool_rounds: self.max_tool_rounds,
            user_temperature: None,
            seed: self.seed,
            concurrency: self.concurrency,
            output: self.output,
            stop: self.stop,
        }
        .with_settings(&cfg.episodes);
        super::stop_if_resolving("episodes", || request.describe())?;
        Ok(request)
    }
}

impl EpisodesRequest {
    /// The resolved request as plain data (what the front ends' agreement is tested on).
    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "world": {
                "spec": self.world.spec.label(),
                "settings": self.world.settings,
                "tau2_data": self.world.tau2_data,
            },
            "tasks": self.tasks,
            "personas": self.personas,
            "trials": self.trials,
            "llm": self.llm,
            "max_turns": self.max_turns,
            "max_tool_rounds": self.max_tool_rounds,
            "user_temperature": self.user_temperature,
            "seed": self.seed,
            "concurrency": self.concurrency,
            "output": self.output,
        })
    }
}

/// Episodes played, with what was spent.
#[derive(Debug, Clone, Serialize)]
pub struct EpisodesReport {
    /// Every planned episode in plan order (failed ones included, with their reason).
    pub episodes: Vec<Episode>,
    /// Episodes taken from an interrupted earlier run of the same request.
    pub resumed: usize,
    /// The backend (`scripted` or the models per role).
    pub backend: String,
    /// The world (`retail`, `external:...`, `tau2:telecom`, `chat`).
    pub world: String,
    /// Tasks played.
    pub tasks: usize,
    /// LLM use (None offline).
    pub llm: Option<Accounting>,
    /// Why new episodes were not started, if the budget ran out.
    pub budget_exhausted: Option<String>,
    /// Set when the request was stopped before every episode was played: `episodes` then holds
    /// the finished ones only, and `OUT.partial` keeps them for the rerun.
    pub interrupted: Option<String>,
}

impl EpisodesReport {
    /// Episodes that failed (infrastructure, budget), with a reason each.
    pub fn failed(&self) -> usize {
        self.episodes
            .iter()
            .filter(|e| e.status == EpisodeStatus::Failed)
            .count()
    }

    /// Failed episodes counted by reason (the reason's first line, cut at 160 characters).
    pub fn failures_by_reason(&self) -> std::collections::BTreeMap<String, usize> {
        let mut out = std::collections::BTreeMap::new();
        for e in &self.episodes {
            if e.status == EpisodeStatus::Failed {
                let why = e.error.as_deref().unwrap_or("no reason recorded");
                let key: String = why.lines().next().unwrap_or("").chars().take(160).collect();
                *out.entry(key).or_insert(0) += 1;
            }
        }
        out
    }

    /// Episodes with reward 1.
    pub fn successes(&self) -> usize {
        self.episodes.iter().filter(|e| e.success()).count()
    }

    /// pass^k for k = 1..=trials (τ²'s unbiased estimator per task, averaged).
    pub fn pass_hat_k(&self, trials: u32) -> std::collections::BTreeMap<usize, f64> {
        pass_hat_k(&self.episodes, trials as usize)
    }

    /// The run as one JSON summary: counts, success rate, the full pass^k curve, LLM use.
    pub fn summary(&self, trials: u32) -> serde_json::Value {
        let n = self.episodes.len();
        serde_json::json!({
            "episodes": n,
            "failed": self.failed(),
            "resumed": self.resumed,
            "successes": self.successes(),
            "success_rate": if n == 0 { 0.0 } else { self.successes() as f64 / n as f64 },
            "pass_hat_k": self.pass_hat_k(trials).into_iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
            "backend": self.backend,
            "world": self.world,
            "failures_by_reason": self.failures_by_reason(),
            "llm": self.llm,
            "budget_exhausted": self.budget_exhausted,
        })
    }
}

/// The k at which a pass^k curve is summarised for reading: 1, 2, 4, 8, ... up to `trials`,
/// and `trials` itself (τ-bench papers report pass^1 … pass^8 this way).
pub fn summary_ks(trials: u32) -> Vec<usize> {
    let t = trials.max(1) as usize;
    let mut ks: Vec<usize> = std::iter::successors(Some(1usize), |k| k.checked_mul(2))
        .take_while(|k| *k <= t)
        .collect();
    if ks.last() != Some(&t) {
        ks.push(t);
    }
    ks
}

/// Read persona records (JSONL, as `ppol generate` writes them) in bounded memory (see
/// [`crate::io::read_jsonl`]), naming file and line on errors.
pub fn read_personas(path: &Path) -> Result<Vec<Persona>> {
    let ps = crate::persona::read_jsonl(path)?;
    if ps.is_empty() {
        return Err(Error::parse(path, "file", "no persona records"));
    }
    Ok(ps)
}

/// Build the episode backend for an optional LLM configuration.
pub fn episode_backend(client: Option<&LlmClient>, user_temperature: f32) -> Backend {
    match client {
        None => Backend::Scripted,
        Some(c) => {
            let m: Arc<dyn ChatModel> = Arc::new(c.clone());
            Backend::Llm {
                user: m.clone(),
                agent: m,
                user_temperature: Some(user_temperature),
                agent_temperature: None,
            }
        }
    }
}

/// Play every (task, persona, trial) episode of the request through the batch layer: at most
/// `concurrency` at once; once the LLM budget is spent, episodes not yet started are recorded
/// as failed with that reason; with an output file, episodes are written as they finish and a
/// rerun resumes. `progress` gets the batch's progress after each episode and every few
/// seconds while none finishes.
pub async fn episodes(
    req: EpisodesRequest,
    progress: &(dyn Fn(&batch::Progress) + Sync),
) -> Result<EpisodesReport> {
    let defaults = EpisodesSection::default();
    let max_turns = req.max_turns.unwrap_or(defaults.val_max_turns);
    limits::check("max_turns", max_turns, 1, limits::MAX_TURNS)?;
    let max_tool_rounds = req.max_tool_rounds.unwrap_or(defaults.max_tool_rounds);
    limits::check("max_tool_rounds", max_tool_rounds, 1, limits::MAX_TURNS)?;
    limits::check("trials", req.trials, 1, limits::MAX_TRIALS)?;
    limits::check("concurrency", req.concurrency, 1, limits::MAX_CONCURRENCY)?;
    let client = llm_client(req.llm.as_ref())?;
    let backend = episode_backend(
        client.as_ref(),
        req.user_temperature.unwrap_or(defaults.user_temperature),
    );
    let model = client.clone().map(|c| Arc::new(c) as Arc<dyn ChatModel>);
    let world = req
        .world
        .open(backend, model, max_tool_rounds, req.seed)
        .await?;
    let result = play(&req, world.as_ref(), client, max_turns, progress).await;
    world.shutdown().await;
    result
}

/// The task ids the request's `tasks` selects in its world (opened, asked and shut down; no
/// episode is played).
pub async fn selected_tasks(req: &EpisodesRequest) -> Result<Vec<String>> {
    let defaults = EpisodesSection::default();
    let client = llm_client(req.llm.as_ref())?;
    let backend = episode_backend(
        client.as_ref(),
        req.user_temperature.unwrap_or(defaults.user_temperature),
    );
    let model = client.map(|c| Arc::new(c) as Arc<dyn ChatModel>);
    let world = req
        .world
        .open(
            backend,
            model,
            req.max_tool_rounds.unwrap_or(defaults.max_tool_rounds),
            req.seed,
        )
        .await?;
    let ids = world.select(&req.tasks);
    world.shutdown().await;
    ids
}

async fn play(
    req: &EpisodesRequest,
    world: &dyn World,
    client: Option<LlmClient>,
    max_turns: usize,
    progress: &(dyn Fn(&batch::Progress) + Sync),
) -> Result<EpisodesReport> {
    let task_ids = world.select(&req.tasks)?;
    if task_ids.is_empty() {
        return Err(Error::config(
            "tasks",
            format!("no tasks selected by '{}'", req.tasks),
        ));
    }
    let jobs = batch::plan_episodes(&task_ids, req.personas.as_deref(), req.trials, req.seed)?;
    let runner = world.runner(max_turns);
    let (backend, domain) = (world.backend(), world.domain());
    let budget = || client.as_ref().and_then(|c| c.budget_exhausted());
    let mut b = Batch::new("episodes", &jobs)
        .concurrency(req.concurrency)
        .budget(&budget)
        .progress(progress);
    if let Some(out) = &req.output {
        b = b.sink(SinkPaths::beside(out)?);
    }
    if let Some(stop) = &req.stop {
        b = b.stop(stop);
    }
    let played = b
        .play(Player {
            runner: runner.as_ref(),
            backend: &backend,
            domain: &domain,
        })
        .await?;
    let interrupted = played.stopped.map(|why| {
        let kept = match &played.partial {
            Some(p) => format!(
                "{} of {} episodes are kept in {}; the same command plays the rest",
                played.done(),
                jobs.len(),
                p.display()
            ),
            None => format!("{} of {} episodes were played", played.done(), jobs.len()),
        };
        format!("{}: {kept}", why.describe())
    });
    debug_assert!(played.stopped != Some(Stopped::Limit));
    let resumed = played.reused;
    Ok(EpisodesReport {
        episodes: played.episodes.into_iter().flatten().collect(),
        resumed,
        backend,
        world: world.label(),
        tasks: task_ids.len(),
        budget_exhausted: client.as_ref().and_then(|c| c.budget_exhausted()),
        llm: client.map(|c| c.accounting()),
        interrupted,
    })
}
