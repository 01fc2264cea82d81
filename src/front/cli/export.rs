//! `ppol export sft EPISODES.jsonl -o train.jsonl [--format ppol|openai|hf|llamafactory]`:
//! agent-hardening data in the format a training toolkit reads (see
//! [`crate::simulate::export`]); `llamafactory` also registers the files in the
//! `dataset_info.json` next to them.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::Outcome;
use crate::front::ops::{self, BadCalls, ExportRequest, SftFormat};

/// `ppol export ...`
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Format.
    #[command(subcommand)]
    pub command: ExportCommand,
}

/// Export formats.
#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// Chat fine-tuning records from the agent's point of view.
    Sft {
        /// Record format: `ppol` (messages + tools + metadata), `openai` (OpenAI chat
        /// fine-tuning JSONL), `hf` (TRL SFTTrainer / transformers chat templates: `messages` +
        /// `tools`, for `datasets.load_dataset("json", ...)`) or `llamafactory` (LLaMA-Factory
        /// ShareGPT rows with function_call / observation turns, a .json or .jsonl file, each
        /// file registered in the dataset_info.json next to it; episodes that break its
        /// human/agent alternation are skipped and counted).
        #[arg(long, default_value = "ppol")]
        format: SftFormat,
        /// Episode files written by `ppol episodes` or `ppol evolve`.
        #[arg(required = true)]
        episodes: Vec<PathBuf>,
        /// Export every episode that ran to an end, not only successful ones.
        #[arg(long)]
        all: bool,
        /// Directory with τ² data (for the domain policy and tools).
        #[arg(long)]
        tau2_data: Option<PathBuf>,
        /// Output JSONL (`llamafactory`: `.jsonl`, or `.json` for one JSON array).
        #[arg(short, long)]
        output: PathBuf,
        /// Share of personas held out (all their episodes go to --heldout-output, none to the
        /// training file), chosen by a stable hash of the persona id.
        #[arg(long, default_value_t = 0.0, allow_negative_numbers = true,
              value_parser = super::share)]
        heldout_fraction: f64,
        /// Where held-out personas' records go (default: OUTPUT with `.heldout` before the extension).
        #[arg(long)]
        heldout_output: Option<PathBuf>,
        /// Seed of the hold-out hash.
        #[arg(long, allow_negative_numbers = true, default_value_t = 0,
          value_parser = super::seed())]
        seed: u64,
        /// `llamafactory`: the dataset name of OUTPUT in dataset_info.json (default: its file
        /// stem); the held-out file is registered as NAME.heldout (default: its file stem).
        #[arg(long)]
        dataset_name: Option<String>,
        /// Layout version of the format: 2 (the default) writes `content: ""` beside an
        /// `openai` agent turn's tool calls; 1 leaves it out, as exports did before. `ppol`,
        /// `hf` and `llamafactory` read the same in both.
        #[arg(long)]
        format_version: Option<u32>,
        /// A text file that replaces the agent's system prompt in every record (a compact
        /// policy: τ² retail's full one is ~1,600 tokens in every row).
        #[arg(long, value_name = "FILE")]
        system_prompt: Option<PathBuf>,
        /// Leave out records estimated longer than N tokens (listed as skipped).
        #[arg(long, value_name = "N", value_parser = super::count(1, usize::MAX))]
        max_tokens: Option<usize>,
        /// Calls the agent got wrong (arguments that are not a JSON object, a tool it was not
        /// offered, an argument of a type its schema rules out): `cut` ends the row before the
        /// agent turn that made the first (its earlier turns stay training targets), `drop-call`
        /// takes them and their results out, `drop-episode` skips the episode, `keep` leaves them
        /// as context (weight 0 in ppol, openai and hf).
        #[arg(long, default_value = "cut", value_name = "POLICY")]
        bad_calls: BadCalls,
    },
}

