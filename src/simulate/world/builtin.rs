//! The built-in worlds: ppol's Rust τ² domains (`demo`, `retail`, `airline`) played by the
//! scripted simulator offline or by LLMs ([`Tau2Runner`]).

use std::sync::Arc;

use super::{AgentView, TaskList, World, WorldTask};
use crate::simulate::episode::llm::agent_system_prompt;
use crate::simulate::episode::runner::{task_context, Backend, Tau2Runner};
use crate::simulate::episode::EpisodeRunner;
use crate::simulate::tau2::Domain;
use crate::Result;

/// A built-in τ² domain with its backend.
pub struct BuiltinWorld {
    domain: Arc<Domain>,
    backend: Backend,
    max_tool_rounds: usize,
    tasks: TaskList,
}

impl BuiltinWorld {
    /// The world of a loaded domain.
    pub fn new(domain: Arc<Domain>, backend: Backend, max_tool_rounds: usize) -> Self {
        let split_of = |id: &str| {
            ["train", "test"]
                .into_iter()
                .find(|s| {
                    domain
                        .splits
                        .get(*s)
                        .is_some_and(|ids| ids.iter().any(|i| i == id))
                })
                .map(str::to_string)
        };
        let tasks = domain
            .tasks
            .iter()
            .map(|t| WorldTask {
                task_id: t.id.clone(),
                context: task_context(&domain, t),
                split: split_of(&t.id),
            })
            .collect();
        BuiltinWorld {
            tasks: TaskList::new(tasks, 0.0, 0),
            domain,
            backend,
            max_tool_rounds,
        }
    }
}

impl World for BuiltinWorld {
    fn label(&self) -> String {
        self.domain.name.clone()
    }

    fn domain(&self) -> String {
        self.domain.name.clone()
    }

    fn tasks(&self) -> &TaskList {
        &self.tasks
    }

    fn select(&self, spec: &str) -> Result<Vec<String>> {
        Ok(self
            .domain
            .select_tasks(spec)?
            .iter()
            .map(|t| t.id.clone())
            .collect())
    }

    fn backend(&self) -> String {
        self.backend.describe()
    }

    fn runner(&self, max_turns: usize) -> Arc<dyn EpisodeRunner> {
        Arc::new(
            Tau2Runner::new(self.domain.clone(), self.backend.clone(), max_turns)
                .with_max_tool_rounds(self.max_tool_rounds),
        )
    }

    fn agent_view(&self, _task_id: &str) -> Option<AgentView> {
        Some(AgentView {
            system_prompt: agent_system_prompt(&self.domain.policy),
            tools: self.domain.env().tools(),
        })
    }

    fn builtin_domain(&self) -> Option<Arc<Domain>> {
        Some(self.domain.clone())
    }
}
