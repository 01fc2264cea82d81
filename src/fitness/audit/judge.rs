//! The audit's optional third opinion: an LLM judge. For each pair it is shown the user turns
//! of a human dialogue and of a simulated one — of the same task when the two sets share
//! tasks, else drawn at random — in a seeded random order, and asked which user is the real
//! person. Its accuracy comes with a 95% Wilson interval; 0.5 means it cannot tell them apart.
//!
//! The prompt is one text with `{user_a}` and `{user_b}` where the two users' turns go (one
//! per line); ppol ships `fitness/judge_prompt.md` and a user may give their own. The judge
//! calls the `reflection` role's model through the caller's [`ChatModel`] (the run's client:
//! its endpoints, budget and cache). Answers are read as `A` or `B` (see [`read_answer`]);
//! anything else is counted as unanswered, never as right or wrong.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use futures::future::join_all;
use serde::{Deserialize, Serialize};

use crate::dialogue::{Dialogue, Role, Turn};
use crate::fitness::audit::stats::{wilson, Wilson, Z95};
use crate::llm::{CallRole, ChatModel, ChatRequest};
use crate::rng::mix;
use crate::{Error, Result};

/// What the audit says when no model is configured.
pub const OFFLINE_NOTE: &str =
    "skipped: no model configured (offline); give --llm (Python: llm=) to ask one";

/// The role whose model judges.
pub const ROLE: CallRole = CallRole::Reflection;

/// Characters of one user's turns shown to the judge at most (both users alike); the rest is
/// cut with `[...]`.
pub const MAX_CHARS_PER_USER: usize = 2_000;

/// Markers a simulator writes into its user turns (they would give it away).
const CONTROL_MARKERS: [&str; 3] = ["###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"];

/// How the judge runs.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeOptions {
    /// Pairs per condition (0: the judge does not run).
    pub pairs: usize,
    /// The prompt template (`{user_a}`, `{user_b}`).
    pub prompt: String,
    /// Where the prompt came from (a path, or the shipped default).
    pub prompt_source: String,
    /// Seed of the pairing and the order.
    pub seed: u64,
}

impl JudgeOptions {
    /// Pairs per condition by default.
    pub const PAIRS: usize = 20;

    /// The options with the prompt read from `path` (else the shipped
    /// `fitness/judge_prompt.md`).
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be read; [`Error::Config`] (key `judge_prompt`) when it
    /// lacks `{user_a}` or `{user_b}`; [`Error::Config`] (key `judge_pairs`) beyond
    /// [`crate::limits::MAX_JUDGE_PAIRS`].
    pub fn new(pairs: usize, prompt: Option<&Path>, seed: u64) -> Result<JudgeOptions> {
        crate::limits::check("judge_pairs", pairs, 0, crate::limits::MAX_JUDGE_PAIRS)?;
        let (text, source) = match prompt {
            Some(p) => (
                crate::io::read_regular_text(p, crate::limits::MAX_PROMPT_BYTES, "a judge prompt")?,
                p.display().to_string(),
            ),
            None => (
                crate::shipped::JUDGE_PROMPT.to_string(),
                "fitness/judge_prompt.md (shipped)".to_string(),
            ),
        };
        for slot in ["{user_a}", "{user_b}"] {
            if !text.contains(slot) {
                return Err(Error::config(
                    "judge_prompt",
                    format!("{source}: the prompt has no {slot} (where a user's turns go)"),
                ));
            }
        }
        Ok(JudgeOptions {
            pairs,
            prompt: text,
            prompt_source: source,
            seed,
        })
    }

    /// One line on what the judge does, for reports.
    pub fn describe(&self, model: &str) -> String {
        format!(
            "{} pairs per condition shown to {model} (the {} role) with the prompt {}; \
             accuracy with a 95% Wilson interval, 0.5 = cannot tell",
            self.pairs,
            ROLE.as_str(),
            self.prompt_source
        )
    }
}

/// What the judge said about one condition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeResult {
    /// Pairs shown.
    pub pairs: usize,
    /// Pairs answered A or B.
    pub answered: usize,
    /// Answers that picked the human.
    pub correct: usize,
    /// Pairs where the human was shown as user A (a judge that always answers A scores
    /// this share).
    pub human_first: usize,
    /// correct / answered with its 95% Wilson interval (None when nothing was answered).
    pub accuracy: Option<Wilson>,
    /// `task` (each pair shares its task) or `random` (the sets share no task).
    pub paired_by: String,
    /// Why pairs went unanswered (the first few reasons), when some did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unanswered: Vec<String>,
}

impl std::fmt::Display for JudgeResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.accuracy {
            Some(w) => {
                let (low, high) = super::stats::outward(w.low, w.high);
                write!(
                    f,
                    "{:.2} [{low:.2}, {high:.2}] ({}/{})",
                    w.share, self.correct, self.answered
                )
            }
            None => write!(f, "no answer (0/{})", self.pairs),
        }
    }
}

