//! PyO3 bindings: the compiled module `ppol_rs._core`. Every function is a thin adapter over
//! one function of [`crate::front::ops`] (the same one its CLI verb calls) and returns Python
//! objects — dicts, lists, numpy arrays, classes — never JSON text. The Python package `ppol_rs`
//! (python/ppol_rs/__init__.py) adds pandas conversion and documentation.

use std::path::PathBuf;

use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::dialogue::Dialogue;
use crate::fitness::discriminator::Discriminator;
use crate::fitness::features::{fingerprint_many, FeatureSet, FEATURE_NAMES, N_FEATURES};
use crate::fitness::reference::HumanReference;
use crate::front::ops::{self, Overrides, TraceSource};
use crate::simulate::tau2::Domain;

mod convert;
mod fitness;
use convert::{from_py, to_py, value_from_py};
pub use fitness::{PyDiscriminator, PyHumanReference};

create_exception!(_core, Error, PyException, "Base class of every ppol error.");
create_exception!(
    _core,
    IoError,
    Error,
    "A file could not be read or written."
);
create_exception!(
    _core,
    ParseError,
    Error,
    "Input data does not have the expected shape (names file and line or JSON path)."
);
create_exception!(
    _core,
    ConfigError,
    Error,
    "An invalid configuration key or argument."
);
create_exception!(
    _core,
    FeatureSetMismatch,
    Error,
    "An artefact was built with another feature set."
);
create_exception!(
    _core,
    InsufficientData,
    Error,
    "Not enough data for the requested operation."
);
create_exception!(
    _core,
    LlmError,
    Error,
    "An LLM endpoint failed after retries."
);
create_exception!(
    _core,
    BudgetExhausted,
    Error,
    "The run's token or cost budget is spent."
);
create_exception!(
    _core,
    DomainError,
    Error,
    "A τ² environment problem (domain, data, task id)."
);
create_exception!(
    _core,
    SandboxError,
    Error,
    "The generator sandbox could not run."
);
create_exception!(
    _core,
    RunError,
    Error,
    "A run directory is unusable for the operation."
);
create_exception!(_core, Cancelled, Error, "The operation was cancelled.");

/// Map a library error to its Python exception class.
pub(crate) fn to_py_err(e: crate::Error) -> PyErr {
    let msg = e.to_string();
    match e {
        crate::Error::Io { .. } => IoError::new_err(msg),
        crate::Error::Parse { .. } => ParseError::new_err(msg),
        crate::Error::Config { .. } => ConfigError::new_err(msg),
        crate::Error::FeatureSetMismatch { .. } => FeatureSetMismatch::new_err(msg),
        crate::Error::Insufficient(_) => InsufficientData::new_err(msg),
        crate::Error::Llm { .. } => LlmError::new_err(msg),
        crate::Error::BudgetExhausted(_) => BudgetExhausted::new_err(msg),
        crate::Error::Environment { .. } => DomainError::new_err(msg),
        crate::Error::Sandbox(_) => SandboxError::new_err(msg),
        crate::Error::Run { .. } => RunError::new_err(msg),
        crate::Error::Cancelled(_) => Cancelled::new_err(msg),
    }
}

fn feature_set(s: Option<&str>) -> PyResult<FeatureSet> {
    match s {
        None => Ok(FeatureSet::default()),
        Some(s) => FeatureSet::parse(s).map_err(to_py_err),
    }
}

/// A Python `traces` argument as a [`TraceSource`]: a path (str / os.PathLike), a list of
/// paths, or a list of dialogue dicts (`{"id", "conversation": [{"role", "content"}], ...}`).
fn trace_source(traces: &Bound<'_, PyAny>) -> PyResult<TraceSource> {
    let is_path = |o: &Bound<'_, PyAny>| -> PyResult<bool> {
        Ok(o.is_instance_of::<PyString>() || o.hasattr("__fspath__")?)
    };
    if is_path(traces)? {
        return Ok(TraceSource::Files(vec![traces.extract::<PathBuf>()?]));
    }
    let list = traces.cast::<PyList>().map_err(|_| {
        ConfigError::new_err("traces must be a path, a list of paths, or a list of dialogue dicts")
    })?;
    if !list.is_empty() && is_path(&list.get_item(0)?)? {
        return Ok(TraceSource::Files(
            list.iter()
                .map(|o| o.extract::<PathBuf>())
                .collect::<PyResult<_>>()?,
        ));
    }
    let mut values = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        if !item.is_instance_of::<PyDict>() {
            return Err(ParseError::new_err(format!(
                "<python>: traces[{i}]: expected a dialogue dict, found {}",
                item.get_type().name()?
            )));
        }
        values.push(value_from_py(&item, &format!("traces[{i}]"))?);
    }
    Ok(TraceSource::Values(values))
}

