//! `ppol evolve --print-config`: every key of the run configuration with its value and its
//! description, keys left unset commented out. The descriptions come from the configuration's
//! JSON Schema ([`RunConfig::schema`]), which is derived from the settings types and their doc
//! comments — the same text an editor shows from `ppol config schema` — so the printed
//! comments cannot drift from the code; a test fails when a printed key has none.

use serde_json::Value as Json;
use toml::Value;

use crate::evolve::config::RunConfig;

/// The top-level sections in the order they are printed (`[llm]` last).
const ORDER: [&str; 10] = [
    "run", "world", "search", "archive", "mutation", "sandbox", "episodes", "fitness", "budget",
    "llm",
];

/// The schema of a property: its `$ref` (directly or inside `anyOf` with `null`) resolved in
/// the root's `$defs`.
fn resolve<'a>(root: &'a Json, prop: &'a Json) -> &'a Json {
    let reference = prop.get("$ref").or_else(|| {
        prop.get("anyOf")?
            .as_array()?
            .iter()
            .find_map(|s| s.get("$ref"))
    });
    match reference.and_then(Json::as_str) {
        Some(r) => r
            .strip_prefix("#/$defs/")
            .and_then(|name| root.get("$defs")?.get(name))
            .unwrap_or(prop),
        None => prop,
    }
}

/// Whether a property's schema is a section of its own (a struct: an object with properties).
fn is_section(root: &Json, prop: &Json) -> bool {
    resolve(root, prop).get("properties").is_some()
}

