//! `ppol reference HUMAN_TRACES... -o human_ref.json`

use std::path::PathBuf;

use clap::Args;

use crate::fitness::features::FeatureSet;
use crate::front::ops::{self, TraceSource};

/// Arguments of `ppol reference`.
#[derive(Debug, Args)]
pub struct ReferenceArgs {
    /// Human trace files. Dialogues without user text are left out with a warning naming file
    /// and line; a dialogue id used twice is an error.
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// Feature set.
    #[arg(long)]
    pub feature_set: Option<FeatureSet>,
    /// Keep only this domain.
    #[arg(long)]
    pub domain: Option<String>,
    /// Output JSON file.
    #[arg(short, long)]
    pub output: PathBuf,
}

/// Run `ppol reference`.
pub fn run(args: ReferenceArgs) -> anyhow::Result<()> {
    let (r, skipped) = ops::build_reference(
        &TraceSource::Files(args.traces.clone()),
        args.feature_set.unwrap_or_default(),
        args.domain.as_deref(),
    )?;
    super::warn_skipped(&skipped);
    r.save(&args.output)?;
    eprintln!(
        "wrote {}: {} dialogues in mean/std, {} in the coverage cloud, feature set {}",
        args.output.display(),
        r.n_dialogues,
        r.cloud_rows().count(),
        r.feature_set
    );
    Ok(())
}
