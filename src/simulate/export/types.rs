//! One type per argument: tool-call argument values brought to the type the tool's schema
//! declares (when a lossless conversion exists: `2378156` where the schema says `string`
//! becomes `"2378156"`), and across a whole file to one JSON kind per argument path, because
//! Arrow (Hugging Face `datasets`) gives every path of a JSON Lines file one type: `datasets`
//! 4.0.0, the version LLaMA-Factory pins, refuses a file whose `order_id` is a number in one row
//! and a string in another, and it merges the arguments of every tool into one struct, so the
//! path is the argument's name whatever the tool ([`one_type_per_path`]).
//!
//! The kinds Arrow tells apart are string, number (integers and decimals share one: Arrow
//! widens them to a float), boolean, object and array; `null` fits every kind. Where a path
//! holds two kinds, every value there that is not a string is written as its JSON text
//! (`2378156` → `"2378156"`, `{"a": 1}` → `"{\"a\":1}"`): every value has a text, no other
//! kind holds them all.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::dialogue::ToolCall;

/// Why an argument value was converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConversionRule {
    /// To the type the tool's schema declares.
    Schema,
    /// To a string, because the path holds values of two kinds in the file (no schema settled
    /// it, or two tools declare the same argument name with different types).
    OneTypePerPath,
}

/// One converted argument value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Conversion {
    /// The tool called.
    pub tool: String,
    /// The argument's path: its name, `.key` into objects, `[]` into arrays
    /// (`items[].id`).
    pub path: String,
    /// The kind the value had.
    pub from: &'static str,
    /// The kind it was written as.
    pub to: &'static str,
    /// Why.
    pub rule: ConversionRule,
}

/// The JSON kind of `v` as Arrow tells kinds apart (integers and decimals are both `number`).
pub use crate::simulate::episode::llm::json_kind as kind;

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The simple types a schema declares (`"type": "string"` or `["string", "null"]`); `None` when
/// it declares none (no judgement then).
fn declared(schema: &Value) -> Option<Vec<&str>> {
    match schema.get("type") {
        Some(Value::String(t)) => Some(vec![t.as_str()]),
        Some(Value::Array(ts)) => {
            let ts: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
            (!ts.is_empty()).then_some(ts)
        }
        _ => None,
    }
}

fn fits(v: &Value, t: &str) -> bool {
    match t {
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        "null" => v.is_null(),
        _ => true, // a type this check does not know: no judgement
    }
}

/// `v` as a value of type `t`, when the conversion loses nothing: a number or boolean as its
/// text, a string that is exactly a number's or boolean's text as that value, a whole decimal
/// as an integer.
fn convert(v: &Value, t: &str) -> Option<Value> {
    match (t, v) {
        ("string", Value::Number(_) | Value::Bool(_)) => Some(Value::String(v.to_string())),
        ("integer", Value::String(s)) => s
            .parse::<i64>()
            .ok()
            .filter(|n| n.to_string() == *s)
            .map(Value::from),
        ("integer", Value::Number(n)) => n
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| Value::from(f as i64)),
        ("number", Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(n @ Value::Number(_)) if s.trim() == s => Some(n),
            _ => None,
        },
        ("boolean", Value::String(s)) => match s.as_str() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        _ => None,
    }
}

fn describe(v: &Value) -> String {
    let text = v.to_string();
    let short: String = text.chars().take(40).collect();
    let more = if text.chars().count() > 40 { "…" } else { "" };
    format!("a {} ({short}{more})", kind(v))
}

/// `v` brought to `schema` (a JSON schema of the arguments or of one of them, at `path`):
/// values of the declared type are kept, others converted where nothing is lost (each noted in
/// `out` as (path, from, to)); the error says which value fits no declared type.
pub fn conform(
    v: &Value,
    schema: &Value,
    path: &str,
    out: &mut Vec<(String, &'static str, &'static str)>,
) -> Result<Value, String> {
    if v.is_null() {
        return Ok(Value::Null);
    }
    let Some(types) = declared(schema) else {
        return Ok(v.clone());
    };
    let (t, value) = match types.iter().find(|t| fits(v, t)) {
        Some(t) => (*t, v.clone()),
        None => {
            let Some((t, c)) = types.iter().find_map(|t| convert(v, t).map(|c| (*t, c))) else {
                return Err(format!(
                    "argument '{path}' is {} where the schema says {}",
                    describe(v),
                    types.join(" or ")
                ));
            };
            out.push((path.to_string(), kind(v), kind(&c)));
            (t, c)
        }
    };
    match (t, value) {
        ("array", Value::Array(items)) => {
            let item_schema = schema.get("items").cloned().unwrap_or(Value::Null);
            let at = format!("{path}[]");
            items
                .iter()
                .map(|i| conform(i, &item_schema, &at, out))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array)
        }
        ("object", Value::Object(fields)) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let mut m = Map::new();
            for (k, x) in fields {
                let x = match props.and_then(|p| p.get(&k)) {
                    Some(s) => conform(&x, s, &join(path, &k), out)?,
                    None => x,
                };
                m.insert(k, x);
            }
            Ok(Value::Object(m))
        }
        (_, value) => Ok(value),
    }
}

