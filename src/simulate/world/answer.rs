//! A simulator's answer, held to the bounds of ppol's own episodes before anything of it is
//! kept: the answer is at most [`MAX_EPISODE_BYTES`], each turn at most [`MAX_TURN_BYTES`];
//! user turns past the episode's `max_turns` are cut (with a note, termination `max_turns`)
//! and never built, nor turns past [`MAX_EPISODE_TURNS`]; `reward` is a number in [0, 1];
//! `usage` is per role whole, non-negative counts; `meta`, `reward_info` and `agent` are
//! objects of bounded size. Anything else fails the episode with the reason.
//!
//! The protocol's routing reads only an answer's envelope (`Envelope`: type and ids, the
//! rest skipped without being built), so a huge answer costs its line, not a tree of it.

use std::path::Path;

use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::{AgentView, WorldTask};
use crate::dialogue::{Role, Turn};
use crate::limits::{bytes, MAX_EPISODE_BYTES, MAX_EPISODE_TURNS, MAX_TURN_BYTES};
use crate::simulate::episode::record::{Episode, EpisodeStatus};
use crate::simulate::episode::Termination;

/// Bytes of an answer's `meta` and of its `reward_info`, each.
pub const MAX_META_BYTES: usize = 1 << 20;
/// Bytes of an answer's `agent` (system prompt and tools).
pub const MAX_AGENT_BYTES: usize = 4 << 20;
/// Bytes of an answer's `usage`.
pub const MAX_USAGE_BYTES: usize = 64 << 10;
/// Roles in an answer's `usage`.
const MAX_USAGE_ROLES: usize = 16;
/// The largest count `usage` may give (tokens, calls).
const MAX_USAGE_COUNT: u64 = 1 << 50;
/// Characters kept of a simulator's error message.
const MAX_MESSAGE_CHARS: usize = 2000;

/// The fields of an answer that route it, read without building the rest.
#[derive(Debug, Deserialize)]
pub(crate) struct Envelope<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<&'a RawValue>,
    #[serde(default, borrow)]
    request_id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
}

/// A raw JSON value as a string, when it is one.
fn as_string(raw: Option<&RawValue>) -> Option<String> {
    raw.filter(|r| r.get().starts_with('"'))
        .and_then(|r| serde_json::from_str(r.get()).ok())
}

impl Envelope<'_> {
    /// Parse the envelope of a line (an error when the line is not a JSON object).
    pub(crate) fn parse(line: &[u8]) -> Result<Envelope<'_>, String> {
        // (a struct is also read from a list, by position: only an object is an answer)
        if line.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(
                match serde_json::from_slice::<serde::de::IgnoredAny>(line) {
                    Ok(_) => "is not a JSON object".to_string(),
                    Err(e) => format!("is not JSON ({e})"),
                },
            );
        }
        serde_json::from_slice(line).map_err(|e| {
            if e.is_data() {
                "is not a JSON object".to_string()
            } else {
                format!("is not JSON ({e})")
            }
        })
    }

    /// `type` (empty when absent or not a string).
    pub(crate) fn kind(&self) -> String {
        as_string(self.kind).unwrap_or_default()
    }

    /// `request_id`, when a string.
    pub(crate) fn request_id(&self) -> Option<String> {
        as_string(self.request_id)
    }

    /// `id` (empty when absent or not a string).
    pub(crate) fn id(&self) -> String {
        as_string(self.id).unwrap_or_default()
    }
}

/// The parts of a `dialogue` or `error` answer, each kept raw until checked.
#[derive(Debug, Deserialize)]
struct Raw<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<&'a RawValue>,
    #[serde(default, borrow)]
    message: Option<&'a RawValue>,
    #[serde(default, borrow)]
    conversation: Option<&'a RawValue>,
    #[serde(default, borrow)]
    reward: Option<&'a RawValue>,
    #[serde(default, borrow)]
    meta: Option<&'a RawValue>,
    #[serde(default, borrow)]
    reward_info: Option<&'a RawValue>,
    #[serde(default, borrow)]
    usage: Option<&'a RawValue>,
    #[serde(default, borrow)]
    agent: Option<&'a RawValue>,
    #[serde(default, borrow)]
    termination: Option<&'a RawValue>,
}

