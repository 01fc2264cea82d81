//! Extraction, first step: every file of a run directory the report reads, loaded and checked
//! ([`RunFiles`]). Only `log.jsonl` is required; a file that exists but does not parse is an
//! error naming the file (and the line, for JSONL files).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::evolve::rundir::RunBest;
use crate::evolve::runlog::{self, EvalTable, Record};
use crate::fitness::reference::HumanReference;
use crate::persona::Persona;
use crate::simulate::episode::record::{load_episodes, Episode};
use crate::{Error, Result};

/// Everything the report reads, loaded from a run directory. Optional files are `None` when
/// they do not exist.
#[derive(Debug, Clone)]
pub struct RunFiles {
    /// The run directory.
    pub dir: PathBuf,
    /// `log.jsonl` (required).
    pub log: Vec<Record>,
    /// `config.toml`, as text (checked to be valid TOML).
    pub config_toml: Option<String>,
    /// `human_ref.json`.
    pub human: Option<HumanReference>,
    /// Size in bytes of `discriminator.json` (checked to be valid JSON), when present.
    pub discriminator_bytes: Option<u64>,
    /// `baseline/episodes.jsonl`.
    pub baseline: Option<Vec<Episode>>,
    /// `best/program.py`.
    pub best_source: Option<String>,
    /// `best/program.json`.
    pub best_program: Option<RunBest>,
    /// `best/personas.jsonl`.
    pub best_personas: Option<Vec<Persona>>,
    /// `best/episodes.jsonl`.
    pub best_episodes: Option<Vec<Episode>>,
    /// Every `eval-<split>.json`, sorted by file name.
    pub evals: Vec<(String, EvalTable)>,
}

impl RunFiles {
    /// Load a run directory. Only `log.jsonl` must exist.
    pub fn load(dir: &Path) -> Result<RunFiles> {
        if !dir.is_dir() {
            return Err(Error::no_run_dir(dir));
        }
        let log_path = dir.join("log.jsonl");
        if !log_path.is_file() {
            return Err(Error::Run {
                path: dir.to_path_buf(),
                message: "no log.jsonl: not a ppol run directory".into(),
            });
        }
        let log = runlog::read(&log_path)?;
        let config_toml = optional(&dir.join("config.toml"), |p| {
            let text = crate::io::read_to_string(p)?;
            text.parse::<toml::Table>()
                .map_err(|e| Error::parse(p, "TOML", format!("not valid TOML: {e}")))?;
            Ok(text)
        })?;
        let human = optional(&dir.join("human_ref.json"), HumanReference::load)?;
        let discriminator_bytes = optional(&dir.join("discriminator.json"), |p| {
            let text = crate::io::read_to_string(p)?;
            parse_json::<Value>(&text, p, "not valid JSON")?;
            Ok(text.len() as u64)
        })?;
        let baseline = optional(&dir.join("baseline/episodes.jsonl"), load_episodes)?;
        let best_source = optional(&dir.join("best/program.py"), crate::io::read_to_string)?;
        let best_program = optional(&dir.join("best/program.json"), RunBest::load)?;
        let best_personas = optional(&dir.join("best/personas.jsonl"), crate::persona::read_jsonl)?;
        let best_episodes = optional(&dir.join("best/episodes.jsonl"), load_episodes)?;
        let mut evals = Vec::new();
        let entries = std::fs::read_dir(dir).map_err(|e| Error::io("listing", dir, e))?;
        let mut eval_paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                        n.starts_with("eval-") && n.ends_with(".json") && n.len() > 10
                    })
            })
            .collect();
        eval_paths.sort();
        for p in eval_paths {
            let text = crate::io::read_to_string(&p)?;
            let table: EvalTable = parse_json(&text, &p, "not a ppol eval table")?;
            let name = p.file_name().unwrap_or_default().to_string_lossy().into();
            evals.push((name, table));
        }
        Ok(RunFiles {
            dir: dir.to_path_buf(),
            log,
            config_toml,
            human,
            discriminator_bytes,
            baseline,
            best_source,
            best_program,
            best_personas,
            best_episodes,
            evals,
        })
    }
}

fn optional<T>(path: &Path, load: impl FnOnce(&Path) -> Result<T>) -> Result<Option<T>> {
    if path.exists() {
        load(path).map(Some)
    } else {
        Ok(None)
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(text: &str, path: &Path, what: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| {
        Error::parse(
            path,
            format!("line {} column {}", e.line(), e.column()),
            format!("{what}: {e}"),
        )
    })
}
