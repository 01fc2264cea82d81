//! `ppol export sft EPISODES.jsonl -o train.jsonl [--format ppol|openai|hf]`: agent-hardening
//! data in the format a training toolkit reads (see [`crate::simulate::export`]).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::Outcome;
use crate::front::ops::{self, ExportRequest, SftFormat};

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
        /// fine-tuning JSONL) or `hf` (TRL SFTTrainer / transformers chat templates:
        /// `messages` + `tools`, for `datasets.load_dataset("json", ...)`).
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
        /// Output JSONL.
        #[arg(short, long)]
        output: PathBuf,
        /// Share of personas held out (all their episodes go to --heldout-output, none to the
        /// training file), chosen by a stable hash of the persona id.
        #[arg(long, default_value_t = 0.0)]
        heldout_fraction: f64,
        /// Where held-out personas' records go (default: OUTPUT with `.heldout` before the extension).
        #[arg(long)]
        heldout_output: Option<PathBuf>,
        /// Seed of the hold-out hash.
        #[arg(long, default_value_t = 0)]
        seed: u64,
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
    } = args.command;
    let report = ops::export_sft(&ExportRequest {
        episodes,
        all,
        tau2_data,
        heldout_fraction,
        seed,
        format,
    })?;
    if report.train.is_empty() {
        anyhow::bail!(
            "none of the {} episodes was selected ({}); '{}' was not written",
            report.n_episodes,
            if all {
                "none ran to an end"
            } else {
                "none was successful; --all exports every episode that ran"
            },
            output.display()
        );
    }
    crate::io::write_jsonl(&output, &report.train)?;
    eprintln!(
        "wrote {} of {} episodes as {format} records to {} ({})",
        report.train.len(),
        report.n_episodes,
        output.display(),
        if all {
            "all that ran"
        } else {
            "successful only"
        }
    );
    if heldout_fraction > 0.0 {
        let path = heldout_output.unwrap_or_else(|| output.with_extension("heldout.jsonl"));
        crate::io::write_jsonl(&path, &report.heldout)?;
        eprintln!(
            "wrote {} episodes of {} held-out personas to {}",
            report.heldout.len(),
            report.heldout_personas.len(),
            path.display()
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
    Ok(Outcome::Done)
}
