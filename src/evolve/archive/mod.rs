//! The program database: islands × MAP-Elites, OpenEvolve-style, deterministic given a seed.
//!
//! # Model
//!
//! - The archive holds [`ArchiveConfig::num_islands`] **islands** that evolve separately. Each
//!   island has a **population** (at most [`ArchiveConfig::population_size`] programs) and a
//!   **MAP-Elites grid**: the feature descriptors of a program (by default `human_likeness` and
//!   `coverage`, any metric keys may be used) are binned into a cell, and each cell keeps the
//!   best program by **fitness** (the [`ArchiveConfig::fitness_metric`] metric, `combined`).
//! - **Binning uses fixed ranges `[0, 1]`** with [`ArchiveConfig::feature_bins`] bins per
//!   dimension (default 10). OpenEvolve 0.4.0 min-max rescales each descriptor over the values
//!   seen so far, so a program's cell drifts as the archive grows and a cell's elite may be
//!   silently compared with programs that used to sit elsewhere; it also raises 5 bins to
//!   `ceil(archive_size^(1/dims))` = 10. Both ppol descriptors are already in `[0, 1]`, so fixed
//!   ranges give stable cells; values outside are clamped. The default of 10 keeps the
//!   reference's effective 10×10 grid.
//! - The **elite archive** ([`Archive::elite_archive`]) is the best
//!   [`ArchiveConfig::archive_size`] programs over all islands; its members survive the
//!   population cap as long as an island has other programs to drop.
//! - **Parent sampling** ([`Archive::sample_parent`]) draws a mode: *exploration*
//!   (probability 0.2: uniform over the island's population), *exploitation* (0.7: uniform over
//!   the island's elites — its cell occupants and its top
//!   [`ArchiveConfig::elite_selection_ratio`] share by fitness) or *random* (0.1: uniform over
//!   every program). An empty pool falls back to the island's population, then to everything.
//! - **Inspirations** ([`Archive::inspirations`]) are the island's top programs plus programs
//!   drawn from *other* grid cells (diverse).
//! - **Migration** ([`Archive::maybe_migrate`]) copies the top [`ArchiveConfig::migration_rate`]
//!   share of each island to the next one (ring `i → i+1 mod n`) every
//!   [`ArchiveConfig::migration_interval`] generations. Copies get a new id `<root>@<island>`
//!   and [`Program::migrated_from`]; a copy is skipped when the target island already holds the
//!   same code (OpenEvolve re-migrates migrants and fills islands with duplicates).
//! - **Population cap**: when an island exceeds its size, the worst program that is neither a
//!   cell elite, nor in the elite archive, nor the global best is removed from the archive
//!   (falling back to the worst non-best program when every program is protected).
//! - [`Archive::add`] reports whether the program took an empty cell, became a cell's elite, and
//!   beat the global best ([`AddOutcome`]) — the signals an early-stop counter needs.
//!
//! # Determinism and checkpoints
//!
//! All randomness comes from one `ChaCha8Rng` seeded with [`Archive::new`]'s seed, and all
//! collections iterate in a fixed order. [`Archive::to_json`] stores the seed and the
//! generator's word position, so [`Archive::from_json`] resumes the exact random sequence:
//! a run saved and reloaded at any point samples exactly as an uninterrupted one.
//!
//! # Example
//!
//! ```
//! use ppol::evolve::archive::{Archive, ArchiveConfig};
//! use ppol::evolve::archive::program::Program;
//!
//! let mut archive = Archive::new(ArchiveConfig::default(), 42).unwrap();
//! let seed = Program::seed("seed", "DIVERSITY_AXES = []\n").with_metrics([
//!     ("combined", 0.4),
//!     ("human_likeness", 0.3),
//!     ("coverage", 0.55),
//! ]);
//! let out = archive.add(seed, 0).unwrap();
//! assert!(out.new_cell && out.new_elite && out.new_best);
//! let parent = archive.sample_parent(0).unwrap().program;
//! assert_eq!(parent.id.as_str(), "seed");
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

pub mod program;
mod rescore;

use crate::evolve::archive::program::ChildFailure;
use crate::evolve::archive::program::{Program, ProgramId};
use crate::{Error, Result};

/// Identifier of the checkpoint format written by [`Archive::to_json`].
pub const CHECKPOINT_FORMAT: &str = "ppol-archive/1";

/// Database settings. Defaults are the reference's (ppol 0.1.1 on OpenEvolve 0.4.0), except
/// fixed-range binning (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
                    format!("must be in [0, 1], got {v}"),
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

