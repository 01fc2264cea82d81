//! `ppol score` and `ppol discriminator train`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::fitness::discriminator::{Discriminator, ForestParams};
use crate::fitness::features::FeatureSet;
use crate::front::ops::{self, ScoreRequest, TraceSource};
use crate::limits;

/// Random-forest settings shared by the commands that train one. Unset flags take the
/// configuration's defaults (`[fitness.discriminator]`, `fitness.folds`; see
/// `ppol evolve --print-config`).
#[derive(Debug, Clone, Args)]
pub struct ForestFlags {
    /// Number of trees, 1 to 10,000 (default 200).
    #[arg(long, allow_negative_numbers = true,
          value_parser = super::count(1, limits::MAX_TREES))]
    pub trees: Option<usize>,
    /// Maximum tree depth, up to 1000; 0 = unlimited (default 12).
    #[arg(long, allow_negative_numbers = true,
          value_parser = super::count(0, limits::MAX_DEPTH))]
    pub max_depth: Option<usize>,
    /// Features tried per split: sqrt, all, an integer or a fraction (default sqrt).
    #[arg(long)]
    pub max_features: Option<String>,
    /// Random seed (default 42).
    #[arg(long, allow_negative_numbers = true,
          value_parser = super::seed())]
    pub seed: Option<u64>,
    /// Folds of the grouped (by task) held-out AUC, 2 to 100 (default 5).
    #[arg(long, allow_negative_numbers = true,
          value_parser = super::count(2, limits::MAX_FOLDS))]
    pub folds: Option<usize>,
}

impl ForestFlags {
    /// These flags as the verb's request.
    pub fn request(&self) -> ops::DiscriminatorRequest {
        ops::DiscriminatorRequest {
            trees: self.trees,
            max_depth: self.max_depth,
            max_features: self.max_features.clone(),
            seed: self.seed,
            folds: self.folds,
        }
    }

    /// The forest parameters and the number of folds (see
    /// [`ops::DiscriminatorRequest::params`]).
    pub fn params(&self) -> anyhow::Result<(ForestParams, usize)> {
        Ok(self.request().params()?)
    }
}

/// `ppol discriminator ...`
#[derive(Debug, Args)]
pub struct DiscriminatorArgs {
    /// Subcommand.
    #[command(subcommand)]
    pub command: DiscriminatorCommand,
}

/// Discriminator subcommands.
#[derive(Debug, Subcommand)]
pub enum DiscriminatorCommand {
    /// Train human (1) vs simulator (0) on fingerprints; prints the grouped held-out AUC.
    Train {
        /// Human traces, or a saved human reference JSON.
        #[arg(long, required = true)]
        human: Vec<PathBuf>,
        /// Baseline (persona-free simulator) dialogues.
        #[arg(long, required = true)]
        baseline: Vec<PathBuf>,
        /// Feature set.
        #[arg(long)]
        feature_set: Option<FeatureSet>,
        /// Output JSON file.
        #[arg(short, long)]
        output: PathBuf,
        /// Forest settings.
        #[command(flatten)]
        forest: ForestFlags,
    },
}

/// Arguments of `ppol score`.
#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// Simulated dialogues to score. Dialogues without user text (no turns, only agent turns,
    /// or user turns without content: a failed episode, say) are left out with a warning naming
    /// file and line, not scored as all-zero fingerprints; a dialogue id used twice is an error.
    #[arg(required = true)]
    pub candidates: Vec<PathBuf>,
    /// Human traces, or a saved human reference JSON.
    #[arg(long, required = true)]
    pub human: Vec<PathBuf>,
    /// A trained discriminator (JSON).
    #[arg(long, conflicts_with = "baseline")]
    pub discriminator: Option<PathBuf>,
    /// Baseline dialogues to train a discriminator on the fly (instead of --discriminator).
    #[arg(long)]
    pub baseline: Vec<PathBuf>,
    /// Weight of human-likeness, in [0, 1].
    #[arg(long, allow_negative_numbers = true, value_parser = super::share)]
    pub lambda_h: Option<f64>,
    /// Weight of coverage, in [0, 1].
    #[arg(long, allow_negative_numbers = true, value_parser = super::share)]
    pub lambda_b: Option<f64>,
    /// Coverage in raw feature space (default: standardised by the human mean/std).
    #[arg(long)]
    pub raw: bool,
    /// Replace the human cloud by K k-means centroids, up to 1000 (0 = off).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true,
          value_parser = super::count(0, limits::MAX_CLUSTERS))]
    pub clusters: usize,
    /// Feature set.
    #[arg(long)]
    pub feature_set: Option<FeatureSet>,
    /// Include coverage per task group in the output.
    #[arg(long)]
    pub groups: bool,
    /// Forest settings (with --baseline).
    #[command(flatten)]
    pub forest: ForestFlags,
}

