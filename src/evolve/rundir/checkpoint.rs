//! The checkpoint: the evolution's [`State`] between two iterations, written whole to
//! `<run>/checkpoint.json` at every commit point
//! ([`Evolution::commit`](crate::evolve::evolution::Evolution::commit)) and read back by
//! `ppol resume`. Its serialised form is the format [`CHECKPOINT_FORMAT`] names: fields are
//! only ever added (with serde defaults), so run directories written by earlier versions
//! resume.
//!
//! A checkpoint carries the identity of its run (`run`: [`RunIdentity`], from the log's
//! `run_started` record) and, as its last member, the SHA-256 of everything before it
//! (`checksum`; [`seal`]). `ppol resume` refuses ([`verify`], exit 2) a checkpoint of another
//! run, one whose best program the log never evaluated or scored otherwise, and one changed
//! after ppol wrote it, naming what differs. Checkpoints written before these members existed
//! resume with a warning.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::evolve::archive::program::{ChildFailure, Program};
use crate::evolve::archive::Archive;
use crate::evolve::config::RunConfig;
use crate::evolve::rundir::runlog::EvalMetrics;
use crate::evolve::rundir::RunBest;
use crate::llm::client::Accounting;
use crate::rng::derive_seed;
use crate::{Error, Result};

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

/// The identity of a run, as its checkpoint carries it (`run`): from the `run_started` record
/// that opens its log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunIdentity {
    /// When the run started (the record's time).
    pub started: String,
    /// SHA-256 of the configuration the run started with (the record's `config`, as JSON).
    pub config_sha256: String,
    /// SHA-256 of the whole `run_started` record (as JSON).
    pub log_head_sha256: String,
}

impl RunIdentity {
    /// The identity of the run whose log is `log` (None: no log, or one that does not open
    /// with `run_started`).
    pub fn of_log(log: &std::path::Path) -> Result<Option<RunIdentity>> {
        use std::io::BufRead;
        let file = match std::fs::File::open(log) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("reading", log, e)),
        };
        let mut first = Vec::new();
        std::io::Read::take(
            std::io::BufReader::new(file),
            crate::limits::MAX_LINE_BYTES as u64,
        )
        .read_until(b'\n', &mut first)
        .map_err(|e| Error::io("reading", log, e))?;
        let Ok(record) = serde_json::from_slice::<crate::evolve::rundir::runlog::Record>(&first)
        else {
            return Ok(None);
        };
        let crate::evolve::rundir::runlog::Event::RunStarted { config, .. } = &record.event else {
            return Ok(None);
        };
        Ok(Some(RunIdentity {
            started: record.time.clone(),
            config_sha256: crate::io::sha256_hex(crate::io::to_json(config).as_bytes()),
            log_head_sha256: crate::io::sha256_hex(crate::io::to_json(&record).as_bytes()),
        }))
    }
}

/// The text of a checkpoint: `state` as one line of JSON, with `run` (the run's identity, when
/// its log has one) and, last, `checksum`: the SHA-256 of the text before `,"checksum"`
/// closed with `}`.
pub fn seal<T: Serialize>(state: &T, identity: Option<&RunIdentity>) -> String {
    let mut text = crate::io::to_json(state);
    if text.ends_with('}') && text.len() > 2 {
        text.pop();
        if let Some(id) = identity {
            text.push_str(",\"run\":");
            text.push_str(&crate::io::to_json(id));
        }
        text.push('}');
        let sum = crate::io::sha256_hex(text.as_bytes());
        text.pop();
        text.push_str(&format!(",\"checksum\":\"{sum}\"}}"));
    }
    text
}

/// The member `seal` appends, before its 64 hex digits.
const CHECKSUM_KEY: &str = ",\"checksum\":\"";

/// A sealed text's checksum check: None when it has no checksum (written before checksums),
/// else whether its content is what was sealed.
fn checksum_holds(text: &str) -> Option<bool> {
    let text = text.trim_end();
    let at = text.rfind(CHECKSUM_KEY)?;
    let rest = &text[at + CHECKSUM_KEY.len()..];
    let (sum, tail) = rest.split_at_checked(64)?;
    if tail != "\"}" || !sum.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some(false);
    }
    let sealed = format!("{}}}", &text[..at]);
    Some(crate::io::sha256_hex(sealed.as_bytes()) == sum)
}

