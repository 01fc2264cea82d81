//! Behavioural fingerprints: 19 features of a dialogue's user turns, in four dimensions
//! (D1 communication style, D2 information disclosure, D3 clarification, D4 error reaction).
//!
//! Two feature sets exist, both defined as data in `fitness/*.banks` and compiled once:
//! - [`FeatureSet::Ppol011`] (default) reproduces the reference package ppol 0.1.1 exactly,
//!   quirks included (parity ≤ 1e-9 with its own outputs);
//! - [`FeatureSet::V2`] fixes the reference's validity problems (curly apostrophes, ALL-CAPS words
//!   as identifiers, the dead `100%` pattern, double counting, ...); see `fitness/v2.banks`.
//!
//! Matching follows Python `re` semantics where they differ from Rust's `regex`: `$` means "end of
//! text or before a final newline", `\w` in word tokens is Python's `str.isalnum() or '_'`.

use std::collections::HashMap;
use std::sync::OnceLock;

use rayon::prelude::*;
use regex::{Regex, RegexSet};
use serde::{Deserialize, Serialize};

use crate::dialogue::Dialogue;
use crate::{Error, Result};

/// Number of features.
pub const N_FEATURES: usize = 19;

/// Feature names in column order (the reference's `ALL_FEATURES`).
pub const FEATURE_NAMES: [&str; N_FEATURES] = [
    "words_per_turn",
    "short_utterance_rate",
    "politeness_rate",
    "formality_rate",
    "acknowledgment_rate",
    "verbosity_cv",
    "repetition_rate",
    "identity_confusion_rate",
    "front_loading_ratio",
    "identifiers_per_turn",
    "opening_length",
    "uncertainty_rate",
    "certainty_rate",
    "pushback_rate",
    "clarification_question_rate",
    "info_seeking_rate",
    "emotional_expression_rate",
    "accusatory_rate",
    "strategy_pivot_rate",
];

/// The four Sim2Real dimensions and their feature columns.
pub const DIMENSIONS: [(&str, std::ops::Range<usize>); 4] =
    [("D1", 0..8), ("D2", 8..11), ("D3", 11..16), ("D4", 16..19)];

/// Column index of a feature name.
pub fn feature_index(name: &str) -> Option<usize> {
    FEATURE_NAMES.iter().position(|n| *n == name)
}

/// A versioned feature set.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
pub enum FeatureSet {
    /// The reference ppol 0.1.1 features, verbatim (default).
    #[default]
    #[serde(rename = "ppol-0.1.1")]
    Ppol011,
    /// Fixed features (opt-in).
    #[serde(rename = "v2")]
    V2,
}

impl FeatureSet {
    /// All feature sets.
    pub const ALL: [FeatureSet; 2] = [FeatureSet::Ppol011, FeatureSet::V2];

    /// The version string recorded in artefacts.
    pub fn name(self) -> &'static str {
        match self {
            FeatureSet::Ppol011 => "ppol-0.1.1",
            FeatureSet::V2 => "v2",
        }
    }

    /// Parse a version string.
    pub fn parse(s: &str) -> Result<FeatureSet> {
        match s {
            "ppol-0.1.1" | "ppol_0.1.1" | "0.1.1" | "default" => Ok(FeatureSet::Ppol011),
            "v2" => Ok(FeatureSet::V2),
            other => Err(Error::config(
                "feature-set",
                format!("unknown feature set '{other}' (expected 'ppol-0.1.1' or 'v2')"),
            )),
        }
    }

    /// The banks file that defines this set: its path in the repository and its text (the
    /// run log records the text's SHA-256).
    pub fn banks(self) -> (&'static str, &'static str) {
        match self {
            FeatureSet::Ppol011 => (
                "fitness/ppol-0.1.1.banks",
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/fitness/ppol-0.1.1.banks"
                )),
            ),
            FeatureSet::V2 => (
                "fitness/v2.banks",
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/fitness/v2.banks")),
            ),
        }
    }

    /// Compile the set's patterns now instead of on first use (once per process), so a caller
    /// can overlap the compilation with other work, such as loading the traces.
    pub fn compile(self) {
        self.compiled();
    }

    fn compiled(self) -> &'static Compiled {
        static SETS: [OnceLock<Compiled>; 2] = [OnceLock::new(), OnceLock::new()];
        let idx = self as usize;
        SETS[idx].get_or_init(|| {
            let (path, text) = self.banks();
            Compiled::parse(path, text)
                .unwrap_or_else(|e| panic!("built-in feature set {path} is invalid: {e}"))
        })
    }
}

