//! The general reader: the whole text as one `serde_json::Value`. It reads what the typed pass
//! declines (a repeated key: the last value wins) and locates every error.

use std::path::Path;

use serde_json::Value;

use super::build::{dialogue_from_object, kind, read_tool_calls, role_of, tau_usi_dialogue};
use super::detect::detect_value;
use super::jsonl::parse_jsonl_located;
use super::text::parse_text_located;
use super::{locate, stem, Keep, TraceFormat};
use crate::dialogue::{Dialogue, Turn};
use crate::{Error, Result};

/// Parse the whole text with the general reader; each dialogue with where it was found.
pub(super) fn parse_whole_value_located(
    text: &str,
    path: &Path,
) -> Result<Vec<(String, Dialogue)>> {
    let (format, whole) = detect_value(text, path)?;
    match (format, whole) {
        (TraceFormat::TauUsi, Some(v)) => Ok(locate(format, parse_tau_usi(v, path)?)),
        (TraceFormat::JsonArray, Some(v)) => Ok(locate(format, parse_json_array(v, path)?)),
        (TraceFormat::JsonObject, Some(v)) => Ok(locate(
            format,
            vec![dialogue_from_value(v, path, "$", &stem(path))?],
        )),
        (TraceFormat::Text, _) => parse_text_located(text, path),
        _ => parse_jsonl_located(text, path, Keep::All),
    }
}

pub(super) fn parse_json_array(v: Value, path: &Path) -> Result<Vec<Dialogue>> {
    let Value::Array(items) = v else {
        unreachable!("checked by detect")
    };
    let stem = stem(path);
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            dialogue_from_value(item, path, &format!("$[{i}]"), &format!("{stem}[{i}]"))
        })
        .collect()
}

/// Build a dialogue from one JSON value (JSONL line, array item, single object).
pub(super) fn dialogue_from_value(
    v: Value,
    path: &Path,
    loc: &str,
    default_id: &str,
) -> Result<Dialogue> {
    let Value::Object(obj) = v else {
        return Err(Error::parse(
            path,
            loc,
            format!("expected a dialogue object, found {}", kind(&v)),
        ));
    };
    dialogue_from_object(obj, None, path, loc, default_id)
}

pub(super) fn parse_tau_usi(v: Value, path: &Path) -> Result<Vec<Dialogue>> {
    let Value::Object(map) = v else {
        unreachable!("checked by detect")
    };
    let mut out = Vec::with_capacity(map.len());
    for (key, entry) in map {
        let Value::Object(obj) = entry else {
            return Err(Error::parse(
                path,
                format!("$[\"{key}\"]"),
                "expected an object",
            ));
        };
        out.push(tau_usi_dialogue(key, obj, None, path)?);
    }
    Ok(out)
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

pub(super) fn parse_turn(t: &Value, path: &Path, loc: &str) -> Result<Turn> {
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
