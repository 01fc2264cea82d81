//! An episode made ready for a training row ([`prepare`]): the calls the agent got wrong
//! ([`BadCall`]) handled as the export's [`BadCalls`] policy says, every other call's arguments
//! brought to its tool's schema ([`super::types::conform`]), and the turns checked to fit
//! together — every tool result answers a call of the agent turn before it, and every call is
//! answered before the conversation moves on (a row may end on a turn of calls whose results
//! were not recorded, never halfway through them). The same for every format, so an episode is
//! exported, cut or skipped for the same reason whichever format is asked for.
//!
//! A call is bad when its arguments are not a JSON object (invalid JSON — ppol then keeps the
//! raw text and answers with a tool error — or another JSON kind), when it names a tool the
//! agent was not offered (rows with tool schemas only), or when an argument has a type its
//! schema rules out and no lossless conversion fixes (`"two"` where it says `integer`).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::types::{conform, Conversion, ConversionRule};
use super::Unexported;
use crate::dialogue::{Role, ToolCall, Turn};
use crate::llm::ToolSpec;
use crate::simulate::episode::record::Episode;

/// What an export does with a call the agent got wrong (`ppol export sft --bad-calls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BadCalls {
    /// The row ends before the agent turn that made the episode's first bad call: the agent's
    /// turns before it are training targets, the bad call and what followed are not in the
    /// row (the default).
    #[default]
    Cut,
    /// The bad calls and their results are taken out of the row; the rest of the episode stays
    /// (an agent turn left with neither text nor calls goes too).
    DropCall,
    /// Episodes with a bad call are skipped.
    DropEpisode,
    /// Bad calls stay where they were made, as context: arguments that are not a JSON object
    /// are written as `{"_raw_arguments": "<the text>"}` ([`RAW_ARGUMENTS_KEY`]), and the agent
    /// message carries `"weight": 0` in `openai`, `hf` and `ppol` (OpenAI's fine-tuning and
    /// the shipped chat template then train on it no more; `llamafactory` has no per-turn
    /// weight and trains on it).
    Keep,
}

impl BadCalls {
    /// Every policy.
    pub const ALL: [BadCalls; 4] = [
        BadCalls::Cut,
        BadCalls::DropCall,
        BadCalls::DropEpisode,
        BadCalls::Keep,
    ];

    /// The name used on the command line and in Python.
    pub fn name(self) -> &'static str {
        match self {
            BadCalls::Cut => "cut",
            BadCalls::DropCall => "drop-call",
            BadCalls::DropEpisode => "drop-episode",
            BadCalls::Keep => "keep",
        }
    }

    /// Parse a policy name; the error lists the accepted ones.
    pub fn parse(s: &str) -> crate::Result<BadCalls> {
        let want = s.trim().to_ascii_lowercase().replace('_', "-");
        Self::ALL
            .into_iter()
            .find(|b| b.name() == want)
            .ok_or_else(|| {
                crate::Error::config(
                    "--bad-calls",
                    format!("unknown policy '{s}'; use cut, drop-call, drop-episode or keep"),
                )
            })
    }
}

impl std::fmt::Display for BadCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for BadCalls {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        BadCalls::parse(s)
    }
}

/// The key under which [`BadCalls::Keep`] writes arguments that are not a JSON object.
pub const RAW_ARGUMENTS_KEY: &str = "_raw_arguments";

/// Why a call is bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BadCallKind {
    /// The arguments are not valid JSON.
    InvalidJson,
    /// The arguments are JSON, but not an object.
    NotAnObject,
    /// The tool is not one the agent was offered.
    UnknownTool,
    /// An argument has a type its schema rules out.
    WrongType,
}

impl BadCallKind {
    /// What it means, for summaries ("2 with arguments that are not valid JSON").
    pub fn describe(self) -> &'static str {
        match self {
            BadCallKind::InvalidJson => "with arguments that are not valid JSON",
            BadCallKind::NotAnObject => "with arguments that are not a JSON object",
            BadCallKind::UnknownTool => "to a tool the agent was not offered",
            BadCallKind::WrongType => "with an argument of a type its schema rules out",
        }
    }
}

/// A call the agent got wrong.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BadCall {
    /// The tool it called.
    pub tool: String,
    /// Why it is bad.
    pub kind: BadCallKind,
    /// The details (the argument and its value, the parse error).
    pub detail: String,
}

/// An episode ready for a record: its conversation after the [`BadCalls`] policy, with every
/// kept call's arguments a JSON object in its schema's types.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The episode with the conversation to write.
    pub episode: Episode,
    /// Indices (into `episode.conversation`) of agent turns kept as context only
    /// ([`BadCalls::Keep`]).
    pub context_only: BTreeSet<usize>,
    /// Every bad call the episode's agent made (also those the policy cut away).
    pub bad_calls: Vec<BadCall>,
    /// Argument values converted to their schema's type.
    pub conversions: Vec<Conversion>,
}