/// What [`Archive::add`] did with a program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddOutcome {
    /// The program's MAP-Elites cell on its island was empty before.
    pub new_cell: bool,
    /// The program is now its cell's elite (new cell, or strictly better than the old occupant).
    pub new_elite: bool,
    /// The program is strictly better than the previous global best (or the first program).
    pub new_best: bool,
    /// Its cell: one bin index per feature dimension.
    pub cell: Vec<usize>,
    /// The previous elite of the cell, when this program displaced it (it stays in the population).
    pub displaced: Option<ProgramId>,
    /// Programs removed to respect the population cap (possibly the added program itself).
    pub evicted: Vec<ProgramId>,
}

/// Which rule picked a parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SampleMode {
    /// Uniform over the island's population.
    Exploration,
    /// Uniform over the island's elites.
    Exploitation,
    /// Uniform over every program in the archive.
    Random,
}

/// A sampled parent and how it was drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct ParentSample {
    /// The parent (a clone).
    pub program: Program,
    /// The mode that was drawn.
    pub mode: SampleMode,
    /// The mode's pool was empty and a wider pool was used.
    pub fell_back: bool,
}

/// Why a program is shown to the mutator as an inspiration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InspirationKind {
    /// One of the best programs.
    Top,
    /// A program from another MAP-Elites cell.
    Diverse,
}

/// A program shown to the mutator for reference.
#[derive(Debug, Clone, PartialEq)]
pub struct Inspiration {
    /// The program (a clone).
    pub program: Program,
    /// Why it was chosen.
    pub kind: InspirationKind,
}

/// One migrant copy made by [`Archive::maybe_migrate`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    /// Island it came from.
    pub from_island: usize,
    /// Island it went to.
    pub to_island: usize,
    /// The program copied.
    pub source: ProgramId,
    /// The id of the copy.
    pub copy: ProgramId,
}

/// Summary of one island.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IslandStats {
    /// Island index.
    pub island: usize,
    /// Programs on the island.
    pub population: usize,
    /// Occupied MAP-Elites cells.
    pub occupied_cells: usize,
    /// Best program on the island.
    pub best: Option<ProgramId>,
    /// Its fitness.
    pub best_fitness: Option<f64>,
    /// Mean fitness of the population.
    pub mean_fitness: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Island {
    /// Members in insertion order.
    population: Vec<ProgramId>,
    /// Cell key ("3,7") -> elite.
    cells: BTreeMap<String, ProgramId>,
}

/// Serialized form (see [`Archive::to_json`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Checkpoint {
    format: String,
    config: ArchiveConfig,
    seed: u64,
    /// `ChaCha8Rng` word position, decimal (a u128).
    rng_word_pos: String,
    next_seq: u64,
    next_island: usize,
    last_migration: Option<u64>,
    best: Option<ProgramId>,
    elite_archive: Vec<ProgramId>,
    islands: Vec<Island>,
    evicted_total: u64,
    #[serde(default)]
    failures: BTreeMap<ProgramId, Vec<FailureRecord>>,
    /// Every live program, in creation order.
    programs: Vec<Program>,
    /// Exact bit patterns (hex) of every program's metrics and descriptors. serde_json's
    /// default float parser can be 1 ulp off on long decimals, which could flip a fitness
    /// comparison after a resume; these restore the values exactly.
    f64_bits: BTreeMap<ProgramId, ExactNumbers>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ExactNumbers {
    metrics: BTreeMap<String, String>,
    descriptors: Vec<String>,
}

fn bits(v: f64) -> String {
    format!("{:016x}", v.to_bits())
}

fn unbits(s: &str, what: &str) -> Result<f64> {
    u64::from_str_radix(s, 16)
        .map(f64::from_bits)
        .map_err(|_| archive_err(what, format!("'{s}' is not a 16-digit hex f64")))
}

/// The program database. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Archive {
    cfg: ArchiveConfig,
    seed: u64,
    rng: ChaCha8Rng,
    programs: BTreeMap<ProgramId, Program>,
    islands: Vec<Island>,
    best: Option<ProgramId>,
    /// Best `archive_size` programs, best first.
    elite_archive: Vec<ProgramId>,
    next_seq: u64,
    next_island: usize,
    last_migration: Option<u64>,
    evicted_total: u64,
    /// Recent failed children per parent, oldest first.
    failures: BTreeMap<ProgramId, Vec<FailureRecord>>,
}

/// A failure and the archive's insertion counter when it was recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct FailureRecord {
    seq: u64,
    failure: ChildFailure,
}

