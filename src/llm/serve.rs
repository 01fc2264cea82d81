//! An OpenAI-compatible endpoint in front of a [`ChatModel`]: how simulators that ppol starts
//! (external worlds, τ²-bench's orchestrator, the actors of a Ray cluster) reach the run's model.
//! Every call goes through the model it wraps — for a run, the [`LlmClient`](super::LlmClient)
//! with the ledger — so it counts against the budget, is cached and lands in the cost ledger like
//! ppol's own calls.
//!
//! It listens on 127.0.0.1 (or, for the workers of a Ray cluster, the address of
//! [`ModelEndpoint::start_at`]) and every request must carry the endpoint's bearer token,
//! `Authorization: Bearer <token>`: a random token made when the endpoint starts (one per world,
//! so per run), given to simulators as `$PPOL_LLM_API_KEY` beside `$PPOL_LLM_BASE_URL`
//! ([`ModelEndpoint::env`]). A request without it, or with another, is answered 401 before its
//! body is read: it reaches no model and costs nothing (counted by [`ModelEndpoint::refused`]).
//!
//! `POST /v1/chat/completions` (also without `/v1`): the request's `model` picks the role
//! (`user-sim` or `user`, with or without a `openai/` prefix, is the user simulator; anything
//! else the agent); `messages`, `tools`, `temperature`, `max_tokens` (or
//! `max_completion_tokens`) and `seed` are passed on; `"ppol_accept_empty": true` returns an
//! answer with neither text nor tool calls as it came (a caller with its own fallback; by
//! default such an answer is a failed attempt, retried). Streaming is refused (400). A spent
//! budget answers 402, any other failure 502, each with an OpenAI error object naming it.
//! `GET /v1/models` lists the two roles.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Map, Value};

use super::{CallRole, ChatModel, ChatRequest, ServeLimits, ToolSpec};

mod conns;
use crate::dialogue::{Role, ToolCall, Turn};
use crate::{Error, Result};

/// Environment variable holding the endpoint's base URL for the simulators ppol starts.
pub const BASE_URL_ENV_VAR: &str = "PPOL_LLM_BASE_URL";
/// Environment variable holding the endpoint's bearer token for the simulators ppol starts.
pub const API_KEY_ENV_VAR: &str = "PPOL_LLM_API_KEY";

/// A running endpoint; it stops when dropped.
pub struct ModelEndpoint {
    addr: SocketAddr,
    base_url: String,
    api_key: String,
    task: tokio::task::JoinHandle<()>,
    counters: Arc<Counters>,
    conns: Arc<conns::Conns>,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    refused: AtomicU64,
    accept_errors: AtomicU64,
    timed_out: AtomicU64,
}

/// What every connection's requests share.
struct Shared {
    model: Arc<dyn ChatModel>,
    counters: Arc<Counters>,
    key: String,
    /// Request bytes in flight, in KiB (`[llm.serve] bodies_in_flight_bytes`, at least
    /// `max_body_bytes`: [`ServeLimits::effective_bodies_in_flight_bytes`]).
    bodies: Arc<tokio::sync::Semaphore>,
    limits: ServeLimits,
}

/// Bytes in whole KiB, rounded up (the unit of the body semaphore).
fn kib(bytes: u64) -> usize {
    bytes.div_ceil(1024) as usize
}

/// Accept connections while there is room for them ([`conns::Conns::room`]); accept errors
/// (out of file descriptors, a connection reset before it was taken) back off from 10 ms to
/// 1 s instead of spinning, logged once per streak.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    conns: Arc<conns::Conns>,
    shared: Arc<Shared>,
) {
    let mut backoff = std::time::Duration::from_millis(10);
    loop {
        conns.room().await;
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff = std::time::Duration::from_millis(10);
                stream
            }
            Err(e) => {
                let n = shared.counters.accept_errors.fetch_add(1, Ordering::SeqCst);
                if backoff == std::time::Duration::from_millis(10) {
                    tracing::warn!(
                        "ppol's model endpoint cannot accept a connection ({e}, {} so far): \
                         backing off",
                        n + 1
                    );
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(1));
                continue;
            }
        };
        let (conn, close) = conns.open();
        let shared = shared.clone();
        tokio::spawn(async move {
            let conn = Arc::new(conn);
            let header_timeout = crate::limits::duration(shared.limits.header_timeout_s);
            let service = {
                let (shared, conn) = (shared.clone(), conn.clone());
                hyper::service::service_fn(move |req| {
                    let busy = conn.busy();
                    let shared = shared.clone();
                    async move {
                        let r = handle(req, &shared).await;
                        drop(busy);
                        r
                    }
                })
            };
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout);
            let serving = http.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                r = serving => {
                    if let Err(e) = r {
                        if e.is_timeout() {
                            shared.counters.timed_out.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                _ = close => {}
            }
            drop(conn);
        });
    }
}

