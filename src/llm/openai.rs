//! The `openai` provider: chat completions (with function calling) against any
//! OpenAI-compatible base URL — OpenAI, vLLM, Ollama, llama.cpp's server, OpenRouter, the
//! ppol mock server (`crate::testing`) — through `async-openai` in bring-your-own-types
//! mode (`serde_json::Value` in and out).
//!
//! Newer OpenAI models reject `max_tokens` (they want `max_completion_tokens`) and non-default
//! temperatures; on such a 400 the provider adapts the request once, remembers it, and resends
//! within the same attempt.
//!
//! `async-openai`'s own retry layer is replaced by a plain transport that turns every non-2xx
//! answer into a classified error (status, `Retry-After`, body), so that retries, backoff and
//! their accounting happen in one place: [`super::LlmClient`]. The transport also reads the
//! body itself, up to [`super::LlmConfig::max_response_bytes`]: an endless (chunked) body
//! fails the attempt instead of filling memory.
//!
//! What real servers need, measured against llama-cpp-python 0.3.36, and what is sent:
//!
//! * an assistant turn that only calls tools carries `"content": ""` — `null` is a
//!   validation error (HTTP 500) and an omitted `content` breaks chat templates;
//! * `"tool_choice": "auto"` whenever tools are offered — llama.cpp's function-calling chat
//!   formats ignore `tools` without it and answer in plain text;
//! * tool calls that come back written into the text are recovered ([`super::recover`]);
//! * tool-call arguments that are not JSON are kept verbatim (as a JSON string) instead of
//!   failing the attempt, so the agent loop can answer them with a tool error and let the
//!   model try again — resending an identical request at temperature 0 gets the same answer;
//! * a 400 saying the prompt exceeds the context window is [`FailureKind::ContextLength`], so
//!   that the client can trim and resend.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::{
    check_answer_for, llm_error, AttemptError, ChatModel, ChatRequest, ChatResponse, FailureKind,
    ModelSpec, Provider, Usage,
};
use crate::dialogue::{Role, ToolCall, Turn};
use crate::{Error, Result};

/// Longest body excerpt quoted in error messages.
const EXCERPT: usize = 300;

fn excerpt(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() <= EXCERPT {
        s.to_string()
    } else {
        let cut: String = s.chars().take(EXCERPT).collect();
        format!("{cut}…")
    }
}

/// A non-2xx HTTP answer, carried through `async-openai` as `OpenAIError::Boxed`.
#[derive(Debug)]
struct HttpStatusError {
    status: u16,
    retry_after: Option<Duration>,
    body: String,
}

impl std::fmt::Display for HttpStatusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}: {}", self.status, excerpt(&self.body))
    }
}

impl std::error::Error for HttpStatusError {}

/// Parse `Retry-After` as (possibly fractional) seconds; HTTP dates are ignored.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().parse().ok()?;
    if secs.is_finite() && secs >= 0.0 {
        Some(Duration::from_secs_f64(secs.min(3600.0)))
    } else {
        None
    }
}

/// A 2xx body larger than the cap, carried through `async-openai` as `OpenAIError::Boxed`.
#[derive(Debug)]
struct TooLargeError {
    cap: u64,
}

impl std::fmt::Display for TooLargeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the response body exceeded {} bytes (max_response_bytes); reading stopped there",
            self.cap
        )
    }
}

impl std::error::Error for TooLargeError {}