/// Failed children remembered per parent (the oldest are dropped).
pub const MAX_FAILURES_PER_PARENT: usize = 8;

fn cell_key(cell: &[usize]) -> String {
    cell.iter()
        .map(|b| b.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn archive_err(location: impl Into<String>, message: impl Into<String>) -> Error {
    Error::parse("<archive>", location, message)
}

impl Archive {
    /// An empty archive. Fails when the configuration is invalid.
    pub fn new(cfg: ArchiveConfig, seed: u64) -> Result<Self> {
        cfg.validate()?;
        Ok(Archive {
            islands: vec![Island::default(); cfg.num_islands],
            cfg,
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed),
            programs: BTreeMap::new(),
            best: None,
            elite_archive: Vec::new(),
            next_seq: 0,
            next_island: 0,
            last_migration: None,
            evicted_total: 0,
            failures: BTreeMap::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ArchiveConfig {
        &self.cfg
    }

    /// The seed given to [`Archive::new`].
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Number of live programs.
    pub fn len(&self) -> usize {
        self.programs.len()
    }

    /// No programs yet.
    pub fn is_empty(&self) -> bool {
        self.programs.is_empty()
    }

    /// Total programs removed by the population cap so far.
    pub fn evicted_total(&self) -> u64 {
        self.evicted_total
    }

    /// The fitness of a program under this archive's configuration (`None` if missing or not finite).
    pub fn fitness(&self, program: &Program) -> Option<f64> {
        program.metric(&self.cfg.fitness_metric)
    }

    fn fit(&self, id: &ProgramId) -> f64 {
        self.programs
            .get(id)
            .and_then(|p| self.fitness(p))
            .unwrap_or(f64::NEG_INFINITY)
    }

    fn seq(&self, id: &ProgramId) -> u64 {
        self.programs.get(id).map_or(u64::MAX, |p| p.created_seq)
    }

    /// `a` ranks before `b`: higher fitness, then older.
    fn cmp_rank(&self, a: &ProgramId, b: &ProgramId) -> std::cmp::Ordering {
        self.fit(b)
            .total_cmp(&self.fit(a))
            .then_with(|| self.seq(a).cmp(&self.seq(b)))
    }

    fn sorted_best_first(&self, ids: &mut [ProgramId]) {
        ids.sort_by(|a, b| self.cmp_rank(a, b));
    }

    /// Descriptor values of a program (from its metrics), in `feature_dimensions` order.
    pub fn descriptors_of(&self, program: &Program) -> Result<Vec<f64>> {
        self.cfg
            .feature_dimensions
            .iter()
            .map(|d| {
                program.metric(d).ok_or_else(|| {
                    archive_err(
                        format!("program '{}'", program.id),
                        format!("missing or non-finite descriptor metric '{d}'"),
                    )
                })
            })
            .collect()
    }

    /// The MAP-Elites cell of descriptor values: `floor(clamp(v, 0, 1) · bins)`, capped at `bins - 1`.
    pub fn cell_of(&self, descriptors: &[f64]) -> Vec<usize> {
        let bins = self.cfg.feature_bins;
        descriptors
            .iter()
            .map(|v| {
                let v = if v.is_finite() {
                    v.clamp(0.0, 1.0)
                } else {
                    0.0
                };
                ((v * bins as f64).floor() as usize).min(bins - 1)
            })
            .collect()
    }

    fn check_island(&self, island: usize) -> Result<()> {
        if island < self.cfg.num_islands {
            Ok(())
        } else {
            Err(Error::config(
                "island",
                format!(
                    "island {island} does not exist (num_islands = {})",
                    self.cfg.num_islands
                ),
            ))
        }
    }

    /// Add an evaluated program to `island`. Its `island`, `descriptors` and `created_seq` are
    /// set here. Fails (leaving the archive unchanged) when the island does not exist, the id is
    /// already present, or the fitness or a descriptor metric is missing or not finite: a
    /// candidate that failed evaluation is recorded by the caller, not added.
    pub fn add(&mut self, program: Program, island: usize) -> Result<AddOutcome> {
        self.check_island(island)?;
        if self.programs.contains_key(&program.id) {
            return Err(archive_err(
                format!("program '{}'", program.id),
                "a program with this id is already in the archive",
            ));
        }
        let fitness = self.fitness(&program).ok_or_else(|| {
            archive_err(
                format!("program '{}'", program.id),
                format!(
                    "missing or non-finite fitness metric '{}'",
                    self.cfg.fitness_metric
                ),
            )
        })?;
        debug_assert!(fitness.is_finite());
        let descriptors = self.descriptors_of(&program)?;
        let mut program = program;
        program.code_hash = crate::evolve::archive::program::code_hash(&program.code);
        program.island = island;
        program.descriptors = descriptors;
        Ok(self.insert(program))
    }

    /// Insert a validated program (island and descriptors set) and update every index.
    fn insert(&mut self, mut program: Program) -> AddOutcome {
        program.created_seq = self.next_seq;
        self.next_seq += 1;
        let id = program.id.clone();
        let island = program.island;
        let cell = self.cell_of(&program.descriptors);
        let key = cell_key(&cell);
        self.programs.insert(id.clone(), program);
        self.islands[island].population.push(id.clone());

        let occupant = self.islands[island].cells.get(&key).cloned();
        let (new_cell, new_elite, displaced) = match occupant {
            None => (true, true, None),
            Some(old) if self.fit(&id) > self.fit(&old) => (false, true, Some(old)),
            Some(_) => (false, false, None),
        };
        if new_elite {
            self.islands[island].cells.insert(key, id.clone());
        }
        let is_best = match &self.best {
            None => true,
            Some(b) => self.fit(&id) > self.fit(b),
        };
        if is_best {
            self.best = Some(id.clone());
        }
        self.update_elite_archive(&id);
        let evicted = self.enforce_cap(island);
        AddOutcome {
            new_cell,
            new_elite,
            new_best: is_best,
            cell,
            displaced,
            evicted,
        }
    }

    fn update_elite_archive(&mut self, id: &ProgramId) {
        let mut ids = std::mem::take(&mut self.elite_archive);
        ids.push(id.clone());
        self.sorted_best_first(&mut ids);
        ids.truncate(self.cfg.archive_size);
        self.elite_archive = ids;
    }

    fn enforce_cap(&mut self, island: usize) -> Vec<ProgramId> {
        let mut evicted = Vec::new();
        while self.islands[island].population.len() > self.cfg.population_size {
            let cell_elites: BTreeSet<&ProgramId> = self.islands[island].cells.values().collect();
            let elite_archive: BTreeSet<&ProgramId> = self.elite_archive.iter().collect();
            let best = self.best.as_ref();
            let pop = &self.islands[island].population;
            let not_best = |id: &&ProgramId| Some(*id) != best;
            let tiers: [Vec<&ProgramId>; 3] = [
                pop.iter()
                    .filter(not_best)
                    .filter(|id| !cell_elites.contains(id) && !elite_archive.contains(id))
                    .collect(),
                pop.iter()
                    .filter(not_best)
                    .filter(|id| !cell_elites.contains(id))
                    .collect(),
                pop.iter().filter(not_best).collect(),
            ];
            let Some(victim) = tiers
                .iter()
                .find(|t| !t.is_empty())
                .and_then(|t| t.iter().copied().max_by(|a, b| self.cmp_rank(a, b)))
                .cloned()
            else {
                break;
            };
            self.remove(&victim);
            evicted.push(victim);
        }
        self.evicted_total += evicted.len() as u64;
        evicted
    }

    fn remove(&mut self, id: &ProgramId) {
        let Some(p) = self.programs.remove(id) else {
            return;
        };
        self.failures.remove(id);
        let isl = &mut self.islands[p.island];
        isl.population.retain(|x| x != id);
        isl.cells.retain(|_, v| v != id);
        self.elite_archive.retain(|x| x != id);
        if self.best.as_ref() == Some(id) {
            let mut all: Vec<ProgramId> = self.programs.keys().cloned().collect();
            self.sorted_best_first(&mut all);
            self.best = all.into_iter().next();
        }
        // Refill the elite archive from the remaining programs if it had been full.
        if self.elite_archive.len() < self.cfg.archive_size.min(self.programs.len()) {
            let mut all: Vec<ProgramId> = self.programs.keys().cloned().collect();
            self.sorted_best_first(&mut all);
            all.truncate(self.cfg.archive_size);
            self.elite_archive = all;
        }
    }

    /// The island the next child should be bred on: 0, 1, ..., n-1, 0, ... (stored in checkpoints).
    pub fn next_island(&mut self) -> usize {
        let i = self.next_island;
        self.next_island = (self.next_island + 1) % self.cfg.num_islands;
        i
    }

    fn uniform<'a>(&mut self, pool: &[&'a ProgramId]) -> &'a ProgramId {
        pool[self.rng.random_range(0..pool.len())]
    }

    fn exploitation_pool(&self, island: usize) -> Vec<ProgramId> {
        let isl = &self.islands[island];
        let mut pool: BTreeSet<ProgramId> = isl.cells.values().cloned().collect();
        let mut ranked = isl.population.clone();
        self.sorted_best_first(&mut ranked);
        let k = (self.cfg.elite_selection_ratio * ranked.len() as f64).ceil() as usize;
        pool.extend(ranked.into_iter().take(k));
        pool.into_iter().collect()
    }

    /// Draw a parent for a child bred on `island`. Consumes randomness from the archive's RNG.
    /// Fails when the archive is empty or the island does not exist.
    pub fn sample_parent(&mut self, island: usize) -> Result<ParentSample> {
        self.check_island(island)?;
        if self.programs.is_empty() {
            return Err(Error::Insufficient(
                "the archive is empty: add a seed program before sampling parents".into(),
            ));
        }
        let u: f64 = self.rng.random();
        let mode = if u < self.cfg.exploration_ratio {
            SampleMode::Exploration
        } else if u < self.cfg.exploration_ratio + self.cfg.exploitation_ratio {
            SampleMode::Exploitation
        } else {
            SampleMode::Random
        };
        let population: Vec<ProgramId> = self.islands[island].population.clone();
        let all: Vec<ProgramId> = self.programs.keys().cloned().collect();
        let exploit = if mode == SampleMode::Exploitation {
            self.exploitation_pool(island)
        } else {
            Vec::new()
        };
        let pools: Vec<&Vec<ProgramId>> = match mode {
            SampleMode::Exploration => vec![&population, &all],
            SampleMode::Exploitation => vec![&exploit, &population, &all],
            SampleMode::Random => vec![&all],
        };
        let (idx, pool) = pools
            .iter()
            .enumerate()
            .find(|(_, p)| !p.is_empty())
            .expect("the archive is not empty");
        let refs: Vec<&ProgramId> = pool.iter().collect();
        let id = self.uniform(&refs).clone();
        Ok(ParentSample {
            program: self.programs[&id].clone(),
            mode,
            fell_back: idx > 0,
        })
    }

    /// Programs to show the mutator next to `parent`: up to `num_top_programs` of the island's
    /// best (then the archive's), and up to `num_diverse_programs` elites of other cells
    /// (the island's first, then other islands'), drawn with the archive's RNG. Never the
    /// parent itself or a program with the same code.
    pub fn inspirations(&mut self, parent: &Program, island: usize) -> Result<Vec<Inspiration>> {
        self.check_island(island)?;
        let mut chosen: Vec<Inspiration> = Vec::new();
        let mut taken: BTreeSet<ProgramId> = BTreeSet::new();
        let mut hashes: BTreeSet<String> = BTreeSet::new();
        taken.insert(parent.id.clone());
        hashes.insert(parent.code_hash.clone());

        let mut island_ranked = self.islands[island].population.clone();
        self.sorted_best_first(&mut island_ranked);
        let mut all_ranked: Vec<ProgramId> = self.programs.keys().cloned().collect();
        self.sorted_best_first(&mut all_ranked);
        for id in island_ranked.iter().chain(all_ranked.iter()) {
            if chosen.len() >= self.cfg.num_top_programs {
                break;
            }
            let p = &self.programs[id];
            if taken.contains(id) || hashes.contains(&p.code_hash) {
                continue;
            }
            taken.insert(id.clone());
            hashes.insert(p.code_hash.clone());
            chosen.push(Inspiration {
                program: p.clone(),
                kind: InspirationKind::Top,
            });
        }

        let parent_desc = if parent.descriptors.len() == self.cfg.feature_dimensions.len() {
            Some(parent.descriptors.clone())
        } else {
            self.descriptors_of(parent).ok()
        };
        let parent_cell = parent_desc.map(|d| cell_key(&self.cell_of(&d)));
        let mut tiers: Vec<Vec<ProgramId>> = Vec::new();
        let order: Vec<usize> = std::iter::once(island)
            .chain((0..self.cfg.num_islands).filter(|&i| i != island))
            .collect();
        let mut own = Vec::new();
        let mut other = Vec::new();
        for i in order {
            for (key, id) in &self.islands[i].cells {
                if Some(key) == parent_cell.as_ref() {
                    continue;
                }
                if i == island {
                    own.push(id.clone());
                } else {
                    other.push(id.clone());
                }
            }
        }
        tiers.push(own);
        tiers.push(other);
        let mut diverse = 0;
        for mut tier in tiers {
            tier.retain(|id| !taken.contains(id));
            while diverse < self.cfg.num_diverse_programs && !tier.is_empty() {
                let k = self.rng.random_range(0..tier.len());
                let id = tier.swap_remove(k);
                let p = &self.programs[&id];
                if hashes.contains(&p.code_hash) {
                    continue;
                }
                taken.insert(id.clone());
                hashes.insert(p.code_hash.clone());
                chosen.push(Inspiration {
                    program: p.clone(),
                    kind: InspirationKind::Diverse,
                });
                diverse += 1;
            }
        }
        Ok(chosen)
    }

    /// Migrate when `generation` is a positive multiple of `migration_interval` and no migration
    /// was done for it yet (so calling it every iteration is safe). Each island's top
    /// `max(1, floor(migration_rate · population))` programs, chosen before any copy is made,
    /// are copied to the next island on the ring. Returns the copies made (a copy that the
    /// target island's cap evicts on arrival is not listed).
    ///
    /// `generation` is the caller's count of completed rounds. OpenEvolve counts generations
    /// per island, and with islands bred round-robin ([`Archive::next_island`]) an island's
    /// generation advances once per `num_islands` iterations; pass
    /// `iterations_done / num_islands` to migrate at the reference's pace (every 25
    /// iterations with the defaults).
    pub fn maybe_migrate(&mut self, generation: u64) -> Vec<Migration> {
        let n = self.cfg.num_islands;
        if n < 2
            || self.cfg.migration_interval == 0
            || generation == 0
            || generation % self.cfg.migration_interval != 0
            || self.last_migration == Some(generation)
        {
            return Vec::new();
        }
        self.last_migration = Some(generation);
        let mut plan: Vec<(usize, ProgramId)> = Vec::new();
        for i in 0..n {
            let mut ranked = self.islands[i].population.clone();
            if ranked.is_empty() {
                continue;
            }
            self.sorted_best_first(&mut ranked);
            let k = ((self.cfg.migration_rate * ranked.len() as f64).floor() as usize).max(1);
            plan.extend(ranked.into_iter().take(k).map(|id| (i, id)));
        }
        let mut done = Vec::new();
        for (from, id) in plan {
            let to = (from + 1) % n;
            let Some(src) = self.programs.get(&id) else {
                continue; // evicted by an earlier copy of this round
            };
            let hash = &src.code_hash;
            let dup = self.islands[to]
                .population
                .iter()
                .any(|m| &self.programs[m].code_hash == hash);
            let root = src.migrated_from.clone().unwrap_or_else(|| src.id.clone());
            let copy_id = ProgramId(format!("{root}@{to}"));
            if dup || self.programs.contains_key(&copy_id) {
                continue;
            }
            let mut copy = src.clone();
            copy.id = copy_id.clone();
            copy.island = to;
            copy.migrated_from = Some(root);
            let out = self.insert(copy);
            if out.evicted.contains(&copy_id) {
                continue; // the target island's elites all beat it
            }
            done.push(Migration {
                from_island: from,
                to_island: to,
                source: id,
                copy: copy_id,
            });
        }
        done
    }

    /// Remember a failed child of `parent` (a diff that did not apply, a program that did not
    /// compile, a sandbox or evaluation failure) so the next prompt for this parent can show
    /// it. Keeps the last [`MAX_FAILURES_PER_PARENT`]; forgotten when the parent is evicted.
    /// Stored in checkpoints. Unknown parents are ignored.
    pub fn record_failure(&mut self, parent: &ProgramId, failure: ChildFailure) {
        if !self.programs.contains_key(parent) {
            return;
        }
        let seq = self.next_seq;
        let v = self.failures.entry(parent.clone()).or_default();
        v.push(FailureRecord { seq, failure });
        if v.len() > MAX_FAILURES_PER_PARENT {
            v.drain(..v.len() - MAX_FAILURES_PER_PARENT);
        }
    }

    /// Recent failed children of `parent`, oldest first.
    pub fn recent_failures(&self, parent: &ProgramId) -> Vec<ChildFailure> {
        self.failures
            .get(parent)
            .map(|v| v.iter().map(|r| r.failure.clone()).collect())
            .unwrap_or_default()
    }

    /// Failures recorded for `parent` since its last successfully added child (the signal to
    /// switch from diffs to a full rewrite).
    pub fn consecutive_failures(&self, parent: &ProgramId) -> usize {
        let last_child = self
            .programs
            .values()
            .filter(|p| p.parent_id.as_ref() == Some(parent) && p.migrated_from.is_none())
            .map(|p| p.created_seq)
            .max();
        self.failures.get(parent).map_or(0, |v| {
            v.iter()
                .filter(|r| last_child.is_none_or(|c| r.seq > c))
                .count()
        })
    }

    /// The live children of `parent` (not migrant copies), the `max` most recent, oldest first:
    /// the "previous attempts" of a mutation prompt.
    pub fn recent_children(&self, parent: &ProgramId, max: usize) -> Vec<&Program> {
        let mut v: Vec<&Program> = self
            .programs
            .values()
            .filter(|p| p.parent_id.as_ref() == Some(parent) && p.migrated_from.is_none())
            .collect();
        v.sort_by_key(|p| p.created_seq);
        let skip = v.len().saturating_sub(max);
        v.split_off(skip)
    }

    /// The best program overall.
    pub fn best(&self) -> Option<&Program> {
        self.best.as_ref().and_then(|id| self.programs.get(id))
    }

    /// A program by id.
    pub fn get(&self, id: &ProgramId) -> Option<&Program> {
        self.programs.get(id)
    }

    /// A live program with this code hash, if any (to skip re-evaluating identical children).
    pub fn find_code(&self, code_hash: &str) -> Option<&Program> {
        self.programs()
            .into_iter()
            .find(|p| p.code_hash == code_hash)
    }

    /// Every live program, in creation order.
    pub fn programs(&self) -> Vec<&Program> {
        let mut v: Vec<&Program> = self.programs.values().collect();
        v.sort_by_key(|p| p.created_seq);
        v
    }

    /// Programs on one island, in creation order (empty for an unknown island).
    pub fn island_programs(&self, island: usize) -> Vec<&Program> {
        self.islands
            .get(island)
            .map(|isl| isl.population.iter().map(|id| &self.programs[id]).collect())
            .unwrap_or_default()
    }

    /// The elite of each occupied cell of an island, by cell (empty for an unknown island).
    pub fn island_elites(&self, island: usize) -> Vec<(Vec<usize>, &Program)> {
        self.islands
            .get(island)
            .map(|isl| {
                isl.cells
                    .iter()
                    .map(|(k, id)| {
                        let cell = k.split(',').filter_map(|b| b.parse().ok()).collect();
                        (cell, &self.programs[id])
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The elite archive: the best `archive_size` programs, best first.
    pub fn elite_archive(&self) -> Vec<&Program> {
        self.elite_archive
            .iter()
            .map(|id| &self.programs[id])
            .collect()
    }

    /// Per-island summary.
    pub fn island_stats(&self) -> Vec<IslandStats> {
        self.islands
            .iter()
            .enumerate()
            .map(|(i, isl)| {
                let mut ranked = isl.population.clone();
                self.sorted_best_first(&mut ranked);
                let fits: Vec<f64> = isl.population.iter().map(|id| self.fit(id)).collect();
                let best = ranked.first().cloned();
                IslandStats {
                    island: i,
                    population: isl.population.len(),
                    occupied_cells: isl.cells.len(),
                    best_fitness: best.as_ref().map(|b| self.fit(b)),
                    best,
                    mean_fitness: (!fits.is_empty())
                        .then(|| fits.iter().sum::<f64>() / fits.len() as f64),
                }
            })
            .collect()
    }

    /// The whole state as JSON (format [`CHECKPOINT_FORMAT`]): config, seed, RNG word position,
    /// counters, islands (population order and cells), the elite archive and every live program.
    pub fn to_json(&self) -> String {
        let cp = Checkpoint {
            format: CHECKPOINT_FORMAT.to_string(),
            config: self.cfg.clone(),
            seed: self.seed,
            rng_word_pos: self.rng.get_word_pos().to_string(),
            next_seq: self.next_seq,
            next_island: self.next_island,
            last_migration: self.last_migration,
            best: self.best.clone(),
            elite_archive: self.elite_archive.clone(),
            islands: self.islands.clone(),
            evicted_total: self.evicted_total,
            failures: self.failures.clone(),
            programs: self.programs().into_iter().cloned().collect(),
            f64_bits: self
                .programs
                .values()
                .map(|p| {
                    let exact = ExactNumbers {
                        metrics: p
                            .metrics
                            .iter()
                            .map(|(k, v)| (k.clone(), bits(*v)))
                            .collect(),
                        descriptors: p.descriptors.iter().map(|v| bits(*v)).collect(),
                    };
                    (p.id.clone(), exact)
                })
                .collect(),
        };
        serde_json::to_string_pretty(&cp).expect("archive state is always serializable")
    }

    /// Restore an archive written by [`Archive::to_json`]; it continues exactly where the saved
    /// one was (same random draws). The state is checked for consistency.
    pub fn from_json(json: &str) -> Result<Self> {
        let cp: Checkpoint = serde_json::from_str(json)
            .map_err(|e| archive_err(format!("line {}", e.line()), e.to_string()))?;
        if cp.format != CHECKPOINT_FORMAT {
            return Err(archive_err(
                "format",
                format!("expected '{CHECKPOINT_FORMAT}', found '{}'", cp.format),
            ));
        }
        cp.config.validate()?;
        let word_pos: u128 = cp
            .rng_word_pos
            .parse()
            .map_err(|_| archive_err("rng_word_pos", "not an unsigned integer"))?;
        let mut rng = ChaCha8Rng::seed_from_u64(cp.seed);
        rng.set_word_pos(word_pos);
        if cp.islands.len() != cp.config.num_islands {
            return Err(archive_err(
                "islands",
                format!(
                    "{} islands stored, num_islands = {}",
                    cp.islands.len(),
                    cp.config.num_islands
                ),
            ));
        }
        let n_islands = cp.config.num_islands;
        let mut programs = BTreeMap::new();
        for mut p in cp.programs {
            if let Some(exact) = cp.f64_bits.get(&p.id) {
                let what = format!("f64_bits.{}", p.id);
                for (k, b) in &exact.metrics {
                    p.metrics.insert(k.clone(), unbits(b, &what)?);
                }
                if exact.descriptors.len() == p.descriptors.len() {
                    for (d, b) in p.descriptors.iter_mut().zip(&exact.descriptors) {
                        *d = unbits(b, &what)?;
                    }
                }
            }
            if p.island >= cp.config.num_islands {
                return Err(archive_err(
                    format!("program '{}'", p.id),
                    format!("island {} out of range", p.island),
                ));
            }
            if let Some(old) = programs.insert(p.id.clone(), p) {
                return Err(archive_err(
                    format!("program '{}'", old.id),
                    "duplicate program id",
                ));
            }
        }
        let known = |id: &ProgramId, what: &str| -> Result<()> {
            if programs.contains_key(id) {
                Ok(())
            } else {
                Err(archive_err(what, format!("unknown program '{id}'")))
            }
        };
        for (i, isl) in cp.islands.iter().enumerate() {
            for id in isl.population.iter().chain(isl.cells.values()) {
                known(id, &format!("islands[{i}]"))?;
                if programs[id].island != i {
                    return Err(archive_err(
                        format!("islands[{i}]"),
                        format!("program '{id}' belongs to island {}", programs[id].island),
                    ));
                }
            }
        }
        for id in cp.elite_archive.iter().chain(cp.best.iter()) {
            known(id, "elite_archive/best")?;
        }
        for (i, isl) in cp.islands.iter().enumerate() {
            let members: BTreeSet<&ProgramId> = isl.population.iter().collect();
            if members.len() != isl.population.len() {
                return Err(archive_err(
                    format!("islands[{i}].population"),
                    "a program is listed twice",
                ));
            }
            if let Some(id) = isl.cells.values().find(|id| !members.contains(id)) {
                return Err(archive_err(
                    format!("islands[{i}].cells"),
                    format!("cell elite '{id}' is not in the island's population"),
                ));
            }
        }
        let on_islands: usize = cp.islands.iter().map(|i| i.population.len()).sum();
        if on_islands != programs.len() {
            return Err(archive_err(
                "islands",
                format!(
                    "{} programs stored but {on_islands} listed on islands",
                    programs.len()
                ),
            ));
        }
        Ok(Archive {
            cfg: cp.config,
            seed: cp.seed,
            rng,
            programs,
            islands: cp.islands,
            best: cp.best,
            elite_archive: cp.elite_archive,
            next_seq: cp.next_seq,
            next_island: cp.next_island % n_islands,
            last_migration: cp.last_migration,
            evicted_total: cp.evicted_total,
            failures: cp.failures,
        })
    }

    /// Write [`Archive::to_json`] atomically to `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        crate::io::write_atomic(path, self.to_json().as_bytes())
    }

    /// Read an archive saved with [`Archive::save`].
    pub fn load(path: &Path) -> Result<Self> {
        let text = crate::io::read_to_string(path)?;
        Archive::from_json(&text).map_err(|e| match e {
            Error::Parse {
                location, message, ..
            } => Error::Parse {
                path: PathBuf::from(path),
                location,
                message,
            },
            other => other,
        })
    }
}
