//! The HTTP side on hyper: the supervisor (listening, outages, lifetime, connections), the
//! routes, and the chat pipeline (record → check → capacity → reply → slot → answer).

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use super::chat::{self, Answer, Rejection, RequestInfo};
use super::options::MockOptions;
use super::script::{MockReply, ScriptState};
use super::stats::{MockOutcome, MockRequestRecord, MockStats};
use super::MAX_RECORDED_BODIES;
use crate::{Error, Result};

/// A response body: a whole JSON text or an endless stream.
type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Epoch value that means "stopped".
pub(super) const STOPPED: u64 = u64::MAX;

/// The service error that makes hyper close the connection without an answer.
#[derive(Debug)]
struct HangUp;

impl std::fmt::Display for HangUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("mock server: connection closed without an answer")
    }
}

impl std::error::Error for HangUp {}

/// Lock a mutex, also after a panic elsewhere (the data are counters and logs).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the supervisor is asked to do.
pub(super) enum Command {
    /// Go down: close the listener and every connection except `spare` (whose answer is on
    /// its way); come back after `down_for` (never by itself with `None`).
    Down {
        down_for: Option<Duration>,
        spare: Option<tokio::task::Id>,
        done: Option<oneshot::Sender<()>>,
    },
    /// Listen again.
    Up { done: oneshot::Sender<Result<()>> },
}

/// Everything a server's tasks share.
pub(super) struct Shared {
    pub options: MockOptions,
    pub addr: SocketAddr,
    pub script: Mutex<ScriptState>,
    pub stats: Mutex<MockStats>,
    pub bodies: Mutex<Vec<Value>>,
    pub headers: Mutex<Vec<BTreeMap<String, String>>>,
    pub records: Mutex<Vec<MockRequestRecord>>,
    pub models: Vec<String>,
    slots: Option<Arc<Semaphore>>,
    /// Bumped by every outage; [`STOPPED`] once stopped. Work in progress ends when it moves.
    pub epoch: watch::Sender<u64>,
    pub control: mpsc::UnboundedSender<Command>,
    outage_fired: AtomicBool,
}

impl Shared {
    pub(super) fn new(
        options: MockOptions,
        addr: SocketAddr,
        script: ScriptState,
        models: Vec<String>,
        control: mpsc::UnboundedSender<Command>,
    ) -> Self {
        Shared {
            slots: options.slots.map(|n| Arc::new(Semaphore::new(n))),
            options,
            addr,
            script: Mutex::new(script),
            stats: Mutex::new(MockStats::default()),
            bodies: Mutex::new(Vec::new()),
            headers: Mutex::new(Vec::new()),
            records: Mutex::new(Vec::new()),
            models,
            epoch: watch::Sender::new(0),
            control,
            outage_fired: AtomicBool::new(false),
        }
    }

    fn update_record(&self, idx: Option<usize>, f: impl FnOnce(&mut MockRequestRecord)) {
        if let Some(i) = idx {
            if let Some(r) = lock(&self.records).get_mut(i) {
                f(r);
            }
        }
    }

    fn outcome(&self, idx: Option<usize>, outcome: MockOutcome, status: Option<u16>) {
        self.update_record(idx, |r| {
            r.outcome = outcome;
            r.status = status;
        });
    }

    /// Count an answer sent with `status`.
    fn answered(&self, status: u16) {
        let mut s = lock(&self.stats);
        s.answered += 1;
        *s.statuses.entry(status).or_default() += 1;
    }

    fn other(&self) {
        lock(&self.stats).other_requests += 1;
    }
}