fn dialogues(
    py: Python<'_>,
    traces: &Bound<'_, PyAny>,
    domain: Option<&str>,
) -> PyResult<Vec<Dialogue>> {
    let source = trace_source(traces)?;
    let loaded = py
        .detach(|| ops::load_traces(&source, domain))
        .map_err(to_py_err)?;
    warn_skipped(py, &loaded.skipped)?;
    Ok(loaded.dialogues)
}

/// A `UserWarning` for each dialogue a load left out (`FILE: line N: dialogue 'x' has no user
/// text ...`), as the command line warns on stderr.
fn warn_skipped(py: Python<'_>, skipped: &[crate::fitness::traces::Skipped]) -> PyResult<()> {
    let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
    for s in skipped {
        let text = crate::io::printable(&s.to_string()).into_owned();
        let message = std::ffi::CString::new(text).unwrap_or_default();
        PyErr::warn(py, &category, &message, 1)?;
    }
    Ok(())
}

fn matrix<'py>(
    py: Python<'py>,
    rows: impl Iterator<Item = Vec<f64>>,
    n: usize,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let mut flat = Vec::with_capacity(n * N_FEATURES);
    for r in rows {
        flat.extend(r);
    }
    PyArray1::from_vec(py, flat).reshape([n, N_FEATURES])
}

/// Blocking: run `future` on the operations layer's runtime with the GIL released.
fn block_on<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    py.detach(|| ops::block_on(future)).map_err(to_py_err)
}

/// Load trace files or dialogue dicts; returns normalised dialogue dicts.
#[pyfunction]
#[pyo3(signature = (traces, domain=None))]
fn load_traces<'py>(
    py: Python<'py>,
    traces: &Bound<'py, PyAny>,
    domain: Option<String>,
) -> PyResult<Bound<'py, PyAny>> {
    let ds = dialogues(py, traces, domain.as_deref())?;
    to_py(py, &ds)
}

/// Per-domain counts (dialogues, tasks, user turns, words per user turn), as `ppol traces stats`.
#[pyfunction]
#[pyo3(signature = (traces, domain=None))]
fn traces_stats<'py>(
    py: Python<'py>,
    traces: &Bound<'py, PyAny>,
    domain: Option<String>,
) -> PyResult<Bound<'py, PyAny>> {
    let source = trace_source(traces)?;
    let (stats, skipped) = py
        .detach(|| ops::traces_stats(&source, domain.as_deref()))
        .map_err(to_py_err)?;
    warn_skipped(py, &skipped)?;
    to_py(py, &stats)
}

/// The 19 feature names in column order.
#[pyfunction]
fn feature_names() -> Vec<&'static str> {
    FEATURE_NAMES.to_vec()
}

/// Fingerprint dialogues: (matrix n×19, ids, task ids).
#[pyfunction]
#[pyo3(signature = (traces, feature_set=None, domain=None))]
#[allow(clippy::type_complexity)]
fn fingerprint_matrix<'py>(
    py: Python<'py>,
    traces: &Bound<'py, PyAny>,
    feature_set: Option<&str>,
    domain: Option<String>,
) -> PyResult<(Bound<'py, PyArray2<f64>>, Vec<String>, Vec<Option<String>>)> {
    let set = self::feature_set(feature_set)?;
    let ds = dialogues(py, traces, domain.as_deref())?;
    let fps = py.detach(|| fingerprint_many(&ds, set));
    let m = matrix(py, fps.iter().map(|f| f.0.to_vec()), fps.len())?;
    Ok((
        m,
        ds.iter().map(|d| d.id.clone()).collect(),
        ds.iter().map(|d| d.task_id.clone()).collect(),
    ))
}

