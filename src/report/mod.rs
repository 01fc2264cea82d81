//! `ppol report`: one self-contained HTML page summarising an evolution run, built only from the
//! files of its run directory (never from live state).
//!
//! The page has inline CSS and inline SVG only: no script, no web font, no image, no link to
//! anything outside the file, so it can be opened offline or attached to an issue. Every piece
//! of text that comes from the run (dialogues, personas, program source, failure reasons) is
//! HTML-escaped.
//!
//! What each section reads:
//!
//! | section | source |
//! | --- | --- |
//! | summary | `run_started`, `run_stopped` (with the episodes played: `run_stopped.episodes`, else counted from `candidate_evaluated`, `candidate_stopped`, `validation`, `validation_stopped`), `discriminator_trained` events; `config.toml`; `human_ref.json` |
//! | score curves | `candidate_evaluated` (points, running best), `candidate_failed` (× on the axis), `validation` (◆), `discriminator_trained.baseline` (dashed line); candidates the cascade stopped (`candidate_stopped`) have no full score and are not drawn |
//! | fingerprint map | [`pca::Projection`] fitted on `human_ref.json`; `baseline/episodes.jsonl` and `best/episodes.jsonl` fingerprinted with the reference's feature set |
//! | D1–D4 bars | the rows of every `eval-<split>.json`, else `discriminator_trained.baseline.dice` vs the best train metrics |
//! | evaluation table | every `eval-<split>.json` |
//! | lineage | `best/program.json` lineage (else parent ids of `candidate_evaluated`), `best/program.py`, counts by mutation kind and failure stage |
//! | personas, dialogues | `best/personas.jsonl`, `best/episodes.jsonl` |
//! | offline mechanics | `persona_play` of `best/episodes.jsonl` (scripted episodes): the mechanics of `fitness/mechanics.toml` the offline user played, those it never played, and the persona sentences it could not play |
//! | costs | `run_stopped.cost` (else the sum of `candidate_evaluated.cost`), event times |
//!
//! Only `log.jsonl` is required. Every other file may be missing (a run stopped early, `ppol
//! eval` not run yet); the section that needs it then says so. A file that exists but does not
//! parse is an error naming the file (and the line, for JSONL files).
//!
//! ```no_run
//! let path = ppol::report::write(std::path::Path::new("runs/demo"), None)?;
//! println!("{}", path.display());
//! # Ok::<(), ppol::Error>(())
//! ```

pub mod pca;
pub mod study;
pub mod svg;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dialogue::Role;
use crate::evolve::rundir::RunBest;
use crate::evolve::runlog::{self, EvalMetrics, EvalTable, Event, Record};
use crate::fitness::features::{fingerprint_many, FEATURE_NAMES};
use crate::fitness::reference::HumanReference;
use crate::persona::Persona;
use crate::simulate::episode::record::{load_episodes, Episode, EpisodeStatus};
use crate::{Error, Result};

use svg::{BarChart, Point, Series, Style, XyChart};

/// Personas shown in the "sample personas" section.
pub const N_SAMPLE_PERSONAS: usize = 4;
/// Dialogues shown in the "sample dialogues" section.
pub const N_SAMPLE_DIALOGUES: usize = 3;

/// `best/program.json`: the run's best program (see [`RunBest`] for what "best" means), its
/// own numbers and its ancestry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestProgram {
    /// Program id.
    pub program_id: String,
    /// Its train metrics.
    pub metrics: EvalMetrics,
    /// Its validation metrics.
    #[serde(default)]
    pub validation: Option<EvalMetrics>,
    /// Why its validation could not score it.
    #[serde(default)]
    pub validation_failure: Option<String>,
    /// Program ids from the seed to the best (inclusive).
    #[serde(default)]
    pub lineage: Vec<String>,
}

/// Everything the report reads, loaded from a run directory. Optional files are `None` when
/// they do not exist.
#[derive(Debug, Clone)]
pub struct RunFiles {
    /// The run directory.
    pub dir: PathBuf,
    /// `log.jsonl` (required).
    pub log: Vec<Record>,
    /// `config.toml`, as text (checked to be valid TOML).
    pub config_toml: Option<String>,
    /// `human_ref.json`.
    pub human: Option<HumanReference>,
    /// Size in bytes of `discriminator.json` (checked to be valid JSON), when present.
    pub discriminator_bytes: Option<u64>,
    /// `baseline/episodes.jsonl`.
    pub baseline: Option<Vec<Episode>>,
    /// `best/program.py`.
    pub best_source: Option<String>,
    /// `best/program.json`.
    pub best_program: Option<BestProgram>,
    /// `best/personas.jsonl`.
    pub best_personas: Option<Vec<Persona>>,
    /// `best/episodes.jsonl`.
    pub best_episodes: Option<Vec<Episode>>,
    /// Every `eval-<split>.json`, sorted by file name.
    pub evals: Vec<(String, EvalTable)>,
}

impl RunFiles {
    /// Load a run directory. Only `log.jsonl` must exist.
    pub fn load(dir: &Path) -> Result<RunFiles> {
        if !dir.is_dir() {
            return Err(Error::Run {
                path: dir.to_path_buf(),
                message: "not a directory".into(),
            });
        }
        let log_path = dir.join("log.jsonl");
        if !log_path.is_file() {
            return Err(Error::Run {
                path: dir.to_path_buf(),
                message: "no log.jsonl: not a ppol run directory".into(),
            });
        }
        let log = runlog::read(&log_path)?;
        let config_toml = optional(&dir.join("config.toml"), |p| {
            let text = crate::io::read_to_string(p)?;
            text.parse::<toml::Table>()
                .map_err(|e| Error::parse(p, "TOML", format!("not valid TOML: {e}")))?;
            Ok(text)
        })?;
        let human = optional(&dir.join("human_ref.json"), HumanReference::load)?;
        let discriminator_bytes = optional(&dir.join("discriminator.json"), |p| {
            let text = crate::io::read_to_string(p)?;
            parse_json::<Value>(&text, p, "not valid JSON")?;
            Ok(text.len() as u64)
        })?;
        let baseline = optional(&dir.join("baseline/episodes.jsonl"), load_episodes)?;
        let best_source = optional(&dir.join("best/program.py"), crate::io::read_to_string)?;
        let best_program = optional(&dir.join("best/program.json"), |p| {
            let text = crate::io::read_to_string(p)?;
            parse_json(&text, p, "not a best-program record")
        })?;
        let best_personas = optional(&dir.join("best/personas.jsonl"), crate::persona::read_jsonl)?;
        let best_episodes = optional(&dir.join("best/episodes.jsonl"), load_episodes)?;
        let mut evals = Vec::new();
        let entries = std::fs::read_dir(dir).map_err(|e| Error::io("listing", dir, e))?;
        let mut eval_paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                        n.starts_with("eval-") && n.ends_with(".json") && n.len() > 10
                    })
            })
            .collect();
        eval_paths.sort();
        for p in eval_paths {
            let text = crate::io::read_to_string(&p)?;
            let table: EvalTable = parse_json(&text, &p, "not a ppol eval table")?;
            let name = p.file_name().unwrap_or_default().to_string_lossy().into();
            evals.push((name, table));
        }
        Ok(RunFiles {
            dir: dir.to_path_buf(),
            log,
            config_toml,
            human,
            discriminator_bytes,
            baseline,
            best_source,
            best_program,
            best_personas,
            best_episodes,
            evals,
        })
    }
}

