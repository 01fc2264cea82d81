//! The archive's checkpoint form ([`CHECKPOINT_FORMAT`]): every program and the state of the
//! islands, the random generator and the failure memory, with every metric's exact bits, so a
//! resumed run ranks programs exactly as the run that saved it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::program::{Program, ProgramId};
use super::{archive_err, Archive, ArchiveConfig, FailureRecord, Island, CHECKPOINT_FORMAT};
use crate::{Error, Result};

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

impl Archive {
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
