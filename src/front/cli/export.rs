//! `ppol export sft EPISODES.jsonl -o train.jsonl`: agent-hardening data.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::simulate::episode::llm::agent_system_prompt;
use crate::simulate::episode::record::load_episodes;
use crate::simulate::export::{selected, sft_record, Selection};

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

/// Run `ppol export`.
pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    let ExportCommand::Sft {
        episodes,
        all,
        tau2_data,
        output,
        heldout_fraction,
        heldout_output,
        seed,
    } = args.command;
    anyhow::ensure!(
        (0.0..1.0).contains(&heldout_fraction),
        "--heldout-fraction must be in [0, 1)"
    );
    let sel = if all {
        Selection::All
    } else {
        Selection::Successful
    };
    let mut loaded = Vec::new();
    for path in &episodes {
        loaded.extend(load_episodes(path)?);
    }
    let mut domains: std::collections::HashMap<String, (String, Vec<crate::llm::ToolSpec>)> =
        Default::default();
    let (mut train, mut held) = (String::new(), String::new());
    let mut held_personas: std::collections::BTreeSet<&str> = Default::default();
    let (mut n_train, mut n_held) = (0usize, 0usize);
    for e in loaded.iter().filter(|e| selected(e, sel)) {
        if !domains.contains_key(&e.domain) {
            let d = crate::simulate::tau2::Domain::load(&e.domain, tau2_data.as_deref())?;
            domains.insert(
                e.domain.clone(),
                (agent_system_prompt(&d.policy), d.env().tools()),
            );
        }
        let (system, tools) = &domains[&e.domain];
        let line = sft_record(e, system, tools).to_string();
        if crate::simulate::export::held_out(&e.persona_id, heldout_fraction, seed) {
            held.push_str(&line);
            held.push('\n');
            held_personas.insert(&e.persona_id);
            n_held += 1;
        } else {
            train.push_str(&line);
            train.push('\n');
            n_train += 1;
        }
    }
    crate::io::write_atomic(&output, train.as_bytes())?;
    eprintln!(
        "wrote {n_train} of {} episodes to {} ({})",
        loaded.len(),
        output.display(),
        if all {
            "all that ran"
        } else {
            "successful only"
        }
    );
    if heldout_fraction > 0.0 {
        let path = heldout_output.unwrap_or_else(|| output.with_extension("heldout.jsonl"));
        crate::io::write_atomic(&path, held.as_bytes())?;
        eprintln!(
            "wrote {n_held} episodes of {} held-out personas to {}",
            held_personas.len(),
            path.display()
        );
    }
    println!(
        "{:<36} {:>8} {:>8} {:>8}  pass^k",
        "persona cluster", "personas", "episodes", "success"
    );
    for s in crate::simulate::export::cluster_summaries(&loaded) {
        let pk = s
            .pass_hat_k
            .iter()
            .map(|(k, v)| format!("pass^{k}={v:.3}"))
            .collect::<Vec<_>>()
            .join(" ");
        println!(
            "{:<36} {:>8} {:>8} {:>8.3}  {pk}",
            s.cluster, s.personas, s.episodes, s.success_rate
        );
    }
    Ok(())
}
