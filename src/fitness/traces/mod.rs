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
//! conversation goes straight into [`Turn`](crate::dialogue::Turn)s, and only what a dialogue keeps as free-form
//! metadata ([`Dialogue::meta`]) is read as [`serde_json::Value`]. JSON Lines are parsed in
//! parallel, one line per task, and come back in file order. Whatever the typed pass does not
//! accept (malformed JSON, a value of an unexpected type, a repeated key) is read again by the
//! general `Value`-based reader, which either accepts it (a repeated key: the last value wins) or
//! names the exact place that is wrong. Both readers build dialogues with the same functions
//! (`dialogue_from_object`, `tau_usi_dialogue`), so a file gives the same dialogues and the same
//! errors whichever reader handled it.
//!
//! # Where each job lives
//!
//! This file: the loading API (options, skipped dialogues, repeated ids) and the dispatch by
//! format. `read`: the bounded read and the UTF-8 check. `detect`: telling the formats apart.
//! `jsonl`, `text`: the line-based formats. `typed`: the typed pass; `general`: the
//! general reader; `build`: the dialogue-building both share (turns included); `tau_usi`: τ-USI's
//! scaffolding; `stats`: per-domain statistics.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Map;

use crate::dialogue::{Dialogue, Role};
use crate::{Error, Result};

mod build;
mod detect;
mod general;
mod jsonl;
mod read;
mod stats;
mod tau_usi;
mod text;
mod typed;

pub use build::{parse_turn, parse_turns};
pub use detect::detect;
pub use read::read_text;
pub use stats::{stats, DomainStats};
pub use tau_usi::clean_tau_usi;

use detect::{detect_value, sniff};
use general::{dialogue_from_value, parse_json_array, parse_tau_usi};
use jsonl::parse_jsonl_located;
use text::parse_text_located;
use typed::typed_whole;

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

/// The file name without extension (`stdin` for `-`), the prefix of default dialogue ids.
fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "stdin".into())
}

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

#[cfg(test)]
mod tests {
    use super::detect::detect_value;
    use super::jsonl::jsonl_line_value;
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