/// A row's reason for skipping an episode whose call went without a result.
pub const NO_RESULT: &str = "a tool call has no result";

/// The reason for a tool result that answers no earlier call.
pub fn orphan_result(call_id: Option<&str>) -> String {
    format!(
        "a tool result answers {} that no earlier agent turn made",
        call_id.map_or("a call".to_string(), |i| format!("call '{i}'"))
    )
}

/// Whether the turns fit together: every tool result answers a call of the agent turn before
/// it, every call is answered before the next user or agent turn, and a conversation that ends
/// on a turn of calls has all or none of their results.
pub fn check_turns(conversation: &[Turn]) -> Result<(), String> {
    let mut pending: Vec<&str> = Vec::new();
    let mut last_calls = 0;
    for t in conversation {
        match t.role {
            Role::System => {}
            Role::Tool => {
                let pos = match &t.tool_call_id {
                    Some(id) => pending.iter().position(|p| p == id),
                    None => (!pending.is_empty()).then_some(0),
                };
                match pos {
                    Some(p) => {
                        pending.remove(p);
                    }
                    None => return Err(orphan_result(t.tool_call_id.as_deref())),
                }
            }
            Role::User | Role::Assistant => {
                if !pending.is_empty() {
                    return Err(NO_RESULT.to_string());
                }
                pending = t.tool_calls.iter().map(|c| c.id.as_str()).collect();
                last_calls = pending.len();
            }
        }
    }
    if !pending.is_empty() && pending.len() != last_calls {
        return Err(NO_RESULT.to_string());
    }
    Ok(())
}

/// A call's verdict: its arguments in the schema's types with what was converted, or why it is
/// bad.
type Verdict = Result<(Value, Vec<Conversion>), BadCall>;

/// Whether `call` is bad; otherwise its arguments in the schema's types, with what was
/// converted.
fn check_call(call: &ToolCall, tools: &[ToolSpec]) -> Verdict {
    let bad = |kind, detail: String| BadCall {
        tool: call.name.clone(),
        kind,
        detail,
    };
    let args = match &call.arguments {
        Value::Object(_) => call.arguments.clone(),
        Value::Null => Value::Object(Map::new()),
        Value::String(raw) => {
            let excerpt: String = raw.chars().take(80).collect();
            return Err(match serde_json::from_str::<Value>(raw) {
                Err(e) => bad(BadCallKind::InvalidJson, format!("{e}: {excerpt}")),
                Ok(v) => bad(
                    BadCallKind::NotAnObject,
                    format!("a JSON {} in a string: {excerpt}", super::types::kind(&v)),
                ),
            });
        }
        other => {
            return Err(bad(
                BadCallKind::NotAnObject,
                format!("a JSON {}", super::types::kind(other)),
            ))
        }
    };
    if tools.is_empty() {
        return Ok((args, Vec::new()));
    }
    let Some(tool) = tools.iter().find(|t| t.name == call.name) else {
        return Err(bad(
            BadCallKind::UnknownTool,
            format!("'{}' is not one of the agent's tools", call.name),
        ));
    };
    let mut notes = Vec::new();
    let args = conform(&args, &tool.parameters, "", &mut notes)
        .map_err(|why| bad(BadCallKind::WrongType, why))?;
    let conversions = notes
        .into_iter()
        .map(|(path, from, to)| Conversion {
            tool: call.name.clone(),
            path,
            from,
            to,
            rule: ConversionRule::Schema,
        })
        .collect();
    Ok((args, conversions))
}

