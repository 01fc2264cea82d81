//! Extraction, last step: the page as plain data ([`Page`]), one serialisable struct per
//! section, built from the run's files ([`RunFiles`]), its log (`LogView`) and its state
//! ([`RunOverview`]). No HTML here: [`super::html`] renders these through the templates.
//! This file builds the page, the summary, the evaluation tables and the costs; the charts'
//! sections are in [`super::charts`], the best program's in [`super::best`].

use serde::Serialize;

use super::best::{Dialogues, Lineage, Mechanics, Personas};
use super::charts::{Dice, Map, Scores};
use super::files::RunFiles;
use super::log_view::LogView;
use super::text::duration;
use crate::evolve::rundir::summary::{cost_rows, Counters, RunOverview};
use crate::evolve::runlog::{self, Event, Record};
use crate::fitness::audit::{features_line, AucInterval, AuditRow};

/// The whole report as plain data.
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    /// The run's name (`run_started.name`, else the directory's name).
    pub title: String,
    /// The run directory.
    pub dir: String,
    /// Summary section.
    pub summary: Summary,
    /// Score curves.
    pub scores: Scores,
    /// Fingerprint map.
    pub map: Map,
    /// D1–D4 bars.
    pub dice: Dice,
    /// Evaluation tables.
    pub eval: Evaluation,
    /// Lineage of the best program.
    pub lineage: Lineage,
    /// Sample personas.
    pub personas: Personas,
    /// Sample dialogues.
    pub dialogues: Dialogues,
    /// What the offline user played.
    pub mechanics: Mechanics,
    /// Costs and time.
    pub costs: Costs,
}

impl Page {
    /// Extract the page from a run's loaded files.
    pub fn build(files: &RunFiles) -> Page {
        let view = LogView::new(&files.log);
        let overview = RunOverview::of(&files.dir, &files.log, files.best_program.as_ref());
        let title = match view.started {
            Some(Record {
                event: Event::RunStarted { name, .. },
                ..
            }) => name.clone(),
            _ => files
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "run".into()),
        };
        Page {
            title,
            dir: files.dir.display().to_string(),
            summary: Summary::build(files, &view, &overview),
            scores: Scores::build(&view),
            map: Map::build(files),
            dice: Dice::build(files, &view, &overview),
            eval: Evaluation::build(files),
            lineage: Lineage::build(files, &view, &overview),
            personas: Personas::build(files),
            dialogues: Dialogues::build(files),
            mechanics: Mechanics::build(files),
            costs: Costs::build(&view, &overview),
        }
    }
}

/// One fact of a `<dl class="facts">`: its name and its value, one or more lines.
#[derive(Debug, Clone, Serialize)]
pub struct Fact {
    /// Name.
    pub name: String,
    /// Value, line by line.
    pub lines: Vec<String>,
}

fn fact(facts: &mut Vec<Fact>, name: &str, value: impl Into<String>) {
    facts.push(Fact {
        name: name.into(),
        lines: vec![value.into()],
    });
}

/// A feature's importance in the discriminator.
#[derive(Debug, Clone, Serialize)]
pub struct Importance {
    /// Feature name.
    pub name: String,
    /// Importance.
    pub importance: f64,
}

/// The summary section.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The facts, in order.
    pub facts: Vec<Fact>,
    /// The discriminator's top features.
    pub top_features: Vec<Importance>,
    /// Whether `config.toml` exists.
    pub has_config: bool,
    /// Its text.
    pub config_toml: String,
}

/// "0.512 (HL 0.400, coverage 0.624)".
fn scores_line(m: &runlog::EvalMetrics) -> String {
    use super::text::f3;
    format!(
        "{} (HL {}, coverage {})",
        f3(m.combined),
        f3(m.human_likeness),
        f3(m.coverage)
    )
}

