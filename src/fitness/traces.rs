//! Loading dialogue traces. The format is chosen by content, not by file extension:
//!
//! - **τ-USI** as published: one JSON object keyed by instance id (`airline_0`, `retail_12_ann2`),
//!   each value with `task_id`, `conversation`, `reward`, `survey`, ... The platform scaffolding is
//!   stripped (see [`clean_tau_usi`]).
//! - **ppol reference** `human_dialogs.json`: a JSON array of `{"conversation": [...], "metadata": {...}}`.
//! - **JSONL**, one dialogue per line: `{"id", "task_id"?, "domain"?, "conversation": [{"role","content"}]}`
//!   (extra keys are kept in `meta`; episode files written by `ppol episodes` are of this kind).
//! - **Plain text**: dialogues separated by lines holding only `---`, turns prefixed `USER:` / `ASSISTANT:`.
//!
//! Malformed input gives one error naming the file, the line or JSON path, and what was expected.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::dialogue::{Dialogue, Role, ToolCall, Turn};
use crate::{Error, Result};

/// Detected format of a trace file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// τ-USI unified JSON keyed by instance id.
    TauUsi,
    /// The reference's `human_dialogs.json` (array of dialogues).
    JsonArray,
    /// A single dialogue object.
    JsonObject,
    /// One dialogue per line.
    Jsonl,
    /// `USER:` / `ASSISTANT:` text with `---` separators.
    Text,
}

/// Options for loading.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Keep only dialogues of this domain (τ-USI: by instance-id prefix; others: `domain` field).
    pub domain: Option<String>,
}

/// Load every file, in order, concatenating their dialogues.
pub fn load_many(paths: &[PathBuf], opts: &LoadOptions) -> Result<Vec<Dialogue>> {
    let mut out = Vec::new();
    for p in paths {
        out.extend(load(p, opts)?);
    }
    Ok(out)
}

/// Load one trace file (`-` reads standard input).
pub fn load(path: &Path, opts: &LoadOptions) -> Result<Vec<Dialogue>> {
    let text = if path == Path::new("-") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| Error::io("reading", "<stdin>", e))?;
        s
    } else {
        crate::hub::read_to_string(path)?
    };
    parse(&text, path, opts)
}

/// Parse trace text; `path` is used for error messages and default ids.
pub fn parse(text: &str, path: &Path, opts: &LoadOptions) -> Result<Vec<Dialogue>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (format, whole) = detect(text, path)?;
    let dialogues = match format {
        TraceFormat::TauUsi => parse_tau_usi(whole.expect("parsed"), path)?,
        TraceFormat::JsonArray => parse_json_array(whole.expect("parsed"), path)?,
        TraceFormat::JsonObject => {
            vec![dialogue_from_value(
                whole.expect("parsed"),
                path,
                "$",
                &stem(path),
            )?]
        }
        TraceFormat::Jsonl => parse_jsonl(text, path)?,
        TraceFormat::Text => parse_text(text, path)?,
    };
    Ok(match &opts.domain {
        Some(d) => dialogues
            .into_iter()
            .filter(|x| x.domain.as_deref() == Some(d.as_str()))
            .collect(),
        None => dialogues,
    })
}

/// Decide the format from the content; returns the parsed JSON when the whole text is one value.
pub fn detect(text: &str, path: &Path) -> Result<(TraceFormat, Option<Value>)> {
    let trimmed = text.trim_start();
    if trimmed.is_empty() {
        return Err(Error::parse(
            path,
            "line 1",
            "file is empty: expected dialogues",
        ));
    }
    match trimmed.as_bytes()[0] {
        b'[' => {
            let v: Value = serde_json::from_str(text).map_err(|e| json_error(path, text, &e))?;
            Ok((TraceFormat::JsonArray, Some(v)))
        }
        b'{' => match serde_json::from_str::<Value>(text) {
            Ok(v) => {
                let obj = v.as_object().expect("starts with {");
                if obj.contains_key("conversation") || obj.contains_key("turns") {
                    Ok((TraceFormat::JsonObject, Some(v)))
                } else if !obj.is_empty() && obj.values().all(|x| x.get("conversation").is_some()) {
                    Ok((TraceFormat::TauUsi, Some(v)))
                } else {
                    Err(Error::parse(
                        path,
                        "$",
                        "a JSON object that is neither a dialogue (no 'conversation' key) nor a τ-USI file (values must be objects with 'conversation')",
                    ))
                }
            }
            // More than one value: JSON Lines. Errors are reported per line there.
            Err(_) => Ok((TraceFormat::Jsonl, None)),
        },
        _ => Ok((TraceFormat::Text, None)),
    }
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "stdin".into())
}

