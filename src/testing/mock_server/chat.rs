//! The chat-completion answer as data: token estimates, llama.cpp checks, and the
//! [`Plan`] for one scripted reply (what to send and how long computing it takes). No I/O.

use std::time::Duration;

use serde_json::{json, Map, Value};

use super::options::{MockOptions, MockResponseFormat};
use super::script::{MockReply, MockUsage};

/// Filler text of a completion that runs until the context window is full.
const FILLER: &str = "and so it goes on, ";

/// Tokens of a text: one per 4 characters, rounded up.
pub(super) fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// The text of a message content: a string, or the `text` of each part of an array.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// What the server reads from a chat request before choosing a reply.
#[derive(Debug, Clone)]
pub(super) struct RequestInfo {
    pub model: Option<String>,
    pub max_tokens: Option<u64>,
    pub tool_choice: Option<Value>,
    pub tools: usize,
    pub tools_ignored: bool,
    pub prompt_tokens: u64,
    /// `response_format.type` as sent (`json_object+schema` with a schema).
    pub response_format: Option<String>,
}

impl RequestInfo {
    /// Read a request body under the server's options.
    pub fn read(body: &Value, options: &MockOptions) -> Self {
        let tools = body
            .get("tools")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let tool_choice = body.get("tool_choice").filter(|v| !v.is_null()).cloned();
        let tools_ignored =
            options.strict.tools_need_tool_choice && tools > 0 && tool_choice.is_none();
        RequestInfo {
            model: body
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_string),
            max_tokens: body
                .get("max_tokens")
                .and_then(Value::as_u64)
                .or_else(|| body.get("max_completion_tokens").and_then(Value::as_u64)),
            tool_choice,
            tools,
            tools_ignored,
            prompt_tokens: prompt_tokens(body, tools > 0 && !tools_ignored),
            response_format: body.get("response_format").map(|f| {
                let t = f.get("type").and_then(Value::as_str).unwrap_or("?");
                if f.get("schema").is_some() {
                    format!("{t}+schema")
                } else {
                    t.to_string()
                }
            }),
        }
    }

    /// The completion limit under a context window: `max_tokens` clamped to what the window
    /// leaves (all of it without `max_tokens`). `None` without a window: scripted replies are
    /// sent as written.
    pub fn effective_max_tokens(&self, options: &MockOptions) -> Option<u64> {
        let left = options.n_ctx?.saturating_sub(self.prompt_tokens);
        Some(self.max_tokens.map_or(left, |m| m.min(left)))
    }
}

/// Estimated prompt tokens: per message ⌈content chars / 4⌉ + 1 (+ ⌈tool-call JSON / 4⌉),
/// plus ⌈tools JSON / 4⌉ when the tools are used.
pub(super) fn prompt_tokens(body: &Value, with_tools: bool) -> u64 {
    let messages: u64 = body
        .get("messages")
        .and_then(Value::as_array)
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    let calls = m
                        .get("tool_calls")
                        .filter(|c| !c.is_null())
                        .map_or(0, |c| estimate_tokens(&c.to_string()));
                    estimate_tokens(&content_text(m.get("content"))) + 1 + calls
                })
                .sum()
        })
        .unwrap_or(0);
    let tools = if with_tools {
        body.get("tools")
            .map_or(0, |t| estimate_tokens(&t.to_string()))
    } else {
        0
    };
    messages + tools
}

/// An OpenAI-style error object.
pub(super) fn error_body(kind: &str, message: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
}

/// An error decided on arrival, before a reply is chosen.
#[derive(Debug)]
pub(super) struct Rejection {
    pub status: u16,
    pub body: Value,
}

/// llama.cpp's check of the messages: an assistant message needs a `content` string or
/// array (500, as its template code throws).
pub(super) fn check_null_content(body: &Value) -> Option<Rejection> {
    let messages = body.get("messages").and_then(Value::as_array)?;
    for (i, m) in messages.iter().enumerate() {
        if m.get("role").and_then(Value::as_str) != Some("assistant") {
            continue;
        }
        let message = match m.get("content") {
            None => format!(
                "Missing 'content' in messages[{i}] (ref: https://github.com/ggml-org/llama.cpp/issues/8367)"
            ),
            Some(Value::Null) => format!(
                "Invalid 'content' type in messages[{i}]: expected string or array, got null (ref: https://github.com/ggml-org/llama.cpp/issues/8367)"
            ),
            Some(_) => continue,
        };
        return Some(Rejection {
            status: 500,
            body: json!({"error": {"code": 500, "message": message, "type": "server_error"}}),
        });
    }
    None
}