/// Run `ppol discriminator`.
pub fn run_discriminator(args: DiscriminatorArgs) -> anyhow::Result<()> {
    let DiscriminatorCommand::Train {
        human,
        baseline,
        feature_set,
        output,
        forest,
    } = args.command;
    let (reference, skipped) = ops::build_reference(
        &TraceSource::Files(human),
        feature_set.unwrap_or_default(),
        None,
    )?;
    super::warn_skipped(&skipped);
    let base = ops::load_traces(&TraceSource::Files(baseline), None)?;
    super::warn_skipped(&base.skipped);
    let base = base.dialogues;
    let (params, folds) = forest.params()?;
    let disc = ops::train_discriminator(&reference, &base, &params, folds)?;
    disc.save(&output)?;
    let auc = match &disc.training.grouped_auc {
        Some(a) => format!(
            "{:.4} (k={} folds over {} task groups: {:?})",
            a.mean,
            a.k,
            a.n_groups,
            a.folds
                .iter()
                .map(|x| (x * 1e4).round() / 1e4)
                .collect::<Vec<_>>()
        ),
        None => "not computable (too few task groups with both classes)".into(),
    };
    println!(
        "trained on {} human vs {} simulator dialogues; grouped held-out AUC: {auc}",
        disc.training.n_human, disc.training.n_simulator
    );
    println!(
        "top features: {}",
        disc.training
            .top_features
            .iter()
            .take(6)
            .map(|(n, v)| format!("{n} {v:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    eprintln!("wrote {}", output.display());
    Ok(())
}

/// Run `ppol score`: prints one JSON object.
pub fn run_score(args: ScoreArgs) -> anyhow::Result<()> {
    let (reference, skipped) = ops::build_reference(
        &TraceSource::Files(args.human.clone()),
        args.feature_set.unwrap_or_default(),
        None,
    )?;
    super::warn_skipped(&skipped);
    let disc = match (&args.discriminator, args.baseline.is_empty()) {
        (Some(p), _) => Discriminator::load(p)?,
        (None, false) => {
            let base = ops::load_traces(&TraceSource::Files(args.baseline.clone()), None)?;
            super::warn_skipped(&base.skipped);
            let base = base.dialogues;
            let (params, folds) = args.forest.params()?;
            ops::train_discriminator(&reference, &base, &params, folds)?
        }
        (None, true) => {
            anyhow::bail!("give --discriminator FILE or --baseline TRACES (to train one)")
        }
    };
    let candidates = ops::load_traces(&TraceSource::Files(args.candidates.clone()), None)?;
    super::warn_skipped(&candidates.skipped);
    let candidates = candidates.dialogues;
    let s = ops::score(&ScoreRequest {
        human: &reference,
        discriminator: &disc,
        candidates: &candidates,
        lambda_h: args.lambda_h,
        lambda_b: args.lambda_b,
        raw: args.raw,
        clusters: args.clusters,
    })?;
    let mut v = serde_json::json!({
        "human_likeness": s.human_likeness,
        "coverage": s.coverage,
        "combined": s.combined,
        "lambda_h": s.lambda_h,
        "lambda_b": s.lambda_b,
        "dice": s.dice,
        "counts": s.counts,
        "d_ref": s.d_ref,
        "standardized": s.standardized,
        "feature_set": s.feature_set,
        "discriminator_grouped_auc": disc.training.grouped_auc.as_ref().map(|a| a.mean),
    });
    if args.groups {
        v["coverage_by_group"] = serde_json::json!(s
            .coverage_by_group
            .iter()
            .map(|(g, c)| serde_json::json!({"group": g, "coverage": c.coverage, "cover_humans": c.cover_humans, "stay_on_manifold": c.stay_on_manifold, "n": c.n}))
            .collect::<Vec<_>>());
    }
    println!("{}", crate::io::to_json_pretty(&v));
    Ok(())
}
