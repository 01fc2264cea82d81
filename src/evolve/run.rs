//! `ppol evolve` / `ppol resume`: the evolution loop with its run directory.
//!
//! Each iteration makes one candidate (iteration 1 evaluates the seed program), runs it in the
//! sandbox for a sliding batch of train tasks, plays its personas, scores the episodes and adds
//! the program to the archive. After every evaluation a checkpoint is written atomically; the
//! checkpoint is the commit point. A resumed run truncates the log to the checkpoint and goes
//! on with the same per-iteration seeds, so an offline run killed at any point and resumed ends
//! exactly where an uninterrupted run does, and no committed evaluation is repeated.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::compare::{compare, render_table, Condition};
use super::evaluate::{
    evaluate_candidate, program_metrics, rank, score_episodes, CandidateOutcome, SandboxGenerator,
    TaskContext,
};
use crate::dialogue::Dialogue;
use crate::evolve::archive::Archive;
use crate::evolve::config::{EpisodeBackend, MutationMode, RunConfig};
use crate::evolve::mutation::diff::{apply_diff, check_python_syntax, extract_full_program};
use crate::evolve::mutation::prompt::{MutationContext, PromptBuilder, PromptConfig};
use crate::evolve::mutation::structural::{
    crossover, structural_mutate_with, AxisVocab, StructuralOptions,
};
use crate::evolve::mutation::{ChildFailure, FailureKind};
use crate::evolve::program::{MutationInfo, MutationKind, Program, ProgramId};
use crate::evolve::runlog::{self, EvalMetrics, Event, FailureInfo, RunLog};
use crate::fitness::coverage::CoverageOptions;
use crate::fitness::discriminator::Discriminator;
use crate::fitness::features::Fingerprint;
use crate::fitness::reference::HumanReference;
use crate::fitness::score::{Scorer, Weights};
use crate::fitness::traces::{self, LoadOptions};
use crate::generate::sandbox::{Sandbox, SandboxConfig};
use crate::llm::client::LlmClient;
use crate::llm::{CallRole, ChatModel, ChatRequest};
use crate::persona::Persona;
use crate::seed::{derive_seed, mix};
use crate::simulate::episode::record::Episode;
use crate::simulate::episode::runner::{load_domain, task_context, Backend, Tau2Runner};
use crate::simulate::episode::EpisodeRunner;
use crate::simulate::tau2::Domain;
use crate::{Error, Result};

use crate::shipped::{DEMO_HUMANS, DIRECT_SEED, LLM_SEED, OFFLINE_SEED};

const CHECKPOINT_FORMAT: &str = "ppol-run/1";

/// What `evolve` reports as it goes (for progress bars and notebooks).
#[derive(Debug, Clone, Serialize)]
pub struct Progress {
    /// Iterations completed.
    pub iteration: u64,
    /// Iterations planned.
    pub iterations: u64,
    /// Best combined train score so far.
    pub best_combined: Option<f64>,
    /// What just happened.
    pub message: String,
}

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
    /// Best program id.
    pub best_program_id: Option<String>,
    /// Best program's train metrics.
    pub best_metrics: Option<EvalMetrics>,
    /// Latest validation metrics of the best program.
    pub best_validation: Option<EvalMetrics>,
    /// Whether it ran offline.
    pub offline: bool,
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
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Checkpoint {
    format: String,
    iteration: u64,
    log_seq: u64,
    archive: String,
    pending: VecDeque<Program>,
    requeues: u32,
    stagnation: u64,
    parents: BTreeMap<String, Option<String>>,
    best_validation: Option<(String, EvalMetrics)>,
    elapsed_s: f64,
}

/// Everything a run needs, built from its configuration.
pub struct RunContext {
    /// The configuration.
    pub cfg: RunConfig,
    /// The run directory.
    pub dir: PathBuf,
    /// The domain.
    pub domain: Arc<Domain>,
    /// Train task ids.
    pub train: Vec<String>,
    /// Validation task ids.
    pub val: Vec<String>,
    /// Held-out test task ids.
    pub test: Vec<String>,
    /// Human dialogues used by the run.
    pub humans: Vec<Dialogue>,
    /// Held-out human dialogues (for `ppol eval`).
    pub humans_heldout: Vec<Dialogue>,
    /// Where the human traces came from.
    pub human_source: Vec<String>,
    /// The LLM client (None offline).
    pub client: Option<LlmClient>,
    /// Training episodes.
    pub runner: Tau2Runner,
    /// Validation / eval episodes.
    pub val_runner: Tau2Runner,
    /// Generation.
    pub generator: SandboxGenerator,
    /// The seed program.
    pub seed_code: String,
}

