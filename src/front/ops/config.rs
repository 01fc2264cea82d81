//! A run configuration in layers: the defaults, then a TOML file, then the front end's settings
//! (CLI flags, Python arguments and `overrides=`), each value remembering where it came from.
//! The layers are merged as TOML values, read into [`RunConfig`] once and validated once; an
//! error names the key and its origin — the file and line, the flag, or the Python argument.
//!
//! Why not `figment`: it merges the same layers with provenance, but names a file without the
//! line of a key, and ppol's configuration errors have always named the line; the
//! configuration is TOML only (no environment layer), so what remains is a merge by dotted key.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::evolve::config::RunConfig;
use crate::{Error, Result};

/// Where a configuration value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// ppol's default.
    Default,
    /// A configuration file, at a line when it is known.
    File {
        /// The file.
        path: PathBuf,
        /// Its line (1-based).
        line: Option<usize>,
    },
    /// A command-line flag (`--iterations`).
    Flag(String),
    /// A Python argument (`world=`, `overrides['search.iterations']`).
    Python(String),
    /// Set by ppol itself for the verb (not by the user).
    Internal,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => write!(f, "the default"),
            Origin::File {
                path,
                line: Some(l),
            } => write!(f, "{}, line {l}", path.display()),
            Origin::File { path, line: None } => write!(f, "{}", path.display()),
            Origin::Flag(flag) => write!(f, "the flag {flag}"),
            Origin::Python(arg) => write!(f, "the Python argument {arg}"),
            Origin::Internal => write!(f, "ppol"),
        }
    }
}

/// Configuration overrides by dotted key (`search.iterations`, `run.out`, `llm`, ...), each
/// with its [`Origin`], applied in order over a TOML file or the defaults. The CLI turns its
/// flags into these, Python its arguments and its `overrides=` dict, so both are checked by
/// [`load_config`] with the same messages.
#[derive(Debug, Clone, Default)]
pub struct Overrides(Vec<(String, toml::Value, Origin)>);

impl Overrides {
    /// No overrides.
    pub fn new() -> Self {
        Overrides::default()
    }

    /// Set `key` to a value that serialises to TOML (numbers, strings, paths, lists, tables),
    /// as ppol itself does for the verb.
    pub fn set(&mut self, key: &str, value: impl Serialize) -> Result<&mut Self> {
        self.set_from(Origin::Internal, key, value)
    }

    /// Set `key` to `value`, which came from `origin`.
    pub fn set_from(
        &mut self,
        origin: Origin,
        key: &str,
        value: impl Serialize,
    ) -> Result<&mut Self> {
        let v = toml::Value::try_from(value).map_err(|e| {
            Error::config(
                key,
                format!("cannot be represented in TOML: {e} (from {origin})"),
            )
        })?;
        self.0.push((key.to_string(), v, origin));
        Ok(self)
    }

    /// Set `key` from the flag `flag` when it was given.
    pub fn flag<T: Serialize>(
        &mut self,
        flag: &str,
        key: &str,
        value: Option<T>,
    ) -> Result<&mut Self> {
        match value {
            Some(v) => self.set_from(Origin::Flag(flag.into()), key, v),
            None => Ok(self),
        }
    }

    /// Set `key` from the Python argument `arg` when it was given.
    pub fn python<T: Serialize>(
        &mut self,
        arg: &str,
        key: &str,
        value: Option<T>,
    ) -> Result<&mut Self> {
        match value {
            Some(v) => self.set_from(Origin::Python(arg.into()), key, v),
            None => Ok(self),
        }
    }

    /// Set `key` when `value` is `Some` (as ppol itself does for the verb).
    pub fn set_opt<T: Serialize>(&mut self, key: &str, value: Option<T>) -> Result<&mut Self> {
        match value {
            Some(v) => self.set(key, v),
            None => Ok(self),
        }
    }

    /// Set `key` from a JSON value of Python's `overrides=` dict. `null` is rejected.
    /// A dict value sets each of its keys (`{"search": {"seed": 5}}` is `search.seed = 5`):
    /// it is merged into the section, never replacing the rest of it.
    pub fn set_json(&mut self, key: &str, value: &serde_json::Value) -> Result<&mut Self> {
        self.set_json_at(key, value, 0)
    }