fn collect_kinds(v: &Value, path: &str, kinds: &mut BTreeMap<String, BTreeSet<&'static str>>) {
    if v.is_null() {
        return;
    }
    kinds.entry(path.to_string()).or_default().insert(kind(v));
    match v {
        Value::Array(items) => {
            let at = format!("{path}[]");
            for i in items {
                collect_kinds(i, &at, kinds);
            }
        }
        Value::Object(fields) => {
            for (k, x) in fields {
                collect_kinds(x, &join(path, k), kinds);
            }
        }
        _ => {}
    }
}

fn stringify_mixed(
    v: &mut Value,
    path: &str,
    mixed: &BTreeSet<String>,
    out: &mut Vec<(String, &'static str)>,
) {
    if v.is_null() || v.is_string() {
        return;
    }
    if mixed.contains(path) {
        out.push((path.to_string(), kind(v)));
        *v = Value::String(v.to_string());
        return;
    }
    match v {
        Value::Array(items) => {
            let at = format!("{path}[]");
            for i in items {
                stringify_mixed(i, &at, mixed, out);
            }
        }
        Value::Object(fields) => {
            for (k, x) in fields.iter_mut() {
                stringify_mixed(x, &join(path, k), mixed, out);
            }
        }
        _ => {}
    }
}

/// Give every argument path one kind across `calls` (a whole file's): where a path holds two
/// kinds, the values there that are not strings become their JSON text. Paths are the
/// arguments' names whatever the tool (`datasets` 4 merges every tool's arguments into one
/// struct). Returns what was converted.
pub fn one_type_per_path(calls: &mut [&mut ToolCall]) -> Vec<Conversion> {
    let mut kinds: BTreeMap<String, BTreeSet<&'static str>> = BTreeMap::new();
    for c in calls.iter() {
        if let Value::Object(args) = &c.arguments {
            for (k, v) in args {
                collect_kinds(v, k, &mut kinds);
            }
        }
    }
    let mixed: BTreeSet<String> = kinds
        .into_iter()
        .filter(|(_, k)| k.len() > 1)
        .map(|(p, _)| p)
        .collect();
    let mut conversions = Vec::new();
    if mixed.is_empty() {
        return conversions;
    }
    for c in calls.iter_mut() {
        let mut out = Vec::new();
        if let Value::Object(args) = &mut c.arguments {
            for (k, v) in args.iter_mut() {
                stringify_mixed(v, k, &mixed, &mut out);
            }
        }
        conversions.extend(out.into_iter().map(|(path, from)| Conversion {
            tool: c.name.clone(),
            path,
            from,
            to: "string",
            rule: ConversionRule::OneTypePerPath,
        }));
    }
    conversions
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments,
        }
    }

    #[test]
    fn values_take_the_schema_type_when_nothing_is_lost() {
        let schema = json!({"type": "object", "properties": {
            "order_id": {"type": "string"},
            "quantity": {"type": "integer"},
            "gift": {"type": "boolean"},
            "item_ids": {"type": "array", "items": {"type": "string"}},
            "address": {"type": "object", "properties": {"zip": {"type": "string"}}},
            "note": {"type": ["string", "null"]},
        }});
        let mut out = Vec::new();
        let v = conform(
            &json!({"order_id": 2378156, "quantity": "2", "gift": "true", "item_ids": [1, "2"],
                    "address": {"zip": 94110, "city": 7}, "note": null, "extra": 1.5}),
            &schema,
            "",
            &mut out,
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"order_id": "2378156", "quantity": 2, "gift": true, "item_ids": ["1", "2"],
                   "address": {"zip": "94110", "city": 7}, "note": null, "extra": 1.5})
        );
        let paths: Vec<&str> = out.iter().map(|(p, _, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            ["order_id", "quantity", "gift", "item_ids[]", "address.zip"]
        );
        // nothing that would change the value's meaning
        for bad in [
            json!({"quantity": "two"}),
            json!({"quantity": "02"}),
            json!({"order_id": {"id": 1}}),
            json!({"item_ids": "1"}),
        ] {
            let err = conform(&bad, &schema, "", &mut Vec::new()).unwrap_err();
            assert!(err.contains("where the schema says"), "{err}");
        }
        assert_eq!(
            conform(&json!({"quantity": 3.0}), &schema, "", &mut out).unwrap(),
            json!({"quantity": 3})
        );
    }

    #[test]
    fn a_path_with_two_kinds_in_a_file_is_written_as_strings() {
        let mut calls = [
            call(
                "get_order",
                json!({"order_id": 2378156, "items": [{"id": 1}]}),
            ),
            call(
                "get_order",
                json!({"order_id": "#W2378156", "items": [{"id": "a"}]}),
            ),
            call("other", json!({"order_id": null, "n": 1, "items": []})),
            call("other", json!({"n": 2.5})),
        ];
        let mut refs: Vec<&mut ToolCall> = calls.iter_mut().collect();
        let conv = one_type_per_path(&mut refs);
        assert_eq!(calls[0].arguments["order_id"], "2378156");
        assert_eq!(calls[0].arguments["items"][0]["id"], "1");
        assert_eq!(calls[1].arguments["order_id"], "#W2378156");
        assert_eq!(calls[2].arguments["order_id"], Value::Null);
        // integers and decimals are one kind for Arrow
        assert_eq!(calls[3].arguments["n"], 2.5);
        assert_eq!(
            conv.iter()
                .map(|c| (c.tool.as_str(), c.path.as_str(), c.from))
                .collect::<Vec<_>>(),
            [
                ("get_order", "order_id", "number"),
                ("get_order", "items[].id", "number")
            ]
        );
    }
}
