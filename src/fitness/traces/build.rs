//! Building dialogues from their parts, shared by the typed pass and the general reader so both
//! give the same dialogues and the same errors.

use std::path::Path;

use serde_json::{Map, Value};

use super::tau_usi::clean_tau_usi;
use crate::dialogue::{Dialogue, Role, ToolCall, Turn};
use crate::{Error, Result};

pub(super) fn scalar_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Build a dialogue from one JSON object (JSONL line, array item, single object). `parsed` is the
/// conversation when the typed pass has already read it (its place in `obj` then holds `null`);
/// otherwise the conversation is read from `obj`.
pub(super) fn dialogue_from_object(
    mut obj: Map<String, Value>,
    parsed: Option<Vec<Turn>>,
    path: &Path,
    loc: &str,
    default_id: &str,
) -> Result<Dialogue> {
    let conv_key = if obj.contains_key("conversation") {
        "conversation"
    } else {
        "turns"
    };
    let conv = obj.remove(conv_key).ok_or_else(|| {
        Error::parse(
            path,
            loc,
            "missing key 'conversation' (a list of {\"role\", \"content\"})",
        )
    })?;
    let turns = match parsed {
        Some(turns) if conv_key == "conversation" => turns,
        _ => parse_turns(&conv, path, &format!("{loc}.{conv_key}"))?,
    };
    // The reference's human_dialogs.json keeps ids and tasks in `metadata`.
    let mut meta = match obj.remove("metadata") {
        Some(Value::Object(m)) => m,
        Some(Value::Null) | None => Map::new(),
        Some(other) => {
            return Err(Error::parse(
                path,
                format!("{loc}.metadata"),
                format!("expected an object, found {}", kind(&other)),
            ))
        }
    };
    let mut take = |key: &str| -> Result<Option<String>> {
        let v = obj.remove(key).or_else(|| meta.remove(key));
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(v) => scalar_string(&v).map(Some).ok_or_else(|| {
                Error::parse(
                    path,
                    format!("{loc}.{key}"),
                    format!("expected a string or number, found {}", kind(&v)),
                )
            }),
        }
    };
    let id = take("id")?.unwrap_or_else(|| default_id.to_string());
    let task_id = take("task_id")?;
    let domain = take("domain")?;
    for (k, v) in obj {
        meta.insert(k, v);
    }
    Ok(Dialogue {
        id,
        task_id,
        domain,
        turns,
        meta,
    })
}

/// Build a τ-USI dialogue from one entry (`key` is the instance id); `parsed` as in
/// [`dialogue_from_object`].
pub(super) fn tau_usi_dialogue(
    key: String,
    mut obj: Map<String, Value>,
    parsed: Option<Vec<Turn>>,
    path: &Path,
) -> Result<Dialogue> {
    let loc = format!("$[\"{key}\"]");
    let conv = obj.remove("conversation").expect("checked by detect");
    let turns = match parsed {
        Some(turns) => turns,
        None => parse_turns(&conv, path, &format!("{loc}.conversation"))?,
    };
    let mut meta = Map::new();
    meta.insert("instance_id".into(), Value::String(key.clone()));
    let task_id = match obj.remove("task_id") {
        None | Some(Value::Null) => None,
        Some(v) => Some(scalar_string(&v).ok_or_else(|| {
            Error::parse(
                path,
                format!("{loc}.task_id"),
                format!("expected a string or number, found {}", kind(&v)),
            )
        })?),
    };
    let domain = key
        .split('_')
        .next()
        .filter(|d| !d.is_empty())
        .map(str::to_string);
    for (k, v) in obj {
        meta.insert(k, v);
    }
    let (turns, instruction) = clean_tau_usi(turns);
    if let Some(ins) = instruction {
        meta.entry("instruction").or_insert(Value::String(ins));
    }
    Ok(Dialogue {
        id: key,
        task_id,
        domain,
        turns,
        meta,
    })
}

/// A role name as found in traces; the common spellings without allocating.
pub(super) fn role_of(s: &str) -> Option<Role> {
    match s {
        "user" => Some(Role::User),
        "assistant" => Some(Role::Assistant),
        "tool" => Some(Role::Tool),
        "system" => Some(Role::System),
        _ => Role::parse(s),
    }
}

/// Tool calls in our flat form or OpenAI's `{"id", "function": {"name", "arguments"}}`; the
/// error is the index of a call without a tool name.
pub(super) fn read_tool_calls(calls: &[Value]) -> std::result::Result<Vec<ToolCall>, usize> {
    calls
        .iter()
        .enumerate()
        .map(|(j, c)| {
            let f = c.get("function").unwrap_or(c);
            let name = f.get("name").and_then(Value::as_str).ok_or(j)?;
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => {
                    serde_json::from_str(s).unwrap_or(Value::String(s.clone()))
                }
                Some(v) => v.clone(),
                None => Value::Object(Map::new()),
            };
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            Ok(ToolCall {
                id,
                name: name.to_string(),
                arguments,
            })
        })
        .collect()
}

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Turns of a conversation (a JSON list of `{"role", "content", "tool_calls"?,
/// "tool_call_id"?}`); errors name `path` and the turn (`loc[i]`).
pub fn parse_turns(conv: &Value, path: &Path, loc: &str) -> Result<Vec<Turn>> {
    let arr = conv.as_array().ok_or_else(|| {
        Error::parse(
            path,
            loc,
            format!("expected a list of turns, found {}", kind(conv)),
        )
    })?;
    arr.iter()
        .enumerate()
        .map(|(i, t)| parse_turn(t, path, &format!("{loc}[{i}]")))
        .collect()
}

/// One turn of a conversation (see [`parse_turns`]); `loc` names it in errors.
pub fn parse_turn(t: &Value, path: &Path, loc: &str) -> Result<Turn> {
    let obj = t.as_object().ok_or_else(|| {
        Error::parse(
            path,
            loc,
            format!(
                "expected a turn object {{\"role\", \"content\"}}, found {}",
                kind(t)
            ),
        )
    })?;
    let role_v = obj
        .get("role")
        .ok_or_else(|| Error::parse(path, loc, "missing key 'role'"))?;
    let role_s = role_v.as_str().ok_or_else(|| {
        Error::parse(
            path,
            format!("{loc}.role"),
            format!("expected a string, found {}", kind(role_v)),
        )
    })?;
    let role = role_of(role_s).ok_or_else(|| {
        Error::parse(
            path,
            format!("{loc}.role"),
            format!("unknown role '{role_s}' (expected user, assistant, tool or system)"),
        )
    })?;
    let content = match obj.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(Error::parse(
                path,
                format!("{loc}.content"),
                format!("expected a string, found {}", kind(other)),
            ))
        }
    };
    let tool_calls = match obj.get("tool_calls") {
        Some(Value::Array(calls)) => read_tool_calls(calls).map_err(|j| {
            Error::parse(path, format!("{loc}.tool_calls[{j}]"), "missing tool name")
        })?,
        _ => Vec::new(),
    };
    let tool_call_id = obj
        .get("tool_call_id")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(Turn {
        role,
        content,
        tool_calls,
        tool_call_id,
    })
}
