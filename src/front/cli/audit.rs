//! `ppol audit --human H CANDIDATES... [--feature-set ppol-0.1.1|v2] [--folds K] [--bootstrap B]
//! [--seed S] [--llm SPEC] [--json]`

use std::path::PathBuf;

use clap::Args;

use crate::fitness::audit::{self, AuditOptions, JudgeOptions, MIN_DIALOGUES};
use crate::fitness::features::FeatureSet;
use crate::front::cli::Outcome;
use crate::front::ops::{self, AuditRequest, TraceSource};
use crate::limits;

/// Arguments of `ppol audit`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct AuditArgs {
    /// Dialogues to audit, one row per file (episodes of `ppol episodes`, a run's
    /// `best/episodes.jsonl`, any trace file). Dialogues without user text are left out with a
    /// warning.
    #[arg(required = true)]
    pub candidates: Vec<PathBuf>,
    /// Human traces (repeatable).
    #[arg(long, required = true)]
    pub human: Vec<PathBuf>,
    /// Keep only human dialogues of this domain (τ-USI files mix airline and retail).
    #[arg(long)]
    pub human_domain: Option<String>,
    /// Feature set of the fingerprints: ppol-0.1.1 (default) or v2.
    #[arg(long)]
    pub feature_set: Option<FeatureSet>,
    /// Folds of the cross-validation, grouped by task, 2 to 100 (default 5; capped at the
    /// number of task groups).
    #[arg(long, default_value_t = AuditOptions::FOLDS, allow_negative_numbers = true,
          value_parser = super::count(2, limits::MAX_FOLDS))]
    pub folds: usize,
    /// Bootstrap resamples of the 95% interval, each refitting the cross-validation, 1 to
    /// 100,000 (default 200).
    #[arg(long, default_value_t = AuditOptions::BOOTSTRAP, allow_negative_numbers = true,
          value_parser = super::count(1, limits::MAX_BOOTSTRAP))]
    pub bootstrap: usize,
    /// Seed of the folds, the classifiers, the resamples and the judge's pairs (default 0).
    #[arg(long, default_value_t = AuditOptions::SEED, allow_negative_numbers = true,
          value_parser = super::seed())]
    pub seed: u64,
    /// The LLM judge's model (its `reflection` role): `offline` (no judge, the default),
    /// `openai:MODEL[@BASE_URL]`, a TOML LLM configuration, `scripted[:FILE]`.
    #[arg(long, default_value = AuditRequest::LLM)]
    pub llm: String,
    /// Pairs per condition shown to the judge, 0 to 10,000 (default 20; 0 = no judge).
    #[arg(long, default_value_t = JudgeOptions::PAIRS, allow_negative_numbers = true,
          value_parser = super::count(0, limits::MAX_JUDGE_PAIRS))]
    pub judge_pairs: usize,
    /// The judge's prompt: a text file with {user_a} and {user_b} where the two users' turns
    /// go (default: the shipped fitness/judge_prompt.md).
    #[arg(long)]
    pub judge_prompt: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

const AFTER_HELP: &str = "\
Each row: fresh classifiers (a random forest and a logistic regression) trained to tell the
humans from that file's dialogues, cross-validated with folds grouped by task; the held-out
AUC with a 95% bootstrap interval over task groups. 0.5 = indistinguishable, 1 = always told
apart. The control row is the humans against themselves in two halves by task: what
indistinguishable looks like with this many humans. A side with fewer than 10 dialogues or 2
task groups is marked 'too few' (exit 1); too few humans is an error (exit 2).";

/// Run `ppol audit`.
pub fn run(args: AuditArgs) -> anyhow::Result<Outcome> {
    debug_assert_eq!(MIN_DIALOGUES, 10, "the help text names the minimum");
    let req = AuditRequest {
        human: TraceSource::Files(args.human.clone()),
        human_domain: args.human_domain.clone(),
        candidates: args
            .candidates
            .iter()
            .map(|p| (p.display().to_string(), TraceSource::Files(vec![p.clone()])))
            .collect(),
        feature_set: args.feature_set,
        folds: Some(args.folds),
        bootstrap: Some(args.bootstrap),
        seed: Some(args.seed),
        llm: ops::parse_llm(&args.llm)?,
        judge_pairs: Some(args.judge_pairs),
        judge_prompt: args.judge_prompt.clone(),
    };
    let heartbeat = |line: &str| eprintln!("{}", crate::io::printable(line));
    let (report, skipped) = ops::audit_with(&req, Some(&heartbeat))?;
    super::warn_skipped(&skipped);
    if args.json {
        println!("{}", crate::io::to_json_pretty(&report));
    } else {
        print!("{}", crate::io::printable(&audit::render(&report)));
    }
    let too_few: Vec<&str> = std::iter::once(&report.control)
        .chain(&report.rows)
        .filter(|r| r.too_few.is_some())
        .map(|r| r.name.as_str())
        .collect();
    Ok(if too_few.is_empty() {
        Outcome::Done
    } else {
        Outcome::Partial(format!(
            "{} of {} rows had too few dialogues to audit: {}",
            too_few.len(),
            report.rows.len() + 1,
            too_few.join(", ")
        ))
    })
}
