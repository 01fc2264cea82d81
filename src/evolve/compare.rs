//! `ppol eval`: the paper's Table 1 on held-out tasks — humans, the base simulator (no
//! persona), direct-prompt personas, the unevolved seed and the evolved best, each scored with
//! the same discriminator, human cloud and tasks.

use futures::future::join_all;

use crate::dialogue::Dialogue;
#[cfg(doc)]
use crate::evolve::evaluate::evaluate_candidate;
use crate::evolve::evaluate::{
    generate_all, jobs, play, rollouts, Generation, PersonaGenerator, TaskContext,
};
use crate::evolve::rundir::runlog::{EvalRow, EvalTable};
use crate::fitness::audit::AuditRow;
use crate::fitness::score::{Rollout, Scorer, Weights};
use crate::persona::Persona;
use crate::rng::mix;
use crate::simulate::episode::record::Episode;
use crate::simulate::episode::record::EpisodeStatus;
use crate::simulate::episode::EpisodeRunner;

/// A generator program to compare, or why it is not available.
pub enum Condition<'a> {
    /// Program source.
    Program(&'a str),
    /// Not available (e.g. the direct-prompt baseline needs an LLM endpoint).
    Skipped(String),
}

/// Fixed weights of the table's "score" column (the paper's 0.5/0.5).
pub const TABLE_WEIGHTS: Weights = Weights::EQUAL;

fn row_from(name: &str, episodes: &[Episode], scorer: &Scorer) -> EvalRow {
    let s = scorer.score(&rollouts(episodes), TABLE_WEIGHTS);
    let mut by_task: std::collections::BTreeMap<String, Vec<Episode>> = Default::default();
    for e in episodes {
        by_task
            .entry(e.task_id.clone())
            .or_default()
            .push(e.clone());
    }
    let per_task = if by_task.len() > 1 {
        by_task
            .iter()
            .map(|(t, es)| {
                (
                    t.clone(),
                    scorer.score(&rollouts(es), TABLE_WEIGHTS).combined,
                )
            })
            .collect()
    } else {
        Default::default()
    };
    EvalRow {
        name: name.into(),
        human_likeness: s.human_likeness,
        coverage: s.coverage,
        score: s.combined,
        dice: s.dice,
        // a world without rewards (chat, many external simulators) has no success rate
        success_rate: episodes
            .iter()
            .any(|e| e.reward.is_some())
            .then_some(s.success_rate),
        n_dialogues: s.n_scored,
        skipped: None,
        personas_generated: None,
        failures: Vec::new(),
        per_task,
        audit: None,
        dialogues: rollouts(episodes)
            .into_iter()
            .filter_map(|r| r.dialogue)
            .collect(),
    }
}

fn skipped(name: &str, why: String) -> EvalRow {
    EvalRow {
        name: name.into(),
        // numbers are not meaningful here (JSON has no NaN); `skipped` says why
        human_likeness: 0.0,
        coverage: 0.0,
        score: 0.0,
        dice: Default::default(),
        success_rate: None,
        n_dialogues: 0,
        skipped: Some(why),
        personas_generated: None,
        failures: Vec::new(),
        per_task: Default::default(),
        audit: None,
        dialogues: Vec::new(),
    }
}

/// The human row: held-out human dialogues scored like simulated ones (grouped by task).
pub fn human_row(humans: &[Dialogue], scorer: &Scorer) -> EvalRow {
    if humans.is_empty() {
        return skipped("human", "no human dialogues".into());
    }
    let as_rollouts: Vec<Rollout> = humans
        .iter()
        .map(|d| Rollout {
            task_id: d.group_key().to_string(),
            dialogue: Some(d.clone()),
            success: false, // the success rate of humans comes from their traces' rewards
        })
        .collect();
    let s = scorer.score(&as_rollouts, TABLE_WEIGHTS);
    let rewards: Vec<f64> = humans
        .iter()
        .filter_map(|d| d.meta.get("reward").and_then(|v| v.as_f64()))
        .collect();
    EvalRow {
        name: "human".into(),
        human_likeness: s.human_likeness,
        coverage: s.coverage,
        score: s.combined,
        dice: s.dice,
        success_rate: (!rewards.is_empty()).then(|| {
            rewards.iter().filter(|r| **r >= 1.0 - 1e-9).count() as f64 / rewards.len() as f64
        }),
        n_dialogues: humans.len(),
        skipped: None,
        personas_generated: None,
        failures: Vec::new(),
        per_task: Default::default(),
        audit: None,
        dialogues: humans.to_vec(),
    }
}

