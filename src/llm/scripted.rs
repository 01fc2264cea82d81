//! The `scripted` provider: deterministic, offline, free.
//!
//! It is what tests use when they need a [`ChatModel`] without an endpoint, and what the default
//! offline run plugs into roles that need *some* LLM answer. It is **not** the rule-based
//! offline user/agent engine (a separate component that actually plays a τ² dialogue); it only
//! produces canned text.
//!
//! Three modes:
//!
//! * **Replay** — a JSONL script, one reply per line:
//!   ```text
//!   {"content": "Hi, I want to change my flight."}
//!   {"role": "agent", "content": "", "tool_calls": [{"name": "get_reservation", "arguments": {"id": "ABC"}}]}
//!   {"role": "user-sim", "content": "###STOP###"}
//!   ```
//!   A request with role R takes the next line keyed `"role": R`, else the next line without
//!   a role. Tool-call `id`s default to `call_N`; `arguments` must be a JSON object. Blank
//!   lines and lines starting with `#` or `//` are skipped. When no line is left for a role the
//!   call fails ([`FailureKind::Fatal`], not retried). A line with neither text nor tool calls
//!   is an empty answer, which [`super::LlmClient`] retries like any empty answer (taking the
//!   next line). Under concurrency the order in which
//!   requests take lines is the order in which they arrive.
//! * **Rules** — a JSON file holding one object `{"rules": [{"contains": "refund", "reply":
//!   "..."}], "default": "..."}` ([`ScriptedRules`]): the first rule whose `contains` occurs in
//!   the request's last message answers, else `default`. Good for generator programs, whose
//!   prompts are known.
//! * **Hash** (no script) — the answer is a short fixed-form text derived from the SHA-256 of
//!   the request (role, messages, tools): `"Okay. (scripted user-sim 1a2b3c4d)"`. Same request,
//!   same answer, on every machine.
//!
//! Token counts are estimated as one token per four characters.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::cache::canonical_json;
use super::{
    check_answer_for, llm_error, AttemptError, CallRole, ChatModel, ChatRequest, ChatResponse,
    FailureKind, Provider, ScriptToolCall, Usage,
};
use crate::dialogue::{Role, ToolCall, Turn};
use crate::io::sha256_hex;
use crate::{Error, Result};

/// One line of a script.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedReply {
    /// Only requests of this role take the line; `None`: any role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<CallRole>,
    /// Assistant text.
    #[serde(default)]
    pub content: String,
    /// Tool calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptToolCall>,
    /// Finish reason (default `tool_calls` with tool calls, else `stop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

impl ScriptedReply {
    /// A text reply for any role.
    pub fn text(content: impl Into<String>) -> Self {
        ScriptedReply {
            content: content.into(),
            ..ScriptedReply::default()
        }
    }
}

#[derive(Debug, Default)]
struct Queues {
    any: VecDeque<ScriptedReply>,
    by_role: BTreeMap<CallRole, VecDeque<ScriptedReply>>,
    served: u64,
}

/// Substring rules (a script file holding one JSON object
/// `{"rules": [{"contains": "...", "reply": "..."}], "default": "..."}`): the first rule whose
/// `contains` occurs in the last message of the request answers; otherwise `default`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedRules {
    /// Rules, in order.
    #[serde(default)]
    pub rules: Vec<ScriptedRule>,
    /// Reply when no rule matches.
    #[serde(default)]
    pub default: String,
}

/// One rule of [`ScriptedRules`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedRule {
    /// Substring of the request's last message.
    pub contains: String,
    /// Reply text.
    pub reply: String,
}

impl ScriptedRules {
    fn reply_to(&self, request: &ChatRequest) -> &str {
        let last = request.messages.last().map_or("", |t| t.content.as_str());
        self.rules
            .iter()
            .find(|r| last.contains(&r.contains))
            .map_or(self.default.as_str(), |r| r.reply.as_str())
    }
}

/// The deterministic offline provider. See the [module docs](self).
#[derive(Debug)]
pub struct ScriptedModel {
    rules: Option<ScriptedRules>,
    queues: Option<Mutex<Queues>>,
    source: Option<PathBuf>,
    served: Mutex<u64>,
}

impl Default for ScriptedModel {
    fn default() -> Self {
        ScriptedModel::new()
    }
}

fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

impl ScriptedModel {
    /// Hash mode: answers derived from the request.
    pub fn new() -> Self {
        ScriptedModel {
            rules: None,
            queues: None,
            source: None,
            served: Mutex::new(0),
        }
    }

    /// Replay mode from replies in memory.
    pub fn from_replies(replies: impl IntoIterator<Item = ScriptedReply>) -> Self {
        let mut q = Queues::default();
        for r in replies {
            match r.role {
                Some(role) => q.by_role.entry(role).or_default().push_back(r),
                None => q.any.push_back(r),
            }
        }
        ScriptedModel {
            rules: None,
            queues: Some(Mutex::new(q)),
            source: None,
            served: Mutex::new(0),
        }
    }

