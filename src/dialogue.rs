//! A dialogue between a user and an assistant (plus tool traffic), the unit that is
//! fingerprinted, scored and written by the episode runner.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who produced a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The (human or simulated) user.
    User,
    /// The agent.
    Assistant,
    /// A tool result.
    Tool,
    /// A system prompt.
    System,
}

impl Role {
    /// Parse a role name as found in traces (`user`, `human`, `assistant`, `agent`, `tool`, `system`).
    pub fn parse(s: &str) -> Option<Role> {
        match s.trim().to_ascii_lowercase().as_str() {
            "user" | "human" | "customer" => Some(Role::User),
            "assistant" | "agent" | "ai" | "bot" => Some(Role::Assistant),
            "tool" | "function" => Some(Role::Tool),
            "system" | "developer" => Some(Role::System),
            _ => None,
        }
    }

    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::System => "system",
        }
    }
}

/// A tool call made by the assistant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id (matches [`Turn::tool_call_id`] of the result).
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as a JSON object.
    pub arguments: Value,
}

/// One message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// Who said it.
    pub role: Role,
    /// The text (may be empty for an assistant turn that only calls tools).
    #[serde(default)]
    pub content: String,
    /// Tool calls (assistant turns only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For tool results: the id of the call answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Turn {
    /// A plain text turn.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Turn {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A dialogue: id, optional task and domain, the turns, and free-form metadata
/// (reward, survey, instruction, persona, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dialogue {
    /// Unique id within its file.
    pub id: String,
    /// The task this dialogue is about (τ² task id, τ-USI task id, ...). Numbers are kept as strings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Domain (`airline`, `retail`, `demo`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// The messages in order.
    #[serde(rename = "conversation")]
    pub turns: Vec<Turn>,
    /// Everything else the source carried.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub meta: Map<String, Value>,
}

impl Dialogue {
    /// A dialogue with no task, domain or metadata.
    pub fn new(id: impl Into<String>, turns: Vec<Turn>) -> Self {
        Dialogue {
            id: id.into(),
            task_id: None,
            domain: None,
            turns,
            meta: Map::new(),
        }
    }

    /// The user turns' texts, in order (all of them, including empty ones).
    pub fn user_texts(&self) -> impl Iterator<Item = &str> {
        self.turns
            .iter()
            .filter(|t| t.role == Role::User)
            .map(|t| t.content.as_str())
    }

    /// Number of user turns with non-empty text.
    pub fn n_user_turns(&self) -> usize {
        self.user_texts().filter(|t| !t.is_empty()).count()
    }

    /// The key that groups dialogues of the same task (task id, else the dialogue id).
    pub fn group_key(&self) -> &str {
        self.task_id.as_deref().unwrap_or(&self.id)
    }

    /// A SHA-256 of what was said: every turn's role and text, in order (ids, task, domain,
    /// tool calls and metadata left out), so the same conversation read from another file or
    /// format has the same key. Whitespace runs count as one space.
    pub fn content_sha256(&self) -> String {
        let mut text = String::new();
        for t in &self.turns {
            text.push_str(t.role.as_str());
            text.push('\u{1f}');
            text.push_str(&t.content.split_whitespace().collect::<Vec<_>>().join(" "));
            text.push('\u{1e}');
        }
        crate::io::sha256_hex(text.as_bytes())
    }
}
