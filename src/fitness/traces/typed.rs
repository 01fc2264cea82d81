//! The typed pass: a file (or line) deserialized in one pass straight into [`Turn`]s, with only
//! free-form metadata read as a `Value`. Anything it does not accept (malformed JSON, an
//! unexpected type, a repeated key) it declines, and the general reader reads it again.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::path::Path;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::build::{dialogue_from_object, read_tool_calls, role_of, tau_usi_dialogue};
use super::{stem, TraceFormat};
use crate::dialogue::{Dialogue, Role, Turn};
use crate::Result;

/// The typed pass over a file that is one JSON value; `None` hands it to the general reader.
pub(super) fn typed_whole(
    format: TraceFormat,
    text: &str,
    path: &Path,
) -> Option<Result<Vec<Dialogue>>> {
    let stem = stem(path);
    match format {
        TraceFormat::JsonArray => {
            let items: Vec<Fields> = serde_json::from_str(text).ok()?;
            Some(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, f)| {
                        f.into_dialogue(path, &format!("$[{i}]"), &format!("{stem}[{i}]"))
                    })
                    .collect(),
            )
        }
        TraceFormat::JsonObject => {
            let fields: Fields = serde_json::from_str(text).ok()?;
            Some(fields.into_dialogue(path, "$", &stem).map(|d| vec![d]))
        }
        TraceFormat::TauUsi => {
            let TauUsiEntries(entries) = serde_json::from_str(text).ok()?;
            // A repeated instance id keeps its last value: the general reader's business.
            let mut seen = HashSet::with_capacity(entries.len());
            if !entries.iter().all(|(key, _)| seen.insert(key.as_str()))
                || entries.iter().any(|(_, f)| f.turns.is_none())
            {
                return None;
            }
            Some(
                entries
                    .into_iter()
                    .map(|(key, f)| tau_usi_dialogue(key, f.obj, f.turns, path))
                    .collect(),
            )
        }
        TraceFormat::Jsonl | TraceFormat::Text => None,
    }
}

/// Why the typed pass gave a value back to the general reader (never shown: the general reader
/// produces the message).
pub(super) const DECLINED: &str = "left to the general reader";

/// The object keys the typed pass looks at, matched without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Key {
    Conversation,
    Turns,
    Id,
    TaskId,
    Domain,
    Metadata,
    Role,
    Content,
    ToolCalls,
    ToolCallId,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<Key, E> {
                Ok(match s {
                    "conversation" => Key::Conversation,
                    "turns" => Key::Turns,
                    "id" => Key::Id,
                    "task_id" => Key::TaskId,
                    "domain" => Key::Domain,
                    "metadata" => Key::Metadata,
                    "role" => Key::Role,
                    "content" => Key::Content,
                    "tool_calls" => Key::ToolCalls,
                    "tool_call_id" => Key::ToolCallId,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

/// One dialogue object as the typed pass reads it: every key in order with its value, except
/// that the conversation is read straight into turns and its place holds `null`. A repeated key
/// is declined.
pub(super) struct Fields {
    obj: Map<String, Value>,
    turns: Option<Vec<Turn>>,
}

impl Fields {
    pub(super) fn into_dialogue(
        self,
        path: &Path,
        loc: &str,
        default_id: &str,
    ) -> Result<Dialogue> {
        dialogue_from_object(self.obj, self.turns, path, loc, default_id)
    }
}

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fields;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a dialogue object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Fields, A::Error> {
                let mut obj = Map::new();
                let mut turns = None;
                while let Some(key) = map.next_key::<String>()? {
                    let value = if key == "conversation" {
                        turns = Some(map.next_value::<Conversation>()?.0);
                        Value::Null
                    } else {
                        map.next_value::<Value>()?
                    };
                    if obj.insert(key, value).is_some() {
                        return Err(de::Error::custom(DECLINED));
                    }
                }
                Ok(Fields { obj, turns })
            }
        }
        d.deserialize_map(V)
    }
}

