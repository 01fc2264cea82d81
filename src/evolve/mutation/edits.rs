//! Structured LLM edits: the mutator answers with JSON, constrained to a schema that only
//! admits edits that can apply, and ppol applies them to the program's literal data.
//!
//! A free-text SEARCH/REPLACE diff asks a model to copy program lines exactly; a weak model
//! cannot, and a strong one pays for retries when it does not. A structured edit asks only
//! for what a model is good at — new behaviour text, a number — and names *where* with an id
//! from an enum of the parent's own editable targets:
//!
//! ```json
//! {"idea": "users here are curt", "edits": [
//!   {"op": "set", "target": "MECHANICS['terse']['true'][1]", "text": "Keep every message under six words."},
//!   {"op": "add", "target": "MECHANICS['frustrated']['true']", "text": "Repeat your demand if ignored."},
//!   {"op": "number", "target": "PLACEMENT_WEIGHTS['terse']", "value": 0.8}]}
//! ```
//!
//! The targets ([`edit_targets`]) are the module-level literal data of the program — the
//! strings of its axes, mechanics and template fragments (those without `{placeholders}`), its
//! lists of sentences (to add to) and its numbers — listed by `generators/mutate_ast.py`,
//! which also applies the edits ([`apply_edits`]) through Python's `ast`: only the edited
//! source segments change, the program is re-parsed and compiled, and an edit that cannot
//! apply is skipped with its reason. With the schema of [`edit_schema`] enforced by the
//! endpoint (see [`crate::llm::schema`]) every answer parses and names real targets.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::structural::SCRIPT;

/// Longest text an edit may write, in characters: longer ones are skipped with the reason when
/// applied. Not a `maxLength` in the schema: llama.cpp turns one into as many nested optional
/// grammar rules, which made SmolLM2's constrained answers crawl (one mutation took minutes
/// at 240); the request's `max_tokens` bounds the answer instead.
pub const EDIT_TEXT_MAX_CHARS: usize = 400;

/// Most edits one answer may make.
pub const MAX_EDITS: u32 = 3;

/// Most targets offered (behaviour text first).
pub const MAX_TARGETS: usize = 64;

/// What kind of literal a target is, and so which edit applies to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// A string: `set` replaces it.
    Text,
    /// A list of sentences: `add` appends one.
    List,
    /// A number: `number` sets it (clipped to [0, 1] for a probability).
    Number,
}

/// One editable piece of a program's literal data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EditTarget {
    /// Its path, e.g. `MECHANICS['terse']['true'][1]`.
    pub id: String,
    /// Which edit applies.
    pub kind: TargetKind,
    /// Its current value (a list: how many sentences it holds).
    pub value: Value,
    /// A number that is a probability.
    #[serde(default)]
    pub prob: bool,
}

/// The edits of one answer, applied.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedEdits {
    /// The edited program.
    pub code: String,
    /// What was done, one entry per applied edit.
    pub done: Vec<String>,
    /// Edits that could not apply, with why.
    pub skipped: Vec<String>,
}

fn call(python: &str, request: &Value, timeout: Duration) -> Result<Value, String> {
    let out = super::run_python(python, SCRIPT, request.to_string().as_bytes(), timeout)
        .map_err(|e| e.to_string())?;
    let answer: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "the edit script answered no JSON ({e}); stderr: {}",
            super::tail(&String::from_utf8_lossy(&out.stderr), 400)
        )
    })?;
    if answer["ok"] == json!(true) {
        Ok(answer)
    } else {
        Err(answer["error"]
            .as_str()
            .unwrap_or("the edit script failed")
            .to_string())
    }
}

/// The editable targets of `code` (at most [`MAX_TARGETS`], behaviour text first).
pub fn edit_targets(
    python: &str,
    code: &str,
    timeout: Duration,
) -> Result<Vec<EditTarget>, String> {
    let answer = call(
        python,
        &json!({"op": "targets", "code": code, "max_targets": MAX_TARGETS}),
        timeout,
    )?;
    serde_json::from_value(answer["targets"].clone()).map_err(|e| format!("targets: {e}"))
}

/// Apply `edits` (the `edits` array of an answer) to `code`. An error when none applies.
pub fn apply_edits(
    python: &str,
    code: &str,
    edits: &Value,
    timeout: Duration,
) -> Result<AppliedEdits, String> {
    let answer = call(
        python,
        &json!({
            "op": "apply",
            "code": code,
            "edits": edits,
            "max_targets": MAX_TARGETS,
            "text_max": EDIT_TEXT_MAX_CHARS,
        }),
        timeout,
    )?;
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(AppliedEdits {
        code: answer["code"].as_str().unwrap_or_default().to_string(),
        done: strings(&answer["edits"]),
        skipped: strings(&answer["skipped"]),
    })
}

