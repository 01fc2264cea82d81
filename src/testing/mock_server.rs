//! A mock OpenAI-compatible server for tests: minimal HTTP/1.1 on a local TCP port, answers
//! scripted by a [`MockScript`].
//!
//! ```no_run
//! # async fn demo() -> ppol::Result<()> {
//! use ppol::testing::mock_server::{serve, MockReply, MockScript};
//! let server = serve(MockScript::queue([
//!     MockReply::status(429).with_retry_after(0.05),
//!     MockReply::text("hello"),
//! ])).await?;
//! let base_url = server.base_url(); // "http://127.0.0.1:PORT/v1"
//! // ... point an LlmClient at base_url ...
//! assert_eq!(server.requests(), 2);
//! server.stop();
//! # Ok(()) }
//! ```
//!
//! **Routes:** `POST /v1/chat/completions` and `POST /chat/completions` (non-streaming),
//! `GET /v1/models` and `GET /models`, `GET /health`. Anything else is a JSON 404/405.
//! Keep-alive is supported; bodies need `Content-Length` (chunked uploads get 411).
//!
//! **Control routes** (for tests in another process, e.g. Python against a
//! `ppol mock-server` child): `GET /mock/stats` ([`MockStats`] as JSON), `GET /mock/requests`
//! (`{"bodies": [...], "headers": [...]}` of the chat requests), `POST /mock/replies` (a REPLY
//! or a list of them, appended to the queue; answers `{"queued": N}`) and `POST /mock/default`
//! (a REPLY that becomes the default). They count as `other_requests`.
//!
//! **Choosing a reply** for each chat request: the first [rule](MockRule) that matches and has
//! uses left, else the next reply of the queue, else the default reply (echo by default).
//!
//! **Script files** ([`MockScript::from_file`]) are either one JSON object
//! `{"queue": [REPLY, ...], "rules": [{"contains": "refund", "times": 2, "reply": REPLY}],
//! "default": REPLY}` (every key optional), or JSONL with one REPLY per line, all queued.
//! A REPLY ([`MockReply`]) is an object with any of:
//!
//! | key | meaning |
//! |---|---|
//! | `content` | assistant text (absent: `null`) |
//! | `echo` | `true`: text is `"echo: "` + the last message's content |
//! | `tool_calls` | `[{"id"?, "name", "arguments"}]`; `arguments` is an object, or a string sent verbatim (e.g. invalid JSON) |
//! | `finish_reason` | default `tool_calls` with tool calls, else `stop` (`length` for truncation) |
//! | `status` | HTTP status; non-2xx answers with an OpenAI-style error object |
//! | `retry_after` | seconds, sent as the `Retry-After` header |
//! | `raw_body` | body sent verbatim instead of the completion (garbage) |
//! | `delay_ms` | wait before answering (for timeouts) |
//! | `hang_up` | `true`: close the connection without answering |
//! | `usage` | `{"prompt_tokens": N, "completion_tokens": M}` (default: ≈ chars / 4) |
//! | `model` | model name reported (default: the request's) |
//!
//! The server counts requests, records request bodies (up to [`MAX_RECORDED_BODIES`]) and the
//! maximum number of chat requests in flight at once. It stops when [`MockServer::stop`] is
//! called, when the handle is dropped, or after [`MockOptions::max_lifetime`].

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::llm::ScriptToolCall;
use crate::{Error, Result};

/// Request bodies kept for [`MockServer::bodies`]; later ones are counted but not stored.
pub const MAX_RECORDED_BODIES: usize = 10_000;
/// Largest request head accepted (bytes).
const MAX_HEAD: usize = 64 * 1024;
/// Idle time after which a keep-alive connection is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Token counts reported by a reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockUsage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
}

