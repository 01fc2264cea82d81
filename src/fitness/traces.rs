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
//! A file is read in bounded memory: one larger than
//! [`limits::MAX_INPUT_BYTES`](crate::limits::MAX_INPUT_BYTES) (1 GiB; a whole JSON document
//! included) is refused, and so is a line of JSON Lines or text longer than
//! [`limits::MAX_LINE_BYTES`](crate::limits::MAX_LINE_BYTES) (64 MiB), naming the line,
//! without reading further (see [`read_text`]).
//!
//! A dialogue without user text (no turns, only agent turns, or user turns whose content is
//! null or blank) has nothing to fingerprint: it is left out and reported ([`Skipped`], logged
//! by [`load_many`], returned by [`load_many_checked`] for the front ends to warn about), and a
//! file with nothing else is an error. A dialogue id used twice, in a file or across the files
//! of one load, is an error naming both places.
//!
//! # How a file is read
//!
//! The file is read into memory once (bounded, see above) and checked to be UTF-8 in parallel pieces (a bad byte is
//! reported with its line). JSON is then deserialized in one typed pass: each
//! conversation goes straight into [`Turn`]s, and only what a dialogue keeps as free-form
//! metadata ([`Dialogue::meta`]) is read as [`serde_json::Value`]. JSON Lines are parsed in
//! parallel, one line per task, and come back in file order. Whatever the typed pass does not
//! accept (malformed JSON, a value of an unexpected type, a repeated key) is read again by the
//! general `Value`-based reader, which either accepts it (a repeated key: the last value wins) or
//! names the exact place that is wrong. Both readers build dialogues with the same functions
//! (`dialogue_from_object`, `tau_usi_dialogue`), so a file gives the same dialogues and the same
//! errors whichever reader handled it.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
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

/// What a load keeps of each dialogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Everything.
    All,
    /// Id, task id, domain and the user turns: what fingerprints read.
    UserTurns,
}

/// Dialogues loaded from trace files, and those left out with a warning.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// The dialogues, in file order.
    pub dialogues: Vec<Dialogue>,
    /// Dialogues without user text, left out (see [`Skipped`]).
    pub skipped: Vec<Skipped>,
}

/// A dialogue that a load left out because it has no user text: no turns, only agent, tool or
/// system turns, or user turns whose content is null, missing or blank. Its fingerprint would
/// be all zeros, scored as if a user had said nothing; it is left out with this warning
/// instead (a file with nothing else is refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The file (`<stdin>`, `<python>` for in-memory dialogues).
    pub path: PathBuf,
    /// Where in the file: `line 3`, `$[2]`, `$["airline_3"]`.
    pub location: String,
    /// The dialogue's id.
    pub id: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: dialogue '{}' has no user text (no turns, only agent turns, or user turns \
             without content); left out: it has nothing to fingerprint",
            self.path.display(),
            self.location,
            self.id
        )
    }
}

/// Load every file, in order, concatenating their dialogues. Dialogues without user text are
/// left out, each with a warning in the log (see [`load_many_checked`] to get them).
pub fn load_many(paths: &[PathBuf], opts: &LoadOptions) -> Result<Vec<Dialogue>> {
    Ok(logged(load_many_keeping(paths, opts, Keep::All)?))
}

/// [`load_many`], returning the dialogues it left out instead of logging them. Besides the
/// format errors, a load refuses a dialogue id used twice (in one file or across `paths`:
/// fingerprints, scores and study items are keyed by id) and a file whose dialogues all lack
/// user text.
pub fn load_many_checked(paths: &[PathBuf], opts: &LoadOptions) -> Result<Loaded> {
    load_many_keeping(paths, opts, Keep::All)
}

/// Load one trace file (`-` reads standard input); see [`load_many`].
pub fn load(path: &Path, opts: &LoadOptions) -> Result<Vec<Dialogue>> {
    load_many(&[path.to_path_buf()], opts)
}

/// Parse trace text; `path` is used for error messages and default ids. A leading UTF-8
/// byte-order mark is ignored. Dialogues without user text are left out with a warning in the
/// log, as in [`load_many`].
pub fn parse(text: &str, path: &Path, opts: &LoadOptions) -> Result<Vec<Dialogue>> {
    Ok(logged(parse_checked(text, path, opts)?))
}

/// [`parse`], returning the dialogues it left out instead of logging them.
pub fn parse_checked(text: &str, path: &Path, opts: &LoadOptions) -> Result<Loaded> {
    let kept = parse_keeping(text, path, opts, Keep::All)?;
    check_ids(&kept.dialogues, &mut HashMap::new(), 0, path)?;
    Ok(kept.into_loaded())
}