    /// Replay mode from JSONL text; `path` names the source in errors.
    pub fn from_jsonl_str(text: &str, path: &Path) -> Result<Self> {
        let mut replies = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') || l.starts_with("//") {
                continue;
            }
            let reply: ScriptedReply = serde_json::from_str(l)
                .map_err(|e| Error::parse(path, format!("line {}", i + 1), e.to_string()))?;
            for (j, c) in reply.tool_calls.iter().enumerate() {
                if !c.arguments.is_object() {
                    return Err(Error::parse(
                        path,
                        format!("line {}: tool_calls[{j}].arguments", i + 1),
                        "must be a JSON object",
                    ));
                }
            }
            replies.push(reply);
        }
        let mut model = ScriptedModel::from_replies(replies);
        model.source = Some(path.to_path_buf());
        Ok(model)
    }

    /// Rule mode (see [`ScriptedRules`]).
    pub fn from_rules(rules: ScriptedRules) -> Self {
        ScriptedModel {
            rules: Some(rules),
            ..ScriptedModel::new()
        }
    }

    /// Replay mode from a JSONL file, or rule mode from a JSON file holding one object with
    /// `rules` and/or `default`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = crate::io::read_to_string(path)?;
        if let Ok(serde_json::Value::Object(obj)) = serde_json::from_str(&text) {
            if obj.contains_key("rules") || obj.contains_key("default") {
                let rules: ScriptedRules =
                    serde_json::from_value(serde_json::Value::Object(obj))
                        .map_err(|e| Error::parse(path, "$", format!("not a rules script: {e}")))?;
                let mut model = ScriptedModel::from_rules(rules);
                model.source = Some(path.to_path_buf());
                return Ok(model);
            }
        }
        ScriptedModel::from_jsonl_str(&text, path)
    }

    /// Hash mode without a script, replay mode with one.
    pub fn from_script(script: Option<&Path>) -> Result<Self> {
        match script {
            Some(p) => ScriptedModel::from_file(p),
            None => Ok(ScriptedModel::new()),
        }
    }

    /// Lines not yet replayed (0 in hash mode).
    pub fn remaining(&self) -> usize {
        match &self.queues {
            Some(q) => {
                let q = q.lock().unwrap_or_else(|e| e.into_inner());
                q.any.len() + q.by_role.values().map(VecDeque::len).sum::<usize>()
            }
            None => 0,
        }
    }

    /// Answers given so far.
    pub fn served(&self) -> u64 {
        *self.served.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn next_reply(
        &self,
        role: CallRole,
    ) -> std::result::Result<Option<(ScriptedReply, u64)>, AttemptError> {
        let Some(queues) = &self.queues else {
            return Ok(None);
        };
        let mut q = queues.lock().unwrap_or_else(|e| e.into_inner());
        let reply = q
            .by_role
            .get_mut(&role)
            .and_then(VecDeque::pop_front)
            .or_else(|| q.any.pop_front());
        match reply {
            Some(r) => {
                q.served += 1;
                Ok(Some((r, q.served)))
            }
            None => Err(AttemptError::new(
                FailureKind::Fatal,
                format!(
                    "script{} has no reply left for role {} after {} replies",
                    self.source
                        .as_ref()
                        .map(|p| format!(" '{}'", p.display()))
                        .unwrap_or_default(),
                    role.as_str(),
                    q.served
                ),
            )),
        }
    }

    fn answer(&self, request: &ChatRequest) -> std::result::Result<ChatResponse, AttemptError> {
        let prompt_tokens: u64 = request
            .messages
            .iter()
            .map(|t| estimate_tokens(&t.content) + 1)
            .sum();
        let scripted = match &self.rules {
            Some(rules) => Some((ScriptedReply::text(rules.reply_to(request)), 0)),
            None => self.next_reply(request.role)?,
        };
        let message = match scripted {
            Some((reply, n)) => {
                let tool_calls = reply
                    .tool_calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| ToolCall {
                        id: c.id.clone().unwrap_or_else(|| format!("call_{n}_{i}")),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    })
                    .collect::<Vec<_>>();
                let finish = reply.finish_reason.clone().unwrap_or_else(|| {
                    if tool_calls.is_empty() {
                        "stop"
                    } else {
                        "tool_calls"
                    }
                    .to_string()
                });
                (
                    Turn {
                        role: Role::Assistant,
                        content: reply.content,
                        tool_calls,
                        tool_call_id: None,
                    },
                    finish,
                )
            }
            None => {
                let material = json!({
                    "role": request.role,
                    "messages": request.messages,
                    "tools": request.tools,
                });
                let hash = sha256_hex(canonical_json(&material).as_bytes());
                (
                    Turn::new(
                        Role::Assistant,
                        format!("Okay. (scripted {} {})", request.role.as_str(), &hash[..8]),
                    ),
                    "stop".to_string(),
                )
            }
        };
        *self.served.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        let (message, finish) = message;
        let completion_tokens = estimate_tokens(&message.content)
            + message
                .tool_calls
                .iter()
                .map(|c| estimate_tokens(&c.arguments.to_string()) + estimate_tokens(&c.name))
                .sum::<u64>();
        check_answer_for(
            request,
            ChatResponse {
                message,
                usage: Usage {
                    prompt_tokens,
                    completion_tokens,
                },
                model: "scripted".to_string(),
                cached: false,
                finish_reason: Some(finish),
                notes: Vec::new(),
                schema_mode: None,
            },
        )
    }
}

#[async_trait]
impl Provider for ScriptedModel {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn endpoint(&self) -> String {
        match &self.source {
            Some(p) => format!("scripted:{}", p.display()),
            None => "scripted".to_string(),
        }
    }

    fn schema_support(&self) -> Option<bool> {
        Some(false)
    }

    fn model(&self) -> &str {
        "scripted"
    }

    fn cacheable(&self) -> bool {
        false
    }

    async fn attempt(
        &self,
        request: &ChatRequest,
    ) -> std::result::Result<ChatResponse, AttemptError> {
        self.answer(request)
    }
}

#[async_trait]
impl ChatModel for ScriptedModel {
    fn describe(&self) -> String {
        self.endpoint()
    }

    /// A script replays answers; it constrains nothing (callers keep to free-text protocols).
    fn schema_support(&self, _role: CallRole) -> Option<bool> {
        Some(false)
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse> {
        self.answer(request)
            .map_err(|e| llm_error(&self.endpoint(), request.role, e.to_string()))
    }
}
