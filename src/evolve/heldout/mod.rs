//! `ppol eval RUN_DIR`: the paper's Table 1 for a run, on held-out tasks — humans, the base
//! simulator, direct-prompt personas, the seed program and the run's best program, each
//! scored with the run's own human reference and discriminator ([`compare`] builds the
//! table), audited against the held-out humans independently of that discriminator
//! ([`crate::evolve::heldout::audit`]), with evolved − seed ([`crate::evolve::heldout::text`]). The
//! table is written to `RUN_DIR/eval-<split>.json`; each row's personas and episodes to
//! `RUN_DIR/eval-<split>/` as they are made (`base.jsonl`, `seed.jsonl`, `seed.personas.json`,
//! ...), so an interrupted eval reruns only what is missing.

pub mod audit;
pub mod table;
pub mod text;

use std::path::{Path, PathBuf};

use crate::dialogue::Dialogue;
use crate::evolve::context::RunContext;
use crate::evolve::rundir::RunDir;
use crate::fitness::audit::{AuditOptions, JudgeOptions};
use crate::fitness::discriminator::Discriminator;
use crate::fitness::reference::HumanReference;
use crate::fitness::score::Scorer;
use crate::fitness::traces::{self, LoadOptions};
use crate::rng::derive_seed;
use crate::shipped::DIRECT_SEED;
use crate::{Error, Result};
use audit::{audit_table, Judge};
use table::{compare, Condition};
use text::{compare_to_seed, render, EvalReport};

/// `ppol eval RUN_DIR`: the Table-1 comparison on the tasks of `split` (default: the run's
/// `test_split`), against `human` traces (default: the humans the run held out), with
/// `n_personas` per task (default: the run's final N).
pub async fn evaluate_run(
    dir: &Path,
    split: Option<&str>,
    human: &[PathBuf],
    n_personas: Option<usize>,
    progress: Option<&(dyn Fn(&crate::simulate::batch::Progress) + Sync)>,
) -> Result<EvalReport> {
    let here = crate::simulate::world::ray::Placement::default();
    evaluate_run_at(dir, split, human, n_personas, &here, progress).await
}

/// [`evaluate_run`] with the simulators played where `placement` says (over the run's own
/// `[world] executor` and `[world.ray] address`).
pub async fn evaluate_run_at(
    dir: &Path,
    split: Option<&str>,
    human: &[PathBuf],
    n_personas: Option<usize>,
    placement: &crate::simulate::world::ray::Placement,
    progress: Option<&(dyn Fn(&crate::simulate::batch::Progress) + Sync)>,
) -> Result<EvalReport> {
    let run = RunDir::open(dir);
    let mut cfg = run.load_config()?;
    if !placement.is_empty() {
        placement.apply(&mut cfg.world)?;
        cfg.validate()?;
    }
    let split = split.unwrap_or(&cfg.run.test_split).to_string();
    // the id names the code evaluated: both from best/
    let (best_code, best_program_id) = crate::evolve::rundir::summary::best_code(&run)?;
    let mut eval_cfg = cfg.clone();
    eval_cfg.run.test_split = split.clone();
    let ctx = RunContext::new(eval_cfg, run.clone()).await?;
    let reference = HumanReference::load(&run.join("human_ref.json"))?;
    let discriminator = Discriminator::load(&run.join("discriminator.json"))?;
    let scorer = Scorer::new(reference, discriminator, cfg.fitness.coverage())?
        .with_objective(cfg.fitness.objective)?;
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
        let loaded = traces::load_many(
            human,
            &LoadOptions {
                domain: cfg.run.human_domain.clone(),
            },
        )?;
        let (kept, note) = unseen_humans(&run, loaded)?;
        let mut source: Vec<String> = human.iter().map(|p| p.display().to_string()).collect();
        source.extend(note);
        (kept, source)
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
    // one eval of a split at a time keeps the rows' files
    let keep = run.join(format!("eval-{}", file_safe(&split)));
    std::fs::create_dir_all(&keep).map_err(|e| Error::io("creating directory", &keep, e))?;
    let _lock = crate::evolve::rundir::RunLock::acquire(&keep)?;
    let table = compare(
        &split,
        &tasks,
        n_personas.unwrap_or(cfg.fitness.n_personas),
        &humans,
        human_source.clone(),
        &conditions,
        &ctx.generator,
        ctx.play(true, "eval", progress),
        &scorer,
        derive_seed(cfg.search.seed, "eval"),
        Some(&keep),
    )
    .await;
    ctx.world.shutdown().await;
    let mut table = table?;
    // evolved is the seed program: the log says why (no mutation landed, none beat it)
    let evolved_is_seed = match &best_program_id {
        Some(id) => crate::evolve::rundir::runlog::read(&run.log_path())
            .ok()
            .and_then(|log| crate::evolve::rundir::summary::seed_still_best(&log, id)),
        None => (best_code == ctx.seed_code)
            .then(|| "best/program.py is the seed program's code".to_string()),
    };
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
    let report = EvalReport {
        evolved_vs_seed: compare_to_seed(&table, evolved_is_seed),
        table,
    };
    crate::io::write_atomic(
        &run.join(format!("eval-{}.json", file_safe(&split))),
        serde_json::to_string_pretty(&report)
            .expect("json")
            .as_bytes(),
    )?;
    Ok(report)
}

/// The given humans without those the run searched on, recognised by content
/// ([`Dialogue::content_sha256`] against `human_seen.sha256`; a run made before that file
/// existed is matched by task and fingerprint against `human_ref.json`), and a note saying how
/// many were left out (None when none were).
fn unseen_humans(run: &RunDir, given: Vec<Dialogue>) -> Result<(Vec<Dialogue>, Option<String>)> {
    let seen_path = run.join(crate::evolve::rundir::SEEN_HUMANS);
    let n = given.len();
    let kept: Vec<Dialogue> = if seen_path.exists() {
        let text = crate::io::read_to_string(&seen_path)?;
        let seen: std::collections::HashSet<&str> = text.lines().map(str::trim).collect();
        given
            .into_iter()
            .filter(|d| !seen.contains(d.content_sha256().as_str()))
            .collect()
    } else {
        let reference = HumanReference::load(&run.join("human_ref.json"))?;
        let seen: std::collections::HashSet<(Option<&str>, Vec<u64>)> = reference
            .fingerprints
            .iter()
            .map(|r| {
                (
                    r.task_id.as_deref(),
                    r.features.iter().map(|x| x.to_bits()).collect(),
                )
            })
            .collect();
        given
            .into_iter()
            .filter(|d| {
                let f = crate::fitness::features::fingerprint(d, reference.feature_set);
                !seen.contains(&(
                    d.task_id.as_deref(),
                    f.0.iter().map(|x| x.to_bits()).collect(),
                ))
            })
            .collect()
    };
    let left_out = n - kept.len();
    Ok((
        kept,
        (left_out > 0).then(|| {
            format!(
                "{left_out} of the {n} given dialogues left out: the run searched on them \
                 (recognised by content), so they are neither the human row nor the audit's humans"
            )
        }),
    ))
}

/// A split's name as part of a file name: characters other than letters, digits, `.`, `_`
/// and `-` become `_` (a split may be a list of task ids, and never a path).
pub fn file_safe(split: &str) -> String {
    let s: String = split
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.starts_with('.') {
        format!("_{s}")
    } else {
        s
    }
}

/// The evaluation table rendered as text (for the CLI), with its audit under it.
pub fn table_text(r: &EvalReport) -> String {
    render(r) + &crate::evolve::heldout::audit::render(&r.table)
}