/// One pair: the human's index, the candidate's, whether the human is shown as A.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    /// Index into the human dialogues.
    pub human: usize,
    /// Index into the candidate dialogues.
    pub candidate: usize,
    /// The human is user A.
    pub human_first: bool,
}

fn has_text(d: &Dialogue) -> bool {
    d.user_texts().any(|t| !t.trim().is_empty())
}

/// The pairs the judge is shown, and how they were paired: each candidate dialogue (with user
/// text) in a seeded order, up to `n`, with a human of its task (seeded among them); when the
/// two sets share no task at all, with a seeded random human. Deterministic in `seed`.
pub fn pairs(
    human: &[Dialogue],
    candidate: &[Dialogue],
    n: usize,
    seed: u64,
) -> (Vec<Pair>, &'static str) {
    let mut by_task: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let humans: Vec<usize> = (0..human.len()).filter(|&i| has_text(&human[i])).collect();
    for &i in &humans {
        if let Some(t) = &human[i].task_id {
            by_task.entry(t.as_str()).or_default().push(i);
        }
    }
    let mut cands: Vec<usize> = (0..candidate.len())
        .filter(|&i| has_text(&candidate[i]))
        .collect();
    // a seeded order (Fisher–Yates on the mixed stream)
    for i in (1..cands.len()).rev() {
        let j = (mix(seed, i as u64) % (i as u64 + 1)) as usize;
        cands.swap(i, j);
    }
    let shared: BTreeSet<&str> = cands
        .iter()
        .filter_map(|&c| candidate[c].task_id.as_deref())
        .filter(|t| by_task.contains_key(t))
        .collect();
    let by = if shared.is_empty() { "random" } else { "task" };
    let mut out = Vec::new();
    for (k, &c) in cands.iter().enumerate() {
        if out.len() >= n || humans.is_empty() {
            break;
        }
        let draw = mix(seed ^ 0x4a55_4447, k as u64);
        let h = if shared.is_empty() {
            humans[(draw % humans.len() as u64) as usize]
        } else {
            match candidate[c].task_id.as_deref().and_then(|t| by_task.get(t)) {
                Some(hs) => hs[(draw % hs.len() as u64) as usize],
                None => continue,
            }
        };
        out.push(Pair {
            human: h,
            candidate: c,
            human_first: (draw >> 32) & 1 == 0,
        });
    }
    (out, by)
}

/// A user's turns as the judge sees them: one per line, `- ` first, the simulator's control
/// markers removed, cut at [`MAX_CHARS_PER_USER`].
pub fn user_block(d: &Dialogue) -> String {
    let mut out = String::new();
    for t in d.user_texts() {
        let mut text = t.to_string();
        for m in CONTROL_MARKERS {
            text = text.replace(m, "");
        }
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if text.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("- ");
        out.push_str(&text);
        if out.chars().count() > MAX_CHARS_PER_USER {
            out = out.chars().take(MAX_CHARS_PER_USER).collect();
            out.push_str(" [...]");
            break;
        }
    }
    out
}

