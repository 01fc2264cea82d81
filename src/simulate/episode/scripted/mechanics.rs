//! Turn-level mechanics the scripted user plays from a persona's roleplay text.
//!
//! The vocabulary is data, `fitness/mechanics.toml` (embedded, like the feature banks): each
//! mechanic has an id, a Sim2Real dimension, paraphrase-tolerant patterns, the intensities it
//! reads (frequency, count, strength, a number) and canonical phrases for the mutation
//! operators. [`read_persona`] splits a persona text into sentences and matches them:
//!
//! - a sentence that restates the task (most of its content words occur in the task's own
//!   text) is the task, not the persona, and is skipped;
//! - every mechanic whose patterns match (and whose `unless` patterns do not) is **played**,
//!   with the intensities the sentence states ("sometimes" 0.35, "twice" 2, "under twelve
//!   words" 12, "a bit" 0.3) or the mechanic's defaults;
//! - a sentence that matches nothing is **unplayed**: the offline proxy cannot express it. The
//!   episode record keeps these sentences and `ppol report` lists them.
//!
//! `Play` turns a reading into the knobs the scripted user consults turn by turn (a word limit,
//! the probability of lower-casing a message, how many asks an identifier is withheld for, an
//! emotional arc, ...). When two sentences set the same knob, the later one wins.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::simulate::episode::Scenario;
use crate::{Error, Result};

/// Where the vocabulary lives in the repository.
pub const MECHANICS_PATH: &str = "fitness/mechanics.toml";

/// The vocabulary's text (embedded).
pub const MECHANICS_TOML: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fitness/mechanics.toml"
));

/// How a persona's user was driven in an episode, and what of its text was played.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PersonaPlay {
    /// `text` (mechanics read from the roleplay text), `axes` (the text plays no mechanic, the
    /// axis placement drives the user) or `none` (no persona).
    pub source: PlaySource,
    /// The mechanics played, in text order (one entry per sentence and mechanic).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub played: Vec<PlayedMechanic>,
    /// Sentences of the text the offline user cannot play.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unplayed: Vec<String>,
    /// Sentences skipped as restatements of the task.
    #[serde(default)]
    pub task_sentences: usize,
}

impl PersonaPlay {
    /// The ids of the played mechanics, each once, in text order.
    pub fn mechanic_ids(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for p in &self.played {
            if !out.contains(&p.id.as_str()) {
                out.push(&p.id);
            }
        }
        out
    }
}

/// What drove a scripted user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlaySource {
    /// No persona: the plain ("easy mode") simulator.
    #[default]
    None,
    /// The roleplay text's mechanics.
    Text,
    /// The axis placement (the text plays no behaviour mechanic).
    Axes,
}

/// One mechanic played from one sentence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlayedMechanic {
    /// Mechanic id (see `fitness/mechanics.toml`).
    pub id: String,
    /// Frequency or strength in [0, 1], when the mechanic reads one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<f64>,
    /// Count (times, asks), when the mechanic reads one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// A number (a word limit, messages), when the mechanic reads one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    /// The emotional arc, for `emotion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arc: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// The vocabulary

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    version: u32,
    mechanic: Vec<MechanicSpec>,
    #[serde(default)]
    arc: Vec<WordsSpec>,
    #[serde(default)]
    frequency: Vec<WordsSpec>,
    #[serde(default)]
    count: Vec<WordsSpec>,
    #[serde(default)]
    strength: Vec<WordsSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MechanicSpec {
    id: String,
    dimension: String,
    summary: String,
    patterns: Vec<String>,
    #[serde(default)]
    unless: Vec<String>,
    #[serde(default)]
    reads: Vec<String>,
    #[serde(default)]
    default: Option<f64>,
    #[serde(default)]
    default_n: Option<u32>,
    #[serde(default)]
    phrases: Vec<String>,
    #[serde(default)]
    kind: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WordsSpec {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    level: Option<f64>,
    #[serde(default)]
    n: Option<u32>,
    words: Vec<String>,
}

/// One mechanic of the vocabulary (public view, for the mutation operators and the report).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MechanicInfo {
    /// Id.
    pub id: String,
    /// `D1`..`D4`, or `framing`.
    pub dimension: String,
    /// One line.
    pub summary: String,
    /// Canonical sentences that play it.
    pub phrases: Vec<String>,
    /// Played by construction (keeps the goal, closes when done): no behaviour of its own.
    pub framing: bool,
}

