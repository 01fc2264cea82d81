//! PyO3 bindings: the compiled module `ppol_rs._core`. Thin wrappers only; the Python package
//! `ppol_rs` (python/ppol_rs/__init__.py) adds pandas conversion and documentation.

use std::path::PathBuf;

use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::dialogue::Dialogue;
use crate::fitness::coverage::CoverageOptions;
use crate::fitness::discriminator::{Discriminator, ForestParams, MaxFeatures};
use crate::fitness::features::{fingerprint_many, FeatureSet, FEATURE_NAMES, N_FEATURES};
use crate::fitness::reference::HumanReference;
use crate::fitness::score::ScoreOptions;
use crate::fitness::traces::{self, LoadOptions};

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
pub(crate) fn to_py(e: crate::Error) -> PyErr {
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

fn feature_set(s: &str) -> PyResult<FeatureSet> {
    FeatureSet::parse(s).map_err(to_py)
}

/// Turn a Python `traces` argument into dialogues: a path (str / os.PathLike), a list of paths,
/// or a list of dialogue dicts (`{"id", "conversation": [{"role", "content"}], ...}`).
fn dialogues_from_py(
    py: Python<'_>,
    traces: &Bound<'_, PyAny>,
    domain: Option<String>,
) -> PyResult<Vec<Dialogue>> {
    let opts = LoadOptions { domain };
    let fspath = |o: &Bound<'_, PyAny>| -> PyResult<Option<PathBuf>> {
        if o.is_instance_of::<PyString>() || o.hasattr("__fspath__")? {
            Ok(Some(o.extract::<PathBuf>()?))
        } else {
            Ok(None)
        }
    };
    if let Some(p) = fspath(traces)? {
        return py.detach(|| traces::load(&p, &opts)).map_err(to_py);
    }
    let list = traces.cast::<PyList>().map_err(|_| {
        ConfigError::new_err("traces must be a path, a list of paths, or a list of dialogue dicts")
    })?;
    if list.is_empty() {
        return Ok(Vec::new());
    }
    if fspath(&list.get_item(0)?)?.is_some() {
        let paths: Vec<PathBuf> = list
            .iter()
            .map(|o| o.extract::<PathBuf>())
            .collect::<PyResult<_>>()?;
        return py
            .detach(|| traces::load_many(&paths, &opts))
            .map_err(to_py);
    }
    let dumps = py.import("json")?.getattr("dumps")?;
    let mut jsonl = String::new();
    for (i, item) in list.iter().enumerate() {
        if !item.is_instance_of::<PyDict>() {
            return Err(ParseError::new_err(format!(
                "<python>: traces[{i}]: expected a dialogue dict, found {}",
                item.get_type().name()?
            )));
        }
        jsonl.push_str(&dumps.call1((item,))?.extract::<String>()?);
        jsonl.push('\n');
    }
    py.detach(|| traces::parse(&jsonl, std::path::Path::new("<python>"), &opts))
        .map_err(to_py)
}

fn dialogues_to_json(ds: &[Dialogue]) -> String {
    serde_json::to_string(ds).expect("serialisable")
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

/// Load trace files or dialogue dicts; returns a JSON list of normalised dialogues.
#[pyfunction]
#[pyo3(signature = (traces, domain=None))]
fn load_traces_json(
    py: Python<'_>,
    traces: &Bound<'_, PyAny>,
    domain: Option<String>,
) -> PyResult<String> {
    let ds = dialogues_from_py(py, traces, domain)?;
    Ok(dialogues_to_json(&ds))
}

/// The 19 feature names in column order.
#[pyfunction]
fn feature_names() -> Vec<&'static str> {
    FEATURE_NAMES.to_vec()
}

