//! A mock OpenAI-compatible server for tests, on hyper (HTTP/1.1) on 127.0.0.1: answers
//! scripted by a [`MockScript`], server behaviour (latency, capacity, generation speed,
//! context window, llama.cpp strictness, outages) set by [`MockOptions`].
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
//! Keep-alive, `Expect: 100-continue` and chunked uploads work (hyper); a body over
//! [`MockOptions::max_body_bytes`] gets 413.
//!
//! **Control routes** (for tests in another process, e.g. Python against a
//! `ppol mock-server` child), counted as `other_requests`:
//!
//! | route | does |
//! |---|---|
//! | `GET /mock/stats` | [`MockStats`] as JSON |
//! | `GET /mock/requests` | `{"bodies": [...], "headers": [...], "records": [...]}`: the chat request bodies and headers (JSON bodies only), and a [`MockRequestRecord`] of every chat request (`model`, `max_tokens`, `tool_choice`, `tools`, estimated `prompt_tokens`, `outcome`, `status`, `queue_wait_ms`, ...) |
//! | `POST /mock/replies` | a REPLY or a list of them, appended to the queue; answers `{"queued": N}` |
//! | `POST /mock/default` | a REPLY that becomes the default |
//! | `POST /mock/outage` | `{"for_s": S}`: answers `{"down_for_s": S}`, then the server is down for S seconds (see *Outages*) |
//!
//! **Choosing a reply** for each chat request: the first [rule](MockRule) that matches and has
//! uses left, else the next reply of the queue, else the default reply (echo by default).
//! The choice depends only on the script and the order requests arrive in. Requests
//! rejected on arrival (bad JSON, streaming, strictness, context, capacity) use no reply.
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
//! | `status` | HTTP status (200..=999); non-2xx answers with an OpenAI-style error object |
//! | `retry_after` | seconds, sent as the `Retry-After` header |
//! | `raw_body` | body sent verbatim instead of the completion (garbage) |
//! | `delay_ms` | wait before answering (for timeouts), on top of the server's latency |
//! | `hang_up` | `true`: close the connection without answering |
//! | `stall` | `true`: accept the request and never answer (until the client gives up) |
//! | `endless_body` | `true`: send the status line and headers, then a chunked body that never ends (for response-size caps) |
//! | `usage` | `{"prompt_tokens": N, "completion_tokens": M}` (default: estimated, see below) |
//! | `model` | model name reported (default: the request's) |
//!
//! `hang_up`, `stall`, `endless_body` and `raw_body` exclude each other.
//!
//! **Server behaviour** ([`MockOptions`] field / flag of `ppol mock-server`):
//!
//! | option | behaviour |
//! |---|---|
//! | `latency` / `--latency-ms` | fixed time added to every chat request that reaches processing, whatever its reply (rejections on arrival are immediate) |
//! | `max_in_flight` / `--max-in-flight N` | with N chat requests in flight (received, not answered), another is answered 429 at once with `Retry-After: busy_retry_after` (`--busy-retry-after-s`, default 1); counted in `rejected_busy` |
//! | `slots` / `--slots K`, `--serial` = 1 | at most K requests are computed at once, like llama.cpp's slots; the others wait in FIFO order (`waiting`, `queue_wait_ms_total`/`_max`, each record's `queue_wait_ms`) |
//! | `tokens_per_s` / `--tokens-per-s T` | a completion takes `completion_tokens / T` seconds (in its slot) |
//! | `n_ctx` / `--n-ctx N` | context window: a prompt over N tokens gets 400 `"This model's maximum context length is N tokens. However, you requested M tokens (request (M tokens) exceeds the available context size (N tokens), try increasing it)"` (type `exceed_context_size_error`, with `n_prompt_tokens`, `n_ctx`); `max_tokens` is clamped to what the window leaves and a longer text reply is cut there (`finish_reason: "length"`) |
//! | `fill_context` / `--fill-context`, needs `n_ctx` | a text reply to a request without `max_tokens` / `max_completion_tokens` grows (filler text) until the window is full, `finish_reason: "length"`: unbounded agent replies, slow with `tokens_per_s` |
//! | `strict.reject_null_content` / `--reject-null-content` | HTTP 500 `Invalid 'content' type ... got null` (or `Missing 'content'`) when an assistant message has no content string, as llama.cpp |
//! | `strict.tools_need_tool_choice` / `--tools-need-tool-choice` | `tools` are ignored unless `tool_choice` is present: the answer is plain text (scripted tool calls are written into it as JSON); the record says `tools_ignored` |
//! | `strict.response_format` / `--response-format any\|llama-cpp-python\|none` | which `response_format` shapes are taken ([`MockResponseFormat`]): all (default), llama-cpp-python's (`json_object` with a `schema`; `json_schema` gets its HTTP 500 "Input should be 'text' or 'json_object'"), or none (400); the record says what was sent (`response_format`). Answers are the script's either way |
//! | `strict` = all three / `--strict` | [`MockStrictness::llama_cpp`] |
//! | `cancel_abandoned` / `--cancel-abandoned` | a request whose client went away stops being computed and frees its slot; by default it is computed to the end (`abandoned_computed`) |
//! | `outage` / `--down-after-requests N --down-for-s S` | see *Outages* |
//! | `max_lifetime` / `--lifetime-s` | stop by itself |
//!
//! [`MockOptions::llama_cpp`] combines them into a llama.cpp server.
//!
//! **Token estimates** (reported `usage` unless the reply sets it, and the context check):
//! prompt = per message ⌈content characters / 4⌉ + 1 (+ ⌈tool-call JSON / 4⌉), plus
//! ⌈tools JSON / 4⌉ when tools are used; completion = ⌈text / 4⌉ + ⌈each call's JSON / 4⌉.
//!
//! **Outages** reproduce a server killed and restarted: the listener is closed (connections
//! are refused) and every open connection is cut, so requests in flight get no answer
//! (`cut`); after the outage the server listens again on the same port with the same
//! script and counters. Start one with [`MockServer::pause`] / [`MockServer::pause_for`]
//! and end it with [`MockServer::resume`], with `POST /mock/outage`, or by schedule
//! ([`MockOutage`]: after N chat requests the next one kills the server for S seconds).
//!
//! **Accounting:** [`MockStats`] counts chat requests, answers by status, and prompt and
//! completion tokens reported in completions, in total and per requested model, so a test
//! can compare a client's cost totals with what the server was asked for. Abandoned
//! requests (the client disconnected before the answer) are counted, and whether they were
//! computed to the end or cancelled.
//!
//! **Replicas:** every [`serve`] starts an independent server (own port, script copy,
//! counters); [`serve_replicas`] starts several. The server stops when [`MockServer::stop`] is
//! called, when the handle is dropped, or after [`MockOptions::max_lifetime`]. Everything binds
//! loopback addresses only.

