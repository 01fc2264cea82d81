//! `ppol eval`: the paper's Table 1 on held-out tasks — humans, the base simulator (no
//! persona), direct-prompt personas, the unevolved seed and the evolved best, each scored with
//! the same discriminator, human cloud and tasks. Each row's episodes are played through the
//! batch layer; with a directory to keep them in, every row's personas and episodes are kept
//! there as they are made, so an interrupted `ppol eval` reruns only what is missing.

use std::path::Path;

use crate::dialogue::Dialogue;
#[cfg(doc)]
use crate::evolve::evaluate::evaluate_candidate;
use crate::evolve::evaluate::{
    generate_all, jobs, planned_jobs, play_into, rollouts, Generation, PersonaGenerator, Play,
    TaskContext,
};
use crate::evolve::rundir::runlog::{EvalRow, EvalTable};
use crate::fitness::score::{Rollout, Scorer, Weights};
use crate::persona::Persona;
use crate::rng::mix;
use crate::simulate::batch::{self, SinkPaths};
use crate::simulate::episode::record::Episode;
use crate::simulate::episode::record::EpisodeStatus;
use crate::Result;

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
/// episodes per task for the base row. With `keep`, each row's episodes go to
/// `keep/<row>.jsonl` and its personas to `keep/<row>.personas.json`.
/// Errors: the kept files only.
#[allow(clippy::too_many_arguments)]
pub async fn compare(
    split: &str,
    tasks: &[TaskContext],
    n: usize,
    humans: &[Dialogue],
    human_source: Vec<String>,
    conditions: &[(&str, Condition<'_>)],
    generator: &dyn PersonaGenerator,
    play: Play<'_>,
    scorer: &Scorer,
    seed: u64,
    keep: Option<&Path>,
) -> Result<EvalTable> {
    let mut rows = vec![human_row(humans, scorer)];
    let base_jobs: Vec<batch::Job> = tasks
        .iter()
        .enumerate()
        .flat_map(|(i, t)| {
            (0..n).map(move |k| batch::Job {
                task_id: t.task_id.clone(),
                persona: None,
                trial: k as u32,
                seed: mix(seed, (i * 1000 + k) as u64),
            })
        })
        .collect();
    let base = play_into(
        play.labelled("eval: base"),
        &base_jobs,
        keep.map(|d| row_sink(d, "base")),
    )
    .await?;
    rows.push(row_from("base", &base, scorer));
    for (name, cond) in conditions {
        let row = match cond {
            Condition::Skipped(why) => skipped(name, why.clone()),
            Condition::Program(code) => {
                let label = format!("eval: {name}");
                program_row(
                    name,
                    code,
                    tasks,
                    n,
                    generator,
                    play.labelled(&label),
                    scorer,
                    seed,
                    keep,
                )
                .await?
            }
        };
        rows.push(row);
    }
    Ok(EvalTable {
        split: split.into(),
        tasks: tasks.iter().map(|t| t.task_id.clone()).collect(),
        human_source,
        rows,
        best_program_id: None,
        audit: None,
    })
}

/// Where a row's episodes are kept: `dir/<row>.jsonl`, appended to `dir/<row>.jsonl.partial`
/// as they finish.
fn row_sink(dir: &Path, row: &str) -> SinkPaths {
    let out = dir.join(format!("{row}.jsonl"));
    SinkPaths::at(dir.join(format!("{row}.jsonl.partial")), Some(out), false).reusing_output()
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
    play: Play<'_>,
    scorer: &Scorer,
    seed: u64,
    keep: Option<&Path>,
) -> Result<EvalRow> {
    let kept = keep.map(|dir| kept::Row {
        dir,
        name,
        code,
        tasks,
        n,
        seed,
    });
    let gens = match kept.as_ref().and_then(kept::Row::load) {
        Some(gens) => gens,
        None => {
            let gens = generate_all(code, tasks, n, generator, seed, play).await;
            if let Some(k) = &kept {
                k.save(&gens)?;
            }
            gens
        }
    };
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
        return Ok(row);
    }
    let episodes = play_into(
        play,
        &planned_jobs(seed, &jobs),
        keep.map(|d| row_sink(d, name)),
    )
    .await?;
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
    Ok(row)
}

/// The personas a program wrote for a row of the table, kept beside its episodes
/// (`<row>.personas.json`) so that an interrupted `ppol eval` does not generate — and pay for —
/// them again. They are reused only for the same program, tasks, number and seed (a key of
/// those), and never when a task's generation failed on infrastructure (that is tried again).
mod kept {
    use std::path::{Path, PathBuf};

    use serde::{Deserialize, Serialize};

    use crate::evolve::evaluate::{Generation, TaskContext};
    use crate::Result;

    #[derive(Serialize, Deserialize)]
    struct Kept {
        key: String,
        generations: Vec<(String, Generation)>,
    }

    /// One row's generation: what was asked of which program.
    pub(super) struct Row<'a> {
        pub(super) dir: &'a Path,
        pub(super) name: &'a str,
        pub(super) code: &'a str,
        pub(super) tasks: &'a [TaskContext],
        pub(super) n: usize,
        pub(super) seed: u64,
    }

    impl Row<'_> {
        fn path(&self) -> PathBuf {
            self.dir.join(format!("{}.personas.json", self.name))
        }

        fn key(&self) -> String {
            let mut text = format!("{}\u{1f}{}\u{1f}{}", self.n, self.seed, self.code);
            for t in self.tasks {
                text.push_str(&format!("\u{1f}{}\u{1f}{}", t.task_id, t.context));
            }
            crate::io::sha256_hex(text.as_bytes())
        }

        /// The kept generations of this row, when they are this program's for these tasks.
        pub(super) fn load(&self) -> Option<Vec<Generation>> {
            let text = std::fs::read_to_string(self.path()).ok()?;
            let kept: Kept = serde_json::from_str(&text).ok()?;
            let fits = kept.key == self.key()
                && kept.generations.len() == self.tasks.len()
                && kept
                    .generations
                    .iter()
                    .zip(self.tasks)
                    .all(|((id, _), t)| *id == t.task_id);
            fits.then(|| kept.generations.into_iter().map(|(_, g)| g).collect())
        }

        /// Keep the generations of this row (not when one failed on infrastructure).
        pub(super) fn save(&self, gens: &[Generation]) -> Result<()> {
            if gens
                .iter()
                .any(|g| matches!(g, Generation::Infrastructure(_)))
            {
                return Ok(());
            }
            let kept = Kept {
                key: self.key(),
                generations: self
                    .tasks
                    .iter()
                    .map(|t| t.task_id.clone())
                    .zip(gens.iter().cloned())
                    .collect(),
            };
            crate::io::write_atomic(&self.path(), crate::io::to_json(&kept).as_bytes())
        }
    }
}
