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

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

mod checkpoint;
pub mod program;
mod settings;

pub use settings::ArchiveConfig;
mod rescore;

use crate::evolve::archive::program::ChildFailure;
use crate::evolve::archive::program::{Program, ProgramId};
use crate::{Error, Result};

/// Identifier of the checkpoint format written by [`Archive::to_json`].
pub const CHECKPOINT_FORMAT: &str = "ppol-archive/1";

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
        if cfg.ratios_scaled() {
            let (explore, exploit) = cfg.draw_ratios();
            tracing::warn!(
                "archive.exploration_ratio + archive.exploitation_ratio = {} + {} passes 1: \
                 scaled to {explore:.3} + {exploit:.3} (no random parent draws)",
                cfg.exploration_ratio,
                cfg.exploitation_ratio
            );
        }
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
        let (explore, exploit) = self.cfg.draw_ratios();
        let mode = if u < explore {
            SampleMode::Exploration
        } else if u < explore + exploit {
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

    /// Migrate when `generation` is a positive multiple of `migration_interval` (and
    /// `migration_rate` is above 0) and no migration
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
            || !self.cfg.migrates()
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
}
