//! `ppol eval`'s table as a reader gets it: the rows of [`crate::evolve::heldout::table`], and
//! evolved − seed ([`SeedComparison`]): each column's difference, the score's per-task spread
//! with its standard error and, rather than silence, why it is not shown, why evolved is the
//! seed program, and when it cannot be told from noise. [`EvalReport`] is what `ppol eval
//! --json`, `RUN_DIR/eval-<split>.json` and Python's `evaluate()` hold; [`render`] is its text.

use serde::{Deserialize, Serialize};

use crate::evolve::rundir::runlog::{EvalRow, EvalTable};
use crate::fitness::audit::AuditRow;
use crate::fitness::coverage::Dice;

/// Below this many tasks, evolved − seed cannot be told from noise whatever its standard
/// error: with 4 tasks a 95% interval is ±3.2 standard errors wide (Student's t, 3 degrees of
/// freedom), and one task can carry the mean.
pub const MIN_TASKS: usize = 5;

/// The table of `ppol eval` with evolved − seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// The rows and what they were scored on.
    #[serde(flatten)]
    pub table: EvalTable,
    /// evolved − seed.
    pub evolved_vs_seed: SeedComparison,
}

/// evolved − seed: each column's difference (on the 0–1 scale of the table), the Score's
/// per-task spread, and what a reader must know to read it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SeedComparison {
    /// HL of evolved minus that of seed (None when not shown: see `not_shown`).
    pub human_likeness: Option<f64>,
    /// Cov, evolved minus seed.
    pub coverage: Option<f64>,
    /// Score, evolved minus seed.
    pub score: Option<f64>,
    /// D1–D4 and USI (`overall`), evolved minus seed.
    pub dice: Option<Dice>,
    /// The Score's difference on each task (numeric ids in numeric order).
    pub per_task: Vec<(String, f64)>,
    /// The mean of the per-task differences (two tasks or more).
    pub per_task_mean: Option<f64>,
    /// Its standard error: the per-task differences' sample standard deviation / √tasks.
    pub standard_error: Option<f64>,
    /// Tasks on which evolved is ahead.
    pub tasks_ahead: usize,
    /// Why the difference is not shown (a row skipped, evolved is the seed program).
    pub not_shown: Option<String>,
    /// Why the run's best is its seed program, when it is.
    pub evolved_is_seed: Option<String>,
    /// Why the difference cannot be told from noise, when it cannot: fewer than
    /// [`MIN_TASKS`] tasks, or within two standard errors of 0.
    pub noise: Option<String>,
}

fn row<'a>(t: &'a EvalTable, name: &str) -> Option<&'a EvalRow> {
    t.rows.iter().find(|r| r.name == name)
}

/// evolved − seed of `table`; `evolved_is_seed` says why the run's best is its seed program,
/// when it is.
pub fn compare_to_seed(table: &EvalTable, evolved_is_seed: Option<String>) -> SeedComparison {
    let mut c = SeedComparison {
        evolved_is_seed,
        ..Default::default()
    };
    c.not_shown = differences(table, &mut c).err();
    let tasks = table.tasks.len();
    let measured = match (c.per_task_mean.or(c.score), c.standard_error) {
        (Some(d), Some(se)) => format!(" ({:+.1} pp, standard error {:.1})", 100.0 * d, 100.0 * se),
        (Some(d), None) => format!(" ({:+.1} pp)", 100.0 * d),
        _ => String::new(),
    };
    c.noise = if tasks < MIN_TASKS {
        Some(format!(
            "{tasks} test task(s) are too few to tell evolved - seed{measured} from noise: one \
             task can carry the mean; evaluate on {MIN_TASKS} or more (more tasks in the task \
             file, a larger [world] test_fraction, or --split with a larger split)"
        ))
    } else {
        match (c.per_task_mean, c.standard_error) {
            (Some(m), Some(se)) if m.abs() < 2.0 * se => Some(format!(
                "evolved - seed ({:+.1} pp) is within two standard errors ({:.1} pp) of 0 on \
                 these {tasks} tasks: it cannot be told from noise",
                100.0 * m,
                100.0 * se
            )),
            _ => None,
        }
    };
    c
}

