//! What the mock server counts ([`MockStats`]) and records of each chat request
//! ([`MockRequestRecord`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Requests and tokens of one model (or of all: [`MockStats::usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MockTokenCounts {
    /// Chat requests that asked for this model (any outcome; JSON bodies only).
    pub requests: u64,
    /// Completions answered (2xx with `usage`).
    pub completions: u64,
    /// Prompt tokens reported in those completions.
    pub prompt_tokens: u64,
    /// Completion tokens reported in those completions.
    pub completion_tokens: u64,
}

impl MockTokenCounts {
    pub(super) fn add_completion(&mut self, usage: super::MockUsage) {
        self.completions += 1;
        self.prompt_tokens += usage.prompt_tokens;
        self.completion_tokens += usage.completion_tokens;
    }
}

/// Counters of a running server (`GET /mock/stats`). Per server: replicas count apart.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MockStats {
    /// Chat-completion requests received (also rejected and unparseable ones).
    pub requests: u64,
    /// Other requests (models, health, control routes, unknown routes).
    pub other_requests: u64,
    /// TCP connections accepted.
    pub connections: u64,
    /// Chat requests received and not yet answered (queued, computing or stalled).
    pub in_flight: usize,
    /// Most chat requests in flight at once (from receipt to answer, delays included).
    pub max_in_flight: usize,
    /// Chat requests answered (any status; an endless body counts when its headers go out).
    pub answered: u64,
    /// Chat answers by HTTP status (capacity 429s included).
    pub statuses: BTreeMap<u16, u64>,
    /// 429s sent because more than `max_in_flight` requests were in flight.
    pub rejected_busy: u64,
    /// Requests waiting for a slot now.
    pub waiting: usize,
    /// Most requests waiting for a slot at once.
    pub max_waiting: usize,
    /// Total time requests waited for a slot, in milliseconds.
    pub queue_wait_ms_total: u64,
    /// Longest wait for a slot, in milliseconds.
    pub queue_wait_ms_max: u64,
    /// Requests being computed now (holding a slot, latency and generation time).
    pub computing: usize,
    /// Most requests computed at once (at most `slots`).
    pub max_computing: usize,
    /// Connections closed without an answer by a `hang_up` reply.
    pub hung_up: u64,
    /// Requests given a `stall` reply (never answered).
    pub stalled: u64,
    /// Requests whose client disconnected before the answer.
    pub abandoned: u64,
    /// Abandoned requests the server computed to the end anyway (they held their slot).
    pub abandoned_computed: u64,
    /// Abandoned requests whose computation was cancelled (`cancel_abandoned`).
    pub abandoned_cancelled: u64,
    /// Requests cut without an answer by an outage (the server was killed under them).
    pub cut: u64,
    /// Outages so far (pauses, control route, schedule).
    pub outages: u64,
    /// The server refuses connections right now.
    pub down: bool,
    /// Body bytes sent by `endless_body` replies.
    pub endless_bytes: u64,
    /// Requests and tokens of all models.
    pub usage: MockTokenCounts,
    /// Requests and tokens per requested model (the request's `model`, `"mock"` if absent).
    pub models: BTreeMap<String, MockTokenCounts>,
}

impl MockStats {
    /// Chat answers sent with this HTTP status.
    pub fn status_count(&self, status: u16) -> u64 {
        self.statuses.get(&status).copied().unwrap_or(0)
    }
}

/// What became of a chat request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MockOutcome {
    /// Not answered yet (queued, computing or stalled).
    InFlight,
    /// Answered with the scripted reply (any status, raw or endless body).
    Answered,
    /// Answered 429 at once: more than `max_in_flight` requests were in flight.
    Busy,
    /// Answered an error at once: not JSON, too large, streaming asked, strictness, context.
    Invalid,
    /// The connection was closed without an answer (`hang_up`).
    HungUp,
    /// The client disconnected before the answer.
    Abandoned,
    /// An outage cut it without an answer.
    Cut,
}

/// One chat request as the server saw it (`GET /mock/requests` → `records`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MockRequestRecord {
    /// 1-based number of the chat request, in arrival order.
    pub n: u64,
    /// The request's `model`.
    pub model: Option<String>,
    /// `max_tokens` (or else `max_completion_tokens`) as sent.
    pub max_tokens: Option<u64>,
    /// The completion limit applied: `max_tokens` clamped to what the context window leaves.
    pub effective_max_tokens: Option<u64>,
    /// `tool_choice` as sent.
    pub tool_choice: Option<Value>,
    /// Number of tools offered.
    pub tools: usize,
    /// The offered tools were ignored (strictness: no `tool_choice`).
    pub tools_ignored: bool,
    /// Estimated prompt tokens (see the module docs).
    pub prompt_tokens: u64,
    /// What became of it.
    pub outcome: MockOutcome,
    /// HTTP status of the answer, if one was sent.
    pub status: Option<u16>,
    /// Completion tokens reported, for a completion.
    pub completion_tokens: Option<u64>,
    /// Milliseconds spent waiting for a slot.
    pub queue_wait_ms: u64,
    /// `response_format.type` as sent (`json_object+schema` when it carried a schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<String>,
}
