//! `study_make` / `study_analyze`: a blinded human-judgement study (see
//! [`crate::report::study`]).

use std::path::{Path, PathBuf};

use crate::report::study::{
    self, AgentTurns, AnalyzeOptions, Condition, MakeOptions, StudyAnalysis, StudyFiles,
};
use crate::{limits, Error, Result};

/// What `ppol study make` needs.
#[derive(Debug, Clone)]
pub struct StudyMakeRequest {
    /// `NAME=FILE` specs (a name given twice collects both files).
    pub conditions: Vec<String>,
    /// Output directory (created if missing).
    pub out: PathBuf,
    /// Dialogues per condition (None: 20; 0: all).
    pub per_condition: Option<usize>,
    /// Seed of sampling and shuffle.
    pub seed: u64,
    /// Attention-check items (None: 1).
    pub attention_checks: Option<usize>,
    /// `dimmed` (default), `summary` or `hidden`.
    pub agent_turns: Option<String>,
    /// A saved discriminator whose P(human) goes into the key.
    pub discriminator: Option<PathBuf>,
    /// Page title.
    pub title: Option<String>,
    /// Keep only dialogues of this domain.
    pub domain: Option<String>,
}

/// Sample, shuffle and blind the conditions' dialogues and write the page, the Label Studio
/// files and the key into `req.out`. Nothing is written when an input is bad.
pub fn study_make(req: &StudyMakeRequest) -> Result<StudyFiles> {
    super::stop_if_resolving("study make", || serde_json::json!(format!("{req:#?}")))?;
    let conditions = Condition::merge(
        req.conditions
            .iter()
            .map(|s| Condition::parse(s))
            .collect::<Result<Vec<_>>>()?,
    );
    let defaults = MakeOptions::default();
    if let Some(n) = req.per_condition {
        limits::check("per_condition", n, 0, limits::MAX_STUDY_ITEMS)?;
    }
    if let Some(n) = req.attention_checks {
        limits::check("attention_checks", n, 0, limits::MAX_ATTENTION_CHECKS)?;
    }
    let opts = MakeOptions {
        per_condition: req.per_condition.unwrap_or(defaults.per_condition),
        seed: req.seed,
        attention_checks: req.attention_checks.unwrap_or(defaults.attention_checks),
        agent_turns: req
            .agent_turns
            .as_deref()
            .map(str::parse::<AgentTurns>)
            .transpose()?
            .unwrap_or_default(),
        discriminator: req.discriminator.clone(),
        title: req.title.clone().unwrap_or(defaults.title),
        domain: req.domain.clone(),
    };
    if req.out.is_file() {
        return Err(Error::config(
            "--out",
            format!("'{}' is a file; give a directory", req.out.display()),
        ));
    }
    let s = study::make(&conditions, &opts)?;
    study::write(&s, &req.out)
}

/// Un-blind answer files (the page's downloads or Label Studio JSON exports) with `key`.
pub fn study_analyze(
    answers: &[PathBuf],
    key: &Path,
    keep_failed_attention: bool,
) -> Result<StudyAnalysis> {
    if answers.is_empty() {
        return Err(Error::config("ANSWERS", "give at least one answer file"));
    }
    let key = study::load_key(key)?;
    let mut sheets = Vec::new();
    for a in answers {
        sheets.extend(study::load_answers(a)?);
    }
    study::analyze(
        &key,
        &sheets,
        AnalyzeOptions {
            keep_failed_attention,
        },
    )
}
