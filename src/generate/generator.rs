//! The generator contract: run a generator program in the [`Sandbox`], validate what it
//! returns and turn it into [`Persona`] records.
//!
//! A generator program defines `DIVERSITY_AXES` (a list of `{"behavior", "definition",
//! "presence": {"true", "false"}}` dicts; empty allowed, `None` not) and
//! `generate_personas_detailed(task_context, axes, n)` returning an iterable of `n` dicts with
//! `persona_id`, `description`, `axis_placement` (a bool for exactly the program's axes),
//! `reasoning`, and the roleplay text in `expanded_instruction` (or `instruction`, or `text`,
//! first non-empty string in that order). See `seeds/README.md` for the one-page contract.
//!
//! Validation rules (a violation is a [`Failure`] at [`Stage::Validate`]):
//! * exactly `n` rows (fewer or more is reported with both numbers);
//! * the axes (sent by the untrusted harness) are at most [`MAX_AXES`] distinct names of at
//!   most [`MAX_AXIS_NAME_CHARS`] characters, without control characters or surrounding spaces;
//! * every row a dict; `persona_id` a non-empty string, normalised to snake_case
//!   (lowercase, runs of other characters become `_`), at most [`MAX_PERSONA_ID_CHARS`]
//!   characters after normalisation; persona ids must be unique after
//!   normalisation — duplicates fail the run rather than being silently dropped, because
//!   dropping would change the count the program promised;
//! * `description` and `reasoning` strings when present (missing → empty / absent);
//! * `axis_placement` a dict whose keys are exactly the program's axes, every value a bool
//!   (re-ordered to the axis order);
//! * a non-empty roleplay text;
//! * `source` (optional): where the program says the persona came from, a label of at most
//!   [`MAX_SOURCE_CHARS`] characters from `a-z`, `0-9`, `-` and `_`. The LLM seeds write
//!   `model-json` (the model's JSON answer used as is — constrained by a schema where the
//!   endpoint takes one), `repaired` (read from a malformed or prose answer by the program's
//!   repair) or `fallback` (composed by the program without a usable answer: padded profiles,
//!   instructions built from the profile). It reaches the persona records (`ppol generate`,
//!   a run's `personas.jsonl`) so a reader can tell model output from the program's repairs.
//!
//! Text fields (`description`, `reasoning`, the roleplay text) lose their control characters
//! (escape sequences, `\r`, NUL, ...; `\n` and `\t` stay): they are prompts for a language
//! model and lines in terminals and reports, never terminal commands.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Map, Value};

pub use crate::generate::sandbox::{
    neutralise, Failure, Program, Sandbox, SandboxConfig, SandboxReport, Stage,
};
use crate::llm::ChatModel;
use crate::persona::{persona_block, Persona};
use crate::Result;

/// Keys accepted for the roleplay text, in order of preference.
pub const TEXT_KEYS: [&str; 3] = ["expanded_instruction", "instruction", "text"];
/// Longest persona id, in characters after normalisation to snake_case.
pub const MAX_PERSONA_ID_CHARS: usize = 64;
/// Most axes a program may declare.
pub const MAX_AXES: usize = 64;
/// Longest axis name, in characters.
pub const MAX_AXIS_NAME_CHARS: usize = 100;
/// Longest `source` label of a persona, in characters.
pub const MAX_SOURCE_CHARS: usize = 32;

/// The result of one generation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum GenerationOutcome {
    /// The program produced `n` valid personas.
    Ok {
        /// The personas, in the program's order, `task_id` filled in.
        personas: Vec<Persona>,
        /// LLM requests forwarded to the model.
        llm_calls: usize,
        /// Wall time of the run.
        #[serde(with = "secs")]
        elapsed: Duration,
    },
    /// The program failed; the failure says where and why.
    Failed(Failure),
}

mod secs {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

impl GenerationOutcome {
    /// The personas, if the run succeeded.
    pub fn personas(&self) -> Option<&[Persona]> {
        match self {
            GenerationOutcome::Ok { personas, .. } => Some(personas),
            GenerationOutcome::Failed(_) => None,
        }
    }

    /// The failure, if the run failed.
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            GenerationOutcome::Failed(f) => Some(f),
            GenerationOutcome::Ok { .. } => None,
        }
    }
}

