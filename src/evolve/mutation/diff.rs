//! The LLM diff protocol: parse SEARCH/REPLACE blocks from a mutator answer and apply them to
//! the parent program; extract a complete program from a full-rewrite answer; check that a
//! program compiles.
//!
//! ```text
//! <<<<<<< SEARCH
//! (exact lines of the current program)
//! =======
//! (replacement lines)
//! >>>>>>> REPLACE
//! ```
//!
//! Parsing tolerates chatter around the blocks, code fences (outside or just inside a block),
//! CRLF line endings and 5–9 marker characters. Blocks are applied in order, each to the result
//! of the previous one. A SEARCH part must match whole lines exactly once; only when there is
//! no exact match, a whitespace-tolerant match is tried (trailing spaces ignored, indentation
//! shifted by one consistent prefix, the replacement re-indented the same way) and used only
//! if it is unique. Every failure is a [`DiffError`] whose message can be fed back to the
//! mutator in the next prompt.
//!
//! ```
//! use ppol::evolve::mutation::diff::apply_diff;
//! let code = "def f():\n    return 1\n";
//! let answer = "Make it return 2.\n<<<<<<< SEARCH\n    return 1\n=======\n    return 2\n>>>>>>> REPLACE\n";
//! assert_eq!(apply_diff(code, answer).unwrap().code, "def f():\n    return 2\n");
//! ```

use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// One SEARCH/REPLACE edit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffBlock {
    /// Lines to find (joined with `\n`, no trailing newline).
    pub search: String,
    /// Lines to put instead.
    pub replace: String,
}

/// Why a mutator answer could not be turned into a program. Blocks are numbered from 1.
/// The `Display` text is written for the mutator: it says what was wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum DiffError {
    /// The answer holds no SEARCH/REPLACE block.
    #[error("no SEARCH/REPLACE block was found in the answer; write every edit as `<<<<<<< SEARCH`, the exact current lines, `=======`, the new lines, `>>>>>>> REPLACE`")]
    NoBlocks,
    /// A block is not closed (often an answer cut off by the token limit).
    #[error("block {block} is not closed with `>>>>>>> REPLACE` (the answer may have been cut off); keep the edits shorter")]
    Unterminated {
        /// Block number.
        block: usize,
    },
    /// A SEARCH part is empty.
    #[error(
        "block {block} has an empty SEARCH part; quote the exact lines that should be replaced"
    )]
    EmptySearch {
        /// Block number.
        block: usize,
    },
    /// A SEARCH part does not occur in the program (not even up to whitespace).
    #[error("block {block}: the SEARCH lines do not occur in the current program; copy them exactly from it, indentation included. The SEARCH part began with:\n{snippet}")]
    SearchNotFound {
        /// Block number.
        block: usize,
        /// The first lines of the SEARCH part.
        snippet: String,
    },
    /// A SEARCH part occurs several times.
    #[error("block {block}: the SEARCH lines occur {count} times in the current program; include enough surrounding lines that they match exactly once")]
    Ambiguous {
        /// Block number.
        block: usize,
        /// Number of matches.
        count: usize,
    },
    /// The blocks deleted everything.
    #[error("applying the blocks left an empty program")]
    EmptyResult,
    /// The blocks did not change the program.
    #[error("the blocks did not change the program (every REPLACE part equals its SEARCH part)")]
    NoChange,
    /// A full rewrite answer holds no Python code block.
    #[error("no ```python code block with the complete program was found in the answer")]
    NoProgram,
}

/// A successfully applied diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedDiff {
    /// The new program.
    pub code: String,
    /// Number of blocks applied.
    pub blocks: usize,
    /// Block numbers (from 1) that needed the whitespace-tolerant match.
    pub fuzzy_blocks: Vec<usize>,
}

static START: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)^\s*<{5,9}\s*SEARCH\s*$").expect("valid regex"));
static MIDDLE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*={5,9}\s*$").expect("valid regex"));
static END: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)^\s*>{5,9}\s*REPLACE\s*$").expect("valid regex"));
static OPEN_FENCE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)^\s*```\s*(python3?|py)?\s*$").expect("valid regex"));
static BARE_FENCE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*```\s*$").expect("valid regex"));