struct Mechanic {
    info: MechanicInfo,
    patterns: Vec<Regex>,
    unless: Vec<Regex>,
    reads_level: Option<Level>,
    reads_count: bool,
    reads_number: bool,
    default: Option<f64>,
    default_n: Option<u32>,
}

#[derive(Clone, Copy, PartialEq)]
enum Level {
    Frequency,
    Strength,
}

/// The compiled vocabulary.
pub struct Vocabulary {
    mechanics: Vec<Mechanic>,
    arcs: Vec<(String, Vec<Regex>)>,
    frequency: Vec<(f64, Vec<Regex>)>,
    count: Vec<(u32, Vec<Regex>)>,
    strength: Vec<(f64, Vec<Regex>)>,
}

/// Mechanic ids the scripted user realises (every id in the vocabulary must be one of them).
pub const KNOWN_MECHANICS: &[&str] = &[
    "word_limit",
    "long_messages",
    "lowercase",
    "no_greeting",
    "greeting",
    "typos",
    "loose_punctuation",
    "exclamation",
    "thanks",
    "curt",
    "formal",
    "ack_only",
    "one_word_answers",
    "no_restate",
    "restate",
    "withhold_ids",
    "front_load",
    "one_field",
    "vague_opening",
    "clear_request",
    "reactive",
    "complete_answers",
    "trail_off",
    "hedge",
    "pushback",
    "verify",
    "accept",
    "confirm_promptly",
    "clarify",
    "impatient",
    "certainty",
    "emotion",
    "calm",
    "blame",
    "repeat_demand",
    "already_said",
    "commands",
    "topic_pivot",
    "give_up",
    "keep_goal",
    "close_when_done",
    "role",
];

/// Emotional arcs an `emotion` sentence may name.
pub const KNOWN_ARCS: &[&str] = &["start", "guarded", "on_refusal", "escalate", "progress"];

fn compile(file: &str, key: &str, pattern: &str) -> Result<Regex> {
    Regex::new(&format!("(?i){pattern}")).map_err(|e| {
        Error::parse(
            file,
            key.to_string(),
            format!("bad pattern '{pattern}': {e}"),
        )
    })
}