/// Turns read under the limits; what was cut is counted, not kept.
#[derive(Debug, Default)]
struct Turns {
    kept: Vec<Turn>,
    /// Turns in the answer, every role.
    total: usize,
    /// User turns in the answer.
    users: usize,
    /// Why the conversation was cut, if it was.
    cut: Option<String>,
}

struct TurnsSeed {
    max_user_turns: usize,
}

impl<'de> DeserializeSeed<'de> for TurnsSeed {
    type Value = Turns;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Turns, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for TurnsSeed {
    type Value = Turns;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of turns")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Turns, A::Error> {
        use serde::de::Error as _;
        let mut t = Turns::default();
        loop {
            if t.cut.is_some() {
                // past the cut: counted, never built
                match seq.next_element::<&'de RawValue>()? {
                    Some(raw) => {
                        t.total += 1;
                        if raw.get().contains("\"user\"") && is_user_turn(raw) {
                            t.users += 1;
                        }
                        continue;
                    }
                    None => return Ok(t),
                }
            }
            let Some(raw) = seq.next_element::<&'de RawValue>()? else {
                return Ok(t);
            };
            let i = t.total;
            t.total += 1;
            if raw.get().len() > MAX_TURN_BYTES {
                return Err(A::Error::custom(format!(
                    "conversation[{i}] is {} bytes; a turn may hold at most {}",
                    raw.get().len(),
                    bytes(MAX_TURN_BYTES as u64)
                )));
            }
            let v: Value = serde_json::from_str(raw.get()).map_err(A::Error::custom)?;
            let turn = crate::fitness::traces::parse_turn(
                &v,
                Path::new("simulator answer"),
                &format!("conversation[{i}]"),
            )
            .map_err(A::Error::custom)?;
            if turn.role == Role::User {
                t.users += 1;
                if t.users > self.max_user_turns {
                    t.cut = Some(format!("max_turns = {}", self.max_user_turns));
                    continue;
                }
            }
            if t.kept.len() == MAX_EPISODE_TURNS {
                t.cut = Some(format!("{MAX_EPISODE_TURNS} turns, ppol's limit"));
                continue;
            }
            t.kept.push(turn);
        }
    }
}

/// Whether a raw turn past the cut is a user turn (its `role`, read without its content).
fn is_user_turn(raw: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct RoleOnly<'a> {
        #[serde(default, borrow)]
        role: Option<&'a RawValue>,
    }
    serde_json::from_str::<RoleOnly>(raw.get())
        .ok()
        .and_then(|r| as_string(r.role))
        .is_some_and(|r| r == "user")
}

/// Parse a raw part of at most `cap` bytes as JSON; the error names `key`.
fn bounded(key: &str, raw: &RawValue, cap: usize) -> Result<Value, String> {
    if raw.get().len() > cap {
        return Err(format!(
            "{key} is {} bytes; it may hold at most {}",
            raw.get().len(),
            bytes(cap as u64)
        ));
    }
    serde_json::from_str(raw.get()).map_err(|e| format!("{key}: {e}"))
}

/// A part that is absent or null is None.
fn present(raw: Option<&RawValue>) -> Option<&RawValue> {
    raw.filter(|r| r.get() != "null")
}

