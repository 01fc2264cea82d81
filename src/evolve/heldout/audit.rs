//! The audit of Table 1 (`ppol eval`): each row's dialogues against the held-out humans, by
//! fresh classifiers independent of the run's discriminator ([`crate::fitness::audit`]) — the
//! human row is the control, the humans against themselves in halves by task — and, when the
//! run has a model, the LLM judge on the run's endpoints and budget. One step after the table
//! is built; it plays nothing.

use std::sync::Arc;

use crate::dialogue::Dialogue;
use crate::evolve::rundir::runlog::EvalTable;
use crate::fitness::audit::{
    self, human_side, judge, AuditOptions, AuditRow, AuditSetup, JudgeOptions,
};
use crate::llm::ChatModel;
use crate::rng::mix;
use crate::{Error, Result};

/// The judge of a table: a model with its options, or why there is none.
pub enum Judge {
    /// Ask this model (the run's client).
    Model(Arc<dyn ChatModel>, JudgeOptions),
    /// Not run, and why.
    Skipped(String),
}

/// Audit every row of `table` that has dialogues against `humans` and record how
/// (`table.audit`). Too few humans or dialogues give rows marked `too_few` with the counts.
pub async fn audit_table(
    table: &mut EvalTable,
    humans: &[Dialogue],
    human_source: Vec<String>,
    opts: AuditOptions,
    judge: Judge,
) -> Result<()> {
    opts.validate()?;
    // the classifiers are CPU work: off the async workers, on owned data
    let rows: Vec<(String, bool, Vec<Dialogue>)> = table
        .rows
        .iter()
        .map(|r| (r.name.clone(), r.skipped.is_none(), r.dialogues.clone()))
        .collect();
    let people = humans.to_vec();
    let audits: Vec<Option<AuditRow>> = tokio::task::spawn_blocking(move || {
        rows.iter()
            .map(|(name, ran, ds)| match (name.as_str(), ran) {
                (_, false) => None,
                ("human", true) => Some(audit::control(&people, &opts)),
                (_, true) => Some(audit::audit_pair(name, &people, ds, &opts)),
            })
            .collect()
    })
    .await
    .map_err(|e| Error::Insufficient(format!("the audit of the table failed: {e}")))?;
    for (row, a) in table.rows.iter_mut().zip(audits) {
        row.audit = a;
    }
    let note = match judge {
        Judge::Skipped(why) => why,
        Judge::Model(_, j) if j.pairs == 0 => "skipped: fitness.judge_pairs = 0".into(),
        Judge::Model(model, j) => {
            for (i, row) in table.rows.iter_mut().enumerate() {
                if row.name == "human" || row.skipped.is_some() {
                    continue;
                }
                let r = judge::judge(model.as_ref(), humans, &row.dialogues, &j, mix(2, i as u64));
                if let Some(a) = row.audit.as_mut() {
                    a.judge = Some(r.await);
                }
            }
            j.describe(&model.describe_for(judge::ROLE))
        }
    };
    table.audit = Some(AuditSetup {
        method: opts.method(),
        human: human_side(humans, human_source),
        judge: note,
    });
    Ok(())
}

/// The audit under Table 1: each row's two classifiers with intervals and its judge, the
/// features that separate most, and what the audit is (empty when the table has none).
pub fn render(t: &EvalTable) -> String {
    let Some(setup) = &t.audit else {
        return String::new();
    };
    let mut s = format!(
        "audit against {} held-out human dialogues in {} task groups (independent of HL):\n",
        setup.human.n, setup.human.n_groups
    );
    s.push_str(&format!(
        "{:<28} {:>5} {:>5}  {:<21} {:<21} {}\n",
        "condition", "n_h", "n", "forest AUC [95%]", "logistic AUC [95%]", "judge accuracy [95%]"
    ));
    for a in t.rows.iter().filter_map(|r| r.audit.as_ref()) {
        s.push_str(&audit::row_line(a));
    }
    for (r, a) in t
        .rows
        .iter()
        .filter_map(|r| r.audit.as_ref().map(|a| (r, a)))
    {
        match &a.too_few {
            Some(why) => s.push_str(&format!("{}: {why}\n", r.name)),
            None if !a.top_features.is_empty() => s.push_str(&format!(
                "{}: separated most by {}\n",
                r.name,
                audit::features_line(a)
            )),
            None => {}
        }
    }
    s.push_str(&format!(
        "audit: {}\njudge: {}\n",
        setup.method.description, setup.judge
    ));
    s
}
