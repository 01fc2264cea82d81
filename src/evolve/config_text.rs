//! `ppol evolve --print-config`: every key of the run configuration with its value and the
//! doc comment of its field, keys left unset commented out. The comments are read from the
//! doc comments of the settings structs themselves, in the file of the stage that owns each
//! section (their source is compiled in), so they cannot drift from the code; a test fails
//! when a printed key has none.

use toml::Value;

use crate::evolve::config::RunConfig;

/// Where each section's fields are documented: (section, struct, its source).
const SECTIONS: [(&str, &str, &str); 10] = [
    ("run", "RunSection", include_str!("config.rs")),
    (
        "world",
        "WorldSettings",
        include_str!("../simulate/world/mod.rs"),
    ),
    ("search", "SearchSection", include_str!("config.rs")),
    ("archive", "ArchiveConfig", include_str!("archive/mod.rs")),
    ("mutation", "MutationSection", include_str!("config.rs")),
    (
        "sandbox",
        "SandboxSection",
        include_str!("../generate/settings.rs"),
    ),
    (
        "episodes",
        "EpisodesSection",
        include_str!("../simulate/settings.rs"),
    ),
    (
        "fitness",
        "FitnessSection",
        include_str!("../fitness/settings.rs"),
    ),
    (
        "fitness.discriminator",
        "ForestParams",
        include_str!("../fitness/discriminator.rs"),
    ),
    (
        "budget",
        "BudgetSection",
        include_str!("../llm/config/mod.rs"),
    ),
];

/// The fields of `pub struct NAME` in `source`, in order, with their doc comments joined.
pub fn field_docs(source: &str, name: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Some(start) = source.find(&format!("pub struct {name} {{")) else {
        return out;
    };
    let mut doc: Vec<&str> = Vec::new();
    for line in source[start..].lines().skip(1) {
        let t = line.trim();
        if t == "}" {
            break;
        }
        if let Some(d) = t.strip_prefix("///") {
            doc.push(d.trim());
        } else if let Some(rest) = t.strip_prefix("pub ") {
            if let Some((field, _)) = rest.split_once(':') {
                out.push((field.trim().to_string(), plain(&doc.join(" "))));
            }
            doc.clear();
        } else if !t.starts_with("#[") {
            doc.clear();
        }
    }
    out
}

/// A doc comment as plain text: intra-doc links (`` [`X`] ``, `` [`X`](path) ``, `[text](path)`)
/// become their text and backticks are dropped; every other bracket stays, so ranges read as
/// written ("in [0, 1]", "in (0, 1]").
fn plain(doc: &str) -> String {
    let mut out = String::with_capacity(doc.len());
    let mut rest = doc;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let link = after.find(']').and_then(|close| {
            let inner = &after[..close];
            let tail = &after[close + 1..];
            // `[text](target)`: the text; `` [`X`] ``: X
            let target = tail
                .strip_prefix('(')
                .and_then(|t| t.find(')').map(|end| &t[end + 1..]));
            match target {
                Some(next) if !inner.is_empty() => Some((inner, next)),
                _ if inner.len() > 2 && inner.starts_with('`') && inner.ends_with('`') => {
                    Some((inner, tail))
                }
                _ => None,
            }
        });
        match link {
            Some((inner, next)) => {
                out.push_str(inner);
                rest = next;
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out.replace('`', "")
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

/// The configuration as commented TOML: every key of every section, unset ones commented
/// out, then the `[llm]` section (or, offline, an example of it commented out).
pub fn annotated(cfg: &RunConfig) -> String {
    let root = Value::try_from(cfg).unwrap_or(Value::Table(Default::default()));
    let mut out = String::from(
        "# ppol run configuration: every key with its value (`ppol evolve --config FILE` reads\n\
         # it back; flags override it). Keys commented out are unset.\n",
    );
    for (section, strukt, source) in SECTIONS {
        let mut table = &root;
        for part in section.split('.') {
            table = table.get(part).unwrap_or(&Value::Boolean(false));
        }
        out.push_str(&format!("\n[{section}]\n"));
        for (key, doc) in field_docs(source, strukt) {
            let nested = table.get(&key).is_some_and(Value::is_table);
            if nested {
                continue; // printed as its own section
            }
            out.push_str(&comment(&doc));
            match table.get(&key) {
                Some(v) => out.push_str(&format!("{key} = {}\n", inline(v))),
                None => out.push_str(&format!("# {key} =   (unset)\n")),
            }
        }
    }
    match &cfg.llm {
        Some(llm) => {
            out.push_str(
                "\n# [llm]: the models of every role (see the module docs of src/llm/config/mod.rs)\n",
            );
            let wrapped = toml::to_string_pretty(&toml::Table::from_iter([(
                "llm".to_string(),
                Value::try_from(llm).unwrap_or(Value::Table(Default::default())),
            )]))
            .unwrap_or_default();
            out.push_str(&wrapped);
        }
        None => out.push_str(
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
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doc_links_become_their_text_and_other_brackets_stay() {
        assert_eq!(
            plain("see [`Foo`] and [`bar`](crate::x::bar)"),
            "see Foo and bar"
        );
        assert_eq!(
            plain("the [README](../README.md), `code`"),
            "the README, code"
        );
        assert_eq!(
            plain("in [0, 1]; in (0, 1]; [a] [`b` c"),
            "in [0, 1]; in (0, 1]; [a] [b c"
        );
    }

    #[test]
    fn every_key_is_printed_with_its_doc_and_reads_back() {
        let cfg = RunConfig::default();
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
            "# [llm]",
        ] {
            assert!(text.contains(key), "{key} missing:\n{text}");
        }
        // every printed key has a comment above it
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let is_key = !l.starts_with('#') && !l.starts_with('[') && l.contains(" = ");
            let unset = l.starts_with("# ") && l.ends_with("(unset)");
            if (is_key || unset) && i > 0 {
                assert!(lines[i - 1].starts_with("# "), "no doc for: {l}");
            }
        }
        // ranges keep both brackets
        assert!(text.contains("in (0, 1]. Default 0.2."), "{text}");
        assert!(text.contains("in [0, 1]"), "{text}");
        // and it is a valid configuration equal to the one printed
        let back = RunConfig::from_toml_str(&text, std::path::Path::new("printed.toml")).unwrap();
        assert_eq!(back, cfg);
        for (section, strukt, source) in SECTIONS {
            let docs = field_docs(source, strukt);
            assert!(!docs.is_empty(), "{section}: no fields found for {strukt}");
            for (k, d) in docs {
                assert!(!d.is_empty(), "[{section}] {k} has no doc comment");
            }
        }
    }
}
