//! Bounds on the strings and lists of tool arguments, written into the tool schemas a model is
//! sent (see [`ToolArgumentBound`]): llama-cpp-python turns a tool's schema into the grammar of
//! its arguments and ignores `max_tokens` on that branch, so a bound the schema does not carry
//! is no bound at all.

use serde_json::{json, Map, Value};

use super::config::ToolArgumentBound;

/// `schema` (a tool's parameters) as sent under `bound`: see [`ToolArgumentBound`].
pub fn shaped_tool_schema(schema: &Value, bound: ToolArgumentBound) -> Value {
    match bound {
        ToolArgumentBound::All(n) => bounded_tool_schema(schema, n),
        ToolArgumentBound::Identifiers(n) => {
            let mut out = schema.clone();
            bound_schema(&mut out, Scope::Identifiers(n), None, None);
            out
        }
        ToolArgumentBound::Unbounded => schema.clone(),
    }
}

/// `schema` (a tool's parameters) with every string bounded to `max_chars` characters
/// (`maxLength`) and every list to [`super::config::TOOL_ARGUMENT_MAX_ITEMS`] items
/// (`maxItems`); tighter bounds already there stay, and strings with an `enum`, a `const` or a
/// `format` are left alone (they are bounded already, or a server checks them otherwise).
pub fn bounded_tool_schema(schema: &Value, max_chars: u32) -> Value {
    let mut out = schema.clone();
    bound_schema(&mut out, Scope::All(max_chars), None, None);
    out
}

/// Words of a property name that make a string argument identifier-like (the name is split
/// at `_`, `-`, spaces, digits-to-letters and lower-to-upper case changes).
pub const IDENTIFIER_WORDS: [&str; 16] = [
    "id", "ids", "uuid", "guid", "email", "emails", "code", "codes", "zip", "postcode", "date",
    "dob", "time", "number", "phone", "name",
];

/// Longest example value (`such as 'X'`) that makes a string argument identifier-like.
const IDENTIFIER_EXAMPLE_MAX_CHARS: usize = 40;

/// Whether a string argument (or a list of strings) named `name` with `description` holds an
/// identifier-like value, which the default tool-argument bound limits: one whose name has a
/// word of [`IDENTIFIER_WORDS`] (`user_id`, `item_ids`, `email`, `zip`, `flight_number`,
/// `dob`, `first_name`, `userId`), or whose description gives an example of one token
/// (`such as 'JFK'`, `e.g. "1008292230"`, at most 40 characters, no spaces). Free text (τ²'s
/// `thought`, `summary`, `reason`, `expression` — whose example `'2 + 2'` has spaces —, an
/// address) matches neither.
pub fn is_identifier_like(name: Option<&str>, description: Option<&str>) -> bool {
    if let Some(name) = name {
        if name_words(name)
            .iter()
            .any(|w| IDENTIFIER_WORDS.contains(&w.as_str()))
        {
            return true;
        }
    }
    description.is_some_and(has_token_example)
}

fn name_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut prev: Option<char> = None;
    for c in name.chars() {
        let split = !c.is_alphanumeric()
            || prev.is_some_and(|p| {
                (p.is_lowercase() && c.is_uppercase()) || (p.is_ascii_digit() != c.is_ascii_digit())
            });
        if split && !cur.is_empty() {
            words.push(std::mem::take(&mut cur));
        }
        if c.is_alphanumeric() {
            cur.extend(c.to_lowercase());
        }
        prev = Some(c);
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// Whether `description` gives a one-token example: `such as`, `e.g.`, `for example` or
/// `like`, then a quoted value without whitespace.
fn has_token_example(description: &str) -> bool {
    let lower = description.to_lowercase();
    for marker in ["such as", "e.g.", "for example", "like"] {
        let mut from = 0;
        while let Some(at) = lower[from..].find(marker) {
            let rest = lower[from + at + marker.len()..].trim_start_matches([' ', ',', ':']);
            if let Some(q) = rest
                .chars()
                .next()
                .filter(|c| matches!(c, '\'' | '"' | '`'))
            {
                let body = &rest[q.len_utf8()..];
                if let Some(end) = body.find(q) {
                    let example = &body[..end];
                    if !example.is_empty()
                        && example.chars().count() <= IDENTIFIER_EXAMPLE_MAX_CHARS
                        && !example.chars().any(char::is_whitespace)
                    {
                        return true;
                    }
                }
            }
            from += at + marker.len();
        }
    }
    false
}

/// Which strings and lists [`bound_schema`] bounds.
#[derive(Clone, Copy)]
enum Scope {
    /// Every string to N characters, every list to the item cap.
    All(u32),
    /// Identifier-like strings to N characters, lists of them to the item cap.
    Identifiers(u32),
}

/// Bound `schema`, the schema of the property `name` (`None` for the root and combinator
/// branches, which inherit their parent's name) described by `inherited` when it has no
/// description of its own.
fn bound_schema(schema: &mut Value, scope: Scope, name: Option<&str>, inherited: Option<&str>) {
    match schema {
        Value::Object(map) => {
            let types: Vec<&str> = match map.get("type") {
                Some(Value::String(t)) => vec![t.as_str()],
                Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            let description = map
                .get("description")
                .and_then(Value::as_str)
                .or(inherited)
                .map(str::to_string);
            let is_string = types.contains(&"string")
                && !map.contains_key("enum")
                && !map.contains_key("const")
                && !map.contains_key("format");
            let is_array = types.contains(&"array");
            let max_chars = match scope {
                Scope::All(n) => Some(n),
                Scope::Identifiers(n) => {
                    is_identifier_like(name, description.as_deref()).then_some(n)
                }
            };
            if is_string {
                if let Some(n) = max_chars {
                    tighten(map, "maxLength", n);
                }
            }
            if is_array {
                let items_are_strings = map
                    .get("items")
                    .and_then(|i| i.get("type"))
                    .and_then(Value::as_str)
                    == Some("string");
                let bound_list = match scope {
                    Scope::All(_) => true,
                    Scope::Identifiers(_) => items_are_strings && max_chars.is_some(),
                };
                if bound_list {
                    tighten(map, "maxItems", super::config::TOOL_ARGUMENT_MAX_ITEMS);
                }
            }
            // Sub-schemas: properties, items, definitions, combinators. Keyword values that
            // are data (`enum`, `const`, `default`, `examples`) are not schemas.
            for (key, value) in map.iter_mut() {
                match key.as_str() {
                    "properties" | "patternProperties" | "$defs" | "definitions" => {
                        if let Value::Object(subs) = value {
                            for (sub_name, sub) in subs.iter_mut() {
                                bound_schema(sub, scope, Some(sub_name), None);
                            }
                        }
                    }
                    // A list's items are its elements: `item_ids` names each of them.
                    "items" | "contains" => {
                        bound_schema(value, scope, name, description.as_deref())
                    }
                    "additionalProperties" | "not" => bound_schema(value, scope, None, None),
                    "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                        if let Value::Array(subs) = value {
                            for sub in subs {
                                bound_schema(sub, scope, name, description.as_deref());
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        Value::Array(items) => {
            // draft-4 tuple `items: [...]`
            for sub in items {
                bound_schema(sub, scope, name, inherited);
            }
        }
        _ => {}
    }
}

/// Set `map[key]` to `bound` unless a number at most that large is there already.
fn tighten(map: &mut Map<String, Value>, key: &str, bound: u32) {
    let keep = map
        .get(key)
        .and_then(Value::as_u64)
        .is_some_and(|v| v <= u64::from(bound));
    if !keep {
        map.insert(key.into(), json!(bound));
    }
}
