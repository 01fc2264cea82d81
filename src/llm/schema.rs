//! Answers constrained to a JSON schema (constrained decoding).
//!
//! A [`ChatRequest`](super::ChatRequest) with a [`ResponseSchema`] asks the endpoint to
//! constrain the answer's text to the schema. Endpoints take the schema in different shapes:
//!
//! * [`SchemaMode::JsonSchema`] — OpenAI's `response_format: {"type": "json_schema",
//!   "json_schema": {"name", "schema", "strict": true}}`, also taken by vLLM, SGLang,
//!   llama.cpp's own server and Ollama's OpenAI API;
//! * [`SchemaMode::JsonObject`] — llama-cpp-python's `response_format: {"type": "json_object",
//!   "schema": {...}}` (its server 0.3 answers the OpenAI shape with HTTP 500 "Input should be
//!   'text' or 'json_object'");
//! * [`SchemaMode::Unconstrained`] — no `response_format`: the answer is free text, which the
//!   caller still parses.
//!
//! With [`StructuredOutput::Auto`] (the default of [`ModelSpec::structured_output`]) a
//! provider tries them in that order and remembers, per endpoint, the first one its endpoint
//! takes ([`SchemaLearner`]). A refusal ([`is_format_refusal`]) is a capability answer, not a
//! server fault: the provider resends at once in the next shape, and the refusal is never
//! retried, never backs the endpoint off and never lowers its concurrency.
//!
//! [`ModelSpec::structured_output`]: super::ModelSpec::structured_output

use std::sync::atomic::{AtomicU8, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{AttemptError, FailureKind};

/// A JSON schema an answer must follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseSchema {
    /// A short name (`[A-Za-z0-9_-]`, OpenAI's `json_schema.name`).
    pub name: String,
    /// The schema (an object schema; for OpenAI's strict mode every property required and
    /// `additionalProperties: false`).
    pub schema: Value,
}

/// How a model is asked for schema-constrained answers (`structured_output` of a model in
/// `[llm]`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutput {
    /// Try OpenAI's `json_schema`, then llama-cpp-python's `json_object` with a schema, then
    /// none; remember what the endpoint took.
    #[default]
    Auto,
    /// OpenAI's `json_schema` only (a refusal falls back to unconstrained answers).
    JsonSchema,
    /// llama-cpp-python's `json_object` with a `schema` only (a refusal falls back to
    /// unconstrained answers).
    JsonObject,
    /// Never send a schema: answers are free text.
    Off,
}

impl std::str::FromStr for StructuredOutput {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(StructuredOutput::Auto),
            "json_schema" => Ok(StructuredOutput::JsonSchema),
            "json_object" => Ok(StructuredOutput::JsonObject),
            "off" => Ok(StructuredOutput::Off),
            other => Err(format!(
                "'{other}' is not one of auto, json_schema, json_object, off"
            )),
        }
    }
}

/// How one request asked for a schema-constrained answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaMode {
    /// OpenAI's `response_format: {"type": "json_schema", ...}`.
    JsonSchema,
    /// llama-cpp-python's `response_format: {"type": "json_object", "schema": ...}`.
    JsonObject,
    /// No `response_format`: a free-text answer.
    Unconstrained,
}

impl SchemaMode {
    /// The `response_format` value of this mode for `schema` (`None`: send none).
    pub fn response_format(self, schema: &ResponseSchema) -> Option<Value> {
        match self {
            SchemaMode::JsonSchema => Some(json!({
                "type": "json_schema",
                "json_schema": {"name": schema.name, "schema": schema.schema, "strict": true},
            })),
            SchemaMode::JsonObject => Some(json!({"type": "json_object", "schema": schema.schema})),
            SchemaMode::Unconstrained => None,
        }
    }

    fn code(self) -> u8 {
        match self {
            SchemaMode::JsonSchema => 1,
            SchemaMode::JsonObject => 2,
            SchemaMode::Unconstrained => 3,
        }
    }

    fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(SchemaMode::JsonSchema),
            2 => Some(SchemaMode::JsonObject),
            3 => Some(SchemaMode::Unconstrained),
            _ => None,
        }
    }
}

/// Whether an error answer to a request that carried a `response_format` refuses that format
/// (or its schema) rather than failing for another reason: an HTTP 400, 422, 500 or 501 whose
/// text names the response format, the schema, `json_object` / `json_schema` or a grammar
/// built from the schema. llama-cpp-python 0.3 answers OpenAI's shape with a 500 ("Input
/// should be 'text' or 'json_object'"); OpenAI and vLLM answer unsupported formats with 400.
pub fn is_format_refusal(error: &AttemptError) -> bool {
    let status_fits = matches!(
        error.kind,
        FailureKind::Client(400 | 422) | FailureKind::Server(500 | 501)
    );
    if !status_fits {
        return false;
    }
    let m = error.message.to_ascii_lowercase();
    [
        "response_format",
        "json_schema",
        "json_object",
        "'text'",
        "schema",
        "grammar",
    ]
    .iter()
    .any(|k| m.contains(k))
}

