//! LLM access: one [`ChatModel`] trait, providers selected by name, and the wrapper that adds
//! concurrency limits, retries, caching and cost accounting around any provider.
//!
//! * [`config`] — [`LlmConfig`]: per-role [`ModelSpec`]s, limits, budget, prices; parsed from
//!   TOML or a `--llm` value (`scripted`, `openai:MODEL[@BASE_URL]`, a TOML path).
//! * [`openai`] — [`OpenAiProvider`], any OpenAI-compatible endpoint through `async-openai`.
//! * [`scripted`] — [`ScriptedModel`], deterministic and offline.
//! * [`client`] — [`LlmClient`], the wrapper every caller should use: routing by role,
//!   semaphore, timeouts, retries with backoff, on-disk cache, accounting and budget.
//! * [`cache`] — [`ResponseCache`], the content-addressed response cache.
//! * [`context`] — fitting a request into a model's context window (history trimming, the
//!   context-length errors of OpenAI, vLLM, llama.cpp and llama-cpp-python).
//! * [`schema`] — answers constrained to a JSON schema ([`ResponseSchema`]): the request
//!   styles endpoints take, and how a provider learns which one its endpoint takes.
//! * [`recover`] — tool calls that a model wrote into its text instead of the `tool_calls`
//!   field, recovered for the agent loop.
//! * [`endpoint`] — per-endpoint state shared by every role on one base URL: the adaptive
//!   concurrency limit (AIMD on latency, 429 / 503 and timeouts), the health of a replica
//!   and the wait for an endpoint that refuses connections.
//!
//! Building a client:
//!
//! ```no_run
//! # async fn demo() -> ppol::Result<()> {
//! use ppol::dialogue::{Role, Turn};
//! use ppol::llm::{CallRole, ChatModel, ChatRequest, LlmClient};
//!
//! let client = LlmClient::from_cli_value("openai:gpt-4o-mini@http://127.0.0.1:8000/v1")?;
//! let request = ChatRequest::new(CallRole::Agent, vec![Turn::new(Role::User, "Hello")]);
//! let answer = client.chat(&request).await?;
//! println!("{} ({:?})", answer.message.content, client.accounting().total);
//! # Ok(()) }
//! ```

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dialogue::Turn;
use crate::Result;

pub mod cache;
pub mod client;
pub mod config;
pub mod context;
pub mod endpoint;
pub mod openai;
pub mod recover;
pub mod schema;
pub mod scripted;
pub mod serve;
mod tool_bounds;

pub use cache::ResponseCache;
pub use client::{Accounting, LlmClient, RoleAccounting};
pub use config::{
    BaseUrl, Budget, LlmConfig, ModelPatch, ModelSpec, Price, ProviderKind, ServeLimits,
};
pub use endpoint::EndpointStats;
pub use openai::OpenAiProvider;
pub use schema::{ResponseSchema, SchemaMode, StructuredOutput};
pub use scripted::ScriptedModel;

/// Which part of ppol makes a call; costs and budgets are accounted per role.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
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

    /// The completion cap of a request of this role when neither the request nor the role's
    /// [`ModelSpec::max_tokens`] sets one, so that no request is unbounded: a user or agent
    /// turn is a few sentences or one tool call (300 / 600 tokens), a mutation is a whole
    /// program or diff (4,096), a reflection a few paragraphs (2,000, the reference's cap), a
    /// generator request whatever the program asks for (2,048 when it asks for nothing).
    pub fn default_max_tokens(self) -> u32 {
        match self {
            CallRole::UserSim => 300,
            CallRole::Agent => 600,
            CallRole::Mutator => 4096,
            CallRole::Generator => 2048,
            CallRole::Reflection => 2000,
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

impl ToolSpec {
    /// A tool from its OpenAI form (`{"type": "function", "function": {"name", "description",
    /// "parameters"}}`) or the flat one (`{"name", ...}`); `None` without a name. Parameters
    /// default to an empty object schema.
    pub fn from_openai(v: &Value) -> Option<ToolSpec> {
        let f = v.get("function").unwrap_or(v);
        Some(ToolSpec {
            name: f.get("name")?.as_str()?.to_string(),
            description: f
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            parameters: f
                .get("parameters")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
        })
    }
}

/// A canned tool call in a scripted answer: a line of a [`ScriptedModel`] script or a
/// mock-server reply (`crate::testing::mock_server`). The id defaults to `call_<request>_<index>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolCall {
    /// Call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Function name.
    pub name: String,
    /// Arguments. A script requires an object; the mock server serializes an object and sends
    /// a string verbatim (which may be invalid JSON).
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
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
    /// Return an answer with neither text nor tool calls instead of failing the attempt
    /// ([`FailureKind::Empty`]); for callers with a fallback of their own (the LLM agent asks
    /// again without tools).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accept_empty: bool,
    /// A JSON schema the answer's text must follow. The endpoint is asked to constrain its
    /// output to it where it can (see [`schema`]); [`ChatResponse::schema_mode`] says whether
    /// it did. The caller still parses and checks the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<ResponseSchema>,
    /// Asked by a caller outside ppol (a simulator through the model endpoint, a generator
    /// program in the sandbox): its `max_tokens` is clamped to the role's cap (the role's
    /// `max_tokens`, else [`CallRole::default_max_tokens`]), so it cannot raise what one call
    /// may cost.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub external: bool,
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
            accept_empty: false,
            response_schema: None,
            external: false,
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
    /// What ppol did to get this answer that a reader of the record should know: history
    /// trimmed to the context window, tool calls recovered from the text, `max_tokens`
    /// lowered, a retry that changed the seed. Empty for a plain answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// For a request with a [`ChatRequest::response_schema`]: how the endpoint was asked to
    /// constrain the answer ([`SchemaMode::Unconstrained`]: it takes no schema, the answer is
    /// free text). `None` for requests without a schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_mode: Option<SchemaMode>,
}

/// What a router knows of one role's context window, for callers that size their own prompts
/// (the mutator prompt is cut to fit, rather than left for the server to refuse or clamp).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContextBudget {
    /// The model's context window in tokens (configured as `context_window`, or learned from
    /// a context-length error).
    pub window: u32,
    /// Characters per prompt token for that model: measured from its `usage` once it has
    /// answered, [`context::DEFAULT_CHARS_PER_TOKEN`] before.
    pub chars_per_token: f64,
}

