//! τ-USI's platform scaffolding, stripped from its conversations.

use crate::dialogue::{Role, Turn};

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
pub(super) fn split_stop(s: &str) -> Option<(&str, &str)> {
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
pub(super) fn take_block(s: &str, open: &str, close: &str) -> Option<(String, String)> {
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

pub(super) fn strip_hidden(s: &str) -> String {
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
