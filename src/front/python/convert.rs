//! Python objects from serde values and back, without JSON text in between: a Rust value is
//! serialised to a `serde_json::Value` and built as Python dicts, lists, strings, numbers,
//! booleans and None; Python arguments take the opposite way and are deserialised into the
//! Rust request types, so a wrong field names its path.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// A Python object for any serialisable Rust value.
pub fn to_py<'py, T: Serialize + ?Sized>(
    py: Python<'py>,
    value: &T,
) -> PyResult<Bound<'py, PyAny>> {
    let v = serde_json::to_value(value)
        .map_err(|e| PyTypeError::new_err(format!("cannot convert to Python: {e}")))?;
    value_to_py(py, &v)
}

/// A Python object for a JSON value (objects keep their key order).
pub fn value_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(value_to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, item) in map {
                dict.set_item(k, value_to_py(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

/// A JSON value of a Python object made of dicts (string keys), lists, tuples, strings,
/// numbers, booleans, None and `os.PathLike`s. `what` names the argument in errors.
pub fn value_from_py(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::from(i));
        }
        return Ok(Value::from(obj.extract::<u64>()?));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let x = f.value();
        return serde_json::Number::from_f64(x)
            .map(Value::Number)
            .ok_or_else(|| PyTypeError::new_err(format!("{what}: {x} is not a finite number")));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.extract::<String>()?));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = serde_json::Map::new();
        for (k, v) in d.iter() {
            let key = k.extract::<String>().map_err(|_| {
                PyTypeError::new_err(format!("{what}: dict keys must be strings, found {k}"))
            })?;
            let item = value_from_py(&v, &format!("{what}[{key:?}]"))?;
            map.insert(key, item);
        }
        return Ok(Value::Object(map));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let mut out = Vec::new();
        for (i, item) in obj.try_iter()?.enumerate() {
            out.push(value_from_py(&item?, &format!("{what}[{i}]"))?);
        }
        return Ok(Value::Array(out));
    }
    if obj.hasattr("__fspath__")? {
        let p: std::path::PathBuf = obj.extract()?;
        return Ok(Value::String(p.display().to_string()));
    }
    Err(PyTypeError::new_err(format!(
        "{what}: cannot use a {} here (expected dicts, lists, strings, numbers, booleans or None)",
        obj.get_type().name()?
    )))
}

/// A Rust value from a Python object (see [`value_from_py`]); a mismatch names `what` and the
/// serde path.
pub fn from_py<T: DeserializeOwned>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<T> {
    let v = value_from_py(obj, what)?;
    serde_json::from_value(v)
        .map_err(|e| super::ParseError::new_err(format!("<python>: {what}: {e}")))
}
