//! `generate`: a generator program in the sandbox for every task.

use std::sync::Arc;

use serde::Serialize;

use std::path::{Path, PathBuf};

use super::{llm_client, TaskRef, TaskSelection};
use crate::evolve::config::RunConfig;
use crate::evolve::rundir::RunDir;
use crate::generate::generator::{generate_in, Failure, GenerationOutcome, Program, Sandbox};
use crate::llm::{Accounting, ChatModel, LlmConfig};
use crate::persona::Persona;
use crate::{limits, Error, Result};

/// What `ppol generate` needs.
pub struct GenerateRequest {
    /// The generator program.
    pub program: Program,
    /// Which tasks.
    pub tasks: Vec<TaskRef>,
    /// Personas per task, 1 ..= [`limits::MAX_PERSONAS`] (default: `fitness.n_personas`); at
    /// most [`limits::MAX_EPISODES`] over all tasks.
    pub n: Option<usize>,
    /// The LLM behind `ppol_llm` (None: calls raise `LLMError`).
    pub llm: Option<LlmConfig>,
    /// Run seed (passed to the program as `PPOL_SEED`).
    pub seed: u64,
    /// Sandbox limits (timeout, memory, LLM calls, concurrency) from the configuration.
    pub sandbox: crate::generate::settings::SandboxSection,
}

impl GenerateRequest {
    /// Default of `seed` (`--seed`, `seed=`).
    pub const SEED: u64 = 0;
    /// Default of `--llm` (Python: `llm=None`): the configuration's `[llm]`, else none.
    pub const LLM: &'static str = "offline";
}

/// What `ppol generate --run RUN_DIR` (Python: `generate(run=...)`) takes from a run: its best
/// program (`best/program.py`, the program `ppol eval` calls evolved), its configuration
/// (`[sandbox]`, `[llm]`, `fitness.n_personas`) and its world's tasks.
#[derive(Debug, Clone)]
pub struct FromRun {
    /// `RUN_DIR/best/program.py`.
    pub program: PathBuf,
    /// The run's configuration.
    pub config: RunConfig,
    /// Its file, `RUN_DIR/config.toml` (for overrides over it, [`super::load_config`]).
    pub config_file: PathBuf,
}

impl FromRun {
    /// Open the run in `dir`: an error names the directory when it is not a run or has no best
    /// program yet.
    pub fn open(dir: &Path) -> Result<FromRun> {
        let run = RunDir::open(dir);
        let config = run.load_config()?;
        run.best_code()?;
        Ok(FromRun {
            program: run.join("best/program.py"),
            config,
            config_file: run.config_path(),
        })
    }

    /// The tasks to generate for. A selection that names its own tasks (`--task-file`,
    /// `--domain` or `--world`) keeps them, taking only the run's τ² data directory when it
    /// gives none; otherwise the run's world (its domain or world, task file and τ² data), with
    /// `--task` / `--split` selecting among its tasks (ids or a split), every task by default.
    pub fn tasks(&self, sel: TaskSelection) -> Result<TaskSelection> {
        let tau2_data = sel.tau2_data.or_else(|| self.config.run.tau2_data.clone());
        if sel.task_file.is_some() || sel.domain.is_some() || sel.world.is_some() {
            return Ok(TaskSelection { tau2_data, ..sel });
        }
        let split = match (&sel.tasks, sel.split) {
            (None, None) => Some("all".to_string()),
            (_, split) => split,
        };
        Ok(TaskSelection {
            domain: None,
            world: Some(self.config.world_spec().label()),
            tau2_data,
            tasks: sel.tasks,
            split,
            task_file: self.config.world.task_file.clone(),
            // the run's seed: a task file without splits is split as the run split it
            seed: self.config.search.seed,
        })
    }
}