fn normalise_newlines(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\r', "\n")
}

/// Drop a code fence wrapped just inside a block section (```python ... ```).
fn strip_inner_fence(mut lines: Vec<&str>) -> Vec<&str> {
    if lines.len() >= 2
        && OPEN_FENCE.is_match(lines[0])
        && BARE_FENCE.is_match(lines[lines.len() - 1])
    {
        lines.pop();
        lines.remove(0);
    }
    lines
}

/// Parse every SEARCH/REPLACE block of a mutator answer, in order.
pub fn parse_diff(response: &str) -> Result<Vec<DiffBlock>, DiffError> {
    enum State {
        Outside,
        Search,
        Replace,
    }
    let text = normalise_newlines(response);
    let mut blocks = Vec::new();
    let mut state = State::Outside;
    let mut search: Vec<&str> = Vec::new();
    let mut replace: Vec<&str> = Vec::new();
    for line in text.split('\n') {
        match state {
            State::Outside => {
                if START.is_match(line) {
                    state = State::Search;
                    search.clear();
                    replace.clear();
                }
            }
            State::Search => {
                if MIDDLE.is_match(line) {
                    state = State::Replace;
                } else if START.is_match(line) {
                    // A restarted block: the previous start marker was stray.
                    search.clear();
                } else {
                    search.push(line);
                }
            }
            State::Replace => {
                if END.is_match(line) {
                    let s = strip_inner_fence(std::mem::take(&mut search));
                    let r = strip_inner_fence(std::mem::take(&mut replace));
                    blocks.push(DiffBlock {
                        search: s.join("\n"),
                        replace: r.join("\n"),
                    });
                    state = State::Outside;
                } else {
                    replace.push(line);
                }
            }
        }
    }
    if !matches!(state, State::Outside) {
        return Err(DiffError::Unterminated {
            block: blocks.len() + 1,
        });
    }
    if blocks.is_empty() {
        return Err(DiffError::NoBlocks);
    }
    Ok(blocks)
}

/// Parse `response` and apply its blocks to `code`.
pub fn apply_diff(code: &str, response: &str) -> Result<AppliedDiff, DiffError> {
    let blocks = parse_diff(response)?;
    apply_blocks(code, &blocks)
}

fn leading_ws(s: &str) -> &str {
    &s[..s.len() - s.trim_start().len()]
}

fn common_prefix<'a>(lines: impl Iterator<Item = &'a str>) -> String {
    let mut prefix: Option<&str> = None;
    for l in lines.filter(|l| !l.trim().is_empty()) {
        let ws = leading_ws(l);
        prefix = Some(match prefix {
            None => ws,
            Some(p) => {
                let n = p
                    .char_indices()
                    .zip(ws.chars())
                    .take_while(|((_, a), b)| a == b)
                    .count();
                &p[..p.char_indices().nth(n).map_or(p.len(), |(i, _)| i)]
            }
        });
    }
    prefix.unwrap_or("").to_string()
}

