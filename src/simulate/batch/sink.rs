//! Where a batch's episodes go as they finish: one line each, appended to a partial file and
//! flushed (synced when asked), so a killed process keeps every finished episode and a rerun of
//! the same plan plays only the rest; once the whole plan is played the episodes are written to
//! the final file in plan order, atomically, and the partial file is removed.
//!
//! The partial file holds episode records, one per line, readable as a trace file while the
//! batch runs. An earlier line is reused for a job of the plan only when it is the same episode:
//! the same id, task, trial, seed, persona text and backend, and it did not fail (a failure may
//! have been an outage: it is played again). A torn last line (the process was killed while
//! writing it) is dropped. Lines of the run-directory baseline format of earlier versions
//! (`{"job", "task_id", "episode"}`) are read too.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::Job;
use crate::simulate::episode::record::{Episode, EpisodeStatus};
use crate::{limits, Error, Result};

/// Where a batch writes its episodes.
#[derive(Debug, Clone)]
pub struct SinkPaths {
    /// Written when the whole plan is played (None: the caller keeps the episodes).
    pub output: Option<PathBuf>,
    /// Appended as episodes finish (None: the output is not a regular file — a device, a
    /// FIFO — and nothing is made beside it; an interrupted batch starts over).
    pub partial: Option<PathBuf>,
    /// fsync every appended line (the run directory's baseline), not only flush it.
    pub durable: bool,
    /// Also reuse the episodes of a complete earlier output (`ppol eval`'s rows: evaluating
    /// a run again plays nothing it has played).
    pub reuse_output: bool,
}

impl SinkPaths {
    /// `OUT` with `OUT.partial` beside it; an output that is not a regular file gets no
    /// partial file (a warning says so).
    pub fn beside(output: &Path) -> Result<Self> {
        let partial = if crate::io::output_target(output)?.is_special() {
            tracing::warn!(
                "'{}' is not a regular file: episodes are written to it once, at the end, and \
                 none is kept in a .partial file beside it as they finish (an interrupted run \
                 starts over)",
                output.display()
            );
            None
        } else {
            let mut name = output.file_name().unwrap_or_default().to_os_string();
            name.push(".partial");
            Some(output.with_file_name(name))
        };
        Ok(SinkPaths {
            output: Some(output.to_path_buf()),
            partial,
            durable: false,
            reuse_output: false,
        })
    }

    /// A partial file and a final file of the caller's choosing (a run directory's).
    pub fn at(partial: PathBuf, output: Option<PathBuf>, durable: bool) -> Self {
        SinkPaths {
            output,
            partial: Some(partial),
            durable,
            reuse_output: false,
        }
    }

    /// The same, also reusing a complete earlier output ([`SinkPaths::reuse_output`]).
    pub fn reusing_output(mut self) -> Self {
        self.reuse_output = true;
        self
    }
}

/// An open sink: the append handle of the partial file.
pub(super) struct Sink {
    paths: SinkPaths,
    file: Option<Mutex<std::fs::File>>,
}