/// Fingerprint dialogues: (matrix n×19, ids, task ids).
#[pyfunction]
#[pyo3(signature = (traces, feature_set="ppol-0.1.1", domain=None))]
#[allow(clippy::type_complexity)]
fn fingerprint_matrix<'py>(
    py: Python<'py>,
    traces: &Bound<'py, PyAny>,
    feature_set: &str,
    domain: Option<String>,
) -> PyResult<(Bound<'py, PyArray2<f64>>, Vec<String>, Vec<Option<String>>)> {
    let set = self::feature_set(feature_set)?;
    let ds = dialogues_from_py(py, traces, domain)?;
    let fps = py.detach(|| fingerprint_many(&ds, set));
    let m = matrix(py, fps.iter().map(|f| f.0.to_vec()), fps.len())?;
    Ok((
        m,
        ds.iter().map(|d| d.id.clone()).collect(),
        ds.iter().map(|d| d.task_id.clone()).collect(),
    ))
}

/// Human fingerprints and their per-feature mean and population std.
#[pyclass(name = "HumanReference", module = "ppol_rs._core")]
#[derive(Clone)]
pub struct PyHumanReference {
    pub(crate) inner: HumanReference,
}

#[pymethods]
impl PyHumanReference {
    /// Build from human traces (path, list of paths, or list of dialogue dicts).
    #[staticmethod]
    #[pyo3(signature = (traces, feature_set="ppol-0.1.1", domain=None))]
    fn from_traces(
        py: Python<'_>,
        traces: &Bound<'_, PyAny>,
        feature_set: &str,
        domain: Option<String>,
    ) -> PyResult<Self> {
        let set = self::feature_set(feature_set)?;
        let ds = dialogues_from_py(py, traces, domain)?;
        let source = if let Ok(s) = traces.extract::<PathBuf>() {
            vec![s.display().to_string()]
        } else {
            vec!["<python>".into()]
        };
        let inner = py
            .detach(|| HumanReference::build(&ds, set, source))
            .map_err(to_py)?;
        Ok(PyHumanReference { inner })
    }

    /// Load a saved reference JSON.
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<Self> {
        Ok(PyHumanReference {
            inner: HumanReference::load(&path).map_err(to_py)?,
        })
    }

    /// Save as JSON.
    fn save(&self, path: PathBuf) -> PyResult<()> {
        self.inner.save(&path).map_err(to_py)
    }

    /// Feature-set version.
    #[getter]
    fn feature_set(&self) -> &'static str {
        self.inner.feature_set.name()
    }

    /// Number of dialogues in the mean/std.
    #[getter]
    fn n_dialogues(&self) -> usize {
        self.inner.n_dialogues
    }

    /// Per-feature mean (numpy, 19).
    #[getter]
    fn mean<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        PyArray1::from_vec(py, self.inner.mean.clone())
    }

    /// Per-feature population std (numpy, 19).
    #[getter]
    fn std<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        PyArray1::from_vec(py, self.inner.std.clone())
    }

    /// Every individual fingerprint (numpy, n×19).
    #[getter]
    fn fingerprints<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let rows = &self.inner.fingerprints;
        matrix(py, rows.iter().map(|r| r.features.clone()), rows.len())
    }

    /// Dialogue ids of the fingerprints.
    #[getter]
    fn ids(&self) -> Vec<String> {
        self.inner
            .fingerprints
            .iter()
            .map(|r| r.id.clone())
            .collect()
    }

    /// Number of fingerprints in the coverage cloud (dialogues with ≥ 2 messages).
    #[getter]
    fn n_cloud(&self) -> usize {
        self.inner.cloud_rows().count()
    }

    /// The saved-file JSON.
    fn to_json(&self) -> String {
        serde_json::to_string(&self.inner).expect("serialisable")
    }

    fn __repr__(&self) -> String {
        format!(
            "HumanReference(feature_set='{}', n_dialogues={}, n_cloud={})",
            self.inner.feature_set,
            self.inner.n_dialogues,
            self.n_cloud()
        )
    }
}

/// Random-forest discriminator: P(human) of a dialogue's fingerprint.
#[pyclass(name = "Discriminator", module = "ppol_rs._core")]
#[derive(Clone)]
pub struct PyDiscriminator {
    pub(crate) inner: Discriminator,
}

