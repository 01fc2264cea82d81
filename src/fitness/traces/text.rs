//! Plain text traces: dialogues separated by lines holding only `---`, turns prefixed
//! `USER:` / `ASSISTANT:`.

use std::path::Path;

use super::stem;
use crate::dialogue::{Dialogue, Role, Turn};
use crate::{Error, Result};

pub(super) fn parse_text_located(text: &str, path: &Path) -> Result<Vec<(String, Dialogue)>> {
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

pub(super) fn text_role(prefix: &str) -> Option<Role> {
    match prefix.trim().to_ascii_uppercase().as_str() {
        "USER" | "HUMAN" | "CUSTOMER" => Some(Role::User),
        "ASSISTANT" | "AGENT" => Some(Role::Assistant),
        "SYSTEM" => Some(Role::System),
        "TOOL" => Some(Role::Tool),
        _ => None,
    }
}