/// Read a body chunk by chunk, failing once it exceeds `cap` bytes.
async fn read_capped(
    response: &mut reqwest::Response,
    cap: u64,
) -> std::result::Result<Vec<u8>, OpenAIError> {
    if response.content_length().is_some_and(|n| n > cap) {
        return Err(OpenAIError::Boxed(Box::new(TooLargeError { cap })));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if (body.len() + chunk.len()) as u64 > cap {
            return Err(OpenAIError::Boxed(Box::new(TooLargeError { cap })));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The transport installed into `async-openai`: executes the request once, no retries, and
/// reads at most `max_bytes` of the body.
#[derive(Clone)]
struct PlainTransport {
    http: reqwest::Client,
    max_bytes: u64,
}

type TransportFuture =
    Pin<Box<dyn Future<Output = std::result::Result<reqwest::Response, OpenAIError>> + Send>>;

impl tower::Service<HttpRequestFactory> for PlainTransport {
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = TransportFuture;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::result::Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: HttpRequestFactory) -> Self::Future {
        let http = self.http.clone();
        let cap = self.max_bytes;
        Box::pin(async move {
            let request = request.build().await?;
            let mut response = http.execute(request).await?;
            let status = response.status();
            if status.is_success() {
                let mut rebuilt = http::Response::builder()
                    .status(status)
                    .version(response.version());
                if let Some(h) = rebuilt.headers_mut() {
                    *h = response.headers().clone();
                }
                let body = read_capped(&mut response, cap).await?;
                let rebuilt = rebuilt
                    .body(body)
                    .map_err(|e| OpenAIError::InvalidArgument(e.to_string()))?;
                return Ok(reqwest::Response::from(rebuilt));
            }
            let status = status.as_u16();
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            let body = read_capped(&mut response, cap.min(1 << 20))
                .await
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            Err(OpenAIError::Boxed(Box::new(HttpStatusError {
                status,
                retry_after,
                body,
            })))
        })
    }
}

/// One OpenAI-compatible model at one base URL.
pub struct OpenAiProvider {
    client: async_openai::Client<OpenAIConfig>,
    model: String,
    base_url: String,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    /// Send `max_completion_tokens` instead of `max_tokens` (learned from a 400).
    use_max_completion_tokens: AtomicBool,
    /// Do not send `temperature` (learned from a 400).
    omit_temperature: AtomicBool,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl OpenAiProvider {
    /// Build from a spec: model (`$PPOL_LLM_MODEL` fallback), base URL (`$OPENAI_BASE_URL`
    /// fallback), API key from `spec.api_key_env`, extra headers. `key` is the config key
    /// named in errors (`default`, `roles.agent`). Response bodies are capped at the default
    /// of [`super::LlmConfig::max_response_bytes`]; see [`OpenAiProvider::from_spec_capped`].
    pub fn from_spec(spec: &ModelSpec, key: &str) -> Result<Self> {
        OpenAiProvider::from_spec_capped(spec, key, super::LlmConfig::default().max_response_bytes)
    }

    /// [`OpenAiProvider::from_spec`] with a response-body cap in bytes.
    pub fn from_spec_capped(spec: &ModelSpec, key: &str, max_response_bytes: u64) -> Result<Self> {
        let model = spec.resolved_model(&format!("{key}.model"))?;
        let base_url = spec.resolved_base_url();
        let api_key = spec.resolved_api_key(&format!("{key}.api_key_env"))?;
        let mut config = OpenAIConfig::new()
            .with_api_base(base_url.clone())
            .with_api_key(api_key)
            .with_org_id("")
            .with_project_id("");
        for (name, value) in &spec.headers {
            let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| Error::config(format!("{key}.headers"), format!("'{name}': {e}")))?;
            config = config
                .with_header(header, value.as_str())
                .map_err(|e| Error::config(format!("{key}.headers.{name}"), e.to_string()))?;
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10).min(spec.timeout()))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| Error::config(key, format!("cannot build HTTP client: {e}")))?;
        let client = async_openai::Client::with_config(config)
            .with_http_client(http.clone())
            .with_http_service(PlainTransport {
                http,
                max_bytes: max_response_bytes,
            });
        Ok(OpenAiProvider {
            client,
            model,
            base_url,
            temperature: spec.temperature,
            max_tokens: spec.max_tokens,
            use_max_completion_tokens: AtomicBool::new(false),
            omit_temperature: AtomicBool::new(false),
        })
    }

    /// A provider for `model` at `base_url` with defaults for everything else (empty API key
    /// unless `$OPENAI_API_KEY` is set).
    pub fn new(model: impl Into<String>, base_url: impl Into<String>) -> Result<Self> {
        OpenAiProvider::from_spec(&ModelSpec::openai(model, Some(base_url.into())), "openai")
    }

    /// Adapt `body` to a 400 that rejects a parameter newer OpenAI models do not take
    /// (`max_tokens` → `max_completion_tokens`; a non-default `temperature` → omitted).
    /// Returns whether the body changed; the change is remembered for later requests.
    fn adapt_to_rejection(&self, error: &AttemptError, body: &mut Value) -> bool {
        if error.kind != FailureKind::Client(400) {
            return false;
        }
        let Some(obj) = body.as_object_mut() else {
            return false;
        };
        let msg = error.message.to_ascii_lowercase();
        if msg.contains("max_completion_tokens") && obj.contains_key("max_tokens") {
            if let Some(v) = obj.remove("max_tokens") {
                obj.insert("max_completion_tokens".into(), v);
            }
            self.use_max_completion_tokens
                .store(true, Ordering::Relaxed);
            tracing::info!(
                endpoint = %self.base_url,
                model = %self.model,
                "endpoint rejects max_tokens; sending max_completion_tokens from now on"
            );
            return true;
        }
        if msg.contains("temperature")
            && (msg.contains("unsupported") || msg.contains("not support"))
            && obj.contains_key("temperature")
        {
            obj.remove("temperature");
            self.omit_temperature.store(true, Ordering::Relaxed);
            tracing::info!(
                endpoint = %self.base_url,
                model = %self.model,
                "endpoint rejects temperature; omitting it from now on"
            );
            return true;
        }
        false
    }

    /// The chat-completions request body for `request` (non-streaming).
    pub fn request_body(&self, request: &ChatRequest) -> std::result::Result<Value, AttemptError> {
        let mut messages = Vec::with_capacity(request.messages.len());
        for (i, turn) in request.messages.iter().enumerate() {
            messages.push(message_json(turn, i)?);
        }
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model));
        body.insert("messages".into(), Value::Array(messages));
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": t.parameters,
                        }
                    })
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
            // llama.cpp's function-calling formats ignore `tools` without it.
            body.insert("tool_choice".into(), json!("auto"));
        }
        if let Some(t) = request.temperature.or(self.temperature) {
            if !self.omit_temperature.load(Ordering::Relaxed) {
                body.insert("temperature".into(), json!(t));
            }
        }
        if let Some(m) = request.max_tokens.or(self.max_tokens) {
            let key = if self.use_max_completion_tokens.load(Ordering::Relaxed) {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            body.insert(key.into(), json!(m));
        }
        if let Some(s) = request.seed {
            body.insert("seed".into(), json!(s));
        }
        body.insert("stream".into(), json!(false));
        Ok(Value::Object(body))
    }
}