/// The JSON schema of an answer for `targets`: an `idea` and 1 to [`MAX_EDITS`] edits, each
/// naming a target of the right kind by id. `None` when there is no target.
pub fn edit_schema(targets: &[EditTarget]) -> Option<Value> {
    let ids = |k: TargetKind| -> Vec<&str> {
        targets
            .iter()
            .filter(|t| t.kind == k)
            .map(|t| t.id.as_str())
            .collect()
    };
    let text = json!({"type": "string"});
    let mut variants = Vec::new();
    for (kind, op, field, value) in [
        (TargetKind::Text, "set", "text", text.clone()),
        (TargetKind::List, "add", "text", text.clone()),
        (
            TargetKind::Number,
            "number",
            "value",
            json!({"type": "number"}),
        ),
    ] {
        let ids = ids(kind);
        if ids.is_empty() {
            continue;
        }
        variants.push(json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["op", "target", field],
            "properties": {
                "op": {"type": "string", "enum": [op]},
                "target": {"type": "string", "enum": ids},
                field: value,
            },
        }));
    }
    if variants.is_empty() {
        return None;
    }
    Some(json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["idea", "edits"],
        "properties": {
            "idea": {"type": "string"},
            "edits": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_EDITS,
                "items": {"anyOf": variants},
            },
        },
    }))
}

/// The targets as the prompt lists them: one line each, `id (kind): current value`.
pub fn targets_text(targets: &[EditTarget]) -> String {
    targets
        .iter()
        .map(|t| {
            let value = match (&t.kind, &t.value) {
                (TargetKind::Text, Value::String(s)) => format!("\"{s}\""),
                (TargetKind::Number, v) if t.prob => format!("{v} (a probability, 0 to 1)"),
                (_, Value::String(s)) => s.clone(),
                (_, v) => v.to_string(),
            };
            let op = match t.kind {
                TargetKind::Text => "set",
                TargetKind::List => "add",
                TargetKind::Number => "number",
            };
            format!("- `{}` [{op}]: {value}", t.id)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// An answer's JSON object: the text itself, or the object inside code fences or chatter.
/// An answer cut off by the completion cap (common with a small model: a schema bounds the
/// shape, not the length of a text) keeps its complete edits: the JSON is closed after the
/// last whole edit, and the result says how many edits were whole (`cut_off`).
pub fn parse_answer(text: &str) -> Result<Value, String> {
    let t = text.trim();
    let candidates = [
        Some(t),
        t.find('{')
            .zip(t.rfind('}'))
            .and_then(|(a, b)| t.get(a..=b)),
    ];
    let mut last = String::from("the answer is empty");
    for c in candidates.into_iter().flatten() {
        match serde_json::from_str::<Value>(c) {
            Ok(v) if v.get("edits").is_some_and(Value::is_array) => return Ok(v),
            Ok(_) => last = "the JSON has no \"edits\" list".into(),
            Err(e) => last = format!("not JSON: {e}"),
        }
    }
    if let Some(v) = whole_edits_of_a_cut_answer(t) {
        return Ok(v);
    }
    Err(last)
}

/// The answer closed after its last complete edit, when it was cut inside the `edits` list
/// and at least one edit is whole; with `"cut_off": true`. Linear in the answer: one scan finds
/// where each edit of the top-level `edits` list ends, and only the last few of those ends are
/// tried (a parse each).
fn whole_edits_of_a_cut_answer(t: &str) -> Option<Value> {
    let start = t.find('{')?;
    let body = &t[start..];
    let ends = edit_ends(body.as_bytes());
    for &end in ends.iter().rev().take(3) {
        let closed = format!("{}]}}", &body[..=end]);
        if let Ok(mut v) = serde_json::from_str::<Value>(&closed) {
            if v["edits"].as_array().is_some_and(|e| !e.is_empty()) {
                v["cut_off"] = Value::Bool(true);
                return Some(v);
            }
        }
    }
    None
}

/// Where each element of the top-level object's `"edits"` list ends (the byte of its closing
/// `}` or `]`), in one pass over a JSON text that may be cut anywhere.
fn edit_ends(b: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut depth = 0usize;
    // the depth of the `edits` list once it opened
    let mut list: Option<usize> = None;
    // the last string closed at depth 1 (a key of the top-level object), and whether a `:`
    // followed it
    let mut key: Option<(usize, usize)> = None;
    let mut after_key = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let open = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if depth == 1 {
                    key = Some((open + 1, i.min(b.len())));
                    after_key = false;
                }
            }
            b':' if depth == 1 => after_key = key.is_some(),
            b'{' | b'[' => {
                depth += 1;
                if b[i] == b'[' && depth == 2 && after_key && list.is_none() {
                    if let Some((k0, k1)) = key {
                        if &b[k0..k1] == b"edits" {
                            list = Some(depth);
                        }
                    }
                }
                key = None;
                after_key = false;
            }
            b'}' | b']' => {
                if list.is_some_and(|l| depth == l + 1) {
                    ends.push(i);
                }
                if list == Some(depth) {
                    // the list closed: the answer was not cut inside it
                    return ends;
                }
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return ends;
                }
            }
            b',' if depth == 1 => {
                key = None;
                after_key = false;
            }
            _ => {}
        }
        i += 1;
    }
    ends
}