/// The τ-USI top level: instance ids with their entries, in file order.
pub(super) struct TauUsiEntries(Vec<(String, Fields)>);

impl<'de> Deserialize<'de> for TauUsiEntries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TauUsiEntries;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a τ-USI object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<TauUsiEntries, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(entry) = map.next_entry::<String, Fields>()? {
                    entries.push(entry);
                }
                Ok(TauUsiEntries(entries))
            }
        }
        d.deserialize_map(V)
    }
}

/// A conversation read straight into turns.
pub(super) struct Conversation(Vec<Turn>);

impl<'de> Deserialize<'de> for Conversation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Conversation;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of turns")
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Conversation, A::Error> {
                let mut turns = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(TypedTurn(turn)) = seq.next_element()? {
                    turns.push(turn);
                }
                Ok(Conversation(turns))
            }
        }
        d.deserialize_seq(V)
    }
}

/// One turn object, read as the general reader's `parse_turn` reads it: `role` a known role
/// name, `content` a string or null (or absent), `tool_calls` and `tool_call_id` as in
/// `parse_turn`, any other key skipped (but still checked to be valid JSON).
pub(super) struct TypedTurn(Turn);

impl<'de> Deserialize<'de> for TypedTurn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TypedTurn;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a turn object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<TypedTurn, A::Error> {
                let declined = || de::Error::custom(DECLINED);
                let mut role = None;
                let mut content: Option<Option<String>> = None;
                let mut tool_calls: Option<Value> = None;
                let mut tool_call_id: Option<Value> = None;
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Role if role.is_none() => role = Some(map.next_value::<RoleName>()?.0),
                        Key::Content if content.is_none() => content = Some(map.next_value()?),
                        Key::ToolCalls if tool_calls.is_none() => {
                            tool_calls = Some(map.next_value()?)
                        }
                        Key::ToolCallId if tool_call_id.is_none() => {
                            tool_call_id = Some(map.next_value()?)
                        }
                        Key::Role | Key::Content | Key::ToolCalls | Key::ToolCallId => {
                            return Err(declined())
                        }
                        _ => {
                            map.next_value::<Value>()?;
                        }
                    }
                }
                let tool_calls = match tool_calls {
                    Some(Value::Array(calls)) => read_tool_calls(&calls).map_err(|_| declined())?,
                    _ => Vec::new(),
                };
                Ok(TypedTurn(Turn {
                    role: role.ok_or_else(declined)?,
                    content: content.flatten().unwrap_or_default(),
                    tool_calls,
                    tool_call_id: match tool_call_id {
                        Some(Value::String(s)) => Some(s),
                        _ => None,
                    },
                }))
            }
        }
        d.deserialize_map(V)
    }
}

/// One dialogue object read for its user turns: the keys that name the dialogue (`id`,
/// `task_id`, `domain`, `metadata`, `turns`) as values, the conversation's user turns, and every
/// other key checked to be valid JSON but not kept. A repeated key is declined.
pub(super) struct UserTurnFields(pub(super) Fields);

impl<'de> Deserialize<'de> for UserTurnFields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = UserTurnFields;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a dialogue object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<UserTurnFields, A::Error> {
                let mut obj = Map::new();
                let mut turns = None;
                while let Some(key) = map.next_key::<Key>()? {
                    let (name, value) = match key {
                        Key::Conversation => {
                            turns = Some(map.next_value::<UserTurnList>()?.0);
                            ("conversation", Value::Null)
                        }
                        Key::Turns => ("turns", map.next_value()?),
                        Key::Id => ("id", map.next_value()?),
                        Key::TaskId => ("task_id", map.next_value()?),
                        Key::Domain => ("domain", map.next_value()?),
                        Key::Metadata => ("metadata", map.next_value()?),
                        _ => {
                            map.next_value::<Checked>()?;
                            continue;
                        }
                    };
                    if obj.insert(name.to_string(), value).is_some() {
                        return Err(de::Error::custom(DECLINED));
                    }
                }
                Ok(UserTurnFields(Fields { obj, turns }))
            }
        }
        d.deserialize_map(V)
    }
}