/// Fill an episode from a `dialogue` answer `line`, user turns cut at `max_turns`; an error is
/// the reason the episode failed.
pub(crate) fn apply_answer(e: &mut Episode, line: &[u8], max_turns: usize) -> Result<(), String> {
    if line.len() > MAX_EPISODE_BYTES {
        return Err(format!(
            "the answer is {} bytes; an episode may hold at most {} (ppol's limit)",
            line.len(),
            bytes(MAX_EPISODE_BYTES as u64)
        ));
    }
    let raw: Raw = serde_json::from_slice(line).map_err(|e| format!("a bad answer: {e}"))?;
    match as_string(raw.kind).as_deref() {
        Some("dialogue") => {}
        Some("error") => {
            let message = as_string(raw.message).unwrap_or_default();
            let long = message.chars().nth(MAX_MESSAGE_CHARS).is_some();
            let mut shown: String = message.chars().take(MAX_MESSAGE_CHARS).collect();
            if long {
                shown.push_str("...");
            }
            return Err(format!("the simulator reported an error: {shown}"));
        }
        other => {
            return Err(format!(
                "an answer of type {other:?}, expected \"dialogue\" or \"error\""
            ))
        }
    }
    let conv = present(raw.conversation)
        .ok_or("conversation: expected a list of turns, found nothing or null")?;
    let mut de = serde_json::Deserializer::from_str(conv.get());
    let turns = TurnsSeed {
        max_user_turns: max_turns,
    }
    .deserialize(&mut de)
    .map_err(|err| format!("conversation: {err}"))?;
    e.conversation = turns.kept;
    e.reward = match present(raw.reward) {
        None => None,
        Some(r) => match serde_json::from_str::<f64>(r.get()) {
            Ok(x) if x.is_finite() && (0.0..=1.0).contains(&x) => Some(x),
            _ => {
                let shown: String = r.get().chars().take(100).collect();
                return Err(format!(
                    "reward must be a number in [0, 1] or null, got {shown}"
                ));
            }
        },
    };
    if let Some(m) = present(raw.meta) {
        let m = bounded("meta", m, MAX_META_BYTES)?;
        if !m.is_object() {
            return Err("meta must be an object".into());
        }
        e.meta = Some(m);
    }
    if let Some(r) = present(raw.reward_info) {
        let r = bounded("reward_info", r, MAX_META_BYTES)?;
        if !r.is_object() {
            return Err("reward_info must be an object".into());
        }
        e.reward_info = r;
    }
    if let Some(u) = present(raw.usage) {
        e.usage = check_usage(bounded("usage", u, MAX_USAGE_BYTES)?)?;
    }
    if let Some(a) = present(raw.agent) {
        e.agent = Some(agent_view(&bounded("agent", a, MAX_AGENT_BYTES)?)?);
    }
    e.termination = match as_string(raw.termination).as_deref() {
        Some("user_stop") => Termination::UserStop,
        Some("transfer") => Termination::Transfer,
        Some("out_of_scope") => Termination::OutOfScope,
        Some("max_turns") => Termination::MaxTurns,
        Some("error") => {
            return Err("the simulator ended the episode with termination \"error\"".into())
        }
        _ => termination_of(&e.conversation),
    };
    if let Some(limit) = &turns.cut {
        e.termination = Termination::MaxTurns;
        e.notes.push(format!(
            "the simulator answered {} turns ({} user turns): cut at {limit}, {} turns kept",
            turns.total,
            turns.users,
            e.conversation.len()
        ));
    }
    e.status = EpisodeStatus::Ok;
    Ok(())
}

/// `usage`: per role, whole non-negative counts (and a non-negative `usd`).
fn check_usage(u: Value) -> Result<Value, String> {
    let roles = u.as_object().ok_or("usage must be an object of roles")?;
    if roles.len() > MAX_USAGE_ROLES {
        return Err(format!(
            "usage names {} roles; at most {MAX_USAGE_ROLES}",
            roles.len()
        ));
    }
    for (role, counts) in roles {
        let role_shown = crate::io::printable(role);
        let counts = counts
            .as_object()
            .ok_or_else(|| format!("usage.{role_shown} must be an object of counts"))?;
        for (k, v) in counts {
            let ok = if k == "usd" || k == "cost" {
                v.as_f64().is_some_and(|x| x.is_finite() && x >= 0.0)
            } else {
                v.as_u64().is_some_and(|n| n <= MAX_USAGE_COUNT)
            };
            if !ok {
                return Err(format!(
                    "usage.{role_shown}.{} must be a whole non-negative count, got {v}",
                    crate::io::printable(k)
                ));
            }
        }
    }
    Ok(u)
}