impl Vocabulary {
    /// Parse and compile a vocabulary (`file` names it in errors). Fails on unknown keys, ids
    /// the scripted user does not realise, bad patterns or out-of-range intensities.
    pub fn parse(text: &str, file: &str) -> Result<Vocabulary> {
        let spec: FileSpec = toml::from_str(text)
            .map_err(|e| Error::parse(file, "toml", e.to_string().trim().to_string()))?;
        if spec.version != 1 {
            return Err(Error::parse(
                file,
                "version",
                format!("unsupported version {}", spec.version),
            ));
        }
        let mut mechanics = Vec::new();
        for m in spec.mechanic {
            let key = format!("mechanic '{}'", m.id);
            if !KNOWN_MECHANICS.contains(&m.id.as_str()) {
                return Err(Error::parse(
                    file,
                    key,
                    "unknown mechanic id: the scripted user does not realise it",
                ));
            }
            if mechanics.iter().any(|x: &Mechanic| x.info.id == m.id) {
                return Err(Error::parse(file, key, "listed twice"));
            }
            if m.patterns.is_empty() {
                return Err(Error::parse(file, key, "no patterns"));
            }
            let mut reads_level = None;
            let (mut reads_count, mut reads_number) = (false, false);
            for r in &m.reads {
                match r.as_str() {
                    "frequency" => reads_level = Some(Level::Frequency),
                    "strength" => reads_level = Some(Level::Strength),
                    "count" => reads_count = true,
                    "number" => reads_number = true,
                    other => {
                        return Err(Error::parse(
                            file,
                            format!("{key}.reads"),
                            format!(
                                "unknown intensity '{other}' (frequency, strength, count, number)"
                            ),
                        ))
                    }
                }
            }
            if let Some(d) = m.default {
                if !(0.0..=1.0).contains(&d) && !reads_count {
                    return Err(Error::parse(
                        file,
                        format!("{key}.default"),
                        format!("{d} is not in [0, 1]"),
                    ));
                }
            }
            let framing = match m.kind.as_deref() {
                None => false,
                Some("framing") => true,
                Some(other) => {
                    return Err(Error::parse(
                        file,
                        format!("{key}.kind"),
                        format!("unknown kind '{other}' (only 'framing')"),
                    ))
                }
            };
            let patterns = m
                .patterns
                .iter()
                .map(|p| compile(file, &format!("{key}.patterns"), p))
                .collect::<Result<Vec<_>>>()?;
            let unless = m
                .unless
                .iter()
                .map(|p| compile(file, &format!("{key}.unless"), p))
                .collect::<Result<Vec<_>>>()?;
            mechanics.push(Mechanic {
                info: MechanicInfo {
                    id: m.id,
                    dimension: m.dimension,
                    summary: m.summary,
                    phrases: m.phrases,
                    framing,
                },
                patterns,
                unless,
                reads_level,
                reads_count,
                reads_number,
                default: m.default,
                default_n: m.default_n,
            });
        }
        let words = |table: &str, specs: &[WordsSpec]| -> Result<Vec<Vec<Regex>>> {
            specs
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    w.words
                        .iter()
                        .map(|p| compile(file, &format!("{table}[{i}]"), p))
                        .collect()
                })
                .collect()
        };
        let arcs = words("arc", &spec.arc)?
            .into_iter()
            .zip(&spec.arc)
            .map(|(res, w)| {
                let name = w.name.clone().unwrap_or_default();
                if KNOWN_ARCS.contains(&name.as_str()) {
                    Ok((name, res))
                } else {
                    Err(Error::parse(
                        file,
                        "arc",
                        format!("unknown arc '{name}' ({})", KNOWN_ARCS.join(", ")),
                    ))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let level = |table: &str, specs: &[WordsSpec]| -> Result<Vec<(f64, Vec<Regex>)>> {
            words(table, specs)?
                .into_iter()
                .zip(specs)
                .enumerate()
                .map(|(i, (res, w))| match w.level {
                    Some(l) if (0.0..=1.0).contains(&l) => Ok((l, res)),
                    _ => Err(Error::parse(
                        file,
                        format!("{table}[{i}].level"),
                        "missing or not in [0, 1]",
                    )),
                })
                .collect()
        };
        let frequency = level("frequency", &spec.frequency)?;
        let strength = level("strength", &spec.strength)?;
        let count = words("count", &spec.count)?
            .into_iter()
            .zip(&spec.count)
            .enumerate()
            .map(|(i, (res, w))| match w.n {
                Some(n) if n >= 1 => Ok((n, res)),
                _ => Err(Error::parse(
                    file,
                    format!("count[{i}].n"),
                    "missing or below 1",
                )),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Vocabulary {
            mechanics,
            arcs,
            frequency,
            count,
            strength,
        })
    }

    /// Every mechanic, in file order.
    pub fn mechanics(&self) -> impl Iterator<Item = &MechanicInfo> {
        self.mechanics.iter().map(|m| &m.info)
    }

    /// One mechanic by id.
    pub fn get(&self, id: &str) -> Option<&MechanicInfo> {
        self.mechanics().find(|m| m.id == id)
    }

    fn first_level(table: &[(f64, Vec<Regex>)], s: &str) -> Option<f64> {
        // the most specific phrase wins: "almost always" before "always"
        let mut best: Option<(usize, f64)> = None;
        for (level, res) in table {
            for re in res {
                if let Some(m) = re.find(s) {
                    let len = m.as_str().len();
                    if best.is_none_or(|(l, _)| len > l) {
                        best = Some((len, *level));
                    }
                }
            }
        }
        best.map(|(_, l)| l)
    }

    fn first_count(&self, s: &str) -> Option<u32> {
        let mut best: Option<(usize, u32)> = None;
        for (n, res) in &self.count {
            for re in res {
                if let Some(m) = re.find(s) {
                    let len = m.as_str().len();
                    if best.is_none_or(|(l, _)| len > l) {
                        best = Some((len, *n));
                    }
                }
            }
        }
        best.map(|(_, n)| n)
    }

    fn arc_of(&self, s: &str) -> Option<String> {
        self.arcs
            .iter()
            .find(|(_, res)| res.iter().any(|r| r.is_match(s)))
            .map(|(name, _)| name.clone())
    }

    /// Read a persona text against `scenario` (whose text identifies task restatements).
    pub fn read(&self, text: &str, scenario: &Scenario) -> PersonaPlay {
        let task_words = content_words(&format!(
            "{} {} {} {} {}",
            scenario.text,
            scenario.reason_for_call,
            scenario.known_info,
            scenario.unknown_info,
            scenario.task_instructions
        ));
        let mut out = PersonaPlay {
            source: PlaySource::Text,
            ..PersonaPlay::default()
        };
        for sentence in split_sentences(text) {
            let lower = sentence.to_lowercase();
            let mut hits = Vec::new();
            for m in &self.mechanics {
                let matched = m.patterns.iter().find_map(|p| p.captures(&lower));
                let Some(caps) = matched else { continue };
                if m.unless.iter().any(|u| u.is_match(&lower)) {
                    continue;
                }
                let n = if m.reads_number {
                    // any pattern's `n` group, else the default
                    m.patterns
                        .iter()
                        .filter_map(|p| p.captures(&lower))
                        .find_map(|c| c.name("n").and_then(|x| parse_number(x.as_str())))
                        .or_else(|| caps.name("n").and_then(|x| parse_number(x.as_str())))
                        .or(m.default_n)
                } else {
                    None
                };
                let level = m.reads_level.map(|l| {
                    let table = match l {
                        Level::Frequency => &self.frequency,
                        Level::Strength => &self.strength,
                    };
                    Self::first_level(table, &lower)
                        .or(m.default)
                        .unwrap_or(0.6)
                });
                let count = m.reads_count.then(|| {
                    self.first_count(&lower)
                        .or(m.default.map(|d| d.round().max(1.0) as u32))
                        .unwrap_or(1)
                });
                let arc = (m.info.id == "emotion")
                    .then(|| self.arc_of(&lower))
                    .flatten();
                hits.push(PlayedMechanic {
                    id: m.info.id.clone(),
                    level,
                    count,
                    n,
                    arc,
                });
            }
            if restates_task(&lower, &task_words, 4, 0.85) {
                // the task's own words (a generator that pastes the task into its text)
                out.task_sentences += 1;
                continue;
            }
            if !hits.is_empty() {
                out.played.extend(hits);
            } else if restates_task(&lower, &task_words, 1, 0.6) {
                out.task_sentences += 1;
            } else {
                out.unplayed.push(sentence);
            }
        }
        out
    }
}

/// The embedded vocabulary (`fitness/mechanics.toml`), compiled once.
pub fn vocabulary() -> &'static Vocabulary {
    static V: OnceLock<Vocabulary> = OnceLock::new();
    V.get_or_init(|| {
        Vocabulary::parse(MECHANICS_TOML, MECHANICS_PATH)
            .expect("the embedded fitness/mechanics.toml is valid (unit-tested)")
    })
}

/// Read a persona's roleplay text with the embedded vocabulary (see the [module docs](self)).
pub fn read_persona(text: &str, scenario: &Scenario) -> PersonaPlay {
    vocabulary().read(text, scenario)
}

// ---------------------------------------------------------------------------------------------
// Text helpers

/// Split a persona text into sentences: at `.`, `!`, `?` or `;`-free line breaks followed by
/// whitespace, never inside parentheses or quotes, never at an ellipsis.
pub fn split_sentences(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let push = |cur: &mut String, out: &mut Vec<String>| {
        let t = cur.trim().trim_start_matches(['-', '*', '•']).trim();
        if t.chars().any(char::is_alphanumeric) {
            out.push(t.to_string());
        }
        cur.clear();
    };
    for i in 0..chars.len() {
        let c = chars[i];
        if c == '\n' && (chars.get(i + 1) == Some(&'\n') || depth == 0 && quote.is_none()) {
            // line breaks end sentences (bullet lists, paragraphs)
            push(&mut cur, &mut out);
            continue;
        }
        cur.push(c);
        match c {
            '(' => depth += 1,
            ')' => depth = (depth - 1).max(0),
            '"' | '\u{201c}' | '\u{201d}' | '\u{2018}' => {
                let close = match c {
                    '\u{201c}' => '\u{201d}',
                    '\u{2018}' => '\u{2019}',
                    _ => c,
                };
                if quote == Some(c) || (quote == Some('\u{201d}') && c == '\u{201d}') {
                    quote = None;
                } else if quote.is_none() {
                    quote = Some(close);
                }
            }
            '\u{2019}' if quote == Some('\u{2019}') => quote = None,
            '\'' => {
                // an apostrophe inside a word is not a quote
                let prev = i.checked_sub(1).map(|j| chars[j]);
                let next = chars.get(i + 1).copied();
                let in_word = prev.is_some_and(char::is_alphanumeric)
                    && next.is_some_and(char::is_alphanumeric);
                if !in_word {
                    if quote == Some('\'') {
                        quote = None;
                    } else if quote.is_none() && !prev.is_some_and(char::is_alphanumeric) {
                        quote = Some('\'');
                    }
                }
            }
            _ => {}
        }
        let end = matches!(c, '.' | '!' | '?')
            && chars.get(i + 1).is_none_or(|n| n.is_whitespace())
            && !(c == '.' && i >= 1 && chars[i - 1] == '.')
            && depth == 0
            && quote.is_none();
        if end {
            push(&mut cur, &mut out);
        }
    }
    push(&mut cur, &mut out);
    out
}

const STOPWORDS: &[&str] = &[
    "the", "and", "you", "your", "for", "are", "with", "that", "this", "have", "has", "was",
    "were", "not", "but", "all", "any", "can", "will", "would", "should", "they", "them", "their",
    "from", "into", "about", "what", "when", "who", "how", "its", "it's", "our", "out", "one",
    "also", "than", "then", "there", "here", "just", "only", "very", "more", "most", "some",
    "want", "wants", "need", "needs", "like", "would", "could", "may", "might", "must", "been",
    "being", "don't", "does", "did", "had", "his", "her", "him", "she", "he", "yourself",
];

fn content_words(text: &str) -> std::collections::BTreeSet<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '\''))
        .filter(|w| w.len() >= 3 && !STOPWORDS.contains(w))
        .map(str::to_string)
        .collect()
}