/// Score simulated dialogues; returns the dict of `ppol score`.
#[pyfunction]
#[pyo3(signature = (human, candidates, discriminator, lambda_h=None, lambda_b=None, raw=false, clusters=0))]
#[allow(clippy::too_many_arguments)]
fn score<'py>(
    py: Python<'py>,
    human: &PyHumanReference,
    candidates: &Bound<'py, PyAny>,
    discriminator: &PyDiscriminator,
    lambda_h: Option<f64>,
    lambda_b: Option<f64>,
    raw: bool,
    clusters: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let ds = dialogues(py, candidates, None)?;
    let s = py
        .detach(|| {
            ops::score(&ops::ScoreRequest {
                human: &human.inner,
                discriminator: &discriminator.inner,
                candidates: &ds,
                lambda_h,
                lambda_b,
                raw,
                clusters,
            })
        })
        .map_err(to_py_err)?;
    let out = to_py(py, &s)?;
    if let Ok(d) = out.cast::<PyDict>() {
        d.set_item(
            "discriminator_grouped_auc",
            discriminator
                .inner
                .training
                .grouped_auc
                .as_ref()
                .map(|a| a.mean),
        )?;
    }
    Ok(out)
}

/// The independent audit of human-likeness (as `ppol audit`): `candidates` is a list of
/// `(name, traces)` pairs; returns the report as a dict.
#[pyfunction]
#[pyo3(signature = (human, candidates, feature_set=None, folds=5, bootstrap=200, seed=0, llm=None, judge_pairs=20, judge_prompt=None, human_domain=None))]
#[allow(clippy::too_many_arguments)]
fn audit<'py>(
    py: Python<'py>,
    human: &Bound<'py, PyAny>,
    candidates: Vec<(String, Bound<'py, PyAny>)>,
    feature_set: Option<&str>,
    folds: usize,
    bootstrap: usize,
    seed: u64,
    llm: Option<&str>,
    judge_pairs: usize,
    judge_prompt: Option<PathBuf>,
    human_domain: Option<String>,
) -> PyResult<Bound<'py, PyAny>> {
    let req = ops::AuditRequest {
        human: trace_source(human)?,
        human_domain,
        candidates: candidates
            .iter()
            .map(|(name, traces)| Ok((name.clone(), trace_source(traces)?)))
            .collect::<PyResult<_>>()?,
        feature_set: Some(self::feature_set(feature_set)?),
        folds: Some(folds),
        bootstrap: Some(bootstrap),
        seed: Some(seed),
        llm: match llm {
            Some(spec) => ops::parse_llm(spec).map_err(to_py_err)?,
            None => None,
        },
        judge_pairs: Some(judge_pairs),
        judge_prompt,
    };
    let (report, skipped) = py.detach(|| ops::audit(&req)).map_err(to_py_err)?;
    warn_skipped(py, &skipped)?;
    to_py(py, &report)
}

/// Run the `ppol` command line with `argv` (first item = program name); returns its exit code
/// (0 done, 1 partly failed, 2 error, 130 interrupted).
#[pyfunction]
fn cli(py: Python<'_>, argv: Vec<String>) -> i32 {
    i32::from(py.detach(|| crate::front::cli::run_from(argv)))
}

/// The CLI's flags and their defaults per subcommand (`crate::front::cli::defaults`), for the
/// test that keeps them in step with this module's signatures.
#[pyfunction]
fn _cli_defaults() -> crate::front::cli::FlagDefaults {
    crate::front::cli::defaults()
}

/// The persona block ppol appends to a user simulator's system prompt (after a blank line,
/// only for a non-empty persona): `ppol::persona::persona_block`.
#[pyfunction]
fn persona_block(text: &str) -> String {
    crate::persona::persona_block(text)
}

/// Data shipped inside ppol (seed programs, demo traces), by name.
#[pyfunction]
fn shipped(name: &str) -> PyResult<&'static str> {
    crate::shipped::get(name).map_err(to_py_err)
}

