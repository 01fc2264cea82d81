//! JSON and JSON Lines: every writer escapes bidi controls (read back as the same string).

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::text::unprintable;
use super::{read_file, write_atomic, LongLines};
use crate::{Error, Result};

/// Rows as JSON Lines text (written by [`to_json`]: bidi controls escaped).
pub fn to_jsonl<T: Serialize>(rows: &[T]) -> String {
    let mut s = String::new();
    for r in rows {
        s.push_str(&to_json(r));
        s.push('\n');
    }
    s
}

/// A value as compact JSON in which every character [`printable`](super::printable) would
/// escape (bidi controls, control characters serde_json leaves as they are) is a `\uXXXX`
/// escape: the same string once parsed, but a person who opens the file sees no reordered text.
/// Everything ppol writes for people to read or pass on (JSON Lines outputs, JSON on stdout)
/// goes through here.
pub fn to_json<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::new();
    write_json(&mut out, value).expect("serialisable");
    String::from_utf8(out).expect("JSON is UTF-8")
}

/// [`to_json`], indented.
pub fn to_json_pretty<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(
        &mut out,
        SafeFormatter(serde_json::ser::PrettyFormatter::new()),
    );
    value.serialize(&mut ser).expect("serialisable");
    String::from_utf8(out).expect("JSON is UTF-8")
}

/// [`to_json`] into a writer.
pub fn write_json<W: std::io::Write, T: Serialize + ?Sized>(
    writer: W,
    value: &T,
) -> serde_json::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(
        writer,
        SafeFormatter(serde_json::ser::CompactFormatter),
    );
    value.serialize(&mut ser)
}

/// A JSON formatter that escapes what [`printable`] escapes and otherwise writes as `F`.
struct SafeFormatter<F>(F);

impl<F: serde_json::ser::Formatter> serde_json::ser::Formatter for SafeFormatter<F> {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut rest = fragment;
        while let Some((i, c)) = rest.char_indices().find(|&(_, c)| unprintable(c)) {
            writer.write_all(&rest.as_bytes()[..i])?;
            // outside the Basic Multilingual Plane no character is unprintable
            write!(writer, "\\u{:04x}", c as u32)?;
            rest = &rest[i + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }

    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn end_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_key(w)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

/// Write rows as JSON Lines, atomically.
pub fn write_jsonl<T: Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    write_atomic(path, to_jsonl(rows).as_bytes())
}

/// Parse JSON Lines text (blank lines skipped); an error names the file, the line and `what`
/// was expected.
pub fn parse_jsonl<T: DeserializeOwned>(text: &str, path: &Path, what: &str) -> Result<Vec<T>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row = serde_json::from_str(line).map_err(|e| {
            Error::parse(path, format!("line {}", i + 1), format!("not {what}: {e}"))
        })?;
        out.push(row);
    }
    Ok(out)
}

/// Read a JSON Lines file (see [`parse_jsonl`]); a line longer than
/// [`limits::MAX_LINE_BYTES`](crate::limits::MAX_LINE_BYTES) is refused as it is read.
pub fn read_jsonl<T: DeserializeOwned>(path: &Path, what: &str) -> Result<Vec<T>> {
    let bytes = read_file(path, path, LongLines::Refuse)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let at = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = at.iter().filter(|&&b| b == b'\n').count() + 1;
        Error::parse(path, format!("line {line}"), "not UTF-8 text")
    })?;
    parse_jsonl(&text, path, what)
}
