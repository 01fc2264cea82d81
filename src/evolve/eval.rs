//! `ppol eval RUN_DIR`: the paper's Table 1 for a run, on held-out tasks — humans, the base
//! simulator, direct-prompt personas, the seed program and the run's best program, each
//! scored with the run's own human reference and discriminator ([`compare`] builds the
//! table), then audited against the held-out humans independently of that discriminator
//! ([`crate::evolve::table_audit`]). The table is written to `RUN_DIR/eval-<split>.json`.

use std::path::{Path, PathBuf};

use crate::evolve::compare::{compare, render_table, Condition};
use crate::evolve::context::RunContext;
use crate::evolve::rundir::runlog::EvalTable;
use crate::evolve::rundir::RunDir;
use crate::evolve::table_audit::{audit_table, Judge};
use crate::fitness::audit::{AuditOptions, JudgeOptions};
use crate::fitness::discriminator::Discriminator;
use crate::fitness::reference::HumanReference;
use crate::fitness::score::Scorer;
use crate::fitness::traces::{self, LoadOptions};
use crate::rng::derive_seed;
use crate::shipped::DIRECT_SEED;
use crate::{Error, Result};

/// `ppol eval RUN_DIR`: the Table-1 comparison on the tasks of `split` (default: the run's
/// `test_split`), against `human` traces (default: the humans the run held out), with
/// `n_personas` per task (default: the run's final N).
pub async fn evaluate_run(
    dir: &Path,
    split: Option<&str>,
    human: &[PathBuf],
    n_personas: Option<usize>,
) -> Result<EvalTable> {
    let run = RunDir::open(dir);
    let cfg = run.load_config()?;
    let split = split.unwrap_or(&cfg.run.test_split).to_string();
    // the id names the code evaluated: both from best/
    let (best_code, best_program_id) = crate::evolve::rundir::summary::best_code(&run)?;
    let mut eval_cfg = cfg.clone();
    eval_cfg.run.test_split = split.clone();
    let ctx = RunContext::new(eval_cfg, run.clone()).await?;
    let reference = HumanReference::load(&run.join("human_ref.json"))?;
    let discriminator = Discriminator::load(&run.join("discriminator.json"))?;
    let scorer = Scorer::new(reference, discriminator, cfg.fitness.coverage())?;
    let (humans, human_source) = if human.is_empty() {
        let held = run.join("human_heldout.jsonl");
        let ds = if std::fs::metadata(&held).is_ok_and(|m| m.len() > 0) {
            traces::load(&held, &LoadOptions::default())?
        } else {
            Vec::new()
        };
        (
            ds,
            vec![format!("{} (held out by the run)", held.display())],
        )
    } else {
        (
            traces::load_many(
                human,
                &LoadOptions {
                    domain: cfg.run.human_domain.clone(),
                },
            )?,
            human.iter().map(|p| p.display().to_string()).collect(),
        )
    };
    let ids: Vec<String> = ctx.world.select(&split)?;
    let tasks = ctx.contexts(&ids);
    if tasks.is_empty() {
        return Err(Error::config(
            "--split",
            format!("split '{split}' has no tasks"),
        ));
    }
    let direct = if ctx.client.is_some() {
        Condition::Program(DIRECT_SEED)
    } else {
        Condition::Skipped("the direct-prompt baseline needs an LLM endpoint (offline run)".into())
    };
    let conditions = [
        ("direct", direct),
        ("seed", Condition::Program(&ctx.seed_code)),
        ("evolved", Condition::Program(&best_code)),
    ];
    let mut table = compare(
        &split,
        &tasks,
        n_personas.unwrap_or(cfg.fitness.n_personas),
        &humans,
        human_source.clone(),
        &conditions,
        &ctx.generator,
        ctx.val_runner.as_ref(),
        &scorer,
        derive_seed(cfg.search.seed, "eval"),
    )
    .await;
    ctx.world.shutdown().await;
    table.best_program_id = best_program_id;
    let judge = match ctx.model() {
        None => Judge::Skipped(
            "skipped: an offline run (no model configured); a run with an [llm] section asks \
             its model"
                .into(),
        ),
        Some(model) => Judge::Model(
            model,
            JudgeOptions::new(
                cfg.fitness.judge_pairs,
                cfg.fitness.judge_prompt.as_deref(),
                derive_seed(cfg.search.seed, "judge"),
            )?,
        ),
    };
    let audit = AuditOptions {
        feature_set: cfg.run.feature_set,
        seed: derive_seed(cfg.search.seed, "audit"),
        bootstrap: cfg.fitness.audit_bootstrap,
        ..AuditOptions::default()
    };
    audit_table(&mut table, &humans, human_source, audit, judge).await?;
    crate::io::write_atomic(
        &run.join(format!("eval-{split}.json")),
        serde_json::to_string_pretty(&table)
            .expect("json")
            .as_bytes(),
    )?;
    Ok(table)
}

/// The evaluation table rendered as text (for the CLI), with its audit under it.
pub fn table_text(t: &EvalTable) -> String {
    render_table(t) + &crate::evolve::table_audit::render(t)
}
