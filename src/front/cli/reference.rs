//! `ppol reference HUMAN_TRACES... -o human_ref.json`

use std::path::PathBuf;

use clap::Args;

use crate::fitness::features::FeatureSet;
use crate::fitness::reference::HumanReference;
use crate::fitness::traces::{self, LoadOptions};

/// Arguments of `ppol reference`.
#[derive(Debug, Args)]
pub struct ReferenceArgs {
    /// Human trace files.
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// Feature set.
    #[arg(long, default_value = "ppol-0.1.1")]
    pub feature_set: FeatureSet,
    /// Keep only this domain.
    #[arg(long)]
    pub domain: Option<String>,
    /// Output JSON file.
    #[arg(short, long)]
    pub output: PathBuf,
}

/// Run `ppol reference`.
pub fn run(args: ReferenceArgs) -> anyhow::Result<()> {
    let ds = traces::load_many(
        &args.traces,
        &LoadOptions {
            domain: args.domain,
        },
    )?;
    let source = args
        .traces
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let r = HumanReference::build(&ds, args.feature_set, source)?;
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