/// Run `program` in `sandbox` for one task and validate the result. Async; call it for many
/// tasks concurrently — the sandbox's semaphore bounds how many processes run at once.
/// `Err` only when the program file cannot be read; everything the program does wrong is
/// `Ok(GenerationOutcome::Failed(..))`.
pub async fn generate_in(
    sandbox: &Sandbox,
    program: &Program,
    task_context: &str,
    task_id: Option<&str>,
    n: usize,
    llm: Option<Arc<dyn ChatModel>>,
    seed: u64,
) -> Result<GenerationOutcome> {
    program.check()?;
    let run = sandbox.run(program, task_context, n, llm, seed).await;
    let raw = match run.outcome {
        Ok(r) => r,
        Err(f) => return Ok(GenerationOutcome::Failed(f)),
    };
    match validate(&raw.axes, &raw.rows, raw.count, raw.truncated, n, task_id) {
        Ok(personas) => Ok(GenerationOutcome::Ok {
            personas,
            llm_calls: run.llm_calls,
            elapsed: run.elapsed,
        }),
        Err(reason) => Ok(GenerationOutcome::Failed(Failure::new(
            Stage::Validate,
            &reason,
            &raw.stderr_tail,
            &program.name(),
        ))),
    }
}

/// Normalise a persona id to snake_case (`"Angry Bob!"` → `angry_bob`).
pub fn snake_case(id: &str) -> String {
    let mut out = String::new();
    let mut gap = false;
    for c in id.trim().chars() {
        if c.is_alphanumeric() {
            if gap && !out.is_empty() {
                out.push('_');
            }
            gap = false;
            out.extend(c.to_lowercase());
        } else {
            gap = true;
        }
    }
    out
}

/// Validate the rows returned by a program against the contract (see the module docs).
/// `count` is how many items the program yielded, `truncated` whether the harness stopped at
/// its cap. Returns the personas or the reason of the violation.
pub fn validate(
    axes: &[String],
    rows: &[Value],
    count: usize,
    truncated: bool,
    n: usize,
    task_id: Option<&str>,
) -> std::result::Result<Vec<Persona>, String> {
    check_axes(axes)?;
    if truncated {
        return Err(format!(
            "returned more than {} personas (stopped reading), expected {n}",
            rows.len()
        ));
    }
    if count != n || rows.len() != n {
        let which = if count < n { "fewer" } else { "more" };
        return Err(format!(
            "returned {count} personas, expected {n} ({which} than asked)"
        ));
    }
    let empty = Map::new();
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(n);
    for (i, row) in rows.iter().enumerate() {
        let at = |msg: String| format!("persona {i}: {msg}");
        let Some(obj) = row.as_object() else {
            return Err(at(format!("is {}, not a dict", kind(row))));
        };
        if obj.contains_key("__nonjson__") {
            return Err(at("is not a dict".into()));
        }
        let pid = match obj.get("persona_id") {
            Some(Value::String(s)) if !snake_case(s).is_empty() => snake_case(s),
            Some(Value::String(_)) | None | Some(Value::Null) => {
                return Err(at("persona_id is missing or empty".into()))
            }
            Some(v) => return Err(at(format!("persona_id is {}, not a string", kind(v)))),
        };
        let id_chars = pid.chars().count();
        if id_chars > MAX_PERSONA_ID_CHARS {
            return Err(at(format!(
                "persona_id is {id_chars} characters long after normalisation; the limit is {MAX_PERSONA_ID_CHARS}"
            )));
        }
        if !seen.insert(pid.clone()) {
            return Err(at(format!("duplicate persona_id '{pid}'")));
        }
        let at = |msg: String| format!("persona {i} ('{pid}'): {msg}");
        let description = match obj.get("description") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => clean_text(s),
            Some(v) => return Err(at(format!("description is {}, not a string", kind(v)))),
        };
        let reasoning = match obj.get("reasoning") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if clean_text(s).is_empty() => None,
            Some(Value::String(s)) => Some(clean_text(s)),
            Some(v) => return Err(at(format!("reasoning is {}, not a string", kind(v)))),
        };
        let source = match obj.get("source") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => {
                let ok = !s.is_empty()
                    && s.chars().count() <= MAX_SOURCE_CHARS
                    && s.chars().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_'
                    });
                if !ok {
                    return Err(at(format!(
                        "source {:?} is not a label of 1 to {MAX_SOURCE_CHARS} characters from a-z, 0-9, '-' and '_'",
                        neutralise(&s.chars().take(40).collect::<String>())
                    )));
                }
                Some(s.clone())
            }
            Some(v) => return Err(at(format!("source is {}, not a string", kind(v)))),
        };
        let placement = match obj.get("axis_placement") {
            Some(Value::Object(m)) => m,
            None | Some(Value::Null) if axes.is_empty() => &empty,
            None | Some(Value::Null) => return Err(at("axis_placement is missing".into())),
            Some(v) => return Err(at(format!("axis_placement is {}, not a dict", kind(v)))),
        };
        let mut axis_placement = Map::new();
        for axis in axes {
            match placement.get(axis) {
                Some(Value::Bool(b)) => {
                    axis_placement.insert(axis.clone(), Value::Bool(*b));
                }
                Some(v) => {
                    return Err(at(format!(
                        "axis_placement['{axis}'] is {}, not a bool",
                        kind(v)
                    )))
                }
                None => return Err(at(format!("axis_placement lacks axis '{axis}'"))),
            }
        }
        if let Some(extra) = placement.keys().find(|k| !axes.contains(k)) {
            return Err(at(format!(
                "axis_placement has '{extra}', which is not in DIVERSITY_AXES"
            )));
        }
        let mut text = None;
        for key in TEXT_KEYS {
            match obj.get(key) {
                Some(Value::String(s)) if !clean_text(s).is_empty() => {
                    text = Some(clean_text(s));
                    break;
                }
                None | Some(Value::Null) | Some(Value::String(_)) => {}
                Some(v) => return Err(at(format!("{key} is {}, not a string", kind(v)))),
            }
        }
        let Some(text) = text else {
            return Err(at(
                "empty roleplay text (expanded_instruction / instruction / text)".into(),
            ));
        };
        out.push(Persona {
            task_id: task_id.map(String::from),
            persona_id: pid,
            description,
            axis_placement,
            text,
            reasoning,
            source,
        });
    }
    Ok(out)
}