#[pymethods]
impl PyDiscriminator {
    /// Train human (the reference's cloud) vs baseline simulator dialogues.
    #[staticmethod]
    #[pyo3(signature = (human, baseline, trees=200, max_depth=12, max_features="sqrt", seed=42, folds=5))]
    #[allow(clippy::too_many_arguments)]
    fn train(
        py: Python<'_>,
        human: &PyHumanReference,
        baseline: &Bound<'_, PyAny>,
        trees: usize,
        max_depth: Option<usize>,
        max_features: &str,
        seed: u64,
        folds: usize,
    ) -> PyResult<Self> {
        let base = dialogues_from_py(py, baseline, None)?;
        let mf: MaxFeatures = max_features.parse().map_err(|e| {
            ConfigError::new_err(format!("invalid configuration 'max_features': {e}"))
        })?;
        let params = ForestParams {
            n_trees: trees,
            max_depth: max_depth.filter(|d| *d > 0),
            max_features: mf,
            seed,
            ..ForestParams::default()
        };
        let reference = human.inner.clone();
        let inner = py
            .detach(|| {
                crate::fitness::score::train_discriminator(&reference, &base, &params, folds)
            })
            .map_err(to_py)?;
        Ok(PyDiscriminator { inner })
    }

    /// Load a saved discriminator JSON.
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<Self> {
        Ok(PyDiscriminator {
            inner: Discriminator::load(&path).map_err(to_py)?,
        })
    }

    /// Save as JSON.
    fn save(&self, path: PathBuf) -> PyResult<()> {
        self.inner.save(&path).map_err(to_py)
    }

    /// P(human) for each row of an n×19 fingerprint matrix.
    fn p_human<'py>(
        &self,
        py: Python<'py>,
        x: PyReadonlyArray2<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let shape = x.shape();
        if shape[1] != N_FEATURES {
            return Err(ParseError::new_err(format!(
                "<python>: x: expected {N_FEATURES} columns, found {}",
                shape[1]
            )));
        }
        let arr = x.as_array();
        let rows: Vec<Vec<f64>> = arr.rows().into_iter().map(|r| r.to_vec()).collect();
        let p = py.detach(|| self.inner.p_human(&rows));
        Ok(PyArray1::from_vec(py, p))
    }

    /// Feature-set version.
    #[getter]
    fn feature_set(&self) -> String {
        self.inner.feature_set.clone()
    }

    /// Mean grouped (by task) held-out AUC, if it could be computed.
    #[getter]
    fn grouped_auc(&self) -> Option<f64> {
        self.inner.training.grouped_auc.as_ref().map(|a| a.mean)
    }

    /// Training metadata as JSON.
    fn training_json(&self) -> String {
        serde_json::to_string(&self.inner.training).expect("serialisable")
    }

    fn __repr__(&self) -> String {
        format!(
            "Discriminator(feature_set='{}', n_human={}, n_simulator={}, grouped_auc={:?})",
            self.inner.feature_set,
            self.inner.training.n_human,
            self.inner.training.n_simulator,
            self.grouped_auc()
        )
    }
}

/// Score simulated dialogues; returns the JSON object of `ppol score`.
#[pyfunction]
#[pyo3(signature = (human, candidates, discriminator, lambda_h=0.5, lambda_b=0.5, raw=false, clusters=0))]
#[allow(clippy::too_many_arguments)]
fn score_json(
    py: Python<'_>,
    human: &PyHumanReference,
    candidates: &Bound<'_, PyAny>,
    discriminator: &PyDiscriminator,
    lambda_h: f64,
    lambda_b: f64,
    raw: bool,
    clusters: usize,
) -> PyResult<String> {
    let ds = dialogues_from_py(py, candidates, None)?;
    let opts = ScoreOptions {
        lambda_h,
        lambda_b,
        coverage: CoverageOptions {
            standardize: !raw,
            n_clusters: clusters,
            seed: 0,
        },
    };
    let s = py
        .detach(|| crate::fitness::score::score(&human.inner, &discriminator.inner, &ds, &opts))
        .map_err(to_py)?;
    Ok(serde_json::to_string(&s).expect("serialisable"))
}