/// One scripted answer. See the [module docs](self) for the JSON form.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockReply {
    /// Assistant text; `None` sends `null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Answer `"echo: "` + the content of the request's last message.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub echo: bool,
    /// Tool calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptToolCall>,
    /// Finish reason (default `tool_calls` with tool calls, else `stop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// HTTP status (default 200); non-2xx answers with an error object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// `Retry-After` header, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<f64>,
    /// Body sent verbatim (with `status`, default 200) instead of a completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_body: Option<String>,
    /// Milliseconds to wait before answering.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
    /// Close the connection without answering.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hang_up: bool,
    /// Reported usage (default: estimated from lengths).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<MockUsage>,
    /// Reported model (default: the request's model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl MockReply {
    /// A text answer.
    pub fn text(content: impl Into<String>) -> Self {
        MockReply {
            content: Some(content.into()),
            ..MockReply::default()
        }
    }

    /// `"echo: "` + the last message's content.
    pub fn echo() -> Self {
        MockReply {
            echo: true,
            ..MockReply::default()
        }
    }

    /// One tool call (no text).
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        MockReply {
            tool_calls: vec![ScriptToolCall {
                id: None,
                name: name.into(),
                arguments,
            }],
            ..MockReply::default()
        }
    }

    /// An HTTP error status with an OpenAI-style error body.
    pub fn status(status: u16) -> Self {
        MockReply {
            status: Some(status),
            ..MockReply::default()
        }
    }

    /// A 200 answer whose body is `body` verbatim.
    pub fn garbage(body: impl Into<String>) -> Self {
        MockReply {
            raw_body: Some(body.into()),
            ..MockReply::default()
        }
    }

    /// A 200 answer with empty text and no tool calls.
    pub fn empty() -> Self {
        MockReply::text("")
    }

    /// A 200 answer with empty text and `finish_reason: "length"`.
    pub fn truncated() -> Self {
        MockReply {
            content: Some(String::new()),
            finish_reason: Some("length".to_string()),
            ..MockReply::default()
        }
    }

    /// Close the connection without answering.
    pub fn hang_up() -> Self {
        MockReply {
            hang_up: true,
            ..MockReply::default()
        }
    }

    /// Wait `ms` milliseconds before answering.
    pub fn with_delay(mut self, ms: u64) -> Self {
        self.delay_ms = ms;
        self
    }

    /// Send `Retry-After: secs`.
    pub fn with_retry_after(mut self, secs: f64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// Report these token counts.
    pub fn with_usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        self.usage = Some(MockUsage {
            prompt_tokens,
            completion_tokens,
        });
        self
    }
}

/// A reply given to matching requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockRule {
    /// Some message's content must contain this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    /// The request must (`true`) or must not (`false`) offer tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_tools: Option<bool>,
    /// The request's model must be this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// How many times the rule may fire (`None`: unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u64>,
    /// The reply.
    pub reply: MockReply,
}

impl MockRule {
    fn matches(&self, body: &Value) -> bool {
        if let Some(text) = &self.contains {
            let found = body
                .get("messages")
                .and_then(Value::as_array)
                .is_some_and(|ms| {
                    ms.iter().any(|m| {
                        m.get("content")
                            .and_then(Value::as_str)
                            .is_some_and(|c| c.contains(text.as_str()))
                    })
                });
            if !found {
                return false;
            }
        }
        if let Some(want) = self.has_tools {
            let has = body
                .get("tools")
                .and_then(Value::as_array)
                .is_some_and(|t| !t.is_empty());
            if has != want {
                return false;
            }
        }
        if let Some(model) = &self.model {
            if body.get("model").and_then(Value::as_str) != Some(model.as_str()) {
                return false;
            }
        }
        true
    }
}

/// What the server answers. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockScript {
    /// Replies served once each, in order, when no rule matches.
    #[serde(default)]
    pub queue: Vec<MockReply>,
    /// Replies for matching requests, checked first, in order.
    #[serde(default)]
    pub rules: Vec<MockRule>,
    /// The reply when no rule matches and the queue is empty.
    #[serde(default = "MockReply::echo")]
    pub default: MockReply,
}

impl Default for MockScript {
    /// Echo every request.
    fn default() -> Self {
        MockScript {
            queue: Vec::new(),
            rules: Vec::new(),
            default: MockReply::echo(),
        }
    }
}

impl MockScript {
    /// Always answer `reply`.
    pub fn always(reply: MockReply) -> Self {
        MockScript {
            default: reply,
            ..MockScript::default()
        }
    }

