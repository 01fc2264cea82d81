//! `ppol traces stats FILE...`

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::front::ops::{self, TraceSource};

/// `ppol traces ...`
#[derive(Debug, Args)]
pub struct TracesArgs {
    /// What to do with the traces.
    #[command(subcommand)]
    pub command: TracesCommand,
}

/// Trace subcommands.
#[derive(Debug, Subcommand)]
pub enum TracesCommand {
    /// Print counts per domain: dialogues, tasks, user turns, words per user turn.
    Stats {
        /// Trace files (τ-USI JSON, reference JSON, JSONL or text; `-` for stdin). Dialogues
        /// without user text are left out with a warning; a dialogue id used twice is an
        /// error.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Keep only this domain.
        #[arg(long)]
        domain: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Run `ppol traces`.
pub fn run(args: TracesArgs) -> anyhow::Result<()> {
    match args.command {
        TracesCommand::Stats {
            files,
            domain,
            json,
        } => {
            let (stats, skipped) =
                ops::traces_stats(&TraceSource::Files(files), domain.as_deref())?;
            super::warn_skipped(&skipped);
            if json {
                println!("{}", crate::io::to_json_pretty(&stats));
            } else {
                println!(
                    "{:<12} {:>9} {:>6} {:>10} {:>15} {:>14} {:>12}",
                    "domain",
                    "dialogues",
                    "tasks",
                    "user_turns",
                    "words/user_turn",
                    "turns/dialogue",
                    "agent_turns"
                );
                for s in stats {
                    println!(
                        "{:<12} {:>9} {:>6} {:>10} {:>15.2} {:>14.2} {:>12}",
                        crate::io::printable(&s.domain),
                        s.dialogues,
                        s.tasks,
                        s.user_turns,
                        s.words_per_user_turn,
                        s.user_turns_per_dialogue,
                        s.assistant_turns
                    );
                }
            }
            Ok(())
        }
    }
}
