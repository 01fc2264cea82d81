//! Persona behaviour axes of the scripted user (names, synonyms, definitions) and the surface
//! transforms that realise them (lower-casing, dropped articles, typos), which never touch
//! protected spans (identifiers, names).

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value};

use super::mechanics::Play;

/// The behaviour axes the scripted user realises: `(name, one-line definition)`.
///
/// Evolution may draw new axes from this list. Names are matched after normalisation
/// (lower case, spaces and hyphens → `_`), and common synonyms are accepted (see [`Axis::parse`]).
pub const KNOWN_AXES: &[(&str, &str)] = &[
    ("terse", "short messages, often lowercase, no greeting, dropped articles, acknowledgement-only turns like 'ok' or 'yes', little politeness"),
    ("skeptical", "doubts the agent: 'are you sure', 'that doesn't seem right', asks to double-check or verify, insists on what it is certain of"),
    ("frustrated", "angry and impolite: 'ugh', 'this is ridiculous', blames the agent ('useless', 'do your job'), repeats its demand, may give up"),
    ("ambiguous", "vague and hesitant: 'i think', 'maybe', 'not sure', partial answers, withholds identifiers until asked twice, asks 'what do you mean?'"),
    ("typos", "character-level typos and missing apostrophes (identifiers stay intact)"),
    ("polite", "says please, thank you and sorry in nearly every message"),
    ("incremental_disclosure", "reveals one fact per turn and never more than asked; the opening holds only the gist of the request"),
    ("verbose", "long messages with background context and restatements"),
    ("impatient", "in a hurry: 'any update?', 'how long will this take?', 'when will this be done?', short deadlines"),
    ("emotional", "voices feelings (worried, stressed, upset, disappointed) without blaming the agent"),
    ("acknowledger", "frequent acknowledgement-only turns: 'ok', 'got it', 'sure', 'alright'"),
    ("formal", "formal register: full sentences, no contractions, 'however', 'regarding', 'furthermore'"),
    ("lowercase", "types everything in lower case (identifiers stay intact)"),
];

/// One behaviour axis of [`KNOWN_AXES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Axis {
    /// `terse`.
    Terse,
    /// `skeptical`.
    Skeptical,
    /// `frustrated`.
    Frustrated,
    /// `ambiguous`.
    Ambiguous,
    /// `typos`.
    Typos,
    /// `polite`.
    Polite,
    /// `incremental_disclosure`.
    IncrementalDisclosure,
    /// `verbose`.
    Verbose,
    /// `impatient`.
    Impatient,
    /// `emotional`.
    Emotional,
    /// `acknowledger`.
    Acknowledger,
    /// `formal`.
    Formal,
    /// `lowercase`.
    Lowercase,
}

