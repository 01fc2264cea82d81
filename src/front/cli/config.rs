//! `ppol config schema`: the JSON Schema of a run configuration (`run.toml`), for editors that
//! complete and check TOML with one (taplo / Even Better TOML: a `#:schema` line, see the
//! README).

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// Arguments of `ppol config`.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ConfigCommand,
}

/// `ppol config` subcommands.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the JSON Schema (draft 2020-12) of run.toml: every key, its type, default and
    /// meaning, derived from the settings themselves (the text --print-config shows).
    Schema {
        /// Write it to this file instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
}

/// Run `ppol config`.
pub fn run(args: ConfigArgs) -> anyhow::Result<()> {
    match args.command {
        ConfigCommand::Schema { output } => {
            let text =
                crate::io::to_json_pretty(&crate::evolve::config::RunConfig::schema()) + "\n";
            super::write_output(output.as_deref(), text.as_bytes())
        }
    }
}