impl RunContext {
    /// Build the context (no episodes are played here).
    pub async fn new(cfg: RunConfig, dir: PathBuf) -> Result<Self> {
        let domain = load_domain(&cfg.run.domain, cfg.run.tau2_data.as_deref())?;
        let ids = |spec: &str| -> Result<Vec<String>> {
            Ok(domain
                .select_tasks(spec)?
                .iter()
                .map(|t| t.id.clone())
                .collect())
        };
        let train_all = ids(&cfg.run.train_split)?;
        let test = ids(&cfg.run.test_split).unwrap_or_default();
        if train_all.is_empty() {
            return Err(Error::config(
                "run.train_split",
                format!(
                    "split '{}' of domain {} has no tasks",
                    cfg.run.train_split, domain.name
                ),
            ));
        }
        let (train, val) = split_val(
            &train_all,
            cfg.run.val_fraction,
            derive_seed(cfg.search.seed, "val_split"),
        );
        let (humans_all, human_source) = load_humans(&cfg)?;
        let (humans, humans_heldout) = holdout(
            humans_all,
            cfg.run.human_holdout,
            derive_seed(cfg.search.seed, "human_holdout"),
        );
        if humans.is_empty() {
            return Err(Error::Insufficient(
                "no human dialogues left for the run after the hold-out".into(),
            ));
        }
        let mut llm_cfg = cfg.llm.clone();
        if let Some(l) = llm_cfg.as_mut() {
            if cfg.budget.max_usd.is_some() {
                l.budget.max_usd = cfg.budget.max_usd;
            }
            if cfg.budget.max_tokens.is_some() {
                l.budget.max_tokens = cfg.budget.max_tokens;
            }
        }
        let client = llm_cfg.as_ref().map(LlmClient::from_config).transpose()?;
        let model: Option<Arc<dyn ChatModel>> =
            client.clone().map(|c| Arc::new(c) as Arc<dyn ChatModel>);
        let backend = match (cfg.episodes.backend, &model) {
            (EpisodeBackend::Scripted, _) | (EpisodeBackend::Auto, None) => Backend::Scripted,
            (_, Some(m)) => Backend::Llm {
                user: m.clone(),
                agent: m.clone(),
                user_temperature: Some(cfg.episodes.user_temperature),
                agent_temperature: None,
            },
            (EpisodeBackend::Llm, None) => {
                return Err(Error::config(
                    "episodes.backend",
                    "'llm' needs an [llm] section or --llm",
                ));
            }
        };
        let runner = Tau2Runner::new(domain.clone(), backend.clone(), cfg.episodes.max_turns);
        let val_runner = Tau2Runner::new(domain.clone(), backend, cfg.episodes.val_max_turns);
        let sandbox_cfg = SandboxConfig {
            timeout: std::time::Duration::from_secs_f64(cfg.sandbox.timeout_s),
            memory_bytes: cfg.sandbox.memory_mb << 20,
            max_llm_calls: cfg.sandbox.max_llm_calls,
            concurrency: if cfg.sandbox.concurrency == 0 {
                SandboxConfig::default().concurrency
            } else {
                cfg.sandbox.concurrency
            },
            ..SandboxConfig::default()
        };
        let sandbox = Arc::new(Sandbox::new(sandbox_cfg).await?);
        let generator = SandboxGenerator::new(sandbox, model);
        let seed_code = match &cfg.search.seed_program {
            Some(p) => crate::io::read_to_string(p)?,
            None if client.is_none() => OFFLINE_SEED.to_string(),
            None => LLM_SEED.to_string(),
        };
        Ok(RunContext {
            cfg,
            dir,
            domain,
            train,
            val,
            test,
            humans,
            humans_heldout,
            human_source,
            client,
            runner,
            val_runner,
            generator,
            seed_code,
        })
    }

    fn contexts(&self, ids: &[String]) -> Vec<TaskContext> {
        ids.iter()
            .filter_map(|id| self.domain.task(id).ok())
            .map(|t| TaskContext {
                task_id: t.id.clone(),
                context: task_context(&self.domain, t),
            })
            .collect()
    }

    fn mutation_mode(&self) -> MutationMode {
        match (self.cfg.mutation.mode, &self.client) {
            (MutationMode::Auto, None) => MutationMode::Structural,
            (MutationMode::Auto, Some(_)) => MutationMode::Llm,
            (m, _) => m,
        }
    }
}

/// Deterministically carve validation tasks out of the train tasks (at least one when there
/// are two or more; with a single task, it validates on itself).
pub fn split_val(train: &[String], fraction: f64, seed: u64) -> (Vec<String>, Vec<String>) {
    if train.len() < 2 || fraction <= 0.0 {
        return (train.to_vec(), train.to_vec());
    }
    let n_val = ((train.len() as f64 * fraction).round() as usize).clamp(1, train.len() - 1);
    let mut idx: Vec<usize> = (0..train.len()).collect();
    shuffle(&mut idx, seed);
    let val_set: std::collections::BTreeSet<usize> = idx[..n_val].iter().copied().collect();
    let (mut t, mut v) = (Vec::new(), Vec::new());
    for (i, id) in train.iter().enumerate() {
        if val_set.contains(&i) {
            v.push(id.clone())
        } else {
            t.push(id.clone())
        }
    }
    (t, v)
}

