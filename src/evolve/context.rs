//! What a run is made of, built once from its configuration: the domain and its task splits,
//! the human dialogues (with a held-out share for `ppol eval`), the LLM client, the episode
//! runners and the sandboxed persona generator. Building it plays no episode and calls no LLM;
//! the baseline episodes and the discriminator trained on them come from
//! [`RunContext::baseline_and_discriminator`], which reuses them from the run directory when
//! they are already there.

use std::path::Path;
use std::sync::Arc;

use crate::dialogue::Dialogue;
use crate::evolve::config::{EpisodeBackend, RunConfig};
use crate::evolve::evaluate::{SandboxGenerator, TaskContext};
use crate::evolve::rundir::RunDir;
use crate::fitness::discriminator::Discriminator;
use crate::fitness::reference::HumanReference;
use crate::fitness::traces::{self, LoadOptions};
use crate::generate::sandbox::{Sandbox, SandboxConfig};
use crate::llm::client::LlmClient;
use crate::llm::ChatModel;
use crate::seed::{derive_seed, mix};
use crate::shipped::{DEMO_HUMANS, LLM_SEED, OFFLINE_SEED};
use crate::simulate::episode::record::{Episode, EpisodeStatus};
use crate::simulate::episode::runner::{load_domain, task_context, Backend, Tau2Runner};
use crate::simulate::episode::EpisodeRunner;
use crate::simulate::tau2::Domain;
use crate::{Error, Result};

/// Everything a run needs, built from its configuration.
pub struct RunContext {
    /// The configuration.
    pub cfg: RunConfig,
    /// The run directory.
    pub dir: RunDir,
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
    pub async fn new(cfg: RunConfig, dir: RunDir) -> Result<Self> {
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
        let runner = Tau2Runner::new(domain.clone(), backend.clone(), cfg.episodes.max_turns)
            .with_max_tool_rounds(cfg.episodes.max_tool_rounds);
        let val_runner = Tau2Runner::new(domain.clone(), backend, cfg.episodes.val_max_turns)
            .with_max_tool_rounds(cfg.episodes.max_tool_rounds);
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

    /// The generator's view of tasks (ids the domain does not know are skipped).
    pub fn contexts(&self, ids: &[String]) -> Vec<TaskContext> {
        ids.iter()
            .filter_map(|id| self.domain.task(id).ok())
            .map(|t| TaskContext {
                task_id: t.id.clone(),
                context: task_context(&self.domain, t),
            })
            .collect()
    }

    /// The LLM client as the model programs, the mutator and reflection call (None offline).
    pub fn model(&self) -> Option<Arc<dyn ChatModel>> {
        self.client
            .clone()
            .map(|c| Arc::new(c) as Arc<dyn ChatModel>)
    }

    /// The discriminator of the run and the baseline episodes it was trained against: read
    /// from the run directory when both are there (a resumed run), else the persona-free
    /// baseline is played on the train and validation tasks, saved, and the discriminator is
    /// trained (human reference vs baseline) and saved.
    pub async fn baseline_and_discriminator(
        &self,
        reference: &HumanReference,
    ) -> Result<(Discriminator, Vec<Episode>)> {
        let disc_path = self.dir.join("discriminator.json");
        let base_path = self.dir.join("baseline/episodes.jsonl");
        if disc_path.exists() && base_path.exists() {
            let d = Discriminator::load(&disc_path)?;
            d.check_feature_set(reference.feature_set.name())?;
            return Ok((
                d,
                crate::simulate::episode::record::load_episodes(&base_path)?,
            ));
        }
        let seed = derive_seed(self.cfg.search.seed, "baseline");
        let mut tasks: Vec<&String> = self.train.iter().chain(self.val.iter()).collect();
        tasks.dedup();
        let jobs: Vec<(&String, u32)> = tasks
            .iter()
            .flat_map(|t| (0..self.cfg.episodes.baseline_trials.max(1)).map(move |k| (*t, k)))
            .collect();
        let episodes: Vec<Episode> = futures::future::join_all(
            jobs.iter()
                .enumerate()
                .map(|(i, (t, k))| self.runner.run(t, None, *k, mix(seed, i as u64))),
        )
        .await;
        self.dir.write_jsonl("baseline/episodes.jsonl", &episodes)?;
        let ok: Vec<Dialogue> = episodes
            .iter()
            .filter(|e| e.status == EpisodeStatus::Ok)
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
            &self.cfg.fitness.discriminator,
            self.cfg.fitness.folds,
        )?;
        d.save(&disc_path)?;
        Ok((d, episodes))
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
