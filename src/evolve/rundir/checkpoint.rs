//! The checkpoint: the evolution's [`State`] between two iterations, written whole to
//! `<run>/checkpoint.json` at every commit point
//! ([`Evolution::commit`](crate::evolve::evolution::Evolution::commit)) and read back by
//! `ppol resume`. Its serialised form is the format [`CHECKPOINT_FORMAT`] names: fields are
//! only ever added (with serde defaults), so run directories written by earlier versions
//! resume.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::evolve::archive::program::{ChildFailure, Program};
use crate::evolve::archive::Archive;
use crate::evolve::config::RunConfig;
use crate::evolve::rundir::runlog::EvalMetrics;
use crate::evolve::rundir::RunBest;
use crate::llm::client::Accounting;
use crate::rng::derive_seed;
use crate::Result;

/// Identifier of the checkpoint format (`checkpoint.json`).
pub const CHECKPOINT_FORMAT: &str = "ppol-run/1";

/// The state of a run between two iterations. It is the checkpoint:
/// [`Evolution::commit`](crate::evolve::evolution::Evolution::commit) writes it as
/// `checkpoint.json`, and a resumed run starts from it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// [`CHECKPOINT_FORMAT`].
    pub format: String,
    /// Iterations completed.
    pub iteration: u64,
    /// Sequence number of this commit's `checkpoint` event in the run log.
    pub log_seq: u64,
    /// The program archive (stored as its own JSON document, [`Archive::to_json`]).
    #[serde(with = "archive_as_json")]
    pub archive: Archive,
    /// Candidates to evaluate before new ones are made (re-queued after an infrastructure
    /// failure by checkpoints written before generations were kept; now they stay in
    /// `generation`).
    pub pending: VecDeque<Program>,
    /// The proposals of the current generation not yet recorded, in iteration order.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub generation: VecDeque<Proposed>,
    /// Infrastructure failures in a row.
    pub requeues: u32,
    /// Evaluations in a row without a new elite.
    pub stagnation: u64,
    /// The parent of every evaluated program, by id (for lineages).
    pub parents: BTreeMap<String, Option<String>>,
    /// The run's best so far: what `best/` holds ([`RunBest`]; None before any validation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best: Option<RunBest>,
    /// Checkpoints written before [`State::best`] kept the best validation's program id and
    /// metrics here; read (to rebuild `best` from the log), never written.
    #[serde(default, skip_serializing, rename = "best_validation")]
    pub legacy_best_validation: Option<(String, EvalMetrics)>,
    /// The best train score on each batch at the final persona count (key: the batch's tasks,
    /// persona count and human-likeness weight, joined by `|`).
    /// Train scores are only comparable within a batch, so a candidate that beats its batch's
    /// best is validated even when another batch holds the global train best.
    #[serde(default)]
    pub batch_best: BTreeMap<String, f64>,
    /// Generations proposed so far.
    #[serde(default)]
    pub generations: u64,
    /// Validations not yet applied, in iteration order (generations above one; see the
    /// [evolution module docs](crate::evolve::evolution)).
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub validations: VecDeque<QueuedValidation>,
    /// Wall-clock seconds spent up to this commit, over every process of the run.
    pub elapsed_s: f64,
    /// LLM usage and cost per role up to this commit, over every process of the run (None
    /// offline, and in checkpoints written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Accounting>,
    /// The cascade's references: the stage-1 scores of the candidates evaluated so far (played
    /// in full or stopped), by train batch (its task ids joined by `,`), in iteration order.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stage_scores: BTreeMap<String, Vec<f64>>,
    /// The first-stage score of the validation of the run's best ([`State::best`]): the bar
    /// of the cascade's validations (None: validations play in full).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_stage_score: Option<f64>,
    /// Retraining of the discriminator during the run (`[fitness] retrain_every`; empty when
    /// it is off).
    #[serde(default, skip_serializing_if = "Retraining::is_off")]
    pub retraining: Retraining,
}

/// What a run that retrains its discriminator (`[fitness] retrain_every = K`) keeps in its
/// checkpoint. The fingerprints of every scored candidate and of the run's best's validation
/// are written under `retrain/` when they are recorded (`fp-<id>.json`, `val-<id>.json`), the
/// retrained discriminators as `retrain/discriminator-<count>.json`; the checkpoint names which
/// of them belong to the run, so a resumed run rescores from exactly the committed ones and
/// loads the discriminator in use (checked by its SHA-256).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Retraining {
    /// Retrainings done.
    pub count: u32,
    /// The iteration the last one came after (0: none yet).
    pub at_iteration: u64,
    /// SHA-256 of `retrain/discriminator-<count>.json` (empty before the first retraining).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,
    /// The candidates scored so far, in order (each has its `retrain/fp-<id>.json`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scored: Vec<String>,
    /// The run's best whose validation fingerprints are kept (`retrain/val-<id>.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_validation: Option<String>,
}

