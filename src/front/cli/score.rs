//! `ppol score` and `ppol discriminator train`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::fitness::coverage::CoverageOptions;
use crate::fitness::discriminator::{Discriminator, ForestParams, MaxFeatures};
use crate::fitness::features::FeatureSet;
use crate::fitness::score::{load_reference, score, train_discriminator, ScoreOptions};
use crate::fitness::traces::{self, LoadOptions};

/// Random-forest settings shared by the commands that train one.
#[derive(Debug, Clone, Args)]
pub struct ForestFlags {
    /// Number of trees.
    #[arg(long, default_value_t = 200)]
    pub trees: usize,
    /// Maximum tree depth (0 = unlimited).
    #[arg(long, default_value_t = 12)]
    pub max_depth: usize,
    /// Features tried per split: sqrt, all, an integer or a fraction.
    #[arg(long, default_value = "sqrt")]
    pub max_features: String,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Folds of the grouped (by task) held-out AUC.
    #[arg(long, default_value_t = 5)]
    pub folds: usize,
}

impl ForestFlags {
    /// The forest parameters these flags describe.
    pub fn params(&self) -> anyhow::Result<ForestParams> {
        let max_features: MaxFeatures = self
            .max_features
            .parse()
            .map_err(|e| anyhow::anyhow!("invalid --max-features '{}': {e}", self.max_features))?;
        Ok(ForestParams {
            n_trees: self.trees,
            max_depth: (self.max_depth > 0).then_some(self.max_depth),
            max_features,
            seed: self.seed,
            ..ForestParams::default()
        })
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
        #[arg(long, default_value = "ppol-0.1.1")]
        feature_set: FeatureSet,
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
    /// Simulated dialogues to score.
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
    /// Weight of human-likeness.
    #[arg(long, default_value_t = 0.5)]
    pub lambda_h: f64,
    /// Weight of coverage.
    #[arg(long, default_value_t = 0.5)]
    pub lambda_b: f64,
    /// Coverage in raw feature space (default: standardised by the human mean/std).
    #[arg(long)]
    pub raw: bool,
    /// Replace the human cloud by K k-means centroids (0 = off).
    #[arg(long, default_value_t = 0)]
    pub clusters: usize,
    /// Feature set.
    #[arg(long, default_value = "ppol-0.1.1")]
    pub feature_set: FeatureSet,
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
    let reference = load_reference(&human, feature_set)?;
    let base = traces::load_many(&baseline, &LoadOptions::default())?;
    let disc = train_discriminator(&reference, &base, &forest.params()?, forest.folds)?;
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
    let reference = load_reference(&args.human, args.feature_set)?;
    let disc = match (&args.discriminator, args.baseline.is_empty()) {
        (Some(p), _) => Discriminator::load(p)?,
        (None, false) => {
            let base = traces::load_many(&args.baseline, &LoadOptions::default())?;
            train_discriminator(&reference, &base, &args.forest.params()?, args.forest.folds)?
        }
        (None, true) => {
            anyhow::bail!("give --discriminator FILE or --baseline TRACES (to train one)")
        }
    };
    let candidates = traces::load_many(&args.candidates, &LoadOptions::default())?;
    let opts = ScoreOptions {
        lambda_h: args.lambda_h,
        lambda_b: args.lambda_b,
        coverage: CoverageOptions {
            standardize: !args.raw,
            n_clusters: args.clusters,
            seed: 0,
        },
    };
    let s = score(&reference, &disc, &candidates, &opts)?;
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
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}