    fn set_json_at(
        &mut self,
        key: &str,
        value: &serde_json::Value,
        depth: usize,
    ) -> Result<&mut Self> {
        let origin = Origin::Python(format!("overrides['{key}']"));
        if value.is_null() {
            return Err(Error::config(
                key,
                format!("None is not a configuration value (from {origin})"),
            ));
        }
        match value {
            serde_json::Value::Object(map) if !map.is_empty() => {
                if depth >= 16 {
                    return Err(Error::config(
                        key,
                        format!("nested more than 16 deep (from {origin})"),
                    ));
                }
                if map.keys().any(|k| k.is_empty() || k.contains('.')) {
                    // a map whose keys are names with dots (model prices: `gpt-3.5-turbo`) is
                    // one value: set as it is
                    return self.set_from(origin, key, value);
                }
                for (k, v) in map {
                    self.set_json_at(&format!("{key}.{k}"), v, depth + 1)?;
                }
                Ok(self)
            }
            _ => self.set_from(origin, key, value),
        }
    }

    /// Whether there is an override for `key`.
    pub fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _, _)| k == key)
    }

    /// The origin of the last override that sets `key` or a section holding it.
    fn origin_of(&self, key: &str) -> Option<&Origin> {
        self.0
            .iter()
            .rev()
            .find(|(k, _, _)| key == k || key.starts_with(&format!("{k}.")))
            .map(|(_, _, o)| o)
    }
}

/// The run configuration: the defaults of a quick run ([`RunConfig::quick`]) or `file`, with
/// `overrides` applied in order — merged as TOML values, read once and validated once. An
/// error names the key and where its value came from: the file and line (a syntax or type
/// error in the file is the file's own, with its line and column), the flag, or the Python
/// argument.
pub fn load_config(file: Option<&Path>, overrides: &Overrides) -> Result<RunConfig> {
    let (mut value, text) = match file {
        Some(p) => {
            let text = crate::io::read_to_string(p)?;
            // the file's own syntax and type errors, with their line and column
            let _: RunConfig = toml::from_str(&text).map_err(|e| Error::toml(p, &text, &e))?;
            let v: toml::Value = toml::from_str(&text).map_err(|e| Error::toml(p, &text, &e))?;
            (v, Some((p, text)))
        }
        None => (
            toml::Value::try_from(RunConfig::quick()).expect("the defaults serialise"),
            None,
        ),
    };
    let base = value.clone();
    for (key, v, origin) in &overrides.0 {
        set_dotted(&mut value, key, v.clone()).map_err(|e| with_origin(e, origin))?;
    }
    let origin_of = |key: &str| -> Origin {
        if let Some(o) = overrides.origin_of(key) {
            return o.clone();
        }
        match &text {
            Some((path, text)) => Origin::File {
                path: path.to_path_buf(),
                line: line_of(text, key),
            },
            None => Origin::Default,
        }
    };
    let cfg: RunConfig = value.try_into().map_err(|e: toml::de::Error| {
        // the file alone was read: the wrong value is an override's, the first one whose
        // value the configuration cannot take (applied in order, as above)
        let (key, origin) = culprit(base, overrides);
        Error::config(key, format!("{} (from {origin})", e.message()))
    })?;
    cfg.validate().map_err(|e| match e {
        Error::Config { key, message } => {
            let origin = origin_of(&key);
            Error::Config {
                message: format!("{message} (from {origin})"),
                key,
            }
        }
        other => other,
    })?;
    Ok(cfg)
}

/// The override that makes `base` (defaults or the file, which deserialise) fail to
/// deserialise: the overrides are applied one by one, in order, until one does. A failure that
/// only their combination causes names all of them.
fn culprit(mut base: toml::Value, overrides: &Overrides) -> (String, String) {
    for (key, v, origin) in &overrides.0 {
        if set_dotted(&mut base, key, v.clone()).is_err()
            || base.clone().try_into::<RunConfig>().is_err()
        {
            return (key.clone(), origin.to_string());
        }
    }
    let keys: Vec<&str> = overrides.0.iter().map(|(k, _, _)| k.as_str()).collect();
    let origins: Vec<String> = overrides.0.iter().map(|(_, _, o)| o.to_string()).collect();
    (keys.join(", "), origins.join(", "))
}

/// `e` with where its value came from.
fn with_origin(e: Error, origin: &Origin) -> Error {
    match e {
        Error::Config { key, message } => Error::Config {
            key,
            message: format!("{message} (from {origin})"),
        },
        other => other,
    }
}

/// The line of `key` (dotted: `search.iterations`, or a section `llm.default`) in TOML `text`.
fn line_of(text: &str, key: &str) -> Option<usize> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    let mut table = doc.get_ref();
    let parts: Vec<&str> = key.split('.').collect();
    let mut span = None;
    for (i, part) in parts.iter().enumerate() {
        let (k, v) = table.get_key_value(*part)?;
        span = Some(if i + 1 == parts.len() {
            k.span()
        } else {
            v.span()
        });
        match v.get_ref() {
            toml::de::DeValue::Table(t) => table = t,
            _ if i + 1 == parts.len() => {}
            _ => break,
        }
    }
    let start = span?.start.min(text.len());
    Some(text[..start].matches('\n').count() + 1)
}