impl std::fmt::Display for FeatureSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for FeatureSet {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        FeatureSet::parse(s)
    }
}

/// The 19 feature values of one dialogue, in [`FEATURE_NAMES`] order.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Fingerprint(pub [f64; N_FEATURES]);

impl Fingerprint {
    /// Value of a feature by name.
    pub fn get(&self, name: &str) -> Option<f64> {
        feature_index(name).map(|i| self.0[i])
    }

    /// The values as a slice.
    pub fn values(&self) -> &[f64] {
        &self.0
    }

    /// `{name: value}` in column order.
    pub fn to_map(&self) -> serde_json::Map<String, serde_json::Value> {
        FEATURE_NAMES
            .iter()
            .zip(self.0.iter())
            .map(|(n, v)| (n.to_string(), serde_json::json!(v)))
            .collect()
    }

    /// Build from a `{name: value}` object; missing features read as 0 (as the reference does),
    /// unknown names and non-numbers are errors.
    pub fn from_map(
        map: &serde_json::Map<String, serde_json::Value>,
    ) -> std::result::Result<Self, String> {
        let mut out = [0.0; N_FEATURES];
        for (k, v) in map {
            let i = feature_index(k).ok_or_else(|| format!("unknown feature '{k}'"))?;
            out[i] = v
                .as_f64()
                .ok_or_else(|| format!("feature '{k}' is not a number: {v}"))?;
        }
        Ok(Fingerprint(out))
    }
}

/// Fingerprint one dialogue (its user turns only).
pub fn fingerprint(dialogue: &Dialogue, set: FeatureSet) -> Fingerprint {
    fingerprint_user_texts(dialogue.user_texts(), set)
}

/// Fingerprint many dialogues in parallel, preserving order.
pub fn fingerprint_many(dialogues: &[Dialogue], set: FeatureSet) -> Vec<Fingerprint> {
    let compiled = set.compiled();
    dialogues
        .par_iter()
        .map(|d| compiled.fingerprint(d.user_texts()))
        .collect()
}

/// Fingerprint a sequence of user-turn texts.
pub fn fingerprint_user_texts<'a>(
    texts: impl IntoIterator<Item = &'a str>,
    set: FeatureSet,
) -> Fingerprint {
    set.compiled().fingerprint(texts)
}

/// Per-feature share of user turns matched, for rate features only: which bank features exist.
pub fn rate_feature_names(set: FeatureSet) -> Vec<&'static str> {
    set.compiled()
        .rate_banks
        .iter()
        .map(|(i, _)| FEATURE_NAMES[*i])
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Compiled feature set

#[derive(Debug, Clone, Copy, PartialEq)]
enum FrontLoading {
    FirstTwoTurns,
    FirstTurn,
}

#[derive(Debug)]
struct Compiled {
    normalize_apostrophes: bool,
    /// `None` = Python's `\b\w+\b` (maximal runs of word characters), done by hand.
    token_re: Option<Regex>,
    drop_blank_turns: bool,
    front_loading: FrontLoading,
    repetition_min_count: u32,
    rate_banks: Vec<(usize, Regex)>,
    /// The rate banks again, as one set (pattern `k` is bank `k`): one pass per ASCII turn
    /// instead of one per bank. A set cannot use the bounded backtracker, so turns with other
    /// characters (where `\b` makes the DFA give up) go bank by bank; the matches are the same.
    rate_set: RegexSet,
    ack: Regex,
    ident: Regex,
    ident_keep_digit_or_at: bool,
}