/// Whether a sentence restates the task: at least `min_words` content words, a `share` of them
/// in the task's text.
fn restates_task(
    sentence: &str,
    task: &std::collections::BTreeSet<String>,
    min_words: usize,
    share: f64,
) -> bool {
    let words = content_words(sentence);
    if words.len() < min_words.max(1) {
        return false;
    }
    let inside = words.iter().filter(|w| task.contains(*w)).count();
    inside as f64 >= share * words.len() as f64
}

/// "12", "twelve", "twenty-five", "a dozen", "a couple", "a few" → the number.
pub fn parse_number(s: &str) -> Option<u32> {
    let s = s.trim().to_lowercase();
    if let Ok(n) = s.parse::<u32>() {
        return Some(n);
    }
    const UNITS: [&str; 20] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
    ];
    const TENS: [(&str, u32); 8] = [
        ("twenty", 20),
        ("thirty", 30),
        ("forty", 40),
        ("fifty", 50),
        ("sixty", 60),
        ("seventy", 70),
        ("eighty", 80),
        ("ninety", 90),
    ];
    let named: BTreeMap<&str, u32> = [
        ("a dozen", 12),
        ("dozen", 12),
        ("a couple", 2),
        ("couple", 2),
        ("a few", 3),
        ("few", 3),
        ("a handful", 5),
    ]
    .into_iter()
    .collect();
    if let Some(n) = named.get(s.as_str()) {
        return Some(*n);
    }
    if let Some(i) = UNITS.iter().position(|u| *u == s) {
        return Some(i as u32);
    }
    let mut parts = s.splitn(2, ['-', ' ']);
    let head = parts.next()?;
    let tail = parts.next();
    let tens = TENS.iter().find(|(w, _)| *w == head)?.1;
    match tail {
        None => Some(tens),
        Some(t) => UNITS[1..10]
            .iter()
            .position(|u| *u == t)
            .map(|i| tens + i as u32 + 1),
    }
}

