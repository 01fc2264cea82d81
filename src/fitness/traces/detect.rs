//! Telling the four formats apart by content: the first character, and for `{` one scan of the
//! first JSON value that builds nothing ([`Shape`]); the general reader's detection when only a
//! parsed value can tell.

use std::fmt;
use std::path::Path;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::typed::Key;
use super::TraceFormat;
use crate::{Error, Result};

/// Decide the format from the content. A text starting with `[` is a JSON array (a syntax error
/// in it is reported by `parse`); one starting with `{` is scanned once, without building
/// anything, to tell a single dialogue, a τ-USI file and JSON Lines apart.
pub fn detect(text: &str, path: &Path) -> Result<TraceFormat> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match sniff(text, path)? {
        Some(format) => Ok(format),
        None => detect_value(text, path).map(|(format, _)| format),
    }
}

/// The format, from the first character and (for `{`) one scan of the first JSON value;
/// `None` when only the general reader can tell (an object that is neither a dialogue nor a
/// τ-USI file: an error, unless a repeated key changes the picture).
pub(super) fn sniff(text: &str, path: &Path) -> Result<Option<TraceFormat>> {
    let trimmed = text.trim_start();
    if trimmed.is_empty() {
        return Err(Error::parse(
            path,
            "line 1",
            "file is empty: expected dialogues",
        ));
    }
    Ok(match trimmed.as_bytes()[0] {
        b'[' => Some(TraceFormat::JsonArray),
        b'{' => match Shape::scan(text) {
            // More than one value (or not valid JSON): JSON Lines, with errors per line.
            None => Some(TraceFormat::Jsonl),
            Some(shape) if shape.dialogue_key => Some(TraceFormat::JsonObject),
            Some(shape)
                if shape.entries > 0 && shape.entries_with_conversation == shape.entries =>
            {
                Some(TraceFormat::TauUsi)
            }
            Some(_) => None,
        },
        _ => Some(TraceFormat::Text),
    })
}

pub(super) fn json_error(path: &Path, e: &serde_json::Error) -> Error {
    Error::parse(
        path,
        format!("line {} column {}", e.line(), e.column()),
        format!("invalid JSON: {e}"),
    )
}

/// Outline of a JSON object, scanned without building it: does it have a `conversation` or
/// `turns` key, and how many of its values are objects with a `conversation` key.
#[derive(Default)]
pub(super) struct Shape {
    dialogue_key: bool,
    entries: usize,
    entries_with_conversation: usize,
}

impl Shape {
    /// The outline when `text` is exactly one JSON object; `None` otherwise.
    fn scan(text: &str) -> Option<Shape> {
        let mut de = serde_json::Deserializer::from_str(text);
        let shape = Shape::deserialize(&mut de).ok()?;
        de.end().ok()?;
        Some(shape)
    }
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Shape;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Shape, A::Error> {
                let mut shape = Shape::default();
                while let Some(key) = map.next_key::<Key>()? {
                    shape.dialogue_key |= matches!(key, Key::Conversation | Key::Turns);
                    shape.entries += 1;
                    if map.next_value::<HasConversation>()?.0 {
                        shape.entries_with_conversation += 1;
                    }
                }
                Ok(shape)
            }
        }
        d.deserialize_map(V)
    }
}

/// Any JSON value, skipped; true when it is an object with a `conversation` key.
pub(super) struct HasConversation(bool);

impl<'de> Deserialize<'de> for HasConversation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = HasConversation;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<HasConversation, A::Error> {
                let mut found = false;
                while let Some(key) = map.next_key::<Key>()? {
                    found |= key == Key::Conversation;
                    map.next_value::<IgnoredAny>()?;
                }
                Ok(HasConversation(found))
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<HasConversation, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(HasConversation(false))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<HasConversation, E> {
                Ok(HasConversation(false))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<HasConversation, E> {
                Ok(HasConversation(false))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<HasConversation, E> {
                Ok(HasConversation(false))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<HasConversation, E> {
                Ok(HasConversation(false))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<HasConversation, E> {
                Ok(HasConversation(false))
            }
            fn visit_unit<E: de::Error>(self) -> std::result::Result<HasConversation, E> {
                Ok(HasConversation(false))
            }
        }
        d.deserialize_any(V)
    }
}

/// The format and (for a single JSON value) the parsed value.
pub(super) fn detect_value(text: &str, path: &Path) -> Result<(TraceFormat, Option<Value>)> {
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
            let v: Value = serde_json::from_str(text).map_err(|e| json_error(path, &e))?;
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