fn json_error(path: &Path, _text: &str, e: &serde_json::Error) -> Error {
    Error::parse(
        path,
        format!("line {} column {}", e.line(), e.column()),
        format!("invalid JSON: {e}"),
    )
}

fn parse_jsonl(text: &str, path: &Path) -> Result<Vec<Dialogue>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| {
            Error::parse(
                path,
                format!("line {lineno}"),
                format!(
                    "invalid JSON (column {}): {e}; expected one dialogue object per line",
                    e.column()
                ),
            )
        })?;
        let default_id = format!("{}:{lineno}", stem(path));
        out.push(dialogue_from_value(
            v,
            path,
            &format!("line {lineno}"),
            &default_id,
        )?);
    }
    if out.is_empty() {
        return Err(Error::parse(path, "line 1", "no dialogues found"));
    }
    Ok(out)
}

fn parse_json_array(v: Value, path: &Path) -> Result<Vec<Dialogue>> {
    let arr = v.as_array().expect("array");
    arr.iter()
        .enumerate()
        .map(|(i, item)| {
            let loc = format!("$[{i}]");
            let default_id = format!("{}[{i}]", stem(path));
            dialogue_from_value(item.clone(), path, &loc, &default_id)
        })
        .collect()
}

fn scalar_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Build a dialogue from one JSON object (JSONL line, array item, single object).
fn dialogue_from_value(v: Value, path: &Path, loc: &str, default_id: &str) -> Result<Dialogue> {
    let Value::Object(mut obj) = v else {
        return Err(Error::parse(
            path,
            loc,
            format!("expected a dialogue object, found {}", kind(&v)),
        ));
    };
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
    let turns = parse_turns(&conv, path, &format!("{loc}.{conv_key}"))?;
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

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn parse_turns(conv: &Value, path: &Path, loc: &str) -> Result<Vec<Turn>> {
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

fn parse_turn(t: &Value, path: &Path, loc: &str) -> Result<Turn> {
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
    let role = Role::parse(role_s).ok_or_else(|| {
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
    let mut tool_calls = Vec::new();
    if let Some(Value::Array(calls)) = obj.get("tool_calls") {
        for (j, c) in calls.iter().enumerate() {
            let cl = format!("{loc}.tool_calls[{j}]");
            // Accept both our flat form and OpenAI's {"id","function":{"name","arguments"}}.
            let f = c.get("function").unwrap_or(c);
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::parse(path, &cl, "missing tool name"))?;
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
            tool_calls.push(ToolCall {
                id,
                name: name.to_string(),
                arguments,
            });
        }
    }
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

fn parse_text(text: &str, path: &Path) -> Result<Vec<Dialogue>> {
    let mut out = Vec::new();
    let mut turns: Vec<Turn> = Vec::new();
    let mut start_line = 1;
    let flush = |turns: &mut Vec<Turn>, out: &mut Vec<Dialogue>, start: usize| {
        if !turns.is_empty() {
            let id = format!("{}:{start}", stem(path));
            let mut d = Dialogue::new(id, std::mem::take(turns));
            for t in &mut d.turns {
                t.content = t.content.trim().to_string();
            }
            out.push(d);
        }
    };
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if line.trim() == "---" {
            flush(&mut turns, &mut out, start_line);
            start_line = lineno + 1;
            continue;
        }
        if let Some((prefix, rest)) = line.split_once(':') {
            if let Some(role) = text_role(prefix) {
                turns.push(Turn::new(role, rest.trim_start()));
                continue;
            }
        }
        match turns.last_mut() {
            Some(t) => {
                t.content.push('\n');
                t.content.push_str(line);
            }
            None if line.trim().is_empty() => start_line = lineno + 1,
            None => return Err(Error::parse(
                path,
                format!("line {lineno}"),
                "text before the first turn: expected a line starting with 'USER:' or 'ASSISTANT:'",
            )),
        }
    }
    flush(&mut turns, &mut out, start_line);
    if out.is_empty() {
        return Err(Error::parse(
            path,
            "line 1",
            "no turns found: expected lines starting with 'USER:' or 'ASSISTANT:'",
        ));
    }
    Ok(out)
}

fn text_role(prefix: &str) -> Option<Role> {
    match prefix.trim().to_ascii_uppercase().as_str() {
        "USER" | "HUMAN" | "CUSTOMER" => Some(Role::User),
        "ASSISTANT" | "AGENT" => Some(Role::Assistant),
        "SYSTEM" => Some(Role::System),
        "TOOL" => Some(Role::Tool),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// τ-USI

fn parse_tau_usi(v: Value, path: &Path) -> Result<Vec<Dialogue>> {
    let Value::Object(map) = v else {
        unreachable!("checked by detect")
    };
    let mut out = Vec::with_capacity(map.len());
    for (key, entry) in map {
        let loc = format!("$[\"{key}\"]");
        let Value::Object(mut obj) = entry else {
            return Err(Error::parse(path, &loc, "expected an object"));
        };
        let conv = obj.remove("conversation").expect("checked by detect");
        let turns = parse_turns(&conv, path, &format!("{loc}.conversation"))?;
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
        out.push(Dialogue {
            id: key,
            task_id,
            domain,
            turns,
            meta,
        });
    }
    Ok(out)
}

/// Strip τ-USI platform scaffolding from a conversation: the first user message starting with
/// `\tau ` (task selection), the `<|canvas|>…<|/canvas|>` block (its text is returned as the
/// instruction), hidden assistant parts (`<|think|>…<|/think|>`, `<function=…>…</function>`,
/// `<|tool|>…<|/tool|>`), and everything from the user's `/stop` on (survey, reward messages).
/// Turns left empty by the stripping are dropped.
pub fn clean_tau_usi(turns: Vec<Turn>) -> (Vec<Turn>, Option<String>) {
    let mut instruction = None;
    let mut out = Vec::with_capacity(turns.len());
    for mut t in turns {
        if t.role == Role::User {
            if t.content.trim_start().starts_with("\\tau ") {
                continue;
            }
            if let Some((before, _)) = split_stop(&t.content) {
                let before = before.trim().to_string();
                if !before.is_empty() {
                    t.content = before;
                    out.push(t);
                }
                break;
            }
        }
        if let Some((text, inner)) = take_block(&t.content, "<|canvas|>", "<|/canvas|>") {
            if instruction.is_none() && !inner.trim().is_empty() {
                instruction = Some(inner.trim().to_string());
            }
            t.content = text;
        }
        if t.role == Role::Assistant {
            t.content = strip_hidden(&t.content);
        }
        t.content = t.content.trim().to_string();
        if !t.content.is_empty() || !t.tool_calls.is_empty() {
            out.push(t);
        }
    }
    (out, instruction)
}

/// Position of a `/stop` command in a user message (as a word of its own).
fn split_stop(s: &str) -> Option<(&str, &str)> {
    let mut from = 0;
    while let Some(i) = s[from..].find("/stop") {
        let at = from + i;
        let before_ok = at == 0 || s[..at].ends_with(|c: char| c.is_whitespace());
        let after = &s[at + 5..];
        let after_ok = after.is_empty() || after.starts_with(|c: char| !c.is_alphanumeric());
        if before_ok && after_ok {
            return Some((&s[..at], after));
        }
        from = at + 5;
    }
    None
}

/// Remove every `open…close` block; returns the remaining text and the first block's inside.
fn take_block(s: &str, open: &str, close: &str) -> Option<(String, String)> {
    let start = s.find(open)?;
    let mut rest = String::new();
    let mut first_inner = None;
    let mut cur = s;
    while let Some(a) = cur.find(open) {
        rest.push_str(&cur[..a]);
        let after = &cur[a + open.len()..];
        match after.find(close) {
            Some(b) => {
                first_inner.get_or_insert_with(|| after[..b].to_string());
                cur = &after[b + close.len()..];
            }
            None => {
                first_inner.get_or_insert_with(|| after.to_string());
                cur = "";
            }
        }
    }
    rest.push_str(cur);
    let _ = start;
    Some((rest, first_inner.unwrap_or_default()))
}

fn strip_hidden(s: &str) -> String {
    let mut out = s.to_string();
    for (open, close) in [
        ("<|think|>", "<|/think|>"),
        ("<|tool|>", "<|/tool|>"),
        ("<function=", "</function>"),
    ] {
        if let Some((rest, _)) = take_block(&out, open, close) {
            out = rest;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Statistics

/// Counts per domain, for `ppol traces stats`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct DomainStats {
    /// Domain (`-` when unknown).
    pub domain: String,
    /// Number of dialogues.
    pub dialogues: usize,
    /// Distinct task ids.
    pub tasks: usize,
    /// Non-empty user turns.
    pub user_turns: usize,
    /// Assistant turns.
    pub assistant_turns: usize,
    /// Mean words (`\b\w+\b` tokens) per user turn.
    pub words_per_user_turn: f64,
    /// Mean user turns per dialogue.
    pub user_turns_per_dialogue: f64,
}

/// Per-domain statistics, domains in order of first appearance, plus a total row (`all`) when
/// there is more than one domain.
pub fn stats(dialogues: &[Dialogue]) -> Vec<DomainStats> {
    let mut order: Vec<String> = Vec::new();
    let mut groups: std::collections::HashMap<String, Vec<&Dialogue>> = Default::default();
    for d in dialogues {
        let key = d.domain.clone().unwrap_or_else(|| "-".into());
        if !groups.contains_key(&key) {
            order.push(key.clone());
        }
        groups.entry(key).or_default().push(d);
    }
    let summarise = |name: &str, ds: &[&Dialogue]| {
        let mut s = DomainStats {
            domain: name.to_string(),
            dialogues: ds.len(),
            ..Default::default()
        };
        let mut words = 0usize;
        let mut tasks = std::collections::HashSet::new();
        for d in ds {
            tasks.insert(d.task_id.clone().unwrap_or_else(|| d.id.clone()));
            for t in &d.turns {
                match t.role {
                    Role::User if !t.content.is_empty() => {
                        s.user_turns += 1;
                        words += t
                            .content
                            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                            .filter(|w| !w.is_empty())
                            .count();
                    }
                    Role::Assistant => s.assistant_turns += 1,
                    _ => {}
                }
            }
        }
        s.tasks = tasks.len();
        s.words_per_user_turn = if s.user_turns > 0 {
            words as f64 / s.user_turns as f64
        } else {
            0.0
        };
        s.user_turns_per_dialogue = if s.dialogues > 0 {
            s.user_turns as f64 / s.dialogues as f64
        } else {
            0.0
        };
        s
    };
    let mut out: Vec<DomainStats> = order.iter().map(|k| summarise(k, &groups[k])).collect();
    if out.len() > 1 {
        let all: Vec<&Dialogue> = dialogues.iter().collect();
        out.push(summarise("all", &all));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Vec<Dialogue>> {
        parse(text, Path::new("t.jsonl"), &LoadOptions::default())
    }

    #[test]
    fn jsonl_with_numeric_task_and_extra_keys() {
        let ds = p(r#"{"id":"a","task_id":7,"conversation":[{"role":"user","content":"hi"}],"reward":1.0}
{"conversation":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{\"x\":1}"}}]}]}"#)
        .unwrap();
        assert_eq!(ds.len(), 2);
        assert_eq!(ds[0].task_id.as_deref(), Some("7"));
        assert_eq!(ds[0].meta["reward"], 1.0);
        assert_eq!(ds[1].id, "t:2");
        assert_eq!(ds[1].turns[0].tool_calls[0].arguments["x"], 1);
    }

    #[test]
    fn jsonl_errors_name_line_and_path() {
        let e = p(
            "{\"conversation\":[]}\n{\"conversation\": [{\"role\": \"user\", \"content\": [1]}]}\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.jsonl: line 2.conversation[0].content: expected a string, found an array"
        );
        let e = p("{\"conversation\":[]}\n{oops}\n").unwrap_err();
        assert!(
            e.to_string().starts_with("t.jsonl: line 2: invalid JSON"),
            "{e}"
        );
        let e = p(
            "{\"conversation\":[{\"role\":\"robot\",\"content\":\"x\"}]}\n{\"conversation\":[]}",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("line 1.conversation[0].role: unknown role 'robot'"),
            "{e}"
        );
    }

    #[test]
    fn text_format_splits_on_separator_lines_only() {
        let ds =
            p("USER: hi --- there\nASSISTANT: hello\nhow can I help\n---\nUSER: bye\n").unwrap();
        assert_eq!(ds.len(), 2);
        assert_eq!(ds[0].turns[0].content, "hi --- there");
        assert_eq!(ds[0].turns[1].content, "hello\nhow can I help");
        let e = p("hello\nUSER: x").unwrap_err();
        assert!(
            e.to_string().contains("line 1: text before the first turn"),
            "{e}"
        );
    }

    #[test]
    fn reference_array_reads_metadata() {
        let ds = p(r#"[{"conversation":[{"role":"user","content":"x"}],"metadata":{"task_id":"t1","source":"s"}}]"#).unwrap();
        assert_eq!(ds[0].task_id.as_deref(), Some("t1"));
        assert_eq!(ds[0].id, "t[0]");
        assert_eq!(ds[0].meta["source"], "s");
    }

    #[test]
    fn tau_usi_scaffolding_is_stripped() {
        let text = r#"{"airline_3_ann2": {"task_id": 585, "reward": 1.0, "survey": {"q": "a"}, "conversation": [
            {"role": "user", "content": "\\tau task_index: 3"},
            {"role": "assistant", "content": "<|canvas|>Your user id is x_1.<|/canvas|>Hi, how can I help?"},
            {"role": "user", "content": "change my flight"},
            {"role": "assistant", "content": "<|think|>plan<|/think|>Sure.<function=get_user>{}</function><|tool|>{}<|/tool|>"},
            {"role": "user", "content": "thanks /stop"},
            {"role": "assistant", "content": "Please fill in the survey"},
            {"role": "user", "content": "5"}]},
          "retail_1": {"task_id": 9, "conversation": [{"role": "user", "content": "hi"}]}}"#;
        let all = parse(text, Path::new("u.json"), &LoadOptions::default()).unwrap();
        assert_eq!(all.len(), 2);
        let ds = parse(
            text,
            Path::new("u.json"),
            &LoadOptions {
                domain: Some("airline".into()),
            },
        )
        .unwrap();
        assert_eq!(ds.len(), 1);
        let d = &ds[0];
        assert_eq!(d.id, "airline_3_ann2");
        assert_eq!(d.task_id.as_deref(), Some("585"));
        assert_eq!(d.meta["instruction"], "Your user id is x_1.");
        assert_eq!(d.meta["reward"], 1.0);
        let texts: Vec<&str> = d.turns.iter().map(|t| t.content.as_str()).collect();
        assert_eq!(
            texts,
            ["Hi, how can I help?", "change my flight", "Sure.", "thanks"]
        );
    }

    #[test]
    fn unknown_object_shape_is_rejected() {
        let e = parse("{\"a\": 1}", Path::new("x.json"), &LoadOptions::default()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("x.json: $: a JSON object that is neither"),
            "{e}"
        );
    }
}
