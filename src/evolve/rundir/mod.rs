//! The run directory of `ppol evolve`: what lives where, and the file operations on it.
//!
//! ```text
//! <run>/run.lock                 held (`flock`) by the one process writing the run: pid, host, start
//! <run>/config.toml              the resolved configuration (written once, read by resume and eval)
//! <run>/log.jsonl                the run log (runlog): the source of truth for reports
//! <run>/checkpoint.json          the evolution state at the last commit point
//! <run>/human_ref.json           the human reference of the run's train humans
//! <run>/human_heldout.jsonl      human dialogues held out for `ppol eval`
//! <run>/human_seen.sha256        one content hash per search human (`ppol eval --human` leaves them out)
//! <run>/discriminator.json       the run's discriminator
//! <run>/baseline/episodes.jsonl  persona-free episodes the discriminator was trained against
//! <run>/baseline/partial.jsonl   the same, appended as they finish, until all are played
//! <run>/costs.jsonl              the LLM cost ledger: the run's totals after every call (ledger)
//! <run>/best/                    program.py, program.json, personas.jsonl, episodes.jsonl of the best program
//! <run>/eval-<split>.json        the `ppol eval` table of a split
//! ```
//!
//! The files with a format of their own have their modules: [`runlog`] (`log.jsonl`),
//! [`ledger`] (`costs.jsonl`) and [`checkpoint`] (`checkpoint.json`: the evolution's state).
//!
//! The checkpoint is the commit point: a resumed run first cuts the log back to the checkpoint's
//! sequence number ([`RunDir::truncate_log`]), so nothing written after the last commit is kept.
//!
//! A run directory has one writer at a time: [`RunDir::create`] and [`RunDir::open_for_writing`]
//! take an exclusive `flock` on `run.lock` and keep it until the run ends (the kernel releases
//! it when the process dies, kill -9 included, so there is no stale lock to clean; no child
//! keeps a copy of its descriptor, see [`RunLock`]). Readers
//! (`ppol report`, `ppol eval`) use [`RunDir::open`] and never take it. Under the lock, the
//! temporary files a killed writer left (`.ppol-tmp-*`, `.tmp*`) are swept.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;

/// The file of the search humans' content hashes, one per line
/// ([`crate::dialogue::Dialogue::content_sha256`]).
pub const SEEN_HUMANS: &str = "human_seen.sha256";

pub mod checkpoint;
pub mod ledger;
pub mod runlog;
pub mod summary;

use crate::evolve::archive::program::{MutationInfo, Program};
use crate::evolve::config::RunConfig;
use crate::evolve::rundir::runlog::EvalMetrics;
use crate::{Error, Result};

/// A run directory (locked for writing when made by [`RunDir::create`] or
/// [`RunDir::open_for_writing`]; clones share the lock).
#[derive(Debug, Clone)]
pub struct RunDir {
    path: PathBuf,
    lock: Option<Arc<RunLock>>,
}

impl PartialEq for RunDir {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

impl Eq for RunDir {}

/// The exclusive lock on a run directory's `run.lock`, released when dropped (or when the
/// process dies). No child keeps it: its descriptor is a [`crate::child::PrivateFile`], which every
/// fork of ppol closes first (the sandbox's supervisor and init never exec, and an `flock`
/// lasts as long as any copy of its descriptor), so the lock dies with the writer.
#[derive(Debug)]
pub struct RunLock {
    file: crate::child::PrivateFile,
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // unlock first: a child forked while this runs may still hold a copy of the descriptor
        let _ = rustix::fs::flock(self.file.file(), rustix::fs::FlockOperation::Unlock);
    }
}

/// Name of the lock file in a run directory.
pub const LOCK_FILE: &str = "run.lock";