/// Anything that answers chat requests.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// Provider and model, for logs (`openai:gpt-4o-mini@http://...`).
    fn describe(&self) -> String;
    /// Provider and model answering one role (a router such as [`LlmClient`] answers each
    /// role with its own model; everything else answers every role alike).
    fn describe_for(&self, role: CallRole) -> String {
        let _ = role;
        self.describe()
    }
    /// The context window of the model answering `role`, when it is known. `None` (the
    /// default) means unknown: the caller keeps its own limits.
    fn context_budget(&self, role: CallRole) -> Option<ContextBudget> {
        let _ = role;
        None
    }
    /// Whether the model answering `role` constrains its output to a
    /// [`ChatRequest::response_schema`]: `Some(true)` known to (configured, or learned from an
    /// answer), `Some(false)` known not to (configured off, learned from a refusal, or a model
    /// that cannot), `None` (the default) not known yet.
    fn schema_support(&self, role: CallRole) -> Option<bool> {
        let _ = role;
        None
    }
    /// The limits of the endpoint that serves this model to simulators
    /// ([`serve::ModelEndpoint`]): `[llm.serve]` for an [`LlmClient`], the defaults otherwise.
    fn serve_limits(&self) -> ServeLimits {
        ServeLimits::default()
    }
    /// Answer one request.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse>;
}

/// Why one attempt at a call failed, classified for the retry policy of [`LlmClient`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// HTTP 429 (rate limited). Retryable.
    RateLimited,
    /// HTTP 5xx (or an error object in a 200 body). Retryable.
    Server(u16),
    /// The attempt exceeded its timeout (or HTTP 408). Retryable.
    Timeout,
    /// The connection broke mid-response. Retryable.
    Connection,
    /// The connection could not be made at all (refused, unknown host, connect timeout):
    /// nothing is listening. [`LlmClient`] waits for the endpoint to come back (bounded,
    /// shared by every caller of that endpoint) instead of spending its retries.
    Unreachable,
    /// The request does not fit the model's context window (an HTTP 400 whose text says so,
    /// see [`context::parse_overflow`]). [`LlmClient`] trims the history and sends it again.
    ContextLength,
    /// The response body exceeded [`LlmConfig::max_response_bytes`]. Not retried: an endpoint
    /// that streams without end does so again.
    TooLarge,
    /// The body, or a tool call's arguments, is not the expected JSON. Retryable.
    Garbage,
    /// The answer has neither text nor tool calls. Retryable.
    Empty,
    /// `finish_reason == "length"` with empty text. Retryable.
    Truncated,
    /// Any other HTTP 4xx (bad request, auth, unknown model). Not retried.
    Client(u16),
    /// Anything else that retrying cannot fix (bad input, exhausted script). Not retried.
    Fatal,
}

impl FailureKind {
    /// Whether the same request may succeed when sent again.
    pub fn is_retryable(self) -> bool {
        !matches!(
            self,
            FailureKind::Client(_)
                | FailureKind::Fatal
                | FailureKind::TooLarge
                | FailureKind::ContextLength
        )
    }

    /// Whether the failure is about what the model wrote (or failed to write in time), so
    /// that sending the identical request again — same seed, temperature 0 — would most
    /// likely fail the same way: such retries change the seed and raise the temperature.
    pub fn is_about_content(self) -> bool {
        matches!(
            self,
            FailureKind::Garbage
                | FailureKind::Empty
                | FailureKind::Truncated
                | FailureKind::Timeout
        )
    }