/// The prompt of one pair.
pub fn prompt(template: &str, user_a: &str, user_b: &str) -> String {
    // one pass, so a user's text that contains "{user_b}" is not filled in again
    let mut out = String::with_capacity(template.len() + user_a.len() + user_b.len());
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("{user_a}") {
            out.push_str(user_a);
            rest = t;
        } else if let Some(t) = tail.strip_prefix("{user_b}") {
            out.push_str(user_b);
            rest = t;
        } else {
            out.push('{');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The judge's pick: `A` or `B` when the answer says one and only one of them, else None.
/// The answer's first word counts when it is the letter alone (`B`, `**A**`, `A.`, `B is the
/// real one`; not the article of `A real person ...`); else mentions such as `user A` or
/// `answer: B` count when they all name the same letter.
pub fn read_answer(text: &str) -> Option<char> {
    let t = text.trim_start_matches(|c: char| !c.is_alphanumeric());
    let mut chars = t.chars();
    if let Some(c @ ('A' | 'B')) = chars.next() {
        let rest = chars.as_str();
        let alone = match rest.chars().next() {
            None => true,
            Some(n) if n.is_alphanumeric() => false,
            Some(n) if n.is_whitespace() => {
                let next = rest.trim_start();
                next.is_empty() || next.starts_with("is ") || next.starts_with('(')
            }
            Some(_) => true,
        };
        if alone {
            return Some(c);
        }
    }
    let lower = text.to_lowercase();
    let mut seen = BTreeSet::new();
    for lead in ["user ", "answer: ", "answer is ", "answer "] {
        for (i, _) in lower.match_indices(lead) {
            let mut after = lower[i + lead.len()..].chars();
            if let Some(c @ ('a' | 'b')) = after.next() {
                if after.next().is_none_or(|n| !n.is_alphanumeric()) {
                    seen.insert(c.to_ascii_uppercase());
                }
            }
        }
    }
    if seen.len() == 1 {
        seen.into_iter().next()
    } else {
        None
    }
}

/// Judge `candidate` against `human`: up to `opts.pairs` pairs, asked concurrently (the model
/// bounds its own concurrency). `salt` varies the pairing per condition.
pub async fn judge(
    model: &dyn ChatModel,
    human: &[Dialogue],
    candidate: &[Dialogue],
    opts: &JudgeOptions,
    salt: u64,
) -> JudgeResult {
    let seed = mix(opts.seed, salt);
    let (pairs, by) = pairs(human, candidate, opts.pairs, seed);
    let asked = pairs.iter().enumerate().map(|(i, p)| {
        let (h, c) = (
            user_block(&human[p.human]),
            user_block(&candidate[p.candidate]),
        );
        let text = if p.human_first {
            prompt(&opts.prompt, &h, &c)
        } else {
            prompt(&opts.prompt, &c, &h)
        };
        let mut request = ChatRequest::new(ROLE, vec![Turn::new(Role::User, text)]);
        request.temperature = Some(0.0);
        request.max_tokens = Some(16);
        request.seed = Some(mix(seed, i as u64));
        async move { model.chat(&request).await }
    });
    let answers = join_all(asked).await;
    let (mut answered, mut correct, mut unanswered) = (0, 0, Vec::new());
    for (p, a) in pairs.iter().zip(answers) {
        match a {
            Ok(r) => match read_answer(&r.message.content) {
                Some(pick) => {
                    answered += 1;
                    correct += usize::from((pick == 'A') == p.human_first);
                }
                None => unanswered.push(format!(
                    "not A or B: {:?}",
                    r.message.content.chars().take(60).collect::<String>()
                )),
            },
            Err(e) => unanswered.push(format!("the call failed: {e}")),
        }
    }
    unanswered.truncate(5);
    JudgeResult {
        pairs: pairs.len(),
        answered,
        correct,
        human_first: pairs.iter().filter(|p| p.human_first).count(),
        accuracy: wilson(correct, answered, Z95),
        paired_by: by.into(),
        unanswered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(id: &str, task: Option<&str>, user: &[&str]) -> Dialogue {
        let mut turns = Vec::new();
        for u in user {
            turns.push(Turn::new(Role::Assistant, "How can I help?"));
            turns.push(Turn::new(Role::User, *u));
        }
        let mut x = Dialogue::new(id, turns);
        x.task_id = task.map(str::to_string);
        x
    }

    #[test]
    fn answers_are_read_strictly() {
        for (text, want) in [
            ("A", Some('A')),
            ("B", Some('B')),
            (" b.", None),
            ("**B**", Some('B')),
            ("A. The first one.", Some('A')),
            ("B is the real one", Some('B')),
            ("User A is real.", Some('A')),
            ("The answer is B", Some('B')),
            ("A real person would say that; user B", Some('B')),
            ("Alice", None),
            ("Both could be", None),
            ("User A or user B", None),
            ("", None),
        ] {
            assert_eq!(read_answer(text), want, "{text:?}");
        }
    }

    #[test]
    fn the_prompt_fills_each_slot_once_and_keeps_braces() {
        let p = prompt("x {user_a} | {user_b} {other}", "say {user_b}", "B");
        assert_eq!(p, "x say {user_b} | B {other}");
        assert!(JudgeOptions::new(5, None, 0).is_ok());
    }

    #[test]
    fn pairs_share_a_task_when_they_can_and_are_seeded() {
        let humans = vec![
            d("h1", Some("1"), &["hi"]),
            d("h2", Some("2"), &["yo"]),
            d("h3", Some("9"), &[""]),
        ];
        let sims = vec![
            d("s1", Some("1"), &["Hello there"]),
            d("s2", Some("2"), &["Good day"]),
            d("s3", Some("3"), &["Greetings"]),
        ];
        let (ps, by) = pairs(&humans, &sims, 10, 4);
        assert_eq!(by, "task");
        assert_eq!(ps.len(), 2); // s3's task has no human
        for p in &ps {
            assert_eq!(humans[p.human].task_id, sims[p.candidate].task_id);
        }
        assert_eq!(pairs(&humans, &sims, 10, 4).0, ps);
        let other: Vec<Dialogue> = vec![d("x", Some("7"), &["Hello"]); 1];
        let (ps, by) = pairs(&humans, &other, 10, 4);
        assert_eq!((by, ps.len()), ("random", 1));
        assert_ne!(ps[0].human, 2, "a human without user text is never shown");
    }

    #[test]
    fn a_user_block_drops_control_markers_and_is_bounded() {
        let x = d("s", None, &["Thanks! ###STOP###", "  ", "ok"]);
        assert_eq!(user_block(&x), "- Thanks!\n- ok");
        let long = "word ".repeat(1000);
        let y = d("s", None, &[long.as_str()]);
        assert!(user_block(&y).chars().count() <= MAX_CHARS_PER_USER + 6);
    }
}