/// A conversation read for its user turns; the others are checked as [`TypedTurn`] checks them.
pub(super) struct UserTurnList(Vec<Turn>);

impl<'de> Deserialize<'de> for UserTurnList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = UserTurnList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of turns")
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<UserTurnList, A::Error> {
                let mut turns = Vec::new();
                while let Some(UserTurn(turn)) = seq.next_element()? {
                    turns.extend(turn);
                }
                Ok(UserTurnList(turns))
            }
        }
        d.deserialize_seq(V)
    }
}

/// One turn checked as [`TypedTurn`] does, kept only when it is a user turn. Text is borrowed
/// from the input where it has no escapes, so turns that are not kept cost no allocation.
pub(super) struct UserTurn(Option<Turn>);

impl<'de> Deserialize<'de> for UserTurn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = UserTurn;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a turn object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<UserTurn, A::Error> {
                let declined = || de::Error::custom(DECLINED);
                let mut role = None;
                let mut content: Option<Option<Cow<'de, str>>> = None;
                let mut tool_calls: Option<Value> = None;
                let mut tool_call_id: Option<Value> = None;
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Role if role.is_none() => role = Some(map.next_value::<RoleName>()?.0),
                        Key::Content if content.is_none() => {
                            content = Some(map.next_value::<Text<'de>>()?.0)
                        }
                        Key::ToolCalls if tool_calls.is_none() => {
                            tool_calls = Some(map.next_value()?)
                        }
                        Key::ToolCallId if tool_call_id.is_none() => {
                            tool_call_id = Some(map.next_value()?)
                        }
                        Key::Role | Key::Content | Key::ToolCalls | Key::ToolCallId => {
                            return Err(declined())
                        }
                        _ => {
                            map.next_value::<Checked>()?;
                        }
                    }
                }
                let role = role.ok_or_else(declined)?;
                let tool_calls = match tool_calls {
                    Some(Value::Array(calls)) => read_tool_calls(&calls).map_err(|_| declined())?,
                    _ => Vec::new(),
                };
                if role != Role::User {
                    return Ok(UserTurn(None));
                }
                Ok(UserTurn(Some(Turn {
                    role,
                    content: content.flatten().map(Cow::into_owned).unwrap_or_default(),
                    tool_calls,
                    tool_call_id: match tool_call_id {
                        Some(Value::String(s)) => Some(s),
                        _ => None,
                    },
                })))
            }
        }
        d.deserialize_map(V)
    }
}

/// A string or null, borrowed from the input when it has no escapes.
pub(super) struct Text<'de>(Option<Cow<'de, str>>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or null")
            }
            fn visit_borrowed_str<E: de::Error>(
                self,
                s: &'de str,
            ) -> std::result::Result<Text<'de>, E> {
                Ok(Text(Some(Cow::Borrowed(s))))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<Text<'de>, E> {
                Ok(Text(Some(Cow::Owned(s.to_string()))))
            }
            fn visit_unit<E: de::Error>(self) -> std::result::Result<Text<'de>, E> {
                Ok(Text(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// Any JSON value, parsed as strictly as [`serde_json::Value`] but not kept.
pub(super) struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Checked;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Checked, A::Error> {
                while map.next_key::<Checked>()?.is_some() {
                    map.next_value::<Checked>()?;
                }
                Ok(Checked)
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Checked, A::Error> {
                while seq.next_element::<Checked>()?.is_some() {}
                Ok(Checked)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_unit<E: de::Error>(self) -> std::result::Result<Checked, E> {
                Ok(Checked)
            }
        }
        d.deserialize_any(V)
    }
}

/// A role name (see [`Role::parse`]); anything else is declined.
pub(super) struct RoleName(Role);

impl<'de> Deserialize<'de> for RoleName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RoleName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a role name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<RoleName, E> {
                role_of(s).map(RoleName).ok_or_else(|| E::custom(DECLINED))
            }
        }
        d.deserialize_str(V)
    }
}