impl ModelEndpoint {
    /// Serve `model` on an ephemeral port of 127.0.0.1.
    pub async fn start(model: Arc<dyn ChatModel>) -> Result<ModelEndpoint> {
        Self::start_at(model, SocketAddr::from(([127, 0, 0, 1], 0)), None).await
    }

    /// Serve `model` on `bind` (port 0: an ephemeral one); the base URL given to simulators
    /// names `advertise` (a host name or address the workers reach this machine by) instead of
    /// the bound address when it is given.
    pub async fn start_at(
        model: Arc<dyn ChatModel>,
        bind: SocketAddr,
        advertise: Option<&str>,
    ) -> Result<ModelEndpoint> {
        let where_ = std::path::PathBuf::from(bind.to_string());
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|e| Error::io("binding", &where_, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("binding", &where_, e))?;
        let api_key = format!("ppol-{}", crate::io::hex(&rand::random::<[u8; 24]>()));
        let limits = model.serve_limits();
        limits.validate("llm.serve")?;
        conns::make_room_for(limits.max_connections);
        let counters = Arc::new(Counters::default());
        let conns = conns::Conns::new(limits.max_connections);
        let shared = Arc::new(Shared {
            model,
            counters: counters.clone(),
            key: api_key.clone(),
            bodies: Arc::new(tokio::sync::Semaphore::new(kib(
                limits.effective_bodies_in_flight_bytes()
            ))),
            limits,
        });
        let task = tokio::spawn(accept_loop(listener, conns.clone(), shared));
        let host = match advertise {
            Some(h) if h.contains(':') && !h.starts_with('[') => format!("[{h}]:{}", addr.port()),
            Some(h) => format!("{h}:{}", addr.port()),
            None => addr.to_string(),
        };
        Ok(ModelEndpoint {
            base_url: format!("http://{host}/v1"),
            addr,
            api_key,
            task,
            counters,
            conns,
        })
    }

    /// `http://127.0.0.1:PORT/v1` (or the advertised host).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The bearer token every request must carry.
    pub fn api_key(&self) -> &str {
        &self.api_key
    }

    /// The environment of a simulator: `PPOL_LLM_BASE_URL` and `PPOL_LLM_API_KEY`.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (BASE_URL_ENV_VAR.into(), self.base_url.clone()),
            (API_KEY_ENV_VAR.into(), self.api_key.clone()),
        ]
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Chat requests answered so far (errors included).
    pub fn calls(&self) -> u64 {
        self.counters.calls.load(Ordering::SeqCst)
    }

    /// Requests refused with 401 (no token, or a wrong one).
    pub fn refused(&self) -> u64 {
        self.counters.refused.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Idle connections closed to make room for new ones (`[llm.serve] max_connections`).
    pub fn evicted(&self) -> u64 {
        self.conns.evicted()
    }

    /// Connections closed because their headers or body came too slowly.
    pub fn timed_out(&self) -> u64 {
        self.counters.timed_out.load(Ordering::SeqCst)
    }

    /// Failed `accept` calls (each followed by a backoff).
    pub fn accept_errors(&self) -> u64 {
        self.counters.accept_errors.load(Ordering::SeqCst)
    }
}

