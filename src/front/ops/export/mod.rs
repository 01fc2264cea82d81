//! `export_sft`: episodes as agent-hardening training records, returned and (with an output
//! path) written, with LLaMA-Factory's `dataset_info.json` for the `llamafactory` format.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::load_domain;
use crate::llm::ToolSpec;
use crate::simulate::episode::record::Episode;
use crate::simulate::export::{
    BadCallKind, Conversion, ConversionRule, Prepared, Unexported, ESTIMATE_TOLERANCE,
};
pub use crate::simulate::export::{
    BadCalls, RowTokens, SftFormat, FORMAT_VERSION, FORMAT_VERSIONS,
};
use crate::{Error, Result};

mod report;

use report::{count_conversions, row_warnings};
pub use report::{
    BadCallNote, ExportReport, SkipKind, SkippedEpisode, TokenSummary, OPENAI_MIN_EXAMPLES,
};

/// What `ppol export sft` needs.
#[derive(Debug)]
pub struct ExportRequest {
    /// Episode files.
    pub episodes: Vec<PathBuf>,
    /// Every episode that ran, not only successful ones.
    pub all: bool,
    /// τ² data directory (for the domain's policy and tool schemas).
    pub tau2_data: Option<PathBuf>,
    /// Share of persona clusters held out (0 = none).
    pub heldout_fraction: f64,
    /// Seed of the hold-out.
    pub seed: u64,
    /// Record format (default `ppol`).
    pub format: SftFormat,
    /// Where to write the training records (`None`: only return them). `llamafactory` writes
    /// a JSON array to a `.json` file and JSON Lines to a `.jsonl` one (the file types
    /// LLaMA-Factory reads); the other formats write JSON Lines.
    pub output: Option<PathBuf>,
    /// Where held-out personas' records go when `heldout_fraction` > 0 (default: `output`
    /// with `.heldout` before the extension).
    pub heldout_output: Option<PathBuf>,
    /// `llamafactory`: the name of the training file's entry in `dataset_info.json` (default:
    /// the file's stem); the held-out file's entry is then `NAME.heldout` (default: its stem).
    pub dataset_name: Option<String>,
    /// The layout version of the format (default [`FORMAT_VERSION`]; 1 is the layout before
    /// it, for pipelines that read it).
    pub format_version: Option<u32>,
    /// A file whose text replaces the agent's system prompt in every record (a compact policy:
    /// τ² retail's full policy is about 1,600 tokens in every row).
    pub system_prompt: Option<PathBuf>,
    /// Leave out records whose estimated length exceeds this many tokens (they are listed in
    /// `skipped`).
    pub max_tokens: Option<usize>,
    /// What to do with calls the agent got wrong (default: cut the row before the first).
    pub bad_calls: BadCalls,
}

/// Where the records go and how they are registered, checked before anything is computed.
struct Plan {
    train: PathBuf,
    heldout: Option<PathBuf>,
    /// `llamafactory`: (entry name, file) for the training file and the held-out one (regular
    /// files only: a device or FIFO is not a dataset LLaMA-Factory can read again).
    entries: Vec<(String, PathBuf)>,
    /// Write a JSON array instead of JSON Lines.
    json_array: bool,
    /// What will not be written, and why.
    notes: Vec<String>,
}

