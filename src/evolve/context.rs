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
use crate::evolve::evaluate::{SandboxGenerator, TaskContext};
use crate::evolve::rundir::ledger::{Ledger, Metered};
use crate::evolve::rundir::RunDir;
use crate::fitness::discriminator::Discriminator;
use crate::fitness::reference::HumanReference;
use crate::fitness::traces::{self, LoadOptions};
use crate::generate::sandbox::Sandbox;
use crate::llm::client::LlmClient;
use crate::llm::ChatModel;
use crate::rng::{derive_seed, mix};
use crate::shipped::{DEMO_HUMANS, LLM_SEED, OFFLINE_SEED};
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
    /// Generation.
    pub generator: SandboxGenerator,
    /// The seed program.
    pub seed_code: String,
}

impl RunContext {
    /// Build the context (no episodes are played here).
    pub async fn new(cfg: RunConfig, dir: RunDir) -> Result<Self> {
        let spec = cfg.world_spec()?;
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
        let seed_code = match &cfg.search.seed_program {
            Some(p) => crate::io::read_to_string(p)?,
            None if client.is_none() => OFFLINE_SEED.to_string(),
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
            generator,
            seed_code,
        })
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
        progress: &(dyn Fn(usize, usize) + Sync),
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

    /// Play the baseline episodes not yet in `baseline/partial.jsonl`, appending each as it
    /// finishes; returns all of them in job order and writes `baseline/episodes.jsonl`.
    async fn play_baseline(
        &self,
        pause_after: Option<usize>,
        stop: &std::sync::atomic::AtomicBool,
        deadline: Option<std::time::Instant>,
        progress: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<Vec<Episode>> {
        use futures::stream::{FuturesUnordered, StreamExt};
        use std::io::Write;
        let seed = derive_seed(self.cfg.search.seed, "baseline");
        let mut tasks: Vec<&String> = self.train.iter().chain(self.val.iter()).collect();
        tasks.dedup();
        let jobs: Vec<(&String, u32)> = tasks
            .iter()
            .flat_map(|t| (0..self.cfg.episodes.baseline_trials.max(1)).map(move |k| (*t, k)))
            .collect();
        let partial = self.dir.join("baseline/partial.jsonl");
        let mut done = read_partial_baseline(&partial, &jobs)?;
        if !done.is_empty() {
            tracing::warn!(
                "reusing {} of {} baseline episodes saved by an earlier process of this run \
                 ({}); playing the other {}",
                done.len(),
                jobs.len(),
                partial.display(),
                jobs.len() - done.len()
            );
        }
        let dir = partial.parent().expect("baseline/");
        std::fs::create_dir_all(dir).map_err(|e| Error::io("creating directory", dir, e))?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&partial)
            .map_err(|e| Error::io("opening", &partial, e))?;
        let mut running: FuturesUnordered<_> = jobs
            .iter()
            .enumerate()
            .filter(|(i, _)| !done.contains_key(i))
            .take(pause_after.unwrap_or(usize::MAX))
            .map(|(i, (t, k))| async move {
                (i, self.runner.run(t, None, *k, mix(seed, i as u64)).await)
            })
            .collect();
        // why to stop now, if the run must (checked before each wait, and every 100 ms)
        let why_stop = || {
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                Some("interrupted")
            } else if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                Some("search.max_wall_clock_s reached")
            } else {
                None
            }
        };
        loop {
            if let Some(why) = why_stop().filter(|_| !running.is_empty()) {
                return Err(Error::Cancelled(format!(
                    "{why} during the baseline: {} of {} baseline episodes are kept in {} \
                     and `ppol resume {}` plays only the rest",
                    done.len(),
                    jobs.len(),
                    partial.display(),
                    self.dir.path().display()
                )));
            }
            let (job, episode) = tokio::select! {
                next = running.next() => match next {
                    Some(x) => x,
                    None => break,
                },
                _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => continue,
            };
            let row = PartialBaseline {
                job,
                task_id: episode.task_id.clone(),
                episode,
            };
            let line = crate::io::to_json(&row) + "\n";
            file.write_all(line.as_bytes())
                .and_then(|_| file.sync_data())
                .map_err(|e| Error::io("appending to", &partial, e))?;
            done.insert(job, row.episode);
            progress(done.len(), jobs.len());
        }
        if let Some(n) = pause_after {
            pause_for_kill(&format!("baseline:{n}")).await;
        }
        let episodes: Vec<Episode> = done.into_values().collect();
        self.dir.write_jsonl("baseline/episodes.jsonl", &episodes)?;
        match std::fs::remove_file(&partial) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io("removing", &partial, e))
            }
            _ => {}
        }
        Ok(episodes)
    }
}

/// One line of `baseline/partial.jsonl`.
#[derive(serde::Serialize, serde::Deserialize)]
struct PartialBaseline {
    /// Index of the job (task × trial) in the run's baseline plan.
    job: usize,
    /// Its task (checked against the plan on reuse).
    task_id: String,
    /// The episode.
    episode: Episode,
}

/// The saved baseline episodes by job. A torn last line is dropped; any other unreadable line,
/// or one that does not match the run's plan of jobs, is an error naming it.
fn read_partial_baseline(
    path: &Path,
    jobs: &[(&String, u32)],
) -> Result<std::collections::BTreeMap<usize, Episode>> {
    let mut out = std::collections::BTreeMap::new();
    if !path.exists() {
        return Ok(out);
    }
    let text = crate::io::read_to_string(path)?;
    let n = text.lines().count();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row: PartialBaseline = match serde_json::from_str(line) {
            Ok(r) => r,
            Err(_) if i + 1 == n && !text.ends_with('\n') => break,
            Err(e) => {
                return Err(Error::parse(
                    path,
                    format!("line {}", i + 1),
                    format!("bad baseline episode: {e}"),
                ))
            }
        };
        match jobs.get(row.job) {
            Some((task, _)) if **task == row.task_id => {
                out.insert(row.job, row.episode);
            }
            _ => {
                return Err(Error::parse(
                    path,
                    format!("line {}", i + 1),
                    format!(
                        "baseline job {} (task {}) is not in this run's plan of {} jobs: the \
                         file is from another configuration",
                        row.job,
                        row.task_id,
                        jobs.len()
                    ),
                ))
            }
        }
    }
    // cut a torn tail so appended lines start on their own line
    if !text.is_empty() && !text.ends_with('\n') {
        let keep = text.rfind('\n').map(|i| &text[..=i]).unwrap_or("");
        crate::io::write_atomic(path, keep.as_bytes())?;
    }
    Ok(out)
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