/// What `ppol generate` was asked, as the CLI's flags or Python's arguments give it: the one
/// value both front ends build, turned into a [`GenerateRequest`] by [`GenerateInput::resolve`]
/// with the same defaults, checks and messages for both.
#[derive(Debug, Clone, Default)]
pub struct GenerateInput {
    /// The generator program (`--program`, `program=`).
    pub program: Option<PathBuf>,
    /// A run directory whose best program, configuration and world to take (`--run`, `run=`).
    pub run: Option<PathBuf>,
    /// Which tasks (its `seed` is the split's seed: the run's seed, `--seed`, `seed=`).
    pub selection: TaskSelection,
    /// Personas per task (default: the configuration's `fitness.n_personas`).
    pub n: Option<usize>,
    /// The `--llm` / `llm=` grammar (None or `offline`: the configuration's `[llm]`, else none).
    pub llm: Option<String>,
    /// A run configuration (default: the run's with `run`).
    pub config: Option<PathBuf>,
    /// Sandbox settings given by flags or keyword arguments, with their origins.
    pub overrides: super::Overrides,
}

impl GenerateInput {
    /// Resolve: the program (a file, or the run's best), the configuration in its layers, the
    /// tasks (the run's world when the selection names none), the LLM and the sandbox.
    pub fn resolve(self) -> Result<GenerateRequest> {
        let from_run = self.run.as_deref().map(FromRun::open).transpose()?;
        let program = match (&from_run, self.program) {
            (Some(_), Some(_)) => {
                return Err(Error::config(
                    "program",
                    "give a generator program (--program, program=) or a run directory \
                     (--run, run=: its best program), not both",
                ))
            }
            (Some(r), None) => r.program.clone(),
            (None, Some(p)) => p,
            (None, None) => {
                return Err(Error::config(
                    "program",
                    "give a generator program (--program FILE, program=) or a run directory \
                     (--run RUN_DIR, run=)",
                ))
            }
        };
        // before the tasks are resolved: a wrong program is the first thing to hear about
        let program = Program::Path(program);
        program.check()?;
        let config = self
            .config
            .or_else(|| from_run.as_ref().map(|r| r.config_file.clone()));
        let cfg = super::load_config(config.as_deref(), &self.overrides)?;
        let seed = self.selection.seed;
        let selection = match &from_run {
            Some(r) => r.tasks(self.selection)?,
            None => self.selection,
        };
        let tasks = super::resolve_tasks(&selection)?;
        let llm = match self.llm.as_deref() {
            Some(spec) => super::parse_llm(spec)?,
            None => None,
        }
        .or_else(|| cfg.llm.clone());
        let request = GenerateRequest {
            program,
            tasks,
            n: self.n.or(Some(cfg.fitness.n_personas)),
            llm,
            seed,
            sandbox: cfg.sandbox.clone(),
        };
        super::stop_if_resolving("generate", || request.describe())?;
        Ok(request)
    }
}

impl GenerateRequest {
    /// The resolved request as plain data (what the front ends' agreement is tested on).
    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "program": self.program.name(),
            "tasks": self.tasks,
            "n": self.n,
            "llm": self.llm,
            "seed": self.seed,
            "sandbox": self.sandbox,
        })
    }
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

/// Run a generator program in the sandbox for every task (concurrently, bounded by the
/// sandbox). A program failure is data (in the report), never an `Err`.
pub async fn generate(req: GenerateRequest) -> Result<GenerateReport> {
    req.program.check()?;
    let n = req
        .n
        .unwrap_or_else(|| RunConfig::default().fitness.n_personas);
    limits::check("n", n, 1, limits::MAX_PERSONAS)?;
    let total = n.saturating_mul(req.tasks.len());
    if total > limits::MAX_EPISODES {
        return Err(Error::config(
            "tasks × n",
            format!(
                "{} tasks × {n} personas = {total}, more than {} (ppol's limit of one \
                 request); ask for fewer tasks or personas at once",
                req.tasks.len(),
                limits::MAX_EPISODES
            ),
        ));
    }
    let client = llm_client(req.llm.as_ref())?;
    let model: Option<Arc<dyn ChatModel>> =
        client.clone().map(|c| Arc::new(c) as Arc<dyn ChatModel>);
    let capacity = req
        .llm
        .as_ref()
        .filter(|_| model.is_some())
        .map(|l| l.request_capacity(crate::llm::CallRole::Generator));
    let sandbox = Sandbox::new(req.sandbox.sandbox_config(capacity)?).await?;
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