    /// Short label for logs and messages (`429`, `http-503`, `timeout`, `garbage`, ...).
    pub fn label(self) -> String {
        match self {
            FailureKind::RateLimited => "rate-limited (429)".to_string(),
            FailureKind::Server(s) => format!("server error ({s})"),
            FailureKind::Timeout => "timeout".to_string(),
            FailureKind::Connection => "connection error".to_string(),
            FailureKind::Unreachable => "endpoint unreachable".to_string(),
            FailureKind::ContextLength => "context window exceeded".to_string(),
            FailureKind::TooLarge => "response too large".to_string(),
            FailureKind::Garbage => "unparseable response".to_string(),
            FailureKind::Empty => "empty response".to_string(),
            FailureKind::Truncated => "truncated response".to_string(),
            FailureKind::Client(s) => format!("client error ({s})"),
            FailureKind::Fatal => "error".to_string(),
        }
    }
}

/// One failed attempt: what kind, the details, and the server's `Retry-After` if any.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptError {
    /// Classification.
    pub kind: FailureKind,
    /// Human-readable details (status line, body excerpt, parse error).
    pub message: String,
    /// Delay requested by the server (`Retry-After`).
    pub retry_after: Option<Duration>,
}

impl AttemptError {
    /// An attempt error without `Retry-After`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        AttemptError {
            kind,
            message: message.into(),
            retry_after: None,
        }
    }
}

impl std::fmt::Display for AttemptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.label(), self.message)
    }
}

/// A backend that makes single attempts; [`LlmClient`] adds retries, limits and accounting.
/// Every provider also implements [`ChatModel`] directly (one attempt, no retries).
#[async_trait]
pub trait Provider: Send + Sync {
    /// Provider name (`openai`, `scripted`).
    fn name(&self) -> &'static str;
    /// The endpoint named in errors (base URL, or `scripted`).
    fn endpoint(&self) -> String;
    /// The configured model name.
    fn model(&self) -> &str;
    /// Whether [`LlmClient`]'s response cache may store this provider's answers (default
    /// true; the scripted provider says no, as replaying a script must not be short-cut).
    fn cacheable(&self) -> bool {
        true
    }
    /// See [`ChatModel::schema_support`] (default: not known).
    fn schema_support(&self) -> Option<bool> {
        None
    }
    /// One attempt. Implementations reject answers with neither text nor tool calls
    /// ([`FailureKind::Empty`] / [`FailureKind::Truncated`], see [`check_answer`]).
    async fn attempt(
        &self,
        request: &ChatRequest,
    ) -> std::result::Result<ChatResponse, AttemptError>;
}

/// [`check_answer`], unless the request accepts empty answers.
pub fn check_answer_for(
    request: &ChatRequest,
    response: ChatResponse,
) -> std::result::Result<ChatResponse, AttemptError> {
    if request.accept_empty {
        Ok(response)
    } else {
        check_answer(response)
    }
}

/// Reject an answer that has neither text nor tool calls: [`FailureKind::Truncated`] when the
/// finish reason is `length`, else [`FailureKind::Empty`].
pub fn check_answer(response: ChatResponse) -> std::result::Result<ChatResponse, AttemptError> {
    let empty =
        response.message.content.trim().is_empty() && response.message.tool_calls.is_empty();
    if !empty {
        return Ok(response);
    }
    if response.finish_reason.as_deref() == Some("length") {
        Err(AttemptError::new(
            FailureKind::Truncated,
            "finish_reason 'length' with no text (max_tokens too small?)",
        ))
    } else {
        Err(AttemptError::new(
            FailureKind::Empty,
            format!(
                "no text and no tool calls (finish_reason {})",
                response.finish_reason.as_deref().unwrap_or("none")
            ),
        ))
    }
}

/// Turn an attempt error into the crate error, naming endpoint and role.
pub(crate) fn llm_error(
    endpoint: &str,
    role: CallRole,
    message: impl Into<String>,
) -> crate::Error {
    crate::Error::Llm {
        endpoint: endpoint.to_string(),
        role: role.as_str().to_string(),
        message: message.into(),
    }
}

/// Adapts any [`ChatModel`] (e.g. a rule-based offline engine) into a [`Provider`], so it can
/// answer a role inside an [`LlmClient`] and share its accounting. Its errors are not retried,
/// its answers are passed through unchecked and never cached.
pub struct ChatModelProvider {
    inner: std::sync::Arc<dyn ChatModel>,
    describe: String,
}

impl ChatModelProvider {
    /// Wrap a model.
    pub fn new(model: std::sync::Arc<dyn ChatModel>) -> Self {
        let describe = model.describe();
        ChatModelProvider {
            inner: model,
            describe,
        }
    }
}

#[async_trait]
impl Provider for ChatModelProvider {
    fn name(&self) -> &'static str {
        "custom"
    }

    fn endpoint(&self) -> String {
        self.describe.clone()
    }

    fn schema_support(&self) -> Option<bool> {
        // a wrapped model answers every role alike
        self.inner.schema_support(CallRole::Mutator)
    }

    fn model(&self) -> &str {
        &self.describe
    }

    fn cacheable(&self) -> bool {
        false
    }

    async fn attempt(
        &self,
        request: &ChatRequest,
    ) -> std::result::Result<ChatResponse, AttemptError> {
        self.inner.chat(request).await.map_err(|e| {
            let message = match e {
                crate::Error::Llm { message, .. } => message,
                other => other.to_string(),
            };
            AttemptError::new(FailureKind::Fatal, message)
        })
    }
}