/// Run the `ppol` command line with `argv` (first item = program name); returns the exit code.
#[pyfunction]
fn cli(py: Python<'_>, argv: Vec<String>) -> i32 {
    let code = py.detach(|| crate::front::cli::main_from(argv));
    // ExitCode has no accessor; the CLI only uses 0 and 2.
    if code == std::process::ExitCode::SUCCESS {
        0
    } else {
        2
    }
}

/// The persona block ppol appends to a user simulator's system prompt (after a blank line,
/// only for a non-empty persona): `ppol::persona::persona_block`.
#[pyfunction]
fn persona_block(text: &str) -> String {
    crate::persona::persona_block(text)
}

/// The compiled module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(load_traces_json, m)?)?;
    m.add_function(wrap_pyfunction!(feature_names, m)?)?;
    m.add_function(wrap_pyfunction!(fingerprint_matrix, m)?)?;
    m.add_function(wrap_pyfunction!(score_json, m)?)?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add_function(wrap_pyfunction!(generate_json, m)?)?;
    m.add_function(wrap_pyfunction!(shipped, m)?)?;
    m.add_function(wrap_pyfunction!(episodes_json, m)?)?;
    m.add_function(wrap_pyfunction!(evolve_start, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate_json, m)?)?;
    m.add_function(wrap_pyfunction!(report, m)?)?;
    m.add_class::<PyEvolveHandle>()?;
    m.add_function(wrap_pyfunction!(persona_block, m)?)?;
    m.add_class::<PyHumanReference>()?;
    m.add_class::<PyDiscriminator>()?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("IoError", py.get_type::<IoError>())?;
    m.add("ParseError", py.get_type::<ParseError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("FeatureSetMismatch", py.get_type::<FeatureSetMismatch>())?;
    m.add("InsufficientData", py.get_type::<InsufficientData>())?;
    m.add("LlmError", py.get_type::<LlmError>())?;
    m.add("BudgetExhausted", py.get_type::<BudgetExhausted>())?;
    m.add("DomainError", py.get_type::<DomainError>())?;
    m.add("SandboxError", py.get_type::<SandboxError>())?;
    m.add("RunError", py.get_type::<RunError>())?;
    m.add("Cancelled", py.get_type::<Cancelled>())?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Simulation, generation and evolution

fn runtime() -> PyResult<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::new_err(format!("cannot start the async runtime: {e}")))
}

fn llm_model(spec: Option<&str>) -> PyResult<Option<std::sync::Arc<dyn crate::llm::ChatModel>>> {
    match spec {
        None | Some("none") => Ok(None),
        Some(s) => Ok(Some(std::sync::Arc::new(
            crate::llm::client::LlmClient::from_cli_value(s).map_err(to_py)?,
        ))),
    }
}

/// Data shipped inside ppol (seed programs, demo traces), by name.
#[pyfunction]
fn shipped(name: &str) -> PyResult<&'static str> {
    crate::shipped::get(name).map_err(to_py)
}