/// [`load_many_checked`] for fingerprinting: the same files accepted, the same errors, the
/// same ids, task ids and domains, but each dialogue keeps only what fingerprints read, its
/// user turns ([`Dialogue::meta`] is empty). Other turns and the metadata are still checked,
/// not kept, which makes JSON Lines files much cheaper to load. Unlike the other loads, a
/// dialogue without user text is kept (its fingerprint is all zeros, as the reference's) and
/// also listed in [`Loaded::skipped`] for the caller to warn about.
pub fn load_many_user_turns(paths: &[PathBuf], opts: &LoadOptions) -> Result<Loaded> {
    load_many_keeping(paths, opts, Keep::UserTurns)
}

/// [`parse`] keeping only the user turns (see [`load_many_user_turns`]).
pub fn parse_user_turns(text: &str, path: &Path, opts: &LoadOptions) -> Result<Vec<Dialogue>> {
    let kept = parse_keeping(text, path, opts, Keep::UserTurns)?;
    check_ids(&kept.dialogues, &mut HashMap::new(), 0, path)?;
    Ok(logged(kept.into_loaded()))
}

/// The dialogues, each one left out logged as a warning.
fn logged(loaded: Loaded) -> Vec<Dialogue> {
    for s in &loaded.skipped {
        tracing::warn!("{}", crate::io::printable(&s.to_string()));
    }
    loaded.dialogues
}

/// Dialogues of one file with where each was found, and those left out.
struct Kept {
    dialogues: Vec<(String, Dialogue)>,
    skipped: Vec<Skipped>,
}

impl Kept {
    fn into_loaded(self) -> Loaded {
        Loaded {
            dialogues: self.dialogues.into_iter().map(|(_, d)| d).collect(),
            skipped: self.skipped,
        }
    }
}

fn load_many_keeping(paths: &[PathBuf], opts: &LoadOptions, keep: Keep) -> Result<Loaded> {
    let mut out = Loaded::default();
    let mut seen = HashMap::new();
    for (i, p) in paths.iter().enumerate() {
        let kept = parse_keeping(&read_text(p)?, p, opts, keep)?;
        check_ids(&kept.dialogues, &mut seen, i, p)?;
        let loaded = kept.into_loaded();
        out.dialogues.extend(loaded.dialogues);
        out.skipped.extend(loaded.skipped);
    }
    Ok(out)
}

/// Refuse a dialogue id seen before (`seen`: id → where, over the files of one load).
fn check_ids(
    dialogues: &[(String, Dialogue)],
    seen: &mut HashMap<String, (usize, PathBuf, String)>,
    file: usize,
    path: &Path,
) -> Result<()> {
    for (loc, d) in dialogues {
        let here = (file, path.to_path_buf(), loc.clone());
        if let Some((other_file, other, at)) = seen.insert(d.id.clone(), here) {
            let place = if other_file == file {
                at.to_string()
            } else if other == path {
                format!("{at} of the same file, given twice")
            } else {
                format!("{} {at}", other.display())
            };
            return Err(Error::parse(
                path,
                loc,
                format!(
                    "dialogue id '{}' is also the id of {place}; ids must be unique (scores, \
                     fingerprints and study items are keyed by id)",
                    d.id
                ),
            ));
        }
    }
    Ok(())
}

/// The text of a trace file (`-` reads standard input; `hf://` paths are fetched into the
/// shared Hugging Face cache first), read in bounded memory: a file larger than
/// [`limits::MAX_INPUT_BYTES`](crate::limits::MAX_INPUT_BYTES) is refused, and so is a line
/// longer than [`limits::MAX_LINE_BYTES`](crate::limits::MAX_LINE_BYTES) in a file that is
/// not one JSON document (JSON Lines, text), as soon as it is met. The error names the file
/// and the line.
pub fn read_text(path: &Path) -> Result<String> {
    use crate::io::LongLines;
    let (bytes, shown) = if path == Path::new("-") {
        let shown = Path::new("<stdin>");
        let bytes = crate::io::read_bounded(
            &mut std::io::stdin().lock(),
            shown,
            None,
            LongLines::UnlessJson,
        )?;
        (bytes, shown)
    } else {
        let local = crate::hub::local_path(path)?;
        (
            crate::io::read_file(&local, path, LongLines::UnlessJson)?,
            path,
        )
    };
    utf8_text(bytes, shown)
}