/// Run a generator program in the sandbox for tasks (as `ppol generate`); returns the report:
/// `{"tasks": [{"task_id", "outcome": {"status": "ok", "personas", ...} | {"status": "failed",
/// "stage", "reason", ...}}], "sandbox", "llm"}`. `run` (as `--run`) takes the program, the
/// configuration and the tasks from a run directory.
#[pyfunction]
#[pyo3(signature = (program=None, task=None, domain=None, split=None, n=None, llm=None, seed=0, tau2_data=None, timeout_s=None, config=None, world=None, task_file=None, run=None))]
#[allow(clippy::too_many_arguments)]
fn generate<'py>(
    py: Python<'py>,
    program: Option<PathBuf>,
    task: Option<String>,
    domain: Option<String>,
    split: Option<String>,
    n: Option<usize>,
    llm: Option<String>,
    seed: u64,
    tau2_data: Option<PathBuf>,
    timeout_s: Option<f64>,
    config: Option<PathBuf>,
    world: Option<String>,
    task_file: Option<PathBuf>,
    run: Option<PathBuf>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut overrides = Overrides::new();
    overrides
        .python("timeout_s=", "sandbox.timeout_s", timeout_s)
        .map_err(to_py_err)?;
    let request = ops::GenerateInput {
        program,
        run,
        selection: ops::TaskSelection {
            domain,
            world,
            tau2_data,
            tasks: task,
            split,
            task_file,
            seed,
        },
        n,
        llm,
        config,
        overrides,
    }
    .resolve()
    .map_err(to_py_err)?;
    let report = block_on(py, ops::generate(request))?.map_err(to_py_err)?;
    to_py(py, &report)
}

/// Override the world keys of a run config from Python keyword arguments (`domain` is the
/// alias of the built-in worlds; both given is the config's error).
fn world_overrides(
    o: &mut Overrides,
    domain: Option<String>,
    world: Option<String>,
    task_file: Option<PathBuf>,
    tau2_data: Option<PathBuf>,
) -> crate::Result<()> {
    o.python("domain=", "run.domain", domain)?
        .python("world=", "run.world", world)?
        .python("task_file=", "world.task_file", task_file)?
        .python("tau2_data=", "run.tau2_data", tau2_data)?;
    Ok(())
}

/// Play episodes (as `ppol episodes`; `personas` is a persona JSONL path or a list of persona
/// dicts); returns `{"episodes": [...], "resumed", "backend",
/// "llm", "budget_exhausted"}`. `progress` (a callable) gets a dict per progress report of the
/// batch (`label`, `done`, `total`, `failed`, `reused`, `in_flight`, `longest_s`, `heartbeat`,
/// `line`). Ctrl-C (KeyboardInterrupt) stops the batch as `ppol episodes` stops: no episode
/// starts after it, the finished ones stay in `OUT.partial`, and KeyboardInterrupt is raised
/// saying so.
#[pyfunction]
#[pyo3(signature = (domain=None, tasks="all", personas=None, trials=1, llm=None, max_turns=None, seed=0, tau2_data=None, concurrency=256, output=None, config=None, world=None, task_file=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn episodes<'py>(
    py: Python<'py>,
    domain: Option<String>,
    tasks: &str,
    personas: Option<&Bound<'py, PyAny>>,
    trials: u32,
    llm: Option<String>,
    max_turns: Option<usize>,
    seed: u64,
    tau2_data: Option<PathBuf>,
    concurrency: usize,
    output: Option<PathBuf>,
    config: Option<PathBuf>,
    world: Option<String>,
    task_file: Option<PathBuf>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(d) = domain.as_deref().filter(|d| Domain::known(d).is_none()) {
        // a domain that does not exist is a DomainError, as it always was from Python
        return Err(to_py_err(crate::Error::Environment {
            domain: d.to_string(),
            message: format!(
                "unknown domain (expected one of: {}; other worlds: world=\"external:COMMAND\", \
                 \"tau2:DOMAIN\" or \"chat\")",
                crate::simulate::tau2::DOMAINS.join(", ")
            ),
        }));
    }
    let mut o = Overrides::new();
    world_overrides(&mut o, domain, world, task_file, tau2_data).map_err(to_py_err)?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let personas: Option<Vec<crate::persona::Persona>> = match personas {
        // a persona file is read by the same bounded reader as `--personas`
        Some(p) if p.is_instance_of::<PyString>() || p.hasattr("__fspath__")? => {
            let path: PathBuf = p.extract()?;
            Some(py.detach(|| ops::read_personas(&path)).map_err(to_py_err)?)
        }
        Some(p) => Some(from_py(p, "personas")?),
        None => None,
    };
    let request = ops::EpisodesInput {
        config,
        overrides: o,
        tasks: tasks.to_string(),
        personas,
        trials,
        llm,
        max_turns,
        max_tool_rounds: None,
        seed,
        concurrency,
        output,
        stop: Some(stop.clone()),
    }
    .resolve()
    .map_err(to_py_err)?;
    // The first exception of the progress callback or of a signal handler (Ctrl-C) stops the
    // batch, and is raised once it has returned.
    let raised: std::sync::Mutex<Option<PyErr>> = std::sync::Mutex::new(None);
    let raise = |e: PyErr| {
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        raised
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
    };
    let report_progress = |p: &crate::simulate::batch::Progress| {
        if let Some(cb) = &progress {
            let called = Python::attach(|py| -> PyResult<()> {
                let d = PyDict::new(py);
                d.set_item("label", &p.label)?;
                d.set_item("done", p.done)?;
                d.set_item("total", p.total)?;
                d.set_item("failed", p.failed)?;
                d.set_item("reused", p.reused)?;
                d.set_item("in_flight", p.in_flight)?;
                d.set_item("longest_s", p.longest_s)?;
                d.set_item("heartbeat", p.heartbeat)?;
                d.set_item("line", p.line())?;
                cb.call1(py, (d,)).map(|_| ())
            });
            if let Err(e) = called {
                raise(e);
            }
        }
    };
    let result = py
        .detach(|| {
            ops::block_on(async {
                let work = ops::episodes(request, &report_progress);
                tokio::pin!(work);
                let mut tick = tokio::time::interval(crate::simulate::batch::TICK);
                loop {
                    tokio::select! {
                        out = &mut work => return out,
                        // Python runs signal handlers only when asked (and only on its main
                        // thread, where this future is polled when called from there).
                        _ = tick.tick() => {
                            if let Err(e) = Python::attach(|py| py.check_signals()) {
                                raise(e);
                            }
                        }
                    }
                }
            })
        })
        .map_err(to_py_err)?;
    if let Some(e) = raised.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(match &result {
            Ok(r) if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) => {
                let what = r.interrupted.as_deref().unwrap_or("interrupted");
                pyo3::exceptions::PyKeyboardInterrupt::new_err(what.to_string())
            }
            _ => e,
        });
    }
    to_py(py, &result.map_err(to_py_err)?)
}

