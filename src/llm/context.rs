//! Fitting a request into a model's context window.
//!
//! ppol does not know the tokenizer of the model behind an endpoint, so it counts characters
//! and converts them with a *characters-per-token* ratio: [`DEFAULT_CHARS_PER_TOKEN`] until the
//! endpoint has answered once, then the ratio its own `usage.prompt_tokens` reported
//! ([`Calibration`]). The window itself comes from the role's `context_window` key or is
//! learned from the first context-length error ([`parse_overflow`] reads the wording of
//! OpenAI, vLLM, llama.cpp's server, llama-cpp-python and Ollama).
//!
//! [`fit`] trims a request that would not fit, from the oldest turns, keeping what the model
//! needs to act: the leading system prompt(s), the first exchange (the task: the user's first
//! message and the answer to it) and the latest exchange. Turns are dropped in whole
//! exchanges (a user message and everything up to the next one) so that user and assistant
//! keep alternating — strict chat templates reject two user messages in a row — and a tool
//! result never loses the assistant turn that called it.

use std::fmt;

use regex::Regex;
use std::sync::LazyLock;

use super::ChatRequest;
use crate::dialogue::{Role, Turn};

/// The characters-per-token ratio assumed before an endpoint has reported token counts:
/// deliberately low (English prose is ≈ 4, JSON and code ≈ 3), so the estimate errs high.
pub const DEFAULT_CHARS_PER_TOKEN: f64 = 3.0;

/// Tokens a chat template adds per message (role markers, separators), roughly.
const TOKENS_PER_MESSAGE: u32 = 6;

/// The smallest completion budget [`fit`] leaves when it has to lower `max_tokens`.
pub const MIN_COMPLETION_TOKENS: u32 = 64;

/// What a context-length error said.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overflow {
    /// The model's context window, when the error names it.
    pub window: Option<u32>,
    /// Prompt tokens the endpoint counted, when the error names them.
    pub prompt_tokens: Option<u32>,
}

static CONTEXT_ERROR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)context[ _](?:length|window|size)|maximum context|exceed_context_size|context_length_exceeded|prompt is too long|too many tokens|input tokens exceed",
    )
    .expect("context error regex")
});

/// Patterns naming the window, first match wins.
static WINDOW: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        // OpenAI, vLLM, llama-cpp-python's server: "maximum context length is 4096 tokens"
        r"(?i)maximum context length is (\d+)",
        // llama-cpp-python (raw): "Requested tokens (5000) exceed context window of 4096"
        r"(?i)context window of (\d+)",
        // llama.cpp server JSON: "n_ctx": 4096
        r#"(?i)"?n_ctx"?\s*[:=]\s*(\d+)"#,
        // "context size (4096)", "context length of 4096", "context window: 4096 tokens"
        r"(?i)context (?:size|length|window)\D{0,20}?(\d{3,7})",
    ]
    .iter()
    .map(|p| Regex::new(p).expect("window regex"))
    .collect()
});

/// Patterns naming the prompt's tokens, first match wins.
static PROMPT: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        // OpenAI / vLLM / llama-cpp-python: "(5016 in the messages, 20 in the completion)"
        r"(?i)\((\d+) in the messages",
        r"(?i)\((\d+) in your prompt",
        // OpenAI: "your messages resulted in 130000 tokens"
        r"(?i)messages resulted in (\d+) tokens",
        // llama-cpp-python (raw): "Requested tokens (5000)"
        r"(?i)requested tokens \((\d+)\)",
        // llama.cpp server JSON: "n_prompt_tokens": 5000
        r#"(?i)"?n_prompt_tokens"?\s*[:=]\s*(\d+)"#,
    ]
    .iter()
    .map(|p| Regex::new(p).expect("prompt regex"))
    .collect()
});

fn first_number(patterns: &[Regex], text: &str) -> Option<u32> {
    patterns.iter().find_map(|re| {
        re.captures(text)
            .and_then(|c| c.get(1))
            .and_then(|m| m.as_str().parse().ok())
    })
}

/// Whether an error text says the request did not fit the context window, and what it says
/// about the window and the prompt. `None` for any other error.
pub fn parse_overflow(message: &str) -> Option<Overflow> {
    if !CONTEXT_ERROR.is_match(message) {
        return None;
    }
    Some(Overflow {
        window: first_number(&WINDOW, message).filter(|w| *w >= 64),
        prompt_tokens: first_number(&PROMPT, message),
    })
}

/// Characters of a request that become prompt tokens: every message's text, its tool calls
/// and the tool schemas.
pub fn prompt_chars(request: &ChatRequest) -> usize {
    let messages: usize = request.messages.iter().map(turn_chars).sum();
    let tools: usize = request
        .tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
        .sum();
    messages + tools
}