struct Bank {
    feature: usize,
    modes: Vec<String>,
    patterns: Vec<String>,
    line: usize,
}

impl Compiled {
    fn parse(path: &str, text: &str) -> Result<Compiled> {
        let mut options: HashMap<String, String> = HashMap::new();
        let mut banks: Vec<Bank> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let lineno = i + 1;
            let line = raw.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with("--") {
                continue;
            }
            let err = |m: String| Error::parse(path, format!("line {lineno}"), m);
            if let Some(rest) = line.strip_prefix('@') {
                let (k, v) = rest
                    .split_once(' ')
                    .ok_or_else(|| err(format!("option '{line}' has no value")))?;
                options.insert(k.to_string(), v.trim().to_string());
            } else if line.starts_with('[') && line.ends_with(']') && !line.contains('\\') {
                let inner = &line[1..line.len() - 1];
                let mut parts = inner.split_whitespace();
                let name = parts.next().unwrap_or("");
                let feature = feature_index(name)
                    .ok_or_else(|| err(format!("unknown feature '{name}' in bank header")))?;
                banks.push(Bank {
                    feature,
                    modes: parts.map(str::to_string).collect(),
                    patterns: Vec::new(),
                    line: lineno,
                });
            } else {
                let bank = banks
                    .last_mut()
                    .ok_or_else(|| err("pattern before any [bank] header".into()))?;
                bank.patterns.push(line.to_string());
            }
        }
        let opt = |k: &str| -> Result<&str> {
            options
                .get(k)
                .map(String::as_str)
                .ok_or_else(|| Error::parse(path, "options", format!("missing option '@{k}'")))
        };
        let bad =
            |k: &str, v: &str| Error::parse(path, format!("@{k}"), format!("invalid value '{v}'"));
        let normalize_apostrophes = match opt("apostrophes")? {
            "keep" => false,
            "normalize" => true,
            v => return Err(bad("apostrophes", v)),
        };
        let token_re = match opt("tokens")? {
            r"\b\w+\b" => None,
            other => Some(compile(path, "@tokens", other)?),
        };
        let drop_blank_turns = match opt("blank-turns")? {
            "keep" => false,
            "drop" => true,
            v => return Err(bad("blank-turns", v)),
        };
        let front_loading = match opt("front-loading")? {
            "first-two-turns" => FrontLoading::FirstTwoTurns,
            "first-turn" => FrontLoading::FirstTurn,
            v => return Err(bad("front-loading", v)),
        };
        let rep = opt("repetition-min-count")?;
        let repetition_min_count = rep.parse().map_err(|_| bad("repetition-min-count", rep))?;

