//! Statistics of loaded dialogues, per domain.

use crate::dialogue::{Dialogue, Role};

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