// ---------------------------------------------------------------------------------------------
// Knobs

/// When an emotion shows.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) enum Arc {
    /// Evenly through the conversation.
    #[default]
    Steady,
    /// From the first message, fading after the first exchanges.
    Start,
    /// Wary and hesitant early, relaxed after the first completed step.
    Guarded,
    /// In the `n` messages after a refusal or a stall.
    OnRefusal(u32),
    /// Rising with every refusal and stall.
    Escalate,
    /// Showing when progress stalls, fading when it is made.
    Progress,
}

/// The knobs a persona text sets (all inert by default: an axis-driven or plain user).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Play {
    /// Any behaviour mechanic was read (text mode).
    pub active: bool,
    /// Word limit per message.
    pub max_words: Option<u32>,
    /// P(a background aside in a message); > 0 also means long, full sentences.
    pub long: f64,
    /// P(a message is lower-cased).
    pub lowercase: f64,
    /// Some(false): never greets or signs off; Some(true): greets in the opening.
    pub greeting: Option<bool>,
    /// Typo rate per eligible word.
    pub typos: f64,
    /// P(a message drops commas and final punctuation).
    pub punct: f64,
    /// P(an exclamation mark or emoji).
    pub exclaim: f64,
    /// P(a politeness marker) override.
    pub polite: Option<f64>,
    /// P(a formal connective); ≥ 0.5 also drops contractions.
    pub formal: f64,
    /// P(an acknowledgement-only turn when the agent only informs).
    pub ack: f64,
    /// P(a one-word answer to a yes/no question).
    pub one_word: f64,
    /// Replies without restating the agent.
    pub no_restate: bool,
    /// P(restating the agent's proposal before confirming).
    pub restate: f64,
    /// Asks before an identifier is given (0: plain behaviour).
    pub withhold: u32,
    /// The whole request and every identifier in the opening.
    pub front_load: bool,
    /// One requested field per turn.
    pub one_field: bool,
    /// A loose description of the problem first.
    pub vague_open: bool,
    /// The request in one clear sentence.
    pub clear_request: bool,
    /// Never volunteers request details.
    pub reactive: bool,
    /// P(trailing off).
    pub trail: f64,
    /// P(a hedge).
    pub hedge: f64,
    /// Pushbacks on refusals / proposals.
    pub pushback: u32,
    /// P(asking the agent to verify).
    pub verify: f64,
    /// Accepts explanations the first time (no pushback, no verification).
    pub accept: bool,
    /// Confirms proposals right away.
    pub prompt_yes: bool,
    /// P(asking what the agent means).
    pub clarify: f64,
    /// P(asking for an update).
    pub impatient: f64,
    /// P(insisting on what it is sure of).
    pub certainty: f64,
    /// Emotion strength (0 none).
    pub emotion: f64,
    /// When it shows.
    pub arc: Arc,
    /// Stays calm.
    pub calm: bool,
    /// A light remark about inconveniences ("that's a bit annoying").
    pub mild: bool,
    /// P(blaming the agent or the company).
    pub blame: f64,
    /// Repeats of its demand.
    pub repeat: u32,
    /// P("i already told you") when asked again.
    pub already: f64,
    /// P(a short command when things stall).
    pub commands: f64,
    /// P(pivoting to another option after a refusal).
    pub pivot: f64,
    /// Gives up after this much friction.
    pub give_up: Option<u32>,
}

