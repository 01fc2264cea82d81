//! File helpers every stage uses: reading text (a UTF-8 byte-order mark is dropped, so files
//! saved by Windows editors load everywhere), atomic writes, JSON Lines, and RFC 3339 time.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{Error, Result};

/// Read a whole file to a string with an error that names it. A leading UTF-8 byte-order mark
/// is removed.
pub fn read_to_string(path: &Path) -> Result<String> {
    let mut text = std::fs::read_to_string(path).map_err(|e| Error::io("reading", path, e))?;
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Ok(text)
}

/// Write a file atomically: write to a sibling temp file, fsync, rename over the target.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| Error::io("creating directory", dir, e))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".ppol-tmp-")
        .tempfile_in(dir)
        .map_err(|e| Error::io("creating temp file in", dir, e))?;
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_all())
        .map_err(|e| Error::io("writing", path, e))?;
    tmp.persist(path)
        .map_err(|e| Error::io("renaming temp file to", path, e.error))?;
    Ok(())
}

/// Rows as JSON Lines text.
pub fn to_jsonl<T: Serialize>(rows: &[T]) -> String {
    let mut s = String::new();
    for r in rows {
        s.push_str(&serde_json::to_string(r).expect("serialisable"));
        s.push('\n');
    }
    s
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

/// Read a JSON Lines file (see [`parse_jsonl`]).
pub fn read_jsonl<T: DeserializeOwned>(path: &Path, what: &str) -> Result<Vec<T>> {
    parse_jsonl(&read_to_string(path)?, path, what)
}

/// Text safe to print on a terminal: control characters (escape sequences included) other
/// than newline and tab, and the bidirectional overrides that reorder what a reader sees
/// (U+202A–U+202E, U+2066–U+2069, U+200E/U+200F, U+061C), are shown as `\u{..}` escapes. For
/// anything an untrusted program or a model wrote (stderr tails, generated text) before it
/// reaches stderr.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(unprintable) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unprintable(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

fn unprintable(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// Now, as RFC 3339 UTC with seconds (`2026-11-24T07:00:00Z`).
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Seconds since the Unix epoch as RFC 3339 UTC.
pub fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()
}

/// Seconds since the Unix epoch of an RFC 3339 time (fractions kept); `None` if it is not one.
pub fn parse_rfc3339(s: &str) -> Option<f64> {
    let t = humantime::parse_rfc3339_weak(s.trim()).ok()?;
    t.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_417_200), "2026-11-23T07:00:00Z");
        assert_eq!(rfc3339(4_107_542_399), "2100-02-28T23:59:59Z");
        assert_eq!(now_rfc3339().len(), 20);
        assert_eq!(parse_rfc3339("2000-02-29T00:00:01.5Z"), Some(951_782_401.5));
        assert_eq!(
            parse_rfc3339(&rfc3339(1_795_417_200)),
            Some(1_795_417_200.0)
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn printable_neutralises_escape_sequences() {
        assert_eq!(printable("ok\n\tline"), "ok\n\tline");
        assert_eq!(printable("\u{1b}[2Jgone\r"), "\\u{1b}[2Jgone\\u{d}");
        assert_eq!(printable("a\u{202e}b"), "a\\u{202e}b");
    }

    #[test]
    fn bom_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.jsonl");
        std::fs::write(&p, "\u{feff}{\"a\":1}\n").unwrap();
        assert_eq!(read_to_string(&p).unwrap(), "{\"a\":1}\n");
        let rows: Vec<serde_json::Value> = read_jsonl(&p, "a row").unwrap();
        assert_eq!(rows[0]["a"], 1);
    }
}