#[cfg(test)]
mod tests {
    use super::*;

    const PY: &str = "python3";

    fn seed() -> String {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/seeds/offline_templates.py"
        ))
        .unwrap()
    }

    #[test]
    fn targets_schema_and_apply_round_trip() {
        let code = seed();
        let t = edit_targets(PY, &code, Duration::from_secs(20)).unwrap();
        assert!(t.len() <= MAX_TARGETS && t.len() > 10, "{}", t.len());
        let schema = edit_schema(&t).unwrap();
        let set = t.iter().find(|x| x.kind == TargetKind::Text).unwrap();
        let num = t
            .iter()
            .find(|x| x.kind == TargetKind::Number && x.prob)
            .unwrap();
        let edits = json!([
            {"op": "set", "target": set.id, "text": "Write in lowercase and never greet."},
            {"op": "number", "target": num.id, "value": 7.0},
            {"op": "set", "target": "NOT_A_TARGET", "text": "x"},
        ]);
        // the schema admits the first two only
        let enum_of = |i: usize| {
            schema["properties"]["edits"]["items"]["anyOf"][i]["properties"]["target"]["enum"]
                .clone()
        };
        assert!(enum_of(0).as_array().unwrap().contains(&json!(set.id)));
        assert!(!enum_of(0)
            .as_array()
            .unwrap()
            .contains(&json!("NOT_A_TARGET")));
        let a = apply_edits(PY, &code, &edits, Duration::from_secs(20)).unwrap();
        assert_eq!(a.done.len(), 2, "{a:?}");
        assert!(a.code.contains("Write in lowercase and never greet."));
        assert!(a.skipped[0].contains("unknown target"), "{a:?}");
        // a probability is clipped to 1
        assert!(a.done[1].ends_with("→1.0"), "{a:?}");
        let none = apply_edits(
            PY,
            &code,
            &json!([{"op": "add", "target": set.id, "text": "x"}]),
            Duration::from_secs(20),
        )
        .unwrap_err();
        assert!(
            none.contains("no edit applied") && none.contains("does not apply"),
            "{none}"
        );
    }

    #[test]
    fn issue34_item4_a_cut_answer_keeps_its_whole_edits() {
        let whole = r#"{"idea": "terse", "edits": [{"op": "set", "target": "a", "text": "x } ] {"}, {"op": "number", "target": "b", "value": 0.2}"#;
        for cut in [
            format!("{whole}, {{\"op\": \"set\", \"target\": \"c\", \"text\": \"half"),
            format!("{whole}, {{\"op\": \"add\", \"target\": \"d\", \"items\": [\"a\", {{\"b"),
            format!("Sure! ```json\n{whole},"),
            format!("{whole}]"),
            format!("{whole}], \"note\": \"cut here"),
        ] {
            let v = parse_answer(&cut).unwrap_or_else(|e| panic!("{cut}: {e}"));
            assert_eq!(v["cut_off"], true, "{cut}");
            let e = v["edits"].as_array().unwrap();
            assert_eq!(e.len(), 2, "{cut}");
            assert_eq!(e[0]["text"], "x } ] {");
            assert_eq!(v["idea"], "terse");
        }
        // no whole edit, or no edits list at all: unusable
        for bad in [
            r#"{"idea": "x", "edits": [{"op": "set", "tar"#,
            r#"{"idea": "edits", "x": [{"op": 1}, {"op": 2"#,
            r#"{"edits": "[{}]", "#,
        ] {
            assert!(parse_answer(bad).is_err(), "{bad}");
        }
        // an edit with escaped quotes and backslashes inside its strings
        let tricky =
            r#"{"edits": [{"op": "set", "target": "a", "text": "say \"}\" \\"}, {"op": "set", "#;
        let v = parse_answer(tricky).unwrap();
        assert_eq!(v["edits"][0]["text"], "say \"}\" \\");
    }

    #[test]
    fn answers_are_read_from_chatter_and_fences() {
        let v = parse_answer("Sure!\n```json\n{\"idea\": \"x\", \"edits\": []}\n```").unwrap();
        assert_eq!(v["idea"], "x");
        assert!(parse_answer("{\"idea\": 1}").unwrap_err().contains("edits"));
        assert!(parse_answer("<<<<<<< SEARCH")
            .unwrap_err()
            .contains("not JSON"));
    }
}
