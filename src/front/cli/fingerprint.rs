//! `ppol fingerprint TRACES... [--feature-set ppol-0.1.1|v2] [-o OUT]`

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use crate::fitness::features::{fingerprint_many, FeatureSet};
use crate::fitness::traces::{self, LoadOptions};

/// Arguments of `ppol fingerprint`.
#[derive(Debug, Args)]
pub struct FingerprintArgs {
    /// Trace files.
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// Feature set: ppol-0.1.1 (default, the reference's) or v2 (fixed).
    #[arg(long, default_value = "ppol-0.1.1")]
    pub feature_set: FeatureSet,
    /// Keep only this domain.
    #[arg(long)]
    pub domain: Option<String>,
    /// Output JSONL file (stdout when absent).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// Run `ppol fingerprint`: one JSONL line per dialogue, in input order.
pub fn run(args: FingerprintArgs) -> anyhow::Result<()> {
    let ds = traces::load_many(
        &args.traces,
        &LoadOptions {
            domain: args.domain,
        },
    )?;
    let fps = fingerprint_many(&ds, args.feature_set);
    let mut out = String::with_capacity(ds.len() * 700);
    for (d, f) in ds.iter().zip(&fps) {
        let line = serde_json::json!({"id": d.id, "task_id": d.task_id, "features": f.to_map()});
        out.push_str(&line.to_string());
        out.push('\n');
    }
    super::write_output(args.output.as_deref(), out.as_bytes())?;
    if let Some(p) = &args.output {
        eprintln!(
            "wrote {} fingerprints ({}) to {}",
            ds.len(),
            args.feature_set,
            p.display()
        );
    }
    std::io::stdout().flush()?;
    Ok(())
}
