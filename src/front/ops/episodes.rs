//! `episodes`: the episode loop with its concurrency bound, budget check and incremental output.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use serde::Serialize;

use super::llm_client;
use crate::evolve::config::RunConfig;
use crate::llm::{Accounting, ChatModel, LlmClient, LlmConfig};
use crate::persona::Persona;
use crate::simulate::episode::record::{pass_hat_k, Episode, EpisodeStatus};
use crate::simulate::episode::runner::{self, Backend};
use crate::simulate::settings::EpisodesSection;
use crate::simulate::world::{self, World, WorldDeps, WorldSettings, WorldSpec};
use crate::{limits, Error, Result};

/// Which world to open: its spec, `[world]` settings and the τ² data of built-in domains.
#[derive(Debug, Clone)]
pub struct WorldChoice {
    /// `demo`, `retail`, `airline`, `external:COMMAND`, `tau2:DOMAIN` or `chat`.
    pub spec: WorldSpec,
    /// `[world]` settings (task file, processes, protocol, ...).
    pub settings: WorldSettings,
    /// τ² data directory of the built-in domains.
    pub tau2_data: Option<PathBuf>,
}

impl WorldChoice {
    /// A built-in domain (`demo`, `retail`, `airline`) with default `[world]` settings.
    pub fn builtin(domain: &str, tau2_data: Option<PathBuf>) -> Result<Self> {
        Ok(WorldChoice {
            spec: world::resolve_spec(None, Some(domain))?,
            settings: WorldSettings::default(),
            tau2_data,
        })
    }

    /// The world of a run config (`[run] world`/`domain`, `[run] tau2_data`, `[world]`).
    pub fn of_config(cfg: &RunConfig) -> Result<Self> {
        Ok(WorldChoice {
            spec: cfg.world_spec()?,
            settings: cfg.world.clone(),
            tau2_data: cfg.run.tau2_data.clone(),
        })
    }

    /// Open it with a backend and model (see [`world::open`]).
    pub async fn open(
        &self,
        backend: Backend,
        model: Option<Arc<dyn ChatModel>>,
        max_tool_rounds: usize,
        seed: u64,
    ) -> Result<Arc<dyn World>> {
        world::open(
            &self.spec,
            WorldDeps {
                settings: self.settings.clone(),
                tau2_data: self.tau2_data.clone(),
                backend,
                model,
                max_tool_rounds,
                seed,
            },
        )
        .await
    }
}

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
    /// Write episodes to this JSONL file as they finish (see [`EpisodeSink`]); None: keep them
    /// in memory only.
    pub output: Option<PathBuf>,
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
    pub const CONCURRENCY: usize = 256;
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

/// Incremental episode output: every finished episode is appended to `<OUT>.partial` (flushed),
/// so a killed run keeps what it paid for; a rerun of the same request takes the episodes
/// already there instead of playing them again; at the end the whole set is written to `OUT`
/// atomically (in plan order) and the partial file is removed. An output that is not a regular
/// file (a device, a FIFO) gets only the final write, and nothing is made beside it: no partial
/// file (a warning says so), so an interrupted run starts over.
pub struct EpisodeSink {
    output: PathBuf,
    /// `<OUT>.partial` and the handle episodes are appended through (None: `OUT` is special).
    partial: Option<(PathBuf, Mutex<std::fs::File>)>,
}

impl EpisodeSink {
    /// Open the sink for `output`; returns it with the episodes an earlier, interrupted run left
    /// in the partial file (a torn last line is dropped).
    pub fn open(output: &Path) -> Result<(Self, Vec<Episode>)> {
        if crate::io::output_target(output)?.is_special() {
            tracing::warn!(
                "'{}' is not a regular file: episodes are written to it once, at the end, and \
                 none is kept in a .partial file beside it as they finish (an interrupted run \
                 starts over)",
                output.display()
            );
            let sink = EpisodeSink {
                output: output.to_path_buf(),
                partial: None,
            };
            return Ok((sink, Vec::new()));
        }
        let mut name = output.file_name().unwrap_or_default().to_os_string();
        name.push(".partial");
        let partial = output.with_file_name(name);
        let mut done = Vec::new();
        if partial.exists() {
            let text = crate::io::read_to_string(&partial)?;
            let complete = match text.rfind('\n') {
                Some(i) => &text[..=i],
                None => "",
            };
            done = crate::io::parse_jsonl(complete, &partial, "an episode record")?;
        }
        if let Some(dir) = output.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("creating directory", dir, e))?;
        }
        // Rewrite the partial file without a torn tail before appending to it.
        crate::io::write_jsonl(&partial, &done)?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&partial)
            .map_err(|e| Error::io("opening", &partial, e))?;
        Ok((
            EpisodeSink {
                output: output.to_path_buf(),
                partial: Some((partial, Mutex::new(file))),
            },
            done,
        ))
    }

    /// The partial file (None for an output that is not a regular file).
    pub fn partial_path(&self) -> Option<&Path> {
        self.partial.as_ref().map(|(p, _)| p.as_path())
    }

    /// Append one finished episode (one write of one line, then flushed to the OS).
    pub fn push(&self, episode: &Episode) -> Result<()> {
        use std::io::Write;
        let Some((path, file)) = &self.partial else {
            return Ok(());
        };
        let mut line = crate::io::to_json(episode);
        line.push('\n');
        let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
        f.write_all(line.as_bytes())
            .and_then(|_| f.flush())
            .map_err(|e| Error::io("writing", path, e))
    }

    /// Write the final file atomically (in place when it is special) and remove the partial one.
    pub fn finish(self, episodes: &[Episode]) -> Result<()> {
        crate::io::write_jsonl(&self.output, episodes)?;
        match self.partial {
            Some((path, file)) => {
                drop(file);
                std::fs::remove_file(&path).map_err(|e| Error::io("removing", &path, e))
            }
            None => Ok(()),
        }
    }
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

