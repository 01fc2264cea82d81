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
//!   that the client can trim and resend;
//! * tool schemas whose identifier-like strings carry a `maxLength` (by default,
//!   [`shaped_tool_schema`], [`is_identifier_like`]), or every string and list a bound
//!   (`tool_argument_max_chars = N`, [`bounded_tool_schema`]): llama-cpp-python turns a tool's
//!   schema into the grammar of its arguments and ignores `max_tokens` on that branch, and
//!   SmolLM2-135M was measured writing one `product_id` of 6,629 tokens (352 s, the context
//!   full).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::config::ToolArgumentBound;
use super::schema::{is_format_refusal, SchemaLearner, SchemaMode};
use super::{
    check_answer_for, llm_error, AttemptError, ChatModel, ChatRequest, ChatResponse, FailureKind,
    ModelSpec, Provider, Usage,
};
use crate::dialogue::{Role, ToolCall, Turn};
use crate::{Error, Result};

pub use super::tool_bounds::{
    bounded_tool_schema, is_identifier_like, shaped_tool_schema, IDENTIFIER_WORDS,
};

/// A request's seed as servers take it: ppol's seeds are 64-bit, servers' are not (vLLM refuses
/// one above 2^63 - 1, llama.cpp keeps 32 bits), so it is folded (every bit counts) into 31
/// bits, which every OpenAI-compatible server accepts. The same seed gives the same number.
pub fn wire_seed(seed: u64) -> u64 {
    (seed ^ (seed >> 31) ^ (seed >> 62)) & 0x7fff_ffff
}

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

/// Parse `Retry-After`: (possibly fractional) seconds, or an HTTP date (RFC 9110: IMF-fixdate
/// `Sun, 06 Nov 1994 08:49:37 GMT`, and the obsolete RFC 850 and asctime forms) as the time
/// left until then (zero when it has passed). At most an hour.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    parse_retry_after_at(value, std::time::SystemTime::now())
}

/// [`parse_retry_after`] relative to `now`.
pub fn parse_retry_after_at(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    const HOUR: f64 = 3600.0;
    if let Ok(secs) = value.trim().parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(HOUR)));
    }
    let at = parse_http_date(value)?;
    let left = at.duration_since(now).unwrap_or(Duration::ZERO);
    Some(left.min(Duration::from_secs_f64(HOUR)))
}

/// An HTTP date in any of the three forms of RFC 9110 section 5.6.7.
fn parse_http_date(value: &str) -> Option<std::time::SystemTime> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let cleaned: String = value
        .chars()
        .map(|c| if c == ',' || c == '-' { ' ' } else { c })
        .collect();
    let mut month = None;
    let mut time = None;
    let mut numbers = Vec::new();
    for token in cleaned.split_whitespace() {
        let lower = token.to_ascii_lowercase();
        if let Some(m) = MONTHS.iter().position(|m| *m == lower) {
            month = Some(m + 1);
        } else if token.contains(':') {
            time = Some(token);
        } else if let Ok(n) = token.parse::<u32>() {
            numbers.push((n, token.len()));
        } else if !(lower == "gmt" || lower == "utc" || lower.chars().all(char::is_alphabetic)) {
            return None;
        }
    }
    let (month, time) = (month?, time?);
    let [(day, _), (year, year_digits)] = numbers[..] else {
        return None;
    };
    // RFC 850's two-digit years: RFC 9110 reads one more than 50 years ahead as the past.
    let year = match year_digits {
        2 if year >= 70 => 1900 + year,
        2 => 2000 + year,
        4 => year,
        _ => return None,
    };
    let mut hms = time.split(':').map(|p| p.parse::<u32>().ok());
    let (h, m, sec) = (hms.next()??, hms.next()??, hms.next()??);
    if hms.next().is_some() || !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    humantime::parse_rfc3339(&format!(
        "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{:02}Z",
        sec.min(59)
    ))
    .ok()
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
    stop: Vec<String>,
    tool_bound: ToolArgumentBound,
    /// Send `max_completion_tokens` instead of `max_tokens` (learned from a 400).
    use_max_completion_tokens: AtomicBool,
    /// Do not send `temperature` (learned from a 400).
    omit_temperature: AtomicBool,
    /// How this endpoint takes a schema for the answer (learned, see [`super::schema`]).
    schema: SchemaLearner,
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
            stop: spec.stop.clone(),
            tool_bound: spec.tool_argument_bound(),
            use_max_completion_tokens: AtomicBool::new(false),
            omit_temperature: AtomicBool::new(false),
            schema: SchemaLearner::new(spec.structured_output),
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
                    let parameters = shaped_tool_schema(&t.parameters, self.tool_bound);
                    json!({
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": parameters,
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
            body.insert("seed".into(), json!(wire_seed(s)));
        }
        if !self.stop.is_empty() {
            body.insert("stop".into(), json!(self.stop));
        }
        if let Some(schema) = &request.response_schema {
            if let Some(format) = self.schema.mode().response_format(schema) {
                body.insert("response_format".into(), format);
            }
        }
        body.insert("stream".into(), json!(false));
        Ok(Value::Object(body))
    }
}