impl RunLock {
    /// Take the lock of `dir` without waiting. Held by another process (or another handle in
    /// this one): an error naming the directory and the holder's pid, host and start time.
    pub fn acquire(dir: &Path) -> Result<RunLock> {
        use std::io::{Read, Seek, Write};
        let path = dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io("opening", &path, e))?;
        // private before it is locked: no fork from here on keeps the lock
        let private = crate::child::PrivateFile::new(file, &path)?;
        let mut file = private.file();
        match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let holder = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .map(|v| {
                        format!(
                            "pid {} on {} since {}",
                            v["pid"],
                            v["host"].as_str().unwrap_or("?"),
                            v["started"].as_str().unwrap_or("?")
                        )
                    })
                    .unwrap_or_else(|| "a process that has not written its pid yet".into());
                return Err(Error::Run {
                    path: dir.to_path_buf(),
                    message: format!(
                        "in use by another ppol process ({holder}; {LOCK_FILE} is locked): \
                         wait for it to finish or stop it first"
                    ),
                });
            }
            Err(e) => return Err(Error::io("locking", &path, e.into())),
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown host".into());
        let info = json!({
            "pid": std::process::id(),
            "host": host,
            "started": crate::io::now_rfc3339(),
        });
        file.set_len(0)
            .and_then(|_| file.rewind())
            .and_then(|_| file.write_all(format!("{info}\n").as_bytes()))
            .and_then(|_| file.sync_data())
            .map_err(|e| Error::io("writing", &path, e))?;
        Ok(RunLock { file: private })
    }
}

/// The run's best program: the one program `best/` holds, `run_stopped` names and every front
/// end reports (the CLI summary, the report, `eval`, Python), each with its own numbers.
///
/// **Definition.** Each new train best and each new best of its batch is validated (the
/// validation tasks, the final persona count, fixed weights); train scores are only comparable
/// within a batch, validation scores across the run. The run's best is the validated program
/// with the highest validation `combined` (one validated later with an equal score takes its
/// place); until a validation succeeds, the latest program whose validation failed (held
/// without validation results); before any validation, none. [`RunBest::displaces`] is the
/// rule, applied live by the evolution (which keeps the best in its checkpoint) and replayed
/// from a log by [`RunBest::from_log`].
///
/// Serialised, it is `best/program.json` plus the code (`best/program.py`): see
/// [`RunBest::program_json`].
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RunBest {
    /// Program id.
    pub program_id: String,
    /// Its train metrics: those of its own `candidate_evaluated` (`metrics` in program.json).
    #[serde(rename = "metrics")]
    pub train: EvalMetrics,
    /// Its validation metrics (None: its validation failed, see `validation_failure`).
    #[serde(default)]
    pub validation: Option<EvalMetrics>,
    /// Why its validation could not score it.
    #[serde(default)]
    pub validation_failure: Option<String>,
    /// Program ids from the seed down to it.
    #[serde(default)]
    pub lineage: Vec<String>,
    /// How it was made (a `best/program.json` written by hand or by an older tool may lack
    /// it: read as [`MutationInfo::unrecorded`], the rest of the file still counts).
    #[serde(default = "MutationInfo::unrecorded")]
    pub mutation: MutationInfo,
    /// The iteration that produced it.
    #[serde(default)]
    pub iteration_found: u64,
    /// Its source (`best/program.py`; not in program.json).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub code: String,
}

impl RunBest {
    /// The best for `program`, with its train metrics, its validation (or why it failed) and
    /// its lineage.
    pub fn of(
        program: &Program,
        train: &EvalMetrics,
        validation: std::result::Result<&EvalMetrics, &str>,
        lineage: Vec<String>,
    ) -> RunBest {
        RunBest {
            program_id: program.id.0.clone(),
            train: train.clone(),
            validation: validation.ok().cloned(),
            validation_failure: validation.err().map(str::to_string),
            lineage,
            mutation: program.mutation.clone(),
            iteration_found: program.iteration_found,
            code: program.code.clone(),
        }
    }