fn turn_chars(t: &Turn) -> usize {
    t.content.len()
        + t.tool_calls
            .iter()
            .map(|c| c.name.len() + c.arguments.to_string().len() + 8)
            .sum::<usize>()
}

/// A characters-per-token ratio for one model at one endpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// Characters per prompt token.
    pub chars_per_token: f64,
    /// Whether the ratio was measured (from `usage.prompt_tokens` or an error's count)
    /// rather than assumed.
    pub measured: bool,
}

impl Default for Calibration {
    fn default() -> Self {
        Calibration {
            chars_per_token: DEFAULT_CHARS_PER_TOKEN,
            measured: false,
        }
    }
}

impl Calibration {
    /// Estimated prompt tokens of a request.
    pub fn estimate(&self, request: &ChatRequest) -> u32 {
        let chars = prompt_chars(request) as f64;
        let per_message = TOKENS_PER_MESSAGE * request.messages.len() as u32;
        (chars / self.chars_per_token).ceil() as u32 + per_message
    }

    /// Learn from a count the endpoint reported for `request` (its `usage.prompt_tokens`, or
    /// the prompt tokens of a context-length error). Ignores counts too small to be
    /// meaningful; the ratio is kept within [1, 8] characters per token.
    pub fn observe(&mut self, request: &ChatRequest, prompt_tokens: u64) {
        let overhead = u64::from(TOKENS_PER_MESSAGE) * request.messages.len() as u64;
        if prompt_tokens <= overhead + 16 {
            return;
        }
        let chars = prompt_chars(request) as f64;
        let ratio = chars / (prompt_tokens - overhead) as f64;
        if ratio.is_finite() {
            self.chars_per_token = ratio.clamp(1.0, 8.0);
            self.measured = true;
        }
    }
}

/// What [`fit`] changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    /// The request as it will be sent.
    pub request: ChatRequest,
    /// Messages dropped from the history.
    pub dropped: usize,
    /// `max_tokens` before it was lowered, if it was.
    pub lowered_max_tokens: Option<u32>,
    /// Estimated prompt tokens before and after.
    pub estimated_before: u32,
    /// See `estimated_before`.
    pub estimated_after: u32,
    /// The window fitted to.
    pub window: u32,
}

impl Fit {
    /// Whether anything changed.
    pub fn changed(&self) -> bool {
        self.dropped > 0 || self.lowered_max_tokens.is_some()
    }

    /// A one-line note for the record, e.g. "context window 4096: dropped the 6 oldest
    /// messages (~5,100 → ~3,300 prompt tokens)".
    pub fn note(&self) -> String {
        let mut parts = Vec::new();
        if self.dropped > 0 {
            parts.push(format!(
                "dropped the {} oldest message(s) of the history (~{} → ~{} prompt tokens)",
                self.dropped, self.estimated_before, self.estimated_after
            ));
        }
        if let (Some(before), Some(after)) = (self.lowered_max_tokens, self.request.max_tokens) {
            parts.push(format!("lowered max_tokens from {before} to {after}"));
        }
        format!("context window {}: {}", self.window, parts.join("; "))
    }
}

/// Why a request cannot be made to fit.
#[derive(Debug, Clone, PartialEq)]
pub struct DoesNotFit {
    /// Estimated tokens of what must stay (system prompt, task, latest exchange).
    pub kept_tokens: u32,
    /// The window.
    pub window: u32,
}

impl fmt::Display for DoesNotFit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the prompt does not fit the model's context window of {} tokens even after \
             trimming the history: the system prompt, the task and the latest exchange alone \
             are ~{} tokens (plus at least {MIN_COMPLETION_TOKENS} for the answer). Give the \
             model a larger context (llama.cpp: --ctx-size / n_ctx; vLLM: --max-model-len; \
             Ollama: num_ctx) and set `context_window` of this role to match",
            self.window, self.kept_tokens
        )
    }
}

/// Message index ranges that may be dropped, oldest first, each a whole unit.
fn droppable_units(messages: &[Turn]) -> Vec<std::ops::Range<usize>> {
    let head = messages
        .iter()
        .take_while(|t| t.role == Role::System)
        .count();
    let users: Vec<usize> = (head..messages.len())
        .filter(|&i| messages[i].role == Role::User)
        .collect();
    let mut units = Vec::new();
    let Some(&first_user) = users.first() else {
        // No user message: only tool traffic before the last message can go.
        units.extend(tool_units(messages, head, messages.len().saturating_sub(1)));
        return units;
    };
    // 1. what precedes the first user message (an assistant greeting), if it is not all.
    if first_user > head {
        units.push(head..first_user);
    }
    // 2. whole exchanges between the first and the last one, oldest first.
    if users.len() >= 3 {
        for w in users[1..].windows(2) {
            units.push(w[0]..w[1]);
        }
    }
    // 3. tool traffic of the first exchange (its final answer stays), then of the last one
    //    (its most recent call stays).
    let first_end = users.get(1).copied().unwrap_or(messages.len());
    if users.len() >= 2 {
        units.extend(tool_units(messages, first_user + 1, first_end));
    }
    let last_start = *users.last().expect("non-empty");
    let mut last = tool_units(messages, last_start + 1, messages.len());
    last.pop();
    units.extend(last);
    units
}