impl Summary {
    fn build(files: &RunFiles, view: &LogView, overview: &RunOverview) -> Summary {
        let mut facts = Vec::new();
        match view.started {
            Some(Record {
                time,
                event:
                    Event::RunStarted {
                        name,
                        ppol_version,
                        seeds,
                        offline,
                        models,
                        feature_set,
                        domain,
                        splits,
                        ..
                    },
                ..
            }) => {
                fact(&mut facts, "run", name);
                fact(&mut facts, "started", time);
                fact(
                    &mut facts,
                    "mode",
                    if *offline {
                        "offline (scripted simulator, structural mutations)"
                    } else {
                        "LLM"
                    },
                );
                fact(&mut facts, "domain", domain);
                fact(&mut facts, "feature set", feature_set);
                let mut models: Vec<String> =
                    models.iter().map(|(r, m)| format!("{r}: {m}")).collect();
                if models.is_empty() {
                    models.push("–".into());
                }
                facts.push(Fact {
                    name: "models".into(),
                    lines: models,
                });
                let rank = |s: &str| ["train", "val", "test"].iter().position(|k| *k == s);
                let mut ordered: Vec<(&String, &Vec<String>)> = splits.iter().collect();
                ordered.sort_by_key(|(s, _)| (rank(s).unwrap_or(3), s.to_string()));
                let splits = ordered
                    .iter()
                    .map(|(s, t)| format!("{s} {}", t.len()))
                    .collect::<Vec<_>>()
                    .join(" · ");
                fact(&mut facts, "split sizes (tasks)", splits);
                // one seed a line: a 20-digit number in a joined line wrapped mid-number
                facts.push(Fact {
                    name: "seeds".into(),
                    lines: seeds.iter().map(|(k, v)| format!("{k}: {v}")).collect(),
                });
                fact(&mut facts, "ppol version", ppol_version);
            }
            _ => fact(&mut facts, "run", "no run_started event in log.jsonl"),
        }
        match view.stopped {
            Some(Record {
                time,
                event:
                    Event::RunStopped {
                        reason, iterations, ..
                    },
                ..
            }) => {
                fact(&mut facts, "stopped", time);
                fact(&mut facts, "stop reason", reason);
                fact(&mut facts, "iterations", iterations.to_string());
                let outcomes = runlog::mutation_outcomes(&files.log);
                if !outcomes.is_empty() {
                    fact(
                        &mut facts,
                        "mutations (whole run)",
                        runlog::mutation_outcomes_line(&outcomes),
                    );
                }
                let bests = crate::evolve::rundir::new_bests(&files.log);
                if !bests.is_empty() {
                    fact(
                        &mut facts,
                        "new bests made by",
                        runlog::new_bests_line(&bests),
                    );
                }
            }
            _ => {
                fact(
                    &mut facts,
                    "stopped",
                    "not yet: no run_stopped event (running, or killed)",
                );
                fact(&mut facts, "last event", view.last_time.unwrap_or("–"));
                fact(
                    &mut facts,
                    "iterations logged",
                    overview.iterations.to_string(),
                );
            }
        }
        let episodes = match view.stopped {
            Some(Record {
                event:
                    Event::RunStopped {
                        episodes: Some(e), ..
                    },
                ..
            }) => *e,
            _ => runlog::episode_counts(&files.log, None),
        };
        fact(&mut facts, "episodes played", episodes.line());
        if !view.resumed.is_empty() {
            let list = view
                .resumed
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            fact(&mut facts, "resumed from iteration", list);
        }
        let mut top_features = Vec::new();
        match view.discriminator {
            Some(Event::DiscriminatorTrained {
                n_human,
                n_baseline,
                grouped_auc,
                baseline,
                top_features: top,
            }) => {
                fact(
                    &mut facts,
                    "discriminator grouped AUC",
                    grouped_auc.map_or_else(|| "–".into(), super::text::f3),
                );
                fact(
                    &mut facts,
                    "discriminator data",
                    format!("{n_human} human · {n_baseline} baseline dialogues"),
                );
                fact(&mut facts, "baseline score (train)", scores_line(baseline));
                top_features = top
                    .iter()
                    .map(|(name, importance)| Importance {
                        name: name.clone(),
                        importance: *importance,
                    })
                    .collect();
            }
            _ => fact(
                &mut facts,
                "discriminator",
                "no discriminator_trained event in log.jsonl",
            ),
        }
        if let Some(Event::DiscriminatorRetrained {
            iteration,
            grouped_auc,
            n_simulator,
            elites,
            ..
        }) = view.retrained.last()
        {
            fact(
                &mut facts,
                "discriminator retrained",
                format!(
                    "{} time(s), last after iteration {iteration} (grouped AUC {}; {n_simulator} \
                     simulated dialogues, {} elites' among them); scores rescored each time",
                    view.retrained.len(),
                    grouped_auc.map_or_else(|| "–".into(), super::text::f3),
                    elites.len()
                ),
            );
        }
        // the run's best (the program that validates best), with its own numbers
        if let Some(best) = &overview.best {
            let id = &best.program_id;
            if let Some(m) = &best.train {
                fact(
                    &mut facts,
                    "best score (train)",
                    format!("{} · {id}", scores_line(m)),
                );
            }
            match (&best.validation, &best.validation_failure) {
                (Some(m), _) => fact(
                    &mut facts,
                    "best score (validation)",
                    format!("{} · {id}", scores_line(m)),
                ),
                (None, Some(why)) => fact(
                    &mut facts,
                    "best score (validation)",
                    format!("failed: {why} · {id}"),
                ),
                (None, None) => {}
            }
        }
        if let Some((it, id, m)) = view.validations.last() {
            fact(
                &mut facts,
                "last validation",
                format!("{} · {id} at iteration {it}", scores_line(m)),
            );
        }
        let human = match &files.human {
            Some(h) => format!(
                "{} dialogues ({} in the cloud) · {}",
                h.n_dialogues,
                h.cloud_rows().count(),
                h.feature_set.name()
            ),
            None => "human_ref.json not found".into(),
        };
        fact(&mut facts, "human reference", human);
        fact(
            &mut facts,
            "discriminator.json",
            files
                .discriminator_bytes
                .map_or("not found".into(), |b| format!("present ({b} bytes)")),
        );
        Summary {
            facts,
            top_features,
            has_config: files.config_toml.is_some(),
            config_toml: files.config_toml.clone().unwrap_or_default(),
        }
    }
}

