//! How the mock server behaves as a server: [`MockOptions`] (address, lifetime, latency,
//! capacity, generation speed, context window, llama.cpp strictness, outages).

use std::net::SocketAddr;
use std::time::Duration;

use crate::{Error, Result};

/// llama.cpp's validation, each on its own ([`MockStrictness::llama_cpp`] turns both on).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MockStrictness {
    /// HTTP 500 with a validation error when an assistant message has `"content": null` (or
    /// no `content`), as llama.cpp's chat-template code answers.
    pub reject_null_content: bool,
    /// Offered `tools` are ignored unless the request has a `tool_choice`: the model answers
    /// in plain text (scripted tool calls are written into the text as JSON).
    pub tools_need_tool_choice: bool,
    /// Which `response_format` shapes the server takes (the answers are the script's either
    /// way: a mock cannot constrain them).
    pub response_format: MockResponseFormat,
}

/// The `response_format` shapes a mock server takes; a refused one gets the error the
/// imitated server sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MockResponseFormat {
    /// Every shape is taken (OpenAI, vLLM).
    #[default]
    Any,
    /// llama-cpp-python 0.3: `{"type": "json_object", "schema": ...}` is taken;
    /// `{"type": "json_schema", ...}` gets HTTP 500 "Input should be 'text' or 'json_object'".
    LlamaCppPython,
    /// No `response_format` other than `text`: HTTP 400 "response_format is not supported".
    None,
}

impl std::str::FromStr for MockResponseFormat {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "any" => Ok(MockResponseFormat::Any),
            "llama-cpp-python" => Ok(MockResponseFormat::LlamaCppPython),
            "none" => Ok(MockResponseFormat::None),
            o => Err(format!("'{o}' is not one of any, llama-cpp-python, none")),
        }
    }
}

impl MockStrictness {
    /// Every check on, response formats as llama-cpp-python takes them.
    pub fn llama_cpp() -> Self {
        MockStrictness {
            reject_null_content: true,
            tools_need_tool_choice: true,
            response_format: MockResponseFormat::LlamaCppPython,
        }
    }
}

/// A scheduled outage: the server serves `after_requests` chat requests; the next one kills
/// it (that request and every open connection are cut without an answer), the port refuses
/// connections for `down_for`, then the server listens again on the same port. Once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MockOutage {
    /// Chat requests served before the outage.
    pub after_requests: u64,
    /// How long the port refuses connections.
    pub down_for: Duration,
}

/// Server options. Every field has a default ([`MockOptions::default`]); set the ones a test
/// needs with `..MockOptions::default()`.
#[derive(Debug, Clone)]
pub struct MockOptions {
    /// Address to bind (default `127.0.0.1:0`, an ephemeral port). Must be a loopback address.
    pub addr: SocketAddr,
    /// Stop by itself after this long (default: never).
    pub max_lifetime: Option<Duration>,
    /// Simultaneous connections; more are closed at once (default 1024).
    pub max_connections: usize,
    /// Largest request body accepted (default 16 MiB); larger ones get 413.
    pub max_body_bytes: usize,
    /// Fixed latency added to every chat request that reaches processing, whatever reply is
    /// chosen (not to rejections decided on arrival: bad JSON, strictness, capacity).
    pub latency: Duration,
    /// More chat requests than this in flight (received, not yet answered) are answered
    /// `429` with `Retry-After: busy_retry_after` at once (default: unlimited).
    pub max_in_flight: Option<usize>,
    /// `Retry-After` seconds on the capacity 429s (default 1).
    pub busy_retry_after: f64,
    /// Requests computed at once, like llama.cpp's `--parallel` slots; the others wait in
    /// a FIFO queue (default: unlimited). `Some(1)` is the serial mode.
    pub slots: Option<usize>,
    /// A request whose client went away stops being computed (frees its slot). Default
    /// `false`: it is computed to the end, as llama.cpp does without cancellation.
    pub cancel_abandoned: bool,
    /// Generation speed: a completion takes `completion_tokens / tokens_per_s` seconds.
    pub tokens_per_s: Option<f64>,
    /// A text completion for a request without `max_tokens` / `max_completion_tokens` runs
    /// until the context window ([`MockOptions::n_ctx`]) is full (`finish_reason: "length"`).
    pub fill_context: bool,
    /// Context window in tokens: a prompt longer than this is answered 400 (maximum context
    /// length), and `max_tokens` is clamped to what is left of it.
    pub n_ctx: Option<u64>,
    /// llama.cpp's validation.
    pub strict: MockStrictness,
    /// A scheduled outage.
    pub outage: Option<MockOutage>,
}

impl Default for MockOptions {
    fn default() -> Self {
        MockOptions {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            max_lifetime: None,
            max_connections: 1024,
            max_body_bytes: 16 * 1024 * 1024,
            latency: Duration::ZERO,
            max_in_flight: None,
            busy_retry_after: 1.0,
            slots: None,
            cancel_abandoned: false,
            tokens_per_s: None,
            fill_context: false,
            n_ctx: None,
            strict: MockStrictness::default(),
            outage: None,
        }
    }
}

impl MockOptions {
    /// A llama.cpp server: one slot (serial), strict validation, an `n_ctx` context window
    /// that a request without `max_tokens` fills, generating `tokens_per_s` tokens a second.
    pub fn llama_cpp(n_ctx: u64, tokens_per_s: f64) -> Self {
        MockOptions {
            slots: Some(1),
            strict: MockStrictness::llama_cpp(),
            n_ctx: Some(n_ctx),
            fill_context: true,
            tokens_per_s: Some(tokens_per_s),
            ..MockOptions::default()
        }
    }

    /// Check the options; the error names the field.
    pub fn validate(&self) -> Result<()> {
        let bad = |key: &str, msg: String| Err(Error::config(format!("MockOptions.{key}"), msg));
        if !self.addr.ip().is_loopback() {
            return bad(
                "addr",
                format!(
                    "the mock server binds loopback addresses only, got {}",
                    self.addr
                ),
            );
        }
        if self.max_connections == 0 {
            return bad("max_connections", "must be at least 1".into());
        }
        if self.max_body_bytes == 0 {
            return bad("max_body_bytes", "must be at least 1".into());
        }
        if self.max_in_flight == Some(0) {
            return bad("max_in_flight", "must be at least 1".into());
        }
        if !(self.busy_retry_after.is_finite() && self.busy_retry_after >= 0.0) {
            return bad(
                "busy_retry_after",
                format!(
                    "must be a non-negative number of seconds, got {}",
                    self.busy_retry_after
                ),
            );
        }
        if self.slots == Some(0) {
            return bad("slots", "must be at least 1".into());
        }
        if let Some(t) = self.tokens_per_s {
            if !(t.is_finite() && t > 0.0) {
                return bad(
                    "tokens_per_s",
                    format!("must be a positive number, got {t}"),
                );
            }
        }
        if self.n_ctx == Some(0) {
            return bad("n_ctx", "must be at least 1".into());
        }
        if self.fill_context && self.n_ctx.is_none() {
            return bad(
                "fill_context",
                "needs a context window to fill: set n_ctx".into(),
            );
        }
        if let Some(o) = self.outage {
            if o.down_for.is_zero() {
                return bad("outage.down_for", "must be longer than zero".into());
            }
        }
        Ok(())
    }
}