/// A `response_format` the server does not take (see [`MockResponseFormat`]).
pub(super) fn check_response_format(body: &Value, options: &MockOptions) -> Option<Rejection> {
    let kind = body
        .get("response_format")?
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let (status, message) = match (options.strict.response_format, kind) {
        (_, "text") | (MockResponseFormat::Any, _) => return None,
        (MockResponseFormat::LlamaCppPython, "json_object") => return None,
        (MockResponseFormat::LlamaCppPython, _) => (
            500,
            "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n  Input should be 'text' or 'json_object'".to_string(),
        ),
        (MockResponseFormat::None, k) => (400, format!("response_format '{k}' is not supported")),
    };
    let kind = if status == 500 {
        "server_error"
    } else {
        "invalid_request_error"
    };
    Some(Rejection {
        status,
        body: json!({"error": {"code": status, "message": message, "type": kind}}),
    })
}

/// A prompt longer than the context window: 400, worded both as OpenAI and llama.cpp do.
pub(super) fn check_context(info: &RequestInfo, options: &MockOptions) -> Option<Rejection> {
    let n_ctx = options.n_ctx?;
    let m = info.prompt_tokens;
    if m <= n_ctx {
        return None;
    }
    let message = format!(
        "This model's maximum context length is {n_ctx} tokens. However, you requested {m} tokens \
         (request ({m} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it)"
    );
    Some(Rejection {
        status: 400,
        body: json!({"error": {
            "code": 400,
            "message": message,
            "type": "exceed_context_size_error",
            "param": "messages",
            "n_prompt_tokens": m,
            "n_ctx": n_ctx,
        }}),
    })
}

/// How a reply is sent.
#[derive(Debug)]
pub(super) enum Answer {
    /// A JSON (or verbatim) body with a status.
    Body {
        status: u16,
        body: String,
        retry_after: Option<f64>,
    },
    /// Close the connection without answering.
    HangUp,
    /// A status line and headers, then an endless chunked body.
    Endless { status: u16 },
}

/// One reply worked out: what to send, how long computing it takes, what it reports.
#[derive(Debug)]
pub(super) struct Plan {
    pub answer: Answer,
    /// Latency, the reply's delay and the generation time.
    pub work: Duration,
    /// Usage reported by a completion.
    pub usage: Option<MockUsage>,
}

/// Work out `reply` for request number `n`.
pub(super) fn plan(
    body: &Value,
    info: &RequestInfo,
    reply: &MockReply,
    n: u64,
    options: &MockOptions,
) -> Plan {
    let wait = options.latency + Duration::from_millis(reply.delay_ms);
    let status = reply.status.unwrap_or(200);
    let plain = |answer| Plan {
        answer,
        work: wait,
        usage: None,
    };
    if reply.hang_up {
        return plain(Answer::HangUp);
    }
    if reply.endless_body {
        return plain(Answer::Endless { status });
    }
    if let Some(raw) = &reply.raw_body {
        return plain(Answer::Body {
            status,
            body: raw.clone(),
            retry_after: reply.retry_after,
        });
    }
    if !(200..300).contains(&status) {
        let kind = match status {
            429 => "rate_limit_exceeded",
            s if s >= 500 => "server_error",
            _ => "invalid_request_error",
        };
        return plain(Answer::Body {
            status,
            body: error_body(kind, &format!("mock error {status} (request {n})")).to_string(),
            retry_after: reply.retry_after,
        });
    }
    let (completion, usage) = completion(body, info, reply, n, options);
    let generation = match options.tokens_per_s {
        Some(t) => Duration::from_secs_f64(usage.completion_tokens as f64 / t),
        None => Duration::ZERO,
    };
    Plan {
        answer: Answer::Body {
            status,
            body: completion.to_string(),
            retry_after: reply.retry_after,
        },
        work: wait + generation,
        usage: Some(usage),
    }
}

/// The completion object and the usage it reports.
fn completion(
    body: &Value,
    info: &RequestInfo,
    reply: &MockReply,
    n: u64,
    options: &MockOptions,
) -> (Value, MockUsage) {
    let messages = body.get("messages").and_then(Value::as_array);
    let mut content: Option<String> = if reply.echo {
        let last = content_text(
            messages
                .and_then(|m| m.last())
                .and_then(|m| m.get("content")),
        );
        Some(format!("echo: {last}"))
    } else {
        reply.content.clone()
    };
    let mut tool_calls: Vec<Value> = reply
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
    if info.tools_ignored && !tool_calls.is_empty() {
        // The model never saw the tools: it writes the calls as text.
        let mut text = content.unwrap_or_default();
        for c in &reply.tool_calls {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&json!({"name": c.name, "arguments": c.arguments}).to_string());
        }
        tool_calls.clear();
        content = Some(text);
    }
    let mut finish = reply.finish_reason.clone().unwrap_or_else(|| {
        if tool_calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }
        .to_string()
    });
    let mut completion_tokens = estimate_tokens(content.as_deref().unwrap_or(""))
        + tool_calls
            .iter()
            .map(|c| estimate_tokens(&c["function"].to_string()))
            .sum::<u64>();
    let limit = info.effective_max_tokens(options);
    if tool_calls.is_empty() {
        if let Some(limit) = limit {
            let text = content.get_or_insert_with(String::new);
            let fill = options.fill_context && info.max_tokens.is_none();
            if completion_tokens > limit || (fill && completion_tokens < limit) {
                *text = sized(text, limit);
                completion_tokens = limit;
                finish = "length".to_string();
            }
        }
    }
    let usage = reply.usage.unwrap_or(MockUsage {
        prompt_tokens: info.prompt_tokens,
        completion_tokens,
    });
    let model = reply
        .model
        .clone()
        .or_else(|| info.model.clone())
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
    let value = json!({
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
    });
    (value, usage)
}