/// One row of an evaluation table.
#[derive(Debug, Clone, Serialize)]
pub struct EvalRow {
    /// Condition.
    pub name: String,
    /// Why it was skipped.
    pub skipped: Option<String>,
    /// Human-likeness.
    pub human_likeness: f64,
    /// Coverage.
    pub coverage: f64,
    /// Score.
    pub score: f64,
    /// D1, D2, D3, D4 and their mean.
    pub dice: [f64; 5],
    /// Share of successful episodes.
    pub success_rate: Option<f64>,
    /// Dialogues.
    pub n_dialogues: usize,
    /// The audit's random forest: `AUC [low, high]`, `too few` or `–` (no audit).
    pub audit_forest: String,
    /// The audit's logistic regression, likewise.
    pub audit_logistic: String,
    /// The LLM judge's accuracy with its interval (`–` when it did not run).
    pub judge: String,
    /// Why the audit has no AUC, or the features that separate most.
    pub audit_note: Option<String>,
}

/// One `eval-<split>.json`.
#[derive(Debug, Clone, Serialize)]
pub struct EvalTable {
    /// File name.
    pub file: String,
    /// Split.
    pub split: String,
    /// What it was run on, for its heading: `test split (7 tasks)`, or `task 2` when `ppol
    /// eval --split` named task ids.
    pub title: String,
    /// Tasks.
    pub n_tasks: usize,
    /// The human traces, comma-separated.
    pub human_source: String,
    /// Rows.
    pub rows: Vec<EvalRow>,
    /// How the audit was made (None: the table has no audit).
    pub audit: Option<String>,
    /// What the LLM judge did, or why it did not run.
    pub judge: Option<String>,
}