    /// Serve `replies` in order, then echo.
    pub fn queue(replies: impl IntoIterator<Item = MockReply>) -> Self {
        MockScript {
            queue: replies.into_iter().collect(),
            ..MockScript::default()
        }
    }

    /// Replace the default reply.
    pub fn with_default(mut self, reply: MockReply) -> Self {
        self.default = reply;
        self
    }

    /// Add a rule.
    pub fn with_rule(mut self, rule: MockRule) -> Self {
        self.rules.push(rule);
        self
    }

    /// Parse a script: a JSON object with `queue` / `rules` / `default`, or JSONL replies.
    /// `path` names the source in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let trimmed = text.trim();
        if let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(trimmed) {
            if obj.is_empty()
                || obj.contains_key("queue")
                || obj.contains_key("rules")
                || obj.contains_key("default")
            {
                return serde_json::from_value(Value::Object(obj))
                    .map_err(|e| Error::parse(path, "$", e.to_string()));
            }
        }
        let mut queue = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') || l.starts_with("//") {
                continue;
            }
            let reply: MockReply = serde_json::from_str(l)
                .map_err(|e| Error::parse(path, format!("line {}", i + 1), e.to_string()))?;
            queue.push(reply);
        }
        Ok(MockScript::queue(queue))
    }

    /// Read a script file.
    pub fn from_file(path: &Path) -> Result<Self> {
        MockScript::parse(&crate::io::read_to_string(path)?, path)
    }
}

/// Server options.
#[derive(Debug, Clone)]
pub struct MockOptions {
    /// Address to bind (default `127.0.0.1:0`, an ephemeral port).
    pub addr: SocketAddr,
    /// Stop by itself after this long (default: never).
    pub max_lifetime: Option<Duration>,
    /// Simultaneous connections; more are closed at once (default 1024).
    pub max_connections: usize,
    /// Largest request body accepted (default 16 MiB).
    pub max_body_bytes: usize,
}

