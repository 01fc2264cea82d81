//! What the mock answers: [`MockReply`], [`MockRule`], [`MockScript`] and their JSON / JSONL
//! script files.

use std::collections::VecDeque;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::llm::ScriptToolCall;
use crate::{Error, Result};

/// Token counts reported by a reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockUsage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
}

/// One scripted answer. See the [module docs](super) for the JSON form.
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
    /// Milliseconds to wait before answering (on top of the server's latency).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
    /// Close the connection without answering.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hang_up: bool,
    /// Accept the request and never answer (the connection stays open until the client gives
    /// up or the server stops).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stall: bool,
    /// Send the status line and headers (`status`, default 200), then a chunked body that
    /// never ends.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub endless_body: bool,
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

    /// Accept the request and never answer.
    pub fn stall() -> Self {
        MockReply {
            stall: true,
            ..MockReply::default()
        }
    }

    /// A 200 status line and headers, then a chunked body that never ends.
    pub fn endless_body() -> Self {
        MockReply {
            endless_body: true,
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

    /// Report this model name.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Check the reply can be sent: a final status (200..=999), a finite non-negative
    /// `retry_after`, and at most one of `hang_up`, `stall`, `endless_body`, `raw_body`.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if let Some(s) = self.status {
            if !(200..=999).contains(&s) {
                return Err(format!("status {s} is not a final HTTP status (200..=999)"));
            }
        }
        if let Some(r) = self.retry_after {
            if !(r.is_finite() && r >= 0.0) {
                return Err(format!(
                    "retry_after must be a non-negative number of seconds, got {r}"
                ));
            }
        }
        let modes: Vec<&str> = [
            ("hang_up", self.hang_up),
            ("stall", self.stall),
            ("endless_body", self.endless_body),
            ("raw_body", self.raw_body.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
        if modes.len() > 1 {
            return Err(format!(
                "{} exclude each other (a reply is answered one way)",
                modes.join(" and ")
            ));
        }
        Ok(())
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
    /// Whether the request `body` matches (as sent, also when strictness ignores its tools).
    pub fn matches(&self, body: &Value) -> bool {
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

/// What the server answers. See the [module docs](super).
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

    /// Check every reply ([`MockReply::validate`]); the error names the reply
    /// (`queue[2]`, `rules[0].reply`, `default`).
    pub fn validate(&self) -> std::result::Result<(), (String, String)> {
        for (i, r) in self.queue.iter().enumerate() {
            r.validate().map_err(|e| (format!("queue[{i}]"), e))?;
        }
        for (i, r) in self.rules.iter().enumerate() {
            r.reply
                .validate()
                .map_err(|e| (format!("rules[{i}].reply"), e))?;
        }
        self.default
            .validate()
            .map_err(|e| ("default".to_string(), e))
    }

    /// Parse a script: a JSON object with `queue` / `rules` / `default`, or JSONL replies.
    /// `path` names the source in errors, with the line (JSONL) or the reply (`queue[2]`).
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let trimmed = text.trim();
        if let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(trimmed) {
            if obj.is_empty()
                || obj.contains_key("queue")
                || obj.contains_key("rules")
                || obj.contains_key("default")
            {
                let script: MockScript = serde_json::from_value(Value::Object(obj))
                    .map_err(|e| Error::parse(path, "$", e.to_string()))?;
                script
                    .validate()
                    .map_err(|(at, e)| Error::parse(path, at, e))?;
                return Ok(script);
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
            reply
                .validate()
                .map_err(|e| Error::parse(path, format!("line {}", i + 1), e))?;
            queue.push(reply);
        }
        Ok(MockScript::queue(queue))
    }

    /// Read a script file.
    pub fn from_file(path: &Path) -> Result<Self> {
        MockScript::parse(&crate::io::read_to_string(path)?, path)
    }

    /// Every model name the script reports (for `GET /v1/models`), after `"mock"`.
    pub(super) fn models(&self) -> Vec<String> {
        let mut models = vec!["mock".to_string()];
        let mut add = |m: &Option<String>| {
            if let Some(m) = m {
                if !models.contains(m) {
                    models.push(m.clone());
                }
            }
        };
        add(&self.default.model);
        for r in &self.queue {
            add(&r.model);
        }
        for r in &self.rules {
            add(&r.model);
            add(&r.reply.model);
        }
        models
    }
}

/// The script of a running server: rules with their uses left, the queue, the default.
pub(super) struct ScriptState {
    rules: Vec<(MockRule, Option<u64>)>,
    pub(super) queue: VecDeque<MockReply>,
    pub(super) default: MockReply,
}

impl ScriptState {
    pub(super) fn new(script: MockScript) -> Self {
        ScriptState {
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
        }
    }

    /// The first rule that matches and has uses left, else the next queued reply, else the
    /// default. Deterministic for a given script and request order.
    pub(super) fn pick(&mut self, body: &Value) -> MockReply {
        for (rule, left) in self.rules.iter_mut() {
            if left.is_some_and(|n| n == 0) || !rule.matches(body) {
                continue;
            }
            if let Some(n) = left.as_mut() {
                *n -= 1;
            }
            return rule.reply.clone();
        }
        if let Some(r) = self.queue.pop_front() {
            return r;
        }
        self.default.clone()
    }
}