    /// The rule of the [definition](RunBest): whether a program just validated — `validation`
    /// its metrics, None when its validation failed — takes the place of the best `held` (the
    /// validation of the current best; None when no validation has succeeded yet).
    pub fn displaces(held: Option<&EvalMetrics>, validation: Option<&EvalMetrics>) -> bool {
        match (held, validation) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(h), Some(v)) => v.combined >= h.combined,
        }
    }

    /// The run's best as its log says: the [rule](RunBest::displaces) replayed over the
    /// `validation` and `validation_failed` events, each program's numbers and code from its
    /// `candidate_evaluated`, its lineage from the parent ids (for runs whose checkpoint
    /// predates [`RunBest`], and readers without `best/`).
    pub fn from_log(records: &[runlog::Record]) -> Option<RunBest> {
        use crate::evolve::rundir::runlog::Event;
        use std::collections::HashMap;
        let mut evaluated: HashMap<&str, &runlog::Event> = HashMap::new();
        let mut parents: HashMap<&str, Option<&str>> = HashMap::new();
        let mut best: Option<(&str, std::result::Result<&EvalMetrics, String>)> = None;
        for r in records {
            match &r.event {
                e @ Event::CandidateEvaluated {
                    program_id,
                    parent_id,
                    ..
                } => {
                    evaluated.insert(program_id, e);
                    parents.insert(program_id, parent_id.as_deref());
                }
                Event::Validation {
                    program_id,
                    metrics,
                    ..
                } => {
                    let held = best.as_ref().and_then(|(_, v)| v.as_ref().ok().copied());
                    if RunBest::displaces(held, Some(metrics)) {
                        best = Some((program_id, Ok(metrics)));
                    }
                }
                Event::ValidationFailed {
                    program_id,
                    failure,
                    ..
                } => {
                    let held = best.as_ref().and_then(|(_, v)| v.as_ref().ok().copied());
                    if RunBest::displaces(held, None) {
                        let why = format!("{}: {}", failure.stage, failure.reason);
                        best = Some((program_id, Err(why)));
                    }
                }
                _ => {}
            }
        }
        let (id, validation) = best?;
        let Event::CandidateEvaluated {
            iteration,
            metrics,
            mutation,
            mutation_summary,
            prompt_fit,
            code,
            ..
        } = evaluated.get(id)?
        else {
            return None;
        };
        let mut lineage = vec![id.to_string()];
        let mut cur = id;
        while let Some(Some(p)) = parents.get(cur) {
            if lineage.iter().any(|l| l == p) {
                break;
            }
            lineage.push(p.to_string());
            cur = p;
        }
        lineage.reverse();
        let kind = serde_json::from_value(json!(mutation)).ok()?;
        Some(RunBest {
            program_id: id.to_string(),
            train: metrics.clone(),
            validation: validation.as_ref().ok().map(|m| (*m).clone()),
            validation_failure: validation.err(),
            lineage,
            mutation: MutationInfo {
                kind,
                angle: None,
                prompt_fit: prompt_fit.clone(),
                summary: mutation_summary.clone(),
            },
            iteration_found: *iteration,
            code: code.clone(),
        })
    }

    /// Read `best/program.json` (without the code: see [`RunDir::read_best`]); a file that does
    /// not parse is an error naming it, with the line and column.
    pub fn load(path: &Path) -> Result<RunBest> {
        let text = crate::io::read_regular_text(
            path,
            crate::limits::MAX_TEXT_FILE_BYTES,
            "a best-program record",
        )?;
        serde_json::from_str(&text).map_err(|e| {
            Error::parse(
                path,
                format!("line {} column {}", e.line(), e.column()),
                format!("not a best-program record: {e}"),
            )
        })
    }

    /// `best/program.json`: everything but the code.
    pub fn program_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(RunBest {
            code: String::new(),
            ..self.clone()
        })
        .expect("json");
        if let Some(m) = v.as_object_mut() {
            m.remove("code");
        }
        v
    }
}

impl RunDir {
    /// The directory of an existing run, to read (nothing is checked until a file is read,
    /// and no lock is taken: a running writer does not stop a reader).
    pub fn open(path: &Path) -> RunDir {
        RunDir {
            path: path.to_path_buf(),
            lock: None,
        }
    }