/// Synonyms (normalised) → axis.
const SYNONYMS: &[(&str, Axis)] = &[
    ("concise", Axis::Terse),
    ("brief", Axis::Terse),
    ("short", Axis::Terse),
    ("curt", Axis::Terse),
    ("laconic", Axis::Terse),
    ("succinct", Axis::Terse),
    ("minimal", Axis::Terse),
    ("low_effort", Axis::Terse),
    ("short_messages", Axis::Terse),
    ("terse_typing", Axis::Terse),
    ("distrustful", Axis::Skeptical),
    ("sceptical", Axis::Skeptical),
    ("suspicious", Axis::Skeptical),
    ("doubtful", Axis::Skeptical),
    ("questioning", Axis::Skeptical),
    ("challenging", Axis::Skeptical),
    ("mistrustful", Axis::Skeptical),
    ("angry", Axis::Frustrated),
    ("impatient_angry", Axis::Frustrated),
    ("annoyed", Axis::Frustrated),
    ("irritated", Axis::Frustrated),
    ("hostile", Axis::Frustrated),
    ("rude", Axis::Frustrated),
    ("aggressive", Axis::Frustrated),
    ("irate", Axis::Frustrated),
    ("vague", Axis::Ambiguous),
    ("unclear", Axis::Ambiguous),
    ("uncertain", Axis::Ambiguous),
    ("confused", Axis::Ambiguous),
    ("indecisive", Axis::Ambiguous),
    ("hesitant", Axis::Ambiguous),
    ("typo", Axis::Typos),
    ("typo_prone", Axis::Typos),
    ("misspellings", Axis::Typos),
    ("misspelling", Axis::Typos),
    ("sloppy", Axis::Typos),
    ("sloppy_typing", Axis::Typos),
    ("courteous", Axis::Polite),
    ("respectful", Axis::Polite),
    ("friendly", Axis::Polite),
    ("incremental", Axis::IncrementalDisclosure),
    ("gradual_disclosure", Axis::IncrementalDisclosure),
    ("progressive_disclosure", Axis::IncrementalDisclosure),
    ("minimal_disclosure", Axis::IncrementalDisclosure),
    ("reactive", Axis::IncrementalDisclosure),
    ("withholding", Axis::IncrementalDisclosure),
    ("one_fact_at_a_time", Axis::IncrementalDisclosure),
    ("wordy", Axis::Verbose),
    ("talkative", Axis::Verbose),
    ("chatty", Axis::Verbose),
    ("rambling", Axis::Verbose),
    ("detailed", Axis::Verbose),
    ("elaborate", Axis::Verbose),
    ("hurried", Axis::Impatient),
    ("rushed", Axis::Impatient),
    ("in_a_hurry", Axis::Impatient),
    ("time_pressed", Axis::Impatient),
    ("anxious", Axis::Emotional),
    ("worried", Axis::Emotional),
    ("stressed", Axis::Emotional),
    ("upset", Axis::Emotional),
    ("emotive", Axis::Emotional),
    ("nervous", Axis::Emotional),
    ("acknowledging", Axis::Acknowledger),
    ("backchannel", Axis::Acknowledger),
    ("backchanneling", Axis::Acknowledger),
    ("backchanneler", Axis::Acknowledger),
    ("formal_register", Axis::Formal),
    ("professional", Axis::Formal),
    ("all_lowercase", Axis::Lowercase),
    ("lower_case", Axis::Lowercase),
    ("no_caps", Axis::Lowercase),
];

impl Axis {
    /// All axes, in [`KNOWN_AXES`] order.
    pub const ALL: [Axis; 13] = [
        Axis::Terse,
        Axis::Skeptical,
        Axis::Frustrated,
        Axis::Ambiguous,
        Axis::Typos,
        Axis::Polite,
        Axis::IncrementalDisclosure,
        Axis::Verbose,
        Axis::Impatient,
        Axis::Emotional,
        Axis::Acknowledger,
        Axis::Formal,
        Axis::Lowercase,
    ];

    /// The canonical name (as in [`KNOWN_AXES`]).
    pub fn name(self) -> &'static str {
        KNOWN_AXES[self as usize].0
    }

    /// Resolve an axis name: normalise it ([`normalize_axis_name`]), then look for a canonical
    /// name, a synonym (`concise` → terse, `distrustful` → skeptical, `angry` → frustrated,
    /// `vague` → ambiguous, ...), and finally `_`-separated parts that all resolve to one axis
    /// (`very_terse`, `skeptical_customer`, `types_in_all_lowercase`). Names with a negation
    /// (`not_terse`, `non_verbose`) or parts naming different axes resolve to nothing.
    pub fn parse(name: &str) -> Option<Axis> {
        let n = normalize_axis_name(name);
        let exact = |s: &str| {
            Axis::ALL
                .iter()
                .copied()
                .find(|a| a.name() == s)
                .or_else(|| SYNONYMS.iter().find(|(k, _)| *k == s).map(|(_, a)| *a))
        };
        if let Some(a) = exact(&n) {
            return Some(a);
        }
        let parts: Vec<&str> = n.split('_').collect();
        if parts.iter().any(|p| {
            matches!(
                *p,
                "not" | "no" | "non" | "never" | "less" | "without" | "anti"
            )
        }) {
            return None;
        }
        let hits: HashSet<Axis> = parts.into_iter().filter_map(exact).collect();
        if hits.len() == 1 {
            hits.into_iter().next()
        } else {
            None
        }
    }
}

/// Lower-case, trim, turn spaces, hyphens and other punctuation into `_`, and collapse repeated
/// `_` ("Incremental - Disclosure" → `incremental_disclosure`).
pub fn normalize_axis_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.trim().to_lowercase().chars() {
        let c = if c.is_alphanumeric() { c } else { '_' };
        if c == '_' && (out.is_empty() || out.ends_with('_')) {
            continue;
        }
        out.push(c);
    }
    out.trim_end_matches('_').to_string()
}

