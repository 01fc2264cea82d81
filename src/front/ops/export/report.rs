//! What an export reports: records and tokens per file, episodes skipped and why, bad calls
//! and argument conversions, and the warnings a training run would otherwise meet first.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::*;

/// Cutoffs trainers commonly use (TRL's `max_length` default is 1,024, LLaMA-Factory's
/// `cutoff_len` 2,048): the export warns when rows start their dialogue beyond them.
pub const COMMON_CUTOFFS: [usize; 4] = [1024, 2048, 4096, 8192];

/// OpenAI's minimum number of training examples for a fine-tuning job.
pub const OPENAI_MIN_EXAMPLES: usize = 10;

/// Token lengths of the training records (estimated; see
/// [`crate::simulate::export::estimate_tokens`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct TokenSummary {
    /// How the lengths were counted.
    pub method: String,
    /// Each training record's lengths, in file order.
    pub rows: Vec<RowTokens>,
    /// Median and maximum of the whole row.
    pub median_total: usize,
    /// See `median_total`.
    pub max_total: usize,
    /// Median and maximum of where the dialogue starts (system prompt + tool schemas).
    pub median_start: usize,
    /// See `median_start`.
    pub max_start: usize,
    /// The smallest cutoff, a multiple of 1,024, that holds every row with the estimate's
    /// margin: what to give TRL's `max_length` or LLaMA-Factory's `cutoff_len`.
    pub suggested_cutoff: usize,
}

impl TokenSummary {
    pub(super) fn of(rows: Vec<RowTokens>) -> TokenSummary {
        let median = |mut v: Vec<usize>| {
            v.sort_unstable();
            match v.len() {
                0 => 0,
                n if n % 2 == 1 => v[n / 2],
                n => (v[n / 2 - 1] + v[n / 2]).div_ceil(2),
            }
        };
        let totals: Vec<usize> = rows.iter().map(RowTokens::total).collect();
        let starts: Vec<usize> = rows.iter().map(RowTokens::start).collect();
        let max_total = totals.iter().copied().max().unwrap_or(0);
        let with_margin = (max_total as f64 * (1.0 + ESTIMATE_TOLERANCE)).ceil() as usize;
        TokenSummary {
            method: format!(
                "estimated (byte-level BPE pieces, within ±{:.0}% of SmolLM2's tokenizer on τ² retail)",
                ESTIMATE_TOLERANCE * 100.0
            ),
            median_total: median(totals),
            max_total,
            median_start: median(starts.clone()),
            max_start: starts.iter().copied().max().unwrap_or(0),
            suggested_cutoff: with_margin.div_ceil(1024).max(1) * 1024,
            rows,
        }
    }

    /// What a trainer cut at a common cutoff would lose, and what to do about it; empty when
    /// every row fits the smallest common cutoff.
    pub(super) fn warnings(&self) -> Vec<String> {
        let n = self.rows.len();
        if n == 0 || self.max_total <= COMMON_CUTOFFS[0] {
            return Vec::new();
        }
        let mut out = Vec::new();
        let prompt_only: Vec<String> = COMMON_CUTOFFS
            .iter()
            .filter_map(|&c| {
                let k = self.rows.iter().filter(|r| r.start() >= c).count();
                (k > 0).then(|| format!("{k} of {n} at {c}"))
            })
            .collect();
        if !prompt_only.is_empty() {
            let med = |f: fn(&RowTokens) -> usize| {
                let mut v: Vec<usize> = self.rows.iter().map(f).collect();
                v.sort_unstable();
                v[v.len() / 2]
            };
            out.push(format!(
                "warning: the dialogue starts after ~{} tokens (median: system prompt ~{}, tool \
                 schemas ~{}): a trainer that cuts rows there trains on the prompt only ({}; TRL's \
                 max_length defaults to 1024, LLaMA-Factory's cutoff_len to 2048)",
                self.median_start,
                med(|r| r.system),
                med(|r| r.tools),
                prompt_only.join(", ")
            ));
        }
        let cut: Vec<String> = COMMON_CUTOFFS
            .iter()
            .filter_map(|&c| {
                let k = self.rows.iter().filter(|r| r.total() > c).count();
                (k > 0).then(|| format!("{k} of {n} at {c}"))
            })
            .collect();
        out.push(format!(
            "warning: rows are longer than common cutoffs and would be truncated ({}); set the \
             trainer's cutoff to at least {} (TRL SFTConfig(max_length=...), LLaMA-Factory \
             cutoff_len), replace the policy with a compact one (--system-prompt FILE), or \
             leave long rows out (--max-tokens N)",
            cut.join(", "),
            self.suggested_cutoff
        ));
        out
    }
}