impl Default for MockOptions {
    fn default() -> Self {
        MockOptions {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            max_lifetime: None,
            max_connections: 1024,
            max_body_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Counters of a running server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MockStats {
    /// Chat-completion requests received.
    pub requests: u64,
    /// Other requests (models, health, unknown routes).
    pub other_requests: u64,
    /// TCP connections accepted.
    pub connections: u64,
    /// Chat requests being handled right now.
    pub in_flight: usize,
    /// Most chat requests handled at once.
    pub max_in_flight: usize,
}

struct ScriptState {
    rules: Vec<(MockRule, Option<u64>)>,
    queue: VecDeque<MockReply>,
    default: MockReply,
}

struct State {
    script: Mutex<ScriptState>,
    requests: AtomicU64,
    other_requests: AtomicU64,
    connections: AtomicU64,
    open_connections: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    bodies: Mutex<Vec<Value>>,
    headers: Mutex<Vec<BTreeMap<String, String>>>,
    models: Vec<String>,
    max_body_bytes: usize,
}

impl State {
    fn stats(&self) -> MockStats {
        MockStats {
            requests: self.requests.load(Ordering::SeqCst),
            other_requests: self.other_requests.load(Ordering::SeqCst),
            connections: self.connections.load(Ordering::SeqCst),
            in_flight: self.in_flight.load(Ordering::SeqCst),
            max_in_flight: self.max_in_flight.load(Ordering::SeqCst),
        }
    }

    fn pick(&self, body: &Value) -> MockReply {
        let mut s = self.script.lock().unwrap_or_else(|e| e.into_inner());
        for (rule, left) in s.rules.iter_mut() {
            if left.is_some_and(|n| n == 0) || !rule.matches(body) {
                continue;
            }
            if let Some(n) = left.as_mut() {
                *n -= 1;
            }
            return rule.reply.clone();
        }
        if let Some(r) = s.queue.pop_front() {
            return r;
        }
        s.default.clone()
    }
}

/// Decrements the in-flight count when dropped (also when a handler is aborted).
struct InFlight<'a>(&'a State, bool);

impl<'a> InFlight<'a> {
    fn enter(state: &'a State) -> Self {
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(state, true)
    }

    fn leave(&mut self) {
        if self.1 {
            self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
            self.1 = false;
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.leave();
    }
}

/// A running mock server. Stops when dropped.
pub struct MockServer {
    addr: SocketAddr,
    state: Arc<State>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MockServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.addr)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Start a server on `127.0.0.1:0` (an ephemeral port). Must be called inside a tokio runtime.
pub async fn serve(script: MockScript) -> Result<MockServer> {
    serve_with(script, MockOptions::default()).await
}

/// Start a server with options. Must be called inside a tokio runtime.
pub async fn serve_with(script: MockScript, options: MockOptions) -> Result<MockServer> {
    let listener = TcpListener::bind(options.addr).await.map_err(|e| {
        Error::config(
            "mock-server.addr",
            format!("cannot bind {}: {e}", options.addr),
        )
    })?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::config("mock-server.addr", e.to_string()))?;
    let mut models = vec!["mock".to_string()];
    let mut add = |m: &Option<String>| {
        if let Some(m) = m {
            if !models.contains(m) {
                models.push(m.clone());
            }
        }
    };
    add(&script.default.model);
    for r in &script.queue {
        add(&r.model);
    }
    for r in &script.rules {
        add(&r.model);
        add(&r.reply.model);
    }
    let state = Arc::new(State {
        script: Mutex::new(ScriptState {
            rules: script
                .rules
                .into_iter()
                .map(|r| {
                    let t = r.times;
                    (r, t)
                })
                .collect(),
            queue: script.queue.into(),
            default: script.default,
        }),
        requests: AtomicU64::new(0),
        other_requests: AtomicU64::new(0),
        connections: AtomicU64::new(0),
        open_connections: AtomicUsize::new(0),
        in_flight: AtomicUsize::new(0),
        max_in_flight: AtomicUsize::new(0),
        bodies: Mutex::new(Vec::new()),
        headers: Mutex::new(Vec::new()),
        models,
        max_body_bytes: options.max_body_bytes,
    });
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(accept_loop(
        listener,
        state.clone(),
        stop_rx,
        options.max_lifetime,
        options.max_connections,
    ));
    tracing::debug!(%addr, "mock LLM server listening");
    Ok(MockServer {
        addr,
        state,
        stop,
        task: Some(task),
    })
}

/// Serve until Ctrl-C or [`MockOptions::max_lifetime`], for a CLI verb such as
/// `ppol mock-server --port 0 --script FILE`. Once listening, writes one JSON line
/// `{"addr": "127.0.0.1:PORT", "base_url": "http://127.0.0.1:PORT/v1"}` to `ready` (a parent
/// process reads it to learn the port). Returns the final counters.
pub async fn run(
    script: MockScript,
    options: MockOptions,
    mut ready: impl std::io::Write,
) -> Result<MockStats> {
    let mut server = serve_with(script, options).await?;
    let line = json!({"addr": server.addr().to_string(), "base_url": server.base_url()});
    ready
        .write_all(format!("{line}\n").as_bytes())
        .and_then(|_| ready.flush())
        .map_err(|e| Error::io("writing", "<mock-server ready line>", e))?;
    tokio::select! {
        _ = server.wait() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    let stats = server.stats();
    server.stop();
    Ok(stats)
}

async fn accept_loop(
    listener: TcpListener,
    state: Arc<State>,
    mut stop: watch::Receiver<bool>,
    max_lifetime: Option<Duration>,
    max_connections: usize,
) {
    let deadline = max_lifetime.map(|d| tokio::time::Instant::now() + d);
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending::<()>().await,
                }
            } => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                state.connections.fetch_add(1, Ordering::SeqCst);
                if state.open_connections.load(Ordering::SeqCst) >= max_connections {
                    drop(stream);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                let state = state.clone();
                conns.spawn(async move {
                    state.open_connections.fetch_add(1, Ordering::SeqCst);
                    handle_connection(stream, &state).await;
                    state.open_connections.fetch_sub(1, Ordering::SeqCst);
                });
            }
        }
    }
    // Dropping the set aborts every connection task.
    conns.abort_all();
}