/// Bind `addr` (loopback only, checked by the options).
pub(super) async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| Error::config("MockOptions.addr", format!("cannot bind {addr}: {e}")))
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn accept(listener: Option<&TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// The server's main task: accepts connections, carries out outages and resumes, ends at
/// the lifetime. Aborting it (stop) drops every connection with it.
pub(super) async fn supervise(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let deadline = shared.options.max_lifetime.map(|d| Instant::now() + d);
    let mut listener = Some(listener);
    let mut conns: JoinSet<()> = JoinSet::new();
    let mut open: HashMap<tokio::task::Id, AbortHandle> = HashMap::new();
    let mut resume_at: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = sleep_until(deadline) => break,
            _ = sleep_until(resume_at), if resume_at.is_some() => {
                match bind(shared.addr).await {
                    Ok(l) => {
                        listener = Some(l);
                        resume_at = None;
                        lock(&shared.stats).down = false;
                        tracing::debug!(addr = %shared.addr, "mock server listening again");
                    }
                    Err(e) => {
                        // The port may be taken for a moment; keep trying.
                        tracing::warn!("{e}; retrying");
                        resume_at = Some(Instant::now() + Duration::from_millis(50));
                    }
                }
            }
            cmd = commands.recv() => match cmd {
                None => break,
                Some(Command::Down { down_for, spare, done }) => {
                    // Already down: only the time to come back changes.
                    if listener.take().is_some() {
                        lock(&shared.stats).down = true;
                        shared.epoch.send_modify(|e| *e = e.wrapping_add(1) % STOPPED);
                        for (id, h) in &open {
                            if Some(*id) != spare {
                                h.abort();
                            }
                        }
                        lock(&shared.stats).outages += 1;
                    }
                    resume_at = down_for.map(|d| Instant::now() + d);
                    tracing::debug!(addr = %shared.addr, ?down_for, "mock server down");
                    if let Some(done) = done {
                        let _ = done.send(());
                    }
                }
                Some(Command::Up { done }) => {
                    resume_at = None;
                    let result = if listener.is_some() {
                        Ok(())
                    } else {
                        bind(shared.addr).await.map(|l| {
                            listener = Some(l);
                            lock(&shared.stats).down = false;
                        })
                    };
                    let _ = done.send(result);
                }
            },
            Some(joined) = conns.join_next_with_id(), if !conns.is_empty() => {
                let id = match joined {
                    Ok((id, ())) => id,
                    Err(e) => e.id(),
                };
                open.remove(&id);
            }
            accepted = accept(listener.as_ref()), if listener.is_some() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: do not spin.
                        tracing::warn!("mock server accept: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                lock(&shared.stats).connections += 1;
                if open.len() >= shared.options.max_connections {
                    drop(stream);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                let h = conns.spawn(serve_connection(stream, shared.clone()));
                open.insert(h.id(), h);
            }
        }
    }
    shared.epoch.send_replace(STOPPED);
    conns.abort_all();
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    let service = hyper::service::service_fn(move |req| route(req, shared.clone()));
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .title_case_headers(true)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// Whether the connection stays open after this request.
fn keep_alive<B>(req: &Request<B>) -> bool {
    let conn = req
        .headers()
        .get(CONNECTION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase);
    match conn.as_deref() {
        Some(c) if c.contains("close") => false,
        Some(c) if c.contains("keep-alive") => true,
        _ => req.version() != Version::HTTP_10,
    }
}

fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).boxed_unsync()
}

fn respond(status: u16, body: Body, keep_alive: bool, retry_after: Option<f64>) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(
        CONNECTION,
        HeaderValue::from_static(if keep_alive { "keep-alive" } else { "close" }),
    );
    if let Some(secs) = retry_after {
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            h.insert(RETRY_AFTER, v);
        }
    }
    r
}

fn json_response(status: u16, body: &Value, keep_alive: bool) -> Response<Body> {
    respond(status, full(body.to_string()), keep_alive, None)
}

fn error_response(status: u16, message: &str, keep_alive: bool) -> Response<Body> {
    json_response(
        status,
        &chat::error_body("invalid_request_error", message),
        keep_alive,
    )
}

enum BodyError {
    TooLarge,
    Gone,
}

async fn read_body(req: Request<Incoming>, max: usize) -> std::result::Result<Bytes, BodyError> {
    match Limited::new(req.into_body(), max).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(BodyError::TooLarge),
        Err(_) => Err(BodyError::Gone),
    }
}