/// Run a generator program in the sandbox for tasks; returns persona records as JSON.
#[pyfunction]
#[pyo3(signature = (program, task=None, domain=None, split=None, n=10, llm=None, seed=0, tau2_data=None, timeout_s=120.0))]
#[allow(clippy::too_many_arguments)]
fn generate_json(
    py: Python<'_>,
    program: PathBuf,
    task: Option<String>,
    domain: Option<String>,
    split: Option<String>,
    n: usize,
    llm: Option<String>,
    seed: u64,
    tau2_data: Option<PathBuf>,
    timeout_s: f64,
) -> PyResult<String> {
    let model = llm_model(llm.as_deref())?;
    let tasks: Vec<(Option<String>, String)> = match (&domain, &task, &split) {
        (Some(d), t, s) => {
            let dom =
                crate::simulate::tau2::Domain::load(d, tau2_data.as_deref()).map_err(to_py)?;
            let spec = t
                .clone()
                .or_else(|| s.clone())
                .ok_or_else(|| ConfigError::new_err("with domain=, give task= (ids) or split="))?;
            dom.select_tasks(&spec)
                .map_err(to_py)?
                .into_iter()
                .map(|t| {
                    (
                        Some(t.id.clone()),
                        crate::simulate::episode::runner::task_context(&dom, t),
                    )
                })
                .collect()
        }
        (None, Some(t), None) => vec![(None, t.clone())],
        _ => {
            return Err(ConfigError::new_err(
                "give task= (free text), or domain= with task= ids or split=",
            ))
        }
    };
    let cfg = crate::generate::sandbox::SandboxConfig {
        timeout: std::time::Duration::from_secs_f64(timeout_s),
        ..Default::default()
    };
    let out = py.detach(|| {
        runtime()?.block_on(async {
            let mut all = Vec::new();
            for (id, ctx) in &tasks {
                match crate::generate::generator::generate(
                    &program,
                    ctx,
                    id.as_deref(),
                    n,
                    model.clone(),
                    &cfg,
                    seed,
                )
                .await
                {
                    Ok(crate::generate::generator::GenerationOutcome::Ok { personas, .. }) => {
                        all.extend(personas)
                    }
                    Ok(crate::generate::generator::GenerationOutcome::Failed(f)) => {
                        return Err(SandboxError::new_err(format!(
                            "{} failed at stage {}: {}\n{}",
                            f.program, f.stage, f.reason, f.stderr_tail
                        )))
                    }
                    Err(e) => return Err(to_py(e)),
                }
            }
            Ok(all)
        })
    })?;
    Ok(serde_json::to_string(&out).expect("serialisable"))
}

/// Play episodes; returns the episode records as JSON.
#[pyfunction]
#[pyo3(signature = (domain="demo", tasks="all", personas=None, trials=1, llm="scripted", max_turns=30, seed=0, tau2_data=None))]
#[allow(clippy::too_many_arguments)]
fn episodes_json(
    py: Python<'_>,
    domain: &str,
    tasks: &str,
    personas: Option<String>,
    trials: u32,
    llm: &str,
    max_turns: usize,
    seed: u64,
    tau2_data: Option<PathBuf>,
) -> PyResult<String> {
    use crate::simulate::episode::EpisodeRunner;
    let dom = crate::simulate::episode::runner::load_domain(domain, tau2_data.as_deref())
        .map_err(to_py)?;
    let ids: Vec<String> = dom
        .select_tasks(tasks)
        .map_err(to_py)?
        .iter()
        .map(|t| t.id.clone())
        .collect();
    let personas: Option<Vec<crate::persona::Persona>> = personas
        .map(|s| {
            serde_json::from_str(&s)
                .map_err(|e| ParseError::new_err(format!("<python>: personas: {e}")))
        })
        .transpose()?;
    let backend = if llm == "scripted" {
        crate::simulate::episode::runner::Backend::Scripted
    } else {
        let m = llm_model(Some(llm))?.expect("model");
        crate::simulate::episode::runner::Backend::Llm {
            user: m.clone(),
            agent: m,
            user_temperature: Some(0.0),
            agent_temperature: None,
        }
    };
    let runner = crate::simulate::episode::runner::Tau2Runner::new(dom, backend, max_turns);
    let jobs = crate::simulate::episode::runner::plan_jobs(&ids, personas.as_deref(), trials);
    let eps = py.detach(|| {
        runtime().map(|rt| {
            rt.block_on(futures::future::join_all(jobs.iter().enumerate().map(
                |(i, (t, p, k))| runner.run(t, p.as_ref(), *k, crate::seed::mix(seed, i as u64)),
            )))
        })
    })?;
    Ok(serde_json::to_string(&eps).expect("serialisable"))
}

