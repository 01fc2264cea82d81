//! Agent-hardening data: episodes as OpenAI-style chat fine-tuning records, from the agent's
//! point of view (system = the agent's prompt, user = the simulated user, assistant = the agent
//! with its tool calls, tool = tool results).

use serde_json::{json, Value};

use crate::dialogue::Role;
use crate::episode::record::{Episode, EpisodeStatus};
use crate::llm::ToolSpec;

/// Which episodes to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// Only episodes with reward ≥ 1.
    Successful,
    /// Every episode that ran to an end (failed episodes are never exported).
    All,
}

/// One fine-tuning record `{"messages": [...], "tools": [...], "metadata": {...}}`.
pub fn sft_record(episode: &Episode, system_prompt: &str, tools: &[ToolSpec]) -> Value {
    let mut messages = vec![json!({"role": "system", "content": system_prompt})];
    for t in &episode.conversation {
        let m = match t.role {
            Role::User => json!({"role": "user", "content": t.content}),
            Role::Assistant if !t.tool_calls.is_empty() => json!({
                "role": "assistant",
                "content": if t.content.is_empty() { Value::Null } else { Value::String(t.content.clone()) },
                "tool_calls": t.tool_calls.iter().map(|c| json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments.to_string()},
                })).collect::<Vec<_>>(),
            }),
            Role::Assistant => json!({"role": "assistant", "content": t.content}),
            Role::Tool => {
                json!({"role": "tool", "tool_call_id": t.tool_call_id, "content": t.content})
            }
            Role::System => continue,
        };
        messages.push(m);
    }
    json!({
        "messages": messages,
        "tools": tools.iter().map(|t| json!({
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        })).collect::<Vec<_>>(),
        "metadata": {
            "episode_id": episode.id,
            "task_id": episode.task_id,
            "domain": episode.domain,
            "persona_id": episode.persona_id,
            "reward": episode.reward,
            "trial": episode.trial,
        },
    })
}

/// Whether an episode is selected for export.
pub fn selected(e: &Episode, sel: Selection) -> bool {
    e.status == EpisodeStatus::Ok
        && match sel {
            Selection::Successful => e.success(),
            Selection::All => true,
        }
}