/// `agent`: `{"system_prompt", "tools"}`.
fn agent_view(a: &Value) -> Result<AgentView, String> {
    let a = a.as_object().ok_or("agent must be an object")?;
    let system_prompt = a
        .get("system_prompt")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let tools = a
        .get("tools")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .filter_map(crate::llm::ToolSpec::from_openai)
                .collect()
        })
        .unwrap_or_default();
    Ok(AgentView {
        system_prompt,
        tools,
    })
}

/// The termination of an answer that does not say, read off its last user turn's stop token.
fn termination_of(conv: &[Turn]) -> Termination {
    let last_user = conv.iter().rev().find(|t| t.role == Role::User);
    last_user
        .and_then(|t| crate::simulate::episode::parse_user_message(&t.content).stop)
        .unwrap_or(Termination::UserStop)
}

/// The tasks of a `tasks` answer (`list_tasks`), each checked as it is read; an error names
/// the entry.
pub(crate) fn tasks_of_answer(line: &[u8]) -> Result<Vec<WorldTask>, String> {
    #[derive(Deserialize)]
    struct TasksAnswer {
        #[serde(default)]
        tasks: Option<TaskEntries>,
    }
    struct TaskEntries(Vec<WorldTask>);
    impl<'de> Deserialize<'de> for TaskEntries {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = TaskEntries;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a list of tasks")
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TaskEntries, A::Error> {
                    use serde::de::Error as _;
                    let mut out = Vec::new();
                    let mut seen = std::collections::HashSet::new();
                    while let Some(raw) = seq.next_element::<&'de RawValue>()? {
                        let i = out.len();
                        let v: Value = serde_json::from_str(raw.get()).map_err(A::Error::custom)?;
                        let task = super::tasks::task_from_value(&v)
                            .map_err(|m| A::Error::custom(format!("tasks[{i}]: {m}")))?;
                        if !seen.insert(task.task_id.clone()) {
                            return Err(A::Error::custom(format!(
                                "tasks[{i}]: task_id '{}' is listed twice",
                                task.task_id
                            )));
                        }
                        out.push(task);
                    }
                    Ok(TaskEntries(out))
                }
            }
            d.deserialize_seq(V)
        }
    }
    let a: TasksAnswer = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    a.tasks
        .map(|t| t.0)
        .ok_or_else(|| "the answer has no `tasks` list".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn episode() -> Episode {
        let mut e = Episode::failed("t", None, 0, 1, "external", "external:x", String::new());
        e.error = None;
        e
    }

    fn apply(v: Value, max_turns: usize) -> (Episode, Result<(), String>) {
        let mut e = episode();
        let r = apply_answer(&mut e, v.to_string().as_bytes(), max_turns);
        (e, r)
    }

    #[test]
    fn answers_fill_the_episode_or_say_why_not() {
        let (e, r) = apply(
            json!({"type": "dialogue", "id": "t:none:0", "reward": 1.0,
                   "conversation": [{"role": "user", "content": "bye ###STOP###"}]}),
            5,
        );
        r.unwrap();
        assert_eq!(e.status, EpisodeStatus::Ok);
        assert_eq!(e.reward, Some(1.0));
        let (_, r) = apply(
            json!({"type": "dialogue", "conversation": [{"role": "robot"}]}),
            5,
        );
        assert!(r.unwrap_err().contains("robot"));
        let (_, r) = apply(json!({"type": "error", "message": "no"}), 5);
        assert!(r.unwrap_err().contains("no"));
    }

    #[test]
    fn issue34_item3_turns_are_cut_at_max_turns_with_a_note() {
        let turns: Vec<Value> = (0..5000)
            .flat_map(|i| {
                [
                    json!({"role": "user", "content": format!("u{i}")}),
                    json!({"role": "assistant", "content": "a"}),
                ]
            })
            .collect();
        let (e, r) = apply(json!({"type": "dialogue", "conversation": turns}), 10);
        r.unwrap();
        assert_eq!(e.termination, Termination::MaxTurns);
        let users = e
            .conversation
            .iter()
            .filter(|t| t.role == Role::User)
            .count();
        assert_eq!((users, e.conversation.len()), (10, 20));
        assert!(
            e.notes[0].contains("10000 turns (5000 user turns): cut at max_turns = 10"),
            "{:?}",
            e.notes
        );
    }

    #[test]
    fn issue34_item3_answers_are_bounded_and_values_checked() {
        let big = "x".repeat(MAX_TURN_BYTES + 1);
        let conv = json!([{"role": "user", "content": "hi"}]);
        for (v, why) in [
            (
                json!({"type": "dialogue", "conversation": [{"role": "user", "content": big}]}),
                "a turn may hold at most 1 MiB",
            ),
            (
                json!({"type": "dialogue", "conversation": conv, "reward": 7.5}),
                "reward must be a number in [0, 1]",
            ),
            (
                json!({"type": "dialogue", "conversation": conv, "reward": "1"}),
                "reward must be",
            ),
            (
                json!({"type": "dialogue", "conversation": conv,
                       "usage": {"agent": {"prompt_tokens": -5}}}),
                "usage.agent.prompt_tokens",
            ),
            (
                json!({"type": "dialogue", "conversation": conv, "usage": {"agent": 3}}),
                "usage.agent must be",
            ),
            (
                json!({"type": "dialogue", "conversation": conv, "meta": [1]}),
                "meta must be an object",
            ),
            (
                json!({"type": "dialogue", "conversation": conv,
                       "meta": {"x": "y".repeat(MAX_META_BYTES)}}),
                "meta is",
            ),
            (json!({"type": "dialogue"}), "conversation"),
        ] {
            let (_, r) = apply(v, 5);
            let e = r.unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
        let huge = vec![b' '; MAX_EPISODE_BYTES + 1];
        let e = apply_answer(&mut episode(), &huge, 5).unwrap_err();
        assert!(e.contains("16 MiB"), "{e}");
        let (e, r) = apply(
            json!({"type": "dialogue", "conversation": conv, "reward": 0.5,
                   "usage": {"agent": {"calls": 2, "prompt_tokens": 10, "usd": 0.01}}}),
            5,
        );
        r.unwrap();
        assert_eq!(e.usage["agent"]["calls"], 2);
    }

    #[test]
    fn envelopes_route_without_building_the_answer() {
        let line =
            br#"{"type": "dialogue", "request_id": "r7", "id": "t:p:0", "conversation": [1, 2]}"#;
        let e = Envelope::parse(line).unwrap();
        assert_eq!(
            (e.kind(), e.request_id(), e.id()),
            ("dialogue".into(), Some("r7".into()), "t:p:0".into())
        );
        assert_eq!(Envelope::parse(b"[1]").unwrap_err(), "is not a JSON object");
        assert!(Envelope::parse(b"nope")
            .unwrap_err()
            .starts_with("is not JSON"));
        let e = Envelope::parse(br#"{"type": 3, "request_id": ["r"]}"#).unwrap();
        assert_eq!((e.kind(), e.request_id()), (String::new(), None));
        let tasks = tasks_of_answer(
            br#"{"type": "tasks", "tasks": [{"task_id": 1, "context": "a"}, {"task_id": "b", "context": "c", "split": "test"}]}"#,
        )
        .unwrap();
        assert_eq!(tasks.len(), 2);
        let e = tasks_of_answer(
            br#"{"tasks": [{"task_id": 1, "context": "a"}, {"task_id": 1, "context": "b"}]}"#,
        )
        .unwrap_err();
        assert!(e.contains("tasks[1]") && e.contains("twice"), "{e}");
    }
}