fn message_json(turn: &Turn, index: usize) -> std::result::Result<Value, AttemptError> {
    Ok(match turn.role {
        Role::System => json!({"role": "system", "content": turn.content}),
        Role::User => json!({"role": "user", "content": turn.content}),
        Role::Assistant => {
            let mut m = Map::new();
            m.insert("role".into(), json!("assistant"));
            // Always a string: `null` beside tool calls is a validation error on
            // llama-cpp-python (HTTP 500) and an omitted content breaks chat templates.
            m.insert("content".into(), json!(turn.content));
            if !turn.tool_calls.is_empty() {
                let calls: Vec<Value> = turn
                    .tool_calls
                    .iter()
                    .map(|c| {
                        let args = match &c.arguments {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        json!({
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": args},
                        })
                    })
                    .collect();
                m.insert("tool_calls".into(), Value::Array(calls));
            }
            Value::Object(m)
        }
        Role::Tool => {
            let id = turn.tool_call_id.as_deref().ok_or_else(|| {
                AttemptError::new(
                    FailureKind::Fatal,
                    format!("messages[{index}] is a tool result without tool_call_id"),
                )
            })?;
            json!({"role": "tool", "tool_call_id": id, "content": turn.content})
        }
    })
}

/// Parse a chat-completions response body into a [`ChatResponse`]. `fallback_model` is used
/// when the body names none. Tool-call arguments that are not a JSON object are kept verbatim
/// as a JSON string (the agent loop answers such a call with a tool error); a tool call
/// without a function name is [`FailureKind::Garbage`].
pub fn parse_response(
    body: &Value,
    fallback_model: &str,
) -> std::result::Result<ChatResponse, AttemptError> {
    let garbage = |msg: String| AttemptError::new(FailureKind::Garbage, msg);
    if body.get("choices").is_none() {
        if let Some(err) = body.get("error") {
            // Some routers (OpenRouter) report upstream failures in a 200 body.
            let code = err
                .get("code")
                .and_then(Value::as_u64)
                .filter(|c| (400..600).contains(c))
                .unwrap_or(502) as u16;
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| err.to_string());
            let kind = if code == 429 {
                FailureKind::RateLimited
            } else if code >= 500 {
                FailureKind::Server(code)
            } else {
                FailureKind::Client(code)
            };
            return Err(AttemptError::new(
                kind,
                format!("error in body: {}", excerpt(&msg)),
            ));
        }
    }
    let choice = body
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| {
            garbage(format!(
                "no choices in response: {}",
                excerpt(&body.to_string())
            ))
        })?;
    let message = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| garbage("choices[0] has no message object".to_string()))?;
    let content = match message.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        // Content-part arrays: concatenate the text parts.
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        Some(other) => {
            return Err(garbage(format!(
                "choices[0].message.content is not text: {}",
                excerpt(&other.to_string())
            )))
        }
    };
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").filter(|v| !v.is_null()) {
        let calls = calls
            .as_array()
            .ok_or_else(|| garbage("choices[0].message.tool_calls is not a list".to_string()))?;
        for (i, call) in calls.iter().enumerate() {
            let function = call
                .get("function")
                .ok_or_else(|| garbage(format!("tool_calls[{i}] has no function object")))?;
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| garbage(format!("tool_calls[{i}] has no function name")))?;
            let arguments = match function.get("arguments") {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(Value::String(s)) if s.trim().is_empty() => Value::Object(Map::new()),
                Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => Value::String(s.clone()),
                },
                Some(v @ Value::Object(_)) => v.clone(),
                Some(other) => Value::String(other.to_string()),
            };
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .unwrap_or_else(|| format!("call_{i}"));
            tool_calls.push(ToolCall {
                id,
                name: name.to_string(),
                arguments,
            });
        }
    }
    let usage = body
        .get("usage")
        .map(|u| Usage {
            prompt_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
            completion_tokens: u
                .get("completion_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        })
        .unwrap_or_default();
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .unwrap_or(fallback_model)
        .to_string();
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(ChatResponse {
        message: Turn {
            role: Role::Assistant,
            content,
            tool_calls,
            tool_call_id: None,
        },
        usage,
        model,
        cached: false,
        finish_reason,
        notes: Vec::new(),
    })
}

/// When tools were offered and the answer has no `tool_calls`, recover calls the model wrote
/// into its text ([`super::recover`]), with a note.
pub fn recover_tool_calls(response: &mut ChatResponse, tools: &[super::ToolSpec]) {
    if !response.message.tool_calls.is_empty() {
        return;
    }
    if let Some(r) = super::recover::tool_calls_in_text(&response.message.content, tools) {
        response.notes.push(format!(
            "recovered {} tool call(s) written in the text ({})",
            r.calls.len(),
            r.calls
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        response.message.tool_calls = r.calls;
        response.message.content = r.rest;
    }
}

fn classify(error: OpenAIError) -> AttemptError {
    match error {
        OpenAIError::Boxed(inner) => match inner.downcast::<HttpStatusError>() {
            Ok(http) => {
                let mut kind = match http.status {
                    429 => FailureKind::RateLimited,
                    408 => FailureKind::Timeout,
                    s if s >= 500 => FailureKind::Server(s),
                    s => FailureKind::Client(s),
                };
                if (400..500).contains(&http.status)
                    && http.status != 429
                    && super::context::parse_overflow(&http.body).is_some()
                {
                    kind = FailureKind::ContextLength;
                }
                let error_object = serde_json::from_str::<Value>(&http.body)
                    .ok()
                    .and_then(|v| v.get("error").cloned());
                let message = match error_object
                    .as_ref()
                    .and_then(|e| e.get("message").and_then(Value::as_str))
                {
                    Some(m) => {
                        // llama.cpp's server puts the numbers beside the message.
                        let extra: Vec<String> = ["n_ctx", "n_prompt_tokens"]
                            .iter()
                            .filter_map(|k| {
                                error_object
                                    .as_ref()
                                    .and_then(|e| e.get(*k))
                                    .map(|v| format!("{k}: {v}"))
                            })
                            .collect();
                        let extra = if extra.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", extra.join(", "))
                        };
                        format!("HTTP {}: {}{extra}", http.status, excerpt(m))
                    }
                    None => http.to_string(),
                };
                AttemptError {
                    kind,
                    message,
                    retry_after: http.retry_after,
                }
            }
            Err(other) => match other.downcast::<TooLargeError>() {
                Ok(big) => AttemptError::new(FailureKind::TooLarge, big.to_string()),
                Err(other) => AttemptError::new(FailureKind::Fatal, other.to_string()),
            },
        },
        OpenAIError::Reqwest(e) => {
            let kind = if e.is_timeout() {
                FailureKind::Timeout
            } else if e.is_builder() {
                FailureKind::Fatal
            } else if e.is_connect() {
                FailureKind::Unreachable
            } else {
                FailureKind::Connection
            };
            // reqwest's Display hides the cause ("error sending request"); add the chain.
            let mut message = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                message.push_str(": ");
                message.push_str(&s.to_string());
                source = s.source();
            }
            AttemptError::new(kind, message)
        }
        OpenAIError::JSONDeserialize(e, body) => AttemptError::new(
            FailureKind::Garbage,
            format!("body is not JSON ({e}): {}", excerpt(&body)),
        ),
        OpenAIError::ApiError(api) => {
            let status = api.status_code.as_u16();
            let kind = match status {
                429 => FailureKind::RateLimited,
                s if s >= 500 => FailureKind::Server(s),
                s => FailureKind::Client(s),
            };
            AttemptError::new(kind, api.to_string())
        }
        other => AttemptError::new(FailureKind::Fatal, other.to_string()),
    }
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn name(&self) -> &'static str {
        "openai"
    }

    fn endpoint(&self) -> String {
        self.base_url.clone()
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn attempt(
        &self,
        request: &ChatRequest,
    ) -> std::result::Result<ChatResponse, AttemptError> {
        let mut body = self.request_body(request)?;
        let finish = |answer: Value| {
            let mut response = parse_response(&answer, &self.model)?;
            recover_tool_calls(&mut response, &request.tools);
            check_answer_for(request, response)
        };
        // At most two parameter adaptations, then the answer stands.
        for _ in 0..2 {
            match self.client.chat().create_byot(body.clone()).await {
                Ok(answer) => return finish(answer),
                Err(e) => {
                    let e = classify(e);
                    if !self.adapt_to_rejection(&e, &mut body) {
                        return Err(e);
                    }
                }
            }
        }
        let answer: Value = self
            .client
            .chat()
            .create_byot(body)
            .await
            .map_err(classify)?;
        finish(answer)
    }
}

#[async_trait]
impl ChatModel for OpenAiProvider {
    fn describe(&self) -> String {
        format!("openai:{}@{}", self.model, self.base_url)
    }

    /// One attempt, no retries (use [`super::LlmClient`] for those).
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse> {
        self.attempt(request)
            .await
            .map_err(|e| llm_error(&self.base_url, request.role, e.to_string()))
    }
}
