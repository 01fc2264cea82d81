//! `ppol study make --condition NAME=FILE ... -o DIR` and `ppol study analyze ANSWERS... --key
//! KEY`: a blinded human-judgement study of simulated users.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::front::ops::{self, StudyMakeRequest};
use crate::limits;

/// `ppol study ...`
#[derive(Debug, Args)]
pub struct StudyArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: StudyCommand,
}

/// The study verbs.
#[derive(Debug, Subcommand)]
pub enum StudyCommand {
    /// Sample, shuffle and blind dialogues of several conditions into an annotation page
    /// (study.html), Label Studio import files and a key (key.json: keep it to yourself).
    Make {
        /// A condition and its dialogues: NAME=FILE (trace or episode files, hf:// paths too);
        /// repeat for each condition, or with the same name to add files to it.
        #[arg(long = "condition", value_name = "NAME=FILE", required = true)]
        conditions: Vec<String>,
        /// Output directory.
        #[arg(short, long)]
        out: PathBuf,
        /// Dialogues sampled per condition, up to 100,000 (0 = all).
        #[arg(long, default_value_t = 20, allow_negative_numbers = true,
              value_parser = super::count(0, limits::MAX_STUDY_ITEMS))]
        per_condition: usize,
        /// Seed of the sampling and the shuffle.
        #[arg(long, allow_negative_numbers = true, default_value_t = 0,
          value_parser = super::seed())]
        seed: u64,
        /// Attention-check items, up to 100 (their right answers alternate Bot, Human, ...).
        #[arg(long, default_value_t = 1, allow_negative_numbers = true,
              value_parser = super::count(0, limits::MAX_ATTENTION_CHECKS))]
        attention_checks: usize,
        /// How agent turns are shown: dimmed, summary or hidden.
        #[arg(long, default_value = "dimmed")]
        agent_turns: String,
        /// A saved discriminator (`ppol discriminator train -o`): P(human) of each item goes
        /// into the key, for the point-biserial correlation.
        #[arg(long)]
        discriminator: Option<PathBuf>,
        /// Page title.
        #[arg(long)]
        title: Option<String>,
        /// Keep only dialogues of this domain (τ-USI files mix airline and retail).
        #[arg(long)]
        domain: Option<String>,
    },
    /// Un-blind answers with the key: share judged human per condition (95% Wilson CIs),
    /// Welch's t between conditions, Krippendorff's α, point-biserial r with P(human).
    Analyze {
        /// Answer files downloaded from the page, or Label Studio JSON exports.
        #[arg(required = true)]
        answers: Vec<PathBuf>,
        /// The key written by `ppol study make`.
        #[arg(long)]
        key: PathBuf,
        /// Keep annotators who failed an attention check (default: excluded).
        #[arg(long)]
        keep_failed_attention: bool,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
        /// Also write the JSON to this file.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
}

/// Run `ppol study`.
pub fn run(args: StudyArgs) -> anyhow::Result<()> {
    match args.command {
        StudyCommand::Make {
            conditions,
            out,
            per_condition,
            seed,
            attention_checks,
            agent_turns,
            discriminator,
            title,
            domain,
        } => {
            let files = ops::study_make(&StudyMakeRequest {
                conditions,
                out,
                per_condition: Some(per_condition),
                seed,
                attention_checks: Some(attention_checks),
                agent_turns: Some(agent_turns),
                discriminator,
                title,
                domain,
            })?;
            eprintln!("study {}: {} items", files.study_id, files.n_items);
            eprintln!("  for annotators: {}", files.page.display());
            eprintln!(
                "  for Label Studio: {} (labeling config: {})",
                files.label_studio_tasks.display(),
                files.label_studio_config.display()
            );
            eprintln!(
                "  keep to yourself: {} (un-blinds the answers: ppol study analyze ANSWERS... --key {})",
                files.key.display(),
                files.key.display()
            );
            println!("{}", files.page.display());
        }
        StudyCommand::Analyze {
            answers,
            key,
            keep_failed_attention,
            json,
            output,
        } => {
            let a = ops::study_analyze(&answers, &key, keep_failed_attention)?;
            let text = crate::io::to_json_pretty(&a);
            if let Some(p) = &output {
                crate::io::write_atomic(p, format!("{text}\n").as_bytes())?;
            }
            if json {
                println!("{text}");
            } else {
                print!(
                    "{}",
                    crate::io::printable(&crate::report::study::render_text(&a))
                );
            }
        }
    }
    Ok(())
}