    /// The directory of an existing run, to continue writing it: it must be a directory, its
    /// lock is taken (see [`RunLock::acquire`]) and the temporary files a killed writer left
    /// are removed.
    pub fn open_for_writing(path: &Path) -> Result<RunDir> {
        if !path.is_dir() {
            return Err(Error::no_run_dir(path));
        }
        let dir = RunDir {
            path: path.to_path_buf(),
            lock: Some(Arc::new(RunLock::acquire(path)?)),
        };
        dir.sweep_temporaries()?;
        Ok(dir)
    }

    /// Whether this handle holds the directory's lock.
    pub fn is_locked(&self) -> bool {
        self.lock.is_some()
    }

    /// Remove the temporary files of interrupted atomic writes (`.ppol-tmp-*`, `.tmp*`) in the
    /// directory and its subdirectories; returns how many. Only ever called under the lock, so
    /// no live writer owns them.
    fn sweep_temporaries(&self) -> Result<usize> {
        fn sweep(dir: &Path, depth: usize, removed: &mut usize) -> Result<()> {
            let entries = match std::fs::read_dir(dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(Error::io("listing", dir, e)),
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_dir() && depth > 0 {
                    sweep(&entry.path(), depth - 1, removed)?;
                } else if kind.is_file()
                    && (name.starts_with(".ppol-tmp-") || name.starts_with(".tmp"))
                {
                    match std::fs::remove_file(entry.path()) {
                        Ok(()) => *removed += 1,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(Error::io("removing", entry.path(), e)),
                    }
                }
            }
            Ok(())
        }
        let mut removed = 0;
        sweep(&self.path, 2, &mut removed)?;
        if removed > 0 {
            tracing::info!(
                dir = %self.path.display(),
                "removed {removed} temporary file(s) left by an interrupted write"
            );
        }
        Ok(removed)
    }

    /// Where a new run of `cfg` goes: `run.out`, else `<run.runs_dir>/<UTC timestamp>-<run.name>`.
    pub fn path_for(cfg: &RunConfig) -> PathBuf {
        match &cfg.run.out {
            Some(d) => d.clone(),
            None => {
                let stamp = crate::io::now_rfc3339()
                    .replace([':', '-'], "")
                    .replace('T', "-")
                    .trim_end_matches('Z')
                    .to_string();
                cfg.run.runs_dir.join(format!("{stamp}-{}", cfg.run.name))
            }
        }
    }

