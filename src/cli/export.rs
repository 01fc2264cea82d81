//! `ppol export sft EPISODES.jsonl -o train.jsonl`: agent-hardening data.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::episode::llm::agent_system_prompt;
use crate::episode::record::load_episodes;
use crate::export::{selected, sft_record, Selection};

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
    /// OpenAI-style chat fine-tuning records from the agent's point of view.
    Sft {
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
    },
}

/// Run `ppol export`.
pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    let ExportCommand::Sft {
        episodes,
        all,
        tau2_data,
        output,
    } = args.command;
    let sel = if all {
        Selection::All
    } else {
        Selection::Successful
    };
    let mut domains: std::collections::HashMap<String, (String, Vec<crate::llm::ToolSpec>)> =
        Default::default();
    let mut out = String::new();
    let (mut n_in, mut n_out) = (0usize, 0usize);
    for path in &episodes {
        for e in load_episodes(path)? {
            n_in += 1;
            if !selected(&e, sel) {
                continue;
            }
            if !domains.contains_key(&e.domain) {
                let d = crate::tau2::Domain::load(&e.domain, tau2_data.as_deref())?;
                domains.insert(
                    e.domain.clone(),
                    (agent_system_prompt(&d.policy), d.env().tools()),
                );
            }
            let (system, tools) = &domains[&e.domain];
            out.push_str(&sft_record(&e, system, tools).to_string());
            out.push('\n');
            n_out += 1;
        }
    }
    crate::error::write_atomic(&output, out.as_bytes())?;
    eprintln!(
        "wrote {n_out} of {n_in} episodes to {} ({})",
        output.display(),
        if all {
            "all that ran"
        } else {
            "successful only"
        }
    );
    Ok(())
}