/// The bytes as text, checked in parallel pieces; the error names the line of the first byte
/// that is not UTF-8.
fn utf8_text(bytes: Vec<u8>, path: &Path) -> Result<String> {
    let bad = newline_pieces(&bytes)
        .into_par_iter()
        .filter_map(|r| {
            std::str::from_utf8(&bytes[r.clone()])
                .err()
                .map(|e| r.start + e.valid_up_to())
        })
        .min();
    match bad {
        None => {
            // SAFETY: every piece was checked to be UTF-8 above, and the pieces cover `bytes`
            // end to end, split after b'\n' bytes, which never occur inside a multi-byte
            // character; so `bytes` is UTF-8 as a whole.
            Ok(unsafe { String::from_utf8_unchecked(bytes) })
        }
        Some(at) => {
            let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            Err(Error::parse(
                path,
                format!("line {line}"),
                format!("not UTF-8 text (byte {at} of the file); trace files must be UTF-8"),
            ))
        }
    }
}

/// Split `bytes` into consecutive ranges, each ending just after a b'\n' (the last one at the
/// end), for parallel work: about eight per thread, none much shorter than 256 KiB.
fn newline_pieces(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    const MIN_PIECE: usize = 256 * 1024;
    let pieces = (rayon::current_num_threads() * 8)
        .min(bytes.len() / MIN_PIECE)
        .max(1);
    let target = bytes.len() / pieces;
    let mut out = Vec::with_capacity(pieces);
    let mut start = 0;
    while start < bytes.len() {
        let from = (start + target).min(bytes.len());
        let end = match bytes[from..].iter().position(|&b| b == b'\n') {
            Some(i) if out.len() + 1 < pieces => from + i + 1,
            _ => bytes.len(),
        };
        out.push(start..end);
        start = end;
    }
    out
}

/// The dialogues of one file (of `opts.domain`), each with where it was found; those without
/// user text left out. A file whose dialogues all lack user text is an error.
fn parse_keeping(text: &str, path: &Path, opts: &LoadOptions, keep: Keep) -> Result<Kept> {
    let mut located = parse_located(text, path, keep)?;
    if let Some(d) = &opts.domain {
        located.retain(|(_, x)| x.domain.as_deref() == Some(d.as_str()));
    }
    if keep == Keep::UserTurns {
        // Fingerprinting keeps every dialogue (one row per input, the reference's all-zero
        // vector for a silent one) and reports the silent ones.
        let skipped = located
            .iter()
            .filter(|(_, d)| !has_user_text(d))
            .map(|(location, d)| Skipped {
                path: path.to_path_buf(),
                location: location.clone(),
                id: d.id.clone(),
            })
            .collect();
        return Ok(Kept {
            dialogues: located,
            skipped,
        });
    }
    let (dialogues, without): (Vec<_>, Vec<_>) =
        located.into_iter().partition(|(_, d)| has_user_text(d));
    if dialogues.is_empty() {
        if let Some((loc, _)) = without.first() {
            return Err(Error::parse(
                path,
                loc,
                format!(
                    "no dialogue with user text: all {} dialogues have no turns, only agent \
                     turns, or user turns without content",
                    without.len()
                ),
            ));
        }
    }
    let skipped = without
        .into_iter()
        .map(|(location, d)| Skipped {
            path: path.to_path_buf(),
            location,
            id: d.id,
        })
        .collect();
    Ok(Kept { dialogues, skipped })
}

/// Whether a user turn says something (what fingerprints read).
fn has_user_text(d: &Dialogue) -> bool {
    d.turns
        .iter()
        .any(|t| t.role == Role::User && !t.content.trim().is_empty())
}

/// Every dialogue of the text in file order, with where it was found (`line 3`, `$[2]`, `$`,
/// `$["airline_3"]`); nothing left out.
fn parse_located(text: &str, path: &Path, keep: Keep) -> Result<Vec<(String, Dialogue)>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    Ok(match sniff(text, path)? {
        Some(TraceFormat::Jsonl) => parse_jsonl_located(text, path, keep)?,
        format => {
            let all = match format {
                Some(TraceFormat::Text) => parse_text_located(text, path)?,
                Some(format) => match typed_whole(format, text, path) {
                    Some(parsed) => locate(format, parsed?),
                    None => parse_whole_value_located(text, path)?,
                },
                None => parse_whole_value_located(text, path)?,
            };
            match keep {
                Keep::All => all,
                Keep::UserTurns => all
                    .into_iter()
                    .map(|(loc, d)| (loc, user_turns_only(d)))
                    .collect(),
            }
        }
    })
}

/// Where each dialogue of a whole-JSON file was (they come in document order).
fn locate(format: TraceFormat, dialogues: Vec<Dialogue>) -> Vec<(String, Dialogue)> {
    dialogues
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let loc = match format {
                TraceFormat::TauUsi => format!("$[\"{}\"]", d.id),
                TraceFormat::JsonObject => "$".to_string(),
                _ => format!("$[{i}]"),
            };
            (loc, d)
        })
        .collect()
}

