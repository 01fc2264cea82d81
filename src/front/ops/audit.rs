//! `ppol audit` / `ppol_rs.audit`: the independent audit of human-likeness (see
//! [`crate::fitness::audit`]) of trace files or dialogues against humans, with the optional LLM
//! judge when a model is given.

use std::path::PathBuf;

use crate::dialogue::Dialogue;
use crate::fitness::audit::{self, judge, AuditOptions, AuditReport, JudgeOptions};
use crate::fitness::features::FeatureSet;
use crate::fitness::traces::Skipped;
use crate::front::ops::{block_on, load_traces, TraceSource};
use crate::llm::{ChatModel, LlmClient, LlmConfig};
use crate::rng::mix;
use crate::Result;

/// What `ppol audit` needs. `None` takes the default ([`AuditOptions`], [`JudgeOptions`]).
#[derive(Debug, Clone)]
pub struct AuditRequest {
    /// The humans.
    pub human: TraceSource,
    /// Keep only human dialogues of this domain (τ-USI files mix airline and retail).
    pub human_domain: Option<String>,
    /// The conditions to audit, by name.
    pub candidates: Vec<(String, TraceSource)>,
    /// Feature set (default `ppol-0.1.1`).
    pub feature_set: Option<FeatureSet>,
    /// Folds (default [`AuditOptions::FOLDS`]).
    pub folds: Option<usize>,
    /// Bootstrap resamples (default [`AuditOptions::BOOTSTRAP`]).
    pub bootstrap: Option<usize>,
    /// Seed (default [`AuditOptions::SEED`]).
    pub seed: Option<u64>,
    /// The judge's model (None: no judge, and the report says so).
    pub llm: Option<LlmConfig>,
    /// Judge pairs per condition (default [`JudgeOptions::PAIRS`]; 0 = no judge).
    pub judge_pairs: Option<usize>,
    /// The judge's prompt file (default: the shipped `fitness/judge_prompt.md`).
    pub judge_prompt: Option<PathBuf>,
}

impl AuditRequest {
    /// Default of `--llm` (Python: `llm=None`): no judge.
    pub const LLM: &'static str = "offline";

    /// The audit's options, checked against [`crate::limits`].
    pub fn options(&self) -> Result<AuditOptions> {
        let d = AuditOptions::default();
        let opts = AuditOptions {
            feature_set: self.feature_set.unwrap_or(d.feature_set),
            folds: self.folds.unwrap_or(d.folds),
            bootstrap: self.bootstrap.unwrap_or(d.bootstrap),
            seed: self.seed.unwrap_or(d.seed),
        };
        opts.validate()?;
        Ok(opts)
    }
}

/// Load the humans and every condition, audit each against the humans (with the control), and
/// ask the judge when a model is given. Returns the report and the dialogues the loads left
/// out (no user text) for the front end to warn about.
///
/// # Errors
/// A bad trace file (naming it); too few humans ([`crate::Error::Insufficient`] with the
/// counts); a bad option or judge prompt ([`crate::Error::Config`] naming it).
pub fn audit(req: &AuditRequest) -> Result<(AuditReport, Vec<Skipped>)> {
    let opts = req.options()?;
    let pairs = req.judge_pairs.unwrap_or(JudgeOptions::PAIRS);
    // resolved: every option with its default applied, whichever front end left it unset
    super::stop_if_resolving("audit", || {
        let resolved = AuditRequest {
            feature_set: Some(opts.feature_set),
            folds: Some(opts.folds),
            bootstrap: Some(opts.bootstrap),
            seed: Some(opts.seed),
            judge_pairs: Some(pairs),
            ..req.clone()
        };
        serde_json::json!(format!("{resolved:#?}"))
    })?;
    let judge_opts = JudgeOptions::new(pairs, req.judge_prompt.as_deref(), opts.seed)?;
    let humans = load_traces(&req.human, req.human_domain.as_deref())?;
    let mut skipped = humans.skipped;
    let mut candidates: Vec<(String, Vec<Dialogue>)> = Vec::new();
    for (name, source) in &req.candidates {
        let loaded = load_traces(source, None)?;
        skipped.extend(loaded.skipped);
        candidates.push((name.clone(), loaded.dialogues));
    }
    let client = req.llm.as_ref().map(LlmClient::from_config).transpose()?;
    let mut report = audit::audit(&humans.dialogues, req.human.describe(), &candidates, &opts)?;
    match (&client, pairs) {
        (None, _) => {}
        (Some(_), 0) => report.judge = "skipped: --judge-pairs 0".into(),
        (Some(c), _) => {
            let model: &dyn ChatModel = c;
            report.judge = judge_opts.describe(&model.describe_for(judge::ROLE));
            let human = &humans.dialogues;
            let results = block_on(async {
                let mut out = Vec::new();
                for (i, (_, ds)) in candidates.iter().enumerate() {
                    out.push(judge::judge(model, human, ds, &judge_opts, mix(1, i as u64)).await);
                }
                out
            })?;
            for (row, r) in report.rows.iter_mut().zip(results) {
                row.judge = Some(r);
            }
        }
    }
    Ok((report, skipped))
}