/// Assistant turns with tool calls plus their tool results, within `from..to`.
fn tool_units(messages: &[Turn], from: usize, to: usize) -> Vec<std::ops::Range<usize>> {
    let mut units = Vec::new();
    let mut i = from;
    while i < to {
        if messages[i].role == Role::Assistant && !messages[i].tool_calls.is_empty() {
            let mut j = i + 1;
            while j < to && messages[j].role == Role::Tool {
                j += 1;
            }
            units.push(i..j);
            i = j;
        } else {
            i += 1;
        }
    }
    units
}

/// Trim `request` so that its estimated prompt plus its completion budget fits `window`
/// (minus a small safety margin). Drops whole units oldest first (see the module docs); if
/// the rest still does not fit, lowers `max_tokens` down to [`MIN_COMPLETION_TOKENS`].
pub fn fit(
    request: &ChatRequest,
    window: u32,
    calibration: &Calibration,
    default_max_tokens: u32,
) -> Result<Fit, DoesNotFit> {
    let margin = (window / 50).max(16);
    let completion = request.max_tokens.unwrap_or(default_max_tokens);
    let before = calibration.estimate(request);
    let mut fit = Fit {
        request: request.clone(),
        dropped: 0,
        lowered_max_tokens: None,
        estimated_before: before,
        estimated_after: before,
        window,
    };
    let budget = |prompt: u32| prompt + completion + margin <= window;
    if budget(before) {
        return Ok(fit);
    }
    let units = droppable_units(&request.messages);
    let mut drop = vec![false; request.messages.len()];
    let mut estimate = before;
    for unit in units {
        if budget(estimate) {
            break;
        }
        for i in unit {
            drop[i] = true;
        }
        let kept: Vec<Turn> = request
            .messages
            .iter()
            .zip(&drop)
            .filter(|(_, d)| !**d)
            .map(|(t, _)| t.clone())
            .collect();
        fit.request.messages = kept;
        estimate = calibration.estimate(&fit.request);
    }
    fit.dropped = drop.iter().filter(|d| **d).count();
    fit.estimated_after = estimate;
    if estimate + completion + margin > window {
        let room = window.saturating_sub(estimate + margin);
        if room < MIN_COMPLETION_TOKENS.min(completion) {
            return Err(DoesNotFit {
                kept_tokens: estimate,
                window,
            });
        }
        fit.lowered_max_tokens = Some(completion);
        fit.request.max_tokens = Some(room);
    }
    Ok(fit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialogue::ToolCall;
    use crate::llm::CallRole;
    use serde_json::json;

    fn t(role: Role, text: &str) -> Turn {
        Turn::new(role, text)
    }

    fn call(id: &str) -> Turn {
        Turn {
            role: Role::Assistant,
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "get_order".into(),
                arguments: json!({"order_id": "#W1"}),
            }],
            tool_call_id: None,
        }
    }

    fn result(id: &str, text: &str) -> Turn {
        Turn {
            role: Role::Tool,
            content: text.into(),
            tool_calls: vec![],
            tool_call_id: Some(id.into()),
        }
    }

    /// The agent's view of a conversation: policy, greeting, four user turns with tool calls.
    fn agent_history(n_exchanges: usize) -> Vec<Turn> {
        let mut m = vec![
            t(Role::System, &"policy ".repeat(200)),
            t(Role::Assistant, "Hi! How can I help you today?"),
        ];
        for k in 0..n_exchanges {
            m.push(t(Role::User, &format!("user turn {k} {}", "x".repeat(300))));
            m.push(call(&format!("c{k}")));
            m.push(result(
                &format!("c{k}"),
                &"{\"status\": \"ok\"} ".repeat(30),
            ));
            m.push(t(
                Role::Assistant,
                &format!("agent answer {k} {}", "y".repeat(300)),
            ));
        }
        m
    }

    #[test]
    fn overflow_messages_of_real_servers_are_read() {
        // llama-cpp-python's server (measured on 0.3.36).
        let o = parse_overflow("HTTP 400: This model's maximum context length is 4096 tokens. However, you requested 5036 tokens (5016 in the messages, 20 in the completion). Please reduce the length of the messages or completion.").unwrap();
        assert_eq!(o.window, Some(4096));
        assert_eq!(o.prompt_tokens, Some(5016));
        // llama-cpp-python raw ValueError text.
        let o = parse_overflow("Requested tokens (5000) exceed context window of 2048").unwrap();
        assert_eq!((o.window, o.prompt_tokens), (Some(2048), Some(5000)));
        // llama.cpp's server JSON error.
        let o = parse_overflow(r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#).unwrap();
        assert_eq!((o.window, o.prompt_tokens), (Some(8192), Some(9000)));
        // OpenAI.
        let o = parse_overflow("This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages.").unwrap();
        assert_eq!((o.window, o.prompt_tokens), (Some(128000), Some(130000)));
        // A context error without numbers is still one.
        assert_eq!(
            parse_overflow("context_length_exceeded"),
            Some(Overflow::default())
        );
        // Other 400s are not.
        assert_eq!(parse_overflow("HTTP 400: 'temperature' must be <= 2"), None);
        assert_eq!(parse_overflow("model 'x' not found"), None);
    }

    #[test]
    fn a_request_that_fits_is_untouched() {
        let req = ChatRequest::new(CallRole::Agent, agent_history(2));
        let f = fit(&req, 100_000, &Calibration::default(), 600).unwrap();
        assert!(!f.changed());
        assert_eq!(f.request, req);
    }

    #[test]
    fn trimming_keeps_system_task_and_latest_exchange_and_alternation() {
        let history = agent_history(6);
        let req = ChatRequest::new(CallRole::Agent, history.clone());
        let cal = Calibration::default();
        let full = cal.estimate(&req);
        let f = fit(&req, full / 2 + 600, &cal, 600).unwrap();
        assert!(f.dropped > 0, "{f:?}");
        let kept = &f.request.messages;
        // System prompt, the task (first user message) and the latest exchange stay.
        assert_eq!(kept[0], history[0]);
        assert!(
            kept.contains(&history[2]),
            "the first user message is the task"
        );
        let last_user = history.iter().rposition(|m| m.role == Role::User).unwrap();
        for m in &history[last_user..] {
            assert!(kept.contains(m), "latest exchange kept: {m:?}");
        }
        // No two user messages in a row, no tool result without its call.
        for w in kept.windows(2) {
            assert!(
                !(w[0].role == Role::User && w[1].role == Role::User),
                "{kept:#?}"
            );
            if w[1].role == Role::Tool {
                assert!(matches!(w[0].role, Role::Assistant | Role::Tool));
            }
        }
        // Oldest first: the greeting and exchange 1 went before exchange 4.
        assert!(!kept.contains(&history[1]));
        assert!(f.estimated_after + 600 <= f.window);
        assert!(f.note().contains("oldest message"), "{}", f.note());
    }

    #[test]
    fn an_impossible_fit_says_what_to_change() {
        let req = ChatRequest::new(CallRole::Agent, agent_history(1));
        let err = fit(&req, 300, &Calibration::default(), 600).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("context window of 300 tokens"), "{msg}");
        assert!(
            msg.contains("n_ctx") && msg.contains("context_window"),
            "{msg}"
        );
    }

    #[test]
    fn max_tokens_is_lowered_when_only_the_answer_does_not_fit() {
        let mut req = ChatRequest::new(
            CallRole::Generator,
            vec![t(Role::User, &"write personas ".repeat(100))],
        );
        req.max_tokens = Some(8000);
        let cal = Calibration::default();
        let f = fit(&req, 8192, &cal, 2048).unwrap();
        assert_eq!(f.dropped, 0);
        assert_eq!(f.lowered_max_tokens, Some(8000));
        let lowered = f.request.max_tokens.unwrap();
        assert!(
            lowered < 8000 && lowered + cal.estimate(&req) <= 8192,
            "{lowered}"
        );
    }

    #[test]
    fn calibration_follows_reported_counts() {
        let req = ChatRequest::new(
            CallRole::UserSim,
            vec![t(Role::User, &"word ".repeat(1000))],
        );
        let mut cal = Calibration::default();
        let assumed = cal.estimate(&req);
        // 5,000 characters that the endpoint counted as 1,006 tokens: ≈ 5 chars per token.
        cal.observe(&req, 1006);
        assert!(cal.measured);
        assert!((cal.chars_per_token - 5.0).abs() < 0.1, "{cal:?}");
        assert!(cal.estimate(&req) < assumed);
        assert!((i64::from(cal.estimate(&req)) - 1006).abs() < 10);
    }
}