/// Refuse a plan of more than [`limits::MAX_EPISODES`] episodes before it is made (every
/// episode of a request is kept in memory until the output is written).
pub fn check_plan_size(
    task_ids: &[String],
    personas: Option<&[Persona]>,
    trials: u32,
) -> Result<()> {
    let planned = runner::count_jobs(task_ids, personas, trials);
    if planned > limits::MAX_EPISODES as u128 {
        let pairs = runner::count_jobs(task_ids, personas, 1);
        return Err(Error::config(
            "tasks × personas × trials",
            format!(
                "{pairs} (task, persona) pairs × {trials} trials = {planned} episodes, more than \
                 {} (ppol's limit of one request); play fewer trials, personas or tasks at once",
                limits::MAX_EPISODES
            ),
        ));
    }
    Ok(())
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

/// Play every (task, persona, trial) episode of the request: at most `concurrency` at once;
/// once the LLM budget is spent, episodes not yet started are recorded as failed with that
/// reason; with an output file, episodes are written as they finish and a rerun resumes.
/// `progress` is called with (done, total) after each episode.
pub async fn episodes(
    req: EpisodesRequest,
    progress: &(dyn Fn(usize, usize) + Sync),
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

async fn play(
    req: &EpisodesRequest,
    world: &dyn World,
    client: Option<LlmClient>,
    max_turns: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<EpisodesReport> {
    let task_ids = world.select(&req.tasks)?;
    if task_ids.is_empty() {
        return Err(Error::config(
            "tasks",
            format!("no tasks selected by '{}'", req.tasks),
        ));
    }
    check_plan_size(&task_ids, req.personas.as_deref(), req.trials)?;
    let jobs = runner::plan_jobs(&task_ids, req.personas.as_deref(), req.trials);
    if jobs.is_empty() {
        return Err(Error::config(
            "personas",
            "no (task, persona) pairs: do the personas' task_id values match the selected tasks?",
        ));
    }
    let runner = world.runner(max_turns);
    let runner = runner.as_ref();
    let (sink, earlier) = match &req.output {
        Some(p) => {
            let (s, done) = EpisodeSink::open(p)?;
            (Some(s), done)
        }
        None => (None, Vec::new()),
    };
    let planned: BTreeSet<String> = jobs
        .iter()
        .map(|(t, p, k)| runner::episode_id(t, p.as_ref(), *k))
        .collect();
    // Earlier episodes count only if they belong to this plan and did not fail (a failed one is
    // played again: the failure may have been an outage).
    let mut reuse: std::collections::BTreeMap<String, Episode> = earlier
        .into_iter()
        .filter(|e| planned.contains(&e.id) && e.status == EpisodeStatus::Ok)
        .map(|e| (e.id.clone(), e))
        .collect();
    if let Some(partial) = sink.as_ref().and_then(|s| s.partial_path()) {
        // keep only what will be reused in the partial file
        crate::io::write_jsonl(partial, &reuse.values().cloned().collect::<Vec<_>>())?;
    }
    let resumed = reuse.len();
    let total = jobs.len();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let sink_error: Mutex<Option<Error>> = Mutex::new(None);
    let mut results: Vec<(usize, Episode)> = Vec::with_capacity(total);
    let mut todo = Vec::new();
    for (i, (task, persona, trial)) in jobs.into_iter().enumerate() {
        let id = runner::episode_id(&task, persona.as_ref(), trial);
        match reuse.remove(&id) {
            Some(e) => {
                results.push((i, e));
                progress(done.fetch_add(1, Ordering::SeqCst) + 1, total);
            }
            None => todo.push((i, task, persona, trial)),
        }
    }
    let root_seed = req.seed;
    let played: Vec<(usize, Episode)> = futures::stream::iter(todo)
        .map(|(i, task, persona, trial)| {
            let (client, sink, done, sink_error) = (client.as_ref(), &sink, &done, &sink_error);
            let (domain, backend) = (world.domain(), world.backend());
            async move {
                let seed = crate::rng::mix(root_seed, i as u64);
                let ep = match client.and_then(|c| c.budget_exhausted()) {
                    Some(why) => Episode::failed(
                        &task,
                        persona.as_ref(),
                        trial,
                        seed,
                        &domain,
                        &backend,
                        format!("not run: budget exhausted ({why})"),
                    ),
                    None => runner.run(&task, persona.as_ref(), trial, seed).await,
                };
                if let Some(s) = sink {
                    if let Err(e) = s.push(&ep) {
                        sink_error
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert(e);
                    }
                }
                progress(done.fetch_add(1, Ordering::SeqCst) + 1, total);
                (i, ep)
            }
        })
        .buffer_unordered(req.concurrency.max(1))
        .collect()
        .await;
    if let Some(e) = sink_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    results.extend(played);
    results.sort_by_key(|(i, _)| *i);
    let episodes: Vec<Episode> = results.into_iter().map(|(_, e)| e).collect();
    if let Some(s) = sink {
        s.finish(&episodes)?;
    }
    Ok(EpisodesReport {
        episodes,
        resumed,
        backend: world.backend(),
        world: world.label(),
        tasks: task_ids.len(),
        budget_exhausted: client.as_ref().and_then(|c| c.budget_exhausted()),
        llm: client.map(|c| c.accounting()),
    })
}
