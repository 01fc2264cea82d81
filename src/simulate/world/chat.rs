//! The `chat` world: tool-less chat with the user's own agent. The agent is the `agent` role's
//! OpenAI-compatible endpoint with the user's system prompt (`[world] system_prompt` or
//! `system_prompt_file`); the user simulator is ppol's: the LLM user simulator (the
//! `user-sim` role) or, with `[episodes] backend = "scripted"`, the offline scripted user
//! playing the persona text. Tasks come from the task file; there is no reward. The system
//! prompt is required: without one (or with an empty one) the world is not opened, rather than
//! searching personas against an agent the user does not run.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::{AgentView, TaskList, World, WorldDeps};
use crate::llm::{ChatModel, ToolSpec};
use crate::persona::{self, Persona};
use crate::simulate::episode::llm::{LlmAgent, LlmUser, DEFAULT_USER_GUIDELINES};
use crate::simulate::episode::record::{run_dialogue, Episode, EpisodeStatus};
use crate::simulate::episode::runner::{
    push_notes, usage_json, Backend, EpisodeNotes, Metered, UsageCounts,
};
use crate::simulate::episode::scripted::ScriptedUser;
use crate::simulate::episode::{
    AgentSimulator, EpisodeRunner, Scenario, ToolEnv, ToolOutcome, UserSimulator,
};
use crate::{Error, Result};

/// The chat world.
pub struct ChatWorld {
    tasks: TaskList,
    agent_model: Arc<dyn ChatModel>,
    user: Backend,
    system_prompt: String,
}

impl ChatWorld {
    /// The world of a task list; the agent needs the run's model.
    pub fn new(deps: &WorldDeps, tasks: TaskList) -> Result<Self> {
        let agent_model = deps.model.clone().ok_or_else(|| {
            Error::config(
                "llm",
                "the chat world talks to your agent on the `agent` role's endpoint: give an \
                 [llm] section or --llm (the user simulator may stay offline: [episodes] \
                 backend = \"scripted\")",
            )
        })?;
        let system_prompt = deps.settings.chat_system_prompt()?;
        if tasks.all().is_empty() {
            return Err(Error::config(
                "world.task_file",
                "the task file holds no task",
            ));
        }
        Ok(ChatWorld {
            tasks,
            agent_model,
            user: deps.backend.clone(),
            system_prompt,
        })
    }
}

#[async_trait]
impl World for ChatWorld {
    fn label(&self) -> String {
        "chat".into()
    }

    fn domain(&self) -> String {
        "chat".into()
    }

    fn tasks(&self) -> &TaskList {
        &self.tasks
    }

    fn backend(&self) -> String {
        let agent = self.agent_model.describe_for(crate::llm::CallRole::Agent);
        match &self.user {
            Backend::Scripted => format!("user=scripted agent={agent}"),
            b => b.describe(),
        }
    }

    fn runner(&self, max_turns: usize) -> Arc<dyn EpisodeRunner> {
        Arc::new(ChatRunner {
            tasks: self.tasks.clone(),
            agent_model: self.agent_model.clone(),
            user: self.user.clone(),
            system_prompt: self.system_prompt.clone(),
            backend: self.backend(),
            max_turns,
        })
    }

    fn agent_view(&self, _task_id: &str) -> Option<AgentView> {
        Some(AgentView {
            system_prompt: self.system_prompt.clone(),
            tools: Vec::new(),
        })
    }
}

/// No tools: a call is answered with an error (the agent was offered none).
struct NoTools;

impl ToolEnv for NoTools {
    fn tools(&self) -> Vec<ToolSpec> {
        Vec::new()
    }

    fn call(&mut self, name: &str, _arguments: &Value) -> ToolOutcome {
        ToolOutcome {
            content: format!("Error: Tool '{name}' not found."),
            error: true,
        }
    }

    fn is_read_only(&self, _name: &str) -> bool {
        true
    }
}

struct ChatRunner {
    tasks: TaskList,
    agent_model: Arc<dyn ChatModel>,
    user: Backend,
    system_prompt: String,
    backend: String,
    max_turns: usize,
}

/// The user simulator's scenario for a free-text task context.
fn scenario(task_id: &str, context: &str) -> Scenario {
    Scenario {
        task_id: task_id.into(),
        domain: "chat".into(),
        reason_for_call: context.into(),
        text: context.into(),
        ..Default::default()
    }
}

#[async_trait]
impl EpisodeRunner for ChatRunner {
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

impl ChatRunner {
    async fn play(
        &self,
        task_id: &str,
        persona: Option<&Persona>,
        trial: u32,
        seed: u64,
    ) -> Episode {
        let text = persona.map(|p| p.text.as_str()).unwrap_or("");
        let axes = persona
            .map(|p| p.axis_placement.clone())
            .unwrap_or_default();
        // failed until it is played through; the reason is set where it stops
        let mut e = Episode::failed(
            task_id,
            persona,
            trial,
            seed,
            "chat",
            &self.backend,
            String::new(),
        );
        e.error = None;
        let Some(task) = self.tasks.get(task_id) else {
            e.error = Some(format!("no task with id '{task_id}' in the task file"));
            return e;
        };
        let counts: UsageCounts = Default::default();
        let llm_notes: EpisodeNotes = Default::default();
        let meter = |m: &Arc<dyn ChatModel>| -> Arc<dyn ChatModel> {
            Arc::new(Metered {
                inner: m.clone(),
                counts: counts.clone(),
                notes: llm_notes.clone(),
            })
        };
        let sc = scenario(task_id, &task.context);
        let mut user: Box<dyn UserSimulator> = match &self.user {
            Backend::Scripted => {
                let u = ScriptedUser::for_persona(&sc, &axes, text, seed);
                e.persona_play = Some(u.persona_play().clone());
                Box::new(u)
            }
            Backend::Llm {
                user,
                user_temperature,
                ..
            } => {
                let base = format!(
                    "{DEFAULT_USER_GUIDELINES}\n\n<scenario>\n{}\n</scenario>",
                    task.context
                );
                Box::new(LlmUser::new(
                    meter(user),
                    persona::inject(&base, text),
                    *user_temperature,
                    Some(seed),
                ))
            }
        };
        let mut agent: Box<dyn AgentSimulator> = Box::new(LlmAgent::new(
            meter(&self.agent_model),
            self.system_prompt.clone(),
            None,
            Some(seed),
        ));
        let (conversation, termination, error) =
            run_dialogue(user.as_mut(), agent.as_mut(), &mut NoTools, self.max_turns).await;
        e.conversation = conversation;
        e.agent = Some(AgentView {
            system_prompt: self.system_prompt.clone(),
            tools: Vec::new(),
        });
        e.usage = usage_json(&counts.lock().expect("usage lock"));
        push_notes(
            &mut e.notes,
            std::mem::take(&mut *llm_notes.lock().expect("notes lock")),
        );
        push_notes(&mut e.notes, user.take_notes());
        push_notes(&mut e.notes, agent.take_notes());
        e.role_confusion = user.role_confusion();
        match error {
            Some(why) => e.error = Some(why),
            None => {
                e.status = EpisodeStatus::Ok;
                e.termination = termination;
            }
        }
        e
    }
}
