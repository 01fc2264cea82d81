//! Extraction of the chart sections as plain data: the score curves, the fingerprint map and
//! the D1–D4 bars. A [`Chart`] is the chart's data (series of points or bars, [`super::svg`]);
//! it serialises as its SVG markup, which the templates print as is.

use serde::Serialize;

use super::files::RunFiles;
use super::log_view::{Evaluated, LogView};
use super::pca;
use super::svg::{BarChart, Point, Series, Style, XyChart};
use super::text::f3;
use crate::evolve::rundir::summary::RunOverview;
use crate::evolve::runlog::EvalMetrics;
use crate::fitness::features::{fingerprint_many, FEATURE_NAMES};
use crate::simulate::episode::record::{Episode, EpisodeStatus};

/// A chart of the page: its data, serialised as its SVG markup.
#[derive(Debug, Clone)]
pub enum Chart {
    /// Points and lines.
    Xy(XyChart),
    /// Grouped bars.
    Bar(BarChart),
}

impl Chart {
    /// The `<svg>` element.
    pub fn svg(&self) -> String {
        match self {
            Chart::Xy(c) => c.render(),
            Chart::Bar(c) => c.render(),
        }
    }
}

impl Serialize for Chart {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.svg())
    }
}

/// The score curves: combined, human-likeness and coverage by iteration.
#[derive(Debug, Clone, Serialize)]
pub struct Scores {
    /// Candidates evaluated.
    pub n_evaluated: usize,
    /// Candidates failed.
    pub n_failed: usize,
    /// Validations.
    pub n_validations: usize,
    /// The three charts (none before any candidate).
    pub charts: Vec<Chart>,
}

/// The fingerprint map.
#[derive(Debug, Clone, Serialize)]
pub struct Map {
    /// Why there is no map.
    pub notice: Option<String>,
    /// Human fingerprints in the projection.
    pub n_human: usize,
    /// Features.
    pub n_features: usize,
    /// Feature set.
    pub feature_set: String,
    /// Episode files not found.
    pub missing: Vec<String>,
    /// The map.
    pub chart: Option<Chart>,
    /// The heaviest loadings of each component, as text.
    pub loadings: Vec<String>,
}

impl Map {
    fn notice(why: &str) -> Map {
        Map {
            notice: Some(why.into()),
            n_human: 0,
            n_features: 0,
            feature_set: String::new(),
            missing: Vec::new(),
            chart: None,
            loadings: Vec::new(),
        }
    }
}

/// The D1–D4 bars.
#[derive(Debug, Clone, Serialize)]
pub struct Dice {
    /// From the evaluation tables (else the baseline against the best's train metrics).
    pub from_evals: bool,
    /// The charts.
    pub charts: Vec<Chart>,
}

const COLOR_HUMAN: &str = "#2f9e44";
const COLOR_BASE: &str = "#868e96";
const COLOR_EVOLVED: &str = "#1c7ed6";
const COLOR_BEST: &str = "#e8590c";
const COLOR_VAL: &str = "#7048e8";
const COLOR_FAIL: &str = "#e03131";
const OTHER_COLORS: [&str; 3] = ["#ae3ec9", "#0c8599", "#5f3dc4"];

/// Colour of an eval-table row, by condition name (the same in every chart).
fn row_color(name: &str, i: usize) -> &'static str {
    match name {
        "human" => COLOR_HUMAN,
        "base" => COLOR_BASE,
        "direct" => "#f59f00",
        "seed" => "#e8590c",
        "evolved" => COLOR_EVOLVED,
        _ => OTHER_COLORS[i % OTHER_COLORS.len()],
    }
}

fn metric_of(m: &EvalMetrics, which: usize) -> f64 {
    match which {
        0 => m.combined,
        1 => m.human_likeness,
        _ => m.coverage,
    }
}

