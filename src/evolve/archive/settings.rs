//! `[archive]`: the program database's settings, with their defaults and their check.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Database settings. Defaults are the reference's (ppol 0.1.1 on OpenEvolve 0.4.0), except
/// fixed-range binning (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ArchiveConfig {
    /// Number of islands (≥ 1). Default 5.
    #[schemars(range(min = 1, max = crate::limits::MAX_ISLANDS))]
    pub num_islands: usize,
    /// Maximum programs per island (≥ 1). Default 50. OpenEvolve applies its
    /// `population_size` to the whole database (10 programs per island with 5 islands, a tenth
    /// of a 10×10 grid); ppol caps each island so that the grid can actually fill.
    #[schemars(range(min = 1, max = crate::limits::MAX_POPULATION))]
    pub population_size: usize,
    /// Size of the global elite archive (≥ 1). Default 100.
    #[schemars(range(min = 1, max = crate::limits::MAX_POPULATION))]
    pub archive_size: usize,
    /// Generations between migrations (0 disables migration). Default 5.
    pub migration_interval: u64,
    /// Share of each island's programs copied to the next island, in [0, 1] (0 disables
    /// migration, as `migration_interval = 0` does). Default 0.2.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub migration_rate: f64,
    /// Share of an island's population (best first) that counts as elite for exploitation, in [0, 1]. Default 0.2.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub elite_selection_ratio: f64,
    /// Probability of an exploration draw. Default 0.2.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub exploration_ratio: f64,
    /// Probability of an exploitation draw. Default 0.7. The rest (0.1) is random. When
    /// `exploration_ratio + exploitation_ratio` passes 1, both are scaled down in proportion
    /// to sum to 1 (no random draws; a warning says so when the archive is made).
    #[schemars(range(min = 0.0, max = 1.0))]
    pub exploitation_ratio: f64,
    /// Top programs given as inspirations. Default 2.
    #[schemars(range(max = crate::limits::MAX_INSPIRATIONS))]
    pub num_top_programs: usize,
    /// Diverse programs (from other cells) given as inspirations. Default 2.
    #[schemars(range(max = crate::limits::MAX_INSPIRATIONS))]
    pub num_diverse_programs: usize,
    /// Metric keys used as MAP-Elites descriptors, each expected in [0, 1].
    /// Default `["human_likeness", "coverage"]`.
    pub feature_dimensions: Vec<String>,
    /// Bins per descriptor over the fixed range [0, 1] (≥ 1). Default 10.
    #[schemars(range(min = 1, max = crate::limits::MAX_BINS))]
    pub feature_bins: usize,
    /// Metric key used as fitness. Default `combined`.
    pub fitness_metric: String,
}

impl Default for ArchiveConfig {
    fn default() -> Self {
        ArchiveConfig {
            num_islands: 5,
            population_size: 50,
            archive_size: 100,
            migration_interval: 5,
            migration_rate: 0.2,
            elite_selection_ratio: 0.2,
            exploration_ratio: 0.2,
            exploitation_ratio: 0.7,
            num_top_programs: 2,
            num_diverse_programs: 2,
            feature_dimensions: vec!["human_likeness".to_string(), "coverage".to_string()],
            feature_bins: 10,
            fitness_metric: "combined".to_string(),
        }
    }
}

impl ArchiveConfig {
    /// Check every key; the error names the offending key.
    pub fn validate(&self) -> Result<()> {
        let unit = |key: &str, v: f64| -> Result<()> {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(Error::config(
                    format!("archive.{key}"),
                    format!("must be in [0, 1], got {}", crate::limits::shown(v)),
                ))
            }
        };
        let positive = |key: &str, v: usize| -> Result<()> {
            if v >= 1 {
                Ok(())
            } else {
                Err(Error::config(
                    format!("archive.{key}"),
                    "must be at least 1",
                ))
            }
        };
        positive("num_islands", self.num_islands)?;
        positive("population_size", self.population_size)?;
        positive("archive_size", self.archive_size)?;
        positive("feature_bins", self.feature_bins)?;
        let at_most = |key: &str, v: usize, max: usize| -> Result<()> {
            crate::limits::check(&format!("archive.{key}"), v, 0, max)
        };
        at_most("num_islands", self.num_islands, crate::limits::MAX_ISLANDS)?;
        at_most(
            "population_size",
            self.population_size,
            crate::limits::MAX_POPULATION,
        )?;
        at_most(
            "archive_size",
            self.archive_size,
            crate::limits::MAX_POPULATION,
        )?;
        at_most(
            "num_top_programs",
            self.num_top_programs,
            crate::limits::MAX_INSPIRATIONS,
        )?;
        at_most(
            "num_diverse_programs",
            self.num_diverse_programs,
            crate::limits::MAX_INSPIRATIONS,
        )?;
        if self.feature_bins > crate::limits::MAX_BINS {
            return Err(Error::config(
                "archive.feature_bins",
                format!(
                    "at most {} bins per dimension, got {}",
                    crate::limits::MAX_BINS,
                    self.feature_bins
                ),
            ));
        }
        unit("migration_rate", self.migration_rate)?;
        unit("elite_selection_ratio", self.elite_selection_ratio)?;
        unit("exploration_ratio", self.exploration_ratio)?;
        unit("exploitation_ratio", self.exploitation_ratio)?;
        if self.feature_dimensions.is_empty() {
            return Err(Error::config(
                "archive.feature_dimensions",
                "at least one descriptor metric is needed",
            ));
        }
        let mut seen = BTreeSet::new();
        for d in &self.feature_dimensions {
            if d.trim().is_empty() {
                return Err(Error::config(
                    "archive.feature_dimensions",
                    "empty metric name",
                ));
            }
            if !seen.insert(d) {
                return Err(Error::config(
                    "archive.feature_dimensions",
                    format!("'{d}' is listed twice"),
                ));
            }
        }
        if self.fitness_metric.trim().is_empty() {
            return Err(Error::config("archive.fitness_metric", "empty metric name"));
        }
        Ok(())
    }

    /// The probabilities of an exploration and of an exploitation draw: `exploration_ratio`
    /// and `exploitation_ratio`, scaled down in proportion when they sum past 1 (so that they
    /// sum to 1 and no draw is random).
    pub fn draw_ratios(&self) -> (f64, f64) {
        let (explore, exploit) = (self.exploration_ratio, self.exploitation_ratio);
        let sum = explore + exploit;
        if sum > 1.0 {
            (explore / sum, exploit / sum)
        } else {
            (explore, exploit)
        }
    }

    /// Whether `exploration_ratio + exploitation_ratio` passes 1 ([`Self::draw_ratios`]
    /// scales them down).
    pub fn ratios_scaled(&self) -> bool {
        self.exploration_ratio + self.exploitation_ratio > 1.0
    }

    /// Whether islands exchange programs: `migration_interval` above 0 and `migration_rate`
    /// above 0 (either at 0 turns migration off).
    pub fn migrates(&self) -> bool {
        self.migration_interval > 0 && self.migration_rate > 0.0
    }

    /// Probability of a random (uniform over everything) parent draw.
    pub fn random_ratio(&self) -> f64 {
        let (explore, exploit) = self.draw_ratios();
        (1.0 - explore - exploit).max(0.0)
    }
}
