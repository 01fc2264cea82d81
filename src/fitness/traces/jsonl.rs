//! JSON Lines: one dialogue per line, lines parsed in parallel and returned in file order,
//! each by the typed pass first and the general reader when it declines.

use std::path::Path;

use rayon::prelude::*;
use serde_json::Value;

use super::general::dialogue_from_value;
use super::read::newline_pieces;
use super::typed::{Fields, UserTurnFields};
use super::{stem, user_turns_only, Keep};
use crate::dialogue::Dialogue;
use crate::{Error, Result};

/// JSON Lines: pieces of the text are parsed in parallel and the dialogues returned in file
/// order with their lines; the first bad line (in file order) is the error.
pub(super) fn parse_jsonl_located(
    text: &str,
    path: &Path,
    keep: Keep,
) -> Result<Vec<(String, Dialogue)>> {
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

pub(super) fn jsonl_line(
    line: &str,
    lineno: usize,
    path: &Path,
    stem: &str,
    keep: Keep,
) -> Result<Dialogue> {
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
pub(super) fn jsonl_line_value(
    line: &str,
    path: &Path,
    loc: &str,
    default_id: &str,
) -> Result<Dialogue> {
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