fn optional<T>(path: &Path, load: impl FnOnce(&Path) -> Result<T>) -> Result<Option<T>> {
    if path.exists() {
        load(path).map(Some)
    } else {
        Ok(None)
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(text: &str, path: &Path, what: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| {
        Error::parse(
            path,
            format!("line {} column {}", e.line(), e.column()),
            format!("{what}: {e}"),
        )
    })
}

/// Render the report of a run directory as one HTML document.
pub fn render(run_dir: &Path) -> Result<String> {
    Ok(render_files(&RunFiles::load(run_dir)?))
}

/// Render the report and write it to `out` (default `RUN_DIR/report.html`), atomically.
/// Returns the path written.
pub fn write(run_dir: &Path, out: Option<&Path>) -> Result<PathBuf> {
    let html = render(run_dir)?;
    let path = out
        .map(Path::to_path_buf)
        .unwrap_or_else(|| run_dir.join("report.html"));
    crate::io::write_atomic(&path, html.as_bytes())?;
    Ok(path)
}

// ---------------------------------------------------------------------------------------------
// Formatting helpers

/// HTML-escape text for element content and attribute values. Bidi controls, which would
/// reorder what a reader sees, are shown as `\u{202e}` escapes
/// ([`crate::io::neutralize_bidi`]); letters of right-to-left scripts are kept.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if crate::io::is_bidi_control(c) => out.push_str(&c.escape_unicode().to_string()),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // the colon of `scheme://` is escaped too, so that no URL appears in the page source
            ':' if chars.peek() == Some(&'/') => out.push_str("&#58;"),
            c => out.push(c),
        }
    }
    out
}

/// A number to 3 decimals (`–` when not finite).
pub fn f3(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "–".into()
    }
}

/// An integer with thousands separators (`1,234,567`).
fn grouped(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

fn opt3(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), f3)
}

fn notice(out: &mut String, text: &str) {
    let _ = write!(out, r#"<p class="notice">{}</p>"#, esc(text));
}

fn duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "–".into();
    }
    let s = secs.round() as u64;
    let (h, m, s) = (s / 3600, (s % 3600) / 60, s % 60);
    if h > 0 {
        format!("{h} h {m:02} min {s:02} s")
    } else if m > 0 {
        format!("{m} min {s:02} s")
    } else {
        format!("{secs:.1} s")
    }
}

// ---------------------------------------------------------------------------------------------
// What the log says

struct Evaluated<'a> {
    iteration: u64,
    program_id: &'a str,
    parent_id: Option<&'a str>,
    mutation: &'a str,
    summary: &'a str,
    metrics: &'a EvalMetrics,
    new_best: bool,
    seconds: f64,
    cost: &'a runlog::CostSummary,
}

struct Failed<'a> {
    iteration: u64,
    program_id: Option<&'a str>,
    mutation: &'a str,
    stage: &'a str,
    reason: &'a str,
    raw_reply: &'a str,
    prompt_fit: &'a str,
    requeued: bool,
}

struct LogView<'a> {
    started: Option<&'a Record>,
    stopped: Option<&'a Record>,
    discriminator: Option<&'a Event>,
    evaluated: Vec<Evaluated<'a>>,
    failed: Vec<Failed<'a>>,
    validations: Vec<(u64, &'a str, &'a EvalMetrics)>,
    /// The run's best as the log's validations say ([`RunBest::displaces`] replayed): its id
    /// and validation (None: it failed).
    run_best: Option<(&'a str, Option<&'a EvalMetrics>)>,
    resumed: Vec<u64>,
    checkpoints: usize,
    last_time: Option<&'a str>,
}

impl<'a> LogView<'a> {
    fn new(log: &'a [Record]) -> Self {
        let mut v = LogView {
            started: None,
            stopped: None,
            discriminator: None,
            evaluated: Vec::new(),
            failed: Vec::new(),
            validations: Vec::new(),
            run_best: None,
            resumed: Vec::new(),
            checkpoints: 0,
            last_time: log.last().map(|r| r.time.as_str()),
        };
        for r in log {
            match &r.event {
                Event::RunStarted { .. } => {
                    v.started.get_or_insert(r);
                }
                Event::RunStopped { .. } => v.stopped = Some(r),
                e @ Event::DiscriminatorTrained { .. } => v.discriminator = Some(e),
                Event::CandidateEvaluated {
                    iteration,
                    program_id,
                    parent_id,
                    mutation,
                    mutation_summary,
                    metrics,
                    new_best,
                    seconds,
                    cost,
                    ..
                } => v.evaluated.push(Evaluated {
                    iteration: *iteration,
                    program_id,
                    parent_id: parent_id.as_deref(),
                    mutation,
                    summary: mutation_summary,
                    metrics,
                    new_best: *new_best,
                    seconds: *seconds,
                    cost,
                }),
                Event::CandidateFailed {
                    iteration,
                    program_id,
                    mutation,
                    failure,
                    requeued,
                    ..
                } => v.failed.push(Failed {
                    iteration: *iteration,
                    program_id: program_id.as_deref(),
                    mutation,
                    stage: &failure.stage,
                    reason: &failure.reason,
                    raw_reply: &failure.raw_reply,
                    prompt_fit: &failure.prompt_fit,
                    requeued: *requeued,
                }),
                Event::Validation {
                    iteration,
                    program_id,
                    metrics,
                } => {
                    v.validations.push((*iteration, program_id, metrics));
                    if RunBest::displaces(v.run_best.and_then(|b| b.1), Some(metrics)) {
                        v.run_best = Some((program_id, Some(metrics)));
                    }
                }
                Event::Checkpoint { .. } => v.checkpoints += 1,
                Event::Resumed { from_iteration } => v.resumed.push(*from_iteration),
                Event::ValidationFailed {
                    iteration,
                    program_id,
                    failure,
                } => {
                    if RunBest::displaces(v.run_best.and_then(|b| b.1), None) {
                        v.run_best = Some((program_id, None));
                    }
                    v.failed.push(Failed {
                        iteration: *iteration,
                        program_id: Some(program_id),
                        mutation: "validation",
                        stage: &failure.stage,
                        reason: &failure.reason,
                        raw_reply: &failure.raw_reply,
                        prompt_fit: &failure.prompt_fit,
                        requeued: false,
                    })
                }
                // counted in the facts (episodes played, mutation outcomes); never a score
                // of the curves, which are those of full evaluations
                Event::CandidateStopped { .. } | Event::ValidationStopped { .. } => {}
            }
        }
        v
    }