impl Play {
    /// The knobs of a reading (later sentences override earlier ones).
    pub fn from_reading(r: &PersonaPlay) -> Play {
        let mut k = Play::default();
        for m in &r.played {
            let level = m.level.unwrap_or(0.6);
            let count = m.count.unwrap_or(1);
            match m.id.as_str() {
                "word_limit" => {
                    k.max_words = Some(m.n.unwrap_or(10).clamp(2, 60));
                    k.long = 0.0;
                }
                "long_messages" => {
                    k.long = level;
                    k.max_words = None;
                }
                "lowercase" => k.lowercase = level,
                "no_greeting" => k.greeting = Some(false),
                "greeting" => k.greeting = Some(true),
                "typos" => k.typos = 0.04 + 0.16 * level,
                "loose_punctuation" => k.punct = level,
                "exclamation" => k.exclaim = level,
                "thanks" => k.polite = Some(0.15 + 0.75 * level),
                "curt" => k.polite = Some(0.02),
                "formal" => k.formal = level,
                "ack_only" => k.ack = level,
                "one_word_answers" => k.one_word = level,
                "no_restate" => {
                    k.no_restate = true;
                    k.restate = 0.0;
                }
                "restate" => {
                    k.restate = level;
                    k.no_restate = false;
                }
                "withhold_ids" => {
                    k.withhold = count.clamp(1, 3);
                    k.front_load = false;
                }
                "front_load" => {
                    k.front_load = true;
                    k.withhold = 0;
                    k.vague_open = false;
                }
                "one_field" => k.one_field = true,
                "vague_opening" => {
                    k.vague_open = true;
                    k.clear_request = false;
                    k.front_load = false;
                }
                "clear_request" => {
                    k.clear_request = true;
                    k.vague_open = false;
                }
                "reactive" => k.reactive = true,
                "complete_answers" => {
                    k.one_field = false;
                    k.withhold = k.withhold.min(1);
                }
                "trail_off" => k.trail = level,
                "hedge" => k.hedge = level,
                "pushback" => {
                    k.pushback = count.clamp(1, 3);
                    k.accept = false;
                }
                "verify" => {
                    k.verify = level;
                    k.accept = false;
                }
                "accept" => {
                    k.accept = true;
                    k.pushback = 0;
                    k.verify = 0.0;
                }
                "confirm_promptly" => k.prompt_yes = true,
                "clarify" => k.clarify = level,
                "impatient" => k.impatient = level,
                "certainty" => k.certainty = level,
                "emotion" => {
                    k.emotion = level;
                    k.calm = false;
                    k.arc = match m.arc.as_deref() {
                        Some("start") => Arc::Start,
                        Some("guarded") => Arc::Guarded,
                        Some("on_refusal") => Arc::OnRefusal(m.n.unwrap_or(2).clamp(1, 6)),
                        Some("escalate") => Arc::Escalate,
                        Some("progress") => Arc::Progress,
                        _ => Arc::Steady,
                    };
                }
                "calm" => {
                    k.calm = true;
                    k.emotion = 0.0;
                    k.blame = 0.0;
                    k.commands = 0.0;
                    k.mild = true;
                }
                "blame" => k.blame = level,
                "repeat_demand" => k.repeat = count.clamp(1, 4),
                "already_said" => k.already = level,
                "commands" => k.commands = level,
                "topic_pivot" => k.pivot = level,
                "give_up" => k.give_up = Some(count.clamp(1, 6)),
                _ => continue, // framing: played by construction
            }
            k.active = true;
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> Scenario {
        Scenario {
            task_id: "t".into(),
            domain: "airline".into(),
            reason_for_call: "You want to cancel reservation EHGLP3 because your trip was called off.".into(),
            known_info: "Your user id is daiki_muller_1116.".into(),
            text: "Persona: ... Instructions: You want to cancel reservation EHGLP3 because your trip was called off. Your user id is daiki_muller_1116. You are reactive to the agent and will not say anything that is not asked.".into(),
            ..Scenario::default()
        }
    }

    #[test]
    fn the_embedded_vocabulary_parses_and_knows_every_id() {
        let v = vocabulary();
        let ids: Vec<&str> = v.mechanics().map(|m| m.id.as_str()).collect();
        for id in KNOWN_MECHANICS {
            assert!(ids.contains(id), "{id} has no entry in {MECHANICS_PATH}");
        }
        for m in v.mechanics() {
            assert!(!m.phrases.is_empty(), "{} has no phrase", m.id);
        }
    }

    #[test]
    fn numbers_in_words_and_digits() {
        assert_eq!(parse_number("twelve"), Some(12));
        assert_eq!(parse_number("12"), Some(12));
        assert_eq!(parse_number("twenty-five"), Some(25));
        assert_eq!(parse_number("a dozen"), Some(12));
        assert_eq!(parse_number("banana"), None);
    }

    #[test]
    fn sentences_split_outside_quotes_and_ellipses() {
        let s = split_sentences(
            "Trail off sometimes ('I think it was... not sure') and let the agent prompt you. Keep it short! Don't greet.",
        );
        assert_eq!(s.len(), 3, "{s:?}");
        assert!(s[0].ends_with("prompt you."));
        let s = split_sentences("- be brief\n- type in lowercase\n\nNo greeting.");
        assert_eq!(s, ["be brief", "type in lowercase", "No greeting."]);
    }

    #[test]
    fn intensities_are_read_from_the_sentence() {
        let r = read_persona(
            "Keep most messages under eight words. Sometimes leave a typo uncorrected. Push back twice when told no. You are a bit annoyed.",
            &scenario(),
        );
        let get = |id: &str| r.played.iter().find(|p| p.id == id).unwrap().clone();
        assert_eq!(get("word_limit").n, Some(8));
        assert_eq!(get("typos").level, Some(0.35));
        assert_eq!(get("pushback").count, Some(2));
        assert_eq!(get("emotion").level, Some(0.3));
        assert!(r.unplayed.is_empty(), "{:?}", r.unplayed);
    }

    #[test]
    fn task_restatements_are_neither_played_nor_unplayed() {
        let r = read_persona(
            "You are a customer contacting support about this situation: You want to cancel reservation EHGLP3 because your trip was called off. Your user id is daiki_muller_1116. You love jazz and collect stamps. Type in lowercase.",
            &scenario(),
        );
        assert_eq!(r.mechanic_ids(), ["role", "lowercase"]);
        assert_eq!(r.task_sentences, 1, "{r:?}");
        assert_eq!(r.unplayed, ["You love jazz and collect stamps."]);
    }

    #[test]
    fn later_sentences_override_and_negations_pick_the_opposite() {
        let k = Play::from_reading(&read_persona(
            "Be terse: short messages. Actually, write long messages with background.",
            &scenario(),
        ));
        assert!(k.active && k.max_words.is_none() && k.long > 0.0);
        let r = read_persona("No greeting. Never push back.", &scenario());
        assert_eq!(r.mechanic_ids(), ["no_greeting", "accept"]);
        assert!(r.unplayed.is_empty());
        let k = Play::from_reading(&read_persona(
            "Your mood stays steady unless the agent refuses something; then it shows in your next three messages.",
            &scenario(),
        ));
        assert_eq!(k.arc, Arc::OnRefusal(3));
    }

    #[test]
    fn bad_vocabularies_are_refused_with_the_key() {
        let e = Vocabulary::parse(
            "version = 1\n[[mechanic]]\nid = \"juggling\"\ndimension = \"D1\"\nsummary = \"x\"\npatterns = ['a']\n",
            "m.toml",
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("m.toml") && e.contains("juggling"), "{e}");
        let e = Vocabulary::parse(
            "version = 1\n[[mechanic]]\nid = \"typos\"\ndimension = \"D1\"\nsummary = \"x\"\npatterns = ['(']\n",
            "m.toml",
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("typos") && e.contains("bad pattern"), "{e}");
    }
}