/// The dialogue with its user turns only and no metadata.
fn user_turns_only(mut d: Dialogue) -> Dialogue {
    d.turns.retain(|t| t.role == Role::User);
    d.meta = Map::new();
    d
}

/// Decide the format from the content. A text starting with `[` is a JSON array (a syntax error
/// in it is reported by [`parse`]); one starting with `{` is scanned once, without building
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
fn sniff(text: &str, path: &Path) -> Result<Option<TraceFormat>> {
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

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "stdin".into())
}

fn json_error(path: &Path, e: &serde_json::Error) -> Error {
    Error::parse(
        path,
        format!("line {} column {}", e.line(), e.column()),
        format!("invalid JSON: {e}"),
    )
}

/// JSON Lines: pieces of the text are parsed in parallel and the dialogues returned in file
/// order with their lines; the first bad line (in file order) is the error.
fn parse_jsonl_located(text: &str, path: &Path, keep: Keep) -> Result<Vec<(String, Dialogue)>> {
    let stem = stem(path);
    // Each piece ends with a newline (but the last), so its lines are the file's lines.
    let pieces: Vec<Vec<&str>> = newline_pieces(text.as_bytes())
        .into_par_iter()
        .map(|r| text[r].lines().collect())
        .collect();
    let mut next = 1;
    let first_line: Vec<usize> = pieces
        .iter()
        .map(|lines| {
            next += lines.len();
            next - lines.len()
        })
        .collect();
    let parsed: Vec<Vec<Result<(String, Dialogue)>>> = pieces
        .par_iter()
        .zip(first_line)
        .map(|(lines, first)| {
            lines
                .iter()
                .enumerate()
                .filter(|(_, line)| !line.trim().is_empty())
                .map(|(i, line)| {
                    if line.len() > crate::limits::MAX_LINE_BYTES {
                        return Err(crate::io::long_line(
                            path,
                            first + i,
                            crate::limits::MAX_LINE_BYTES,
                        ));
                    }
                    jsonl_line(line, first + i, path, &stem, keep)
                        .map(|d| (format!("line {}", first + i), d))
                })
                .collect()
        })
        .collect();
    let out: Vec<(String, Dialogue)> = parsed.into_iter().flatten().collect::<Result<_>>()?;
    if out.is_empty() {
        return Err(Error::parse(path, "line 1", "no dialogues found"));
    }
    Ok(out)
}

fn jsonl_line(line: &str, lineno: usize, path: &Path, stem: &str, keep: Keep) -> Result<Dialogue> {
    let loc = format!("line {lineno}");
    let default_id = format!("{stem}:{lineno}");
    if keep == Keep::UserTurns {
        if let Ok(UserTurnFields(fields)) = serde_json::from_str(line) {
            return fields
                .into_dialogue(path, &loc, &default_id)
                .map(user_turns_only);
        }
    }
    let dialogue = match serde_json::from_str::<Fields>(line) {
        Ok(fields) => fields.into_dialogue(path, &loc, &default_id),
        Err(_) => jsonl_line_value(line, path, &loc, &default_id),
    };
    match keep {
        Keep::All => dialogue,
        Keep::UserTurns => dialogue.map(user_turns_only),
    }
}

/// One JSON line read by the general reader.
fn jsonl_line_value(line: &str, path: &Path, loc: &str, default_id: &str) -> Result<Dialogue> {
    let v: Value = serde_json::from_str(line).map_err(|e| {
        Error::parse(
            path,
            loc,
            format!(
                "invalid JSON (column {}): {e}; expected one dialogue object per line",
                e.column()
            ),
        )
    })?;
    dialogue_from_value(v, path, loc, default_id)
}