mod chat;
mod options;
mod script;
mod server;
mod stats;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

pub use options::{MockOptions, MockOutage, MockResponseFormat, MockStrictness};
pub use script::{MockReply, MockRule, MockScript, MockUsage};
pub use stats::{MockOutcome, MockRequestRecord, MockStats, MockTokenCounts};

use server::{lock, Command, Shared, STOPPED};

use crate::{Error, Result};

/// Chat requests whose bodies and records are kept; later ones are counted but not stored.
pub const MAX_RECORDED_BODIES: usize = 10_000;

/// A running mock server. Stops when dropped.
pub struct MockServer {
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MockServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.shared.addr)
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
    options.validate()?;
    script
        .validate()
        .map_err(|(at, e)| Error::config(format!("MockScript.{at}"), e))?;
    let listener = server::bind(options.addr).await?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::config("MockOptions.addr", e.to_string()))?;
    let (control, commands) = mpsc::unbounded_channel();
    let models = script.models();
    let shared = Arc::new(Shared::new(
        options,
        addr,
        script::ScriptState::new(script),
        models,
        control,
    ));
    let task = tokio::spawn(server::supervise(listener, shared.clone(), commands));
    tracing::debug!(%addr, "mock LLM server listening");
    Ok(MockServer {
        shared,
        task: Some(task),
    })
}