/// Build a run configuration from a TOML file and keyword overrides (dotted keys, e.g.
/// `{"search.iterations": 3, "run.out": "runs/x"}`).
fn run_config(
    config: Option<PathBuf>,
    overrides: Option<&Bound<'_, PyDict>>,
) -> PyResult<crate::evolve::config::RunConfig> {
    let mut value = match &config {
        Some(p) => {
            let text = crate::io::read_to_string(p).map_err(to_py)?;
            toml::from_str::<toml::Value>(&text)
                .map_err(|e| to_py(crate::Error::toml(p, &text, &e)))?
        }
        None => {
            let mut d =
                toml::Value::try_from(crate::evolve::config::RunConfig::default()).expect("toml");
            d["search"]["iterations"] = toml::Value::Integer(10);
            d
        }
    };
    if let Some(o) = overrides {
        let json = o
            .py()
            .import("json")?
            .getattr("dumps")?
            .call1((o,))?
            .extract::<String>()?;
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&json).map_err(|e| ConfigError::new_err(e.to_string()))?;
        for (key, v) in map {
            let tv: toml::Value = toml::Value::try_from(&v)
                .map_err(|e| ConfigError::new_err(format!("invalid configuration '{key}': {e}")))?;
            let mut cur = &mut value;
            let parts: Vec<&str> = key.split('.').collect();
            for part in &parts[..parts.len() - 1] {
                let t = cur.as_table_mut().ok_or_else(|| {
                    ConfigError::new_err(format!("invalid configuration '{key}'"))
                })?;
                cur = t
                    .entry(part.to_string())
                    .or_insert_with(|| toml::Value::Table(Default::default()));
            }
            cur.as_table_mut()
                .ok_or_else(|| ConfigError::new_err(format!("invalid configuration '{key}'")))?
                .insert(parts[parts.len() - 1].to_string(), tv);
        }
    }
    let text = toml::to_string(&value).map_err(|e| ConfigError::new_err(e.to_string()))?;
    crate::evolve::config::RunConfig::from_toml_str(
        &text,
        std::path::Path::new(
            config
                .as_deref()
                .unwrap_or(std::path::Path::new("<python>")),
        ),
    )
    .map_err(to_py)
}

/// The outcome of a background run: summary JSON, or (error kind, message).
type RunOutcome = std::sync::Arc<std::sync::Mutex<Option<Result<String, (String, String)>>>>;