/// Check the axis names a program declared (they come from the untrusted side of the channel).
pub fn check_axes(axes: &[String]) -> std::result::Result<(), String> {
    if axes.len() > MAX_AXES {
        return Err(format!(
            "DIVERSITY_AXES has {} axes; the limit is {MAX_AXES}",
            axes.len()
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, a) in axes.iter().enumerate() {
        if a.trim().is_empty() || a.trim() != a {
            return Err(format!(
                "DIVERSITY_AXES[{i}] name {a:?} is empty or has surrounding spaces"
            ));
        }
        if a.chars().count() > MAX_AXIS_NAME_CHARS {
            return Err(format!(
                "DIVERSITY_AXES[{i}] name is {} characters long; the limit is {MAX_AXIS_NAME_CHARS}",
                a.chars().count()
            ));
        }
        if a.chars().any(char::is_control) {
            return Err(format!(
                "DIVERSITY_AXES[{i}] name {:?} has control characters",
                neutralise(a)
            ));
        }
        if !seen.insert(a.as_str()) {
            return Err(format!("DIVERSITY_AXES names '{a}' twice"));
        }
    }
    Ok(())
}

/// Trim a text field and drop its control characters (`\r\n` and `\r` become `\n`;
/// `\n` and `\t` stay).
fn clean_text(s: &str) -> String {
    let s = s.replace("\r\n", "\n").replace('\r', "\n");
    s.chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .collect::<String>()
        .trim()
        .to_string()
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(m) if m.contains_key("__nonjson__") => "a non-JSON object",
        Value::Object(_) => "a dict",
    }
}

/// Output formats of `ppol generate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One persona JSON record per line (persona_id, task_id, text, axis_placement, ...).
    Jsonl,
    /// One line per task: `{"task_id", "personas": [{"persona_id", "axis_placement",
    /// "user_scenario": {"persona": TEXT}}]}` — each `user_scenario` merges into a τ²-bench
    /// task's `user_scenario` (its `persona` string field).
    Tau2,
    /// The ready-to-paste injection block of each persona, separated by a `# task / persona`
    /// line. Control characters (other than newlines and tabs) are shown as `\u{..}` escapes.
    Prompt,
}

/// Format the personas of one task. JSON formats escape control characters and bidi controls
/// as `\uXXXX` ([`crate::io::to_json`]: the same text once parsed); the prompt format shows
/// them as `\u{..}` escapes, so no format writes raw escape sequences or reordering controls.
pub fn format_personas(personas: &[Persona], format: OutputFormat) -> String {
    match format {
        OutputFormat::Jsonl => crate::io::to_jsonl(personas),
        OutputFormat::Tau2 => {
            let task_id = personas.first().and_then(|p| p.task_id.clone());
            let rows: Vec<Value> = personas
                .iter()
                .map(|p| {
                    json!({
                        "persona_id": p.persona_id,
                        "axis_placement": p.axis_placement,
                        "user_scenario": {"persona": p.text},
                    })
                })
                .collect();
            crate::io::to_json(&json!({"task_id": task_id, "personas": rows})) + "\n"
        }
        OutputFormat::Prompt => personas
            .iter()
            .map(|p| {
                format!(
                    "# task {} / persona {}\n\n{}\n\n",
                    neutralise(p.task_id.as_deref().unwrap_or("-")).replace('\n', " "),
                    neutralise(&p.persona_id).replace('\n', " "),
                    neutralise(&persona_block(&p.text))
                )
            })
            .collect(),
    }
}