/// Export episodes as chat fine-tuning records (as `ppol export sft`) in `format` (`ppol`,
/// `openai`, `hf` or `llamafactory`); returns `{"train", "heldout", "heldout_personas",
/// "n_episodes", "clusters", "skipped", "bad_call_policy", "bad_calls", "conversions",
/// "dropped_texts", "written", "datasets", "notes", "format_version", "tokens", "warnings"}` (`tokens`: the estimated lengths of the training
/// records, per row and their median and max, and a cutoff that holds them all). With
/// `output` the records are written too (and, for `llamafactory`, registered in the
/// `dataset_info.json` next to each file; `notes` says what an output that is not a regular
/// file did not get beside it). `bad_calls` (`cut`, `drop-call`, `drop-episode`, `keep`) says
/// what happens to calls the agent got wrong (listed in `bad_calls`; `conversions` counts the
/// argument values converted to one type per argument).
#[pyfunction]
#[pyo3(signature = (episodes, all=false, tau2_data=None, heldout_fraction=0.0, seed=0, format="ppol", output=None, heldout_output=None, dataset_name=None, format_version=None, system_prompt=None, max_tokens=None, bad_calls="cut"))]
#[allow(clippy::too_many_arguments)]
fn export_sft<'py>(
    py: Python<'py>,
    episodes: Vec<PathBuf>,
    all: bool,
    tau2_data: Option<PathBuf>,
    heldout_fraction: f64,
    seed: u64,
    format: &str,
    output: Option<PathBuf>,
    heldout_output: Option<PathBuf>,
    dataset_name: Option<String>,
    format_version: Option<u32>,
    system_prompt: Option<PathBuf>,
    max_tokens: Option<usize>,
    bad_calls: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let req = ops::ExportRequest {
        episodes,
        all,
        tau2_data,
        heldout_fraction,
        seed,
        format: ops::SftFormat::parse(format).map_err(to_py_err)?,
        output,
        heldout_output,
        dataset_name,
        format_version,
        system_prompt,
        max_tokens,
        bad_calls: ops::BadCalls::parse(bad_calls).map_err(to_py_err)?,
    };
    let report = py.detach(|| ops::export_sft(&req)).map_err(to_py_err)?;
    to_py(py, &report)
}

/// A handle on a running evolution: stop it, ask whether it is done, wait for its summary.
#[pyclass(name = "EvolveHandle", module = "ppol_rs._core")]
pub struct PyEvolveHandle {
    inner: ops::EvolutionHandle,
}

#[pymethods]
impl PyEvolveHandle {
    /// Ask the run to stop after the current evaluation (it then writes its summary).
    fn stop(&self) {
        self.inner.stop();
    }