    /// Create the directory of a new run, lock it and write its `config.toml`. A directory
    /// that already holds a run (a `log.jsonl`) is refused, naming `ppol resume`; one another
    /// process is writing is refused naming that process.
    pub fn create(cfg: &RunConfig) -> Result<RunDir> {
        let path = RunDir::path_for(cfg);
        std::fs::create_dir_all(&path).map_err(|e| Error::io("creating directory", &path, e))?;
        let dir = RunDir::open_for_writing(&path)?;
        if dir.log_path().exists() {
            return Err(Error::Run {
                path: dir.path.clone(),
                message: "already holds a run; use `ppol resume` or choose another --out".into(),
            });
        }
        crate::io::write_atomic(&dir.config_path(), cfg.to_toml().as_bytes())?;
        Ok(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }

    /// `config.toml`.
    pub fn config_path(&self) -> PathBuf {
        self.join("config.toml")
    }

    /// The run's configuration. A missing `config.toml`, or one without a single key (the
    /// defaults would silently replace the run's settings), is an error naming the file.
    pub fn load_config(&self) -> Result<RunConfig> {
        let path = self.config_path();
        if !self.path.is_dir() {
            return Err(Error::no_run_dir(&self.path));
        }
        if std::fs::symlink_metadata(&path).is_err() {
            return Err(Error::Run {
                path: self.path.clone(),
                message: format!(
                    "{} is missing: the run's configuration is gone (restore it from the \
                     `config` of log.jsonl's run_started event)",
                    path.display()
                ),
            });
        }
        let text = crate::io::read_regular_text(
            &path,
            crate::limits::MAX_TEXT_FILE_BYTES,
            "a run's configuration",
        )?;
        let empty = toml::from_str::<toml::Table>(&text).is_ok_and(|t| t.is_empty());
        if empty {
            return Err(Error::parse(
                &path,
                "file",
                "holds no settings (empty): the run's configuration is gone; restore it (the \
                 `config` of log.jsonl's run_started event has it) rather than run on defaults",
            ));
        }
        RunConfig::from_toml_str(&text, &path)
    }

    /// `log.jsonl`.
    pub fn log_path(&self) -> PathBuf {
        self.join("log.jsonl")
    }

    /// `checkpoint.json`.
    pub fn checkpoint_path(&self) -> PathBuf {
        self.join("checkpoint.json")
    }

    /// The saved checkpoint, if any; a file that does not parse is an error naming its line.
    pub fn read_checkpoint<T: DeserializeOwned>(&self) -> Result<Option<T>> {
        let path = self.checkpoint_path();
        if !path.exists() {
            return Ok(None);
        }
        let text = crate::io::read_regular_text(
            &path,
            crate::limits::MAX_INPUT_BYTES,
            "a run's checkpoint",
        )?;
        serde_json::from_str(&text).map(Some).map_err(|e| {
            Error::parse(
                &path,
                format!("line {}", e.line()),
                format!("bad checkpoint: {e}"),
            )
        })
    }

    /// Replace the checkpoint atomically: sealed with the run's identity and a checksum
    /// ([`checkpoint::seal`]; JSON with bidi and control characters escaped, map keys too).
    pub fn write_checkpoint<T: Serialize>(&self, state: &T) -> Result<()> {
        let identity = checkpoint::RunIdentity::of_log(&self.log_path())?;
        crate::io::write_atomic(
            &self.checkpoint_path(),
            checkpoint::seal(state, identity.as_ref()).as_bytes(),
        )
    }

    /// Cut the log back to the commit point: keep the records up to sequence number `keep` (the
    /// checkpoint's), or with no checkpoint only the `run_started` line. A log already ending at
    /// the commit point is left untouched.
    pub fn truncate_log(&self, keep: Option<u64>) -> Result<()> {
        let path = self.log_path();
        if !path.exists() {
            return Ok(());
        }
        let last = keep.unwrap_or(0);
        let records = runlog::read(&path)?;
        if records.last().map(|r| r.seq) == Some(last) {
            return Ok(());
        }
        let mut text = String::new();
        for r in records
            .iter()
            .filter(|r| r.seq <= last || (keep.is_none() && r.event.kind() == "run_started"))
        {
            text.push_str(&crate::io::to_json(r));
            text.push('\n');
        }
        crate::io::write_atomic(&path, text.as_bytes())
    }

    /// Write rows as JSON lines to a file of the run (atomically).
    pub fn write_jsonl<T: Serialize>(&self, rel: impl AsRef<Path>, rows: &[T]) -> Result<()> {
        let path = self.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::io("creating directory", parent, e))?;
        }
        crate::io::write_atomic(&path, crate::io::to_jsonl(rows).as_bytes())
    }

    /// Replace `best/` with the run's best: `program.py`, `program.json` and — given the
    /// personas and episodes of its validation — `personas.jsonl` and `episodes.jsonl` (without
    /// them those two are removed: none rather than empty, or a previous best's).
    pub fn write_best<P: Serialize, E: Serialize>(
        &self,
        best: &RunBest,
        validation_records: Option<(&[P], &[E])>,
    ) -> Result<()> {
        self.write_best_program(best)?;
        let dir = self.join("best");
        let Some((personas, episodes)) = validation_records else {
            for f in ["personas.jsonl", "episodes.jsonl"] {
                match std::fs::remove_file(dir.join(f)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(Error::io("removing", dir.join(f), e))
                    }
                    _ => {}
                }
            }
            return Ok(());
        };
        self.write_jsonl("best/personas.jsonl", personas)?;
        self.write_jsonl("best/episodes.jsonl", episodes)
    }

    /// Write `best/program.py` and `best/program.json` (the validation's personas and episodes
    /// are left as they are).
    pub fn write_best_program(&self, best: &RunBest) -> Result<()> {
        let dir = self.join("best");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating directory", &dir, e))?;
        crate::io::write_atomic(&dir.join("program.py"), best.code.as_bytes())?;
        crate::io::write_atomic(
            &dir.join("program.json"),
            serde_json::to_string_pretty(&best.program_json())
                .expect("json")
                .as_bytes(),
        )
    }

    /// What `best/` holds: `program.json` with the code of `program.py` (None when either is
    /// missing or unreadable).
    pub fn read_best(&self) -> Option<RunBest> {
        let mut best = RunBest::load(&self.join("best/program.json")).ok()?;
        best.code = crate::io::read_regular_text(
            &self.join("best/program.py"),
            crate::limits::MAX_PROGRAM_BYTES,
            "a generator program",
        )
        .ok()?;
        Some(best)
    }

    /// The best program's source, or an error saying the run has not evaluated one yet.
    pub fn best_code(&self) -> Result<String> {
        let path = self.join("best/program.py");
        if std::fs::symlink_metadata(&path).is_err() {
            return Err(Error::Run {
                path: self.path.clone(),
                message: "no best/program.py: the run has not validated a program yet (or best/ \
                          was removed: `ppol resume` rebuilds it from the checkpoint)"
                    .into(),
            });
        }
        crate::io::read_regular_text(
            &path,
            crate::limits::MAX_PROGRAM_BYTES,
            "a generator program",
        )
    }
}