/// Whether a placement value means "on": `true`, a number ≥ 0.5, or a string such as
/// `"true"`, `"yes"`, `"on"`, `"high"`.
fn placement_on(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|x| x >= 0.5),
        Value::String(s) => matches!(
            s.trim().to_lowercase().as_str(),
            "true" | "yes" | "on" | "high" | "1" | "present"
        ),
        _ => false,
    }
}

fn warn_unknown_axis(name: &str) {
    static SEEN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| Mutex::new(HashSet::new()));
    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    if seen.insert(name.to_string()) {
        tracing::warn!(axis = name, "scripted user: unknown persona axis ignored");
    }
}

/// The resolved behaviour of a scripted user.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Style {
    /// No persona at all: the cooperative, verbose, front-loading "easy mode" LLM user.
    pub easy: bool,
    pub terse: bool,
    pub skeptical: bool,
    pub frustrated: bool,
    pub ambiguous: bool,
    pub typos: bool,
    pub polite: bool,
    pub incremental: bool,
    pub verbose: bool,
    pub impatient: bool,
    pub emotional: bool,
    pub acknowledger: bool,
    pub formal: bool,
    pub lowercase: bool,
    /// Driven by a persona text's mechanics ([`Play`]): probabilities come from the knobs,
    /// the flags above only pick the register and the phrase pools.
    pub text: bool,
}

impl Style {
    pub fn from_axes(axes: &Map<String, Value>) -> Style {
        let mut s = Style {
            easy: axes.is_empty(),
            ..Style::default()
        };
        for (name, v) in axes {
            let Some(axis) = Axis::parse(name) else {
                warn_unknown_axis(name);
                continue;
            };
            let on = placement_on(v);
            match axis {
                Axis::Terse => s.terse |= on,
                Axis::Skeptical => s.skeptical |= on,
                Axis::Frustrated => s.frustrated |= on,
                Axis::Ambiguous => s.ambiguous |= on,
                Axis::Typos => s.typos |= on,
                Axis::Polite => s.polite |= on,
                Axis::IncrementalDisclosure => s.incremental |= on,
                Axis::Verbose => s.verbose |= on,
                Axis::Impatient => s.impatient |= on,
                Axis::Emotional => s.emotional |= on,
                Axis::Acknowledger => s.acknowledger |= on,
                Axis::Formal => s.formal |= on,
                Axis::Lowercase => s.lowercase |= on,
            }
        }
        s
    }

    /// The register a text persona's knobs imply: terse under a limit of 14 words or less, long
    /// for long messages without a limit, formal from a formal register, incremental for one
    /// field per turn.
    pub fn from_play(k: &Play) -> Style {
        Style {
            text: true,
            terse: k.max_words.is_some_and(|n| n <= 14),
            verbose: k.long >= 0.5 && k.max_words.is_none(),
            formal: k.formal >= 0.5,
            incremental: k.one_field,
            ..Style::default()
        }
    }

    /// Long, well-formed sentences (easy mode, verbose, formal), unless terse.
    pub fn long(&self) -> bool {
        !self.terse && (self.easy || self.verbose || self.formal)
    }

    /// Probability that a turn carries a politeness marker.
    pub fn p_polite(&self) -> f64 {
        if self.polite {
            0.92
        } else if self.frustrated {
            0.0
        } else if self.easy {
            0.2
        } else if self.terse {
            0.03
        } else if self.formal || self.verbose {
            0.3
        } else {
            0.15
        }
    }

    /// Probability that a turn carries a formal connective.
    pub fn p_formal(&self) -> f64 {
        if self.formal {
            0.85
        } else if self.easy {
            0.3
        } else {
            0.0
        }
    }

    /// States every identifier it has in the opening message.
    pub fn front_loads(&self) -> bool {
        (self.easy || self.verbose || self.formal)
            && !self.text
            && !self.incremental
            && !self.ambiguous
            && !self.terse
    }
}

// ---------------------------------------------------------------------------------------------
// Protected spans and surface transforms