/// Whether a request's `Authorization` header carries `key` as its bearer token (compared in
/// time independent of where the first difference is).
fn authorized(req: &Request<Incoming>, key: &str) -> bool {
    let Some(given) = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let token = given
        .strip_prefix("Bearer ")
        .or_else(|| given.strip_prefix("bearer "))
        .unwrap_or("")
        .trim();
    token.len() == key.len()
        && token
            .bytes()
            .zip(key.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

impl Drop for ModelEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn reply(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("valid response")
}

fn too_large(max: u64) -> Response<Full<Bytes>> {
    let mut r = error_reply(
        StatusCode::PAYLOAD_TOO_LARGE,
        "invalid_request_error",
        &format!(
            "request body: larger than {} (`[llm.serve] max_body_bytes`)",
            crate::limits::bytes(max)
        ),
    );
    r.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    r
}

fn error_reply(status: StatusCode, kind: &str, message: &str) -> Response<Full<Bytes>> {
    reply(
        status,
        &json!({"error": {"message": message, "type": kind, "code": status.as_u16()}}),
    )
}

async fn handle(
    req: Request<Incoming>,
    shared: &Shared,
) -> std::result::Result<Response<Full<Bytes>>, Infallible> {
    let (model, counters) = (&shared.model, &shared.counters);
    if !authorized(&req, &shared.key) {
        counters.refused.fetch_add(1, Ordering::SeqCst);
        let mut r = error_reply(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            &format!(
                "ppol's model endpoint needs the run's token: send `Authorization: Bearer \
                 ${API_KEY_ENV_VAR}` (the token ppol gives the simulators it starts)"
            ),
        );
        r.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer"),
        );
        return Ok(r);
    }
    let calls = &counters.calls;
    let path = req.uri().path().trim_end_matches('/').to_string();
    if req.method() == Method::GET && (path == "/v1/models" || path == "/models") {
        let data: Vec<Value> = ["agent", "user-sim"]
            .iter()
            .map(|m| json!({"id": m, "object": "model", "owned_by": "ppol"}))
            .collect();
        return Ok(reply(
            StatusCode::OK,
            &json!({"object": "list", "data": data}),
        ));
    }
    if req.method() != Method::POST
        || !(path == "/v1/chat/completions" || path == "/chat/completions")
    {
        return Ok(error_reply(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("ppol's model endpoint serves POST /v1/chat/completions, not {path}"),
        ));
    }
    let limits = &shared.limits;
    let max = limits.max_body_bytes;
    let announced = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if announced.is_some_and(|n| n > max) {
        return Ok(too_large(max));
    }
    // Room for the body among the bytes in flight, before a byte of it is read: a body of
    // unknown length takes room for the largest.
    let need = announced.unwrap_or(max).max(1);
    let Ok(_room) = shared
        .bodies
        .clone()
        .acquire_many_owned(kib(need).min(u32::MAX as usize) as u32)
        .await
    else {
        return Ok(error_reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "ppol's model endpoint is shutting down",
        ));
    };
    let read = Limited::new(req.into_body(), need as usize).collect();
    let body =
        match tokio::time::timeout(crate::limits::duration(limits.body_timeout_s), read).await {
            Ok(Ok(b)) => b.to_bytes(),
            Ok(Err(e))
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                return Ok(too_large(max))
            }
            Ok(Err(e)) => {
                return Ok(error_reply(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    &format!("request body: {e}"),
                ))
            }
            Err(_) => {
                counters.timed_out.fetch_add(1, Ordering::SeqCst);
                let mut r = error_reply(
                    StatusCode::REQUEST_TIMEOUT,
                    "invalid_request_error",
                    &format!(
                        "request body: not received within {} s (`[llm.serve] body_timeout_s`)",
                        crate::limits::shown(limits.body_timeout_s)
                    ),
                );
                r.headers_mut().insert(
                    hyper::header::CONNECTION,
                    hyper::header::HeaderValue::from_static("close"),
                );
                return Ok(r);
            }
        };
    // each form is dropped once the next is made: one request holds about one copy at a time
    let value = serde_json::from_slice::<Value>(&body).map_err(|e| format!("not JSON: {e}"));
    drop(body);
    let request = match value.and_then(|v| chat_request(&v)) {
        Ok(r) => r,
        Err(m) => {
            return Ok(error_reply(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &m,
            ))
        }
    };
    calls.fetch_add(1, Ordering::SeqCst);
    match model.chat(&request).await {
        Ok(r) => {
            let message = match super::openai::message_json(&r.message, 0) {
                Ok(m) => m,
                Err(e) => {
                    return Ok(error_reply(
                        StatusCode::BAD_GATEWAY,
                        "upstream_error",
                        &e.message,
                    ))
                }
            };
            let finish = r.finish_reason.clone().unwrap_or_else(|| {
                if r.message.tool_calls.is_empty() {
                    "stop".into()
                } else {
                    "tool_calls".into()
                }
            });
            let n = calls.load(Ordering::SeqCst);
            Ok(reply(
                StatusCode::OK,
                &json!({
                    "id": format!("chatcmpl-ppol-{n}"),
                    "object": "chat.completion",
                    "created": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
                    "model": r.model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {
                        "prompt_tokens": r.usage.prompt_tokens,
                        "completion_tokens": r.usage.completion_tokens,
                        "total_tokens": r.usage.prompt_tokens + r.usage.completion_tokens,
                    },
                }),
            ))
        }
        Err(Error::BudgetExhausted(m)) => Ok(error_reply(
            StatusCode::PAYMENT_REQUIRED,
            "budget_exhausted",
            &format!("the run's budget is spent: {m}"),
        )),
        Err(e) => Ok(error_reply(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            &e.to_string(),
        )),
    }
}