fn set_dotted(root: &mut toml::Value, key: &str, value: toml::Value) -> Result<()> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(Error::config(key, "not a dotted configuration key"));
    }
    let mut cur = root;
    for part in &parts[..parts.len() - 1] {
        let table = cur
            .as_table_mut()
            .ok_or_else(|| Error::config(key, format!("'{part}' is not a section")))?;
        cur = table
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(Default::default()));
    }
    cur.as_table_mut()
        .ok_or_else(|| Error::config(key, "its parent is not a section"))?
        .insert(parts[parts.len() - 1].to_string(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue43_item9_a_dict_override_merges_into_its_section() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("run.toml");
        std::fs::write(&f, "[search]\nseed = 5\niterations = 9\n").unwrap();
        let mut o = Overrides::new();
        o.set_json("search", &serde_json::json!({"iterations": 3}))
            .unwrap();
        let cfg = load_config(Some(&f), &o).unwrap();
        assert_eq!((cfg.search.seed, cfg.search.iterations), (5, 3));
        // deeper, and a map of names with dots set as one value
        let mut o = Overrides::new();
        o.set_json(
            "llm",
            &serde_json::json!({"prices": {"gpt-3.5-turbo": {"prompt": 1.0, "completion": 2.0}}}),
        )
        .unwrap();
        let cfg = load_config(Some(&f), &o).unwrap();
        assert_eq!(cfg.search.seed, 5);
        assert_eq!(cfg.llm.unwrap().prices["gpt-3.5-turbo"].completion, 2.0);
        let e = Overrides::new()
            .set_json("search", &serde_json::json!({"seed": null}))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("search.seed") && e.contains("None"), "{e}");
    }

    #[test]
    fn errors_name_the_key_and_where_its_value_came_from() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("run.toml");
        std::fs::write(
            &f,
            "[run]\nname = \"x\"\n\n[search]\nseed = 3\niterations = 0\n",
        )
        .unwrap();
        let e = load_config(Some(&f), &Overrides::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("'search.iterations'"), "{e}");
        assert!(e.contains("run.toml, line 6"), "{e}");
        let mut o = Overrides::new();
        o.flag("--iterations", "search.iterations", Some(0))
            .unwrap();
        let e = load_config(None, &o).unwrap_err().to_string();
        assert!(
            e.contains("'search.iterations'") && e.contains("the flag --iterations"),
            "{e}"
        );
        let mut o = Overrides::new();
        o.set_json("search.iterations", &serde_json::json!(0))
            .unwrap();
        let e = load_config(Some(&f), &o).unwrap_err().to_string();
        assert!(e.contains("overrides['search.iterations']"), "{e}");
        // a wrong type from an override names it; from the file, its line and column
        let mut o = Overrides::new();
        o.python("seed=", "search.seed", Some("three")).unwrap();
        let e = load_config(None, &o).unwrap_err().to_string();
        assert!(e.contains("search.seed") && e.contains("seed="), "{e}");
        // among several overrides, only the one whose value does not deserialise is named
        let mut o = Overrides::new();
        o.flag("--out", "run.out", Some("r")).unwrap();
        o.flag("--world", "run.world", Some("bogus:x")).unwrap();
        o.flag("--iterations", "search.iterations", Some(2))
            .unwrap();
        let e = load_config(None, &o).unwrap_err().to_string();
        assert!(
            e.contains("'run.world'")
                && e.contains("unknown world")
                && e.contains("(from the flag --world)"),
            "{e}"
        );
        std::fs::write(&f, "[search]\nseed = \"three\"\n").unwrap();
        let e = load_config(Some(&f), &Overrides::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2"), "{e}");
        // a good value from a flag over the file's bad one is fine: validated once, merged
        std::fs::write(&f, "[search]\niterations = 0\n").unwrap();
        let mut o = Overrides::new();
        o.flag("--iterations", "search.iterations", Some(4))
            .unwrap();
        assert_eq!(load_config(Some(&f), &o).unwrap().search.iterations, 4);
    }

    #[test]
    fn lines_of_keys_and_sections() {
        let text = "# c\n[run]\nname = \"x\"\n[llm.default]\nmodel = \"m\"\n";
        assert_eq!(line_of(text, "run.name"), Some(3));
        assert_eq!(line_of(text, "llm.default.model"), Some(5));
        assert_eq!(line_of(text, "llm.default"), Some(4));
        assert_eq!(line_of(text, "search.seed"), None);
    }
}