/// Start `replicas` independent servers with the same script and options (each its own copy
/// of the script, its own port and counters). With a fixed port in `options.addr`, replica
/// `i` binds port + i; with port 0 each gets an ephemeral port.
pub async fn serve_replicas(
    replicas: usize,
    script: MockScript,
    options: MockOptions,
) -> Result<Vec<MockServer>> {
    if replicas == 0 {
        return Err(Error::config("replicas", "must be at least 1"));
    }
    let mut servers = Vec::with_capacity(replicas);
    for i in 0..replicas {
        let mut o = options.clone();
        if o.addr.port() != 0 {
            let port = u16::try_from(i)
                .ok()
                .and_then(|i| o.addr.port().checked_add(i))
                .ok_or_else(|| {
                    Error::config(
                        "replicas",
                        format!(
                            "{replicas} replicas from port {} go past port 65535",
                            o.addr.port()
                        ),
                    )
                })?;
            o.addr.set_port(port);
        }
        servers.push(serve_with(script.clone(), o).await?);
    }
    Ok(servers)
}

/// Serve until Ctrl-C or [`MockOptions::max_lifetime`], for a CLI verb such as
/// `ppol mock-server --port 0 --script FILE`. Once listening, writes one JSON line
/// `{"addr": "127.0.0.1:PORT", "base_url": "http://127.0.0.1:PORT/v1", "replica": 0}` to
/// `ready` (a parent process reads it to learn the port). Returns the final counters.
pub async fn run(
    script: MockScript,
    options: MockOptions,
    ready: impl std::io::Write,
) -> Result<MockStats> {
    let mut stats = run_replicas(1, script, options, ready).await?;
    Ok(stats.remove(0))
}