/// The evaluation section: every `eval-<split>.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    /// The tables, by file name.
    pub tables: Vec<EvalTable>,
}

impl Evaluation {
    fn build(files: &RunFiles) -> Evaluation {
        let tables = files
            .evals
            .iter()
            .map(|(file, t)| EvalTable {
                file: file.clone(),
                split: t.split.clone(),
                title: super::charts::eval_selection(&t.split, &t.tasks),
                n_tasks: t.tasks.len(),
                human_source: t.human_source.join(", "),
                rows: t
                    .rows
                    .iter()
                    .map(|r| {
                        let a = r.audit.as_ref();
                        let cell = |pick: fn(&AuditRow) -> Option<&AucInterval>| {
                            a.map_or("–".into(), |a| {
                                AuditRow::cell(pick(a), a.too_few.is_some())
                            })
                        };
                        EvalRow {
                            name: r.name.clone(),
                            skipped: r.skipped.clone(),
                            human_likeness: r.human_likeness,
                            coverage: r.coverage,
                            score: r.score,
                            dice: [r.dice.D1, r.dice.D2, r.dice.D3, r.dice.D4, r.dice.overall],
                            success_rate: r.success_rate,
                            n_dialogues: r.n_dialogues,
                            audit_forest: cell(|a| a.random_forest.as_ref()),
                            audit_logistic: cell(|a| a.logistic.as_ref()),
                            judge: a
                                .and_then(|a| a.judge.as_ref())
                                .map_or("–".into(), |j| j.to_string()),
                            audit_note: a.and_then(|a| {
                                a.too_few.clone().or_else(|| {
                                    (!a.top_features.is_empty())
                                        .then(|| format!("separated most by {}", features_line(a)))
                                })
                            }),
                        }
                    })
                    .collect(),
                audit: t.audit.as_ref().map(|a| {
                    format!(
                        "{} held-out human dialogues in {} task groups; {}",
                        a.human.n, a.human.n_groups, a.method.description
                    )
                }),
                judge: t.audit.as_ref().map(|a| a.judge.clone()),
            })
            .collect();
        Evaluation { tables }
    }
}

/// One row of the cost table (a role, or the total).
#[derive(Debug, Clone, Serialize)]
pub struct CostRow {
    /// Role name (`total` for the total).
    pub role: String,
    /// Whether this is the total row.
    pub total: bool,
    /// LLM calls.
    pub calls: Option<f64>,
    /// Cache hits.
    pub cache_hits: Option<f64>,
    /// Prompt tokens.
    pub prompt_tokens: Option<f64>,
    /// Completion tokens.
    pub completion_tokens: Option<f64>,
    /// Tokens (`tokens`, else prompt + completion).
    pub tokens: Option<f64>,
    /// USD.
    pub usd: Option<f64>,
}

impl CostRow {
    fn of(role: &str, total: bool, m: &Counters) -> CostRow {
        let get = |k: &str| m.get(k).copied();
        CostRow {
            role: role.into(),
            total,
            calls: get("calls"),
            cache_hits: get("cache_hits"),
            prompt_tokens: get("prompt_tokens"),
            completion_tokens: get("completion_tokens"),
            tokens: get("tokens").or_else(|| {
                match (get("prompt_tokens"), get("completion_tokens")) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
                }
            }),
            usd: get("usd").or_else(|| get("cost_usd")),
        }
    }
}