/// Which operator made each program that became the run's best, in the order it did: the
/// [rule](RunBest::displaces) replayed over the `validation` and
/// `validation_failed` events, counted by the operator of the program's `candidate_evaluated`
/// (seeds excluded).
pub fn new_bests(records: &[runlog::Record]) -> std::collections::BTreeMap<String, u64> {
    let mut made_by: std::collections::BTreeMap<&str, &str> = std::collections::BTreeMap::new();
    let mut held: Option<(&str, Option<&EvalMetrics>)> = None;
    let mut out = std::collections::BTreeMap::new();
    for r in records {
        let (id, metrics) = match &r.event {
            runlog::Event::CandidateEvaluated {
                program_id,
                mutation,
                ..
            } => {
                made_by.insert(program_id, mutation);
                continue;
            }
            runlog::Event::Validation {
                program_id,
                metrics,
                ..
            } => (program_id.as_str(), Some(metrics)),
            runlog::Event::ValidationFailed { program_id, .. } => (program_id.as_str(), None),
            _ => continue,
        };
        let displaces = match held {
            None => true,
            Some((_, h)) => RunBest::displaces(h, metrics),
        };
        if !displaces || held.is_some_and(|(h, _)| h == id) {
            if held.is_some_and(|(h, _)| h == id) {
                held = Some((id, metrics));
            }
            continue;
        }
        held = Some((id, metrics));
        match made_by.get(id) {
            Some(&op) if op != "seed" => *out.entry(op.to_string()).or_insert(0) += 1,
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evolve::rundir::runlog::{Event, RunLog};

    /// The rule replayed from a log: a failed validation holds the place only until one
    /// succeeds; then the highest validation wins, a later equal one taking its place; each
    /// program comes with its own train metrics, code and lineage.
    #[test]
    fn the_runs_best_replayed_from_the_log() {
        let m = |c: f64| EvalMetrics {
            combined: c,
            ..EvalMetrics::default()
        };
        let evaluated = |k: u64, parent: Option<&str>| Event::CandidateEvaluated {
            iteration: k,
            program_id: format!("p{k}"),
            parent_id: parent.map(str::to_string),
            second_parent_id: None,
            island: 0,
            mutation: if k == 1 { "seed" } else { "structural" }.into(),
            mutation_summary: format!("edit {k}"),
            prompt_fit: None,
            epoch: 0,
            batch_in_epoch: 0,
            tasks: Vec::new(),
            metrics: m(k as f64 / 10.0),
            new_elite: true,
            new_best: true,
            stage_score: None,
            bar: None,
            personas: Vec::new(),
            reflection: String::new(),
            code_hash: String::new(),
            code: format!("# program {k}"),
            seconds: 0.0,
            cost: Default::default(),
        };
        let validation = |k: u64, c: f64| Event::Validation {
            iteration: k,
            program_id: format!("p{k}"),
            metrics: m(c),
        };
        let failed = |k: u64| Event::ValidationFailed {
            iteration: k,
            program_id: format!("p{k}"),
            failure: crate::evolve::rundir::runlog::FailureInfo {
                stage: "sandbox:generate".into(),
                reason: "boom".into(),
                ..Default::default()
            },
        };
        let records = |events: Vec<Event>| -> Vec<runlog::Record> {
            events
                .into_iter()
                .enumerate()
                .map(|(i, event)| runlog::Record {
                    seq: i as u64 + 1,
                    time: String::new(),
                    event,
                })
                .collect()
        };
        let best = |events: Vec<Event>| RunBest::from_log(&records(events));
        assert_eq!(best(vec![evaluated(1, None)]), None);
        let b = best(vec![evaluated(1, None), failed(1)]).unwrap();
        assert_eq!((b.program_id.as_str(), b.validation.as_ref()), ("p1", None));
        assert_eq!(
            b.validation_failure.as_deref(),
            Some("sandbox:generate: boom")
        );
        let b = best(vec![
            evaluated(1, None),
            failed(1),
            evaluated(2, Some("p1")),
            validation(2, 0.5),
            evaluated(3, Some("p2")),
            failed(3),
            evaluated(4, Some("p2")),
            validation(4, 0.4),
        ])
        .unwrap();
        assert_eq!(b.program_id, "p2");
        assert_eq!(
            (b.train.combined, b.validation.unwrap().combined),
            (0.2, 0.5)
        );
        assert_eq!(b.lineage, ["p1", "p2"]);
        assert_eq!((b.code.as_str(), b.iteration_found), ("# program 2", 2));
        let b = best(vec![
            evaluated(1, None),
            validation(1, 0.5),
            evaluated(2, Some("p1")),
            validation(2, 0.5),
        ])
        .unwrap();
        assert_eq!(
            b.program_id, "p2",
            "a later equal validation takes the place"
        );
    }

    #[test]
    fn truncate_log_keeps_the_commit_point() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RunDir::open(tmp.path());
        let mut log = RunLog::open(&dir.log_path()).unwrap();
        for i in 1..=4 {
            log.append(Event::Checkpoint { iteration: i }).unwrap();
        }
        drop(log);
        dir.truncate_log(Some(2)).unwrap();
        let seqs: Vec<u64> = runlog::read(&dir.log_path())
            .unwrap()
            .iter()
            .map(|r| r.seq)
            .collect();
        assert_eq!(seqs, [1, 2]);
        // no checkpoint: nothing but run_started survives (here: nothing)
        dir.truncate_log(None).unwrap();
        assert!(runlog::read(&dir.log_path()).unwrap().is_empty());
    }

    #[test]
    fn the_run_lock_is_exclusive_within_a_process_and_frees_its_slot() {
        let tmp = tempfile::tempdir().unwrap();
        // more rounds than private-descriptor slots: held and refused locks both give theirs back
        for _ in 0..2 * crate::child::MAX_PRIVATE_FDS {
            let held = RunLock::acquire(tmp.path()).unwrap();
            let e = RunLock::acquire(tmp.path()).unwrap_err().to_string();
            assert!(e.contains("in use by another ppol process"), "{e}");
            drop(held);
        }
    }

    #[test]
    fn a_bad_checkpoint_names_the_file_and_line() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RunDir::open(tmp.path());
        assert!(dir
            .read_checkpoint::<serde_json::Value>()
            .unwrap()
            .is_none());
        std::fs::write(dir.checkpoint_path(), "{\n\"iteration\": \n").unwrap();
        let e = dir
            .read_checkpoint::<serde_json::Value>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("checkpoint.json") && e.contains("line 3"), "{e}");
    }
}
