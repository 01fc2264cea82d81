//! What a run is made of, built once from its configuration: the world and its task splits,
//! the human dialogues (with a held-out share for `ppol eval`), the LLM client, the episode
//! runners and the sandboxed persona generator. Building it plays no episode and calls no LLM;
//! the baseline episodes and the discriminator trained on them come from
//! [`RunContext::baseline_and_discriminator`], which reuses them from the run directory when
//! they are already there.

use std::path::Path;
use std::sync::Arc;

use crate::dialogue::Dialogue;
use crate::evolve::config::RunConfig;
use crate::evolve::evaluate::{Play, SandboxGenerator, TaskContext};
use crate::evolve::rundir::ledger::{Ledger, Metered};
use crate::evolve::rundir::RunDir;
use crate::fitness::discriminator::Discriminator;
use crate::fitness::reference::HumanReference;
use crate::fitness::settings::Objective;
use crate::fitness::traces::{self, LoadOptions};
use crate::generate::sandbox::Sandbox;
use crate::llm::client::LlmClient;
use crate::llm::ChatModel;
use crate::rng::{derive_seed, mix};
use crate::shipped::{DEMO_HUMANS, LLM_SEED, OFFLINE_POPULATION_SEED, OFFLINE_SEED};
use crate::simulate::batch::{self, Batch, Job, Player, SinkPaths, Stopped};
use crate::simulate::episode::record::{Episode, EpisodeStatus};
use crate::simulate::episode::runner::Backend;
use crate::simulate::episode::EpisodeRunner;
use crate::simulate::settings::EpisodeBackend;
use crate::simulate::world::{World, WorldDeps};
use crate::{Error, Result};

/// Everything a run needs, built from its configuration.
pub struct RunContext {
    /// The configuration.
    pub cfg: RunConfig,
    /// The run directory.
    pub dir: RunDir,
    /// The world episodes are played in.
    pub world: Arc<dyn World>,
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
    /// The LLM client (None offline); its accounting holds the run's totals, earlier
    /// processes included, when the run directory is open for writing.
    pub client: Option<LlmClient>,
    /// The run's cost ledger (with a client and a locked run directory).
    pub ledger: Option<Arc<Ledger>>,
    /// Training episodes.
    pub runner: Arc<dyn EpisodeRunner>,
    /// Validation / eval episodes.
    pub val_runner: Arc<dyn EpisodeRunner>,
    /// The world's backend and domain, as its episodes record them.
    pub backend: String,
    /// See `backend`.
    pub domain: String,
    /// Why the budget is spent, or None (always None offline).
    budget: Box<dyn Fn() -> Option<String> + Send + Sync>,
    /// Generation.
    pub generator: SandboxGenerator,
    /// The seed program.
    pub seed_code: String,
}

impl RunContext {
    /// Build the context (no episodes are played here).
    pub async fn new(cfg: RunConfig, dir: RunDir) -> Result<Self> {
        let spec = cfg.world_spec();
        let (humans_all, human_source) = load_humans(&cfg)?;
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
        // The writer of the run carries the run's spending over and records its own; a reader
        // (`ppol eval`) does neither.
        let ledger = match (&client, dir.is_locked()) {
            (Some(c), true) => Some(Arc::new(Ledger::open(&dir, c)?)),
            _ => None,
        };
        let model = metered(&client, &ledger);
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
        let world = crate::simulate::world::open(
            &spec,
            WorldDeps {
                settings: cfg.world.clone(),
                tau2_data: cfg.run.tau2_data.clone(),
                backend,
                model: model.clone(),
                max_tool_rounds: cfg.episodes.max_tool_rounds,
                seed: cfg.search.seed,
            },
        )
        .await?;
        let train_all = world.select(&cfg.run.train_split)?;
        let test = world.select(&cfg.run.test_split).unwrap_or_default();
        if train_all.is_empty() {
            return Err(Error::config(
                "run.train_split",
                format!(
                    "split '{}' of world {} has no tasks",
                    cfg.run.train_split,
                    world.label()
                ),
            ));
        }
        let (train, val) = split_val(
            &train_all,
            cfg.run.val_fraction,
            cfg.val_task_cap(),
            derive_seed(cfg.search.seed, "val_split"),
        );
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
        let runner = world.runner(cfg.episodes.max_turns);
        let val_runner = world.runner(cfg.episodes.val_max_turns);
        let capacity = llm_cfg
            .as_ref()
            .filter(|_| model.is_some())
            .map(|l| l.request_capacity(crate::llm::CallRole::Generator));
        let sandbox_cfg = cfg.sandbox.sandbox_config(capacity)?;
        let sandbox = Arc::new(Sandbox::new(sandbox_cfg).await?);
        let generator = SandboxGenerator::new(sandbox, model);
        let (backend, domain) = (world.backend(), world.domain());
        let budget: Box<dyn Fn() -> Option<String> + Send + Sync> = match client.clone() {
            Some(c) => Box::new(move || c.budget_exhausted()),
            None => Box::new(|| None),
        };
        let seed_code = match &cfg.search.seed_program {
            Some(p) => crate::io::read_to_string(p)?,
            // offline, the population objective starts from a population of user kinds in
            // proportions: the search space where its proportions can be edited
            None if client.is_none() => match cfg.fitness.objective {
                Objective::Population => OFFLINE_POPULATION_SEED.to_string(),
                Objective::Paper => OFFLINE_SEED.to_string(),
            },
            None => LLM_SEED.to_string(),
        };
        Ok(RunContext {
            cfg,
            dir,
            world,
            train,
            val,
            test,
            humans,
            humans_heldout,
            human_source,
            client,
            ledger,
            runner,
            val_runner,
            backend,
            domain,
            budget,
            generator,
            seed_code,
        })
    }