/// `episode` ready for a record in any format, as `policy` says; `tools` are the schemas the
/// agent was offered. An error is the reason the episode is skipped: its turns do not fit
/// together ([`Unexported::Malformed`]), or its bad calls leave nothing to train on
/// ([`Unexported::BadCall`]).
pub fn prepare(
    episode: &Episode,
    tools: &[ToolSpec],
    policy: BadCalls,
) -> Result<Prepared, Unexported> {
    let mut conv = episode.conversation.clone();
    // (turn, call) -> the verdict of each call
    let mut verdicts: Vec<Vec<Verdict>> = conv
        .iter()
        .map(|t| {
            t.tool_calls
                .iter()
                .map(|c| check_call(c, tools))
                .collect::<Vec<_>>()
        })
        .collect();
    let bad_calls: Vec<BadCall> = verdicts
        .iter()
        .flatten()
        .filter_map(|v| v.as_ref().err().cloned())
        .collect();
    let first_bad = verdicts.iter().position(|v| v.iter().any(Result::is_err));
    let mut context_only = BTreeSet::new();
    if let Some(first) = first_bad {
        match policy {
            BadCalls::DropEpisode => {
                let b = &bad_calls[0];
                return Err(Unexported::BadCall(format!(
                    "the agent made {} bad call{} (the first: {} {})",
                    bad_calls.len(),
                    if bad_calls.len() == 1 { "" } else { "s" },
                    b.tool,
                    b.kind.describe()
                )));
            }
            BadCalls::Cut => {
                conv.truncate(first);
                verdicts.truncate(first);
                let first_user = conv.iter().position(|t| t.role == Role::User);
                let answered = conv
                    .iter()
                    .enumerate()
                    .any(|(i, t)| t.role == Role::Assistant && first_user.is_none_or(|u| i > u));
                if !answered {
                    return Err(Unexported::BadCall(format!(
                        "the agent's first turn after the user spoke made a bad call ({} {})",
                        bad_calls[0].tool,
                        bad_calls[0].kind.describe()
                    )));
                }
            }
            BadCalls::DropCall => drop_bad_calls(&mut conv, &mut verdicts),
            BadCalls::Keep => {
                for (i, v) in verdicts.iter_mut().enumerate() {
                    for (j, verdict) in v.iter_mut().enumerate() {
                        if verdict.is_err() {
                            context_only.insert(i);
                            let call = &conv[i].tool_calls[j];
                            let args = match &call.arguments {
                                Value::Object(_) => call.arguments.clone(),
                                Value::String(raw) => Value::Object(Map::from_iter([(
                                    RAW_ARGUMENTS_KEY.to_string(),
                                    Value::String(raw.clone()),
                                )])),
                                other => Value::Object(Map::from_iter([(
                                    RAW_ARGUMENTS_KEY.to_string(),
                                    Value::String(other.to_string()),
                                )])),
                            };
                            *verdict = Ok((args, Vec::new()));
                        }
                    }
                }
            }
        }
    }
    let mut conversions = Vec::new();
    for (turn, v) in conv.iter_mut().zip(verdicts) {
        for (call, verdict) in turn.tool_calls.iter_mut().zip(v) {
            if let Ok((args, notes)) = verdict {
                call.arguments = args;
                conversions.extend(notes);
            }
        }
    }
    check_turns(&conv).map_err(Unexported::Malformed)?;
    let mut episode = episode.clone();
    episode.conversation = conv;
    Ok(Prepared {
        episode,
        context_only,
        bad_calls,
        conversions,
    })
}