    /// Whether the run has finished.
    fn done(&self) -> bool {
        self.inner.done()
    }

    /// Wait (releasing the GIL) up to `timeout` seconds; returns the summary dict, or None if
    /// the run is still going. Raises the run's error if it failed.
    #[pyo3(signature = (timeout=None))]
    fn wait<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let t = match timeout {
            Some(s) if !(s.is_finite() && s >= 0.0) => {
                return Err(ConfigError::new_err(format!(
                    "timeout must be a non-negative number of seconds, got {s}"
                )))
            }
            Some(s) => Some(crate::limits::duration(s)),
            None => None,
        };
        match py.detach(|| self.inner.wait(t)) {
            None => Ok(None),
            Some(Ok(summary)) => Ok(Some(to_py(py, &summary)?)),
            Some(Err(e)) => Err(to_py_err(e)),
        }
    }
}

/// Start an evolution (new run, or `resume_dir`) in a background thread. `overrides` sets
/// configuration keys by dotted name over `config` (or the quick-run defaults).
#[pyfunction]
#[pyo3(signature = (config=None, overrides=None, progress=None, resume_dir=None, iterations=None, executor=None, ray_address=None))]
fn evolve_start(
    config: Option<PathBuf>,
    overrides: Option<&Bound<'_, PyDict>>,
    progress: Option<Py<PyAny>>,
    resume_dir: Option<PathBuf>,
    iterations: Option<u64>,
    executor: Option<String>,
    ray_address: Option<String>,
) -> PyResult<PyEvolveHandle> {
    let place = placement(executor, ray_address)?;
    let start = match resume_dir {
        Some(dir) => ops::EvolveStart::Resume { dir, iterations },
        None => {
            let mut o = Overrides::new();
            if let Some(d) = overrides {
                for (k, v) in d.iter() {
                    let key: String = k.extract().map_err(|_| {
                        ConfigError::new_err(format!("overrides: keys must be strings, found {k}"))
                    })?;
                    let value = value_from_py(&v, &format!("overrides[{key:?}]"))?;
                    o.set_json(&key, &value).map_err(to_py_err)?;
                }
            }
            let cfg = ops::load_config(config.as_deref(), &o).map_err(to_py_err)?;
            // raised here, not from the run thread at `wait()`
            crate::evolve::run::check_config(&cfg).map_err(to_py_err)?;
            ops::EvolveStart::New(Box::new(cfg))
        }
    };
    let control = crate::evolve::run::RunControl {
        progress: progress.map(|cb| {
            let f: crate::evolve::run::ProgressFn =
                std::sync::Arc::new(move |p: &crate::evolve::run::Progress| {
                    Python::attach(|py| match to_py(py, p) {
                        Ok(v) => {
                            if let Err(e) = cb.call1(py, (v,)) {
                                e.print(py);
                            }
                        }
                        Err(e) => e.print(py),
                    });
                });
            f
        }),
        placement: place,
        ..Default::default()
    };
    let inner = ops::spawn_evolution(start, control).map_err(to_py_err)?;
    Ok(PyEvolveHandle { inner })
}

/// `executor=` and `ray_address=` as a placement (`ppol eval` / `resume --executor`).
fn placement(
    executor: Option<String>,
    ray_address: Option<String>,
) -> PyResult<crate::simulate::world::ray::Placement> {
    crate::simulate::world::ray::Placement::from_names(executor.as_deref(), ray_address.as_deref())
        .map_err(to_py_err)
}

/// The Table-1 comparison of a run on held-out tasks (as `ppol eval`).
#[pyfunction]
#[pyo3(signature = (run_dir, split=None, human=None, n=None, executor=None, ray_address=None))]
fn evaluate<'py>(
    py: Python<'py>,
    run_dir: PathBuf,
    split: Option<String>,
    human: Option<Vec<PathBuf>>,
    n: Option<usize>,
    executor: Option<String>,
    ray_address: Option<String>,
) -> PyResult<Bound<'py, PyAny>> {
    let human = human.unwrap_or_default();
    let place = placement(executor, ray_address)?;
    let table = block_on(
        py,
        ops::evaluate(&run_dir, split.as_deref(), &human, n, &place, None),
    )?
    .map_err(to_py_err)?;
    to_py(py, &table)
}

