//! LLM access: one [`ChatModel`] trait, providers selected by name, and the wrapper that adds
//! concurrency limits, retries, caching and cost accounting around any provider.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dialogue::Turn;
use crate::Result;

/// Which part of ppol makes a call; costs and budgets are accounted per role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallRole {
    /// The simulated user.
    UserSim,
    /// The agent under test.
    Agent,
    /// The evolution mutator.
    Mutator,
    /// Generator programs (through the sandbox's LLM proxy).
    Generator,
    /// Reflection on an evaluated candidate.
    Reflection,
}

impl CallRole {
    /// All roles, in a fixed order.
    pub const ALL: [CallRole; 5] = [
        CallRole::UserSim,
        CallRole::Agent,
        CallRole::Mutator,
        CallRole::Generator,
        CallRole::Reflection,
    ];

    /// Kebab-case name (`user-sim`, `agent`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            CallRole::UserSim => "user-sim",
            CallRole::Agent => "agent",
            CallRole::Mutator => "mutator",
            CallRole::Generator => "generator",
            CallRole::Reflection => "reflection",
        }
    }
}

/// A function tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

/// One chat-completion request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// Who is calling (for accounting).
    pub role: CallRole,
    /// The conversation, system prompt first. Roles are from the model's point of view.
    pub messages: Vec<Turn>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Completion token cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Provider seed, where supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl ChatRequest {
    /// A request with default sampling settings.
    pub fn new(role: CallRole, messages: Vec<Turn>) -> Self {
        ChatRequest {
            role,
            messages,
            tools: Vec::new(),
            temperature: None,
            max_tokens: None,
            seed: None,
        }
    }
}

/// Token counts of one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
}

/// One chat-completion answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The assistant message (text and/or tool calls).
    pub message: Turn,
    /// Token counts (zero for a cache hit's cost, but the original counts are kept here).
    pub usage: Usage,
    /// The model that actually answered, as reported by the endpoint.
    pub model: String,
    /// Whether this came from the on-disk cache.
    #[serde(default)]
    pub cached: bool,
    /// The endpoint's finish reason (`stop`, `length`, `tool_calls`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

/// Anything that answers chat requests.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// Provider and model, for logs (`openai:gpt-4o-mini@http://...`).
    fn describe(&self) -> String;
    /// Answer one request.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse>;
}