    fn baseline(&self) -> Option<&'a EvalMetrics> {
        match self.discriminator {
            Some(Event::DiscriminatorTrained { baseline, .. }) => Some(baseline),
            _ => None,
        }
    }

    /// The evaluation with the highest combined score (first on ties).
    fn best_evaluated(&self) -> Option<&Evaluated<'a>> {
        self.evaluated
            .iter()
            .fold(None, |best: Option<&Evaluated>, e| match best {
                Some(b) if b.metrics.combined >= e.metrics.combined => Some(b),
                _ => Some(e),
            })
    }

    /// The run's best program: `best/program.json`, else `run_stopped`, else the log's
    /// validations replayed ([`RunBest::displaces`]); a log without any falls back on the last
    /// train best.
    fn best_program_id(&self, files: &'a RunFiles) -> Option<&'a str> {
        if let Some(b) = &files.best_program {
            return Some(&b.program_id);
        }
        if let Some(Record {
            event:
                Event::RunStopped {
                    best_program_id: Some(id),
                    ..
                },
            ..
        }) = self.stopped
        {
            return Some(id);
        }
        if let Some((id, _)) = self.run_best {
            return Some(id);
        }
        if let Some(e) = self.evaluated.iter().rev().find(|e| e.new_best) {
            return Some(e.program_id);
        }
        self.best_evaluated().map(|e| e.program_id)
    }

    /// The train metrics of the best program `best_id` — its own: `best/program.json`, or
    /// `run_stopped`, when they name it, else its `candidate_evaluated` — with their source.
    fn best_train_metrics(
        &self,
        files: &'a RunFiles,
        best_id: Option<&str>,
    ) -> Option<(&'a EvalMetrics, String)> {
        let id = best_id?;
        if let Some(b) = files.best_program.as_ref().filter(|b| b.program_id == id) {
            return Some((&b.metrics, "best/program.json".into()));
        }
        if let Some(Record {
            event:
                Event::RunStopped {
                    best_program_id: Some(stopped_id),
                    best_metrics: Some(m),
                    ..
                },
            ..
        }) = self.stopped
        {
            if stopped_id == id {
                return Some((m, "run_stopped.best_metrics".into()));
            }
        }
        self.evaluated
            .iter()
            .rev()
            .find(|e| e.program_id == id)
            .map(|e| (e.metrics, format!("candidate_evaluated of {id}")))
    }

    /// The validation of the best program `best_id` — its own: `best/program.json`, or
    /// `run_stopped`, when they name it, else its last `validation` event; `Err` with the
    /// reason when `best/program.json` says it failed.
    fn best_validation(
        &self,
        files: &'a RunFiles,
        best_id: Option<&str>,
    ) -> Option<std::result::Result<&'a EvalMetrics, &'a str>> {
        let id = best_id?;
        if let Some(b) = files.best_program.as_ref().filter(|b| b.program_id == id) {
            match (&b.validation, &b.validation_failure) {
                (Some(m), _) => return Some(Ok(m)),
                (None, Some(why)) => return Some(Err(why)),
                (None, None) => {}
            }
        }
        if let Some(Record {
            event:
                Event::RunStopped {
                    best_program_id: Some(stopped_id),
                    best_validation: Some(m),
                    ..
                },
            ..
        }) = self.stopped
        {
            if stopped_id == id {
                return Some(Ok(m));
            }
        }
        self.validations
            .iter()
            .rev()
            .find(|(_, vid, _)| *vid == id)
            .map(|(_, _, m)| Ok(*m))
    }
}

// ---------------------------------------------------------------------------------------------
// The page

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