/// Take the bad calls and the results that answer them out of `conv` (and `verdicts`, kept in
/// step); an agent turn left with neither text nor calls goes too.
fn drop_bad_calls(conv: &mut Vec<Turn>, verdicts: &mut Vec<Vec<Verdict>>) {
    let mut keep = vec![true; conv.len()];
    // the calls of the latest agent turn still waiting for results: (id, bad)
    let mut pending: Vec<(String, bool)> = Vec::new();
    for (i, t) in conv.iter().enumerate() {
        match t.role {
            Role::Tool => {
                let pos = match &t.tool_call_id {
                    Some(id) => pending.iter().position(|(p, _)| p == id),
                    None => (!pending.is_empty()).then_some(0),
                };
                if let Some(p) = pos {
                    keep[i] = !pending.remove(p).1;
                }
            }
            Role::User | Role::Assistant => {
                pending = t
                    .tool_calls
                    .iter()
                    .zip(&verdicts[i])
                    .map(|(c, v)| (c.id.clone(), v.is_err()))
                    .collect();
            }
            Role::System => {}
        }
    }
    for (i, t) in conv.iter_mut().enumerate() {
        if verdicts[i].iter().all(Result::is_ok) {
            continue;
        }
        let mut k = 0;
        t.tool_calls.retain(|_| {
            k += 1;
            verdicts[i][k - 1].is_ok()
        });
        verdicts[i].retain(Result::is_ok);
        if t.tool_calls.is_empty() && t.content.trim().is_empty() {
            keep[i] = false;
        }
    }
    let mut k = 0;
    conv.retain(|_| {
        k += 1;
        keep[k - 1]
    });
    let mut k = 0;
    verdicts.retain(|_| {
        k += 1;
        keep[k - 1]
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn episode(conversation: Value) -> Episode {
        serde_json::from_value(json!({
            "id": "e", "task_id": "t", "domain": "demo", "persona_id": "p",
            "conversation": conversation, "trial": 0, "seed": 1, "termination": "user_stop",
            "reward": 1.0, "status": "ok", "backend": "openai",
        }))
        .expect("an episode")
    }

    fn tools() -> Vec<ToolSpec> {
        vec![
            serde_json::from_value(json!({"name": "find", "description": "Find.",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}))
            .expect("a tool"),
        ]
    }

    /// A good turn, then a turn with a good call and a bad one (answered out of order), the
    /// retry and the answer.
    fn messy() -> Episode {
        episode(json!([
            {"role": "user", "content": "find W1"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "a", "name": "find", "arguments": {"id": 1}}]},
            {"role": "tool", "tool_call_id": "a", "content": "W1 ok"},
            {"role": "assistant", "content": "Found W1."},
            {"role": "user", "content": "and W2, W3?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "b", "name": "find", "arguments": {"id": "W2"}},
                {"id": "c", "name": "find", "arguments": "{\"id\": \"W3\""}]},
            {"role": "tool", "tool_call_id": "c", "content": "Error: not valid JSON"},
            {"role": "tool", "tool_call_id": "b", "content": "W2 ok"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "d", "name": "nope", "arguments": {}}]},
            {"role": "tool", "tool_call_id": "d", "content": "Error: unknown tool"},
            {"role": "assistant", "content": "Found both."},
        ]))
    }

    #[test]
    fn each_policy_does_what_it_says_with_bad_calls() {
        let cut = prepare(&messy(), &tools(), BadCalls::Cut).unwrap();
        let kinds: Vec<BadCallKind> = cut.bad_calls.iter().map(|b| b.kind).collect();
        assert_eq!(kinds, [BadCallKind::InvalidJson, BadCallKind::UnknownTool]);
        assert_eq!(
            cut.episode.conversation.len(),
            5,
            "cut before the turn of the first"
        );
        assert_eq!(
            cut.episode.conversation[1].tool_calls[0].arguments,
            json!({"id": "1"})
        );
        assert_eq!(cut.conversions.len(), 1);

        let dropped = prepare(&messy(), &tools(), BadCalls::DropCall).unwrap();
        let conv = &dropped.episode.conversation;
        let roles: Vec<&str> = conv.iter().map(|t| t.role.as_str()).collect();
        assert_eq!(
            roles,
            [
                "user",
                "assistant",
                "tool",
                "assistant",
                "user",
                "assistant",
                "tool",
                "assistant"
            ]
        );
        assert_eq!(conv[5].tool_calls.len(), 1);
        assert_eq!(conv[6].content, "W2 ok");

        let skipped = prepare(&messy(), &tools(), BadCalls::DropEpisode).unwrap_err();
        assert!(matches!(&skipped, Unexported::BadCall(why) if why.contains("2 bad calls")));

        let kept = prepare(&messy(), &tools(), BadCalls::Keep).unwrap();
        assert_eq!(kept.context_only, BTreeSet::from([5, 8]));
        assert_eq!(
            kept.episode.conversation[5].tool_calls[1].arguments,
            json!({RAW_ARGUMENTS_KEY: "{\"id\": \"W3\""})
        );
        // without schemas (a chat or external world with no tools recorded) no tool is unknown
        let free = prepare(&messy(), &[], BadCalls::Cut).unwrap();
        assert_eq!(free.bad_calls.len(), 1);
        assert_eq!(
            free.episode.conversation[1].tool_calls[0].arguments,
            json!({"id": 1})
        );
    }

    #[test]
    fn turns_that_do_not_fit_together_are_named() {
        let call = |id: &str| {
            json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": id, "name": "find", "arguments": {}}, {"id": "z", "name": "find", "arguments": {}}]})
        };
        let check = |c: Value| check_turns(&episode(c).conversation);
        assert_eq!(
            check(json!([{"role": "user", "content": "x"},
                         {"role": "tool", "tool_call_id": "q", "content": "?"}])),
            Err("a tool result answers call 'q' that no earlier agent turn made".into())
        );
        assert_eq!(
            check(
                json!([call("a"), {"role": "tool", "tool_call_id": "a", "content": "1"},
                         {"role": "user", "content": "x"}])
            ),
            Err(NO_RESULT.into())
        );
        // at the end: all or none of the last turn's results
        assert_eq!(check(json!([call("a")])), Ok(()));
        assert_eq!(
            check(json!([call("a"), {"role": "tool", "tool_call_id": "z", "content": "1"}])),
            Err(NO_RESULT.into())
        );
        assert_eq!(
            check(
                json!([call("a"), {"role": "tool", "content": "1"}, {"role": "tool", "content": "2"}])
            ),
            Ok(())
        );
        assert!(BadCalls::parse("drop_call").is_ok() && BadCalls::parse("x").is_err());
    }
}
