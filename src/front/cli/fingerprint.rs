//! `ppol fingerprint TRACES... [--feature-set ppol-0.1.1|v2] [-o OUT]`

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use rayon::prelude::*;
use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::fitness::features::{fingerprint_many, FeatureSet, Fingerprint, FEATURE_NAMES};
use crate::fitness::traces::{self, LoadOptions};

/// Arguments of `ppol fingerprint`.
#[derive(Debug, Args)]
pub struct FingerprintArgs {
    /// Trace files. Every dialogue gets one line; one without user text (no turns, only agent
    /// turns, or user turns without content) gets the all-zero fingerprint the reference gives
    /// it, with a warning naming file and line. A dialogue id used twice is an error.
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

/// One output line: `{"id", "task_id", "features": {name: value, ...}}`.
#[derive(serde::Serialize)]
struct Row<'a> {
    id: &'a str,
    task_id: Option<&'a str>,
    features: Features<'a>,
}

/// The features in column order, serialized without building a map.
struct Features<'a>(&'a Fingerprint);

impl Serialize for Features<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(FEATURE_NAMES.len()))?;
        for (name, value) in FEATURE_NAMES.iter().zip(self.0.values()) {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// Run `ppol fingerprint`: one JSONL line per dialogue, in input order, written at once
/// (atomically to a file).
pub fn run(args: FingerprintArgs) -> anyhow::Result<()> {
    let opts = LoadOptions {
        domain: args.domain,
    };
    // Only the user turns are fingerprinted; the patterns compile while the traces load.
    let (ds, ()) = rayon::join(
        || traces::load_many_user_turns(&args.traces, &opts),
        || args.feature_set.compile(),
    );
    let loaded = ds?;
    for s in &loaded.skipped {
        eprintln!(
            "warning: {}: {}: dialogue '{}' has no user text (no turns, only agent turns, or \
             user turns without content); its fingerprint is all zeros",
            crate::io::printable(&s.path.display().to_string()),
            s.location,
            crate::io::printable(&s.id)
        );
    }
    let ds = loaded.dialogues;
    let fps = fingerprint_many(&ds, args.feature_set);
    let pieces = ds
        .par_chunks(256)
        .zip(fps.par_chunks(256))
        .map(|(ds, fps)| {
            let mut out = Vec::with_capacity(ds.len() * 700);
            for (d, f) in ds.iter().zip(fps) {
                let row = Row {
                    id: &d.id,
                    task_id: d.task_id.as_deref(),
                    features: Features(f),
                };
                crate::io::write_json(&mut out, &row)?;
                out.push(b'\n');
            }
            Ok(out)
        })
        .collect::<serde_json::Result<Vec<Vec<u8>>>>()?;
    // Freeing the dialogues is off the path to the written file (the process may exit first).
    let n = ds.len();
    rayon::spawn(move || drop(ds));
    super::write_output(args.output.as_deref(), &pieces.concat())?;
    if let Some(p) = &args.output {
        eprintln!(
            "wrote {n} fingerprints ({}) to {}",
            args.feature_set,
            p.display()
        );
    }
    std::io::stdout().flush()?;
    Ok(())
}