/// A description as plain text for a TOML comment: code spans lose their backticks, links
/// keep their text (`[label](Self::label)` → label, `[`X`]` → X); other brackets, such as the
/// ends of a range `[0, 1]`, stay.
pub fn plain(doc: &str) -> String {
    let mut out = String::with_capacity(doc.len());
    let mut rest = doc;
    while let Some(i) = rest.find('[') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let link = after.find(']').and_then(|j| {
            let text = &after[..j];
            let tail = &after[j + 1..];
            if tail.starts_with('(') {
                let k = tail.find(')')?;
                Some((text, j + 1 + k + 1))
            } else if text.starts_with('`') && text.ends_with('`') && text.len() >= 2 {
                Some((text, j + 1))
            } else {
                None
            }
        });
        match link {
            Some((text, used)) => {
                out.push_str(text);
                rest = &after[used..];
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out.replace('`', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Wrap `text` as `# ` comment lines of at most ~96 characters.
fn comment(text: &str) -> String {
    let mut out = String::new();
    let mut line = String::from("#");
    for w in text.split_whitespace() {
        if line.len() + 1 + w.len() > 96 && line.len() > 1 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(w);
    }
    if line.len() > 1 {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A value on one line (arrays and tables inline).
fn inline(v: &Value) -> String {
    match v {
        Value::Array(a) => format!("[{}]", a.iter().map(inline).collect::<Vec<_>>().join(", ")),
        Value::Table(t) => format!(
            "{{ {} }}",
            t.iter()
                .map(|(k, v)| format!("{k} = {}", inline(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// Print the section `name` (described by `doc`, its schema `schema`, its values `table`), then
/// its subsections.
fn section(root: &Json, name: &str, doc: &str, schema: &Json, table: &Value, out: &mut String) {
    let empty = serde_json::Map::new();
    let props = schema
        .get("properties")
        .and_then(Json::as_object)
        .unwrap_or(&empty);
    out.push('\n');
    out.push_str(&comment(doc));
    out.push_str(&format!("[{name}]\n"));
    let mut nested = Nested::default();
    for (key, prop) in props {
        let doc = plain(prop.get("description").and_then(Json::as_str).unwrap_or(""));
        if is_section(root, prop) {
            nested.push((key, doc, resolve(root, prop)));
            continue;
        }
        if let Some(Value::Table(map)) = table.get(key) {
            if prop
                .get("additionalProperties")
                .is_some_and(Json::is_object)
            {
                // a map of sections (`[llm.roles.mutator]`): one per entry
                let entry = resolve(root, &prop["additionalProperties"]);
                for (k, v) in map {
                    nested.push_owned(format!("{key}.{k}"), doc.clone(), entry, v.clone());
                }
                continue;
            }
        }
        out.push_str(&comment(&doc));
        match table.get(key) {
            Some(v) => out.push_str(&format!("{key} = {}\n", inline(v))),
            None => out.push_str(&format!("# {key} =   (unset)\n")),
        }
    }
    for (key, doc, sub) in nested.plain {
        let value = table
            .get(key)
            .cloned()
            .unwrap_or(Value::Table(Default::default()));
        section(root, &format!("{name}.{key}"), &doc, sub, &value, out);
    }
    for (key, doc, sub, value) in nested.owned {
        section(root, &format!("{name}.{key}"), &doc, sub, &value, out);
    }
}

/// Subsections of a section: fields that are structs, and entries of maps of structs.
#[derive(Default)]
struct Nested<'a> {
    plain: Vec<(&'a String, String, &'a Json)>,
    owned: Vec<(String, String, &'a Json, Value)>,
}

impl<'a> Nested<'a> {
    fn push(&mut self, x: (&'a String, String, &'a Json)) {
        self.plain.push(x);
    }
    fn push_owned(&mut self, key: String, doc: String, schema: &'a Json, value: Value) {
        self.owned.push((key, doc, schema, value));
    }
}

/// The configuration as commented TOML: every key of every section, unset ones commented
/// out, then the `[llm]` section (or, offline, an example of it commented out).
pub fn annotated(cfg: &RunConfig) -> String {
    let root = Value::try_from(cfg).unwrap_or(Value::Table(Default::default()));
    let schema = RunConfig::schema();
    let mut out = String::from(
        "# ppol run configuration: every key with its value (`ppol evolve --config FILE` reads\n\
         # it back; flags override it). Keys commented out are unset. An editor checks and\n\
         # completes this file with the schema `ppol config schema` prints (see the README).\n",
    );
    let props = &schema["properties"];
    for name in ORDER {
        let prop = &props[name];
        let table = root.get(name);
        match (name, table) {
            ("llm", None) => out.push_str(
                "\n# [llm] is absent: the run is offline (scripted simulator, offline seed program,\n\
                 # structural mutations). An example that puts every role on one endpoint:\n\
                 # [llm]\n\
                 # max_concurrency = 256\n\
                 # [llm.default]\n\
                 # provider = \"openai\"\n\
                 # model = \"gpt-4o-mini\"\n\
                 # base_url = \"http://127.0.0.1:8000/v1\"\n\
                 # [llm.roles.mutator]          # any role (user-sim, agent, mutator, generator,\n\
                 # model = \"gpt-4.1\"            # reflection) may have its own model\n",
            ),
            (_, table) => {
                let empty = Value::Table(Default::default());
                let s = resolve(&schema, prop);
                section(&schema, name, "", s, table.unwrap_or(&empty), &mut out)
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_printed_with_its_doc_and_reads_back() {
        let llm = crate::llm::LlmConfig::from_cli_value("openai:m@http://127.0.0.1:1/v1");
        let cfg = RunConfig {
            llm: Some(llm.unwrap()),
            ..Default::default()
        };
        for cfg in [RunConfig::default(), cfg] {
            let text = annotated(&cfg);
            for key in [
                "max_wall_clock_s",
                "seed_program",
                "generation_size",
                "max_tokens",
                "max_usd",
                "processes",
                "n_personas_schedule = [[1, 5], [2, 8], [3, 10]]",
                "[fitness.discriminator]",
            ] {
                assert!(text.contains(key), "{key} missing:\n{text}");
            }
            // every printed key has a comment above it
            let lines: Vec<&str> = text.lines().collect();
            for (i, l) in lines.iter().enumerate() {
                let is_key = !l.starts_with('#') && !l.starts_with('[') && l.contains(" = ");
                let unset = l.starts_with("# ") && l.ends_with("(unset)");
                if (is_key || unset) && i > 0 {
                    assert!(lines[i - 1].starts_with("# "), "no doc for: {l}\n{text}");
                }
            }
            // and it is a valid configuration equal to the one printed
            let back =
                RunConfig::from_toml_str(&text, std::path::Path::new("printed.toml")).unwrap();
            assert_eq!(back, cfg);
        }
    }

    #[test]
    fn plain_text_keeps_ranges_and_drops_link_markup() {
        assert_eq!(plain("in [0, 1] or (0, 1]"), "in [0, 1] or (0, 1]");
        assert_eq!(
            plain("see [`LlmConfig::roles`] and [label](Self::label)"),
            "see LlmConfig::roles and label"
        );
        assert_eq!(plain("`demo` or\n`chat`"), "demo or chat");
    }

    #[test]
    fn the_schema_shipped_in_the_python_package_is_current() {
        let shipped = include_str!("../../python/ppol_rs/run.schema.json");
        let now = crate::io::to_json_pretty(&RunConfig::schema()) + "\n";
        assert!(
            shipped == now,
            "python/ppol_rs/run.schema.json is stale: run `ppol config schema -o python/ppol_rs/run.schema.json`"
        );
    }
}

/// Issue #43 item 8: every configuration of one key that the shipped JSON Schema accepts is
/// accepted by ppol too (the schema carries ppol's ranges). Each numeric key is tried at
/// probe values and at its schema bounds, each enumerated string at each of its values.
#[cfg(test)]
mod one_key_sweep {
    use super::*;
    use serde_json::Value;

    fn resolve<'a>(root: &'a Value, s: &'a Value) -> &'a Value {
        match s.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let name = r.trim_start_matches("#/$defs/");
                resolve(root, &root["$defs"][name])
            }
            None => s,
        }
    }

    fn types(s: &Value) -> Vec<String> {
        match s.get("type") {
            Some(Value::String(t)) => vec![t.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|t| t.as_str().map(String::from))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Every (dotted key, value) the schema accepts at a leaf, from probes and bounds.
    fn leaves(root: &Value, s: &Value, path: &str, out: &mut Vec<(String, toml::Value)>) {
        let s = resolve(root, s);
        for branch in ["anyOf", "oneOf"] {
            if let Some(Value::Array(bs)) = s.get(branch) {
                for b in bs {
                    leaves(root, b, path, out);
                }
            }
        }
        if let Some(Value::Object(props)) = s.get("properties") {
            for (k, v) in props {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                leaves(root, v, &p, out);
            }
            return;
        }
        if let Some(Value::Array(values)) = s.get("enum") {
            for v in values {
                if let Some(t) = v.as_str() {
                    out.push((path.into(), toml::Value::String(t.into())));
                }
            }
        }
        if let Some(Value::String(c)) = s.get("const") {
            out.push((path.into(), toml::Value::String(c.clone())));
        }
        let ts = types(s);
        let num = |k: &str| s.get(k).and_then(Value::as_f64);
        let ok = |x: f64| {
            num("minimum").is_none_or(|m| x >= m)
                && num("maximum").is_none_or(|m| x <= m)
                && num("exclusiveMinimum").is_none_or(|m| x > m)
                && num("exclusiveMaximum").is_none_or(|m| x < m)
        };
        if ts.iter().any(|t| t == "integer") {
            let mut probes: Vec<f64> = vec![-1.0, 0.0, 1.0, 2.0, 3.0, 100.0, 1e6, 1e12];
            probes.extend(["minimum", "maximum"].iter().filter_map(|k| num(k)));
            for x in probes {
                if ok(x)
                    && x.abs() < 9e15
                    && (s.get("format").and_then(Value::as_str) != Some("uint32")
                        || x <= u32::MAX as f64)
                {
                    out.push((path.into(), toml::Value::Integer(x as i64)));
                }
            }
        } else if ts.iter().any(|t| t == "number") {
            let mut probes: Vec<f64> = vec![-1.0, 0.0, 5e-5, 0.5, 1.0, 2.0, 100.0, 1e9, 1e300];
            probes.extend(["minimum", "maximum"].iter().filter_map(|k| num(k)));
            if let Some(m) = num("exclusiveMinimum") {
                probes.push(m + 1e-9_f64.max(m.abs() * 1e-9));
            }
            for x in probes {
                if ok(x) {
                    out.push((path.into(), toml::Value::Float(x)));
                }
            }
        }
    }

    fn one_key(path: &str, v: toml::Value) -> String {
        let mut parts: Vec<&str> = path.split('.').collect();
        let last = parts.pop().unwrap();
        let mut table = toml::Table::new();
        table.insert(last.into(), v);
        for p in parts.iter().rev() {
            let mut outer = toml::Table::new();
            outer.insert((*p).into(), toml::Value::Table(table));
            table = outer;
        }
        toml::to_string(&table).unwrap()
    }

    #[test]
    fn issue43_item8_every_one_key_config_the_schema_accepts_ppol_accepts() {
        let schema = RunConfig::schema();
        let mut probes = Vec::new();
        leaves(&schema, &schema, "", &mut probes);
        assert!(probes.len() > 300, "{} probes", probes.len());
        let mut refused = Vec::new();
        for (path, v) in &probes {
            let text = one_key(path, v.clone());
            if let Err(e) = RunConfig::from_toml_str(&text, std::path::Path::new("one-key.toml")) {
                refused.push(format!("{path} = {v}: {e}"));
            }
        }
        eprintln!(
            "{} of {} one-key configurations the schema accepts are refused",
            refused.len(),
            probes.len()
        );
        assert!(
            refused.is_empty(),
            "{} of {} one-key configurations the schema accepts are refused:\n{}",
            refused.len(),
            probes.len(),
            refused.join("\n")
        );
    }
}