/// A handle on a running evolution: stop it, ask whether it is done, wait for its summary.
#[pyclass(name = "EvolveHandle", module = "ppol_rs._core")]
pub struct PyEvolveHandle {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    result: RunOutcome,
    done: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

#[pymethods]
impl PyEvolveHandle {
    /// Ask the run to stop after the current evaluation (it then writes its summary).
    fn stop(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether the run has finished.
    fn done(&self) -> bool {
        *self.done.0.lock().expect("lock")
    }

    /// Wait (releasing the GIL) up to `timeout` seconds; returns the summary JSON or None on timeout.
    #[pyo3(signature = (timeout=None))]
    fn wait_json(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<String>> {
        let done = self.done.clone();
        let finished = py.detach(move || {
            let (lock, cv) = &*done;
            let guard = lock.lock().expect("lock");
            match timeout {
                None => *cv.wait_while(guard, |d| !*d).expect("wait"),
                Some(t) => {
                    *cv.wait_timeout_while(
                        guard,
                        std::time::Duration::from_secs_f64(t.max(0.0)),
                        |d| !*d,
                    )
                    .expect("wait")
                    .0
                }
            }
        });
        if !finished {
            return Ok(None);
        }
        match self.result.lock().expect("lock").clone() {
            Some(Ok(s)) => Ok(Some(s)),
            Some(Err((kind, msg))) => Err(match kind.as_str() {
                "ParseError" => ParseError::new_err(msg),
                "ConfigError" => ConfigError::new_err(msg),
                "IoError" => IoError::new_err(msg),
                "RunError" => RunError::new_err(msg),
                "LlmError" => LlmError::new_err(msg),
                "DomainError" => DomainError::new_err(msg),
                "SandboxError" => SandboxError::new_err(msg),
                _ => Error::new_err(msg),
            }),
            None => Err(Error::new_err("the run ended without a result")),
        }
    }
}

/// Start an evolution (new run, or `resume_dir`) in a background thread.
#[pyfunction]
#[pyo3(signature = (config=None, overrides=None, progress=None, resume_dir=None, iterations=None))]
fn evolve_start(
    config: Option<PathBuf>,
    overrides: Option<&Bound<'_, PyDict>>,
    progress: Option<Py<PyAny>>,
    resume_dir: Option<PathBuf>,
    iterations: Option<u64>,
) -> PyResult<PyEvolveHandle> {
    let cfg = match &resume_dir {
        None => Some(run_config(config, overrides)?),
        Some(_) => None,
    };
    let control = crate::evolve::run::RunControl {
        progress: progress.map(|cb| {
            let f: crate::evolve::run::ProgressFn =
                std::sync::Arc::new(move |p: &crate::evolve::run::Progress| {
                    let text = serde_json::to_string(p).expect("json");
                    Python::attach(|py| {
                        let loads = py.import("json").and_then(|j| j.getattr("loads"));
                        if let Ok(v) = loads.and_then(|l| l.call1((text,))) {
                            if let Err(e) = cb.call1(py, (v,)) {
                                e.print(py);
                            }
                        }
                    });
                });
            f
        }),
        ..Default::default()
    };
    let handle = PyEvolveHandle {
        stop: control.stop.clone(),
        result: Default::default(),
        done: std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new())),
    };
    let (result, done) = (handle.result.clone(), handle.done.clone());
    std::thread::Builder::new()
        .name("ppol-evolve".into())
        .spawn(move || {
            let out = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| crate::Error::Sandbox(e.to_string()))
                .and_then(|rt| {
                    rt.block_on(async move {
                        match (cfg, resume_dir) {
                            (Some(cfg), _) => crate::evolve::run::evolve(cfg, control).await,
                            (None, Some(dir)) => {
                                crate::evolve::run::resume(&dir, control, iterations).await
                            }
                            (None, None) => unreachable!("config or resume dir"),
                        }
                    })
                });
            *result.lock().expect("lock") = Some(
                out.map(|s| serde_json::to_string(&s).expect("json"))
                    .map_err(|e| (e.kind().to_string(), e.to_string())),
            );
            let (lock, cv) = &*done;
            *lock.lock().expect("lock") = true;
            cv.notify_all();
        })
        .map_err(|e| Error::new_err(format!("cannot start the evolution thread: {e}")))?;
    Ok(handle)
}

/// The Table-1 comparison of a run on held-out tasks, as JSON.
#[pyfunction]
#[pyo3(signature = (run_dir, split=None, human=None, n=None))]
fn evaluate_json(
    py: Python<'_>,
    run_dir: PathBuf,
    split: Option<String>,
    human: Option<Vec<PathBuf>>,
    n: Option<usize>,
) -> PyResult<String> {
    let human = human.unwrap_or_default();
    let t = py.detach(|| {
        runtime().map(|rt| {
            rt.block_on(crate::evolve::run::evaluate_run(
                &run_dir,
                split.as_deref(),
                &human,
                n,
            ))
        })
    })?;
    Ok(serde_json::to_string(&t.map_err(to_py)?).expect("json"))
}

/// Write the run's HTML report; returns its path.
#[pyfunction]
#[pyo3(signature = (run_dir, out=None))]
fn report(py: Python<'_>, run_dir: PathBuf, out: Option<PathBuf>) -> PyResult<PathBuf> {
    py.detach(|| crate::report::write(&run_dir, out.as_deref()))
        .map_err(to_py)
}
