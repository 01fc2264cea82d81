//! The run directory of `ppol evolve`: what lives where, and the file operations on it.
//!
//! ```text
//! <run>/run.lock                 held (`flock`) by the one process writing the run: pid, host, start
//! <run>/config.toml              the resolved configuration (written once, read by resume and eval)
//! <run>/log.jsonl                the run log (runlog): the source of truth for reports
//! <run>/checkpoint.json          the evolution state at the last commit point
//! <run>/human_ref.json           the human reference of the run's train humans
//! <run>/human_heldout.jsonl      human dialogues held out for `ppol eval`
//! <run>/discriminator.json       the run's discriminator
//! <run>/baseline/episodes.jsonl  persona-free episodes the discriminator was trained against
//! <run>/baseline/partial.jsonl   the same, appended as they finish, until all are played
//! <run>/costs.jsonl              the LLM cost ledger: the run's totals after every call (ledger)
//! <run>/best/                    program.py, program.json, personas.jsonl, episodes.jsonl of the best program
//! <run>/eval-<split>.json        the `ppol eval` table of a split
//! ```
//!
//! The checkpoint is the commit point: a resumed run first cuts the log back to the checkpoint's
//! sequence number ([`RunDir::truncate_log`]), so nothing written after the last commit is kept.
//!
//! A run directory has one writer at a time: [`RunDir::create`] and [`RunDir::open_for_writing`]
//! take an exclusive `flock` on `run.lock` and keep it until the run ends (the kernel releases
//! it when the process dies, kill -9 included, so there is no stale lock to clean). Readers
//! (`ppol report`, `ppol eval`) use [`RunDir::open`] and never take it. Under the lock, the
//! temporary files a killed writer left (`.ppol-tmp-*`, `.tmp*`) are swept.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;

use crate::evolve::config::RunConfig;
use crate::evolve::program::Program;
use crate::evolve::runlog::{self, EvalMetrics};
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
/// process dies).
#[derive(Debug)]
pub struct RunLock {
    _file: std::fs::File,
}

/// Name of the lock file in a run directory.
pub const LOCK_FILE: &str = "run.lock";

impl RunLock {
    /// Take the lock of `dir` without waiting. Held by another process (or another handle in
    /// this one): an error naming the directory and the holder's pid, host and start time.
    pub fn acquire(dir: &Path) -> Result<RunLock> {
        use std::io::{Read, Seek, Write};
        let path = dir.join(LOCK_FILE);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io("opening", &path, e))?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
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
        Ok(RunLock { _file: file })
    }
}

/// What `best/` holds about the best program.
pub struct Best<'a, P: Serialize, E: Serialize> {
    /// The program.
    pub program: &'a Program,
    /// Its train metrics.
    pub train: &'a EvalMetrics,
    /// Its validation metrics, or why validation could not score it.
    pub validation: std::result::Result<&'a EvalMetrics, &'a str>,
    /// Program ids from the seed down to this program.
    pub lineage: Vec<String>,
    /// The personas of its validation evaluation.
    pub personas: &'a [P],
    /// The episodes of its validation evaluation.
    pub episodes: &'a [E],
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
            return Err(Error::Run {
                path: path.to_path_buf(),
                message: "not a directory (expected a run directory made by `ppol evolve`)".into(),
            });
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
        if !path.is_file() {
            return Err(Error::Run {
                path: self.path.clone(),
                message: format!(
                    "{} is missing: the run's configuration is gone (restore it from the \
                     `config` of log.jsonl's run_started event)",
                    path.display()
                ),
            });
        }
        let text = crate::io::read_to_string(&path)?;
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
        let text = crate::io::read_to_string(&path)?;
        serde_json::from_str(&text).map(Some).map_err(|e| {
            Error::parse(
                &path,
                format!("line {}", e.line()),
                format!("bad checkpoint: {e}"),
            )
        })
    }

    /// Replace the checkpoint atomically.
    pub fn write_checkpoint<T: Serialize>(&self, state: &T) -> Result<()> {
        crate::io::write_atomic(
            &self.checkpoint_path(),
            serde_json::to_string(state)
                .expect("the checkpoint is serialisable")
                .as_bytes(),
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

    /// Replace `best/` with the new best program.
    pub fn write_best<P: Serialize, E: Serialize>(&self, best: &Best<'_, P, E>) -> Result<()> {
        let dir = self.join("best");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating directory", &dir, e))?;
        crate::io::write_atomic(&dir.join("program.py"), best.program.code.as_bytes())?;
        let (validation, failure) = match best.validation {
            Ok(m) => (json!(m), serde_json::Value::Null),
            Err(why) => (serde_json::Value::Null, json!(why)),
        };
        let info = json!({
            "program_id": best.program.id.0,
            "metrics": best.train,
            "validation": validation,
            "validation_failure": failure,
            "lineage": best.lineage,
            "mutation": best.program.mutation,
            "iteration_found": best.program.iteration_found,
        });
        crate::io::write_atomic(
            &dir.join("program.json"),
            serde_json::to_string_pretty(&info)
                .expect("json")
                .as_bytes(),
        )?;
        if best.validation.is_err() {
            // no validation personas or episodes: none rather than empty (or a previous best's)
            for f in ["personas.jsonl", "episodes.jsonl"] {
                match std::fs::remove_file(dir.join(f)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(Error::io("removing", dir.join(f), e))
                    }
                    _ => {}
                }
            }
            return Ok(());
        }
        self.write_jsonl("best/personas.jsonl", best.personas)?;
        self.write_jsonl("best/episodes.jsonl", best.episodes)
    }

    /// The best program's source, or an error saying the run has not evaluated one yet.
    pub fn best_code(&self) -> Result<String> {
        crate::io::read_to_string(&self.join("best/program.py")).map_err(|_| Error::Run {
            path: self.path.clone(),
            message: "no best/program.py yet: the run has not evaluated a program".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evolve::runlog::{Event, RunLog};

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