async fn route(
    req: Request<Incoming>,
    shared: Arc<Shared>,
) -> std::result::Result<Response<Body>, HangUp> {
    let keep = keep_alive(&req);
    let method = req.method().clone();
    let path = req.uri().path().trim_end_matches('/').to_string();
    let is_chat = matches!(path.as_str(), "/v1/chat/completions" | "/chat/completions");
    if is_chat && method == Method::POST {
        return chat(req, shared, keep).await;
    }
    shared.other();
    let max = shared.options.max_body_bytes;
    Ok(match (method, path.as_str()) {
        (_, _) if is_chat => error_response(405, "use POST", keep),
        (Method::GET, "/v1/models" | "/models") => {
            let data: Vec<Value> = shared
                .models
                .iter()
                .map(|m| json!({"id": m, "object": "model", "created": 0, "owned_by": "ppol-mock"}))
                .collect();
            json_response(200, &json!({"object": "list", "data": data}), keep)
        }
        (Method::GET, "/health") => json_response(200, &json!({"status": "ok"}), keep),
        (Method::GET, "/mock/stats") => json_response(200, &json!(*lock(&shared.stats)), keep),
        (Method::GET, "/mock/requests") => {
            let bodies = lock(&shared.bodies).clone();
            let headers = lock(&shared.headers).clone();
            let records = lock(&shared.records).clone();
            json_response(
                200,
                &json!({"bodies": bodies, "headers": headers, "records": records}),
                keep,
            )
        }
        (Method::POST, p @ ("/mock/replies" | "/mock/default")) => {
            let replace_default = p == "/mock/default";
            match read_body(req, max).await {
                Ok(bytes) => set_replies(&shared, &bytes, replace_default, keep),
                Err(BodyError::TooLarge) => error_response(413, "body too large", false),
                Err(BodyError::Gone) => return Err(HangUp),
            }
        }
        (Method::POST, "/mock/outage") => match read_body(req, max).await {
            Ok(bytes) => outage_route(&shared, &bytes),
            Err(BodyError::TooLarge) => error_response(413, "body too large", false),
            Err(BodyError::Gone) => return Err(HangUp),
        },
        (method, _) => error_response(404, &format!("no route for {method} {path}"), keep),
    })
}

fn set_replies(shared: &Shared, bytes: &[u8], replace_default: bool, keep: bool) -> Response<Body> {
    let replies = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Array(items)) => items
            .into_iter()
            .map(serde_json::from_value::<MockReply>)
            .collect::<std::result::Result<Vec<_>, _>>(),
        Ok(item) => serde_json::from_value::<MockReply>(item).map(|r| vec![r]),
        Err(e) => Err(e),
    };
    let replies = match replies {
        Ok(r) => r,
        Err(e) => {
            return error_response(
                400,
                &format!("expected a reply object or a list of them: {e}"),
                keep,
            )
        }
    };
    for (i, r) in replies.iter().enumerate() {
        if let Err(e) = r.validate() {
            return error_response(400, &format!("reply {i}: {e}"), keep);
        }
    }
    let mut s = lock(&shared.script);
    if replace_default {
        match replies.into_iter().last() {
            Some(r) => s.default = r,
            None => return error_response(400, "no reply given", keep),
        }
    } else {
        s.queue.extend(replies);
    }
    json_response(200, &json!({"queued": s.queue.len()}), keep)
}