/// One OpenAI chat message as a [`Turn`]: `content` a string, null or a list of text parts;
/// `developer` is the system role of newer clients; tool-call arguments a JSON string or object.
pub fn turn_from_openai(m: &Value) -> std::result::Result<Turn, String> {
    let obj = m.as_object().ok_or("must be an object")?;
    let role = match obj.get("role").and_then(Value::as_str) {
        Some("system" | "developer") => Role::System,
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool" | "function") => Role::Tool,
        other => return Err(format!("unknown role {other:?}")),
    };
    let content = match obj.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        Some(other) => {
            return Err(format!(
                "content must be a string or a list of parts, got {other}"
            ))
        }
    };
    let mut tool_calls = Vec::new();
    if let Some(calls) = obj.get("tool_calls").and_then(Value::as_array) {
        for (j, c) in calls.iter().enumerate() {
            let f = c.get("function").unwrap_or(c);
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .ok_or(format!("tool_calls[{j}]: no function name"))?;
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => {
                    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
                }
                Some(v) => v.clone(),
                None => Value::Object(Map::new()),
            };
            tool_calls.push(ToolCall {
                id: c
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                name: name.to_string(),
                arguments,
            });
        }
    }
    Ok(Turn {
        role,
        content,
        tool_calls,
        tool_call_id: obj
            .get("tool_call_id")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// The role a request's `model` names.
pub fn role_of_model(model: &str) -> CallRole {
    let m = model.rsplit('/').next().unwrap_or(model);
    match m {
        "user-sim" | "user_sim" | "user" => CallRole::UserSim,
        _ => CallRole::Agent,
    }
}

/// An OpenAI chat-completions body as a [`ChatRequest`]; the error names the bad key.
pub fn chat_request(v: &Value) -> std::result::Result<ChatRequest, String> {
    let obj = v.as_object().ok_or("the body must be a JSON object")?;
    if obj.get("stream").and_then(Value::as_bool) == Some(true) {
        return Err("stream: streaming is not supported by ppol's model endpoint".into());
    }
    let role = role_of_model(obj.get("model").and_then(Value::as_str).unwrap_or(""));
    let msgs = obj
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("messages: a list of messages is required")?;
    let messages = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| turn_from_openai(m).map_err(|e| format!("messages[{i}]: {e}")))
        .collect::<std::result::Result<Vec<Turn>, String>>()?;
    let mut tools = Vec::new();
    if let Some(ts) = obj.get("tools").and_then(Value::as_array) {
        for (i, t) in ts.iter().enumerate() {
            tools.push(
                ToolSpec::from_openai(t)
                    .ok_or(format!("tools[{i}]: a function tool needs a name"))?,
            );
        }
    }
    let num = |k: &str| obj.get(k).and_then(Value::as_f64);
    let max_tokens = obj
        .get("max_completion_tokens")
        .or_else(|| obj.get("max_tokens"))
        .and_then(Value::as_u64)
        .map(|t| t.min(u64::from(u32::MAX)) as u32);
    let mut r = ChatRequest::new(role, messages);
    r.tools = tools;
    r.temperature = num("temperature").map(|t| t as f32);
    r.max_tokens = max_tokens;
    // a simulator cannot raise the role's cap (nor what a call may cost)
    r.external = true;
    r.seed = obj.get("seed").and_then(Value::as_u64);
    // a caller with a fallback of its own (τ²'s ppol_llm_agent) takes an empty answer as is
    r.accept_empty = obj.get("ppol_accept_empty").and_then(Value::as_bool) == Some(true);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ScriptedModel;

    #[test]
    fn requests_map_roles_tools_and_content_parts() {
        let r = chat_request(&json!({
            "model": "openai/user-sim",
            "messages": [{"role": "developer", "content": [{"type": "text", "text": "be"}, {"type": "text", "text": " brief"}]},
                         {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "max_completion_tokens": 12, "temperature": 0.5, "seed": 3
        }))
        .unwrap();
        assert_eq!(r.role, CallRole::UserSim);
        assert_eq!(r.messages[0].content, "be brief");
        assert_eq!(r.messages[1].tool_calls[0].arguments, json!({"a": 1}));
        assert_eq!(r.tools[0].name, "f");
        assert_eq!((r.max_tokens, r.seed), (Some(12), Some(3)));
        assert!(!r.accept_empty);
        let r = chat_request(&json!({"model": "agent", "messages": [], "ppol_accept_empty": true}));
        assert!(r.unwrap().accept_empty);
        assert_eq!(role_of_model("gpt-4o"), CallRole::Agent);
        assert!(chat_request(&json!({"model": "agent", "messages": [], "stream": true})).is_err());
        assert!(chat_request(&json!({"model": "agent"}))
            .unwrap_err()
            .contains("messages"));
    }

    #[tokio::test]
    async fn the_endpoint_answers_through_the_model_with_the_runs_token_only() {
        let scripted = Arc::new(ScriptedModel::new());
        let model: Arc<dyn ChatModel> = scripted.clone();
        let ep = ModelEndpoint::start(model).await.unwrap();
        assert!(ep.base_url().starts_with("http://127.0.0.1:"));
        let env: std::collections::HashMap<_, _> = ep.env().into_iter().collect();
        assert_eq!(env[BASE_URL_ENV_VAR], ep.base_url());
        assert_eq!(env[API_KEY_ENV_VAR], ep.api_key());
        assert!(ep.api_key().len() >= 40, "{}", ep.api_key());
        let other = ModelEndpoint::start(Arc::new(ScriptedModel::new()))
            .await
            .unwrap();
        assert_ne!(ep.api_key(), other.api_key(), "a token per endpoint");
        let client = reqwest::Client::new();
        let url = format!("{}/chat/completions", ep.base_url());
        let body = json!({"model": "agent", "messages": [{"role": "user", "content": "hello"}]});
        let r: Value = client
            .post(&url)
            .bearer_auth(ep.api_key())
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["choices"][0]["message"]["role"], "assistant");
        assert!(r["choices"][0]["message"]["content"].is_string(), "{r}");
        assert_eq!(scripted.served(), 1);
        // without the token, with another endpoint's, or with a malformed header: 401, and
        // the model is not asked
        for auth in [None, Some(other.api_key().to_string()), Some(String::new())] {
            let mut rq = client.post(&url).json(&body);
            if let Some(a) = auth {
                rq = rq.bearer_auth(a);
            }
            let refused = rq.send().await.unwrap();
            assert_eq!(refused.status().as_u16(), 401);
            let e: Value = refused.json().await.unwrap();
            assert!(
                e["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains(API_KEY_ENV_VAR),
                "{e}"
            );
        }
        let models = client
            .get(format!("{}/models", ep.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(models.status().as_u16(), 401, "every route needs the token");
        assert_eq!(scripted.served(), 1, "refused requests reach no model");
        assert_eq!((ep.calls(), ep.refused()), (1, 4));
        let bad = client
            .post(&url)
            .bearer_auth(ep.api_key())
            .body("nope")
            .send()
            .await
            .unwrap();
        assert_eq!(bad.status().as_u16(), 400);
        assert_eq!(ep.calls(), 1);
    }

    #[tokio::test]
    async fn the_endpoint_can_listen_elsewhere_and_advertise_a_host() {
        let ep = ModelEndpoint::start_at(
            Arc::new(ScriptedModel::new()),
            SocketAddr::from(([127, 0, 0, 1], 0)),
            Some("localhost"),
        )
        .await
        .unwrap();
        let port = ep.addr().port();
        assert_eq!(ep.base_url(), format!("http://localhost:{port}/v1"));
        let r = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}/v1/models"))
            .bearer_auth(ep.api_key())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    }
}