        let mut rate_banks = Vec::new();
        let mut rate_patterns = Vec::new();
        let mut ack = None;
        let mut ident = None;
        let mut ident_keep_digit_or_at = false;
        for bank in &banks {
            let loc = format!(
                "bank [{}] at line {}",
                FEATURE_NAMES[bank.feature], bank.line
            );
            if bank.patterns.is_empty() {
                return Err(Error::parse(path, loc, "bank has no patterns"));
            }
            let alternation = bank
                .patterns
                .iter()
                .map(|p| format!("(?:{})", python_to_rust(p)))
                .collect::<Vec<_>>()
                .join("|");
            let modes: Vec<&str> = bank.modes.iter().map(String::as_str).collect();
            match modes.as_slice() {
                [] | ["search"] => {
                    rate_banks.push((bank.feature, compile(path, &loc, &alternation)?));
                    rate_patterns.push(alternation);
                }
                ["fullmatch"] => {
                    ack = Some(compile(path, &loc, &format!(r"\A(?:{alternation})\z"))?)
                }
                ["findall"] => ident = Some(compile(path, &loc, &alternation)?),
                ["findall", "keep-digit-or-at"] => {
                    ident = Some(compile(path, &loc, &alternation)?);
                    ident_keep_digit_or_at = true;
                }
                other => {
                    return Err(Error::parse(
                        path,
                        loc,
                        format!("unknown bank modes {other:?}"),
                    ))
                }
            }
        }
        let ack_idx = feature_index("acknowledgment_rate").expect("known feature");
        let ident_idx = feature_index("identifiers_per_turn").expect("known feature");
        if banks.iter().filter(|b| b.feature == ack_idx).count() != 1
            || banks.iter().filter(|b| b.feature == ident_idx).count() != 1
        {
            return Err(Error::parse(
                path,
                "banks",
                "exactly one acknowledgment_rate (fullmatch) and one identifiers_per_turn (findall) bank are required",
            ));
        }
        Ok(Compiled {
            normalize_apostrophes,
            token_re,
            drop_blank_turns,
            front_loading,
            repetition_min_count,
            rate_banks,
            rate_set: regex::RegexSetBuilder::new(&rate_patterns)
                .size_limit(64 << 20)
                .dfa_size_limit(64 << 20)
                .build()
                .map_err(|e| Error::parse(path, "banks", format!("invalid regex set: {e}")))?,
            ack: ack.ok_or_else(|| {
                Error::parse(path, "banks", "acknowledgment_rate must be fullmatch")
            })?,
            ident: ident.ok_or_else(|| {
                Error::parse(path, "banks", "identifiers_per_turn must be findall")
            })?,
            ident_keep_digit_or_at,
        })
    }

    fn fingerprint<'a>(&self, texts: impl IntoIterator<Item = &'a str>) -> Fingerprint {
        // Turn selection (reference: truthy content; v2 also drops whitespace-only turns).
        let mut originals: Vec<std::borrow::Cow<'a, str>> = Vec::new();
        for t in texts {
            if t.is_empty() || (self.drop_blank_turns && t.trim().is_empty()) {
                continue;
            }
            originals.push(if self.normalize_apostrophes && t.contains(APOSTROPHES) {
                std::borrow::Cow::Owned(t.replace(APOSTROPHES, "'"))
            } else {
                std::borrow::Cow::Borrowed(t)
            });
        }
        let n = originals.len();
        let mut f = [0.0f64; N_FEATURES];
        if n == 0 {
            return Fingerprint(f);
        }
        let lowered: Vec<String> = originals.iter().map(|t| t.to_lowercase()).collect();
        let tokens: Vec<Vec<&str>> = lowered.iter().map(|t| self.tokens(t)).collect();
        let lens: Vec<f64> = tokens.iter().map(|t| t.len() as f64).collect();
        let nf = n as f64;
        let total: f64 = lens.iter().sum();
        let mean = total / nf;

        f[0] = mean;
        f[1] = lens.iter().filter(|&&l| l <= 3.0).count() as f64 / nf;
        f[4] = lowered
            .iter()
            .filter(|t| self.ack.is_match(python_strip(t)))
            .count() as f64
            / nf;
        f[5] = if n < 2 || mean == 0.0 {
            0.0
        } else {
            let var = lens.iter().map(|l| (l - mean) * (l - mean)).sum::<f64>() / nf;
            var.sqrt() / mean
        };
        f[6] = self.repetition_rate(&tokens);
        f[8] = if total <= 0.0 {
            0.0
        } else if n == 1 {
            1.0
        } else {
            match self.front_loading {
                FrontLoading::FirstTwoTurns => (lens[0] + lens[1]) / total,
                FrontLoading::FirstTurn => lens[0] / total,
            }
        };
        f[9] = originals
            .iter()
            .map(|t| self.count_identifiers(t))
            .sum::<usize>() as f64
            / nf;
        f[10] = lens[0];
        let mut hits = vec![0usize; self.rate_banks.len()];
        for t in &lowered {
            if t.is_ascii() {
                for k in self.rate_set.matches(t).iter() {
                    hits[k] += 1;
                }
            } else {
                for (k, (_, re)) in self.rate_banks.iter().enumerate() {
                    hits[k] += usize::from(re.is_match(t));
                }
            }
        }
        for ((idx, _), n) in self.rate_banks.iter().zip(hits) {
            f[*idx] = n as f64 / nf;
        }
        Fingerprint(f)
    }

    fn tokens<'t>(&self, text: &'t str) -> Vec<&'t str> {
        match &self.token_re {
            Some(re) => re.find_iter(text).map(|m| m.as_str()).collect(),
            None => python_word_runs(text),
        }
    }

    fn repetition_rate(&self, tokens: &[Vec<&str>]) -> f64 {
        let windows = tokens.iter().map(|t| t.len().saturating_sub(2)).sum();
        let mut counts: HashMap<(&str, &str, &str), u32, TrigramHash> =
            HashMap::with_capacity_and_hasher(windows, TrigramHash::default());
        for turn in tokens {
            for w in turn.windows(3) {
                *counts.entry((w[0], w[1], w[2])).or_insert(0) += 1;
            }
        }
        let min = self.repetition_min_count;
        if !counts.values().any(|&c| c >= min) {
            return 0.0;
        }
        let hit = tokens
            .iter()
            .filter(|turn| turn.windows(3).any(|w| counts[&(w[0], w[1], w[2])] >= min))
            .count();
        hit as f64 / tokens.len() as f64
    }

    fn count_identifiers(&self, text: &str) -> usize {
        if self.ident_keep_digit_or_at {
            self.ident
                .find_iter(text)
                .filter(|m| m.as_str().chars().any(|c| c.is_ascii_digit() || c == '@'))
                .count()
        } else {
            self.ident.find_iter(text).count()
        }
    }
}