/// `text` cut or padded with filler to exactly `tokens` tokens (4 characters each).
fn sized(text: &str, tokens: u64) -> String {
    let want = usize::try_from(tokens.saturating_mul(4)).unwrap_or(usize::MAX);
    let have = text.chars().count();
    if have >= want {
        text.chars().take(want).collect()
    } else {
        let mut s = String::with_capacity(text.len() + (want - have));
        s.push_str(text);
        s.extend(FILLER.chars().cycle().take(want - have));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(n_ctx: Option<u64>, fill: bool) -> MockOptions {
        MockOptions {
            n_ctx,
            fill_context: fill,
            ..MockOptions::default()
        }
    }

    #[test]
    fn prompt_estimate_counts_content_tool_calls_and_tools() {
        let body = json!({"messages": [
            {"role": "system", "content": "12345678"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "a"}]},
            {"role": "user", "content": [{"type": "text", "text": "abcd"}]},
        ], "tools": [{"x": 1}]});
        // 2+1, 0+1+⌈12/4⌉, 1+1, tools ⌈9/4⌉
        assert_eq!(prompt_tokens(&body, false), 3 + 4 + 2);
        assert_eq!(prompt_tokens(&body, true), 3 + 4 + 2 + 3);
    }

    #[test]
    fn context_window_fills_truncates_and_clamps() {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(36)}]});
        let o = opts(Some(100), true);
        let info = RequestInfo::read(&body, &o);
        assert_eq!(info.prompt_tokens, 10);
        let p = plan(&body, &info, &MockReply::text("short"), 1, &o);
        assert_eq!(p.usage.unwrap().completion_tokens, 90);
        let Answer::Body { body: text, .. } = &p.answer else {
            panic!("{p:?}")
        };
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        let content = v["choices"][0]["message"]["content"].as_str().unwrap();
        assert_eq!(content.chars().count(), 360);
        assert!(content.starts_with("short"));

        // max_tokens bounds the completion and turns filling off; clamped to the window.
        let mut b = body.clone();
        b["max_tokens"] = json!(500);
        let info = RequestInfo::read(&b, &o);
        assert_eq!(info.effective_max_tokens(&o), Some(90));
        let p = plan(&b, &info, &MockReply::text("short"), 1, &o);
        assert_eq!(p.usage.unwrap().completion_tokens, 2);
        b["max_tokens"] = json!(1);
        let info = RequestInfo::read(&b, &o);
        let p = plan(&b, &info, &MockReply::text("a longer answer"), 1, &o);
        assert_eq!(p.usage.unwrap().completion_tokens, 1);

        // Without a window nothing changes.
        let o = opts(None, false);
        let info = RequestInfo::read(&body, &o);
        let p = plan(&body, &info, &MockReply::text("short"), 1, &o);
        assert_eq!(p.usage.unwrap().completion_tokens, 2);
        assert!(check_context(&info, &o).is_none());
        let o = opts(Some(9), false);
        let r = check_context(&RequestInfo::read(&body, &o), &o).unwrap();
        assert_eq!(r.status, 400);
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("maximum context length is 9 tokens") && msg.contains("requested 10"),
            "{msg}"
        );
    }

    #[test]
    fn generation_time_follows_the_completion_tokens() {
        let body = json!({"messages": [{"role": "user", "content": "hi"}]});
        let o = MockOptions {
            tokens_per_s: Some(100.0),
            latency: Duration::from_millis(5),
            ..MockOptions::default()
        };
        let info = RequestInfo::read(&body, &o);
        let p = plan(&body, &info, &MockReply::text("x").with_usage(1, 50), 1, &o);
        assert_eq!(p.work, Duration::from_millis(505));
        let p = plan(&body, &info, &MockReply::status(503).with_delay(7), 1, &o);
        assert_eq!(p.work, Duration::from_millis(12));
    }
}