/// [`run`] with `replicas` servers ([`serve_replicas`]): one ready line per replica, in
/// order, then serve until Ctrl-C or the lifetime. Returns each replica's counters.
pub async fn run_replicas(
    replicas: usize,
    script: MockScript,
    options: MockOptions,
    mut ready: impl std::io::Write,
) -> Result<Vec<MockStats>> {
    let mut servers = serve_replicas(replicas, script, options).await?;
    let mut lines = String::new();
    for (i, s) in servers.iter().enumerate() {
        let line = json!({"addr": s.addr().to_string(), "base_url": s.base_url(), "replica": i});
        lines.push_str(&format!("{line}\n"));
    }
    ready
        .write_all(lines.as_bytes())
        .and_then(|_| ready.flush())
        .map_err(|e| Error::io("writing", "<mock-server ready line>", e))?;
    tokio::select! {
        _ = futures::future::join_all(servers.iter_mut().map(MockServer::wait)) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    let stats = servers.iter().map(MockServer::stats).collect();
    for s in servers {
        s.stop();
    }
    Ok(stats)
}

impl MockServer {
    /// The bound address (the same across outages).
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL to configure clients with.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.shared.addr)
    }

    /// The options the server runs with.
    pub fn options(&self) -> &MockOptions {
        &self.shared.options
    }

    /// Chat-completion requests received so far.
    pub fn requests(&self) -> u64 {
        lock(&self.shared.stats).requests
    }

    /// Most chat requests in flight at once (from receipt to answer, delays included).
    pub fn max_in_flight(&self) -> usize {
        lock(&self.shared.stats).max_in_flight
    }

    /// All counters.
    pub fn stats(&self) -> MockStats {
        lock(&self.shared.stats).clone()
    }

    /// Poll the counters until `until` holds (`Ok` with them) or `timeout` passes (`Err` with
    /// the last ones): for effects that follow a client's action asynchronously, such as
    /// an abandoned request being counted after the client hung up.
    pub async fn wait_for_stats(
        &self,
        timeout: Duration,
        until: impl Fn(&MockStats) -> bool,
    ) -> std::result::Result<MockStats, MockStats> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let s = self.stats();
            if until(&s) {
                return Ok(s);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(s);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The chat request bodies received (parsed JSON), in arrival order.
    pub fn bodies(&self) -> Vec<Value> {
        lock(&self.shared.bodies).clone()
    }

    /// The last chat request body received.
    pub fn last_body(&self) -> Option<Value> {
        lock(&self.shared.bodies).last().cloned()
    }

    /// The headers of the chat requests recorded by [`MockServer::bodies`] (lowercase
    /// names), in the same order.
    pub fn headers(&self) -> Vec<BTreeMap<String, String>> {
        lock(&self.shared.headers).clone()
    }

    /// A record of every chat request (also rejected ones), in arrival order.
    pub fn records(&self) -> Vec<MockRequestRecord> {
        lock(&self.shared.records).clone()
    }

    /// Append replies to the queue of the running server.
    ///
    /// # Panics
    /// If a reply is invalid ([`MockReply::validate`]): a mistake in the test itself.
    pub fn push_replies(&self, replies: impl IntoIterator<Item = MockReply>) {
        let replies: Vec<MockReply> = replies.into_iter().collect();
        for (i, r) in replies.iter().enumerate() {
            if let Err(e) = r.validate() {
                panic!("MockServer::push_replies: reply {i}: {e}");
            }
        }
        lock(&self.shared.script).queue.extend(replies);
    }

    /// Replace the default reply of the running server.
    ///
    /// # Panics
    /// If the reply is invalid ([`MockReply::validate`]).
    pub fn set_default(&self, reply: MockReply) {
        if let Err(e) = reply.validate() {
            panic!("MockServer::set_default: {e}");
        }
        lock(&self.shared.script).default = reply;
    }

    /// Replies left in the queue.
    pub fn queued(&self) -> usize {
        lock(&self.shared.script).queue.len()
    }

    /// Go down until [`MockServer::resume`]: stop listening (connections are refused) and
    /// cut every open connection. Returns once the port is closed.
    pub async fn pause(&self) {
        self.down(None).await;
    }

    /// Go down for `down_for`, then listen again on the same port by itself.
    pub async fn pause_for(&self, down_for: Duration) {
        self.down(Some(down_for)).await;
    }

    async fn down(&self, down_for: Option<Duration>) {
        let (done, wait) = oneshot::channel();
        let sent = self.shared.control.send(Command::Down {
            down_for,
            spare: None,
            done: Some(done),
        });
        if sent.is_ok() {
            let _ = wait.await;
        }
    }

    /// Listen again on the same port after an outage (a no-op when up). Fails if the port
    /// was taken meanwhile or the server has stopped.
    pub async fn resume(&self) -> Result<()> {
        let (done, wait) = oneshot::channel();
        let stopped = || Error::config("MockServer", "the server has stopped");
        self.shared
            .control
            .send(Command::Up { done })
            .map_err(|_| stopped())?;
        wait.await.map_err(|_| stopped())?
    }

    /// Whether the server refuses connections right now (an outage).
    pub fn is_down(&self) -> bool {
        lock(&self.shared.stats).down
    }

    /// Whether the server has stopped (stop, drop or lifetime).
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Wait until the server stops by itself ([`MockOptions::max_lifetime`]) or is stopped
    /// through another path; for a CLI verb that serves until killed.
    pub async fn wait(&mut self) {
        if let Some(task) = self.task.as_mut() {
            let _ = task.await;
            self.task = None;
        }
    }

    /// Stop accepting and close every connection (also done on drop).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.epoch.send_replace(STOPPED);
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