/// Why a selected episode was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipKind {
    /// Its turns do not fit together (a tool result without its call, a call without its
    /// result, no agent message): skipped in every format.
    Malformed,
    /// Its bad calls leave nothing to train on under `--bad-calls`.
    BadCall,
    /// The format cannot hold it (LLaMA-Factory's alternation).
    Format,
    /// Longer than `--max-tokens`.
    TooLong,
}

/// A selected episode that was not exported.
#[derive(Debug, Clone, Serialize)]
pub struct SkippedEpisode {
    /// The episode.
    pub episode_id: String,
    /// The file it came from.
    pub file: PathBuf,
    /// Why it was skipped.
    pub reason: String,
    /// The kind of reason.
    pub kind: SkipKind,
}

/// A call the agent got wrong, in an exported or skipped episode.
#[derive(Debug, Clone, Serialize)]
pub struct BadCallNote {
    /// The episode.
    pub episode_id: String,
    /// The file it came from.
    pub file: PathBuf,
    /// The tool it called.
    pub tool: String,
    /// Why it is bad.
    pub kind: BadCallKind,
    /// The details.
    pub detail: String,
}

/// Argument values converted the same way, counted.
#[derive(Debug, Clone, Serialize)]
pub struct ConversionCount {
    /// The tool, the argument's path (`order_id`, `items[].id`), the kinds before and after
    /// and why: `schema` (the tool's schema declares it) or `one_type_per_path` (the file held
    /// two kinds at that path).
    #[serde(flatten)]
    pub conversion: Conversion,
    /// How many values.
    pub count: usize,
}

/// Training records and a summary.
#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    /// Records for training.
    pub train: Vec<serde_json::Value>,
    /// Records of held-out personas.
    pub heldout: Vec<serde_json::Value>,
    /// Held-out persona ids (of the exported records).
    pub heldout_personas: Vec<String>,
    /// Episodes read.
    pub n_episodes: usize,
    /// pass^k and success per persona cluster.
    pub clusters: Vec<crate::simulate::export::ClusterSummary>,
    /// Selected episodes left out, with the reason: malformed ones (in every format), bad calls
    /// that leave nothing to train on, what the format cannot hold (`llamafactory`: its turn
    /// alternation), rows over `max_tokens`.
    pub skipped: Vec<SkippedEpisode>,
    /// The bad-call policy applied (`cut`, `drop-call`, `drop-episode`, `keep`).
    pub bad_call_policy: String,
    /// Every call the agent got wrong in the selected episodes.
    pub bad_calls: Vec<BadCallNote>,
    /// Argument values converted so every argument has one type in the file.
    pub conversions: Vec<ConversionCount>,
    /// Agent texts written beside tool calls, dropped because the format has no place for
    /// them (`llamafactory`).
    pub dropped_texts: usize,
    /// Files written: the training file, then the held-out file.
    pub written: Vec<PathBuf>,
    /// `llamafactory` with an output: each dataset name and the `dataset_info.json` that
    /// describes it.
    pub datasets: BTreeMap<String, PathBuf>,
    /// What was not written, and why (an output that is not a regular file gets no held-out
    /// file and no `dataset_info.json` beside it).
    pub notes: Vec<String>,
    /// The layout version written.
    pub format_version: u32,
    /// Token lengths of the training records.
    pub tokens: TokenSummary,
    /// What a trainer would hit with these records: rows longer than common cutoffs, fewer
    /// examples than OpenAI's minimum.
    pub warnings: Vec<String>,
}

impl ExportReport {
    /// The skipped episodes counted by reason, most frequent first
    /// (`"2 the user spoke twice in a row, 1 a tool call has no result"`); `None` when none was.
    pub fn skipped_by_reason(&self) -> Option<String> {
        self.skipped_of(&[
            SkipKind::Malformed,
            SkipKind::BadCall,
            SkipKind::Format,
            SkipKind::TooLong,
        ])
    }

