//! The run directory of `ppol evolve`: what lives where, and the file operations on it.
//!
//! ```text
//! <run>/config.toml              the resolved configuration (written once, read by resume and eval)
//! <run>/log.jsonl                the run log (runlog): the source of truth for reports
//! <run>/checkpoint.json          the evolution state at the last commit point
//! <run>/human_ref.json           the human reference of the run's train humans
//! <run>/human_heldout.jsonl      human dialogues held out for `ppol eval`
//! <run>/discriminator.json       the run's discriminator
//! <run>/baseline/episodes.jsonl  persona-free episodes the discriminator was trained against
//! <run>/best/                    program.py, program.json, personas.jsonl, episodes.jsonl of the best program
//! <run>/eval-<split>.json        the `ppol eval` table of a split
//! ```
//!
//! The checkpoint is the commit point: a resumed run first cuts the log back to the checkpoint's
//! sequence number ([`RunDir::truncate_log`]), so nothing written after the last commit is kept.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;

use crate::evolve::config::RunConfig;
use crate::evolve::program::Program;
use crate::evolve::runlog::{self, EvalMetrics};
use crate::{Error, Result};

/// A run directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    path: PathBuf,
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
    /// The directory of an existing run (nothing is checked until a file is read).
    pub fn open(path: &Path) -> RunDir {
        RunDir {
            path: path.to_path_buf(),
        }
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

    /// Create the directory of a new run and write its `config.toml`. A directory that already
    /// holds a run (a `log.jsonl`) is refused, naming `ppol resume`.
    pub fn create(cfg: &RunConfig) -> Result<RunDir> {
        let dir = RunDir::open(&RunDir::path_for(cfg));
        if dir.log_path().exists() {
            return Err(Error::Run {
                path: dir.path,
                message: "already holds a run; use `ppol resume` or choose another --out".into(),
            });
        }
        std::fs::create_dir_all(&dir.path)
            .map_err(|e| Error::io("creating directory", &dir.path, e))?;
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

    /// The run's configuration.
    pub fn load_config(&self) -> Result<RunConfig> {
        RunConfig::load(&self.config_path())
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
            text.push_str(&serde_json::to_string(r).expect("serialisable"));
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
        let mut s = String::new();
        for r in rows {
            s.push_str(&serde_json::to_string(r).expect("serialisable"));
            s.push('\n');
        }
        crate::io::write_atomic(&path, s.as_bytes())
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