const HARD_OPEN: char = '\u{E000}';
const HARD_CLOSE: char = '\u{E001}';
const SOFT_OPEN: char = '\u{E002}';
const SOFT_CLOSE: char = '\u{E003}';

/// Mark an identifier: kept verbatim by every transform.
pub(crate) fn hard(s: &str) -> String {
    format!("{HARD_OPEN}{s}{HARD_CLOSE}")
}

/// Mark a name: may be lower-cased, never typo'd or dropped.
pub(crate) fn soft(s: &str) -> String {
    format!("{SOFT_OPEN}{s}{SOFT_CLOSE}")
}

#[derive(Clone, Copy, PartialEq)]
enum Span {
    Free,
    Soft,
    Hard,
}

/// Apply `f` to each span of `text` with the span's kind; markers are kept.
fn map_spans(text: &str, mut f: impl FnMut(&str, Span) -> String) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut cur = String::new();
    let mut kind = Span::Free;
    for c in text.chars() {
        match c {
            HARD_OPEN | SOFT_OPEN => {
                out.push_str(&f(&cur, kind));
                cur.clear();
                out.push(c);
                kind = if c == HARD_OPEN {
                    Span::Hard
                } else {
                    Span::Soft
                };
            }
            HARD_CLOSE | SOFT_CLOSE => {
                out.push_str(&f(&cur, kind));
                cur.clear();
                out.push(c);
                kind = Span::Free;
            }
            _ => cur.push(c),
        }
    }
    out.push_str(&f(&cur, kind));
    out
}

/// Remove the span markers and tidy whitespace.
pub(crate) fn unmark(text: &str) -> String {
    let s: String = text
        .chars()
        .filter(|c| !matches!(*c, HARD_OPEN | HARD_CLOSE | SOFT_OPEN | SOFT_CLOSE))
        .collect();
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    s.replace(" ,", ",")
        .replace(" .", ".")
        .replace(" ?", "?")
        .replace(",,", ",")
}

/// Lower-case everything but identifiers.
pub(crate) fn lowercase(text: &str) -> String {
    map_spans(text, |s, k| {
        if k == Span::Hard {
            s.to_string()
        } else {
            s.to_lowercase()
        }
    })
}

/// Drop most articles from the free text ("cancel the order" → "cancel order").
pub(crate) fn drop_articles(text: &str, rng: &mut ChaCha8Rng) -> String {
    map_spans(text, |s, k| {
        if k != Span::Free {
            return s.to_string();
        }
        let mut out = String::with_capacity(s.len());
        for (i, w) in s.split(' ').enumerate() {
            if matches!(w, "the" | "The" | "a" | "A" | "an" | "An") && rng.random_bool(0.8) {
                continue;
            }
            if i > 0 && !out.is_empty() {
                out.push(' ');
            }
            out.push_str(w);
        }
        if s.starts_with(' ') && !out.starts_with(' ') {
            out.insert(0, ' ');
        }
        if s.ends_with(' ') && !out.ends_with(' ') {
            out.push(' ');
        }
        out
    })
}

/// Words typos never touch: they carry the user's yes/no and stop decisions.
const NO_TYPO: &[&str] = &[
    "yes", "yeah", "okay", "sure", "ahead", "proceed", "fine", "please", "wait", "right",
    "correct", "confirm", "alright", "sounds", "good", "forget", "never", "mind", "nope",
    "transfer",
];

const KEYBOARD_ROWS: [&str; 3] = ["qwertyuiop", "asdfghjkl", "zxcvbnm"];

fn neighbour(c: char, rng: &mut ChaCha8Rng) -> char {
    for row in KEYBOARD_ROWS {
        if let Some(i) = row.find(c) {
            let b = row.as_bytes();
            let j = if i == 0 {
                1
            } else if i + 1 == b.len() || rng.random_bool(0.5) {
                i - 1
            } else {
                i + 1
            };
            return b[j] as char;
        }
    }
    c
}