/// The `dataset_info.json` next to `file` (in LLaMA-Factory's `dataset_dir`).
fn dataset_info_of(file: &Path) -> PathBuf {
    file.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join("dataset_info.json")
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Merge `entries` into the `dataset_info.json` at `info`, returning the new text (nothing is
/// written). The error names the file.
fn merged_dataset_info(info: &Path, entries: &[(String, serde_json::Value)]) -> Result<String> {
    let existing = if info.exists() {
        Some(crate::io::read_to_string(info)?)
    } else {
        None
    };
    crate::simulate::export::merge_dataset_info(existing.as_deref(), entries)
        .map_err(|(location, why)| Error::parse(info, location, why))
}

/// The entries of `plan` grouped by the `dataset_info.json` that will hold them.
fn entries_by_info(
    plan: &Plan,
    files: &[PathBuf],
) -> BTreeMap<PathBuf, Vec<(String, serde_json::Value)>> {
    let mut by_info: BTreeMap<PathBuf, Vec<(String, serde_json::Value)>> = BTreeMap::new();
    for (name, file) in plan.entries.iter().filter(|(_, f)| files.contains(f)) {
        by_info.entry(dataset_info_of(file)).or_default().push((
            name.clone(),
            crate::simulate::export::llamafactory_dataset_entry(&file_name(file)),
        ));
    }
    by_info
}

fn plan(req: &ExportRequest) -> Result<Option<Plan>> {
    let lf = req.format == SftFormat::Llamafactory;
    if req.dataset_name.is_some() && !lf {
        return Err(Error::config(
            "--dataset-name",
            format!(
                "names a LLaMA-Factory dataset_info.json entry; it needs --format llamafactory, not {}",
                req.format
            ),
        ));
    }
    let Some(train) = req.output.clone() else {
        if req.heldout_output.is_some() || req.dataset_name.is_some() {
            return Err(Error::config(
                if req.heldout_output.is_some() {
                    "--heldout-output"
                } else {
                    "--dataset-name"
                },
                "is about the files written; give --output too",
            ));
        }
        return Ok(None);
    };
    let ext = |p: &Path| p.extension().map(|e| e.to_string_lossy().into_owned());
    let lf_ext = |key: &str, p: &Path| -> Result<String> {
        match ext(p).as_deref() {
            Some(e @ ("json" | "jsonl")) => Ok(e.to_string()),
            _ => Err(Error::config(
                key,
                format!(
                    "'{}': LLaMA-Factory reads datasets from .json or .jsonl files",
                    p.display()
                ),
            )),
        }
    };
    let train_ext = if lf {
        lf_ext("--output", &train)?
    } else {
        "jsonl".to_string()
    };
    let mut notes = Vec::new();
    let special = |p: &Path| -> Result<bool> { Ok(crate::io::output_target(p)?.is_special()) };
    let train_special = special(&train)?;
    let heldout = match (&req.heldout_output, req.heldout_fraction > 0.0) {
        (_, false) => None,
        (Some(h), true) => Some(h.clone()),
        // nothing is made beside a device or FIFO
        (None, true) if train_special => {
            notes.push(format!(
                "held-out records were not written: '{}' is not a regular file, so no .heldout \
                 file is made beside it (give --heldout-output)",
                train.display()
            ));
            None
        }
        (None, true) => Some(train.with_extension(format!("heldout.{train_ext}"))),
    };
    if let Some(h) = &heldout {
        if lf {
            lf_ext("--heldout-output", h)?;
        }
        if h == &train {
            return Err(Error::config(
                "--heldout-output",
                format!(
                    "'{}' is also --output: held-out records need a file of their own",
                    h.display()
                ),
            ));
        }
    }
    let mut entries = Vec::new();
    if lf {
        let stem = |p: &Path| {
            p.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let name = match &req.dataset_name {
            Some(n) if n.trim().is_empty() => {
                return Err(Error::config("--dataset-name", "is empty"))
            }
            Some(n) => n.trim().to_string(),
            None => stem(&train),
        };
        if train_special {
            notes.push(format!(
                "'{}' is not a regular file: it is not registered in a dataset_info.json",
                train.display()
            ));
        } else {
            entries.push((name.clone(), train.clone()));
        }
        if let Some(h) = &heldout {
            let held_name = match &req.dataset_name {
                Some(_) => format!("{name}.heldout"),
                None => stem(h),
            };
            if held_name == name {
                return Err(Error::config(
                    "--heldout-output",
                    format!(
                        "'{}' would be registered as dataset '{name}', like --output; give it another name",
                        h.display()
                    ),
                ));
            }
            if special(h)? {
                notes.push(format!(
                    "'{}' is not a regular file: it is not registered in a dataset_info.json",
                    h.display()
                ));
            } else {
                entries.push((held_name, h.clone()));
            }
        }
    }
    let plan = Plan {
        json_array: lf && train_ext == "json",
        train,
        heldout,
        entries,
        notes,
    };
    // an unreadable dataset_info.json or a name clash stops the export before it writes
    let files: Vec<PathBuf> = plan.entries.iter().map(|(_, f)| f.clone()).collect();
    for (info, entries) in entries_by_info(&plan, &files) {
        merged_dataset_info(&info, &entries)?;
    }
    Ok(Some(plan))
}

/// Records as the file's text: JSON Lines, or one JSON array (a record a line).
fn records_text(records: &[serde_json::Value], json_array: bool) -> String {
    if !json_array {
        return crate::io::to_jsonl(records);
    }
    let rows: Vec<String> = records.iter().map(crate::io::to_json).collect();
    if rows.is_empty() {
        "[]\n".to_string()
    } else {
        format!("[\n{}\n]\n", rows.join(",\n"))
    }
}

/// The policy and tools of the built-in domains, by (domain, τ² data directory).
type Domains = std::collections::HashMap<(String, Option<PathBuf>), (String, Vec<ToolSpec>)>;

/// Where an episode's agent view (system prompt and tools) comes from.
enum View {
    /// The episode's own record (external worlds), or none.
    Own,
    /// A built-in domain, loaded once.
    Domain((String, Option<PathBuf>)),
}

impl View {
    fn of<'a>(&'a self, e: &'a Episode, domains: &'a Domains) -> (&'a String, &'a Vec<ToolSpec>) {
        static NONE: std::sync::OnceLock<(String, Vec<ToolSpec>)> = std::sync::OnceLock::new();
        match (self, &e.agent) {
            (View::Own, Some(a)) => (&a.system_prompt, &a.tools),
            (View::Own, None) => {
                let none = NONE.get_or_init(Default::default);
                (&none.0, &none.1)
            }
            (View::Domain(key), _) => {
                let (system, tools) = &domains[key];
                (system, tools)
            }
        }
    }
}

/// What the agent of `e` saw: the episode's own record (external worlds), else the built-in
/// domain's policy and tools (loaded into `domains` once); a world with neither (chat without
/// a recorded prompt) exports the dialogue without system prompt and tools.
fn agent_view(
    req: &ExportRequest,
    e: &Episode,
    file: usize,
    domains: &mut Domains,
) -> Result<View> {
    if e.agent.is_some() {
        return Ok(View::Own);
    }
    // the data the episode was played from, unless --tau2-data says otherwise
    let recorded = req
        .tau2_data
        .is_none()
        .then_some(e.tau2_data.as_ref())
        .flatten();
    let key = (e.domain.clone(), recorded.cloned());
    if !domains.contains_key(&key) {
        let view = if crate::simulate::tau2::Domain::known(&e.domain).is_some() {
            let d = match recorded {
                Some(dir) if dir.is_dir() => load_domain(&e.domain, Some(dir))?,
                Some(dir) => load_domain(&e.domain, None).map_err(|err| {
                    Error::config(
                        "--tau2-data",
                        format!(
                            "episode '{}' of {} was played from τ² data at '{}', which is gone, \
                             and no other was found ({err})",
                            e.id,
                            req.episodes[file].display(),
                            dir.display()
                        ),
                    )
                })?,
                None => load_domain(&e.domain, req.tau2_data.as_deref())?,
            };
            (
                crate::simulate::episode::llm::agent_system_prompt(&d.policy),
                d.env().tools(),
            )
        } else {
            (String::new(), Vec::new())
        };
        domains.insert(key.clone(), view);
    }
    Ok(View::Domain(key))
}

/// The 1-based line of the `nth` episode (0-based) of `path` (blank lines hold none).
fn episode_line(path: &Path, nth: usize) -> Option<usize> {
    let text = crate::io::read_to_string(path).ok()?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .nth(nth)
        .map(|(i, _)| i + 1)
}

/// An episode id twice among the inputs (in one domain) is refused, naming both places: pass^k
/// would count the two as trials of one unit.
fn refuse_duplicate_ids(files: &[PathBuf], loaded: &[Episode], origin: &[usize]) -> Result<()> {
    let mut first_of_file = vec![0usize; files.len()];
    for (k, &f) in origin.iter().enumerate().rev() {
        first_of_file[f] = k;
    }
    // ids are `task:persona:trial`: the same id in two domains (τ² retail's and airline's task
    // 18) names two episodes
    let mut seen: std::collections::HashMap<(&str, &str), usize> = Default::default();
    for (k, e) in loaded.iter().enumerate() {
        let key = (e.domain.as_str(), e.id.as_str());
        let Some(&first) = seen.get(&key) else {
            seen.insert(key, k);
            continue;
        };
        let line = |k: usize| {
            let f = origin[k];
            episode_line(&files[f], k - first_of_file[f])
                .map_or("an episode".to_string(), |n| format!("line {n}"))
        };
        return Err(Error::parse(
            &files[origin[k]],
            line(k),
            format!(
                "episode id '{}' ({}) is also at {} {}: every episode needs its own id (pass^k \
                 would count the two as trials of one task and persona); give each input its \
                 own ids, or export the files one at a time",
                e.id,
                e.domain,
                files[origin[first]].display(),
                line(first)
            ),
        ));
    }
    Ok(())
}

/// Turn episodes into chat fine-tuning records from the agent's point of view, in
/// `req.format`; personas held out by `req.heldout_fraction` go to `heldout` in every format.
/// Episodes the format cannot hold are skipped and listed in `skipped`. With `req.output` the
/// records are written (nothing is, when no record is left for training), and for
/// `llamafactory` their entries are merged into the `dataset_info.json` next to each file.
pub fn export_sft(req: &ExportRequest) -> Result<ExportReport> {
    super::stop_if_resolving("export sft", || serde_json::json!(format!("{req:#?}")))?;
    use crate::simulate::export::{held_out, row_tokens, selected, sft_record_of, Selection};
    if !(req.heldout_fraction.is_finite() && (0.0..1.0).contains(&req.heldout_fraction)) {
        return Err(Error::config(
            "--heldout-fraction",
            format!("must be in [0, 1), got {}", req.heldout_fraction),
        ));
    }
    let version = req.format_version.unwrap_or(FORMAT_VERSION);
    if !FORMAT_VERSIONS.contains(&version) {
        return Err(Error::config(
            "--format-version",
            format!(
                "unknown layout version {version}; use {}",
                FORMAT_VERSIONS
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        ));
    }
    if req.max_tokens == Some(0) {
        return Err(Error::config("--max-tokens", "must be at least 1"));
    }
    let own_prompt = match &req.system_prompt {
        Some(path) => {
            let text = crate::io::read_to_string(path)?;
            if text.trim().is_empty() {
                return Err(Error::config(
                    "--system-prompt",
                    format!("'{}' is empty", path.display()),
                ));
            }
            Some(text.trim_end().to_string())
        }
        None => None,
    };
    let plan = plan(req)?;
    let sel = if req.all {
        Selection::All
    } else {
        Selection::Successful
    };
    let mut loaded = Vec::new();
    let mut origin = Vec::new();
    for (i, path) in req.episodes.iter().enumerate() {
        let eps = crate::simulate::episode::record::load_episodes(path)?;
        origin.extend(std::iter::repeat_n(i, eps.len()));
        loaded.extend(eps);
    }
    if loaded.is_empty() {
        return Err(Error::Insufficient(format!(
            "no episodes in {}",
            req.episodes
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    refuse_duplicate_ids(&req.episodes, &loaded, &origin)?;
    let mut domains: Domains = Default::default();
    let mut report = ExportReport {
        train: Vec::new(),
        heldout: Vec::new(),
        heldout_personas: Vec::new(),
        n_episodes: loaded.len(),
        clusters: crate::simulate::export::cluster_summaries(&loaded),
        skipped: Vec::new(),
        bad_call_policy: req.bad_calls.name().to_string(),
        bad_calls: Vec::new(),
        conversions: Vec::new(),
        dropped_texts: 0,
        written: Vec::new(),
        datasets: BTreeMap::new(),
        notes: plan.as_ref().map(|p| p.notes.clone()).unwrap_or_default(),
        format_version: version,
        tokens: TokenSummary::default(),
        warnings: Vec::new(),
    };
    let skip = |report: &mut ExportReport, e: &Episode, file: usize, kind, reason: String| {
        report.skipped.push(SkippedEpisode {
            episode_id: e.id.clone(),
            file: req.episodes[file].clone(),
            reason,
            kind,
        })
    };
    // every selected episode made ready (bad calls, argument types, turns that fit together)
    let mut rows: Vec<(usize, usize, View, Prepared)> = Vec::new();
    for (i, (e, &file)) in loaded.iter().zip(&origin).enumerate() {
        if !selected(e, sel) {
            continue;
        }
        let view = agent_view(req, e, file, &mut domains)?;
        let tools = &view.of(e, &domains).1;
        let prepared = crate::simulate::export::prepare(e, tools, req.bad_calls);
        let bad = match &prepared {
            Ok(p) => p.bad_calls.clone(),
            Err(_) => crate::simulate::export::prepare(e, tools, BadCalls::Keep)
                .map(|p| p.bad_calls)
                .unwrap_or_default(),
        };
        report
            .bad_calls
            .extend(bad.into_iter().map(|b| BadCallNote {
                episode_id: e.id.clone(),
                file: req.episodes[file].clone(),
                tool: b.tool,
                kind: b.kind,
                detail: b.detail,
            }));
        match prepared {
            Ok(p) => rows.push((i, file, view, p)),
            Err(Unexported::Malformed(why)) => skip(&mut report, e, file, SkipKind::Malformed, why),
            Err(Unexported::BadCall(why)) => skip(&mut report, e, file, SkipKind::BadCall, why),
            Err(Unexported::Unfit(why)) => skip(&mut report, e, file, SkipKind::Format, why),
        }
    }
    // one type per argument path across the file (the held-out file too)
    let mut conversions: Vec<Conversion> = rows
        .iter()
        .flat_map(|r| r.3.conversions.iter().cloned())
        .collect();
    let mut calls: Vec<&mut crate::dialogue::ToolCall> = rows
        .iter_mut()
        .flat_map(|r| r.3.episode.conversation.iter_mut())
        .flat_map(|t| t.tool_calls.iter_mut())
        .collect();
    conversions.extend(crate::simulate::export::one_type_per_path(&mut calls));
    report.conversions = count_conversions(conversions);
    let mut train_tokens = Vec::new();
    let mut held_ids = BTreeSet::new();
    for (i, file, view, prepared) in &rows {
        let e = &loaded[*i];
        let (system, tools) = view.of(e, &domains);
        let system = own_prompt.as_ref().unwrap_or(system);
        let record = match sft_record_of(req.format, version, prepared, system, tools) {
            Ok(r) => r,
            Err(u) => {
                let kind = match u {
                    Unexported::Malformed(_) => SkipKind::Malformed,
                    Unexported::BadCall(_) => SkipKind::BadCall,
                    Unexported::Unfit(_) => SkipKind::Format,
                };
                skip(&mut report, e, *file, kind, u.reason().to_string());
                continue;
            }
        };
        let tokens = row_tokens(req.format, &record.record);
        if let Some(max) = req.max_tokens.filter(|&m| tokens.total() > m) {
            let why = format!("estimated longer than --max-tokens {max}");
            skip(&mut report, e, *file, SkipKind::TooLong, why);
            continue;
        }
        report.dropped_texts += record.dropped_texts;
        if held_out(&e.persona_id, req.heldout_fraction, req.seed) {
            held_ids.insert(e.persona_id.clone());
            report.heldout.push(record.record);
        } else {
            report.train.push(record.record);
            train_tokens.push(tokens);
        }
    }
    report.heldout_personas = held_ids.into_iter().collect();
    report.tokens = TokenSummary::of(train_tokens);
    report.warnings = report.tokens.warnings();
    report.warnings.extend(row_warnings(&report));
    if req.format == SftFormat::Openai
        && !report.train.is_empty()
        && report.train.len() < OPENAI_MIN_EXAMPLES
    {
        report.warnings.push(format!(
            "warning: OpenAI fine-tuning needs at least {OPENAI_MIN_EXAMPLES} training examples; \
             this export has {} (play more tasks or trials, or export with --all)",
            report.train.len()
        ));
    }
    if let Some(plan) = plan {
        write(req, &plan, &mut report)?;
    }
    Ok(report)
}

/// Write the records of `report` as `plan` says, then the `dataset_info.json` entries.
fn write(req: &ExportRequest, plan: &Plan, report: &mut ExportReport) -> Result<()> {
    if report.train.is_empty() {
        let selected = report.train.len() + report.heldout.len() + report.skipped.len();
        let why = if !report.heldout.is_empty() {
            format!(
                "all {} exported records belong to held-out personas (--heldout-fraction {})",
                report.heldout.len(),
                req.heldout_fraction
            )
        } else if let Some(skipped) = report.skipped_by_reason() {
            format!(
                "{} of {selected} selected episodes were skipped: {skipped}",
                report.skipped.len(),
            )
        } else if req.all {
            "none ran to an end".to_string()
        } else {
            "none was successful; --all (Python: all=True) exports every episode that ran"
                .to_string()
        };
        return Err(Error::Insufficient(format!(
            "no record to train on from the {} episodes ({why}); '{}' was not written",
            report.n_episodes,
            plan.train.display()
        )));
    }
    crate::io::write_atomic(
        &plan.train,
        records_text(&report.train, plan.json_array).as_bytes(),
    )?;
    report.written.push(plan.train.clone());
    if let Some(h) = &plan.heldout {
        crate::io::write_atomic(h, records_text(&report.heldout, plan.json_array).as_bytes())?;
        report.written.push(h.clone());
    }
    for (info, entries) in entries_by_info(plan, &report.written) {
        let text = merged_dataset_info(&info, &entries)?;
        crate::io::write_atomic(&info, text.as_bytes())?;
        for (name, _) in entries {
            report.datasets.insert(name, info.clone());
        }
    }
    Ok(())
}