impl MockServer {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL to configure clients with.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Chat-completion requests received so far.
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Most chat requests handled at once (from receipt to answer, delays included).
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    /// All counters.
    pub fn stats(&self) -> MockStats {
        self.state.stats()
    }

    /// The chat request bodies received (parsed JSON), in arrival order.
    pub fn bodies(&self) -> Vec<Value> {
        self.state
            .bodies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The last chat request body received.
    pub fn last_body(&self) -> Option<Value> {
        self.state
            .bodies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .cloned()
    }

    /// The headers of the chat requests recorded by [`MockServer::bodies`] (lowercase
    /// names), in the same order.
    pub fn headers(&self) -> Vec<BTreeMap<String, String>> {
        self.state
            .headers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Append replies to the queue of the running server.
    pub fn push_replies(&self, replies: impl IntoIterator<Item = MockReply>) {
        let mut s = self.state.script.lock().unwrap_or_else(|e| e.into_inner());
        s.queue.extend(replies);
    }

    /// Replace the default reply of the running server.
    pub fn set_default(&self, reply: MockReply) {
        self.state
            .script
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .default = reply;
    }

    /// Replies left in the queue.
    pub fn queued(&self) -> usize {
        self.state
            .script
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .queue
            .len()
    }

    /// Whether the server has stopped (stop, drop or lifetime).
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Wait until the server stops by itself ([`MockOptions::max_lifetime`]) or is stopped
    /// through another path; for a CLI verb that serves until killed.
    pub async fn wait(&mut self) {
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Stop accepting and close every connection (also done on drop).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct HttpRequest {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    close: bool,
    body: Vec<u8>,
}

enum ReadOutcome {
    Request(HttpRequest),
    Closed,
    Bad(u16, String),
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>, max_body: usize) -> ReadOutcome {
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(end) = find_head_end(buf) {
            break end;
        }
        if buf.len() > MAX_HEAD {
            return ReadOutcome::Bad(431, "request head too large".into());
        }
        let n = match tokio::time::timeout(IDLE_TIMEOUT, stream.read(&mut chunk)).await {
            Ok(Ok(n)) => n,
            _ => return ReadOutcome::Closed,
        };
        if n == 0 {
            return ReadOutcome::Closed;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default();
    let version = parts.next().unwrap_or_default();
    let path = target.split('?').next().unwrap_or_default().to_string();
    let mut content_length = 0usize;
    let mut close = version.eq_ignore_ascii_case("HTTP/1.0");
    let mut headers = BTreeMap::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        headers.insert(name.trim().to_ascii_lowercase(), value.to_string());
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => match value.parse() {
                Ok(n) => content_length = n,
                Err(_) => return ReadOutcome::Bad(400, "bad Content-Length".into()),
            },
            "transfer-encoding" if !value.eq_ignore_ascii_case("identity") => {
                return ReadOutcome::Bad(
                    411,
                    "chunked bodies are not supported; send Content-Length".into(),
                )
            }
            "connection" => {
                if value.eq_ignore_ascii_case("close") {
                    close = true;
                } else if value.eq_ignore_ascii_case("keep-alive") {
                    close = false;
                }
            }
            _ => {}
        }
    }
    if content_length > max_body {
        return ReadOutcome::Bad(413, format!("body larger than {max_body} bytes"));
    }
    let expects_continue = headers
        .get("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    if expects_continue && buf.len() - head_end < content_length {
        // curl waits for this before sending bodies over 1 KiB.
        if stream
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .is_err()
        {
            return ReadOutcome::Closed;
        }
    }
    buf.drain(..head_end);
    while buf.len() < content_length {
        let n = match tokio::time::timeout(IDLE_TIMEOUT, stream.read(&mut chunk)).await {
            Ok(Ok(n)) => n,
            _ => return ReadOutcome::Closed,
        };
        if n == 0 {
            return ReadOutcome::Closed;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: Vec<u8> = buf.drain(..content_length).collect();
    ReadOutcome::Request(HttpRequest {
        method,
        path,
        headers,
        close,
        body,
    })
}

struct HttpResponse {
    status: u16,
    body: String,
    retry_after: Option<f64>,
    hang_up: bool,
}

impl HttpResponse {
    fn json(status: u16, body: Value) -> Self {
        HttpResponse {
            status,
            body: body.to_string(),
            retry_after: None,
            hang_up: false,
        }
    }

    fn error(status: u16, kind: &str, message: &str) -> Self {
        HttpResponse::json(
            status,
            json!({"error": {"message": message, "type": kind, "param": null, "code": null}}),
        )
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

async fn write_response(stream: &mut TcpStream, r: &HttpResponse, close: bool) -> bool {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: {}\r\n",
        r.status,
        reason(r.status),
        r.body.len(),
        if close { "close" } else { "keep-alive" }
    );
    if let Some(secs) = r.retry_after {
        head.push_str(&format!("Retry-After: {secs}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(r.body.as_bytes());
    stream.write_all(&bytes).await.is_ok() && stream.flush().await.is_ok()
}

async fn handle_connection(mut stream: TcpStream, state: &State) {
    let mut buf = Vec::new();
    loop {
        let req = match read_request(&mut stream, &mut buf, state.max_body_bytes).await {
            ReadOutcome::Request(r) => r,
            ReadOutcome::Closed => return,
            ReadOutcome::Bad(status, msg) => {
                let _ = write_response(
                    &mut stream,
                    &HttpResponse::error(status, "invalid_request_error", &msg),
                    true,
                )
                .await;
                return;
            }
        };
        let close = req.close;
        let response = route(&req, state).await;
        if response.hang_up {
            return;
        }
        if !write_response(&mut stream, &response, close).await || close {
            return;
        }
    }
}

async fn route(req: &HttpRequest, state: &State) -> HttpResponse {
    let path = req.path.trim_end_matches('/');
    match (req.method.as_str(), path) {
        ("POST", "/v1/chat/completions" | "/chat/completions") => chat(req, state).await,
        (_, "/v1/chat/completions" | "/chat/completions") => {
            state.other_requests.fetch_add(1, Ordering::SeqCst);
            HttpResponse::error(405, "invalid_request_error", "use POST")
        }
        ("GET", "/v1/models" | "/models") => {
            state.other_requests.fetch_add(1, Ordering::SeqCst);
            let data: Vec<Value> = state
                .models
                .iter()
                .map(|m| json!({"id": m, "object": "model", "created": 0, "owned_by": "ppol-mock"}))
                .collect();
            HttpResponse::json(200, json!({"object": "list", "data": data}))
        }
        ("GET", "/health") => {
            state.other_requests.fetch_add(1, Ordering::SeqCst);
            HttpResponse::json(200, json!({"status": "ok"}))
        }
        ("GET", "/mock/stats") => {
            state.other_requests.fetch_add(1, Ordering::SeqCst);
            HttpResponse::json(200, json!(state.stats()))
        }
        ("GET", "/mock/requests") => {
            state.other_requests.fetch_add(1, Ordering::SeqCst);
            let bodies = state
                .bodies
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let headers = state
                .headers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            HttpResponse::json(200, json!({"bodies": bodies, "headers": headers}))
        }
        ("POST", "/mock/replies" | "/mock/default") => {
            state.other_requests.fetch_add(1, Ordering::SeqCst);
            let replies = match serde_json::from_slice::<Value>(&req.body) {
                Ok(Value::Array(items)) => items
                    .into_iter()
                    .map(serde_json::from_value::<MockReply>)
                    .collect::<std::result::Result<Vec<_>, _>>(),
                Ok(item) => serde_json::from_value::<MockReply>(item).map(|r| vec![r]),
                Err(e) => Err(e),
            };
            match replies {
                Err(e) => HttpResponse::error(
                    400,
                    "invalid_request_error",
                    &format!("expected a reply object or a list of them: {e}"),
                ),
                Ok(replies) => {
                    let mut s = state.script.lock().unwrap_or_else(|e| e.into_inner());
                    if path == "/mock/default" {
                        match replies.into_iter().last() {
                            Some(r) => s.default = r,
                            None => {
                                return HttpResponse::error(
                                    400,
                                    "invalid_request_error",
                                    "no reply given",
                                )
                            }
                        }
                    } else {
                        s.queue.extend(replies);
                    }
                    HttpResponse::json(200, json!({"queued": s.queue.len()}))
                }
            }
        }
        _ => {
            state.other_requests.fetch_add(1, Ordering::SeqCst);
            HttpResponse::error(
                404,
                "invalid_request_error",
                &format!("no route for {} {}", req.method, req.path),
            )
        }
    }
}

fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

async fn chat(req: &HttpRequest, state: &State) -> HttpResponse {
    let n = state.requests.fetch_add(1, Ordering::SeqCst) + 1;
    let mut guard = InFlight::enter(state);
    let body: Value = match serde_json::from_slice(&req.body) {
        Ok(v) => v,
        Err(e) => {
            return HttpResponse::error(
                400,
                "invalid_request_error",
                &format!("request body is not JSON: {e}"),
            )
        }
    };
    {
        let mut bodies = state.bodies.lock().unwrap_or_else(|e| e.into_inner());
        if bodies.len() < MAX_RECORDED_BODIES {
            bodies.push(body.clone());
            state
                .headers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(req.headers.clone());
        }
    }
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        return HttpResponse::error(
            400,
            "invalid_request_error",
            "the mock server does not stream; send \"stream\": false",
        );
    }
    let reply = state.pick(&body);
    if reply.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(reply.delay_ms)).await;
    }
    // Leave before writing, so a client that sends its next request as soon as it has the
    // answer never sees this one still counted.
    guard.leave();
    if reply.hang_up {
        return HttpResponse {
            status: 0,
            body: String::new(),
            retry_after: None,
            hang_up: true,
        };
    }
    let status = reply.status.unwrap_or(200);
    if let Some(raw) = reply.raw_body {
        return HttpResponse {
            status,
            body: raw,
            retry_after: reply.retry_after,
            hang_up: false,
        };
    }
    if !(200..300).contains(&status) {
        let kind = match status {
            429 => "rate_limit_exceeded",
            s if s >= 500 => "server_error",
            _ => "invalid_request_error",
        };
        let mut r =
            HttpResponse::error(status, kind, &format!("mock error {status} (request {n})"));
        r.retry_after = reply.retry_after;
        return r;
    }
    completion(&body, &reply, n)
}

fn completion(body: &Value, reply: &MockReply, n: u64) -> HttpResponse {
    let messages = body.get("messages").and_then(Value::as_array);
    let content: Option<String> = if reply.echo {
        let last = messages
            .and_then(|m| m.last())
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        Some(format!("echo: {last}"))
    } else {
        reply.content.clone()
    };
    let tool_calls: Vec<Value> = reply
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let args = match &c.arguments {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            json!({
                "id": c.id.clone().unwrap_or_else(|| format!("call_{n}_{i}")),
                "type": "function",
                "function": {"name": c.name, "arguments": args},
            })
        })
        .collect();
    let finish = reply.finish_reason.clone().unwrap_or_else(|| {
        if tool_calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }
        .to_string()
    });
    let usage = reply.usage.unwrap_or_else(|| {
        let prompt = messages
            .map(|ms| {
                ms.iter()
                    .map(|m| {
                        estimate_tokens(m.get("content").and_then(Value::as_str).unwrap_or("")) + 1
                    })
                    .sum()
            })
            .unwrap_or(0);
        let completion = estimate_tokens(content.as_deref().unwrap_or(""))
            + tool_calls
                .iter()
                .map(|c| estimate_tokens(&c["function"].to_string()))
                .sum::<u64>();
        MockUsage {
            prompt_tokens: prompt,
            completion_tokens: completion,
        }
    });
    let model = reply
        .model
        .clone()
        .or_else(|| {
            body.get("model")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| "mock".to_string());
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert(
        "content".into(),
        content.map(Value::String).unwrap_or(Value::Null),
    );
    if !tool_calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    HttpResponse::json(
        200,
        json!({
            "id": format!("chatcmpl-mock-{n}"),
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            },
        }),
    )
}