/// Fill in `c`'s differences and per-task spread, or say why there are none.
fn differences(table: &EvalTable, c: &mut SeedComparison) -> Result<(), String> {
    let (Some(evolved), Some(seed)) = (row(table, "evolved"), row(table, "seed")) else {
        return Err("the table has no evolved or no seed row".into());
    };
    if c.evolved_is_seed.is_some() {
        return Err(
            "evolved is the seed program (the line above says why): the two rows are \
                    one program played with the same seeds"
                .into(),
        );
    }
    for r in [seed, evolved] {
        if let Some(why) = &r.skipped {
            return Err(format!("the {} row was skipped: {why}", r.name));
        }
    }
    c.human_likeness = Some(evolved.human_likeness - seed.human_likeness);
    c.coverage = Some(evolved.coverage - seed.coverage);
    c.score = Some(evolved.score - seed.score);
    let (e, s) = (evolved.dice, seed.dice);
    c.dice = Some(Dice {
        D1: e.D1 - s.D1,
        D2: e.D2 - s.D2,
        D3: e.D3 - s.D3,
        D4: e.D4 - s.D4,
        overall: e.overall - s.overall,
    });
    let mut diffs: Vec<(String, f64)> = evolved
        .per_task
        .iter()
        .filter_map(|(task, v)| seed.per_task.get(task).map(|w| (task.clone(), v - w)))
        .collect();
    // numeric ids in numeric order (5, 6, 12 rather than 12, 5, 6)
    diffs.sort_by_cached_key(|(t, _)| (t.parse::<u64>().map_err(|_| t.clone()), t.clone()));
    c.tasks_ahead = diffs.iter().filter(|(_, d)| *d > 0.0).count();
    let n = diffs.len();
    if n >= 2 {
        let mean = diffs.iter().map(|(_, d)| d).sum::<f64>() / n as f64;
        let var = diffs.iter().map(|(_, d)| (d - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        c.per_task_mean = Some(mean);
        c.standard_error = Some((var / n as f64).sqrt());
    }
    c.per_task = diffs;
    Ok(())
}

/// The text of one cell of the success column: "no reward" when the world (or, for the human
/// row, the humans' traces) gives none.
pub fn success_cell(rate: Option<f64>) -> String {
    rate.map_or("no reward".into(), |x| format!("{x:.3}"))
}

/// The table as text: the rows, evolved = which program, evolved − seed (or why not), the
/// noise warning and the legend.
pub fn render(r: &EvalReport) -> String {
    let t = &r.table;
    let mut s = format!(
        "split: {} ({} tasks); humans: {}\n{:<9} {:>6}  {:<18} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>9} {:>5}\n",
        t.split,
        t.tasks.len(),
        t.human_source.join(", "),
        "condition", "HL", "audit AUC [95%]", "Cov", "Score", "D1", "D2", "D3", "D4", "USI", "success", "n"
    );
    for row in &t.rows {
        if let Some(why) = &row.skipped {
            s.push_str(&format!("{:<9} skipped: {why}\n", row.name));
            continue;
        }
        let audit = row.audit.as_ref().map_or("-".into(), |a| {
            AuditRow::cell(a.random_forest.as_ref(), a.too_few.is_some())
        });
        let cells = [
            row.coverage,
            row.score,
            row.dice.D1,
            row.dice.D2,
            row.dice.D3,
            row.dice.D4,
            row.dice.overall,
        ]
        .map(|x| format!("{x:>6.3}"));
        s.push_str(&format!(
            "{:<9} {:>6.3}  {:<18} {} {:>9} {:>5}\n",
            row.name,
            row.human_likeness,
            audit,
            cells.join(" "),
            success_cell(row.success_rate),
            row.n_dialogues
        ));
        if let Some((got, wanted)) = row.personas_generated.filter(|(g, w)| g != w) {
            s.push_str(&format!("{:<9} scored on {got} of {wanted} personas\n", ""));
        }
    }
    for row in &t.rows {
        for f in &row.failures {
            s.push_str(&format!("{}: {f}\n", row.name));
        }
    }
    let c = &r.evolved_vs_seed;
    match (&c.evolved_is_seed, &t.best_program_id) {
        (Some(why), id) => s.push_str(&format!(
            "evolved = the run's best program{} (best/), which is still its seed program: {why}\n",
            id.as_deref().map(|i| format!(", {i}")).unwrap_or_default()
        )),
        (None, Some(id)) => {
            s.push_str(&format!("evolved = the run's best program, {id} (best/)\n"))
        }
        (None, None) => {}
    }
    s.push_str(&seed_line(c));
    if let Some(noise) = &c.noise {
        s.push_str(&format!("warning: {noise}\n"));
    }
    s.push_str(TABLE_LEGEND);
    s
}

/// The `evolved - seed: ...` line: the differences of Score and USI, the per-task spread, or
/// why they are not shown.
fn seed_line(c: &SeedComparison) -> String {
    let Some(score) = c.score else {
        return format!(
            "evolved - seed: not shown: {}\n",
            c.not_shown
                .as_deref()
                .unwrap_or("no difference was computed")
        );
    };
    let usi = c
        .dice
        .map(|d| format!(" (USI {:+.1} pp)", 100.0 * d.overall))
        .unwrap_or_default();
    let spread = match (c.per_task_mean, c.standard_error) {
        (Some(mean), Some(se)) => format!(
            "per task {:+.1} pp mean, standard error {:.1} (evolved ahead on {} of {} tasks: {})",
            100.0 * mean,
            100.0 * se,
            c.tasks_ahead,
            c.per_task.len(),
            c.per_task
                .iter()
                .map(|(t, d)| format!("{t} {:+.1}", 100.0 * d))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => "no per-task spread: a standard error needs two tasks or more".into(),
    };
    format!(
        "evolved - seed: {:+.1} pp overall{usi}; {spread}\n",
        100.0 * score
    )
}

/// What the columns and rows of the evaluation table mean (printed under it, in `ppol eval
/// --help` and the README).
pub const TABLE_LEGEND: &str = "\
HL     human-likeness by the run's objective, against the run's search humans (1 = like
       humans): `paper`, its discriminator's mean P(human); `population`, 2 x (1 - AUC) of
       classifiers refitted to tell the row's dialogues from those humans; the search
       optimised it, so it favours the run's best
audit  independent of HL: a fresh random forest trained to tell the held-out humans from the
       row's dialogues, cross-validated by task; AUC with its 95% bootstrap interval (0.5 =
       indistinguishable, 1 = always told apart; lower is more human; the human row is the
       humans against themselves in halves by task); the block under the table adds a
       logistic regression, the features that separate most and the LLM judge
Cov    coverage: how much of the human behaviour cloud the dialogues reach (Chamfer; 1 = all)
Score  (HL + Cov) / 2, the paper's Score (the search maximises lambda_h x HL + lambda_b x Cov)
D1-D4  Dice similarity to the humans' mean features: D1 communication style, D2 information
       disclosure, D3 clarification, D4 error reaction; USI = their mean. Read USI beside
       Score: the search optimises Score, USI is a second view of human-likeness it does not
success  share of episodes with reward 1 (no reward: the world, or the humans' traces, give
       none); n = dialogues scored
rows   human = the held-out humans, scored like the simulators against the reference of the
       run's other humans: not 1, because people differ and a few dialogues are a small sample
       (they reach part of the others' cloud, and a rare behaviour they happen to lack scores
       0 on its Dice feature: D3 and D4 most often); base = the simulator without a persona;
       direct = personas a model wrote from one prompt; seed = the run's first program;
       evolved = the run's best
";

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn row(name: &str, score: f64, per_task: &[(&str, f64)]) -> EvalRow {
        EvalRow {
            name: name.into(),
            human_likeness: score,
            coverage: score,
            score,
            dice: Dice {
                overall: score / 2.0,
                ..Dice::default()
            },
            success_rate: None,
            n_dialogues: 10,
            skipped: None,
            personas_generated: None,
            failures: Vec::new(),
            per_task: per_task
                .iter()
                .map(|(t, v)| (t.to_string(), *v))
                .collect::<BTreeMap<_, _>>(),
            audit: None,
            dialogues: Vec::new(),
        }
    }

    fn table(tasks: &[&str], rows: Vec<EvalRow>) -> EvalTable {
        EvalTable {
            split: "test".into(),
            tasks: tasks.iter().map(|t| t.to_string()).collect(),
            human_source: vec!["h.jsonl".into()],
            rows,
            best_program_id: Some("it00007-x".into()),
            audit: None,
        }
    }

    fn report(t: EvalTable, why: Option<&str>) -> (SeedComparison, String) {
        let c = compare_to_seed(&t, why.map(str::to_string));
        let text = render(&EvalReport {
            table: t,
            evolved_vs_seed: c.clone(),
        });
        (c, text)
    }

    #[test]
    fn the_difference_has_its_standard_error_and_a_warning_below_five_tasks() {
        let tasks = ["12", "5", "6"];
        let t = table(
            &tasks,
            vec![
                row("seed", 0.4, &[("12", 0.4), ("5", 0.4), ("6", 0.4)]),
                row("evolved", 0.5, &[("12", 0.6), ("5", 0.45), ("6", 0.45)]),
            ],
        );
        let (c, text) = report(t, None);
        assert!((c.score.unwrap() - 0.1).abs() < 1e-9);
        assert_eq!(c.per_task[0].0, "5", "numeric order");
        let se = c.standard_error.unwrap();
        assert!((100.0 * se - 5.0).abs() < 1e-6, "{se}");
        assert!(
            text.contains("evolved - seed: +10.0 pp overall (USI +5.0 pp); per task +10.0 pp mean, standard error 5.0 (evolved ahead on 3 of 3 tasks: 5 +5.0, 6 +5.0, 12 +20.0)"),
            "{text}"
        );
        assert!(
            text.contains("warning: 3 test task(s) are too few to tell evolved - seed (+10.0 pp, standard error 5.0) from noise"),
            "{text}"
        );
        assert!(text.contains("no reward"), "{text}");
        assert!(!text.contains("    -"), "{text}");
    }

    #[test]
    fn five_tasks_within_two_standard_errors_are_noise_and_outside_are_not() {
        let tasks = ["1", "2", "3", "4", "5"];
        let seed: Vec<(&str, f64)> = tasks.iter().map(|t| (*t, 0.5)).collect();
        let noisy: Vec<(&str, f64)> = tasks
            .iter()
            .zip([0.6, 0.4, 0.55, 0.45, 0.52])
            .map(|(t, v)| (*t, v))
            .collect();
        let t = table(
            &tasks,
            vec![row("seed", 0.5, &seed), row("evolved", 0.504, &noisy)],
        );
        let (c, _) = report(t, None);
        assert!(c.noise.unwrap().contains("within two standard errors"));
        let clear: Vec<(&str, f64)> = tasks.iter().map(|t| (*t, 0.6)).collect();
        let t = table(
            &tasks,
            vec![row("seed", 0.5, &seed), row("evolved", 0.6, &clear)],
        );
        assert_eq!(report(t, None).0.noise, None);
    }

    #[test]
    fn a_missing_difference_says_why() {
        let tasks = ["1", "2", "3", "4", "5"];
        let mut skipped = row("seed", 0.0, &[]);
        skipped.skipped = Some("no persona could be generated".into());
        let t = table(&tasks, vec![skipped, row("evolved", 0.5, &[])]);
        let (c, text) = report(t, None);
        assert_eq!(c.score, None);
        assert!(
            text.contains(
                "evolved - seed: not shown: the seed row was skipped: no persona could be generated"
            ),
            "{text}"
        );
        let t = table(
            &tasks,
            vec![row("seed", 0.5, &[]), row("evolved", 0.5, &[])],
        );
        let (_, text) = report(
            t,
            Some("none beat the seed: 4 child program(s) were played"),
        );
        assert!(
            text.contains("which is still its seed program: none beat the seed"),
            "{text}"
        );
        assert!(
            text.contains("evolved - seed: not shown: evolved is the seed program"),
            "{text}"
        );
    }
}
