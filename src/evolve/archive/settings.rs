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
    pub num_islands: usize,
    /// Maximum programs per island (≥ 1). Default 50. OpenEvolve applies its
    /// `population_size` to the whole database (10 programs per island with 5 islands, a tenth
    /// of a 10×10 grid); ppol caps each island so that the grid can actually fill.
    pub population_size: usize,
    /// Size of the global elite archive (≥ 1). Default 100.
    pub archive_size: usize,
    /// Generations between migrations (0 disables migration). Default 5.
    pub migration_interval: u64,
    /// Share of each island's programs copied to the next island, in (0, 1]. Default 0.2.
    pub migration_rate: f64,
    /// Share of an island's population (best first) that counts as elite for exploitation, in [0, 1]. Default 0.2.
    pub elite_selection_ratio: f64,
    /// Probability of an exploration draw. Default 0.2.
    pub exploration_ratio: f64,
    /// Probability of an exploitation draw. Default 0.7. The rest (0.1) is random.
    pub exploitation_ratio: f64,
    /// Top programs given as inspirations. Default 2.
    pub num_top_programs: usize,
    /// Diverse programs (from other cells) given as inspirations. Default 2.
    pub num_diverse_programs: usize,
    /// Metric keys used as MAP-Elites descriptors, each expected in [0, 1].
    /// Default `["human_likeness", "coverage"]`.
    pub feature_dimensions: Vec<String>,
    /// Bins per descriptor over the fixed range [0, 1] (≥ 1). Default 10.
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
        if self.feature_bins > 1000 {
            return Err(Error::config(
                "archive.feature_bins",
                format!("at most 1000 bins per dimension, got {}", self.feature_bins),
            ));
        }
        unit("migration_rate", self.migration_rate)?;
        if self.migration_rate == 0.0 {
            return Err(Error::config(
                "archive.migration_rate",
                "must be > 0 (set migration_interval = 0 to disable migration)",
            ));
        }
        unit("elite_selection_ratio", self.elite_selection_ratio)?;
        unit("exploration_ratio", self.exploration_ratio)?;
        unit("exploitation_ratio", self.exploitation_ratio)?;
        if self.exploration_ratio + self.exploitation_ratio > 1.0 + 1e-12 {
            return Err(Error::config(
                "archive.exploitation_ratio",
                format!(
                    "exploration_ratio + exploitation_ratio must be ≤ 1 (the rest is random), got {} + {}",
                    self.exploration_ratio, self.exploitation_ratio
                ),
            ));
        }
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

    /// Probability of a random (uniform over everything) parent draw.
    pub fn random_ratio(&self) -> f64 {
        (1.0 - self.exploration_ratio - self.exploitation_ratio).max(0.0)
    }
}
