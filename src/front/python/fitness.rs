//! The fitness classes of the Python module: `HumanReference` (human fingerprints) and
//! `Discriminator` (P(human)), thin wrappers over `crate::fitness`.

use super::*;

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
    #[pyo3(signature = (traces, feature_set=None, domain=None))]
    fn from_traces(
        py: Python<'_>,
        traces: &Bound<'_, PyAny>,
        feature_set: Option<&str>,
        domain: Option<String>,
    ) -> PyResult<Self> {
        let set = self::feature_set(feature_set)?;
        let source = trace_source(traces)?;
        let (inner, skipped) = py
            .detach(|| ops::build_reference(&source, set, domain.as_deref()))
            .map_err(to_py_err)?;
        warn_skipped(py, &skipped)?;
        Ok(PyHumanReference { inner })
    }

    /// Load a saved reference JSON.
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<Self> {
        Ok(PyHumanReference {
            inner: HumanReference::load(&path).map_err(to_py_err)?,
        })
    }

    /// Save as JSON.
    fn save(&self, path: PathBuf) -> PyResult<()> {
        self.inner.save(&path).map_err(to_py_err)
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

    /// The reference as a dict (the saved file's fields).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.inner)
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
    #[pyo3(signature = (human, baseline, trees=None, max_depth=None, max_features=None, seed=None, folds=None))]
    #[allow(clippy::too_many_arguments)]
    fn train(
        py: Python<'_>,
        human: &PyHumanReference,
        baseline: &Bound<'_, PyAny>,
        trees: Option<usize>,
        max_depth: Option<usize>,
        max_features: Option<&str>,
        seed: Option<u64>,
        folds: Option<usize>,
    ) -> PyResult<Self> {
        let base = dialogues(py, baseline, None)?;
        let (forest, folds) = ops::DiscriminatorRequest {
            trees,
            max_depth,
            max_features: max_features.map(str::to_string),
            seed,
            folds,
        }
        .params()
        .map_err(to_py_err)?;
        let reference = human.inner.clone();
        let inner = py
            .detach(|| ops::train_discriminator(&reference, &base, &forest, folds))
            .map_err(to_py_err)?;
        Ok(PyDiscriminator { inner })
    }

    /// Load a saved discriminator JSON.
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<Self> {
        Ok(PyDiscriminator {
            inner: Discriminator::load(&path).map_err(to_py_err)?,
        })
    }

    /// Save as JSON.
    fn save(&self, path: PathBuf) -> PyResult<()> {
        self.inner.save(&path).map_err(to_py_err)
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

    /// Training metadata (class counts, grouped AUC per fold, top features) as a dict.
    fn training<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.inner.training)
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