impl Sink {
    /// Open the sink for a plan: read what an earlier process left in the partial file, keep
    /// the episodes that belong to `jobs` (by job index), rewrite the partial file with only
    /// those, then open it for appending. `backend` is the backend the plan plays with.
    pub(super) fn open(
        paths: SinkPaths,
        jobs: &[Job],
        backend: &str,
    ) -> Result<(Sink, HashMap<usize, Episode>)> {
        let Some(partial) = paths.partial.clone() else {
            return Ok((Sink { paths, file: None }, HashMap::new()));
        };
        let mut earlier = Vec::new();
        let outputs = paths.output.iter().filter(|_| paths.reuse_output);
        for (k, path) in std::iter::once(&partial).chain(outputs).enumerate() {
            match std::fs::File::open(path) {
                Ok(f) => earlier.extend(read_partial(f, path)?.into_iter().map(|e| (e, k == 0))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("reading", path, e)),
            }
        }
        let (reused, stranded) = reusable(earlier, jobs, backend);
        if !stranded.is_empty() {
            // finished episodes of another plan: never discarded, moved aside with a warning
            let aside = set_aside(&partial)?;
            tracing::warn!(
                "{} finished episode(s) in {} are not of this plan ({}): moved to {}, not \
                 discarded. To finish that plan instead, move the file back to {} and rerun \
                 it as it was",
                stranded.len(),
                partial.display(),
                what_differs(&stranded, jobs, backend),
                aside.display(),
                partial.display()
            );
        }
        if let Some(dir) = partial.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("creating directory", dir, e))?;
        }
        // Rewrite first, then open the handle episodes are appended through: the rewrite
        // replaces the file (a rename), and a handle opened before it would append to the
        // replaced inode, which nothing reads again.
        let mut keep: Vec<(&usize, &Episode)> = reused.iter().collect();
        keep.sort_by_key(|(i, _)| **i);
        let keep: Vec<&Episode> = keep.into_iter().map(|(_, e)| e).collect();
        crate::io::write_jsonl(&partial, &keep)?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&partial)
            .map_err(|e| Error::io("opening", &partial, e))?;
        Ok((
            Sink {
                paths,
                file: Some(Mutex::new(file)),
            },
            reused,
        ))
    }

    /// Append one finished episode: one write of one line, flushed (and synced when durable).
    pub(super) fn push(&self, episode: &Episode) -> Result<()> {
        let (Some(file), Some(path)) = (&self.file, &self.paths.partial) else {
            return Ok(());
        };
        let mut line = crate::io::to_json(episode);
        line.push('\n');
        let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
        f.write_all(line.as_bytes())
            .and_then(|_| f.flush())
            .and_then(|_| {
                if self.paths.durable {
                    f.sync_data()
                } else {
                    Ok(())
                }
            })
            .map_err(|e| Error::io("appending to", path, e))
    }

    /// The whole plan was played: write the final file (when there is one) and remove the
    /// partial file.
    pub(super) fn finish(self, episodes: &[&Episode]) -> Result<()> {
        if let Some(out) = &self.paths.output {
            crate::io::write_jsonl(out, episodes)?;
        }
        drop(self.file);
        match &self.paths.partial {
            Some(p) if self.paths.output.is_some() => match std::fs::remove_file(p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(Error::io("removing", p, e))
                }
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// The partial file (None for an output that is not a regular file).
    pub(super) fn partial(&self) -> Option<&Path> {
        self.paths.partial.as_deref()
    }
}

/// The episodes of a partial file, in file order, read line by line in bounded memory. A torn
/// last line is dropped; any other line that is not an episode is an error naming it.
pub(super) fn read_partial(file: std::fs::File, path: &Path) -> Result<Vec<Episode>> {
    let mut r = std::io::BufReader::new(file);
    let mut out = Vec::new();
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        let n = std::io::Read::take(&mut r, limits::MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::io("reading", path, e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let complete = buf.last() == Some(&b'\n');
        if !complete && buf.len() > limits::MAX_LINE_BYTES {
            return Err(Error::parse(
                path,
                format!("line {line_no}"),
                format!("longer than {} bytes", limits::MAX_LINE_BYTES),
            ));
        }
        if !complete {
            break; // a torn tail: the process was killed while writing it
        }
        let text = String::from_utf8_lossy(&buf);
        if text.trim().is_empty() {
            continue;
        }
        out.push(parse_line(text.trim(), path, line_no)?);
    }
    Ok(out)
}

/// One line of a partial file: an episode, or an earlier version's `{"job", "task_id",
/// "episode"}` baseline row.
fn parse_line(text: &str, path: &Path, line_no: usize) -> Result<Episode> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Line {
        Episode(Box<Episode>),
        Row { episode: Box<Episode> },
    }
    match serde_json::from_str::<Line>(text) {
        Ok(Line::Episode(e)) | Ok(Line::Row { episode: e }) => Ok(*e),
        Err(_) => {
            let why = serde_json::from_str::<Episode>(text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            Err(Error::parse(
                path,
                format!("line {line_no}"),
                format!(
                    "not an episode record ({why}): the file is not this batch's partial \
                     output; move it away to start over"
                ),
            ))
        }
    }
}

/// The earlier episodes that are jobs of this plan (same id, task, trial, seed, persona text
/// and backend; not failed), by job index, and the finished episodes of the partial file
/// (those flagged `true`) that are not: another plan's. An episode matches at most one job.
fn reusable(
    earlier: Vec<(Episode, bool)>,
    jobs: &[Job],
    backend: &str,
) -> (HashMap<usize, Episode>, Vec<Episode>) {
    let mut by_key: HashMap<(String, u64), Vec<usize>> = HashMap::new();
    for (i, j) in jobs.iter().enumerate() {
        by_key.entry((j.id(), j.seed)).or_default().push(i);
    }
    let mut out = HashMap::new();
    let mut stranded = Vec::new();
    for (e, from_partial) in earlier {
        if e.status != EpisodeStatus::Ok {
            continue;
        }
        let pos = by_key
            .get_mut(&(e.id.clone(), e.seed))
            .filter(|_| e.backend == backend)
            .and_then(|candidates| {
                let pos = candidates.iter().position(|&i| {
                    let j = &jobs[i];
                    j.task_id == e.task_id
                        && j.trial == e.trial
                        && j.persona.as_ref().map_or("", |p| p.text.as_str()) == e.persona
                })?;
                Some(candidates.swap_remove(pos))
            });
        match pos {
            Some(i) => {
                out.insert(i, e);
            }
            None if from_partial => stranded.push(e),
            None => {}
        }
    }
    (out, stranded)
}

/// Move `partial` aside to the first free `<partial>.<k>`; the new path.
fn set_aside(partial: &Path) -> Result<PathBuf> {
    for k in 1..=10_000u32 {
        let mut name = partial.as_os_str().to_os_string();
        name.push(format!(".{k}"));
        let aside = PathBuf::from(name);
        if std::fs::symlink_metadata(&aside).is_ok() {
            continue;
        }
        std::fs::rename(partial, &aside).map_err(|e| Error::io("moving aside", partial, e))?;
        return Ok(aside);
    }
    Err(Error::io(
        "moving aside",
        partial,
        std::io::Error::other("10000 earlier copies are already beside it: remove some"),
    ))
}

/// How another plan's episodes differ from this plan: their backend, seeds, tasks, or else
/// their personas and trials.
pub(super) fn what_differs(stranded: &[Episode], jobs: &[Job], backend: &str) -> String {
    use std::collections::BTreeSet;
    let mut said = Vec::new();
    let backends: BTreeSet<&str> = stranded.iter().map(|e| e.backend.as_str()).collect();
    if backends.iter().any(|b| *b != backend) {
        let list: Vec<&str> = backends.into_iter().take(3).collect();
        // (each name is clipped with the whole text below)
        said.push(format!(
            "played with {} where this plan plays {backend}",
            list.join(", ")
        ));
    }
    let seeds: BTreeSet<u64> = jobs.iter().map(|j| j.seed).collect();
    if stranded.iter().all(|e| !seeds.contains(&e.seed)) {
        said.push("other seeds (`--seed`)".to_string());
    }
    let tasks: BTreeSet<&str> = jobs.iter().map(|j| j.task_id.as_str()).collect();
    let others: BTreeSet<&str> = stranded
        .iter()
        .map(|e| e.task_id.as_str())
        .filter(|t| !tasks.contains(t))
        .collect();
    if !others.is_empty() {
        let list: Vec<&str> = others.iter().take(5).copied().collect();
        let more = others.len().saturating_sub(list.len());
        said.push(format!(
            "tasks {}{} not in this plan",
            list.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    if said.is_empty() {
        said.push("other personas or trials".to_string());
    }
    let said = said.join("; ");
    match said.char_indices().nth(400) {
        Some((at, _)) => format!("{}…", &said[..at]),
        None => said,
    }
}