/// Run `ppol export sft`.
pub fn run(args: ExportArgs) -> anyhow::Result<Outcome> {
    let ExportCommand::Sft {
        format,
        episodes,
        all,
        tau2_data,
        output,
        heldout_fraction,
        heldout_output,
        seed,
        dataset_name,
        format_version,
        system_prompt,
        max_tokens,
        bad_calls,
    } = args.command;
    let report = ops::export_sft(&ExportRequest {
        episodes,
        all,
        tau2_data,
        heldout_fraction,
        seed,
        format,
        output: Some(output.clone()),
        heldout_output,
        dataset_name,
        format_version,
        system_prompt,
        max_tokens,
        bad_calls,
    })?;
    let mut line = format!(
        "wrote {} of {} episodes as {format} records (layout {}) to {} ({})",
        report.train.len(),
        report.n_episodes,
        report.format_version,
        output.display(),
        if all {
            "all that ran"
        } else {
            "successful only"
        }
    );
    let unfit = [ops::SkipKind::Format, ops::SkipKind::TooLong];
    if let Some(why) = report.skipped_of(&unfit) {
        line += &format!(
            "; skipped {} that {format} cannot hold: {why}",
            report
                .skipped
                .iter()
                .filter(|s| unfit.contains(&s.kind))
                .count()
        );
    }
    for (kind, what) in [
        (ops::SkipKind::Malformed, "whose turns do not fit together"),
        (
            ops::SkipKind::BadCall,
            "with nothing to train on before a bad call",
        ),
    ] {
        let n = report.skipped.iter().filter(|s| s.kind == kind).count();
        if n > 0 {
            line += &format!("; skipped {n} {what}");
        }
    }
    if !report.bad_calls.is_empty() {
        line += &format!(
            "; {} bad call{} (--bad-calls {})",
            report.bad_calls.len(),
            if report.bad_calls.len() == 1 { "" } else { "s" },
            report.bad_call_policy
        );
    }
    if report.dropped_texts > 0 {
        line += &format!(
            "; dropped {} agent texts written beside tool calls (a function_call holds only the calls)",
            report.dropped_texts
        );
    }
    eprintln!("{line}");
    if let Some(path) = report.written.get(1) {
        eprintln!(
            "wrote {} episodes of {} held-out personas to {}",
            report.heldout.len(),
            report.heldout_personas.len(),
            path.display()
        );
    }
    for note in &report.notes {
        eprintln!("{note}");
    }
    let t = &report.tokens;
    if !t.rows.is_empty() {
        eprintln!(
            "tokens per training record, {}: median {}, max {}; the dialogue starts after median {}, max {} (system prompt and tool schemas); a cutoff of {} holds every record",
            t.method, t.median_total, t.max_total, t.median_start, t.max_start, t.suggested_cutoff
        );
    }
    for warning in &report.warnings {
        eprintln!("{warning}");
    }
    let mut by_info: std::collections::BTreeMap<&std::path::Path, Vec<&str>> = Default::default();
    for (name, info) in &report.datasets {
        by_info.entry(info.as_path()).or_default().push(name);
    }
    for (info, names) in by_info {
        eprintln!(
            "registered {} in {} (LLaMA-Factory: dataset_dir {})",
            names
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(" and "),
            info.display(),
            info.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or(".".to_string(), |p| p.display().to_string())
        );
    }
    println!(
        "{:<36} {:>8} {:>8} {:>8}  pass^k",
        "persona cluster", "personas", "episodes", "success"
    );
    for s in &report.clusters {
        let max_k = s.pass_hat_k.keys().max().copied().unwrap_or(1) as u32;
        let pk = ops::summary_ks(max_k)
            .iter()
            .filter_map(|k| s.pass_hat_k.get(k).map(|v| format!("pass^{k}={v:.3}")))
            .collect::<Vec<_>>()
            .join(" ");
        println!(
            "{:<36} {:>8} {:>8} {:>8.3}  {pk}",
            s.cluster, s.personas, s.episodes, s.success_rate
        );
    }
    let malformed = report
        .skipped
        .iter()
        .filter(|s| s.kind == ops::SkipKind::Malformed)
        .count();
    if malformed > 0 {
        return Ok(Outcome::Partial(format!(
            "{malformed} episode{} not exported because {} turns do not fit together (see the \
             warnings above); the other records were written",
            if malformed == 1 { " was" } else { "s were" },
            if malformed == 1 { "its" } else { "their" }
        )));
    }
    Ok(Outcome::Done)
}