const CSS: &str = r#"
:root{--fg:#1d2433;--muted:#5c6577;--line:#dde1e8;--bg:#f6f7f9;--card:#fff;--accent:#1c7ed6}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1280px;margin:0 auto;padding:24px 20px 48px}
h1{font-size:1.7em;margin:.2em 0 .1em}
h2{font-size:1.25em;margin:0 0 .6em;padding-bottom:.3em;border-bottom:1px solid var(--line)}
h3{font-size:1.02em;margin:1em 0 .4em}
.sub{color:var(--muted);margin:0 0 1em}
section{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:18px 22px;margin:18px 0;box-shadow:0 1px 2px rgba(0,0,0,.04)}
nav{display:flex;flex-wrap:wrap;gap:6px 14px;font-size:.92em;margin:8px 0 0}
nav a{color:var(--accent);text-decoration:none}
dl.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:8px 22px;margin:0}
dl.facts div{border-left:3px solid var(--line);padding-left:10px}
dl.facts dt{font-size:.8em;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}
dl.facts dd{margin:0;font-weight:500;overflow-wrap:anywhere}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(380px,1fr));gap:16px}
.grid.charts{grid-template-columns:repeat(auto-fit,minmax(min(100%,540px),1fr))}
.charts svg.chart{width:100%;height:auto;display:block}
svg.chart{width:100%;max-width:760px;height:auto;display:block;background:#fff}
svg .grid{stroke:#edf0f4;stroke-width:1}
svg .frame{fill:none;stroke:#b8bfcc;stroke-width:1}
svg .axis{stroke:#b8bfcc}
svg .tk{font-size:11px;fill:#5c6577}
svg .al{font-size:12px;fill:#1d2433}
svg .ct{font-size:13px;font-weight:600;fill:#1d2433}
svg .lg{font-size:11.5px;fill:#1d2433}
svg .empty{font-size:14px;fill:#868e96}
svg .pt.human,svg .pt.base,svg .pt.evolved{fill-opacity:.72}
table{border-collapse:collapse;width:100%;font-size:.92em;margin:.3em 0 .8em}
th,td{padding:5px 9px;border-bottom:1px solid var(--line);text-align:right;vertical-align:top}
th{background:#f1f3f6;font-weight:600}
th:first-child,td:first-child,td.l,th.l{text-align:left}
td.skip{color:var(--muted);font-style:italic;text-align:left}
.scroll{overflow-x:auto}
.notice{background:#fff8e6;border:1px solid #f2d98a;border-radius:6px;padding:8px 12px;color:#6b5200}
ol.lineage{list-style:none;margin:0;padding:0 0 0 8px;border-left:3px solid #c5d7f2}
ol.lineage li{position:relative;margin:0 0 10px;padding-left:16px}
ol.lineage li::before{content:"";position:absolute;left:-8.5px;top:7px;width:11px;height:11px;border-radius:50%;background:var(--accent);border:2px solid #fff}
ol.lineage li.best::before{background:#e8590c}
.tag{display:inline-block;font-size:.78em;padding:1px 7px;border-radius:9px;background:#e7f0fb;color:#1753a0;margin-right:4px}
.tag.fail{background:#fde8e8;color:#a61e1e}
.mono,code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.86em}
pre{background:#f6f8fa;border:1px solid var(--line);border-radius:6px;padding:10px;overflow:auto;max-height:420px;white-space:pre-wrap;overflow-wrap:anywhere}
details{margin:.4em 0}
summary{cursor:pointer;color:var(--muted)}
.personas{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:14px}
details.toolcall{margin:4px 0 4px 12px;font-size:.9em}
.card{border:1px solid var(--line);border-radius:8px;padding:12px 14px;background:#fcfcfd}
.card h3{margin:0 0 .3em}
.dialogue{border:1px solid var(--line);border-radius:8px;padding:12px 14px;margin:12px 0;background:#fcfcfd}
.turn{max-width:78%;margin:6px 0;padding:7px 11px;border-radius:10px;white-space:pre-wrap;overflow-wrap:anywhere}
.turn .who{display:block;font-size:.72em;text-transform:uppercase;letter-spacing:.05em;color:var(--muted)}
.turn.user{background:#e7f5ea;margin-left:auto}
.turn.assistant{background:#eef1f6}
.turn.tool,.turn.system{background:#fff;border:1px dashed var(--line);font-size:.9em}
.meta{color:var(--muted);font-size:.88em}
footer{color:var(--muted);font-size:.85em;text-align:center;margin-top:24px}
@media (max-width:640px){main{padding:12px 8px}section{padding:12px}.turn{max-width:95%}}
"#;

/// Render the report from loaded files.
pub fn render_files(files: &RunFiles) -> String {
    let view = LogView::new(&files.log);
    let run_name = match view.started {
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
    let mut body = String::new();
    let _ = write!(
        body,
        r##"<header><h1>ppol run report: {}</h1><p class="sub">Evolution of persona policies, built from the files of <span class="mono">{}</span> only.</p><nav><a href="#summary">Summary</a><a href="#scores">Scores</a><a href="#map">Fingerprint map</a><a href="#dice">D1–D4</a><a href="#eval">Evaluation table</a><a href="#lineage">Lineage</a><a href="#personas">Personas</a><a href="#dialogues">Dialogues</a><a href="#mechanics">Mechanics</a><a href="#costs">Costs</a></nav></header>"##,
        esc(&run_name),
        esc(&files.dir.display().to_string())
    );
    section_summary(&mut body, files, &view);
    section_scores(&mut body, &view);
    section_map(&mut body, files);
    section_dice(&mut body, files, &view);
    section_eval(&mut body, files);
    section_lineage(&mut body, files, &view);
    section_personas(&mut body, files);
    section_dialogues(&mut body, files);
    section_mechanics(&mut body, files);
    section_costs(&mut body, files, &view);
    let mut html = String::with_capacity(body.len() + CSS.len() + 512);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>ppol report: {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n{body}\n<footer>Generated by ppol {} from the run directory's files (log, reference, episodes, eval tables); no live state was read.</footer>\n</main>\n</body>\n</html>\n",
        esc(&run_name),
        env!("CARGO_PKG_VERSION")
    );
    html
}

fn fact(out: &mut String, name: &str, value_html: &str) {
    let _ = write!(
        out,
        "<div><dt>{}</dt><dd>{value_html}</dd></div>",
        esc(name)
    );
}

fn section_summary(out: &mut String, files: &RunFiles, view: &LogView) {
    out.push_str(r#"<section id="summary"><h2>Summary</h2>"#);
    let mut facts = String::from(r#"<dl class="facts">"#);
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
            fact(&mut facts, "run", &esc(name));
            fact(&mut facts, "started", &esc(time));
            fact(
                &mut facts,
                "mode",
                if *offline {
                    "offline (scripted simulator, structural mutations)"
                } else {
                    "LLM"
                },
            );
            fact(&mut facts, "domain", &esc(domain));
            fact(&mut facts, "feature set", &esc(feature_set));
            let models = models
                .iter()
                .map(|(r, m)| format!("{}: {}", esc(r), esc(m)))
                .collect::<Vec<_>>()
                .join("<br>");
            fact(
                &mut facts,
                "models",
                if models.is_empty() { "–" } else { &models },
            );
            let rank = |s: &str| ["train", "val", "test"].iter().position(|k| *k == s);
            let mut ordered: Vec<(&String, &Vec<String>)> = splits.iter().collect();
            ordered.sort_by_key(|(s, _)| (rank(s).unwrap_or(3), s.to_string()));
            let splits = ordered
                .iter()
                .map(|(s, t)| format!("{} {}", esc(s), t.len()))
                .collect::<Vec<_>>()
                .join(" · ");
            fact(&mut facts, "split sizes (tasks)", &splits);
            let seeds = seeds
                .iter()
                .map(|(k, v)| format!("{}={v}", esc(k)))
                .collect::<Vec<_>>()
                .join(" · ");
            fact(&mut facts, "seeds", &seeds);
            fact(&mut facts, "ppol version", &esc(ppol_version));
        }
        _ => fact(&mut facts, "run", "no run_started event in log.jsonl"),
    }
    match view.stopped {
        Some(Record {
            time,
            event: Event::RunStopped {
                reason, iterations, ..
            },
            ..
        }) => {
            fact(&mut facts, "stopped", &esc(time));
            fact(&mut facts, "stop reason", &esc(reason));
            fact(&mut facts, "iterations", &iterations.to_string());
            let outcomes = runlog::mutation_outcomes(&files.log);
            if !outcomes.is_empty() {
                fact(
                    &mut facts,
                    "mutations (whole run)",
                    &esc(&runlog::mutation_outcomes_line(&outcomes)),
                );
            }
            let bests = crate::evolve::rundir::new_bests(&files.log);
            if !bests.is_empty() {
                fact(
                    &mut facts,
                    "new bests made by",
                    &esc(&runlog::new_bests_line(&bests)),
                );
            }
        }
        _ => {
            fact(
                &mut facts,
                "stopped",
                "not yet: no run_stopped event (running, or killed)",
            );
            fact(
                &mut facts,
                "last event",
                &esc(view.last_time.unwrap_or("–")),
            );
            let last_it = view
                .evaluated
                .iter()
                .map(|e| e.iteration)
                .chain(view.failed.iter().map(|f| f.iteration))
                .chain(files.log.iter().filter_map(|r| match r.event {
                    Event::CandidateStopped { iteration, .. } => Some(iteration),
                    _ => None,
                }))
                .max();
            fact(
                &mut facts,
                "iterations logged",
                &last_it.map_or("0".into(), |i| i.to_string()),
            );
        }
    }
    let episodes = match view.stopped {
        Some(Record {
            event: Event::RunStopped {
                episodes: Some(e), ..
            },
            ..
        }) => *e,
        _ => runlog::episode_counts(&files.log, None),
    };
    fact(&mut facts, "episodes played", &esc(&episodes.line()));
    if !view.resumed.is_empty() {
        let list = view
            .resumed
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        fact(&mut facts, "resumed from iteration", &list);
    }
    match view.discriminator {
        Some(Event::DiscriminatorTrained {
            n_human,
            n_baseline,
            grouped_auc,
            baseline,
            ..
        }) => {
            fact(&mut facts, "discriminator grouped AUC", &opt3(*grouped_auc));
            fact(
                &mut facts,
                "discriminator data",
                &format!("{n_human} human · {n_baseline} baseline dialogues"),
            );
            fact(
                &mut facts,
                "baseline score (train)",
                &format!(
                    "{} (HL {}, coverage {})",
                    f3(baseline.combined),
                    f3(baseline.human_likeness),
                    f3(baseline.coverage)
                ),
            );
        }
        _ => fact(
            &mut facts,
            "discriminator",
            "no discriminator_trained event in log.jsonl",
        ),
    }
    // the run's best (the program that validates best), with its own numbers
    let best_id = view.best_program_id(files);
    if let Some((m, _)) = view.best_train_metrics(files, best_id) {
        fact(
            &mut facts,
            "best score (train)",
            &format!(
                "{} (HL {}, coverage {}) · {}",
                f3(m.combined),
                f3(m.human_likeness),
                f3(m.coverage),
                esc(best_id.unwrap_or("?"))
            ),
        );
    }
    match view.best_validation(files, best_id) {
        Some(Ok(m)) => fact(
            &mut facts,
            "best score (validation)",
            &format!(
                "{} (HL {}, coverage {}) · {}",
                f3(m.combined),
                f3(m.human_likeness),
                f3(m.coverage),
                esc(best_id.unwrap_or("?"))
            ),
        ),
        Some(Err(why)) => fact(
            &mut facts,
            "best score (validation)",
            &format!("failed: {} · {}", esc(why), esc(best_id.unwrap_or("?"))),
        ),
        None => {}
    }
    if let Some((it, id, m)) = view.validations.last() {
        fact(
            &mut facts,
            "last validation",
            &format!(
                "{} (HL {}, coverage {}) · {} at iteration {it}",
                f3(m.combined),
                f3(m.human_likeness),
                f3(m.coverage),
                esc(id)
            ),
        );
    }
    let human = match &files.human {
        Some(h) => format!(
            "{} dialogues ({} in the cloud) · {}",
            h.n_dialogues,
            h.cloud_rows().count(),
            esc(h.feature_set.name())
        ),
        None => "human_ref.json not found".into(),
    };
    fact(&mut facts, "human reference", &human);
    fact(
        &mut facts,
        "discriminator.json",
        &files
            .discriminator_bytes
            .map_or("not found".into(), |b| format!("present ({b} bytes)")),
    );
    facts.push_str("</dl>");
    out.push_str(&facts);
    if let Some(Event::DiscriminatorTrained { top_features, .. }) = view.discriminator {
        if !top_features.is_empty() {
            out.push_str("<details><summary>Discriminator: top feature importances</summary><table><tr><th>feature</th><th>importance</th></tr>");
            for (f, v) in top_features {
                let _ = write!(out, "<tr><td>{}</td><td>{}</td></tr>", esc(f), f3(*v));
            }
            out.push_str("</table></details>");
        }
    }
    match &files.config_toml {
        Some(c) => {
            let _ = write!(
                out,
                "<details><summary>config.toml (resolved configuration)</summary><pre>{}</pre></details>",
                esc(c)
            );
        }
        None => notice(out, "config.toml not found in the run directory."),
    }
    out.push_str("</section>");
}

fn metric_of(m: &EvalMetrics, which: usize) -> f64 {
    match which {
        0 => m.combined,
        1 => m.human_likeness,
        _ => m.coverage,
    }
}

fn section_scores(out: &mut String, view: &LogView) {
    out.push_str(r#"<section id="scores"><h2>Train and validation scores</h2>"#);
    if view.evaluated.is_empty() && view.failed.is_empty() && view.validations.is_empty() {
        notice(
            out,
            "No candidate was evaluated yet (no candidate_evaluated, candidate_failed or validation event in log.jsonl).",
        );
        out.push_str("</section>");
        return;
    }
    let _ = write!(
        out,
        r#"<p class="meta">{} candidates evaluated on train batches, {} failed before scoring (× on the axis), {} validation runs of the best program. The running best is the highest combined train score so far; the dashed line is the baseline simulator (no persona) on the train tasks.</p>"#,
        view.evaluated.len(),
        view.failed.len(),
        view.validations.len()
    );
    out.push_str(r#"<div class="grid charts">"#);
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
        // running best (by combined), one step per iteration
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
                title: format!("best so far: {}", b.program_id),
            };
            match steps.last_mut() {
                Some(last) if last.x == p.x => *last = p,
                _ => steps.push(p),
            }
        }
        if !steps.is_empty() {
            series.push(Series {
                label: "running best".into(),
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
        out.push_str(&chart.render());
    }
    out.push_str("</div></section>");
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

fn section_map(out: &mut String, files: &RunFiles) {
    out.push_str(r#"<section id="map"><h2>Fingerprint map</h2>"#);
    let Some(human) = &files.human else {
        notice(
            out,
            "human_ref.json not found: the map is a projection fitted on the human fingerprints, so it cannot be drawn.",
        );
        out.push_str("</section>");
        return;
    };
    let rows: Vec<&crate::fitness::reference::ReferenceRow> = human
        .fingerprints
        .iter()
        .filter(|r| r.n_messages >= 1)
        .collect();
    let slices: Vec<&[f64]> = rows.iter().map(|r| r.features.as_slice()).collect();
    let Some(proj) = pca::Projection::fit(&slices, &human.mean, &human.std) else {
        notice(
            out,
            "The human fingerprints have fewer than two dialogues or no variance: no projection can be fitted.",
        );
        out.push_str("</section>");
        return;
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
    let _ = write!(
        out,
        r#"<p class="meta">PCA fitted on the {} human fingerprints, standardised by the human mean and std ({} features, feature set {}). Base and evolved dialogues (episodes that ran to an end) are projected onto the same axes: points near the human cloud behave like humans.</p>"#,
        rows.len(),
        FEATURE_NAMES.len(),
        esc(human.feature_set.name())
    );
    for f in missing {
        notice(
            out,
            &format!("{f} not found: those dialogues are not on the map."),
        );
    }
    let chart = XyChart {
        title: "Dialogues on the human fingerprints' first two principal components".into(),
        x_label: format!("PC1 ({:.1}% of human variance)", proj.explained[0] * 100.0),
        y_label: format!("PC2 ({:.1}%)", proj.explained[1] * 100.0),
        series,
        integer_x: false,
    };
    out.push_str(&chart.render());
    // the features that load most on each axis, to read the map
    out.push_str("<details><summary>Heaviest feature loadings per component</summary><table><tr><th>component</th><th class=\"l\">features (loading)</th></tr>");
    for (k, c) in proj.components.iter().enumerate() {
        let mut idx: Vec<usize> = (0..c.len()).collect();
        idx.sort_by(|a, b| c[*b].abs().total_cmp(&c[*a].abs()));
        let top = idx
            .iter()
            .take(5)
            .map(|&j| format!("{} ({})", FEATURE_NAMES[j], f3(c[j])))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = write!(
            out,
            "<tr><td>PC{}</td><td class=\"l\">{}</td></tr>",
            k + 1,
            esc(&top)
        );
    }
    out.push_str("</table></details></section>");
}

fn dice_values(d: &crate::fitness::coverage::Dice) -> Vec<f64> {
    vec![d.D1, d.D2, d.D3, d.D4, d.overall]
}

fn section_dice(out: &mut String, files: &RunFiles, view: &LogView) {
    out.push_str(r#"<section id="dice"><h2>D1–D4 alignment with humans</h2>"#);
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
        out.push_str(r#"<p class="meta">Dice coefficient between each condition's mean fingerprint and the human mean, per dimension (1 = same magnitude), from the evaluation tables.</p><div class="grid charts">"#);
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
                title: format!("{} split ({file})", table.split),
                groups: groups.clone(),
                series,
            };
            out.push_str(&chart.render());
        }
        out.push_str("</div></section>");
        return;
    }
    notice(
        out,
        "No eval-<split>.json in the run directory (run `ppol eval`): showing the baseline against the best program's train metrics instead.",
    );
    let best_id = view.best_program_id(files);
    let mut series = Vec::new();
    if let Some(b) = view.baseline() {
        series.push((
            "base (train)".to_string(),
            "base",
            COLOR_BASE,
            dice_values(&b.dice),
        ));
    }
    if let Some((m, _)) = view.best_train_metrics(files, best_id) {
        series.push((
            "best (train)".to_string(),
            "evolved",
            COLOR_EVOLVED,
            dice_values(&m.dice),
        ));
    }
    if series.is_empty() {
        notice(
            out,
            "Nor does log.jsonl hold baseline or candidate metrics.",
        );
    } else {
        let chart = BarChart {
            title: "Dice D1–D4 on the train tasks".into(),
            groups,
            series,
        };
        out.push_str(&chart.render());
    }
    out.push_str("</section>");
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

fn section_eval(out: &mut String, files: &RunFiles) {
    out.push_str(r#"<section id="eval"><h2>Evaluation table</h2>"#);
    if files.evals.is_empty() {
        notice(
            out,
            "No eval-<split>.json in the run directory: `ppol eval` has not been run on this run yet.",
        );
        out.push_str("</section>");
        return;
    }
    for (file, t) in &files.evals {
        let _ = write!(
            out,
            r#"<h3>{} split <span class="meta">({}; {} tasks; human traces: {})</span></h3><div class="scroll"><table class="eval"><tr><th>condition</th><th>HL</th><th>coverage</th><th>score</th><th>D1</th><th>D2</th><th>D3</th><th>D4</th><th>Dice</th><th>success</th><th>n</th></tr>"#,
            esc(&t.split),
            esc(file),
            t.tasks.len(),
            esc(&t.human_source.join(", "))
        );
        for r in &t.rows {
            match &r.skipped {
                Some(why) => {
                    let _ = write!(
                        out,
                        r#"<tr class="skipped"><td>{}</td><td class="skip" colspan="10">skipped: {}</td></tr>"#,
                        esc(&r.name),
                        esc(why)
                    );
                }
                None => {
                    let _ = write!(
                        out,
                        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        esc(&r.name),
                        f3(r.human_likeness),
                        f3(r.coverage),
                        f3(r.score),
                        f3(r.dice.D1),
                        f3(r.dice.D2),
                        f3(r.dice.D3),
                        f3(r.dice.D4),
                        f3(r.dice.overall),
                        opt3(r.success_rate),
                        r.n_dialogues
                    );
                }
            }
        }
        out.push_str("</table></div>");
    }
    out.push_str(r#"<p class="meta">HL = mean P(human) from the run's discriminator; coverage = two-sided Chamfer coverage of the human cloud; score = 0.5·HL + 0.5·coverage; Dice = mean of D1–D4; success = share of episodes with reward ≥ 1.</p></section>"#);
}

fn section_lineage(out: &mut String, files: &RunFiles, view: &LogView) {
    out.push_str(r#"<section id="lineage"><h2>Lineage of the best program</h2>"#);
    let best_id = view.best_program_id(files);
    // the first evaluation of each program is the one that created it
    let mut first: HashMap<&str, &Evaluated> = HashMap::new();
    for e in &view.evaluated {
        first.entry(e.program_id).or_insert(e);
    }
    let (chain, source): (Vec<String>, &str) = match &files.best_program {
        Some(b) if !b.lineage.is_empty() => (b.lineage.clone(), "best/program.json"),
        _ => {
            let mut chain = Vec::new();
            let mut cur = best_id;
            while let Some(id) = cur {
                if chain.iter().any(|c| c == id) {
                    break; // a cycle in a corrupt log: stop rather than loop
                }
                chain.push(id.to_string());
                cur = first.get(id).and_then(|e| e.parent_id);
            }
            chain.reverse();
            (chain, "parent ids in log.jsonl")
        }
    };
    if chain.is_empty() {
        notice(
            out,
            "No best program yet: best/program.json is missing and log.jsonl names none.",
        );
    } else {
        if files.best_program.is_none() {
            notice(out, "best/program.json not found: the lineage is reconstructed from the parent ids in log.jsonl.");
        }
        let _ = write!(
            out,
            r#"<p class="meta">{} steps from the seed to the best program (from {}).</p><ol class="lineage">"#,
            chain.len(),
            source
        );
        for (i, id) in chain.iter().enumerate() {
            let class = if i + 1 == chain.len() {
                " class=\"best\""
            } else {
                ""
            };
            match first.get(id.as_str()) {
                Some(e) => {
                    let _ = write!(
                        out,
                        r#"<li{class}><b class="mono">{}</b> <span class="tag">{}</span> iteration {} · combined {} <span class="meta">(HL {}, coverage {})</span><br><span class="summary">{}</span></li>"#,
                        esc(id),
                        esc(e.mutation),
                        e.iteration,
                        f3(e.metrics.combined),
                        f3(e.metrics.human_likeness),
                        f3(e.metrics.coverage),
                        esc(e.summary)
                    );
                }
                None => {
                    let _ = write!(
                        out,
                        r#"<li{class}><b class="mono">{}</b> <span class="meta">(no candidate_evaluated event for it in log.jsonl)</span></li>"#,
                        esc(id)
                    );
                }
            }
        }
        out.push_str("</ol>");
    }
    match &files.best_source {
        Some(src) => {
            let _ = write!(
                out,
                "<details><summary>best/program.py ({} lines)</summary><pre>{}</pre></details>",
                src.lines().count(),
                esc(src)
            );
        }
        None => notice(out, "best/program.py not found."),
    }
    // counts by mutation kind and failures by stage
    let mut kinds: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    for e in &view.evaluated {
        let k = kinds.entry(e.mutation).or_default();
        k[0] += 1;
        k[2] += usize::from(e.new_best);
    }
    for f in &view.failed {
        kinds.entry(f.mutation).or_default()[1] += 1;
    }
    out.push_str(r#"<div class="grid"><div><h3>Candidates by mutation kind</h3><table><tr><th>mutation</th><th>evaluated</th><th>failed</th><th>new best</th></tr>"#);
    for (k, [ev, fa, nb]) in &kinds {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{ev}</td><td>{fa}</td><td>{nb}</td></tr>",
            esc(k)
        );
    }
    if kinds.is_empty() {
        out.push_str(r#"<tr><td colspan="4" class="skip">no candidates in log.jsonl</td></tr>"#);
    }
    out.push_str("</table></div>");
    let mut stages: BTreeMap<&str, (usize, usize, &Failed)> = BTreeMap::new();
    for f in &view.failed {
        let s = stages.entry(f.stage).or_insert((0, 0, f));
        s.0 += 1;
        s.1 += usize::from(f.requeued);
        s.2 = f;
    }
    out.push_str(r#"<div><h3>Failures by stage</h3><table><tr><th>stage</th><th>count</th><th>requeued</th><th class="l">latest reason</th></tr>"#);
    for (stage, (n, rq, last)) in &stages {
        let _ = write!(
            out,
            r#"<tr><td>{}</td><td>{n}</td><td>{rq}</td><td class="l">iteration {}{}: {}</td></tr>"#,
            esc(stage),
            last.iteration,
            last.program_id
                .map(|p| format!(" ({})", esc(p)))
                .unwrap_or_default(),
            esc(last.reason)
        );
        if !last.prompt_fit.is_empty() {
            let _ = write!(
                out,
                r#"<tr><td colspan="4" class="l">the mutator prompt was cut to fit: {}</td></tr>"#,
                esc(last.prompt_fit)
            );
        }
        if !last.raw_reply.is_empty() {
            let _ = write!(
                out,
                r#"<tr><td colspan="4" class="l"><details><summary>the model's raw reply (first 2 KB)</summary><pre>{}</pre></details></td></tr>"#,
                esc(last.raw_reply)
            );
        }
    }
    if stages.is_empty() {
        out.push_str(r#"<tr><td colspan="4" class="skip">no failed candidates</td></tr>"#);
    }
    out.push_str("</table></div></div></section>");
}

fn section_personas(out: &mut String, files: &RunFiles) {
    out.push_str(r#"<section id="personas"><h2>Sample personas of the best program</h2>"#);
    match &files.best_personas {
        None => notice(out, "best/personas.jsonl not found."),
        Some(ps) if ps.is_empty() => notice(out, "best/personas.jsonl is empty."),
        Some(ps) => {
            let _ = write!(
                out,
                r#"<p class="meta">{} of {} personas written by the best program for the validation tasks.</p><div class="personas">"#,
                ps.len().min(N_SAMPLE_PERSONAS),
                ps.len()
            );
            for p in ps.iter().take(N_SAMPLE_PERSONAS) {
                let axes = p
                    .active_axes()
                    .iter()
                    .map(|a| format!(r#"<span class="tag">{}</span>"#, esc(a)))
                    .collect::<String>();
                let _ = write!(
                    out,
                    r#"<div class="card persona"><h3 class="mono">{}</h3><div class="meta">task {}</div><div>{}</div>{}<p>{}</p>{}</div>"#,
                    esc(&p.persona_id),
                    esc(p.task_id.as_deref().unwrap_or("–")),
                    if axes.is_empty() {
                        r#"<span class="meta">no active axis</span>"#.to_string()
                    } else {
                        axes
                    },
                    if p.description.is_empty() {
                        String::new()
                    } else {
                        format!("<p><i>{}</i></p>", esc(&p.description))
                    },
                    esc(&p.text),
                    p.reasoning
                        .as_deref()
                        .map(|r| format!(r#"<p class="meta">why: {}</p>"#, esc(r)))
                        .unwrap_or_default()
                );
            }
            out.push_str("</div>");
        }
    }
    out.push_str("</section>");
}

/// Pick up to `n` episodes that ran to an end, one per persona first, then any.
fn sample_episodes(eps: &[Episode], n: usize) -> Vec<&Episode> {
    let mut out: Vec<&Episode> = Vec::new();
    for e in eps.iter().filter(|e| e.status == EpisodeStatus::Ok) {
        if out.len() < n && !out.iter().any(|o| o.persona_id == e.persona_id) {
            out.push(e);
        }
    }
    for e in eps {
        if out.len() >= n {
            break;
        }
        if !out.iter().any(|o| std::ptr::eq(*o, e)) {
            out.push(e);
        }
    }
    out
}

fn section_dialogues(out: &mut String, files: &RunFiles) {
    out.push_str(r#"<section id="dialogues"><h2>Sample dialogues of the best program</h2>"#);
    match &files.best_episodes {
        None => notice(out, "best/episodes.jsonl not found."),
        Some(eps) if eps.is_empty() => notice(out, "best/episodes.jsonl is empty."),
        Some(eps) => {
            let n_failed = eps
                .iter()
                .filter(|e| e.status == EpisodeStatus::Failed)
                .count();
            let n_success = eps.iter().filter(|e| e.success()).count();
            let _ = write!(
                out,
                r#"<p class="meta">{} validation episodes ({} successful, {} failed). Tool calls and tool results are collapsed.</p>"#,
                eps.len(),
                n_success,
                n_failed
            );
            for e in sample_episodes(eps, N_SAMPLE_DIALOGUES) {
                dialogue_html(out, e);
            }
        }
    }
    out.push_str("</section>");
}

/// Unplayed sentences listed in the mechanics section.
const N_UNPLAYED: usize = 15;

fn section_mechanics(out: &mut String, files: &RunFiles) {
    use crate::simulate::episode::scripted::{vocabulary, PlaySource};
    out.push_str(r#"<section id="mechanics"><h2>What the offline user played</h2>"#);
    let Some(eps) = &files.best_episodes else {
        notice(out, "best/episodes.jsonl not found.");
        out.push_str("</section>");
        return;
    };
    let plays: Vec<_> = eps.iter().filter_map(|e| e.persona_play.as_ref()).collect();
    if plays.is_empty() {
        notice(
            out,
            "No episode records how its persona was played: the episodes were played by an LLM (or written by an older ppol). Mechanics apply to the offline scripted user only.",
        );
        out.push_str("</section>");
        return;
    }
    let n_text = plays
        .iter()
        .filter(|p| p.source == PlaySource::Text)
        .count();
    let n_axes = plays
        .iter()
        .filter(|p| p.source == PlaySource::Axes)
        .count();
    let _ = write!(
        out,
        r#"<p class="meta">The offline scripted user reads each persona's text against the mechanics vocabulary (<span class="mono">fitness/mechanics.toml</span>) and plays what it recognises; what it cannot express is listed below. {} of {} validation episodes were driven by the text, {} by the axis placement (a text with no mechanic), {} had no persona.</p>"#,
        n_text,
        plays.len(),
        n_axes,
        plays.len() - n_text - n_axes
    );
    // episodes per mechanic (each counted once per episode)
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for p in &plays {
        for id in p.mechanic_ids() {
            *per.entry(id).or_default() += 1;
        }
    }
    let vocab = vocabulary();
    let mut rows: Vec<(&str, usize)> = per.iter().map(|(k, v)| (*k, *v)).collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    out.push_str(r#"<h3>Played</h3>"#);
    if rows.is_empty() {
        notice(out, "No mechanic was played.");
    } else {
        out.push_str(
            r#"<table><thead><tr><th>mechanic</th><th>dimension</th><th>what the user does</th><th>episodes</th></tr></thead><tbody>"#,
        );
        for (id, n) in &rows {
            let info = vocab.get(id);
            let _ = write!(
                out,
                r#"<tr><td class="mono">{}</td><td>{}</td><td>{}</td><td>{} ({:.0}%)</td></tr>"#,
                esc(id),
                esc(info.map_or("", |i| i.dimension.as_str())),
                esc(info.map_or("", |i| i.summary.as_str())),
                n,
                100.0 * *n as f64 / plays.len() as f64
            );
        }
        out.push_str("</tbody></table>");
    }
    let never: Vec<String> = vocab
        .mechanics()
        .filter(|m| !m.framing && !per.contains_key(m.id.as_str()))
        .map(|m| format!(r#"<span class="tag">{}</span>"#, esc(&m.id)))
        .collect();
    if !never.is_empty() {
        let _ = write!(
            out,
            r#"<p class="meta">Mechanics of the vocabulary no persona used: {}</p>"#,
            never.join(" ")
        );
    }
    // unplayed sentences, most frequent first
    let mut unplayed: HashMap<&str, usize> = HashMap::new();
    for p in &plays {
        for u in &p.unplayed {
            *unplayed.entry(u.as_str()).or_default() += 1;
        }
    }
    let mut un: Vec<(&str, usize)> = unplayed.into_iter().collect();
    un.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let total: usize = un.iter().map(|u| u.1).sum();
    out.push_str(r#"<h3>Not played</h3>"#);
    if un.is_empty() {
        notice(
            out,
            "Every persona sentence was played (or restated the task).",
        );
    } else {
        let _ = write!(
            out,
            r#"<p class="meta">{} distinct sentences ({} occurrences) the offline proxy cannot express; an LLM user would read them, the scripted user ignores them. The {} most frequent:</p><table><thead><tr><th>sentence</th><th>episodes</th></tr></thead><tbody>"#,
            un.len(),
            total,
            un.len().min(N_UNPLAYED)
        );
        for (sentence, n) in un.iter().take(N_UNPLAYED) {
            let _ = write!(out, "<tr><td>{}</td><td>{}</td></tr>", esc(sentence), n);
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</section>");
}

fn dialogue_html(out: &mut String, e: &Episode) {
    let termination = serde_json::to_value(e.termination)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let _ = write!(
        out,
        r#"<div class="dialogue"><h3 class="mono">{}</h3><div class="meta">task {} · persona {} · ended by {} · reward {}{}</div>"#,
        esc(&e.id),
        esc(&e.task_id),
        esc(&e.persona_id),
        esc(&termination),
        opt3(e.reward),
        e.error
            .as_deref()
            .map(|x| format!(" · error: {}", esc(x)))
            .unwrap_or_default()
    );
    for t in &e.conversation {
        match t.role {
            Role::User | Role::Assistant => {
                let role = t.role.as_str();
                if !t.content.is_empty() || t.tool_calls.is_empty() {
                    let _ = write!(
                        out,
                        r#"<div class="turn {role}"><span class="who">{role}</span>{}</div>"#,
                        esc(&t.content)
                    );
                }
                for c in &t.tool_calls {
                    let args = serde_json::to_string_pretty(&c.arguments).unwrap_or_default();
                    let _ = write!(
                        out,
                        r#"<details class="toolcall"><summary>tool call: {}</summary><pre>{}</pre></details>"#,
                        esc(&c.name),
                        esc(&args)
                    );
                }
            }
            Role::Tool | Role::System => {
                let _ = write!(
                    out,
                    r#"<details class="turn {0}"><summary>{0} message{1}</summary><pre>{2}</pre></details>"#,
                    t.role.as_str(),
                    t.tool_call_id
                        .as_deref()
                        .map(|i| format!(" ({})", esc(i)))
                        .unwrap_or_default(),
                    esc(&t.content)
                );
            }
        }
    }
    out.push_str("</div>");
}

/// Per-role counters pulled out of a cost summary, whatever its exact shape: either
/// `{"roles": {role: {...}}, "total": {...}}` or `{role: {...}, ..., "total": {...}}`.
/// Numeric counters of one role (`calls`, `prompt_tokens`, `usd`, ...).
type Counters = BTreeMap<String, f64>;

fn cost_rows(cost: &runlog::CostSummary) -> (Vec<(String, Counters)>, Option<Counters>) {
    fn numbers(v: &Value) -> Option<BTreeMap<String, f64>> {
        let m: BTreeMap<String, f64> = v
            .as_object()?
            .iter()
            .filter_map(|(k, v)| v.as_f64().map(|x| (k.clone(), x)))
            .collect();
        (!m.is_empty()).then_some(m)
    }
    let roles: Vec<(String, BTreeMap<String, f64>)> =
        match cost.get("roles").and_then(Value::as_object) {
            Some(r) => r
                .iter()
                .filter_map(|(k, v)| numbers(v).map(|n| (k.clone(), n)))
                .collect(),
            None => cost
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "total" | "budget" | "models"))
                .filter_map(|(k, v)| numbers(v).map(|n| (k.clone(), n)))
                .collect(),
        };
    (roles, cost.get("total").and_then(numbers))
}

fn sum_costs<'a>(costs: impl Iterator<Item = &'a runlog::CostSummary>) -> runlog::CostSummary {
    let mut roles: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    let mut total: BTreeMap<String, f64> = BTreeMap::new();
    for c in costs {
        let (rs, t) = cost_rows(c);
        for (role, nums) in rs {
            let r = roles.entry(role).or_default();
            for (k, v) in nums {
                *r.entry(k).or_default() += v;
            }
        }
        for (k, v) in t.into_iter().flatten() {
            *total.entry(k).or_default() += v;
        }
    }
    let mut out = runlog::CostSummary::new();
    out.insert(
        "roles".into(),
        serde_json::to_value(&roles).unwrap_or(Value::Null),
    );
    if !total.is_empty() {
        out.insert(
            "total".into(),
            serde_json::to_value(&total).unwrap_or(Value::Null),
        );
    }
    out
}

fn section_costs(out: &mut String, files: &RunFiles, view: &LogView) {
    out.push_str(r#"<section id="costs"><h2>Costs and time</h2>"#);
    let ledger_path = files.dir.join("costs.jsonl");
    let ledger = crate::evolve::ledger::read(&ledger_path);
    let (summary, source) = match (view.stopped, &ledger) {
        (
            Some(Record {
                event: Event::RunStopped { cost, .. },
                ..
            }),
            _,
        ) => (cost.clone(), "run_stopped, over every process of the run"),
        (_, Ok(lines)) if !lines.is_empty() => {
            let roles = &lines[lines.len() - 1].roles;
            let summary: runlog::CostSummary = [
                ("roles".to_string(), serde_json::json!(roles)),
                (
                    "total".to_string(),
                    serde_json::json!(crate::evolve::ledger::total(roles)),
                ),
            ]
            .into_iter()
            .collect();
            (
                summary,
                "the cost ledger (costs.jsonl), as there is no run_stopped event",
            )
        }
        _ => (
            sum_costs(view.evaluated.iter().map(|e| e.cost)),
            "the sum of candidate_evaluated costs, as there is no run_stopped event",
        ),
    };
    let (roles, total) = cost_rows(&summary);
    if roles.is_empty() && total.is_none() {
        notice(out, &format!("No cost recorded (from {source})."));
    } else {
        let get = |m: &BTreeMap<String, f64>, k: &str| m.get(k).copied();
        let tokens = |m: &BTreeMap<String, f64>| {
            get(m, "tokens").or_else(|| {
                match (get(m, "prompt_tokens"), get(m, "completion_tokens")) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
                }
            })
        };
        let int = |x: Option<f64>| x.map_or_else(|| "–".into(), |v| grouped(v.round() as i64));
        let usd = |m: &BTreeMap<String, f64>| get(m, "usd").or_else(|| get(m, "cost_usd"));
        let _ = write!(
            out,
            r#"<p class="meta">From {source}.</p><table><tr><th>role</th><th>calls</th><th>cache hits</th><th>prompt tokens</th><th>completion tokens</th><th>tokens</th><th>USD</th></tr>"#
        );
        let mut row = |name: &str, m: &BTreeMap<String, f64>, bold: bool| {
            let (o, c) = if bold { ("<b>", "</b>") } else { ("", "") };
            let _ = write!(
                out,
                "<tr><td>{o}{}{c}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(name),
                int(get(m, "calls")),
                int(get(m, "cache_hits")),
                int(get(m, "prompt_tokens")),
                int(get(m, "completion_tokens")),
                int(tokens(m)),
                opt3(usd(m))
            );
        };
        for (r, m) in &roles {
            row(r, m, false);
        }
        if let Some(t) = &total {
            row("total", t, true);
        }
        out.push_str("</table>");
        if let Some(why) = summary.get("budget_exhausted").and_then(Value::as_str) {
            notice(out, &format!("Budget exhausted: {why}"));
        }
    }
    section_cost_processes(out, &summary, &ledger_path, ledger.err());
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
    out.push_str(r#"<dl class="facts">"#);
    fact(
        out,
        if view.stopped.is_some() {
            "wall time (start to stop)"
        } else {
            "wall time (start to last event)"
        },
        &wall,
    );
    fact(out, "candidate evaluation time (sum)", &duration(eval_secs));
    fact(
        out,
        "mean per evaluated candidate",
        &if view.evaluated.is_empty() {
            "–".into()
        } else {
            duration(eval_secs / view.evaluated.len() as f64)
        },
    );
    fact(out, "checkpoints written", &view.checkpoints.to_string());
    out.push_str("</dl></section>");
}

/// What each process of the run (`evolve`, then each `resume`) spent: from `run_stopped`, else
/// from the cost ledger.
fn section_cost_processes(
    out: &mut String,
    summary: &runlog::CostSummary,
    ledger_path: &Path,
    ledger_error: Option<crate::Error>,
) {
    if let Some(e) = ledger_error {
        notice(out, &format!("The cost ledger could not be read: {e}"));
        return;
    }
    let shares: Vec<runlog::ProcessShare> = match summary.get("processes") {
        Some(v) => serde_json::from_value(v.clone()).unwrap_or_default(),
        None => crate::evolve::ledger::process_shares(ledger_path).unwrap_or_default(),
    };
    if shares.is_empty() {
        return;
    }
    let total: f64 = shares.iter().map(|s| s.usd).sum();
    let _ = write!(
        out,
        r#"<h3>Per process</h3><p class="meta">The run ran in {} process(es): <span class="mono">ppol evolve</span>, then one per <span class="mono">ppol resume</span> (after a stop, a crash or kill -9). Totals above are over all of them.</p><table><tr><th>Process</th><th>pid</th><th>started</th><th>calls</th><th>requests</th><th>tokens</th><th>USD</th><th>share</th></tr>"#,
        shares.len()
    );
    for p in &shares {
        let _ = write!(
            out,
            "<tr><td>#{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.4}</td><td>{}</td></tr>",
            p.process,
            p.pid,
            esc(&p.started),
            grouped(p.calls as i64),
            grouped(p.attempts as i64),
            grouped((p.prompt_tokens + p.completion_tokens) as i64),
            p.usd,
            if total > 0.0 {
                format!("{:.0}%", 100.0 * p.usd / total)
            } else {
                "–".into()
            }
        );
    }
    let _ = write!(
        out,
        "<tr><td><b>run</b></td><td></td><td></td><td>{}</td><td>{}</td><td>{}</td><td><b>{total:.4}</b></td><td>100%</td></tr></table>",
        grouped(shares.iter().map(|p| p.calls as i64).sum()),
        grouped(shares.iter().map(|p| p.attempts as i64).sum()),
        grouped(
            shares
                .iter()
                .map(|p| (p.prompt_tokens + p.completion_tokens) as i64)
                .sum()
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_url_schemes() {
        assert_eq!(
            esc(r#"<a href="https://x">&'"#),
            "&lt;a href=&quot;https&#58;//x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn parses_the_logs_times() {
        assert_eq!(duration(3725.0), "1 h 02 min 05 s");
        assert_eq!(duration(12.34), "12.3 s");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(grouped(-999), "-999");
        assert_eq!(grouped(1000), "1,000");
    }

    #[test]
    fn cost_summaries_of_either_shape() {
        let flat: runlog::CostSummary = serde_json::from_value(serde_json::json!({
            "user-sim": {"calls": 3, "prompt_tokens": 10, "completion_tokens": 5, "usd": 0.5},
            "total": {"calls": 3, "usd": 0.5},
            "models": {"user-sim": "x"}
        }))
        .unwrap();
        let (roles, total) = cost_rows(&flat);
        assert_eq!(roles.len(), 1);
        assert_eq!(total.unwrap()["usd"], 0.5);
        let summed = sum_costs([&flat, &flat].into_iter());
        let (roles, total) = cost_rows(&summed);
        assert_eq!(roles[0].1["calls"], 6.0);
        assert_eq!(total.unwrap()["usd"], 1.0);
    }
}