/// `POST /mock/outage {"for_s": S}`: answer, close this connection, then be down for S
/// seconds (every other connection is cut at once).
fn outage_route(shared: &Shared, bytes: &[u8]) -> Response<Body> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Outage {
        for_s: f64,
    }
    let secs = match serde_json::from_slice::<Outage>(bytes) {
        Ok(o) if o.for_s.is_finite() && o.for_s > 0.0 && o.for_s <= 86_400.0 => o.for_s,
        Ok(o) => {
            return error_response(
                400,
                &format!("for_s must be a number of seconds in (0, 86400], got {}", o.for_s),
                true,
            )
        }
        Err(e) => {
            return error_response(
                400,
                &format!("expected {{\"for_s\": SECONDS}} (the server cannot be resumed over HTTP while down): {e}"),
                true,
            )
        }
    };
    let _ = shared.control.send(Command::Down {
        down_for: Some(Duration::from_secs_f64(secs)),
        spare: tokio::task::try_id(),
        done: None,
    });
    json_response(200, &json!({"down_for_s": secs}), false)
}

/// Work states shared by a request's handler and its computation.
const RUNNING: u8 = 0;
const FINISHED: u8 = 1;
const ABANDONED: u8 = 2;
const CANCELLED: u8 = 3;

/// Held by a chat handler from admission to answer. Dropped early (the client went away, or
/// an outage or stop aborted the connection), it counts the request as abandoned or cut and
/// decides the fate of its computation.
struct Pending {
    shared: Arc<Shared>,
    idx: Option<usize>,
    epoch: u64,
    work: Option<(AbortHandle, Arc<AtomicU8>)>,
    armed: bool,
}

impl Pending {
    /// Enter the in-flight count, unless `max_in_flight` are in flight already.
    fn admit(shared: &Arc<Shared>, idx: Option<usize>) -> Option<Self> {
        let mut s = lock(&shared.stats);
        if shared
            .options
            .max_in_flight
            .is_some_and(|max| s.in_flight >= max)
        {
            return None;
        }
        s.in_flight += 1;
        s.max_in_flight = s.max_in_flight.max(s.in_flight);
        Some(Pending {
            shared: shared.clone(),
            idx,
            epoch: *shared.epoch.borrow(),
            work: None,
            armed: true,
        })
    }

    /// The answer is about to be sent: leave the in-flight count.
    fn done(mut self) {
        self.armed = false;
        lock(&self.shared.stats).in_flight -= 1;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let killed = *self.shared.epoch.borrow() != self.epoch;
        {
            let mut s = lock(&self.shared.stats);
            s.in_flight -= 1;
            if killed {
                s.cut += 1;
            } else {
                s.abandoned += 1;
            }
        }
        let outcome = if killed {
            MockOutcome::Cut
        } else {
            MockOutcome::Abandoned
        };
        self.shared.outcome(self.idx, outcome, None);
        let Some((work, state)) = &self.work else {
            return;
        };
        if killed {
            work.abort();
            return;
        }
        let next = if self.shared.options.cancel_abandoned {
            CANCELLED
        } else {
            ABANDONED
        };
        match state.compare_exchange(RUNNING, next, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) if next == CANCELLED => {
                work.abort();
                lock(&self.shared.stats).abandoned_cancelled += 1;
            }
            Ok(_) => {} // computed to the end; the computation counts itself
            Err(_) => lock(&self.shared.stats).abandoned_computed += 1,
        }
    }
}

/// Decrements a gauge of the stats when dropped.
struct Gauge {
    shared: Arc<Shared>,
    field: fn(&mut MockStats) -> &mut usize,
}

impl Gauge {
    fn enter(
        shared: &Arc<Shared>,
        field: fn(&mut MockStats) -> &mut usize,
        max: fn(&mut MockStats) -> &mut usize,
    ) -> Self {
        let mut s = lock(&shared.stats);
        let now = *field(&mut s) + 1;
        *field(&mut s) = now;
        let m = max(&mut s);
        *m = (*m).max(now);
        Gauge {
            shared: shared.clone(),
            field,
        }
    }
}

impl Drop for Gauge {
    fn drop(&mut self) {
        *(self.field)(&mut lock(&self.shared.stats)) -= 1;
    }
}