/// What one endpoint takes, learned from its answers: the mode to try next and whether it is
/// confirmed. Shared by every request of a provider.
#[derive(Debug)]
pub struct SchemaLearner {
    configured: StructuredOutput,
    /// 0: nothing learned; else a [`SchemaMode`] code, confirmed by an answer or (for
    /// `Unconstrained`) by refusals.
    learned: AtomicU8,
    /// A [`SchemaMode`] code refused last (so the next request starts after it).
    refused: AtomicU8,
}

impl SchemaLearner {
    /// A learner for a model configured with `configured`.
    pub fn new(configured: StructuredOutput) -> Self {
        SchemaLearner {
            configured,
            learned: AtomicU8::new(0),
            refused: AtomicU8::new(0),
        }
    }

    /// The mode to ask the next request in.
    pub fn mode(&self) -> SchemaMode {
        if let Some(m) = SchemaMode::from_code(self.learned.load(Ordering::Relaxed)) {
            return m;
        }
        match self.configured {
            StructuredOutput::Off => SchemaMode::Unconstrained,
            StructuredOutput::JsonSchema | StructuredOutput::JsonObject
                if self.refused.load(Ordering::Relaxed) != 0 =>
            {
                SchemaMode::Unconstrained
            }
            StructuredOutput::JsonSchema => SchemaMode::JsonSchema,
            StructuredOutput::JsonObject => SchemaMode::JsonObject,
            StructuredOutput::Auto => match self.refused.load(Ordering::Relaxed) {
                0 => SchemaMode::JsonSchema,
                1 => SchemaMode::JsonObject,
                _ => SchemaMode::Unconstrained,
            },
        }
    }

    /// `mode` was refused: the mode to resend in (remembered for later requests).
    pub fn refused(&self, mode: SchemaMode) -> SchemaMode {
        self.refused.fetch_max(mode.code(), Ordering::Relaxed);
        let next = self.mode();
        if next == SchemaMode::Unconstrained {
            self.learned
                .store(SchemaMode::Unconstrained.code(), Ordering::Relaxed);
        }
        next
    }

    /// An answer came back to a request in `mode`: remember it.
    pub fn answered(&self, mode: SchemaMode) {
        if mode != SchemaMode::Unconstrained {
            let _ =
                self.learned
                    .compare_exchange(0, mode.code(), Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// See [`super::ChatModel::schema_support`].
    pub fn support(&self) -> Option<bool> {
        if self.configured == StructuredOutput::Off {
            return Some(false);
        }
        match SchemaMode::from_code(self.learned.load(Ordering::Relaxed)) {
            Some(SchemaMode::Unconstrained) => Some(false),
            Some(_) => Some(true),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(kind: FailureKind, msg: &str) -> AttemptError {
        AttemptError::new(kind, msg)
    }

    #[test]
    fn auto_walks_json_schema_then_json_object_then_none_and_remembers() {
        let l = SchemaLearner::new(StructuredOutput::Auto);
        assert_eq!(l.support(), None);
        assert_eq!(l.mode(), SchemaMode::JsonSchema);
        assert_eq!(l.refused(SchemaMode::JsonSchema), SchemaMode::JsonObject);
        assert_eq!(l.mode(), SchemaMode::JsonObject);
        l.answered(SchemaMode::JsonObject);
        assert_eq!(l.support(), Some(true));
        assert_eq!(l.mode(), SchemaMode::JsonObject);

        let none = SchemaLearner::new(StructuredOutput::Auto);
        none.refused(SchemaMode::JsonSchema);
        assert_eq!(
            none.refused(SchemaMode::JsonObject),
            SchemaMode::Unconstrained
        );
        assert_eq!(none.support(), Some(false));
        assert_eq!(none.mode(), SchemaMode::Unconstrained);
    }

    #[test]
    fn configured_modes_and_off() {
        let off = SchemaLearner::new(StructuredOutput::Off);
        assert_eq!(off.mode(), SchemaMode::Unconstrained);
        assert_eq!(off.support(), Some(false));
        let js = SchemaLearner::new(StructuredOutput::JsonObject);
        assert_eq!(js.mode(), SchemaMode::JsonObject);
        assert_eq!(
            js.refused(SchemaMode::JsonObject),
            SchemaMode::Unconstrained
        );
        assert_eq!(js.support(), Some(false));
    }

    #[test]
    fn refusals_are_told_from_faults() {
        let llama = "Input should be 'text' or 'json_object'";
        assert!(is_format_refusal(&err(FailureKind::Server(500), llama)));
        assert!(is_format_refusal(&err(
            FailureKind::Client(400),
            "response_format json_schema is not supported by this model"
        )));
        assert!(!is_format_refusal(&err(FailureKind::Server(503), llama)));
        assert!(!is_format_refusal(&err(
            FailureKind::Server(500),
            "internal error: out of memory"
        )));
    }

    #[test]
    fn response_formats() {
        let s = ResponseSchema {
            name: "edit".into(),
            schema: json!({"type": "object"}),
        };
        assert_eq!(
            SchemaMode::JsonSchema.response_format(&s).unwrap()["json_schema"]["name"],
            "edit"
        );
        assert_eq!(
            SchemaMode::JsonObject.response_format(&s).unwrap()["type"],
            "json_object"
        );
        assert!(SchemaMode::Unconstrained.response_format(&s).is_none());
    }
}