    /// How the run's candidates are played: train episodes (`max_turns`) or validation and
    /// eval episodes (`val_max_turns`), through the batch layer with `[episodes]
    /// concurrency` and the run's budget, reported to `progress` under `label`.
    pub fn play<'a>(
        &'a self,
        validation: bool,
        label: &'a str,
        progress: Option<&'a (dyn Fn(&batch::Progress) + Sync)>,
    ) -> Play<'a> {
        let runner = if validation {
            &self.val_runner
        } else {
            &self.runner
        };
        Play {
            player: Player {
                runner: runner.as_ref(),
                backend: &self.backend,
                domain: &self.domain,
            },
            concurrency: self.cfg.episodes.concurrency,
            budget: Some(&*self.budget),
            progress,
            label,
        }
    }

    /// The generator's view of tasks (ids the world does not know are skipped).
    pub fn contexts(&self, ids: &[String]) -> Vec<TaskContext> {
        ids.iter()
            .filter_map(|id| {
                self.world.context(id).map(|context| TaskContext {
                    task_id: id.clone(),
                    context,
                })
            })
            .collect()
    }

    /// The LLM client as the model programs, the mutator and reflection call (None offline).
    pub fn model(&self) -> Option<Arc<dyn ChatModel>> {
        metered(&self.client, &self.ledger)
    }

    /// The discriminator of the run and the baseline episodes it was trained against. A
    /// complete baseline (`baseline/episodes.jsonl`) and discriminator are read back; otherwise
    /// the persona-free baseline is played on the train and validation tasks, each episode
    /// appended to `baseline/partial.jsonl` (and synced) as it finishes, so an earlier process
    /// killed mid-baseline leaves its episodes there and they are reused, not played (and
    /// paid for) again. A torn last line is dropped. Once all are played they are written in
    /// job order to `baseline/episodes.jsonl` and the discriminator is trained and saved.
    ///
    /// `pause_after` is a test hook: play only that many more episodes, save them, then wait
    /// to be killed ([`pause_for_kill`]).
    ///
    /// The baseline stops early when `stop` is set (Ctrl-C, Python's `stop()`) or at
    /// `deadline` (`search.max_wall_clock_s`): it returns [`Error::Cancelled`] saying how many
    /// episodes are kept for the resume.
    pub async fn baseline_and_discriminator(
        &self,
        reference: &HumanReference,
        pause_after: Option<usize>,
        stop: &std::sync::atomic::AtomicBool,
        deadline: Option<std::time::Instant>,
        progress: &(dyn Fn(&batch::Progress) + Sync),
    ) -> Result<(Discriminator, Vec<Episode>)> {
        let disc_path = self.dir.join("discriminator.json");
        let base_path = self.dir.join("baseline/episodes.jsonl");
        let episodes = if base_path.exists() {
            let episodes = crate::simulate::episode::record::load_episodes(&base_path)?;
            if disc_path.exists() {
                let d = Discriminator::load(&disc_path)?;
                d.check_feature_set(reference.feature_set.name())?;
                return Ok((d, episodes));
            }
            episodes
        } else {
            self.play_baseline(pause_after, stop, deadline, progress)
                .await?
        };
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

    /// Play the baseline episodes not yet in `baseline/partial.jsonl` through the batch layer
    /// (synced as each finishes); returns all of them in job order, written to
    /// `baseline/episodes.jsonl`.
    async fn play_baseline(
        &self,
        pause_after: Option<usize>,
        stop: &std::sync::atomic::AtomicBool,
        deadline: Option<std::time::Instant>,
        progress: &(dyn Fn(&batch::Progress) + Sync),
    ) -> Result<Vec<Episode>> {
        let jobs = self.baseline_jobs();
        let played = Batch::new("baseline", &jobs)
            .concurrency(self.cfg.episodes.concurrency)
            .stop(stop)
            .deadline(deadline)
            .budget(&*self.budget)
            .progress(progress)
            .limit(pause_after)
            .sink(SinkPaths::at(
                self.dir.join("baseline/partial.jsonl"),
                Some(self.dir.join("baseline/episodes.jsonl")),
                true,
            ))
            .play(self.play(false, "baseline", None).player)
            .await?;
        if played.reused > 0 {
            tracing::warn!(
                "reusing {} of {} baseline episodes saved by an earlier process of this run \
                 ({}); played the other {}",
                played.reused,
                jobs.len(),
                self.dir.join("baseline/partial.jsonl").display(),
                jobs.len() - played.reused
            );
        }
        if played.stopped == Some(Stopped::Limit) {
            if let Some(n) = pause_after {
                pause_for_kill(&format!("baseline:{n}")).await;
            }
        }
        played.complete_or_cancelled(
            "the baseline",
            "search.max_wall_clock_s",
            &format!(
                "; `ppol resume {}` plays only the rest",
                self.dir.path().display()
            ),
        )
    }

    /// The baseline's jobs: `baseline_trials` persona-free episodes of every train and
    /// validation task — of at most `episodes.baseline_max_tasks` of them, a seeded sample
    /// when there are more — each seeded by its place in that plan.
    pub fn baseline_jobs(&self) -> Vec<Job> {
        let seed = derive_seed(self.cfg.search.seed, "baseline");
        let mut tasks: Vec<&String> = self.train.iter().chain(self.val.iter()).collect();
        tasks.dedup();
        let tasks = sample_in_order(
            tasks,
            self.cfg.episodes.baseline_task_cap(),
            derive_seed(self.cfg.search.seed, "baseline_tasks"),
        );
        let trials = self.cfg.episodes.baseline_trials.max(1);
        tasks
            .iter()
            .flat_map(|t| (0..trials).map(move |k| (*t, k)))
            .enumerate()
            .map(|(i, (t, k))| Job {
                task_id: t.clone(),
                persona: None,
                trial: k,
                seed: mix(seed, i as u64),
            })
            .collect()
    }
}