/// Wait for a slot, then compute for `work`. Returns the queue wait in milliseconds, or
/// `None` when an outage or stop ended it.
async fn compute(shared: Arc<Shared>, work: Duration, state: Arc<AtomicU8>) -> Option<u64> {
    let mut epoch = shared.epoch.subscribe();
    let start_epoch = *epoch.borrow_and_update();
    let run = async {
        let t0 = Instant::now();
        let permit = match &shared.slots {
            Some(sem) => {
                let _waiting = Gauge::enter(&shared, |s| &mut s.waiting, |s| &mut s.max_waiting);
                sem.clone().acquire_owned().await.ok()
            }
            None => None,
        };
        let waited = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
        {
            let mut s = lock(&shared.stats);
            s.queue_wait_ms_total += waited;
            s.queue_wait_ms_max = s.queue_wait_ms_max.max(waited);
        }
        let _computing = Gauge::enter(&shared, |s| &mut s.computing, |s| &mut s.max_computing);
        tokio::time::sleep(work).await;
        drop(permit);
        waited
    };
    tokio::select! {
        waited = run => {
            if let Err(ABANDONED) = state.compare_exchange(RUNNING, FINISHED, Ordering::SeqCst, Ordering::SeqCst) {
                lock(&shared.stats).abandoned_computed += 1;
            }
            Some(waited)
        }
        _ = epoch.wait_for(|e| *e != start_epoch) => None,
    }
}

