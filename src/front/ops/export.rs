//! `export_sft`: episodes as agent-hardening training records.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::Serialize;

use super::load_domain;
use crate::llm::ToolSpec;
pub use crate::simulate::export::SftFormat;
use crate::{Error, Result};

/// What `ppol export sft` needs.
pub struct ExportRequest {
    /// Episode files.
    pub episodes: Vec<PathBuf>,
    /// Every episode that ran, not only successful ones.
    pub all: bool,
    /// τ² data directory (for the domain's policy and tool schemas).
    pub tau2_data: Option<PathBuf>,
    /// Share of persona clusters held out (0 = none).
    pub heldout_fraction: f64,
    /// Seed of the hold-out.
    pub seed: u64,
    /// Record format (default `ppol`).
    pub format: SftFormat,
}

/// Training records and a summary.
#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    /// Records for training.
    pub train: Vec<serde_json::Value>,
    /// Records of held-out personas.
    pub heldout: Vec<serde_json::Value>,
    /// Held-out persona ids.
    pub heldout_personas: Vec<String>,
    /// Episodes read.
    pub n_episodes: usize,
    /// pass^k and success per persona cluster.
    pub clusters: Vec<crate::simulate::export::ClusterSummary>,
}

/// Turn episodes into chat fine-tuning records from the agent's point of view, in
/// `req.format`; personas held out by `req.heldout_fraction` go to `heldout` in every format.
pub fn export_sft(req: &ExportRequest) -> Result<ExportReport> {
    use crate::simulate::export::{held_out, selected, sft_record_as, Selection};
    if !(req.heldout_fraction.is_finite() && (0.0..1.0).contains(&req.heldout_fraction)) {
        return Err(Error::config(
            "--heldout-fraction",
            format!("must be in [0, 1), got {}", req.heldout_fraction),
        ));
    }
    let sel = if req.all {
        Selection::All
    } else {
        Selection::Successful
    };
    let mut loaded = Vec::new();
    let mut origin = Vec::new();
    for (i, path) in req.episodes.iter().enumerate() {
        let eps = crate::simulate::episode::record::load_episodes(path)?;
        origin.extend(std::iter::repeat_n(i, eps.len()));
        loaded.extend(eps);
    }
    if loaded.is_empty() {
        return Err(Error::Insufficient(format!(
            "no episodes in {}",
            req.episodes
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let mut domains: std::collections::HashMap<String, (String, Vec<ToolSpec>)> =
        Default::default();
    let mut report = ExportReport {
        train: Vec::new(),
        heldout: Vec::new(),
        heldout_personas: Vec::new(),
        n_episodes: loaded.len(),
        clusters: crate::simulate::export::cluster_summaries(&loaded),
    };
    let mut held_ids = BTreeSet::new();
    for (e, &file) in loaded.iter().zip(&origin).filter(|(e, _)| selected(e, sel)) {
        if !domains.contains_key(&e.domain) {
            let d = load_domain(&e.domain, req.tau2_data.as_deref())?;
            domains.insert(
                e.domain.clone(),
                (
                    crate::simulate::episode::llm::agent_system_prompt(&d.policy),
                    d.env().tools(),
                ),
            );
        }
        let (system, tools) = &domains[&e.domain];
        let record = sft_record_as(req.format, e, system, tools)
            .map_err(|why| Error::parse(&req.episodes[file], format!("episode '{}'", e.id), why))?;
        if held_out(&e.persona_id, req.heldout_fraction, req.seed) {
            held_ids.insert(e.persona_id.clone());
            report.heldout.push(record);
        } else {
            report.train.push(record);
        }
    }
    report.heldout_personas = held_ids.into_iter().collect();
    Ok(report)
}