fn shuffle<T>(v: &mut [T], seed: u64) {
    for i in (1..v.len()).rev() {
        let j = (mix(seed, i as u64) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// Hold out a share of human task groups for evaluation (none when fewer than 3 groups).
pub fn holdout(humans: Vec<Dialogue>, fraction: f64, seed: u64) -> (Vec<Dialogue>, Vec<Dialogue>) {
    let mut groups: Vec<String> = humans.iter().map(|d| d.group_key().to_string()).collect();
    groups.sort();
    groups.dedup();
    if groups.len() < 3 || fraction <= 0.0 {
        return (humans, Vec::new());
    }
    shuffle(&mut groups, seed);
    let k = ((groups.len() as f64 * fraction).round() as usize).clamp(1, groups.len() - 2);
    let held: std::collections::BTreeSet<String> = groups[..k].iter().cloned().collect();
    humans
        .into_iter()
        .partition(|d| !held.contains(d.group_key()))
}

fn load_humans(cfg: &RunConfig) -> Result<(Vec<Dialogue>, Vec<String>)> {
    let opts = LoadOptions {
        domain: cfg.run.human_domain.clone(),
    };
    if cfg.run.human.is_empty() {
        let ds = traces::parse(DEMO_HUMANS, Path::new("fitness/demo/human.jsonl"), &opts)?;
        return Ok((
            ds,
            vec!["ppol demo traces (fitness/demo/human.jsonl, invented)".into()],
        ));
    }
    let ds = traces::load_many(&cfg.run.human, &opts)?;
    Ok((
        ds,
        cfg.run
            .human
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
    ))
}

fn axis_vocabulary() -> Vec<AxisVocab> {
    crate::simulate::episode::scripted::KNOWN_AXES
        .iter()
        .map(|(name, def)| AxisVocab {
            name: name.to_string(),
            definition: def.to_string(),
            on: format!("Clearly show this in how you write: {def}."),
            off: format!("Do not behave like this: {def}."),
        })
        .collect()
}

/// Operator weights of offline structural mutation: the scripted simulator realises axis
/// placements, not roleplay text, so edits that change which behaviours personas get (adding,
/// dropping axes, tuning numbers) are favoured over text edits, which it cannot see.
fn offline_ops() -> StructuralOptions {
    StructuralOptions {
        op_weights: [
            ("add-axis", 3.0),
            ("drop-axis", 1.5),
            ("edit-axis", 0.5),
            ("perturb", 4.0),
            ("fragment", 0.5),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        ..StructuralOptions::default()
    }
}

fn cost_summary(client: &Option<LlmClient>) -> runlog::CostSummary {
    match client {
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

/// (persona index, P(human)) of the scored personas, most human first.
fn rank_by_p_human(p_human: &[Option<f64>]) -> Vec<(usize, f64)> {
    let mut ranked: Vec<(usize, f64)> = p_human
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.map(|p| (i, p)))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranked
}

/// The computed critique attached to every program (and given to the reflection LLM).
fn computed_reflection(
    scorer: &Scorer,
    personas: &[Persona],
    p_human: &[Option<f64>],
    fps: &[Option<Fingerprint>],
    m: &EvalMetrics,
) -> String {
    let ranked = rank_by_p_human(p_human);
    let mut s = format!(
        "combined {:.4} = {:.2}·human_likeness {:.4} + {:.2}·coverage {:.4}; success rate {:.2}; {} episodes ({} failed).\n",
        m.combined, m.lambda_h, m.human_likeness, m.lambda_b, m.coverage, m.success_rate, m.n_episodes, m.n_failed_episodes
    );
    let describe = |label: &str, i: usize, p: f64| -> String {
        let persona = &personas[i];
        let gaps = fps[i]
            .map(|f| scorer.feature_gaps(&f, 4))
            .unwrap_or_default();
        format!(
            "{label}: persona '{}' (axes: {}) P(human) {:.3}; furthest from humans: {}\n",
            persona.persona_id,
            persona.active_axes().join(", "),
            p,
            gaps.iter()
                .map(|(n, z)| format!("{n} {z:+.1}σ"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    if let (Some(best), Some(worst)) = (ranked.first(), ranked.last()) {
        s.push_str(&describe("most human", best.0, best.1));
        s.push_str(&describe("least human", worst.0, worst.1));
    }
    s
}

/// The reflection prompt (the reference's §7.4 content, in our words).
fn reflection_request(
    computed: &str,
    personas: &[Persona],
    episodes: &[Episode],
    p_human: &[Option<f64>],
    context: &str,
) -> ChatRequest {
    let ranked = rank_by_p_human(p_human);
    let picks: Vec<usize> = ranked
        .iter()
        .take(2)
        .chain(ranked.iter().rev().take(2))
        .map(|(i, _)| *i)
        .collect();
    let mut samples = String::new();
    for i in picks {
        let e = &episodes[i];
        let text: String = personas[i].text.chars().take(1200).collect();
        let mut excerpt = String::new();
        for t in e
            .conversation
            .iter()
            .filter(|t| {
                matches!(
                    t.role,
                    crate::dialogue::Role::User | crate::dialogue::Role::Assistant
                ) && !t.content.is_empty()
            })
            .take(20)
        {
            let c: String = t.content.chars().take(250).collect();
            excerpt.push_str(&format!("{}: {}\n", t.role.as_str(), c));
        }
        let excerpt: String = excerpt.chars().take(2400).collect();
        samples.push_str(&format!(
            "\n### Sample (P(human) {:.3})\nPersona:\n{text}\nDialogue excerpt:\n{excerpt}\n",
            p_human[i].unwrap_or(0.0)
        ));
    }
    let ctx: String = context.chars().take(2200).collect();
    let prompt = format!(
        "You review a generator of persona policies for a simulated customer. Write a reflection of at most 300 words:\n\
         how the personas' behaviour led to these metrics; strengths; specific failures (drifting from the persona, \
         unnatural role-play where people would type briefly, too much cooperation with no friction or typos); why some \
         dialogues look human to the discriminator and others do not; which combinations of behaviours help or conflict; \
         which patterns to adopt and which to avoid. Do not mention sample numbers, labels or customer names.\n\n\
         ## Metrics and feature gaps\n{computed}\n## Task context\n{ctx}\n{samples}"
    );
    let mut r = ChatRequest::new(
        CallRole::Reflection,
        vec![crate::dialogue::Turn::new(
            crate::dialogue::Role::User,
            prompt,
        )],
    );
    r.temperature = Some(0.25);
    r.max_tokens = Some(2000);
    r
}

/// Create a run directory and run the evolution.
pub async fn evolve(cfg: RunConfig, control: RunControl) -> Result<RunSummary> {
    cfg.validate()?;
    let dir = match &cfg.run.out {
        Some(d) => d.clone(),
        None => {
            let stamp = crate::io::now_rfc3339()
                .replace([':', '-'], "")
                .replace('T', "-")
                .trim_end_matches('Z')
                .to_string();
            cfg.run.runs_dir.join(format!("{stamp}-{}", cfg.run.name))
        }
    };
    if dir.join("log.jsonl").exists() {
        return Err(Error::Run {
            path: dir,
            message: "already holds a run; use `ppol resume` or choose another --out".into(),
        });
    }
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating directory", &dir, e))?;
    crate::io::write_atomic(&dir.join("config.toml"), cfg.to_toml().as_bytes())?;
    let ctx = RunContext::new(cfg, dir).await?;
    run_loop(ctx, None, control).await
}

/// Continue a run from its last checkpoint (after any stop, kill -9 included).
pub async fn resume(
    dir: &Path,
    control: RunControl,
    extra_iterations: Option<u64>,
) -> Result<RunSummary> {
    let mut cfg = RunConfig::load(&dir.join("config.toml"))?;
    if let Some(n) = extra_iterations {
        cfg.search.iterations = n;
    }
    let ckpt_path = dir.join("checkpoint.json");
    let ckpt: Option<Checkpoint> = if ckpt_path.exists() {
        let text = crate::io::read_to_string(&ckpt_path)?;
        let c: Checkpoint = serde_json::from_str(&text).map_err(|e| {
            Error::parse(
                &ckpt_path,
                format!("line {}", e.line()),
                format!("bad checkpoint: {e}"),
            )
        })?;
        if c.format != CHECKPOINT_FORMAT {
            return Err(Error::parse(
                &ckpt_path,
                "format",
                format!("unsupported checkpoint format '{}'", c.format),
            ));
        }
        Some(c)
    } else {
        None
    };
    // The checkpoint is the commit point: drop log lines written after it.
    let log_path = dir.join("log.jsonl");
    if log_path.exists() {
        let keep = ckpt.as_ref().map_or(0, |c| c.log_seq);
        let recs = runlog::read(&log_path)?;
        if recs.last().map(|r| r.seq) != Some(keep) {
            let mut text = String::new();
            for r in recs
                .iter()
                .filter(|r| r.seq <= keep || (ckpt.is_none() && r.event.kind() == "run_started"))
            {
                text.push_str(&serde_json::to_string(r).expect("serialisable"));
                text.push('\n');
            }
            crate::io::write_atomic(&log_path, text.as_bytes())?;
        }
    }
    let ctx = RunContext::new(cfg, dir.to_path_buf()).await?;
    run_loop(ctx, ckpt, control).await
}

fn write_jsonl<T: Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    let mut s = String::new();
    for r in rows {
        s.push_str(&serde_json::to_string(r).expect("serialisable"));
        s.push('\n');
    }
    crate::io::write_atomic(path, s.as_bytes())
}

async fn baseline_and_discriminator(
    ctx: &RunContext,
    reference: &HumanReference,
) -> Result<(Discriminator, Vec<Episode>)> {
    let dir = &ctx.dir;
    let disc_path = dir.join("discriminator.json");
    let base_path = dir.join("baseline/episodes.jsonl");
    if disc_path.exists() && base_path.exists() {
        let d = Discriminator::load(&disc_path)?;
        d.check_feature_set(reference.feature_set.name())?;
        return Ok((
            d,
            crate::simulate::episode::record::load_episodes(&base_path)?,
        ));
    }
    let seed = derive_seed(ctx.cfg.search.seed, "baseline");
    let mut tasks: Vec<&String> = ctx.train.iter().chain(ctx.val.iter()).collect();
    tasks.dedup();
    let jobs: Vec<(&String, u32)> = tasks
        .iter()
        .flat_map(|t| (0..ctx.cfg.episodes.baseline_trials.max(1)).map(move |k| (*t, k)))
        .collect();
    let episodes: Vec<Episode> = futures::future::join_all(
        jobs.iter()
            .enumerate()
            .map(|(i, (t, k))| ctx.runner.run(t, None, *k, mix(seed, i as u64))),
    )
    .await;
    std::fs::create_dir_all(dir.join("baseline"))
        .map_err(|e| Error::io("creating directory", dir.join("baseline"), e))?;
    write_jsonl(&base_path, &episodes)?;
    let ok: Vec<Dialogue> = episodes
        .iter()
        .filter(|e| e.status == crate::simulate::episode::record::EpisodeStatus::Ok)
        .map(|e| e.to_dialogue())
        .collect();
    if ok.is_empty() {
        let why = episodes
            .iter()
            .find_map(|e| e.error.clone())
            .unwrap_or_default();
        return Err(Error::Insufficient(format!(
            "every baseline episode failed; first error: {why}"
        )));
    }
    let d = crate::fitness::score::train_discriminator(
        reference,
        &ok,
        &ctx.cfg.fitness.discriminator,
        ctx.cfg.fitness.folds,
    )?;
    d.save(&disc_path)?;
    Ok((d, episodes))
}

#[allow(clippy::too_many_lines)]
async fn run_loop(
    ctx: RunContext,
    ckpt: Option<Checkpoint>,
    control: RunControl,
) -> Result<RunSummary> {
    let started = Instant::now();
    let cfg = ctx.cfg.clone();
    let dir = ctx.dir.clone();
    let offline = cfg.offline();
    let say = |it: u64, best: Option<f64>, msg: String| {
        if let Some(p) = &control.progress {
            p(&Progress {
                iteration: it,
                iterations: cfg.search.iterations,
                best_combined: best,
                message: msg,
            });
        }
    };

    // Human reference (train humans only), discriminator, baseline.
    let reference =
        HumanReference::build(&ctx.humans, cfg.run.feature_set, ctx.human_source.clone())?;
    reference.save(&dir.join("human_ref.json"))?;
    write_jsonl(&dir.join("human_heldout.jsonl"), &ctx.humans_heldout)?;
    let mut log = RunLog::open(&dir.join("log.jsonl"))?;
    if ckpt.is_none() && log.next_seq() == 1 {
        let seeds = BTreeMap::from([
            ("root".to_string(), cfg.search.seed),
            (
                "archive".to_string(),
                derive_seed(cfg.search.seed, "archive"),
            ),
            (
                "baseline".to_string(),
                derive_seed(cfg.search.seed, "baseline"),
            ),
            (
                "val_split".to_string(),
                derive_seed(cfg.search.seed, "val_split"),
            ),
            (
                "human_holdout".to_string(),
                derive_seed(cfg.search.seed, "human_holdout"),
            ),
        ]);
        let models: BTreeMap<String, String> = CallRole::ALL
            .iter()
            .map(|r| {
                (
                    r.as_str().to_string(),
                    ctx.client
                        .as_ref()
                        .map_or("scripted (offline)".into(), |c| c.describe_role(*r)),
                )
            })
            .collect();
        let mut hashes: BTreeMap<String, String> = crate::evolve::mutation::template_hashes()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        hashes.insert(
            "harness.py".into(),
            crate::evolve::program::code_hash(crate::generate::sandbox::HARNESS_PY),
        );
        hashes.insert(
            "feature_banks".into(),
            crate::evolve::program::code_hash(cfg.run.feature_set.name()),
        );
        hashes.insert(
            "seed_program".into(),
            crate::evolve::program::code_hash(&ctx.seed_code),
        );
        log.append(Event::RunStarted {
            schema_version: runlog::SCHEMA_VERSION,
            ppol_version: env!("CARGO_PKG_VERSION").into(),
            name: cfg.run.name.clone(),
            config: serde_json::to_value(&cfg).unwrap_or(Value::Null),
            seeds,
            offline,
            models,
            hashes,
            feature_set: cfg.run.feature_set.name().into(),
            domain: ctx.domain.name.clone(),
            splits: BTreeMap::from([("train".into(), ctx.train.clone()), ("val".into(), ctx.val.clone()), ("test".into(), ctx.test.clone())]),
            human: json!({"sources": ctx.human_source, "n_run": ctx.humans.len(), "n_heldout": ctx.humans_heldout.len()}),
        })?;
    }
    let (discriminator, baseline) = baseline_and_discriminator(&ctx, &reference).await?;
    let scorer = Scorer::new(
        reference,
        discriminator,
        CoverageOptions {
            standardize: cfg.fitness.standardize,
            n_clusters: cfg.fitness.n_clusters,
            seed: 0,
        },
    )?;
    let schedule = cfg.fitness.schedule();
    if ckpt.is_none()
        && !runlog::read(&dir.join("log.jsonl"))?
            .iter()
            .any(|r| r.event.kind() == "discriminator_trained")
    {
        let train_set: std::collections::BTreeSet<&String> = ctx.train.iter().collect();
        let base_train: Vec<Episode> = baseline
            .iter()
            .filter(|e| train_set.contains(&e.task_id))
            .cloned()
            .collect();
        let m = score_episodes(
            &scorer,
            &base_train,
            Weights::new(schedule.lambda_h, schedule.lambda_b),
            0,
        );
        log.append(Event::DiscriminatorTrained {
            n_human: scorer.discriminator.training.n_human,
            n_baseline: scorer.discriminator.training.n_simulator,
            grouped_auc: scorer
                .discriminator
                .training
                .grouped_auc
                .as_ref()
                .map(|a| a.mean),
            top_features: scorer.discriminator.training.top_features.clone(),
            baseline: m,
        })?;
        say(
            0,
            None,
            format!(
                "discriminator grouped AUC {:?}",
                scorer
                    .discriminator
                    .training
                    .grouped_auc
                    .as_ref()
                    .map(|a| a.mean)
            ),
        );
    }

    // State.
    let (
        mut archive,
        mut iteration,
        mut pending,
        mut requeues,
        mut stagnation,
        mut parents,
        mut best_validation,
        prior_elapsed,
    ) = match ckpt {
        Some(c) => {
            log.append(Event::Resumed {
                from_iteration: c.iteration,
            })?;
            (
                Archive::from_json(&c.archive)?,
                c.iteration,
                c.pending,
                c.requeues,
                c.stagnation,
                c.parents,
                c.best_validation,
                c.elapsed_s,
            )
        }
        None => (
            Archive::new(cfg.archive.clone(), derive_seed(cfg.search.seed, "archive"))?,
            0,
            VecDeque::new(),
            0,
            0,
            BTreeMap::new(),
            None,
            0.0,
        ),
    };
    // Write the checkpoint (the commit point of an iteration) from the loop's state.
    macro_rules! checkpoint {
        () => {
            commit(
                &dir,
                &mut log,
                &archive,
                iteration,
                &pending,
                requeues,
                stagnation,
                &parents,
                &best_validation,
                prior_elapsed + started.elapsed().as_secs_f64(),
            )?
        };
    }
    let builder = PromptBuilder::new(PromptConfig {
        temperature: cfg.mutation.temperature,
        max_tokens: cfg.mutation.max_tokens,
        ..PromptConfig::for_archive(&cfg.archive)
    })?;
    let vocab = axis_vocabulary();
    let train_ctx = ctx.contexts(&ctx.train);
    let val_ctx = ctx.contexts(&ctx.val);
    let mut halted_in_this_process = 0u64;
    let reason: String = loop {
        // Stop conditions, checked between evaluations.
        if iteration >= cfg.search.iterations {
            break "iterations".into();
        }
        if control.stop.load(Ordering::SeqCst) {
            break "interrupted".into();
        }
        if let Some(why) = ctx.client.as_ref().and_then(|c| c.budget_exhausted()) {
            say(
                iteration,
                archive.best().and_then(|b| b.metric("combined")),
                format!("budget exhausted: {why}"),
            );
            break "budget".into();
        }
        // (the seed is always evaluated, so every run has a best program)
        if let (Some(max), true) = (cfg.search.max_wall_clock_s, iteration > 0) {
            if prior_elapsed + started.elapsed().as_secs_f64() >= max {
                break "wall_clock".into();
            }
        }
        if cfg.search.early_stop_evaluations > 0 && stagnation >= cfg.search.early_stop_evaluations
        {
            break "early_stop".into();
        }
        if control.halt_after == Some(halted_in_this_process) {
            return Ok(RunSummary {
                run_dir: dir.clone(),
                reason: "halted (test hook)".into(),
                iterations: iteration,
                best_program_id: None,
                best_metrics: None,
                best_validation: None,
                offline,
            });
        }
        let k = iteration + 1;
        let it_seed = mix(cfg.search.seed, k);
        let t0 = Instant::now();

        // 1. Make a candidate.
        let (candidate, island) = if let Some(p) = pending.pop_front() {
            let island = p.island;
            (p, island)
        } else if archive.is_empty() {
            let mut p = Program::seed(
                ProgramId::derive(k, &crate::evolve::program::code_hash(&ctx.seed_code)),
                ctx.seed_code.clone(),
            );
            p.iteration_found = k;
            (p, 0)
        } else {
            let island = archive.next_island();
            let parent = archive.sample_parent(island)?.program;
            let insps = archive.inspirations(&parent, island)?;
            let made = match ctx.mutation_mode() {
                MutationMode::Llm => {
                    llm_mutation(
                        &ctx, &builder, &archive, &parent, &insps, stagnation, it_seed,
                    )
                    .await
                }
                _ => {
                    let use_cross = insps.iter().any(|i| i.program.id != parent.id)
                        && (mix(it_seed, 7) % 10_000) as f64 / 10_000.0
                            < cfg.mutation.crossover_rate;
                    let code = parent.code.clone();
                    let other = insps
                        .iter()
                        .find(|i| i.program.id != parent.id)
                        .map(|i| (i.program.id.clone(), i.program.code.clone()));
                    let vocab = vocab.clone();
                    let res = tokio::task::spawn_blocking(move || match (use_cross, other) {
                        (true, Some((oid, ocode))) => crossover(&code, &ocode, it_seed)
                            .map(|(c, s)| (c, s, MutationKind::Crossover, Some(oid))),
                        _ => structural_mutate_with(&offline_ops(), &code, &vocab, it_seed)
                            .map(|(c, s)| (c, s, MutationKind::Structural, None)),
                    })
                    .await
                    .map_err(|e| Error::Sandbox(format!("mutation task failed: {e}")))?;
                    match res {
                        Ok((code, summary, kind, second)) => {
                            Ok((code, MutationInfo::new(kind, summary), second))
                        }
                        Err(msg) => Err(ChildFailure::new(FailureKind::Syntax, msg)),
                    }
                }
            };
            match made {
                Ok((code, info, second)) => {
                    let mut child = Program::child(
                        &parent,
                        ProgramId::derive(k, &crate::evolve::program::code_hash(&code)),
                        code,
                        k,
                        info,
                    );
                    child.second_parent_id = second;
                    child.island = island;
                    (child, island)
                }
                Err(failure) => {
                    let kind = failure.kind.as_str().to_string();
                    archive.record_failure(&parent.id, failure.clone());
                    log.append(Event::CandidateFailed {
                        iteration: k,
                        program_id: None,
                        parent_id: Some(parent.id.0.clone()),
                        mutation: ctx.mutation_mode_name(),
                        failure: FailureInfo {
                            stage: format!("mutation:{kind}"),
                            reason: failure.message.clone(),
                            stderr_tail: failure.stderr_tail.clone().unwrap_or_default(),
                        },
                        requeued: false,
                    })?;
                    iteration = k;
                    stagnation += 1;
                    checkpoint!();
                    halted_in_this_process += 1;
                    say(
                        iteration,
                        archive.best().and_then(|b| b.metric("combined")),
                        format!("iteration {k}: mutation failed ({kind})"),
                    );
                    continue;
                }
            }
        };

        // 2. Evaluate it on this iteration's batch.
        let plan = schedule.plan(k, train_ctx.len());
        let batch: Vec<TaskContext> = plan
            .task_indices
            .iter()
            .map(|&i| train_ctx[i].clone())
            .collect();
        let outcome = evaluate_candidate(
            &candidate.code,
            &batch,
            plan.n_personas,
            plan.weights(),
            &ctx.generator,
            &ctx.runner,
            &scorer,
            derive_seed(cfg.search.seed, "crn"),
        )
        .await;
        match outcome {
            CandidateOutcome::Infrastructure(why) => {
                requeues += 1;
                let requeue = requeues <= cfg.search.max_requeues;
                log.append(Event::CandidateFailed {
                    iteration: k,
                    program_id: Some(candidate.id.0.clone()),
                    parent_id: candidate.parent_id.as_ref().map(|p| p.0.clone()),
                    mutation: candidate.mutation.kind.as_str().into(),
                    failure: FailureInfo {
                        stage: "infrastructure".into(),
                        reason: why.clone(),
                        stderr_tail: String::new(),
                    },
                    requeued: requeue,
                })?;
                if !requeue {
                    break format!("infrastructure: {why}");
                }
                // not an iteration: the same candidate is evaluated again next
                pending.push_front(candidate);
                checkpoint!();
                tokio::time::sleep(std::time::Duration::from_millis(
                    500 * 2u64.pow(requeues.min(6)),
                ))
                .await;
                continue;
            }
            CandidateOutcome::Failed(f) => {
                if let Some(pid) = &candidate.parent_id {
                    let mut cf = ChildFailure::new(FailureKind::Sandbox, f.reason.clone());
                    cf.stage = Some(f.stage.clone());
                    cf.stderr_tail = (!f.stderr_tail.is_empty()).then(|| f.stderr_tail.clone());
                    cf.angle = candidate.mutation.angle.clone();
                    archive.record_failure(pid, cf);
                }
                log.append(Event::CandidateFailed {
                    iteration: k,
                    program_id: Some(candidate.id.0.clone()),
                    parent_id: candidate.parent_id.as_ref().map(|p| p.0.clone()),
                    mutation: candidate.mutation.kind.as_str().into(),
                    failure: f.clone(),
                    requeued: false,
                })?;
                if archive.is_empty() {
                    return Err(Error::Run {
                        path: dir.clone(),
                        message: format!(
                            "the seed program failed ({}): {}\n{}",
                            f.stage, f.reason, f.stderr_tail
                        ),
                    });
                }
                requeues = 0;
                iteration = k;
                stagnation += 1;
                checkpoint!();
                halted_in_this_process += 1;
                say(
                    iteration,
                    archive.best().and_then(|b| b.metric("combined")),
                    format!("iteration {k}: candidate failed ({})", f.stage),
                );
            }
            CandidateOutcome::Scored {
                mut metrics,
                personas,
                persona_records,
                episodes,
                p_human,
                fingerprints,
            } => {
                requeues = 0;
                rank(
                    &mut metrics,
                    cfg.fitness.select_by,
                    Weights::new(cfg.fitness.lambda_h, cfg.fitness.lambda_b),
                );
                let computed = computed_reflection(
                    &scorer,
                    &persona_records,
                    &p_human,
                    &fingerprints,
                    &metrics,
                );
                let reflection = match (&ctx.client, cfg.mutation.reflection) {
                    (Some(c), true) => {
                        let context = batch.first().map(|t| t.context.as_str()).unwrap_or("");
                        let req = reflection_request(
                            &computed,
                            &persona_records,
                            &episodes,
                            &p_human,
                            context,
                        );
                        match c.chat(&req).await {
                            Ok(r) if !r.message.content.trim().is_empty() => {
                                format!(
                                    "{computed}\n{}",
                                    r.message.content.chars().take(10_000).collect::<String>()
                                )
                            }
                            _ => computed.clone(),
                        }
                    }
                    _ => computed.clone(),
                };
                let mut program = candidate;
                program.metrics = program_metrics(&metrics);
                program.reflection = Some(reflection.clone());
                parents.insert(
                    program.id.0.clone(),
                    program.parent_id.as_ref().map(|p| p.0.clone()),
                );
                let added = archive.add(program.clone(), island)?;
                stagnation = if added.new_elite { 0 } else { stagnation + 1 };
                log.append(Event::CandidateEvaluated {
                    iteration: k,
                    program_id: program.id.0.clone(),
                    parent_id: program.parent_id.as_ref().map(|p| p.0.clone()),
                    second_parent_id: program.second_parent_id.as_ref().map(|p| p.0.clone()),
                    island,
                    mutation: program.mutation.kind.as_str().into(),
                    mutation_summary: program.mutation.summary.clone(),
                    epoch: plan.epoch,
                    batch_in_epoch: plan.batch_in_epoch,
                    tasks: batch.iter().map(|t| t.task_id.clone()).collect(),
                    metrics: metrics.clone(),
                    new_elite: added.new_elite,
                    new_best: added.new_best,
                    personas,
                    reflection,
                    code_hash: program.code_hash.clone(),
                    code: program.code.clone(),
                    seconds: t0.elapsed().as_secs_f64(),
                    cost: cost_summary(&ctx.client),
                })?;
                if added.new_best {
                    let vo = evaluate_candidate(
                        &program.code,
                        &val_ctx,
                        schedule.n_personas,
                        Weights::new(schedule.lambda_h, schedule.lambda_b),
                        &ctx.generator,
                        &ctx.val_runner,
                        &scorer,
                        derive_seed(cfg.search.seed, "validation"),
                    )
                    .await;
                    if let CandidateOutcome::Scored {
                        metrics: vm,
                        persona_records,
                        episodes,
                        ..
                    } = vo
                    {
                        log.append(Event::Validation {
                            iteration: k,
                            program_id: program.id.0.clone(),
                            metrics: vm.clone(),
                        })?;
                        best_validation = Some((program.id.0.clone(), vm.clone()));
                        write_best(
                            &dir,
                            &program,
                            &metrics,
                            &vm,
                            &parents,
                            &persona_records,
                            &episodes,
                        )?;
                    } else {
                        write_best(
                            &dir,
                            &program,
                            &metrics,
                            &EvalMetrics::default(),
                            &parents,
                            &[],
                            &[],
                        )?;
                    }
                }
                iteration = k;
                if cfg.archive.num_islands > 0 {
                    archive.maybe_migrate(k / cfg.archive.num_islands as u64);
                }
                checkpoint!();
                halted_in_this_process += 1;
                say(
                    iteration,
                    archive.best().and_then(|b| b.metric("combined")),
                    format!(
                        "iteration {k}: combined {:.3} (HL {:.3}, cov {:.3}){}",
                        metrics.combined,
                        metrics.human_likeness,
                        metrics.coverage,
                        if added.new_best { " new best" } else { "" }
                    ),
                );
            }
        }
    };
    let best = archive.best().cloned();
    let best_metrics = best.as_ref().and_then(|b| {
        runlog::read(&dir.join("log.jsonl"))
            .ok()?
            .into_iter()
            .rev()
            .find_map(|r| match r.event {
                Event::CandidateEvaluated {
                    program_id,
                    metrics,
                    ..
                } if program_id == b.id.0 => Some(metrics),
                _ => None,
            })
    });
    log.append(Event::RunStopped {
        reason: reason.clone(),
        iterations: iteration,
        best_program_id: best.as_ref().map(|b| b.id.0.clone()),
        best_metrics: best_metrics.clone(),
        cost: cost_summary(&ctx.client),
    })?;
    Ok(RunSummary {
        run_dir: dir,
        reason,
        iterations: iteration,
        best_program_id: best.map(|b| b.id.0),
        best_metrics,
        best_validation: best_validation.map(|(_, m)| m),
        offline,
    })
}

impl RunContext {
    fn mutation_mode_name(&self) -> String {
        match self.mutation_mode() {
            MutationMode::Llm => "diff".into(),
            _ => "structural".into(),
        }
    }
}

async fn llm_mutation(
    ctx: &RunContext,
    builder: &PromptBuilder,
    archive: &Archive,
    parent: &Program,
    insps: &[crate::evolve::archive::Inspiration],
    stagnation: u64,
    seed: u64,
) -> std::result::Result<(String, MutationInfo, Option<ProgramId>), ChildFailure> {
    let client = ctx.client.as_ref().expect("LLM mutation needs a client");
    let previous: Vec<Program> = archive
        .recent_children(&parent.id, 4)
        .into_iter()
        .cloned()
        .collect();
    let failures = archive.recent_failures(&parent.id);
    let mctx = MutationContext {
        parent,
        inspirations: insps,
        previous_attempts: &previous,
        failures: &failures,
        stagnation,
    };
    let rewrite =
        archive.consecutive_failures(&parent.id) >= ctx.cfg.mutation.rewrite_after_failures;
    let prompt = if rewrite {
        builder.rewrite_request(&mctx, seed)
    } else {
        builder.diff_request(&mctx, seed)
    }
    .map_err(|e| ChildFailure::new(FailureKind::NoProgram, format!("prompt: {e}")))?;
    let angle = prompt.angle.id.to_string();
    let fail = |kind: FailureKind, msg: String| {
        let mut f = ChildFailure::new(kind, msg);
        f.angle = Some(angle.clone());
        f
    };
    let resp = client
        .chat(&prompt.request)
        .await
        .map_err(|e| fail(FailureKind::Evaluation, format!("mutator call failed: {e}")))?;
    let text = resp.message.content;
    let code = if rewrite {
        extract_full_program(&text).map_err(|e| {
            let mut f = crate::evolve::mutation::failure_from_diff_error(&e);
            f.angle = Some(angle.clone());
            f
        })?
    } else {
        apply_diff(&parent.code, &text)
            .map_err(|e| {
                let mut f = crate::evolve::mutation::failure_from_diff_error(&e);
                f.angle = Some(angle.clone());
                f
            })?
            .code
    };
    match check_python_syntax(&code) {
        Ok(Ok(())) => {}
        Ok(Err(msg)) => return Err(fail(FailureKind::Syntax, msg)),
        Err(e) => {
            return Err(fail(
                FailureKind::Syntax,
                format!("could not check syntax: {e}"),
            ))
        }
    }
    let summary = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("<<<<<<<") && !l.starts_with("```"))
        .unwrap_or("")
        .chars()
        .take(200)
        .collect::<String>();
    let mut info = MutationInfo::new(
        if rewrite {
            MutationKind::Rewrite
        } else {
            MutationKind::Diff
        },
        summary,
    );
    info.angle = Some(angle);
    Ok((code, info, None))
}

#[allow(clippy::too_many_arguments)]
fn commit(
    dir: &Path,
    log: &mut RunLog,
    archive: &Archive,
    iteration: u64,
    pending: &VecDeque<Program>,
    requeues: u32,
    stagnation: u64,
    parents: &BTreeMap<String, Option<String>>,
    best_validation: &Option<(String, EvalMetrics)>,
    elapsed_s: f64,
) -> Result<()> {
    let rec = log.append(Event::Checkpoint { iteration })?;
    let c = Checkpoint {
        format: CHECKPOINT_FORMAT.into(),
        iteration,
        log_seq: rec.seq,
        archive: archive.to_json(),
        pending: pending.clone(),
        requeues,
        stagnation,
        parents: parents.clone(),
        best_validation: best_validation.clone(),
        elapsed_s,
    };
    crate::io::write_atomic(
        &dir.join("checkpoint.json"),
        serde_json::to_string(&c).expect("serialisable").as_bytes(),
    )
}

fn lineage(parents: &BTreeMap<String, Option<String>>, id: &str) -> Vec<String> {
    let mut chain = vec![id.to_string()];
    let mut cur = id.to_string();
    while let Some(Some(p)) = parents.get(&cur) {
        if chain.contains(p) {
            break;
        }
        chain.push(p.clone());
        cur = p.clone();
    }
    chain.reverse();
    chain
}

fn write_best(
    dir: &Path,
    program: &Program,
    train: &EvalMetrics,
    val: &EvalMetrics,
    parents: &BTreeMap<String, Option<String>>,
    personas: &[Persona],
    episodes: &[Episode],
) -> Result<()> {
    let best = dir.join("best");
    std::fs::create_dir_all(&best).map_err(|e| Error::io("creating directory", &best, e))?;
    crate::io::write_atomic(&best.join("program.py"), program.code.as_bytes())?;
    let info = json!({
        "program_id": program.id.0,
        "metrics": train,
        "validation": val,
        "lineage": lineage(parents, &program.id.0),
        "mutation": program.mutation,
        "iteration_found": program.iteration_found,
    });
    crate::io::write_atomic(
        &best.join("program.json"),
        serde_json::to_string_pretty(&info)
            .expect("json")
            .as_bytes(),
    )?;
    write_jsonl(&best.join("personas.jsonl"), personas)?;
    write_jsonl(&best.join("episodes.jsonl"), episodes)
}

/// `ppol eval RUN_DIR`: the Table-1 comparison on held-out tasks.
pub async fn evaluate_run(
    dir: &Path,
    split: Option<&str>,
    human: &[PathBuf],
    n_personas: Option<usize>,
) -> Result<runlog::EvalTable> {
    let cfg = RunConfig::load(&dir.join("config.toml"))?;
    let split = split.unwrap_or(&cfg.run.test_split).to_string();
    let best_code =
        crate::io::read_to_string(&dir.join("best/program.py")).map_err(|_| Error::Run {
            path: dir.into(),
            message: "no best/program.py yet: the run has not evaluated a program".into(),
        })?;
    let mut eval_cfg = cfg.clone();
    eval_cfg.run.test_split = split.clone();
    let ctx = RunContext::new(eval_cfg, dir.to_path_buf()).await?;
    let reference = HumanReference::load(&dir.join("human_ref.json"))?;
    let discriminator = Discriminator::load(&dir.join("discriminator.json"))?;
    let scorer = Scorer::new(
        reference,
        discriminator,
        CoverageOptions {
            standardize: cfg.fitness.standardize,
            n_clusters: cfg.fitness.n_clusters,
            seed: 0,
        },
    )?;
    let (humans, human_source) = if human.is_empty() {
        let held = dir.join("human_heldout.jsonl");
        let ds = if held.exists()
            && std::fs::metadata(&held)
                .map(|m| m.len() > 0)
                .unwrap_or(false)
        {
            traces::load(&held, &LoadOptions::default())?
        } else {
            Vec::new()
        };
        (
            ds,
            vec![format!("{} (held out by the run)", held.display())],
        )
    } else {
        (
            traces::load_many(
                human,
                &LoadOptions {
                    domain: cfg.run.human_domain.clone(),
                },
            )?,
            human.iter().map(|p| p.display().to_string()).collect(),
        )
    };
    let tasks = ctx.contexts(
        &ctx.domain
            .select_tasks(&split)?
            .iter()
            .map(|t| t.id.clone())
            .collect::<Vec<_>>(),
    );
    if tasks.is_empty() {
        return Err(Error::config(
            "--split",
            format!("split '{split}' has no tasks"),
        ));
    }
    let seed_code = ctx.seed_code.clone();
    let direct = if ctx.client.is_some() {
        Condition::Program(DIRECT_SEED)
    } else {
        Condition::Skipped("the direct-prompt baseline needs an LLM endpoint (offline run)".into())
    };
    let conditions = [
        ("direct", direct),
        ("seed", Condition::Program(&seed_code)),
        ("evolved", Condition::Program(&best_code)),
    ];
    let n = n_personas.unwrap_or(cfg.fitness.n_personas);
    let table = compare(
        &split,
        &tasks,
        n,
        &humans,
        human_source,
        &conditions,
        &ctx.generator,
        &ctx.val_runner,
        &scorer,
        derive_seed(cfg.search.seed, "eval"),
    )
    .await;
    crate::io::write_atomic(
        &dir.join(format!("eval-{split}.json")),
        serde_json::to_string_pretty(&table)
            .expect("json")
            .as_bytes(),
    )?;
    Ok(table)
}

/// The evaluation table rendered as text (for the CLI).
pub fn table_text(t: &runlog::EvalTable) -> String {
    render_table(t)
}