/// What one process of the run spent.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessRow {
    /// 1 for `ppol evolve`, then one more per `ppol resume` (0 for the run's total).
    pub process: u32,
    /// Its pid.
    pub pid: u32,
    /// When it started.
    pub started: String,
    /// LLM calls.
    pub calls: f64,
    /// Requests (first attempts and retries).
    pub attempts: f64,
    /// Prompt and completion tokens.
    pub tokens: f64,
    /// USD.
    pub usd: f64,
    /// Its percentage of the run's USD (None when the run cost nothing).
    pub share: Option<f64>,
}

/// A fact whose value is one line.
#[derive(Debug, Clone, Serialize)]
pub struct LineFact {
    /// Name.
    pub name: String,
    /// Value.
    pub value: String,
}

/// The costs section.
#[derive(Debug, Clone, Serialize)]
pub struct Costs {
    /// Where the numbers come from.
    pub source: String,
    /// One row per role, then the total.
    pub rows: Vec<CostRow>,
    /// Why the budget ran out.
    pub budget_exhausted: Option<String>,
    /// Why the cost ledger could not be read.
    pub ledger_error: Option<String>,
    /// Processes of the run.
    pub n_processes: usize,
    /// What each spent.
    pub processes: Vec<ProcessRow>,
    /// Their sum.
    pub run: ProcessRow,
    /// Times and checkpoints.
    pub facts: Vec<LineFact>,
}

impl Costs {
    fn build(view: &LogView, overview: &RunOverview) -> Costs {
        let summary = &overview.costs.summary;
        let (roles, total) = cost_rows(summary);
        let mut rows: Vec<CostRow> = roles
            .iter()
            .map(|(r, m)| CostRow::of(r, false, m))
            .collect();
        if let Some(t) = &total {
            rows.push(CostRow::of("total", true, t));
        }
        let shares = &overview.costs.processes;
        let usd: f64 = shares.iter().map(|s| s.usd).sum();
        let processes: Vec<ProcessRow> = shares
            .iter()
            .map(|p| ProcessRow {
                process: p.process,
                pid: p.pid,
                started: p.started.clone(),
                calls: p.calls as f64,
                attempts: p.attempts as f64,
                tokens: (p.prompt_tokens + p.completion_tokens) as f64,
                usd: p.usd,
                share: (usd > 0.0).then(|| 100.0 * p.usd / usd),
            })
            .collect();
        let run = ProcessRow {
            process: 0,
            pid: 0,
            started: String::new(),
            calls: processes.iter().map(|p| p.calls).sum(),
            attempts: processes.iter().map(|p| p.attempts).sum(),
            tokens: processes.iter().map(|p| p.tokens).sum(),
            usd,
            share: Some(100.0),
        };
        let start = view.started.and_then(|r| crate::io::parse_rfc3339(&r.time));
        let end = view
            .stopped
            .map(|r| r.time.as_str())
            .or(view.last_time)
            .and_then(crate::io::parse_rfc3339);
        let wall = match (start, end) {
            (Some(a), Some(b)) => duration(b - a),
            _ => "–".into(),
        };
        let eval_secs: f64 = view.evaluated.iter().map(|e| e.seconds).sum();
        let line = |name: &str, value: String| LineFact {
            name: name.into(),
            value,
        };
        let facts = vec![
            line(
                if view.stopped.is_some() {
                    "wall time (start to stop)"
                } else {
                    "wall time (start to last event)"
                },
                wall,
            ),
            line("candidate evaluation time (sum)", duration(eval_secs)),
            line(
                "mean per evaluated candidate",
                if view.evaluated.is_empty() {
                    "–".into()
                } else {
                    duration(eval_secs / view.evaluated.len() as f64)
                },
            ),
            line("checkpoints written", view.checkpoints.to_string()),
        ];
        Costs {
            source: overview.costs.source.clone(),
            budget_exhausted: summary
                .get("budget_exhausted")
                .and_then(serde_json::Value::as_str)
                .map(str::to_string),
            rows,
            ledger_error: overview.costs.ledger_error.clone(),
            n_processes: processes.len(),
            processes,
            run,
            facts,
        }
    }
}