/// Write the run's HTML report; returns its path.
#[pyfunction]
#[pyo3(signature = (run_dir, out=None))]
fn report(py: Python<'_>, run_dir: PathBuf, out: Option<PathBuf>) -> PyResult<PathBuf> {
    py.detach(|| ops::report(&run_dir, out.as_deref()))
        .map_err(to_py_err)
}

/// The JSON Schema of a run configuration (as `ppol config schema`), as a dict.
#[pyfunction]
fn config_schema(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    to_py(py, &crate::evolve::config::RunConfig::schema())
}

/// Make a blinded human-judgement study (as `ppol study make`): `conditions` are `NAME=FILE`
/// specs; writes the page, the Label Studio files and the key into `out` and returns
/// `{"page", "label_studio_tasks", "label_studio_config", "key", "n_items", "study_id"}`.
#[pyfunction]
#[pyo3(signature = (conditions, out, per_condition=20, seed=0, attention_checks=1, agent_turns="dimmed", discriminator=None, title=None, domain=None))]
#[allow(clippy::too_many_arguments)]
fn study_make<'py>(
    py: Python<'py>,
    conditions: Vec<String>,
    out: PathBuf,
    per_condition: usize,
    seed: u64,
    attention_checks: usize,
    agent_turns: &str,
    discriminator: Option<PathBuf>,
    title: Option<String>,
    domain: Option<String>,
) -> PyResult<Bound<'py, PyAny>> {
    let req = ops::StudyMakeRequest {
        conditions,
        out,
        per_condition: Some(per_condition),
        seed,
        attention_checks: Some(attention_checks),
        agent_turns: Some(agent_turns.to_string()),
        discriminator,
        title,
        domain,
    };
    let files = py.detach(|| ops::study_make(&req)).map_err(to_py_err)?;
    to_py(py, &files)
}

/// Un-blind a study's answer files with its key (as `ppol study analyze`); returns the
/// analysis as a dict.
#[pyfunction]
#[pyo3(signature = (answers, key, keep_failed_attention=false))]
fn study_analyze<'py>(
    py: Python<'py>,
    answers: Vec<PathBuf>,
    key: PathBuf,
    keep_failed_attention: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let a = py
        .detach(|| ops::study_analyze(&answers, &key, keep_failed_attention))
        .map_err(to_py_err)?;
    to_py(py, &a)
}

/// The compiled module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(load_traces, m)?)?;
    m.add_function(wrap_pyfunction!(traces_stats, m)?)?;
    m.add_function(wrap_pyfunction!(feature_names, m)?)?;
    m.add_function(wrap_pyfunction!(fingerprint_matrix, m)?)?;
    m.add_function(wrap_pyfunction!(score, m)?)?;
    m.add_function(wrap_pyfunction!(audit, m)?)?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add_function(wrap_pyfunction!(generate, m)?)?;
    m.add_function(wrap_pyfunction!(shipped, m)?)?;
    m.add_function(wrap_pyfunction!(episodes, m)?)?;
    m.add_function(wrap_pyfunction!(export_sft, m)?)?;
    m.add_function(wrap_pyfunction!(evolve_start, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(report, m)?)?;
    m.add_function(wrap_pyfunction!(config_schema, m)?)?;
    m.add_class::<PyEvolveHandle>()?;
    m.add_function(wrap_pyfunction!(persona_block, m)?)?;
    m.add_function(wrap_pyfunction!(_cli_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(study_make, m)?)?;
    m.add_function(wrap_pyfunction!(study_analyze, m)?)?;
    m.add_class::<PyHumanReference>()?;
    m.add_class::<PyDiscriminator>()?;
    for (name, ty) in [
        ("Error", py.get_type::<Error>()),
        ("IoError", py.get_type::<IoError>()),
        ("ParseError", py.get_type::<ParseError>()),
        ("ConfigError", py.get_type::<ConfigError>()),
        ("FeatureSetMismatch", py.get_type::<FeatureSetMismatch>()),
        ("InsufficientData", py.get_type::<InsufficientData>()),
        ("LlmError", py.get_type::<LlmError>()),
        ("BudgetExhausted", py.get_type::<BudgetExhausted>()),
        ("DomainError", py.get_type::<DomainError>()),
        ("SandboxError", py.get_type::<SandboxError>()),
        ("RunError", py.get_type::<RunError>()),
        ("Cancelled", py.get_type::<Cancelled>()),
    ] {
        m.add(name, ty)?;
    }
    Ok(())
}