    /// [`ExportReport::skipped_by_reason`] of the skips of these kinds.
    pub fn skipped_of(&self, kinds: &[SkipKind]) -> Option<String> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for s in self.skipped.iter().filter(|s| kinds.contains(&s.kind)) {
            *counts.entry(s.reason.as_str()).or_default() += 1;
        }
        let mut counts: Vec<(&str, usize)> = counts.into_iter().collect();
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        (!counts.is_empty()).then(|| {
            counts
                .iter()
                .map(|(why, n)| format!("{n} {why}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
    }
}

/// Conversions counted by (tool, path, from, to, rule), most frequent first.
pub(super) fn count_conversions(conversions: Vec<Conversion>) -> Vec<ConversionCount> {
    let mut counts: BTreeMap<Conversion, usize> = BTreeMap::new();
    for c in conversions {
        *counts.entry(c).or_default() += 1;
    }
    let mut out: Vec<ConversionCount> = counts
        .into_iter()
        .map(|(conversion, count)| ConversionCount { conversion, count })
        .collect();
    out.sort_by_key(|c| std::cmp::Reverse(c.count));
    out
}

/// `n thing` or `n things`.
fn count(n: usize, thing: &str) -> String {
    format!("{n} {thing}{}", if n == 1 { "" } else { "s" })
}

/// Up to three episodes, named with their files.
fn some_episodes<'a>(eps: impl Iterator<Item = (&'a str, &'a Path)>) -> String {
    let all: Vec<(&str, &Path)> = eps.collect();
    let mut named: Vec<String> = Vec::new();
    for (id, file) in &all {
        let n = format!("'{id}' of {}", file.display());
        if !named.contains(&n) {
            named.push(n);
        }
    }
    let more = named.len().saturating_sub(3);
    named.truncate(3);
    let mut text = named.join(", ");
    if more > 0 {
        text += &format!(" and {more} more");
    }
    text
}

/// Warnings about what the rows are made of: bad calls and what was done with them, converted
/// argument values, episodes skipped because their turns do not fit together (one a reason).
pub(super) fn row_warnings(report: &ExportReport) -> Vec<String> {
    let mut out = Vec::new();
    if !report.bad_calls.is_empty() {
        let mut kinds: BTreeMap<BadCallKind, BTreeMap<&str, usize>> = BTreeMap::new();
        for b in &report.bad_calls {
            *kinds.entry(b.kind).or_default().entry(&b.tool).or_default() += 1;
        }
        let kinds: Vec<String> = kinds
            .iter()
            .map(|(k, tools)| {
                let n: usize = tools.values().sum();
                let tools: Vec<String> = tools.iter().map(|(t, n)| format!("{t} ×{n}")).collect();
                format!("{n} {} ({})", k.describe(), tools.join(", "))
            })
            .collect();
        let n_eps = report
            .bad_calls
            .iter()
            .map(|b| (&b.episode_id, &b.file))
            .collect::<BTreeSet<_>>()
            .len();
        let done = match report.bad_call_policy.as_str() {
            "drop-call" => "they and their results were taken out of their rows".to_string(),
            "drop-episode" => "their episodes were skipped".to_string(),
            "keep" => format!(
                "they stay in their rows as context (arguments that are not an object as \
                 {{\"{}\": text}}; weight 0 in ppol, openai and hf; llamafactory trains on them)",
                crate::simulate::export::RAW_ARGUMENTS_KEY
            ),
            _ => "each of those rows ends before the agent turn that made its first bad call, \
                  which is not a training target"
                .to_string(),
        };
        let skipped = report
            .skipped
            .iter()
            .filter(|s| s.kind == SkipKind::BadCall)
            .count();
        out.push(format!(
            "warning: the agent made {} in {}: {}; --bad-calls {}: {done}{} (in {}; first: {})",
            count(report.bad_calls.len(), "bad call"),
            count(n_eps, "episode"),
            kinds.join(", "),
            report.bad_call_policy,
            if skipped > 0 && report.bad_call_policy != "drop-episode" {
                format!(
                    "; {} had nothing left to train on and {} skipped",
                    count(skipped, "episode"),
                    if skipped == 1 { "was" } else { "were" }
                )
            } else {
                String::new()
            },
            some_episodes(
                report
                    .bad_calls
                    .iter()
                    .map(|b| (b.episode_id.as_str(), b.file.as_path()))
            ),
            report.bad_calls[0].detail
        ));
    }
    if !report.conversions.is_empty() {
        let n: usize = report.conversions.iter().map(|c| c.count).sum();
        let list: Vec<String> = report
            .conversions
            .iter()
            .map(
                |ConversionCount {
                     conversion: c,
                     count,
                 }| {
                    format!(
                        "{}.{}: {count} {} → {} ({})",
                        c.tool,
                        c.path,
                        c.from,
                        c.to,
                        match c.rule {
                            ConversionRule::Schema => "the tool's schema",
                            ConversionRule::OneTypePerPath => "two kinds at one path in the file",
                        }
                    )
                },
            )
            .collect();
        out.push(format!(
            "warning: converted {} so that every argument has one type in the file (Arrow, as \
             Hugging Face datasets reads it, allows one per path): {}",
            count(n, "argument value"),
            list.join("; ")
        ));
    }
    let mut reasons: BTreeMap<&str, Vec<&SkippedEpisode>> = BTreeMap::new();
    for s in report
        .skipped
        .iter()
        .filter(|s| s.kind == SkipKind::Malformed)
    {
        reasons.entry(&s.reason).or_default().push(s);
    }
    for (reason, eps) in reasons {
        out.push(format!(
            "warning: skipped {} in every format: {reason} ({})",
            count(eps.len(), "episode"),
            some_episodes(
                eps.iter()
                    .map(|s| (s.episode_id.as_str(), s.file.as_path()))
            )
        ));
    }
    out
}
