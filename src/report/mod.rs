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
//! The work is split by job: extraction of plain data from the run directory — [`files`] (the
//! files, loaded and checked), `log_view` (the log's events by kind), the run's state and
//! best program from [`crate::evolve::rundir::summary`], and [`page`] / [`charts`] / [`best`] (one
//! serialisable struct per section) — then rendering, [`html`]: the templates of
//! `src/report/templates/` fed by that data, with the charts drawn by [`svg`].
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

pub mod best;
pub mod charts;
pub mod files;
pub mod html;
pub(crate) mod log_view;
pub mod page;
pub mod pca;
pub mod study;
pub mod svg;
pub mod text;

use std::path::{Path, PathBuf};

use crate::Result;

pub use crate::evolve::rundir::RunBest;
pub use files::RunFiles;
pub use page::Page;
pub use text::{esc, f3};

/// Personas shown in the "sample personas" section.
pub const N_SAMPLE_PERSONAS: usize = 4;
/// Dialogues shown in the "sample dialogues" section.
pub const N_SAMPLE_DIALOGUES: usize = 3;

/// Render the report of a run directory as one HTML document.
pub fn render(run_dir: &Path) -> Result<String> {
    Ok(render_files(&RunFiles::load(run_dir)?))
}

/// Render the report from loaded files.
pub fn render_files(files: &RunFiles) -> String {
    html::page(&Page::build(files))
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