/// At most `max` of `items`, a seeded sample kept in their order (all of them when there are
/// no more than `max`).
pub fn sample_in_order<T>(items: Vec<T>, max: usize, seed: u64) -> Vec<T> {
    if items.len() <= max {
        return items;
    }
    let mut idx: Vec<usize> = (0..items.len()).collect();
    shuffle(&mut idx, seed);
    let keep: std::collections::BTreeSet<usize> = idx[..max].iter().copied().collect();
    items
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep.contains(i))
        .map(|(_, x)| x)
        .collect()
}

/// Test hook: say where the run stopped on stderr, then wait (forever) to be killed.
pub async fn pause_for_kill(point: &str) -> ! {
    eprintln!("ppol: paused at {point} (test hook): waiting to be killed");
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    }
}

/// The client as a model, recording every call to the ledger when there is one.
fn metered(client: &Option<LlmClient>, ledger: &Option<Arc<Ledger>>) -> Option<Arc<dyn ChatModel>> {
    client.clone().map(|c| match ledger {
        Some(l) => Arc::new(Metered::new(c, l.clone())) as Arc<dyn ChatModel>,
        None => Arc::new(c) as Arc<dyn ChatModel>,
    })
}

/// Deterministically carve validation tasks out of the train tasks (at least one when there
/// are two or more, at most `max`; with a single task, it validates on itself).
pub fn split_val(
    train: &[String],
    fraction: f64,
    max: usize,
    seed: u64,
) -> (Vec<String>, Vec<String>) {
    if train.len() < 2 || fraction <= 0.0 {
        return (train.to_vec(), train.to_vec());
    }
    let n_val = ((train.len() as f64 * fraction).round() as usize)
        .clamp(1, train.len() - 1)
        .min(max.max(1));
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
