//! Tool calls that a model wrote into its text instead of the `tool_calls` field.
//!
//! Servers without a tool parser for the model (vLLM without `--tool-call-parser`, Ollama
//! with some templates, llama.cpp chat formats without function calling) and small models
//! that ignore the format return the call as text. [`tool_calls_in_text`] recovers these
//! shapes, but only for tools that were offered:
//!
//! * a JSON object, bare or in a code fence or `<tool_call>…</tool_call>` tags:
//!   `{"name": N, "arguments": {…}}` — also with `parameters`, `args`, `arguments` as a
//!   JSON-encoded string, `{"function": {"name", "arguments"}}`, `{"tool": N, "tool_input": …}`,
//!   `{"tool_calls": [...]}` and arrays of these;
//! * llama.cpp's `chatml-function-calling` text: `functions.NAME:` followed by a JSON object;
//! * a call written like code: `NAME({"order_id": "#W1"})`.
//!
//! Arguments that are not a JSON object are kept as a JSON string, so the agent loop can answer
//! the call with a tool error (as for invalid arguments in `tool_calls`).

use serde_json::{Map, Value};

use super::ToolSpec;
use crate::dialogue::ToolCall;

/// Tool calls found in a text, and the text that is left once they are cut out.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovered {
    /// The calls, in order of appearance (ids `text_call_<i>`).
    pub calls: Vec<ToolCall>,
    /// The rest of the text (chatter around the calls), trimmed.
    pub rest: String,
}

/// Every JSON value that starts at a `{` or `[` in `text`, with its byte span.
fn json_values(text: &str) -> Vec<(usize, usize, Value)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'{' || bytes[i] == b'[' {
            let mut stream = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
            if let Some(Ok(v)) = stream.next() {
                let end = i + stream.byte_offset();
                out.push((i, end, v));
                i = end;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// The offered tool a written name refers to (`get_order`, `functions.get_order`).
fn offered<'a>(name: &str, tools: &'a [ToolSpec]) -> Option<&'a str> {
    let name = name.trim().trim_end_matches(':');
    let name = name.strip_prefix("functions.").unwrap_or(name);
    tools
        .iter()
        .find(|t| t.name == name)
        .map(|t| t.name.as_str())
}

/// Arguments as a JSON object, or the verbatim text as a JSON string when they are not one.
fn arguments(v: Option<&Value>) -> Value {
    match v {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(o @ Value::Object(_)) => o,
            _ if s.trim().is_empty() => Value::Object(Map::new()),
            _ => Value::String(s.clone()),
        },
        Some(o @ Value::Object(_)) => o.clone(),
        Some(other) => Value::String(other.to_string()),
    }
}

/// Calls described by one JSON value.
fn calls_in_value(v: &Value, tools: &[ToolSpec], out: &mut Vec<(String, Value)>) {
    match v {
        Value::Array(items) => {
            for item in items {
                calls_in_value(item, tools, out);
            }
        }
        Value::Object(o) => {
            if let Some(list) = o.get("tool_calls") {
                calls_in_value(list, tools, out);
                return;
            }
            if let Some(f @ Value::Object(_)) = o.get("function") {
                calls_in_value(f, tools, out);
                return;
            }
            let name = ["name", "tool", "tool_name", "function", "action"]
                .iter()
                .find_map(|k| o.get(*k).and_then(Value::as_str));
            let Some(name) = name.and_then(|n| offered(n, tools)) else {
                return;
            };
            let args = ["arguments", "parameters", "args", "tool_input", "input"]
                .iter()
                .find_map(|k| o.get(*k));
            out.push((name.to_string(), arguments(args)));
        }
        _ => {}
    }
}

/// Recover the tool calls written in `text`; `None` when there are none (or no tools were
/// offered).
pub fn tool_calls_in_text(text: &str, tools: &[ToolSpec]) -> Option<Recovered> {
    if tools.is_empty() || text.trim().is_empty() {
        return None;
    }
    let mut found: Vec<(usize, usize, String, Value)> = Vec::new();
    // `functions.NAME:` / `NAME(` followed by a JSON object: the name decides.
    let values = json_values(text);
    let mut used = vec![false; values.len()];
    for (k, (start, end, v)) in values.iter().enumerate() {
        let before = text[..*start].trim_end();
        let prefixed = before
            .strip_suffix('(')
            .map(|b| (b.trim_end(), true))
            .unwrap_or((before, false));
        let word_start = prefixed
            .0
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.' || c == ':'))
            .map_or(0, |i| i + 1);
        let word = &prefixed.0[word_start..];
        let named = (word.starts_with("functions.") || word.ends_with(':') || prefixed.1)
            .then(|| offered(word, tools))
            .flatten();
        if let Some(name) = named {
            let mut end = *end;
            if prefixed.1 {
                let rest = &text[end..];
                if let Some(stripped) = rest.trim_start().strip_prefix(')') {
                    end = text.len() - stripped.len();
                }
            }
            let start = word_start;
            found.push((start, end, name.to_string(), arguments(Some(v))));
            used[k] = true;
        }
    }
    // Self-describing JSON objects (`{"name": ..., "arguments": ...}` and relatives).
    for (k, (start, end, v)) in values.iter().enumerate() {
        if used[k] {
            continue;
        }
        let mut calls = Vec::new();
        calls_in_value(v, tools, &mut calls);
        for (name, args) in calls {
            found.push((*start, *end, name, args));
        }
    }
    if found.is_empty() {
        return None;
    }
    found.sort_by_key(|f| f.0);
    let mut rest = String::new();
    let mut at = 0;
    for (start, end, _, _) in &found {
        if *start >= at {
            rest.push_str(&text[at..*start]);
            at = *end;
        }
    }
    rest.push_str(&text[at.min(text.len())..]);
    let rest = strip_wrappers(&rest);
    let calls = found
        .into_iter()
        .enumerate()
        .map(|(i, (_, _, name, arguments))| ToolCall {
            id: format!("text_call_{i}"),
            name,
            arguments,
        })
        .collect();
    Some(Recovered { calls, rest })
}