impl Scores {
    pub(crate) fn build(view: &LogView) -> Scores {
        let mut charts = Vec::new();
        if view.evaluated.is_empty() && view.failed.is_empty() && view.validations.is_empty() {
            return Scores {
                n_evaluated: 0,
                n_failed: 0,
                n_validations: 0,
                charts,
            };
        }
        let names = ["combined score", "human-likeness", "coverage"];
        for (which, name) in names.iter().enumerate() {
            let mut series = Vec::new();
            if let Some(b) = view.baseline() {
                series.push(Series {
                    label: "baseline".into(),
                    class: "baseline",
                    color: COLOR_BASE,
                    style: Style::HLine,
                    points: vec![Point {
                        x: 0.0,
                        y: metric_of(b, which),
                        title: format!("baseline {name}: {}", f3(metric_of(b, which))),
                    }],
                });
            }
            series.push(Series {
                label: "train candidates".into(),
                class: "train",
                color: "#74a9e8",
                style: Style::Dots,
                points: view
                    .evaluated
                    .iter()
                    .map(|e| Point {
                        x: e.iteration as f64,
                        y: metric_of(e.metrics, which),
                        title: format!(
                            "iteration {}: {} ({}) {name} {}",
                            e.iteration,
                            e.program_id,
                            e.mutation,
                            f3(metric_of(e.metrics, which))
                        ),
                    })
                    .collect(),
            });
            // running best (by combined), one step per iteration: on the human-likeness and
            // coverage charts it shows that program's own value, which can go down when a
            // program with a higher combined score takes over, so it is labelled as such
            let mut best: Option<&Evaluated> = None;
            let mut steps: Vec<Point> = Vec::new();
            for e in &view.evaluated {
                if best.is_none_or(|b| e.metrics.combined > b.metrics.combined) {
                    best = Some(e);
                }
                let b = best.expect("set above");
                let p = Point {
                    x: e.iteration as f64,
                    y: metric_of(b.metrics, which),
                    title: format!("best so far by combined score: {}", b.program_id),
                };
                match steps.last_mut() {
                    Some(last) if last.x == p.x => *last = p,
                    _ => steps.push(p),
                }
            }
            if !steps.is_empty() {
                series.push(Series {
                    label: if which == 0 {
                        "running best".into()
                    } else {
                        "running best (by combined score)".into()
                    },
                    class: "best",
                    color: COLOR_BEST,
                    style: Style::Step,
                    points: steps,
                });
            }
            if !view.validations.is_empty() {
                series.push(Series {
                    label: "validation".into(),
                    class: "val",
                    color: COLOR_VAL,
                    style: Style::Diamonds,
                    points: view
                        .validations
                        .iter()
                        .map(|(it, id, m)| Point {
                            x: *it as f64,
                            y: metric_of(m, which),
                            title: format!(
                                "validation at iteration {it}: {id} {name} {}",
                                f3(metric_of(m, which))
                            ),
                        })
                        .collect(),
                });
            }
            if !view.failed.is_empty() {
                series.push(Series {
                    label: "failed".into(),
                    class: "failed",
                    color: COLOR_FAIL,
                    style: Style::AxisCross,
                    points: view
                        .failed
                        .iter()
                        .map(|f| Point {
                            x: f.iteration as f64,
                            y: 0.0,
                            title: format!(
                                "iteration {}: {} failed at {}: {}",
                                f.iteration, f.mutation, f.stage, f.reason
                            ),
                        })
                        .collect(),
                });
            }
            let chart = XyChart {
                title: match which {
                    0 => "Combined score (λh·HL + λb·coverage)".into(),
                    1 => "Human-likeness (mean P(human))".into(),
                    _ => "Coverage (Chamfer)".into(),
                },
                x_label: "iteration".into(),
                y_label: (*name).into(),
                series,
                integer_x: true,
            };
            charts.push(Chart::Xy(chart));
        }
        Scores {
            n_evaluated: view.evaluated.len(),
            n_failed: view.failed.len(),
            n_validations: view.validations.len(),
            charts,
        }
    }
}

fn episode_fingerprints(
    eps: &[Episode],
    set: crate::fitness::features::FeatureSet,
) -> Vec<(String, Vec<f64>)> {
    let ok: Vec<&Episode> = eps
        .iter()
        .filter(|e| e.status == EpisodeStatus::Ok)
        .collect();
    let dialogues: Vec<_> = ok.iter().map(|e| e.to_dialogue()).collect();
    fingerprint_many(&dialogues, set)
        .into_iter()
        .zip(ok)
        .map(|(f, e)| (e.id.clone(), f.0.to_vec()))
        .collect()
}