/// The hasher of the trigram counts in `repetition_rate`: the multiply-rotate hash of rustc
/// (FxHash), several times faster than SipHash on short words. The counts, and so the feature,
/// do not depend on the hasher; only the speed does.
type TrigramHash = std::hash::BuildHasherDefault<FxHasher>;

#[derive(Default)]
struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        // The table indexes by the low bits, which the multiply leaves weak: bring high bits down.
        self.0.rotate_left(26)
    }
}

/// Apostrophe look-alikes that v2 reads as `'`.
const APOSTROPHES: [char; 4] = ['\u{2019}', '\u{2018}', '\u{02BC}', '\u{2032}'];

/// Python's `str.isalnum() or == '_'` (the `\w` of `re` on str patterns), approximated by Rust's
/// `char::is_alphanumeric`; they differ only on a few combining marks of Indic scripts.
fn is_python_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Matches of `\b\w+\b`: maximal runs of word characters.
fn python_word_runs(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    for (i, c) in text.char_indices() {
        if is_python_word(c) {
            if start.is_none() {
                start = Some(i);
            }
        } else if let Some(s) = start.take() {
            out.push(&text[s..i]);
        }
    }
    if let Some(s) = start {
        out.push(&text[s..]);
    }
    out
}

/// Python's `str.strip()`: Unicode whitespace plus the ASCII separators U+001C..U+001F.
fn python_strip(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

/// Translate a Python `re` pattern to Rust `regex` syntax where their meanings differ:
/// an unescaped `$` outside a character class becomes "optional final newline, then end".
fn python_to_rust(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                out.push(c);
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push(c);
                // a ']' right after '[' or '[^' is literal
                if chars.peek() == Some(&'^') {
                    out.push(chars.next().unwrap());
                }
                if chars.peek() == Some(&']') {
                    out.push_str(r"\]");
                    chars.next();
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            '$' if !in_class => out.push_str(r"(?:\n?\z)"),
            _ => out.push(c),
        }
    }
    out
}