/// Check, before a resume, that the checkpoint `text` (parsed as `state`) is this run's, as
/// ppol wrote it: its best program is one the log evaluated, with the metrics the log records
/// and the code the archive holds; its identity is the log's; its checksum holds. The error
/// names what differs.
pub fn verify(dir: &crate::evolve::rundir::RunDir, text: &str, state: &State) -> Result<()> {
    use crate::evolve::rundir::runlog::{self, Event};
    let path = dir.checkpoint_path();
    let refuse = |what: String| {
        Err(Error::parse(
            &path,
            "checkpoint",
            format!("{what}: the checkpoint is not resumed (restore the run's own checkpoint.json, or start a new run with `ppol evolve`)"),
        ))
    };
    let doc: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        Error::parse(
            &path,
            format!("line {}", e.line()),
            format!("bad checkpoint: {e}"),
        )
    })?;
    let log = dir.log_path();
    if let (Some(theirs), Some(ours)) = (doc.get("run"), RunIdentity::of_log(&log)?) {
        let theirs: RunIdentity = serde_json::from_value(theirs.clone())
            .map_err(|e| Error::parse(&path, "run", format!("bad run identity: {e}")))?;
        if theirs != ours {
            let config = if theirs.config_sha256 != ours.config_sha256 {
                " with another configuration"
            } else {
                ""
            };
            return refuse(format!(
                "it belongs to another run: the run started at {}{config}, while log.jsonl is \
                 of the run started at {}",
                crate::io::printable(&theirs.started),
                crate::io::printable(&ours.started)
            ));
        }
    }
    if let (Some(best), true) = (&state.best, log.exists()) {
        let records = runlog::read(&log)?;
        let logged = records.iter().rev().find_map(|r| match &r.event {
            Event::CandidateEvaluated {
                program_id,
                metrics,
                ..
            } if *program_id == best.program_id => Some(metrics),
            _ => None,
        });
        let id = crate::io::printable(&best.program_id);
        let Some(logged) = logged else {
            return refuse(format!(
                "best.program_id '{id}' is not a program of this run (log.jsonl evaluates none \
                 by that id)"
            ));
        };
        let near = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
        for (key, a, b) in [
            ("combined", best.train.combined, logged.combined),
            (
                "human_likeness",
                best.train.human_likeness,
                logged.human_likeness,
            ),
            ("coverage", best.train.coverage, logged.coverage),
            ("success_rate", best.train.success_rate, logged.success_rate),
        ] {
            if !near(a, b) {
                return refuse(format!(
                    "best.metrics.{key} of program '{id}' is {a}, but log.jsonl records {b}"
                ));
            }
        }
        let in_archive = state
            .archive
            .get(&crate::evolve::archive::program::ProgramId(
                best.program_id.clone(),
            ));
        if let Some(p) = in_archive {
            if !best.code.is_empty() && p.code != best.code {
                return refuse(format!(
                    "best.code of program '{id}' is not the code the archive holds for it"
                ));
            }
        }
    }
    match checksum_holds(text) {
        Some(true) => Ok(()),
        Some(false) => refuse(
            "it was changed after ppol wrote it (its checksum does not match its content)".into(),
        ),
        None => {
            tracing::warn!(
                "{}: no checksum (written by an earlier ppol): its integrity is not verified",
                path.display()
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn issue34_item6_a_sealed_checkpoint_holds_only_untouched() {
        let cfg = RunConfig::default();
        let state = State::new(&cfg).unwrap();
        let id = RunIdentity {
            started: "2026-01-01T00:00:00Z".into(),
            config_sha256: "a".repeat(64),
            log_head_sha256: "b".repeat(64),
        };
        let text = seal(&state, Some(&id));
        assert_eq!(checksum_holds(&text), Some(true));
        assert_eq!(checksum_holds(&format!("{text}\n")), Some(true));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["run"]["started"], "2026-01-01T00:00:00Z");
        let back: State = serde_json::from_str(&text).unwrap();
        assert_eq!(back.iteration, 0);
        let edited = text.replace("\"iteration\":0", "\"iteration\":1");
        assert_ne!(edited, text);
        assert_eq!(checksum_holds(&edited), Some(false));
        let cut = text.replace(&text[text.len() - 10..], "0000000\"}");
        assert_eq!(checksum_holds(&cut), Some(false));
        assert_eq!(checksum_holds(&crate::io::to_json(&state)), None);
    }

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