impl Map {
    pub(crate) fn build(files: &RunFiles) -> Map {
        let Some(human) = &files.human else {
            return Map::notice(
            "human_ref.json not found: the map is a projection fitted on the human fingerprints, so it cannot be drawn.",
        );
        };
        let rows: Vec<&crate::fitness::reference::ReferenceRow> = human
            .fingerprints
            .iter()
            .filter(|r| r.n_messages >= 1)
            .collect();
        let slices: Vec<&[f64]> = rows.iter().map(|r| r.features.as_slice()).collect();
        let Some(proj) = pca::Projection::fit(&slices, &human.mean, &human.std) else {
            return Map::notice(
            "The human fingerprints have fewer than two dialogues or no variance: no projection can be fitted.",
        );
        };
        let mut series = vec![Series {
            label: format!("human ({})", rows.len()),
            class: "human",
            color: COLOR_HUMAN,
            style: Style::Dots,
            points: rows
                .iter()
                .map(|r| {
                    let (x, y) = proj.project(&r.features);
                    Point {
                        x,
                        y,
                        title: format!("human: {}", r.id),
                    }
                })
                .collect(),
        }];
        let mut missing = Vec::new();
        for (label, class, color, eps, file) in [
            (
                "base",
                "base",
                COLOR_BASE,
                &files.baseline,
                "baseline/episodes.jsonl",
            ),
            (
                "evolved",
                "evolved",
                COLOR_EVOLVED,
                &files.best_episodes,
                "best/episodes.jsonl",
            ),
        ] {
            match eps {
                Some(eps) => {
                    let fps = episode_fingerprints(eps, human.feature_set);
                    series.push(Series {
                        label: format!("{label} ({})", fps.len()),
                        class,
                        color,
                        style: Style::Dots,
                        points: fps
                            .iter()
                            .map(|(id, f)| {
                                let (x, y) = proj.project(f);
                                Point {
                                    x,
                                    y,
                                    title: format!("{label}: {id}"),
                                }
                            })
                            .collect(),
                    });
                }
                None => missing.push(file),
            }
        }
        let chart = XyChart {
            title: "Dialogues on the human fingerprints' first two principal components".into(),
            x_label: format!("PC1 ({:.1}% of human variance)", proj.explained[0] * 100.0),
            y_label: format!("PC2 ({:.1}%)", proj.explained[1] * 100.0),
            series,
            integer_x: false,
        };
        // the features that load most on each axis, to read the map
        let loadings = proj
            .components
            .iter()
            .map(|c| {
                let mut idx: Vec<usize> = (0..c.len()).collect();
                idx.sort_by(|a, b| c[*b].abs().total_cmp(&c[*a].abs()));
                idx.iter()
                    .take(5)
                    .map(|&j| format!("{} ({})", FEATURE_NAMES[j], f3(c[j])))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .collect();
        Map {
            notice: None,
            n_human: rows.len(),
            n_features: FEATURE_NAMES.len(),
            feature_set: human.feature_set.name().to_string(),
            missing: missing.into_iter().map(str::to_string).collect(),
            chart: Some(Chart::Xy(chart)),
            loadings,
        }
    }
}
fn dice_values(d: &crate::fitness::coverage::Dice) -> Vec<f64> {
    vec![d.D1, d.D2, d.D3, d.D4, d.overall]
}

impl Dice {
    pub(crate) fn build(files: &RunFiles, view: &LogView, overview: &RunOverview) -> Dice {
        let groups: Vec<String> = [
            "D1 style",
            "D2 disclosure",
            "D3 clarification",
            "D4 error reaction",
            "overall",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if !files.evals.is_empty() {
            let mut charts = Vec::new();
            for (file, table) in &files.evals {
                let series = table
                    .rows
                    .iter()
                    .filter(|r| r.skipped.is_none())
                    .enumerate()
                    .map(|(i, r)| {
                        (
                            r.name.clone(),
                            row_class(&r.name),
                            row_color(&r.name, i),
                            dice_values(&r.dice),
                        )
                    })
                    .collect();
                let chart = BarChart {
                    title: format!("{}, {file}", eval_selection(&table.split, &table.tasks)),
                    groups: groups.clone(),
                    series,
                };
                charts.push(Chart::Bar(chart));
            }
            return Dice {
                from_evals: true,
                charts,
            };
        }
        let mut series = Vec::new();
        if let Some(b) = view.baseline() {
            series.push((
                "base (train)".to_string(),
                "base",
                COLOR_BASE,
                dice_values(&b.dice),
            ));
        }
        if let Some(m) = overview.best.as_ref().and_then(|b| b.train.as_ref()) {
            series.push((
                "best (train)".to_string(),
                "evolved",
                COLOR_EVOLVED,
                dice_values(&m.dice),
            ));
        }
        let mut charts = Vec::new();
        if !series.is_empty() {
            charts.push(Chart::Bar(BarChart {
                title: "Dice D1–D4 on the train tasks".into(),
                groups,
                series,
            }));
        }
        Dice {
            from_evals: false,
            charts,
        }
    }
}

fn row_class(name: &str) -> &'static str {
    match name {
        "human" => "human",
        "base" => "base",
        "direct" => "direct",
        "seed" => "seed",
        "evolved" => "evolved",
        _ => "other",
    }
}

/// What an eval table was run on, for titles: `test split (7 tasks)`, `all 16 tasks`, or
/// `task 2` / `tasks 2, 5` when `ppol eval --split` named task ids rather than a split.
pub(crate) fn eval_selection(split: &str, tasks: &[String]) -> String {
    let ids: Vec<&str> = split.split(',').map(str::trim).collect();
    if ids.len() == tasks.len() && ids.iter().zip(tasks).all(|(a, b)| a == b) {
        let s = if tasks.len() == 1 { "" } else { "s" };
        format!("task{s} {}", tasks.join(", "))
    } else if split == "all" {
        format!("all {} tasks", tasks.len())
    } else {
        format!("{split} split ({} tasks)", tasks.len())
    }
}

#[cfg(test)]
mod tests {
    use super::eval_selection;

    #[test]
    fn eval_titles_name_a_split_or_the_task_ids() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(eval_selection("2", &ids(&["2"])), "task 2");
        assert_eq!(eval_selection("2,5", &ids(&["2", "5"])), "tasks 2, 5");
        assert_eq!(
            eval_selection("test", &ids(&["5", "6"])),
            "test split (2 tasks)"
        );
        assert_eq!(eval_selection("all", &ids(&["1", "2", "3"])), "all 3 tasks");
    }
}