fn compile(path: &str, location: &str, pattern: &str) -> Result<Regex> {
    regex::RegexBuilder::new(pattern)
        .size_limit(64 << 20)
        .dfa_size_limit(64 << 20)
        .build()
        .map_err(|e| Error::parse(path, location, format!("invalid regex: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(turns: &[&str]) -> Fingerprint {
        fingerprint_user_texts(turns.iter().copied(), FeatureSet::Ppol011)
    }

    fn fp2(turns: &[&str]) -> Fingerprint {
        fingerprint_user_texts(turns.iter().copied(), FeatureSet::V2)
    }

    #[test]
    fn both_sets_compile_with_all_banks() {
        for set in FeatureSet::ALL {
            let c = set.compiled();
            assert_eq!(c.rate_banks.len(), 11, "{set}");
        }
    }

    #[test]
    fn no_user_turns_is_all_zero() {
        assert_eq!(fp(&[]), Fingerprint::default());
        assert_eq!(fp(&[""]), Fingerprint::default());
    }

    #[test]
    fn whitespace_turn_kept_in_reference_dropped_in_v2() {
        let f = fp(&["hello there my friend", "   "]);
        assert_eq!(f.get("words_per_turn"), Some(2.0));
        assert_eq!(f.get("short_utterance_rate"), Some(0.5));
        let g = fp2(&["hello there my friend", "   "]);
        assert_eq!(g.get("words_per_turn"), Some(4.0));
        assert_eq!(g.get("short_utterance_rate"), Some(0.0));
    }

    #[test]
    fn tokens_split_apostrophes_and_keep_numbers() {
        let f = fp(&["Don't cancel #W2378156"]);
        assert_eq!(f.get("words_per_turn"), Some(4.0));
        assert_eq!(
            fp2(&["Don't cancel #W2378156"]).get("words_per_turn"),
            Some(3.0)
        );
    }

    #[test]
    fn acknowledgement_is_a_full_match() {
        let f = fp(&[
            "ok",
            "Ok.",
            "thanks!!",
            "  Yes ",
            "ok thanks",
            "ok?",
            "yes please",
            "fine,,",
        ]);
        assert_eq!(f.get("acknowledgment_rate"), Some(5.0 / 8.0));
        let g = fp2(&["ok thanks", "yes, perfect.", "ok?"]);
        assert_eq!(g.get("acknowledgment_rate"), Some(2.0 / 3.0));
    }

    #[test]
    fn curly_apostrophe_blind_spot_and_its_fix() {
        assert_eq!(
            fp(&["I’ve already told you"]).get("pushback_rate"),
            Some(0.0)
        );
        assert_eq!(fp(&["i already told you"]).get("pushback_rate"), Some(1.0));
        assert_eq!(
            fp2(&["I’m sure. I already told you"]).get("pushback_rate"),
            Some(1.0)
        );
        assert_eq!(fp2(&["I’m sure"]).get("certainty_rate"), Some(1.0));
        assert_eq!(fp(&["I’m sure"]).get("certainty_rate"), Some(0.0));
    }

    #[test]
    fn dead_hundred_percent_pattern() {
        assert_eq!(fp(&["100% sure"]).get("certainty_rate"), Some(0.0));
        assert_eq!(fp(&["100%"]).get("certainty_rate"), Some(0.0));
        assert_eq!(fp(&["100%sure"]).get("certainty_rate"), Some(1.0));
        assert_eq!(fp2(&["100% sure"]).get("certainty_rate"), Some(1.0));
    }

    #[test]
    fn dollar_matches_before_final_newline() {
        assert_eq!(
            fp(&["i don't know what\n"]).get("clarification_question_rate"),
            Some(1.0)
        );
        assert_eq!(
            fp(&["what\n\n"]).get("clarification_question_rate"),
            Some(0.0)
        );
        assert_eq!(
            fp(&["so sorry"]).get("clarification_question_rate"),
            Some(1.0)
        );
        assert_eq!(fp(&["so sorry"]).get("politeness_rate"), Some(1.0));
        assert_eq!(
            fp2(&["so sorry"]).get("clarification_question_rate"),
            Some(0.0)
        );
        assert_eq!(
            fp2(&["sorry?"]).get("clarification_question_rate"),
            Some(1.0)
        );
    }

    #[test]
    fn identifiers_quirks() {
        // three identifiers: CANCEL, SUBSCRIPTION and an 11-digit number
        let f = fp(&["CANCEL my SUBSCRIPTION 12345678901 now"]);
        assert_eq!(f.get("identifiers_per_turn"), Some(3.0));
        assert_eq!(
            fp(&["zip 19122 and 123456"]).get("identifiers_per_turn"),
            Some(1.0)
        );
        assert_eq!(
            fp(&["order #w2378156"]).get("identifiers_per_turn"),
            Some(1.0)
        );
        let g = fp2(&["CANCEL my SUBSCRIPTION 12345678901, user mia_li_3668, jane@x.com"]);
        assert_eq!(g.get("identifiers_per_turn"), Some(3.0));
    }

    #[test]
    fn repetition_needs_four_occurrences() {
        let s = "i want a refund";
        let f = fp(&[s, s, s, s, "ok"]);
        assert_eq!(f.get("repetition_rate"), Some(0.8));
        let g = fp(&[s, s, s, "ok"]);
        assert_eq!(g.get("repetition_rate"), Some(0.0));
    }

    #[test]
    fn front_loading_two_turn_quirk_and_fix() {
        let f = fp(&["a b c d", "e"]);
        assert_eq!(f.get("front_loading_ratio"), Some(1.0));
        assert_eq!(fp2(&["a b c d", "e"]).get("front_loading_ratio"), Some(0.8));
        assert_eq!(
            fp(&["a b", "c", "d e f g h"]).get("front_loading_ratio"),
            Some(3.0 / 8.0)
        );
        assert_eq!(fp(&["x"]).get("front_loading_ratio"), Some(1.0));
        assert_eq!(fp(&["!!"]).get("front_loading_ratio"), Some(0.0));
    }

    #[test]
    fn verbosity_cv_is_population_std_over_mean() {
        let f = fp(&["a b", "a b c d"]);
        // lengths 2 and 4: mean 3, population std 1
        assert!((f.get("verbosity_cv").unwrap() - 1.0 / 3.0).abs() < 1e-15);
        assert_eq!(fp(&["a b"]).get("verbosity_cv"), Some(0.0));
    }

    #[test]
    fn documented_overlaps_of_the_reference() {
        let f = fp(&["forget it"]);
        assert_eq!(f.get("emotional_expression_rate"), Some(1.0));
        assert_eq!(f.get("strategy_pivot_rate"), Some(1.0));
        let g = fp2(&["forget it"]);
        assert_eq!(g.get("strategy_pivot_rate"), Some(0.0));
        assert_eq!(fp(&[";)"]).get("formality_rate"), Some(1.0));
        assert_eq!(fp(&["what exactly"]).get("certainty_rate"), Some(1.0));
        assert_eq!(
            fp(&["what exactly"]).get("clarification_question_rate"),
            Some(1.0)
        );
        assert_eq!(
            fp(&["somewhat about it"]).get("info_seeking_rate"),
            Some(1.0)
        );
        assert_eq!(
            fp2(&["somewhat about it"]).get("info_seeking_rate"),
            Some(0.0)
        );
        assert_eq!(fp(&["ly"]).get("accusatory_rate"), Some(1.0));
        assert_eq!(fp2(&["ly"]).get("accusatory_rate"), Some(0.0));
        assert_eq!(
            fp(&["I would be happy to"]).get("identity_confusion_rate"),
            Some(1.0)
        );
    }

    #[test]
    fn python_dollar_translation_respects_classes_and_escapes() {
        assert_eq!(python_to_rust(r"a$"), r"a(?:\n?\z)");
        assert_eq!(python_to_rust(r"a\$"), r"a\$");
        assert_eq!(python_to_rust(r"[$]"), r"[$]");
        assert_eq!(python_to_rust(r"[]$]x$"), r"[\]$]x(?:\n?\z)");
    }

    #[test]
    fn bank_file_errors_name_the_line() {
        let err =
            Compiled::parse("x.banks", "@feature-set t\n[no_such_feature]\nfoo\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "x.banks: line 2: unknown feature 'no_such_feature' in bank header"
        );
        let err = Compiled::parse("x.banks", "foo\n").unwrap_err();
        assert!(err
            .to_string()
            .contains("line 1: pattern before any [bank] header"));
    }
}