/// Build the table. `n` personas per task for every persona condition, and `n` persona-free
/// episodes per task for the base row.
#[allow(clippy::too_many_arguments)]
pub async fn compare(
    split: &str,
    tasks: &[TaskContext],
    n: usize,
    humans: &[Dialogue],
    human_source: Vec<String>,
    conditions: &[(&str, Condition<'_>)],
    generator: &dyn PersonaGenerator,
    runner: &dyn EpisodeRunner,
    scorer: &Scorer,
    seed: u64,
) -> EvalTable {
    let mut rows = vec![human_row(humans, scorer)];
    let base: Vec<Episode> = join_all(tasks.iter().enumerate().flat_map(|(i, t)| {
        (0..n)
            .map(move |k| runner.run(&t.task_id, None, k as u32, mix(seed, (i * 1000 + k) as u64)))
    }))
    .await;
    rows.push(row_from("base", &base, scorer));
    for (name, cond) in conditions {
        let row = match cond {
            Condition::Skipped(why) => skipped(name, why.clone()),
            Condition::Program(code) => {
                program_row(name, code, tasks, n, generator, runner, scorer, seed).await
            }
        };
        rows.push(row);
    }
    EvalTable {
        split: split.into(),
        tasks: tasks.iter().map(|t| t.task_id.clone()).collect(),
        human_source,
        rows,
        best_program_id: None,
        audit: None,
    }
}

/// A persona condition's row, task by task, through the steps of
/// [`evaluate_candidate`] (same seeds, same episodes): each task's personas are generated (a
/// task whose generation fails, or that gets fewer personas than asked, is reported, not
/// fatal), every generated persona is played, and the row scores what was played. The row is
/// skipped only when no persona at all could be generated.
#[allow(clippy::too_many_arguments)]
async fn program_row(
    name: &str,
    code: &str,
    tasks: &[TaskContext],
    n: usize,
    generator: &dyn PersonaGenerator,
    runner: &dyn EpisodeRunner,
    scorer: &Scorer,
    seed: u64,
) -> EvalRow {
    let gens = generate_all(code, tasks, n, generator, seed).await;
    let mut failures = Vec::new();
    let mut per_task: Vec<(&TaskContext, Vec<Persona>)> = Vec::new();
    for (t, g) in tasks.iter().zip(gens) {
        match g {
            Generation::Personas(mut ps) => {
                if ps.len() < n {
                    failures.push(format!(
                        "task {}: {} of {n} personas generated",
                        t.task_id,
                        ps.len()
                    ));
                }
                ps.truncate(n);
                for p in &mut ps {
                    p.task_id = Some(t.task_id.clone());
                }
                per_task.push((t, ps));
            }
            Generation::Failed(f) => failures.push(format!(
                "task {}: generation failed ({}): {}",
                t.task_id, f.stage, f.reason
            )),
            Generation::Infrastructure(why) => {
                failures.push(format!("task {}: infrastructure: {why}", t.task_id))
            }
        }
    }
    let jobs = jobs(&per_task);
    let wanted = n * tasks.len();
    if jobs.is_empty() {
        let mut row = skipped(
            name,
            format!(
                "no persona could be generated ({} task(s) failed)",
                failures.len()
            ),
        );
        row.personas_generated = Some((0, wanted));
        row.failures = failures;
        return row;
    }
    let episodes = play(runner, seed, &jobs).await;
    for e in episodes
        .iter()
        .filter(|e| e.status == EpisodeStatus::Failed)
    {
        failures.push(format!(
            "task {}: an episode failed: {}",
            e.task_id,
            e.error.as_deref().unwrap_or("(no reason)")
        ));
    }
    let mut row = row_from(name, &episodes, scorer);
    row.personas_generated = Some((jobs.len(), wanted));
    row.failures = failures;
    row
}

/// The table as text.
pub fn render_table(t: &EvalTable) -> String {
    let mut s = format!(
        "split: {} ({} tasks); humans: {}\n{:<9} {:>6} {:<19} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>5}\n",
        t.split,
        t.tasks.len(),
        t.human_source.join(", "),
        "condition", "HL", " audit AUC [95%]", "Cov", "Score", "D1", "D2", "D3", "D4", "USI", "success", "n"
    );

    for r in &t.rows {
        if let Some(why) = &r.skipped {
            s.push_str(&format!("{:<9} skipped: {why}\n", r.name));
            continue;
        }
        let f = |x: f64| format!("{:.3}", x);
        let audit = r.audit.as_ref().map_or("-".into(), |a| {
            AuditRow::cell(a.random_forest.as_ref(), a.too_few.is_some())
        });
        s.push_str(&format!(
            "{:<9} {:>6}  {:<18} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>5}\n",
            r.name,
            f(r.human_likeness),
            audit,
            f(r.coverage),
            f(r.score),
            f(r.dice.D1),
            f(r.dice.D2),
            f(r.dice.D3),
            f(r.dice.D4),
            f(r.dice.overall),
            r.success_rate.map_or("-".into(), f),
            r.n_dialogues
        ));
        if let Some((got, wanted)) = r.personas_generated.filter(|(g, w)| g != w) {
            s.push_str(&format!("{:<9} scored on {got} of {wanted} personas\n", ""));
        }
    }
    for r in &t.rows {
        for f in &r.failures {
            s.push_str(&format!("{}: {f}\n", r.name));
        }
    }
    if let Some(id) = &t.best_program_id {
        s.push_str(&format!("evolved = the run's best program, {id} (best/)\n"));
    }
    if let Some(line) = spread_line(t) {
        s.push_str(&line);
    }
    s.push_str(TABLE_LEGEND);
    s
}

/// evolved − seed in points with its spread over tasks: the mean of the per-task differences,
/// each task's difference, and on how many tasks evolved is ahead (how sure the difference
/// is: with 3 tasks one task can carry it).
pub fn spread_line(t: &EvalTable) -> Option<String> {
    let row = |n: &str| t.rows.iter().find(|r| r.name == n && r.skipped.is_none());
    let (e, s) = (row("evolved")?, row("seed")?);
    let diffs: Vec<(String, f64)> = e
        .per_task
        .iter()
        .filter_map(|(task, v)| {
            s.per_task
                .get(task)
                .map(|w| (task.clone(), 100.0 * (v - w)))
        })
        .collect();
    if diffs.len() < 2 {
        return None;
    }
    // numeric ids in numeric order (5, 6, 12 rather than 12, 5, 6)
    let mut diffs = diffs;
    diffs.sort_by_cached_key(|(t, _)| (t.parse::<u64>().map_err(|_| t.clone()), t.clone()));
    let n = diffs.len() as f64;
    let mean = diffs.iter().map(|(_, d)| d).sum::<f64>() / n;
    let sd = (diffs.iter().map(|(_, d)| (d - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    let ahead = diffs.iter().filter(|(_, d)| *d > 0.0).count();
    Some(format!(
        "evolved - seed: {:+.1} pp overall; per task {:+.1} pp mean, standard error {:.1} \
         (evolved ahead on {ahead} of {} tasks: {})\n",
        100.0 * (e.score - s.score),
        mean,
        sd / n.sqrt(),
        diffs.len(),
        diffs
            .iter()
            .map(|(t, d)| format!("{t} {d:+.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// What the columns of the evaluation table mean (printed under it, in `ppol eval --help` and
/// the README).
pub const TABLE_LEGEND: &str = "\
HL     human-likeness: the run's own discriminator's mean P(human) of the dialogues (1 = like
       humans); the search optimised it, so a program can climb it by the forest's quirks
audit  independent of HL: a fresh random forest trained to tell the held-out humans from the
       row's dialogues, cross-validated by task; AUC with its 95% bootstrap interval (0.5 =
       indistinguishable, 1 = always told apart; lower is more human; the human row is the
       humans against themselves in halves by task); the block under the table adds a
       logistic regression, the features that separate most and the LLM judge
Cov    coverage: how much of the human behaviour cloud the dialogues reach (Chamfer; 1 = all)
Score  lambda_h x HL + lambda_b x Cov, the fitness the search maximises
D1-D4  Dice similarity to the humans' mean features: D1 communication style, D2 information
       disclosure, D3 clarification, D4 error reaction; USI = their mean
success  share of episodes with reward 1 (- when the world gives no reward); n = dialogues
rows   human = the held-out humans; base = the simulator without a persona; direct = personas
       a model wrote from one prompt; seed = the run's first program; evolved = the run's best
";
