//! `ppol bench reach --human FILE [world flags]`: can the world's user produce what the humans
//! do? For each feature of both feature sets, the range the world's user reaches across
//! personas against the humans' range.
//!
//! The world's own user plays the plain simulator (no persona) and one persona per mechanic of
//! the offline user's vocabulary (`fitness/mechanics.toml`: all of a mechanic's canonical
//! sentences as its text), or the personas of `--personas FILE`, on the tasks of `--tasks`
//! (default: the train split). Per feature it prints the humans' 5th, 50th and 95th percentile,
//! the plain simulator's mean, the lowest and highest value any dialogue of the world reached,
//! and the share of human dialogues whose value lies inside that reach. A feature where that
//! share is low is a behaviour the world's user cannot produce: no persona population can make
//! it human there, whatever the search does.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use crate::dialogue::Dialogue;
use crate::fitness::features::{fingerprint_many, FeatureSet, FEATURE_NAMES};
use crate::fitness::traces::{self, LoadOptions};
use crate::front::ops::{self, EpisodesInput, Overrides};
use crate::persona::Persona;
use crate::simulate::episode::record::EpisodeStatus;

/// Share of humans inside the world's reach below which a feature is flagged.
pub const FLAG_BELOW: f64 = 0.9;

/// Arguments of `ppol bench reach`.
#[derive(Debug, Args)]
pub struct BenchReachArgs {
    /// Human trace files (JSONL, τ-USI JSON or USER:/ASSISTANT: text).
    #[arg(long, required = true)]
    pub human: Vec<PathBuf>,
    /// Personas to play (JSONL from `ppol generate`); default: one per mechanic of the offline
    /// user's vocabulary.
    #[arg(long)]
    pub personas: Option<PathBuf>,
    /// Tasks: a split name, `all`, or comma-separated task ids.
    #[arg(long, default_value = "train")]
    pub tasks: String,
    /// Built-in world: demo, retail, airline (an alias of --world).
    #[arg(long)]
    pub domain: Option<String>,
    /// τ² data directory of retail/airline.
    #[arg(long)]
    pub tau2_data: Option<PathBuf>,
    #[command(flatten)]
    pub world: super::world::WorldFlags,
    /// A run configuration whose world and `[llm]` apply.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Root seed.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = super::seed())]
    pub seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One feature's reach.
#[derive(Debug, Clone, Serialize)]
pub struct FeatureReach {
    /// Feature set.
    pub feature_set: String,
    /// Feature.
    pub feature: String,
    /// Humans' 5th, 50th and 95th percentile.
    pub human: [f64; 3],
    /// The plain simulator's mean.
    pub plain: f64,
    /// Lowest and highest value of any of the world's dialogues.
    pub reach: [f64; 2],
    /// Share of human dialogues inside the reach.
    pub humans_inside: f64,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReach {
    /// Human dialogues.
    pub n_humans: usize,
    /// The world's dialogues (personas and plain).
    pub n_world: usize,
    /// Personas played.
    pub n_personas: usize,
    /// Every feature of both sets.
    pub features: Vec<FeatureReach>,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// One persona per mechanic of the vocabulary: its canonical sentences.
fn vocabulary_personas() -> Vec<Persona> {
    crate::simulate::episode::scripted::mechanics::vocabulary()
        .mechanics()
        .filter(|m| !m.framing && !m.phrases.is_empty())
        .map(|m| Persona {
            task_id: None,
            persona_id: format!("reach_{}", m.id),
            description: m.summary.clone(),
            axis_placement: Default::default(),
            text: m.phrases.join(" "),
            reasoning: None,
            source: Some("reach".into()),
        })
        .collect()
}

fn play(args: &BenchReachArgs, personas: Option<Vec<Persona>>) -> anyhow::Result<Vec<Dialogue>> {
    let mut o = Overrides::new();
    o.flag("--domain", "run.domain", args.domain.as_ref())?
        .flag("--tau2-data", "run.tau2_data", args.tau2_data.as_ref())?;
    args.world.apply(&mut o)?;
    let input = EpisodesInput {
        config: args.config.clone(),
        overrides: o,
        tasks: args.tasks.clone(),
        personas,
        trials: 1,
        seed: args.seed,
        concurrency: ops::EpisodesRequest::CONCURRENCY,
        ..EpisodesInput::default()
    };
    let report = ops::block_on(ops::episodes(input.resolve()?, &|_| {}))??;
    Ok(report
        .episodes
        .iter()
        .filter(|e| e.status == EpisodeStatus::Ok)
        .map(|e| e.to_dialogue())
        .collect())
}

/// Measure the reach.
pub fn measure(args: &BenchReachArgs) -> anyhow::Result<BenchReach> {
    let humans = traces::load_many(&args.human, &LoadOptions::default())?;
    anyhow::ensure!(
        !humans.is_empty(),
        "no human dialogues in {}",
        args.human
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let personas = match &args.personas {
        Some(p) => crate::persona::read_jsonl(p)?,
        None => vocabulary_personas(),
    };
    let n_personas = personas.len();
    let plain = play(args, None)?;
    let mut world = play(args, Some(personas))?;
    world.extend(plain.iter().cloned());
    anyhow::ensure!(
        !plain.is_empty() && !world.is_empty(),
        "the world played no episode to an end on '{}'",
        args.tasks
    );
    let mut features = Vec::new();
    for set in [FeatureSet::Ppol011, FeatureSet::V2] {
        let h = fingerprint_many(&humans, set);
        let w = fingerprint_many(&world, set);
        let p = fingerprint_many(&plain, set);
        for (j, name) in FEATURE_NAMES.iter().enumerate() {
            let mut hv: Vec<f64> = h.iter().map(|f| f.0[j]).collect();
            hv.sort_by(f64::total_cmp);
            let wv: Vec<f64> = w.iter().map(|f| f.0[j]).collect();
            let lo = wv.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = wv.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let inside = hv.iter().filter(|&&x| x >= lo && x <= hi).count();
            features.push(FeatureReach {
                feature_set: set.name().into(),
                feature: (*name).into(),
                human: [quantile(&hv, 0.05), quantile(&hv, 0.5), quantile(&hv, 0.95)],
                plain: p.iter().map(|f| f.0[j]).sum::<f64>() / p.len() as f64,
                reach: [lo, hi],
                humans_inside: inside as f64 / hv.len() as f64,
            });
        }
    }
    Ok(BenchReach {
        n_humans: humans.len(),
        n_world: world.len(),
        n_personas,
        features,
    })
}

/// The report as text.
pub fn render(b: &BenchReach) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "reach of the world's user: {} dialogues ({} personas and the plain simulator) against {} human dialogues",
        b.n_world, b.n_personas, b.n_humans
    );
    let _ = writeln!(
        s,
        "{:<11} {:<26} {:>8} {:>8} {:>8}  {:>8}  {:>8} {:>8}  {:>7}",
        "set", "feature", "human p5", "p50", "p95", "plain", "reach lo", "hi", "inside"
    );
    let mut flagged = Vec::new();
    for f in &b.features {
        let flag = if f.humans_inside < FLAG_BELOW {
            flagged.push(format!("{} ({})", f.feature, f.feature_set));
            "  <- out of reach"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "{:<11} {:<26} {:>8.3} {:>8.3} {:>8.3}  {:>8.3}  {:>8.3} {:>8.3}  {:>6.0}%{flag}",
            f.feature_set,
            f.feature,
            f.human[0],
            f.human[1],
            f.human[2],
            f.plain,
            f.reach[0],
            f.reach[1],
            100.0 * f.humans_inside
        );
    }
    if flagged.is_empty() {
        let _ = writeln!(
            s,
            "every feature: at least {:.0}% of the humans inside the world's reach",
            100.0 * FLAG_BELOW
        );
    } else {
        let _ = writeln!(
            s,
            "out of reach (fewer than {:.0}% of the humans inside what the world's user produced): {}",
            100.0 * FLAG_BELOW,
            flagged.join(", ")
        );
    }
    s
}

/// Run `ppol bench reach`.
pub fn run(args: BenchReachArgs) -> anyhow::Result<()> {
    let b = measure(&args)?;
    if args.json {
        println!("{}", crate::io::to_json_pretty(&b));
    } else {
        print!("{}", render(&b));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_and_the_vocabulary_gives_a_persona_per_mechanic() {
        assert_eq!(quantile(&[0.0, 1.0, 2.0, 3.0, 4.0], 0.5), 2.0);
        assert!((quantile(&[0.0, 10.0], 0.05) - 0.5).abs() < 1e-12);
        let p = vocabulary_personas();
        assert!(p.len() >= 30, "{}", p.len());
        assert!(p.iter().all(|p| !p.text.is_empty()));
    }
}