fn snippet(search: &[&str]) -> String {
    search
        .iter()
        .filter(|l| !l.trim().is_empty())
        .take(3)
        .map(|l| {
            if l.chars().count() > 100 {
                format!("{}…", l.chars().take(100).collect::<String>())
            } else {
                (*l).to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A whitespace-tolerant match of `search` at `code[i..]`: returns the code's indentation
/// that corresponds to the search's common prefix.
fn fuzzy_at(code: &[&str], i: usize, search_ded: &[String]) -> Option<String> {
    let mut delta: Option<String> = None;
    for (j, s) in search_ded.iter().enumerate() {
        let c = code[i + j].trim_end();
        let s = s.trim_end();
        if s.trim().is_empty() {
            if !c.trim().is_empty() {
                return None;
            }
            continue;
        }
        match &delta {
            None => {
                let d = c.strip_suffix(s)?;
                if !d.trim().is_empty() {
                    return None;
                }
                delta = Some(d.to_string());
            }
            Some(d) => {
                if c.strip_prefix(d.as_str())? != s {
                    return None;
                }
            }
        }
    }
    delta
}

/// Apply parsed blocks to `code` in order (see the [module docs](self) for the matching rules).
pub fn apply_blocks(code: &str, blocks: &[DiffBlock]) -> Result<AppliedDiff, DiffError> {
    let original = normalise_newlines(code);
    let mut current = original.clone();
    let mut fuzzy_blocks = Vec::new();
    for (k, block) in blocks.iter().enumerate() {
        let n = k + 1;
        let search_text = normalise_newlines(&block.search);
        let replace_text = normalise_newlines(&block.replace);
        let search: Vec<&str> = search_text.split('\n').collect();
        if search.iter().all(|l| l.trim().is_empty()) {
            return Err(DiffError::EmptySearch { block: n });
        }
        let replace: Vec<&str> = if replace_text.is_empty() {
            Vec::new()
        } else {
            replace_text.split('\n').collect()
        };
        let lines: Vec<&str> = current.split('\n').collect();
        let m = search.len();
        let windows = (lines.len() + 1).saturating_sub(m);
        let exact: Vec<usize> = (0..windows)
            .filter(|&i| lines[i..i + m] == search[..])
            .collect();
        let (at, new_lines): (usize, Vec<String>) = match exact.len() {
            1 => (exact[0], replace.iter().map(|s| s.to_string()).collect()),
            c if c > 1 => return Err(DiffError::Ambiguous { block: n, count: c }),
            _ => {
                let prefix = common_prefix(search.iter().copied());
                let ded: Vec<String> = search
                    .iter()
                    .map(|l| {
                        l.strip_prefix(prefix.as_str())
                            .unwrap_or(l.trim_start())
                            .to_string()
                    })
                    .collect();
                let hits: Vec<(usize, String)> = (0..windows)
                    .filter_map(|i| fuzzy_at(&lines, i, &ded).map(|d| (i, d)))
                    .collect();
                match hits.len() {
                    0 => {
                        return Err(DiffError::SearchNotFound {
                            block: n,
                            snippet: snippet(&search),
                        })
                    }
                    1 => {
                        let (i, delta) = hits.into_iter().next().expect("one hit");
                        let rprefix = if replace
                            .iter()
                            .filter(|l| !l.trim().is_empty())
                            .all(|l| l.starts_with(prefix.as_str()))
                        {
                            prefix.clone()
                        } else {
                            common_prefix(replace.iter().copied())
                        };
                        let re: Vec<String> = replace
                            .iter()
                            .map(|l| {
                                if l.trim().is_empty() {
                                    String::new()
                                } else {
                                    format!(
                                        "{delta}{}",
                                        l.strip_prefix(rprefix.as_str()).unwrap_or(l.trim_start())
                                    )
                                }
                            })
                            .collect();
                        fuzzy_blocks.push(n);
                        (i, re)
                    }
                    c => return Err(DiffError::Ambiguous { block: n, count: c }),
                }
            }
        };
        let mut out: Vec<String> = Vec::with_capacity(lines.len() - m + new_lines.len());
        out.extend(lines[..at].iter().map(|s| s.to_string()));
        out.extend(new_lines);
        out.extend(lines[at + m..].iter().map(|s| s.to_string()));
        current = out.join("\n");
    }
    if current.trim().is_empty() {
        return Err(DiffError::EmptyResult);
    }
    if current == original {
        return Err(DiffError::NoChange);
    }
    Ok(AppliedDiff {
        code: current,
        blocks: blocks.len(),
        fuzzy_blocks,
    })
}

static ANY_OPEN_FENCE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*```\s*([\w+-]*)\s*$").expect("valid regex"));

/// The complete program of a full-rewrite answer.
///
/// The answer is cut into fenced blocks: a block opens at a ```` ```python ````, ```` ```py ````
/// or bare ```` ``` ```` line and closes at the first bare ```` ``` ```` line that is not inside
/// a triple-quoted string, so fences inside the program's own prompt strings (asking for a
/// ```` ```json ```` answer) do not cut it short. The block that defines
/// `generate_personas_detailed` wins, else the longest Python-tagged one. An unfenced answer is
/// accepted only when it is the program itself (it defines `generate_personas_detailed`).
pub fn extract_full_program(response: &str) -> Result<String, DiffError> {
    let text = normalise_newlines(response);
    let lines: Vec<&str> = text.split('\n').collect();
    // Opening fences: a tagged python fence, or a bare fence not used as a closing one.
    let mut candidates: Vec<(bool, String)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(c) = ANY_OPEN_FENCE.captures(lines[i]) else {
            i += 1;
            continue;
        };
        let lang = c.get(1).map_or("", |m| m.as_str()).to_ascii_lowercase();
        let python = matches!(lang.as_str(), "python" | "py" | "python3");
        // The next opening python fence (or the end) bounds this block.
        let limit = (i + 1..lines.len())
            .find(|&j| OPEN_FENCE.is_match(lines[j]) && !BARE_FENCE.is_match(lines[j]))
            .unwrap_or(lines.len());
        // Close at the first bare fence outside any triple-quoted string; else at the last one.
        let mut open_dq = false;
        let mut open_sq = false;
        let mut close = None;
        for (j, line) in lines.iter().enumerate().take(limit).skip(i + 1) {
            if BARE_FENCE.is_match(line) && !open_dq && !open_sq {
                close = Some(j);
                break;
            }
            open_dq ^= line.matches("\"\"\"").count() % 2 == 1;
            open_sq ^= line.matches("\'\'\'").count() % 2 == 1;
        }
        let close = close.or_else(|| {
            (i + 1..limit)
                .rev()
                .find(|&j| BARE_FENCE.is_match(lines[j]))
        });
        match close {
            Some(j) => {
                if python || lang.is_empty() {
                    let body = lines[i + 1..j].join("\n");
                    candidates.push((python, body));
                }
                i = j + 1;
            }
            None => i += 1,
        }
    }
    let defines = |s: &str| s.contains("def generate_personas_detailed");
    let pick = candidates
        .iter()
        .filter(|(_, s)| defines(s))
        .max_by_key(|(py, s)| (*py, s.len()))
        .or_else(|| {
            candidates
                .iter()
                .filter(|(_, s)| !s.trim().is_empty())
                .max_by_key(|(py, s)| (*py, s.len()))
        })
        .map(|(_, s)| format!("{}\n", s.trim_end()));
    match pick {
        Some(code) => Ok(code),
        None if !text.contains("```") && defines(&text) => Ok(format!("{}\n", text.trim())),
        None => Err(DiffError::NoProgram),
    }
}

const SYNTAX_SCRIPT: &str = r#"
import sys
src = sys.stdin.read()
try:
    compile(src, "<program>", "exec", dont_inherit=True)
except SyntaxError as e:
    text = (e.text or "").strip()
    msg = f"line {e.lineno}, column {e.offset}: {e.msg}"
    if text:
        msg += f" (near: {text[:120]})"
    print(msg)
    sys.exit(3)
except (ValueError, OverflowError, MemoryError, RecursionError) as e:
    print(f"{type(e).__name__}: {e}")
    sys.exit(3)
"#;

/// Check that `code` compiles as Python (`compile(..., "exec")` in `python3 -I -S`; the
/// program is never executed). The outer error is infrastructure (no Python, timeout); the
/// inner one is the program's fault, e.g. `line 12, column 5: invalid syntax (near: ...)`,
/// to be recorded as a failed candidate and fed back to the mutator.
pub fn check_python_syntax(code: &str) -> crate::Result<Result<(), String>> {
    let out = super::run_python(
        super::PYTHON,
        SYNTAX_SCRIPT,
        code.as_bytes(),
        Duration::from_secs(20),
    )?;
    match out.status.code() {
        Some(0) => Ok(Ok(())),
        Some(3) => Ok(Err(String::from_utf8_lossy(&out.stdout).trim().to_string())),
        _ => Err(crate::Error::Sandbox(format!(
            "python syntax check failed ({}): {}",
            out.status,
            super::tail(&String::from_utf8_lossy(&out.stderr), 600)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefix_of_lines() {
        assert_eq!(
            common_prefix(["    a", "      b", "", "    c"].into_iter()),
            "    "
        );
        assert_eq!(common_prefix(["\ta", "  b"].into_iter()), "");
    }

    #[test]
    fn restarted_block_keeps_last_search() {
        let r = "<<<<<<< SEARCH\nstray\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE";
        let b = parse_diff(r).unwrap();
        assert_eq!(b[0].search, "a");
    }
}