/// The chatter left around recovered calls, without empty fences and tool-call tags.
fn strip_wrappers(text: &str) -> String {
    let mut s = text.to_string();
    for tag in [
        "<tool_call>",
        "</tool_call>",
        "<|tool_call|>",
        "<function_call>",
        "</function_call>",
        "[TOOL_CALLS]",
        "<|python_tag|>",
    ] {
        s = s.replace(tag, " ");
    }
    let lines: Vec<&str> = s
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("```") && *l != "message:")
        .collect();
    lines.join("\n").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> Vec<ToolSpec> {
        ["get_order_details", "cancel_pending_order"]
            .iter()
            .map(|n| ToolSpec {
                name: n.to_string(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            })
            .collect()
    }

    fn one(text: &str) -> (String, Value, String) {
        let r = tool_calls_in_text(text, &tools()).unwrap_or_else(|| panic!("none in {text}"));
        assert_eq!(r.calls.len(), 1, "{r:?}");
        let c = r.calls.into_iter().next().unwrap();
        (c.name, c.arguments, r.rest)
    }

    #[test]
    fn fenced_and_bare_json_objects() {
        let (n, a, rest) = one(
            "Let me look that up.\n```json\n{\"name\": \"get_order_details\", \"arguments\": {\"order_id\": \"#W1\"}}\n```",
        );
        assert_eq!(n, "get_order_details");
        assert_eq!(a, json!({"order_id": "#W1"}));
        assert_eq!(rest, "Let me look that up.");
        let (n, a, rest) = one(
            r##"{"name": "cancel_pending_order", "parameters": {"order_id": "#W2", "reason": "no longer needed"}}"##,
        );
        assert_eq!(n, "cancel_pending_order");
        assert_eq!(a["reason"], "no longer needed");
        assert_eq!(rest, "");
        // Arguments as a JSON-encoded string (OpenAI's own shape, written out).
        let (_, a, _) = one(
            r##"{"type": "function", "function": {"name": "get_order_details", "arguments": "{\"order_id\": \"#W3\"}"}}"##,
        );
        assert_eq!(a, json!({"order_id": "#W3"}));
    }

    #[test]
    fn hermes_tags_and_lists() {
        let r = tool_calls_in_text(
            "<tool_call>\n{\"name\": \"get_order_details\", \"arguments\": {\"order_id\": \"#W1\"}}\n</tool_call>\n<tool_call>{\"name\": \"cancel_pending_order\", \"arguments\": {}}</tool_call>",
            &tools(),
        )
        .unwrap();
        let names: Vec<_> = r.calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["get_order_details", "cancel_pending_order"]);
        assert_eq!(r.rest, "");
        let r = tool_calls_in_text(
            r##"{"tool_calls": [{"function": {"name": "get_order_details", "arguments": {"order_id": "1"}}}]}"##,
            &tools(),
        )
        .unwrap();
        assert_eq!(r.calls[0].arguments, json!({"order_id": "1"}));
        assert_eq!(r.calls[0].id, "text_call_0");
    }

    #[test]
    fn function_calling_format_and_code_style() {
        let (n, a, _) = one("functions.get_order_details:\n{\"order_id\": \"#W9\"}");
        assert_eq!(
            (n.as_str(), a),
            ("get_order_details", json!({"order_id": "#W9"}))
        );
        let (n, a, rest) = one("Sure. get_order_details({\"order_id\": \"#W8\"}) done");
        assert_eq!(
            (n.as_str(), a),
            ("get_order_details", json!({"order_id": "#W8"}))
        );
        assert_eq!(rest, "Sure.  done");
    }

    #[test]
    fn only_offered_tools_and_only_calls() {
        assert_eq!(
            tool_calls_in_text("Your order {#W1} has shipped.", &tools()),
            None
        );
        assert_eq!(
            tool_calls_in_text(
                r##"{"name": "delete_database", "arguments": {}}"##,
                &tools()
            ),
            None
        );
        assert_eq!(
            tool_calls_in_text(r##"{"name": "get_order_details", "arguments": {}}"##, &[]),
            None
        );
        assert_eq!(
            tool_calls_in_text(r##"{"order_id": "#W1"}"##, &tools()),
            None
        );
    }

    #[test]
    fn invalid_arguments_are_kept_verbatim() {
        let (_, a, _) = one(r##"{"name": "get_order_details", "arguments": "{order_id: W1"}"##);
        assert_eq!(a, Value::String("{order_id: W1".into()));
    }
}