/// The typed pass over a file that is one JSON value; `None` hands it to the general reader.
fn typed_whole(format: TraceFormat, text: &str, path: &Path) -> Option<Result<Vec<Dialogue>>> {
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

// ---------------------------------------------------------------------------------------------
// Building dialogues (shared by the typed pass and the general reader)

fn scalar_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Build a dialogue from one JSON object (JSONL line, array item, single object). `parsed` is the
/// conversation when the typed pass has already read it (its place in `obj` then holds `null`);
/// otherwise the conversation is read from `obj`.
fn dialogue_from_object(
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
fn tau_usi_dialogue(
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
fn role_of(s: &str) -> Option<Role> {
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
fn read_tool_calls(calls: &[Value]) -> std::result::Result<Vec<ToolCall>, usize> {
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

// ---------------------------------------------------------------------------------------------
// The typed pass

/// Why the typed pass gave a value back to the general reader (never shown: the general reader
/// produces the message).
const DECLINED: &str = "left to the general reader";

/// Outline of a JSON object, scanned without building it: does it have a `conversation` or
/// `turns` key, and how many of its values are objects with a `conversation` key.
#[derive(Default)]
struct Shape {
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
struct HasConversation(bool);

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

/// The object keys the typed pass looks at, matched without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
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
struct Fields {
    obj: Map<String, Value>,
    turns: Option<Vec<Turn>>,
}

impl Fields {
    fn into_dialogue(self, path: &Path, loc: &str, default_id: &str) -> Result<Dialogue> {
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
struct TauUsiEntries(Vec<(String, Fields)>);

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
struct Conversation(Vec<Turn>);

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
struct TypedTurn(Turn);

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
struct UserTurnFields(Fields);

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
struct UserTurnList(Vec<Turn>);

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
struct UserTurn(Option<Turn>);

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
struct Text<'de>(Option<Cow<'de, str>>);

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
struct Checked;

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
struct RoleName(Role);

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

// ---------------------------------------------------------------------------------------------
// The general reader: the whole text as one `serde_json::Value`. It handles what the typed pass
// declines and locates every error.

/// The format and (for a single JSON value) the parsed value.
fn detect_value(text: &str, path: &Path) -> Result<(TraceFormat, Option<Value>)> {
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

/// Parse the whole text with the general reader; each dialogue with where it was found.
fn parse_whole_value_located(text: &str, path: &Path) -> Result<Vec<(String, Dialogue)>> {
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

fn parse_json_array(v: Value, path: &Path) -> Result<Vec<Dialogue>> {
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
fn dialogue_from_value(v: Value, path: &Path, loc: &str, default_id: &str) -> Result<Dialogue> {
    let Value::Object(obj) = v else {
        return Err(Error::parse(
            path,
            loc,
            format!("expected a dialogue object, found {}", kind(&v)),
        ));
    };
    dialogue_from_object(obj, None, path, loc, default_id)
}

fn parse_tau_usi(v: Value, path: &Path) -> Result<Vec<Dialogue>> {
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

// ---------------------------------------------------------------------------------------------
// Plain text

fn parse_text_located(text: &str, path: &Path) -> Result<Vec<(String, Dialogue)>> {
    let mut out = Vec::new();
    let mut turns: Vec<Turn> = Vec::new();
    let mut start_line = 1;
    let flush = |turns: &mut Vec<Turn>, out: &mut Vec<(String, Dialogue)>, start: usize| {
        if !turns.is_empty() {
            let id = format!("{}:{start}", stem(path));
            let mut d = Dialogue::new(id, std::mem::take(turns));
            for t in &mut d.turns {
                t.content = t.content.trim().to_string();
            }
            out.push((format!("line {start}"), d));
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
// τ-USI scaffolding

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
{"conversation":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"user","content":"ok"}]}"#)
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
    fn dialogues_without_user_text_are_left_out_naming_their_place() {
        let tau = r#"{"airline_1": {"conversation": [{"role": "user", "content": "hi"}]},
            "retail_1": {"conversation": []},
            "retail_2": {"conversation": [{"role": "user", "content": "\\tau task_index: 2"}, {"role": "user", "content": "/stop"}]}}"#;
        let loaded = parse_checked(tau, Path::new("u.json"), &LoadOptions::default()).unwrap();
        assert_eq!(loaded.dialogues.len(), 1);
        let places: Vec<&str> = loaded.skipped.iter().map(|s| s.location.as_str()).collect();
        assert_eq!(places, [r#"$["retail_1"]"#, r#"$["retail_2"]"#]);
        let array = r#"[{"conversation": [{"role": "assistant", "content": "hi"}]},
            {"id": "x", "conversation": [{"role": "user", "content": "yes"}]},
            {"conversation": [{"role": "user", "content": null}, {"role": "user"}]}]"#;
        let loaded = parse_checked(array, Path::new("a.json"), &LoadOptions::default()).unwrap();
        assert_eq!(loaded.dialogues[0].id, "x");
        assert_eq!(
            loaded.skipped[1].to_string(),
            "a.json: $[2]: dialogue 'a[2]' has no user text (no turns, only agent turns, or user \
             turns without content); left out: it has nothing to fingerprint"
        );
        let text = "ASSISTANT: hello\n---\nUSER: hi\n";
        let loaded = parse_checked(text, Path::new("t.txt"), &LoadOptions::default()).unwrap();
        assert_eq!(loaded.skipped[0].location, "line 1");
        // nothing but such dialogues: refused
        let e = p(
            "{\"conversation\":[]}\n\n{\"conversation\":[{\"role\":\"user\",\"content\":\" \"}]}",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("t.jsonl: line 1: no dialogue with user text: all 2 dialogues"),
            "{e}"
        );
        // the plain functions log them and leave them out too
        assert_eq!(
            p(&format!(
                "{{\"conversation\":[]}}\n{}",
                r#"{"conversation":[{"role":"user","content":"a"}]}"#
            ))
            .unwrap()
            .len(),
            1
        );
    }

    #[test]
    fn a_dialogue_id_used_twice_is_refused() {
        let turn = r#"{"role":"user","content":"hi"}"#;
        let e = p(&format!(
            "{{\"id\":\"a\",\"conversation\":[{turn}]}}\n{{\"id\":7,\"conversation\":[{turn}]}}\n{{\"id\":\"7\",\"conversation\":[{turn}]}}"
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("t.jsonl: line 3: dialogue id '7' is also the id of line 2;"),
            "{e}"
        );
        let e = parse(
            &format!("[{{\"conversation\":[{turn}],\"id\":\"q\"}}, {{\"metadata\":{{\"id\":\"q\"}},\"conversation\":[{turn}]}}]"),
            Path::new("r.json"),
            &LoadOptions::default(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("r.json: $[1]: dialogue id 'q' is also the id of $[0];"),
            "{e}"
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

    /// The general reader alone: the whole text as one `Value`, JSON Lines one `Value` per line.
    fn general(text: &str, path: &Path) -> Result<Vec<Dialogue>> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        if detect_value(text, path)?.0 != TraceFormat::Jsonl {
            return parse_whole_value_located(text, path).map(unlocated);
        }
        let stem = stem(path);
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if !line.trim().is_empty() {
                let lineno = i + 1;
                let (loc, id) = (format!("line {lineno}"), format!("{stem}:{lineno}"));
                out.push(jsonl_line_value(line, path, &loc, &id)?);
            }
        }
        if out.is_empty() {
            return Err(Error::parse(path, "line 1", "no dialogues found"));
        }
        Ok(out)
    }

    fn unlocated(located: Vec<(String, Dialogue)>) -> Vec<Dialogue> {
        located.into_iter().map(|(_, d)| d).collect()
    }

    /// The typed pass first (what `parse` reads before it leaves out dialogues without user
    /// text and checks ids) and the general reader give the same dialogues, with metadata keys
    /// in the same order, or the same error; read for the user turns, the same as the general
    /// reader's dialogues cut to their user turns.
    fn assert_same(name: &str, text: &str) {
        let path = Path::new(name);
        let general = general(text, path);
        let users = parse_located(text, path, Keep::UserTurns).map(unlocated);
        match (&users, &general) {
            (Ok(a), Ok(b)) => {
                let b: Vec<Dialogue> = b.iter().cloned().map(user_turns_only).collect();
                assert_eq!(a, &b, "{name}: user turns");
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{name}: user turns"),
            _ => panic!("{name}: user turns {users:?} vs general {general:?}"),
        }
        let typed = parse_located(text, path, Keep::All).map(unlocated);
        match (&typed, &general) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b, "{name}");
                assert_eq!(
                    serde_json::to_string(a).unwrap(),
                    serde_json::to_string(b).unwrap(),
                    "{name}: same dialogues in the same key order"
                );
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{name}"),
            _ => panic!("{name}: typed {typed:?} vs general {general:?}"),
        }
    }

    #[test]
    fn typed_pass_and_general_reader_agree() {
        let turn = r#"{"role":"user","content":"hi"}"#;
        let cases: Vec<(&str, String)> = vec![
            ("plain.jsonl", format!("{{\"id\":\"a\",\"conversation\":[{turn}]}}\n{{\"id\":\"b\",\"conversation\":[{turn}]}}")),
            // key orders around the conversation (Map::remove swaps the last key into its place)
            ("order.jsonl", format!("{{\"x\":1,\"conversation\":[{turn}],\"y\":2,\"z\":3,\"task_id\":7.50,\"w\":4}}\n{{\"conversation\":[{turn}],\"a\":[1,{{\"b\":null}}],\"id\":\"q\",\"domain\":\"d\"}}")),
            ("metadata.jsonl", format!("{{\"metadata\":{{\"id\":\"m\",\"task_id\":3,\"k\":1,\"domain\":null}},\"id\":\"o\",\"conversation\":[{turn}],\"extra\":{{\"s\":\"t\"}}}}\n{{\"conversation\":[{turn}],\"metadata\":null}}")),
            ("bad_metadata.jsonl", format!("{{\"metadata\":[1],\"conversation\":[{turn}]}}\n")),
            ("bad_id.jsonl", format!("{{\"id\":[1],\"conversation\":[{turn}]}}\n")),
            ("dup_key.jsonl", format!("{{\"id\":\"a\",\"conversation\":[{turn}],\"id\":\"b\"}}\n{{\"conversation\":[],\"conversation\":[{turn}]}}")),
            ("turns_key.jsonl", format!("{{\"turns\":[{turn}],\"id\":\"t\"}}\n{{\"turns\":[1],\"conversation\":[{turn}]}}\n{{\"conversation\":[{turn}],\"turns\":{{}}}}")),
            ("missing_conversation.jsonl", "{\"id\":\"x\"}\n".into()),
            ("turn_kinds.jsonl", concat!(
                r#"{"conversation":[{"role":"Human ","content":null},{"content":"x","role":"ASSISTANT","extra":[1e5,{"a":"\u00e9"}]},"#,
                r#"{"role":"tool","content":"r","tool_call_id":"c1"},{"role":"tool","tool_call_id":5},"#,
                r#"{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{\"x\":1}"}},{"name":"g","arguments":"not json"},{"name":"h","arguments":{"y":[2]}},{"name":"k"}]},"#,
                r#"{"role":"assistant","tool_calls":{"name":"ignored"}},{"role":"user","content":"caf\u00e9 \ud83d\ude00 \"q\"\n"}]}"#
            ).into()),
            ("tool_without_name.jsonl", r#"{"conversation":[{"role":"assistant","tool_calls":[{"name":"f"},{"id":"c"}]}]}"#.into()),
            ("unknown_role.jsonl", r#"{"conversation":[{"role":"robot","content":"x"}]}"#.into()),
            ("role_number.jsonl", r#"{"conversation":[{"role":1,"content":"x"}]}"#.into()),
            ("no_role.jsonl", r#"{"conversation":[{"content":"x"}]}"#.into()),
            ("content_array.jsonl", r#"{"conversation":[{"role":"user","content":["x"]}]}"#.into()),
            ("turn_array.jsonl", r#"{"conversation":[["user","x"]]}"#.into()),
            ("turn_dup.jsonl", r#"{"conversation":[{"role":"user","content":"a","content":"b","role":"assistant"}]}"#.into()),
            ("conversation_object.jsonl", r#"{"conversation":{"role":"user"}}"#.into()),
            // valid JSON for a skipping scanner, not for serde_json::Value
            ("huge_number.jsonl", r#"{"conversation":[{"role":"user","content":"x","n":1e400}]}"#.into()),
            ("huge_number_lines.jsonl", format!("{{\"conversation\":[{turn}]}}\n{{\"conversation\":[{turn},{{\"role\":\"assistant\",\"content\":\"x\",\"n\":1e400}}]}}")),
            ("huge_number_meta_lines.jsonl", format!("{{\"conversation\":[{turn}]}}\n{{\"conversation\":[{turn}],\"extra\":{{\"a\":[1,-1e400]}}}}")),
            ("lone_surrogate_lines.jsonl", format!("{{\"conversation\":[{turn}]}}\n{{\"conversation\":[{turn}],\"extra\":\"\\ud800 x\"}}")),
            ("assistant_bad_content.jsonl", format!("{{\"conversation\":[{turn}]}}\n{{\"conversation\":[{turn},{{\"role\":\"assistant\",\"content\":[1]}}]}}")),
            ("assistant_nameless_tool.jsonl", format!("{{\"conversation\":[{turn}]}}\n{{\"conversation\":[{turn},{{\"role\":\"assistant\",\"tool_calls\":[{{\"id\":\"c\"}}]}}]}}")),
            ("assistant_dup_role.jsonl", format!("{{\"conversation\":[{turn}]}}\n{{\"conversation\":[{{\"role\":\"assistant\",\"content\":\"a\",\"role\":\"user\"}}]}}")),
            ("dup_id_lines.jsonl", format!("{{\"conversation\":[{turn}]}}\n{{\"id\":\"a\",\"conversation\":[{turn}],\"id\":\"b\",\"metadata\":{{\"task_id\":1}}}}")),
            ("huge_number_meta.json", r#"{"conversation":[{"role":"user","content":"x"}],"n":-1e400}"#.into()),
            ("not_an_object.jsonl", format!("[1]\n{{\"conversation\":[{turn}]}}\n\"s\"\n")),
            // the first bad line in file order is the error, whatever order lines are parsed in
            ("many.jsonl", (1..=400).map(|i| match i { 250 => "{oops}".to_string(), 300 => r#"{"conversation":[{"role":"robot"}]}"#.to_string(), _ => format!("{{\"conversation\":[{turn}],\"n\":{i}}}") }).collect::<Vec<_>>().join("\n")),
            // large enough to be parsed in several pieces: line numbers (default ids, errors)
            // continue across pieces
            ("pieces.jsonl", (1..=30_000).map(|i| match i { 17_000 | 29_000 => "{\"conversation\":[{\"role\":\"robot\"}]}".to_string(), 9_000 | 9_001 => " \r".to_string(), _ if i % 3 == 0 => format!("{{\"conversation\":[{turn}],\"n\":{i}}}\r"), _ => format!("{{\"conversation\":[{turn}],\"id\":\"{i}\"}}") }).collect::<Vec<_>>().join("\n")),
            ("pieces_ok.jsonl", (1..=30_000).map(|i| if i % 7 == 0 { String::new() } else { format!("{{\"conversation\":[{turn}],\"n\":{i}}}") }).collect::<Vec<_>>().join("\n")),
            ("blank_lines.jsonl", format!("\r\n  \n{{\"conversation\":[{turn}]}}\r\n\n{{\"conversation\":[{turn}]}}\n\n")),
            ("only_blank.jsonl", "  \n".into()),
            ("empty.jsonl", "".into()),
            ("single.json", format!("{{\"id\":\"s\",\"conversation\":[{turn}],\"reward\":1.0}}")),
            ("single_line.jsonl", format!("{{\"conversation\":[{turn}]}}\n")),
            ("neither.json", "{\"a\": 1, \"b\": {\"conversation\": []}}".into()),
            ("empty_object.json", "{}".into()),
            ("array.json", format!("[{{\"conversation\":[{turn}],\"metadata\":{{\"task_id\":\"t\",\"source\":\"s\"}}}}, {{\"turns\":[{turn}],\"id\":2}}]")),
            ("array_bad_item.json", format!("[{{\"conversation\":[{turn}]}}, 3]")),
            ("array_bad_turn.json", format!("[{{\"conversation\":[{turn}]}}, {{\"conversation\":[{{}}]}}]")),
            ("array_syntax.json", "[{\"conversation\": [}]".into()),
            ("array_trailing.json", "[] []".into()),
            ("tau.json", concat!(
                r#"{"airline_3_ann2": {"reward": 1.0, "conversation": [{"role": "user", "content": "\\tau task_index: 3"},"#,
                r#"{"role": "assistant", "content": "<|canvas|>Your id is x_1.<|/canvas|>Hi"}, {"role": "user", "content": "ok /stop"}], "task_id": 585, "survey": {"q": "a"}},"#,
                r#" "retail_1": {"conversation": [], "instruction": "given", "task_id": null}, "_x": {"conversation": [{"role":"user","content":"c"}], "task_id": "s"}}"#
            ).into()),
            ("tau_dup.json", r#"{"airline_1": {"conversation": "bad"}, "airline_1": {"conversation": [{"role":"user","content":"c"}]}}"#.into()),
            ("tau_dup_shape.json", r#"{"airline_1": {"x": 1}, "airline_1": {"conversation": []}}"#.into()),
            ("tau_bad_turns.json", r#"{"airline_1": {"conversation": {"role": "user"}}}"#.into()),
            ("tau_bad_task.json", r#"{"airline_1": {"conversation": [], "task_id": [1]}}"#.into()),
            ("tau_value_not_object.json", r#"{"airline_1": [{"conversation": []}]}"#.into()),
            ("text.txt", "USER: hi\nASSISTANT: hello\n---\nUSER: bye\n".into()),
        ];
        for (name, text) in &cases {
            assert_same(name, text);
            // a UTF-8 byte-order mark changes nothing, in any format
            let with_bom = format!("\u{feff}{text}");
            assert_same(name, &with_bom);
            if let Ok(ds) = parse(text, Path::new(name), &LoadOptions::default()) {
                let bom = parse(&with_bom, Path::new(name), &LoadOptions::default()).unwrap();
                assert_eq!(ds, bom, "{name} with a BOM");
            }
        }
        // every shipped fixture, and the real traces in ../shared when present
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("tests/fixtures/traces"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.push(root.join("fitness/demo/human.jsonl"));
        let shared = std::env::var_os("PPOL_SHARED")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("../shared"));
        for dir in ["human", "parity"] {
            if let Ok(entries) = std::fs::read_dir(shared.join(dir)) {
                files.extend(entries.map(|e| e.unwrap().path()));
            }
        }
        for f in files {
            if f.extension().is_some_and(|e| e == "md") {
                continue;
            }
            let text = std::fs::read_to_string(&f).unwrap();
            assert_same(&f.display().to_string(), &text);
            if f.ends_with("human/tau_usi_airline_sample.jsonl") {
                // real dialogues over many pieces
                assert_same(&f.display().to_string(), &text.repeat(12));
            }
        }
    }
}