pub(crate) fn message_json(turn: &Turn, index: usize) -> std::result::Result<Value, AttemptError> {
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
        schema_mode: None,
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

    fn schema_support(&self) -> Option<bool> {
        self.schema.support()
    }

    async fn attempt(
        &self,
        request: &ChatRequest,
    ) -> std::result::Result<ChatResponse, AttemptError> {
        let mut body = self.request_body(request)?;
        let schema = request.response_schema.as_ref();
        let mut mode = schema.map(|_| self.schema.mode());
        let finish = |answer: Value, mode: Option<SchemaMode>| {
            let mut response = parse_response(&answer, &self.model)?;
            recover_tool_calls(&mut response, &request.tools);
            if let Some(m) = mode {
                self.schema.answered(m);
                response.schema_mode = Some(m);
            }
            check_answer_for(request, response)
        };
        // At most two parameter adaptations and two refused schema shapes, then the answer
        // stands.
        for _ in 0..4 {
            match self.client.chat().create_byot(body.clone()).await {
                Ok(answer) => return finish(answer, mode),
                Err(e) => {
                    let e = classify(e);
                    if let (Some(s), Some(m)) = (schema, mode) {
                        if m != SchemaMode::Unconstrained && is_format_refusal(&e) {
                            let next = self.schema.refused(m);
                            tracing::info!(
                                endpoint = %self.base_url,
                                model = %self.model,
                                "endpoint refuses response_format {m:?} ({}); asking in {next:?} from now on",
                                e.message.chars().take(160).collect::<String>()
                            );
                            let obj = body.as_object_mut().expect("an object body");
                            match next.response_format(s) {
                                Some(f) => obj.insert("response_format".into(), f),
                                None => obj.remove("response_format"),
                            };
                            mode = Some(next);
                            continue;
                        }
                    }
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
        finish(answer, mode)
    }
}

#[async_trait]
impl ChatModel for OpenAiProvider {
    fn describe(&self) -> String {
        crate::io::printable(&format!("openai:{}@{}", self.model, self.base_url)).into_owned()
    }

    /// One attempt, no retries (use [`super::LlmClient`] for those).
    fn schema_support(&self, _role: super::CallRole) -> Option<bool> {
        self.schema.support()
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse> {
        self.attempt(request)
            .await
            .map_err(|e| llm_error(&self.base_url, request.role, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_reach_servers_in_31_bits() {
        for s in [
            0u64,
            1,
            7,
            u64::MAX,
            1 << 63,
            (1 << 31) + 5,
            0x1234_5678_9abc_def0,
        ] {
            assert!(wire_seed(s) < (1 << 31), "{s}");
        }
        assert_eq!(wire_seed(12345), 12345);
        assert_ne!(wire_seed(1 << 40), wire_seed(1 << 41));
    }
    use crate::llm::{CallRole, ToolSpec};
    use std::time::{SystemTime, UNIX_EPOCH};

    /// τ² airline's `book_reservation` shape: strings, an enum, lists of objects, a number.
    fn booking_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "user_id": {"type": "string", "description": "The id, such as 'sara_doe_496'."},
                "cabin": {"type": "string", "enum": ["basic_economy", "economy", "business"]},
                "date": {"type": "string", "format": "date"},
                "flights": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"flight_number": {"type": "string"}, "date": {"type": "string"}},
                }},
                "passengers": {"type": "array", "maxItems": 5, "items": {"$ref": "#/$defs/Passenger"}},
                "note": {"type": ["string", "null"], "maxLength": 40},
                "total": {"type": "number"},
            },
            "$defs": {"Passenger": {"type": "object", "properties": {
                "first_name": {"type": "string", "maxLength": 500},
            }}},
            "required": ["user_id"],
        })
    }

    #[test]
    fn tool_schemas_get_bounded_strings_and_lists_and_keep_the_rest() {
        let b = bounded_tool_schema(&booking_schema(), 120);
        let p = &b["properties"];
        assert_eq!(p["user_id"]["maxLength"], 120);
        assert_eq!(
            p["user_id"]["description"],
            "The id, such as 'sara_doe_496'."
        );
        assert!(
            p["cabin"].get("maxLength").is_none(),
            "an enum is bounded already"
        );
        assert!(
            p["date"].get("maxLength").is_none(),
            "a format is checked otherwise"
        );
        assert_eq!(p["flights"]["maxItems"], 16);
        assert_eq!(
            p["flights"]["items"]["properties"]["flight_number"]["maxLength"],
            120
        );
        assert_eq!(p["passengers"]["maxItems"], 5, "a tighter bound stays");
        assert_eq!(p["note"]["maxLength"], 40);
        assert_eq!(
            b["$defs"]["Passenger"]["properties"]["first_name"]["maxLength"],
            120
        );
        assert!(p["total"].get("maxLength").is_none());
        assert_eq!(b["required"], json!(["user_id"]));
        // Nothing else moved: removing the added bounds gives the schema back.
        let mut back = b.clone();
        back["properties"]["user_id"]
            .as_object_mut()
            .unwrap()
            .remove("maxLength");
        back["properties"]["flights"]
            .as_object_mut()
            .unwrap()
            .remove("maxItems");
        back["properties"]["flights"]["items"]["properties"]["flight_number"]
            .as_object_mut()
            .unwrap()
            .remove("maxLength");
        back["properties"]["flights"]["items"]["properties"]["date"]
            .as_object_mut()
            .unwrap()
            .remove("maxLength");
        back["$defs"]["Passenger"]["properties"]["first_name"]["maxLength"] = json!(500);
        assert_eq!(back, booking_schema());
    }

    #[test]
    fn identifier_like_arguments_by_name_and_example() {
        for name in [
            "user_id",
            "item_ids",
            "email",
            "zip",
            "flight_number",
            "dob",
            "first_name",
            "userId",
            "orderID2",
            "payment-method-id",
        ] {
            assert!(is_identifier_like(Some(name), None), "{name}");
        }
        for name in [
            "thought",
            "summary",
            "reason",
            "expression",
            "address",
            "valid",
            "idea",
        ] {
            assert!(!is_identifier_like(Some(name), None), "{name}");
        }
        for d in [
            "The IATA code for the origin city such as 'SFO'.",
            "The reservation ID, such as '8JX2WO'.",
            "e.g. \"1008292230\"",
        ] {
            assert!(is_identifier_like(Some("origin"), Some(d)), "{d}");
        }
        for d in [
            "A summary of the user's issue.",
            "The expression to calculate, such as '2 + 2'.",
            "The first line of the address, such as '123 Main St'.",
            "Likely 'x y'.",
        ] {
            assert!(!is_identifier_like(Some("text"), Some(d)), "{d}");
        }
        let shaped = shaped_tool_schema(&booking_schema(), ToolArgumentBound::Identifiers(50));
        let p = &shaped["properties"];
        assert_eq!(p["user_id"]["maxLength"], 50);
        assert_eq!(
            p["flights"]["items"]["properties"]["flight_number"]["maxLength"],
            50
        );
        assert!(p["flights"].get("maxItems").is_none(), "a list of objects");
        assert_eq!(p["note"]["maxLength"], 40, "free text as defined");
        assert!(
            p["date"].get("maxLength").is_none(),
            "a format is checked otherwise"
        );
    }

    #[test]
    fn the_request_carries_stop_and_bounded_tools_only_when_configured() {
        let tools = vec![ToolSpec {
            name: "book_reservation".into(),
            description: "Book.".into(),
            parameters: booking_schema(),
        }];
        let mut request = ChatRequest::new(
            CallRole::Agent,
            vec![Turn::new(Role::User, "Book me a flight.")],
        );
        request.tools = tools;
        let mut spec = ModelSpec::openai("m", Some("http://127.0.0.1:9/v1".into()));
        let plain = OpenAiProvider::from_spec(&spec, "roles.agent")
            .unwrap()
            .request_body(&request)
            .unwrap();
        assert!(plain.get("stop").is_none());
        // unset: identifier-like strings bounded, the rest as defined
        let ids = &plain["tools"][0]["function"]["parameters"];
        assert_eq!(
            *ids,
            shaped_tool_schema(
                &booking_schema(),
                ToolArgumentBound::Identifiers(super::super::config::IDENTIFIER_MAX_CHARS)
            )
        );
        assert_ne!(*ids, booking_schema());
        spec.tool_argument_max_chars = Some(0);
        let lifted = OpenAiProvider::from_spec(&spec, "roles.agent")
            .unwrap()
            .request_body(&request)
            .unwrap();
        assert_eq!(
            lifted["tools"][0]["function"]["parameters"],
            booking_schema()
        );
        spec.stop = vec!["functions.".into()];
        spec.tool_argument_max_chars = Some(64);
        let body = OpenAiProvider::from_spec(&spec, "roles.agent")
            .unwrap()
            .request_body(&request)
            .unwrap();
        assert_eq!(body["stop"], json!(["functions."]));
        assert_eq!(
            body["tools"][0]["function"]["parameters"],
            bounded_tool_schema(&booking_schema(), 64)
        );
        assert_eq!(body["tool_choice"], "auto");
    }

    #[test]
    fn retry_after_takes_seconds_and_http_dates() {
        // 1994-11-06T08:49:37Z
        let date = UNIX_EPOCH + Duration::from_secs(784_111_777);
        let now = date - Duration::from_secs(90);
        assert_eq!(
            parse_retry_after_at("1.5", now),
            Some(Duration::from_millis(1500))
        );
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(
                parse_retry_after_at(form, now),
                Some(Duration::from_secs(90)),
                "{form}"
            );
        }
        // A date already past: go now.
        assert_eq!(
            parse_retry_after_at(
                "Sun, 06 Nov 1994 08:49:37 GMT",
                date + Duration::from_secs(5)
            ),
            Some(Duration::ZERO)
        );
        // Far ahead: capped at an hour.
        assert_eq!(
            parse_retry_after_at("Sun, 06 Nov 1994 08:49:37 GMT", UNIX_EPOCH),
            Some(Duration::from_secs(3600))
        );
        for bad in ["soon", "-1", "Sun, 32 Nov 1994 08:49:37 GMT", "Nov 1994"] {
            assert_eq!(parse_retry_after_at(bad, SystemTime::now()), None, "{bad}");
        }
    }
}