impl Retraining {
    /// Nothing recorded (the run does not retrain).
    pub fn is_off(&self) -> bool {
        *self == Retraining::default()
    }
}

impl State {
    /// The state of a new run: an empty archive seeded from the run's root seed.
    pub fn new(cfg: &RunConfig) -> Result<State> {
        Ok(State {
            format: CHECKPOINT_FORMAT.into(),
            iteration: 0,
            log_seq: 0,
            archive: Archive::new(cfg.archive.clone(), derive_seed(cfg.search.seed, "archive"))?,
            pending: VecDeque::new(),
            generation: VecDeque::new(),
            requeues: 0,
            stagnation: 0,
            parents: BTreeMap::new(),
            best: None,
            legacy_best_validation: None,
            batch_best: BTreeMap::new(),
            generations: 0,
            validations: VecDeque::new(),
            elapsed_s: 0.0,
            cost: None,
            stage_scores: BTreeMap::new(),
            best_stage_score: None,
            retraining: Retraining::default(),
        })
    }

    /// Program ids from the seed down to `id`.
    pub fn lineage(&self, id: &str) -> Vec<String> {
        let mut chain = vec![id.to_string()];
        let mut cur = id.to_string();
        while let Some(Some(p)) = self.parents.get(&cur) {
            if chain.contains(p) {
                break;
            }
            chain.push(p.clone());
            cur = p.clone();
        }
        chain.reverse();
        chain
    }

    /// The fitness (the archive's `fitness_metric`) of the archive's best program: the best
    /// train score, not the run's best ([`State::best`]).
    pub fn best_fitness(&self) -> Option<f64> {
        self.archive.best().and_then(|b| self.archive.fitness(b))
    }
}

/// The archive inside the checkpoint: the string [`Archive::to_json`] writes, so checkpoints
/// keep the `ppol-run/1` layout and the archive's own consistency checks run on load.
mod archive_as_json {
    use super::Archive;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(archive: &Archive, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&archive.to_json())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Archive, D::Error> {
        let text = String::deserialize(d)?;
        Archive::from_json(&text).map_err(serde::de::Error::custom)
    }
}

/// A proposal of the current generation, waiting to be evaluated and recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Proposed {
    /// A program to evaluate on `iteration`.
    Candidate {
        /// Its iteration.
        iteration: u64,
        /// The program.
        program: Program,
        /// The island it joins.
        island: usize,
        /// The cascade's bar for its first stage, set from the state the generation was
        /// proposed from (None: it plays in full).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bar: Option<f64>,
    },
    /// The mutation of `parent` failed before a program existed.
    MutationFailed {
        /// Its iteration.
        iteration: u64,
        /// The parent it was made from.
        parent: Program,
        /// Why it failed.
        failure: ChildFailure,
    },
}

impl Proposed {
    /// The iteration it belongs to.
    pub fn iteration(&self) -> u64 {
        match self {
            Proposed::Candidate { iteration, .. } | Proposed::MutationFailed { iteration, .. } => {
                *iteration
            }
        }
    }
}

/// A validation of a new train best or batch best, waiting to be applied.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueuedValidation {
    /// The candidate's iteration.
    pub iteration: u64,
    /// The generation it was recorded in (see [`State::generations`]).
    pub generation: u64,
    /// The program.
    pub program: Program,
    /// Its train metrics.
    pub train: EvalMetrics,
    /// The cascade's bar for its first stage, set when it was queued (None: it plays in full).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bar: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn the_state_round_trips_through_its_checkpoint_text() {
        let cfg = RunConfig::default();
        let mut state = State::new(&cfg).unwrap();
        let seed = Program::seed("s", "x = 1\n").with_metrics([
            ("combined", 0.4),
            ("human_likeness", 0.3),
            ("coverage", 0.5),
        ]);
        state.archive.add(seed, 0).unwrap();
        state.parents.insert("c".into(), Some("s".into()));
        state.parents.insert("s".into(), None);
        state.iteration = 3;
        let text = serde_json::to_string(&state).unwrap();
        let back: State = serde_json::from_str(&text).unwrap();
        assert_eq!(back.iteration, 3);
        assert_eq!(back.archive.to_json(), state.archive.to_json());
        assert_eq!(back.lineage("c"), ["s", "c"]);
        // the archive is stored as a string, as in every `ppol-run/1` checkpoint
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(v["archive"].is_string());
    }
}