fn header_map<B>(req: &Request<B>) -> BTreeMap<String, String> {
    req.headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// One chat-completion request, from receipt to answer.
async fn chat(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    keep: bool,
) -> std::result::Result<Response<Body>, HangUp> {
    let headers = header_map(&req);
    let read = read_body(req, shared.options.max_body_bytes).await;
    let n = {
        let mut s = lock(&shared.stats);
        s.requests += 1;
        s.requests
    };
    let idx = {
        let mut records = lock(&shared.records);
        (records.len() < MAX_RECORDED_BODIES).then(|| {
            records.push(MockRequestRecord {
                n,
                model: None,
                max_tokens: None,
                effective_max_tokens: None,
                tool_choice: None,
                tools: 0,
                tools_ignored: false,
                prompt_tokens: 0,
                outcome: MockOutcome::InFlight,
                status: None,
                completion_tokens: None,
                queue_wait_ms: 0,
                response_format: None,
            });
            records.len() - 1
        })
    };
    let reject = |status: u16, body: Value, keep: bool| {
        shared.answered(status);
        shared.outcome(idx, MockOutcome::Invalid, Some(status));
        Ok(json_response(status, &body, keep))
    };
    let bytes = match read {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            let msg = format!("body larger than {} bytes", shared.options.max_body_bytes);
            return reject(413, chat::error_body("invalid_request_error", &msg), false);
        }
        Err(BodyError::Gone) => {
            shared.outcome(idx, MockOutcome::Abandoned, None);
            lock(&shared.stats).abandoned += 1;
            return Err(HangUp);
        }
    };
    let body: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            let msg = format!("request body is not JSON: {e}");
            return reject(400, chat::error_body("invalid_request_error", &msg), keep);
        }
    };
    {
        let mut bodies = lock(&shared.bodies);
        if bodies.len() < MAX_RECORDED_BODIES {
            bodies.push(body.clone());
            lock(&shared.headers).push(headers);
        }
    }
    let options = &shared.options;
    let info = RequestInfo::read(&body, options);
    shared.update_record(idx, |r| {
        r.model = info.model.clone();
        r.max_tokens = info.max_tokens;
        r.effective_max_tokens = info.effective_max_tokens(options);
        r.tool_choice = info.tool_choice.clone();
        r.tools = info.tools;
        r.tools_ignored = info.tools_ignored;
        r.prompt_tokens = info.prompt_tokens;
        r.response_format = info.response_format.clone();
    });
    let model = info.model.clone().unwrap_or_else(|| "mock".to_string());
    {
        let mut s = lock(&shared.stats);
        s.usage.requests += 1;
        s.models.entry(model.clone()).or_default().requests += 1;
    }
    if let Some(o) = options.outage {
        if n > o.after_requests && !shared.outage_fired.swap(true, Ordering::SeqCst) {
            lock(&shared.stats).cut += 1;
            shared.outcome(idx, MockOutcome::Cut, None);
            let _ = shared.control.send(Command::Down {
                down_for: Some(o.down_for),
                spare: None,
                done: None,
            });
            return Err(HangUp);
        }
    }
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        let msg = "the mock server does not stream; send \"stream\": false";
        return reject(400, chat::error_body("invalid_request_error", msg), keep);
    }
    let checks = [
        options
            .strict
            .reject_null_content
            .then(|| chat::check_null_content(&body))
            .flatten(),
        chat::check_context(&info, options),
        chat::check_response_format(&body, options),
    ];
    if let Some(Rejection { status, body }) = checks.into_iter().flatten().next() {
        return reject(status, body, keep);
    }
    let Some(mut pending) = Pending::admit(&shared, idx) else {
        let retry = options.busy_retry_after;
        lock(&shared.stats).rejected_busy += 1;
        shared.answered(429);
        shared.outcome(idx, MockOutcome::Busy, Some(429));
        let msg = format!(
            "the server is busy: {} requests in flight; retry after {retry} s",
            options.max_in_flight.unwrap_or_default()
        );
        let body = chat::error_body("rate_limit_exceeded", &msg);
        return Ok(respond(429, full(body.to_string()), keep, Some(retry)));
    };
    let reply = lock(&shared.script).pick(&body);
    if reply.stall {
        lock(&shared.stats).stalled += 1;
        // `pending` counts the request as abandoned or cut once the connection goes.
        std::future::pending::<()>().await;
    }
    let plan = chat::plan(&body, &info, &reply, n, options);
    let state = Arc::new(AtomicU8::new(RUNNING));
    let work = tokio::spawn(compute(shared.clone(), plan.work, state.clone()));
    pending.work = Some((work.abort_handle(), state));
    let waited = match work.await {
        Ok(Some(w)) => w,
        // An outage or stop ended the computation; the connection goes with it.
        _ => return Err(HangUp),
    };
    pending.done();
    shared.update_record(idx, |r| r.queue_wait_ms = waited);
    match plan.answer {
        Answer::HangUp => {
            lock(&shared.stats).hung_up += 1;
            shared.outcome(idx, MockOutcome::HungUp, None);
            Err(HangUp)
        }
        Answer::Body {
            status,
            body,
            retry_after,
        } => {
            shared.answered(status);
            shared.outcome(idx, MockOutcome::Answered, Some(status));
            if let Some(u) = plan.usage {
                shared.update_record(idx, |r| r.completion_tokens = Some(u.completion_tokens));
                let mut s = lock(&shared.stats);
                s.usage.add_completion(u);
                s.models.entry(model).or_default().add_completion(u);
            }
            Ok(respond(status, full(body), keep, retry_after))
        }
        Answer::Endless { status } => {
            shared.answered(status);
            shared.outcome(idx, MockOutcome::Answered, Some(status));
            Ok(respond(status, endless(shared.clone()), keep, None))
        }
    }
}

/// A JSON-looking body that never ends, in 16 KiB chunks as fast as the client reads.
fn endless(shared: Arc<Shared>) -> Body {
    let head = Bytes::from_static(
        b"{\"id\": \"chatcmpl-endless\", \"object\": \"chat.completion\", \"choices\": [{\"index\": 0, \"message\": {\"role\": \"assistant\", \"content\": \"",
    );
    let chunk = Bytes::from(vec![b'x'; 16 * 1024]);
    let stream = futures::stream::unfold(Some(head), move |first| {
        let shared = shared.clone();
        let chunk = chunk.clone();
        async move {
            let data = first.unwrap_or(chunk);
            lock(&shared.stats).endless_bytes += data.len() as u64;
            tokio::task::yield_now().await;
            Some((Ok::<_, Infallible>(Frame::data(data)), None))
        }
    });
    StreamBody::new(stream).boxed_unsync()
}