/// Character-level typos in ~`rate` of the longer free words, and most apostrophes dropped.
pub(crate) fn typos(text: &str, rate: f64, rng: &mut ChaCha8Rng) -> String {
    map_spans(text, |s, k| {
        if k != Span::Free {
            return s.to_string();
        }
        let mut out = String::with_capacity(s.len() + 4);
        let mut word = String::new();
        let flush = |word: &mut String, out: &mut String, rng: &mut ChaCha8Rng| {
            if word.is_empty() {
                return;
            }
            let mut w = std::mem::take(word);
            if w.contains('\'') && rng.random_bool(0.8) {
                w = w.replace('\'', "");
            }
            let lw = w.to_lowercase();
            let letters: Vec<char> = w.chars().collect();
            if letters.len() >= 4
                && letters.iter().all(|c| c.is_ascii_alphabetic())
                && !NO_TYPO.contains(&lw.as_str())
                && rng.random_bool(rate)
            {
                let mut cs = letters;
                let i = rng.random_range(1..cs.len() - 1);
                match rng.random_range(0..4u8) {
                    0 => cs.swap(i, i + 1),
                    1 => {
                        cs.remove(i);
                    }
                    2 => {
                        let c = cs[i];
                        cs.insert(i, c);
                    }
                    _ => {
                        let c = cs[i].to_ascii_lowercase();
                        cs[i] = neighbour(c, rng);
                    }
                }
                w = cs.into_iter().collect();
            }
            out.push_str(&w);
        };
        for c in s.chars() {
            if c.is_alphanumeric() || c == '\'' {
                word.push(c);
            } else {
                flush(&mut word, &mut out, rng);
                out.push(c);
            }
        }
        flush(&mut word, &mut out, rng);
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn axis_names_normalise_and_resolve_synonyms() {
        assert_eq!(
            normalize_axis_name("  Incremental - Disclosure "),
            "incremental_disclosure"
        );
        assert_eq!(Axis::parse("Terse"), Some(Axis::Terse));
        assert_eq!(Axis::parse("concise"), Some(Axis::Terse));
        assert_eq!(Axis::parse("Distrustful"), Some(Axis::Skeptical));
        assert_eq!(Axis::parse("impatient angry"), Some(Axis::Frustrated));
        assert_eq!(Axis::parse("angry"), Some(Axis::Frustrated));
        assert_eq!(Axis::parse("vague"), Some(Axis::Ambiguous));
        assert_eq!(Axis::parse("very terse"), Some(Axis::Terse));
        assert_eq!(
            Axis::parse("incremental disclosure"),
            Some(Axis::IncrementalDisclosure)
        );
        assert_eq!(Axis::parse("cooperative"), None);
        assert_eq!(Axis::parse("terse_and_polite"), None);
        assert_eq!(Axis::parse("not terse"), None);
        assert_eq!(Axis::parse("Types in all lowercase"), Some(Axis::Lowercase));
        assert_eq!(Axis::parse("Short, terse replies"), Some(Axis::Terse));
        assert_eq!(
            normalize_axis_name("Skeptical/Distrustful!"),
            "skeptical_distrustful"
        );
        assert_eq!(Axis::parse("Skeptical/Distrustful!"), Some(Axis::Skeptical));
        for (i, a) in Axis::ALL.iter().enumerate() {
            assert_eq!(a.name(), KNOWN_AXES[i].0);
            assert_eq!(Axis::parse(a.name()), Some(*a));
        }
    }

    #[test]
    fn placement_values() {
        let axes: Map<String, Value> = serde_json::from_str(
            r#"{"terse": true, "skeptical": "yes", "frustrated": 0.2, "Vague": 1, "mystery": true}"#,
        )
        .unwrap();
        let s = Style::from_axes(&axes);
        assert!(s.terse && s.skeptical && !s.frustrated && s.ambiguous && !s.easy);
        assert!(Style::from_axes(&Map::new()).easy);
    }

    #[test]
    fn transforms_keep_protected_spans() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let t = format!(
            "I Need The order {} for {} please, don't wait",
            hard("#W1234567"),
            soft("Yusuf Rossi")
        );
        assert_eq!(
            unmark(&lowercase(&t)),
            "i need the order #W1234567 for yusuf rossi please, don't wait"
        );
        for _ in 0..50 {
            let x = unmark(&typos(&t, 1.0, &mut rng));
            assert!(
                x.contains("#W1234567") && x.contains("Yusuf Rossi") && x.contains("please"),
                "{x}"
            );
            let y = unmark(&drop_articles(&t, &mut rng));
            assert!(y.contains("#W1234567") && y.contains("order #W"), "{y}");
        }
    }
}
