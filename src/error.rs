//! The crate's one error type. Every variant names the input it is about (file, line, key,
//! program, endpoint), so a message can be acted on without a debugger.

use std::path::PathBuf;

/// Result alias used across the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in ppol. Failures of *candidates* (a generator that crashes,
/// an episode that breaks) are data, not errors: see `sandbox::Failure` and
/// `episode::Outcome`. Errors are for bad input and broken infrastructure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read or written.
    #[error("{action} '{}': {error}", path.display())]
    Io {
        /// What we were doing ("reading", "writing", "creating directory").
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying I/O error (in the message, not a separate `source()`, so that a
        /// printed error chain says it once).
        error: std::io::Error,
    },
    /// Input data does not have the expected shape. `location` is "line 3", `$[2].conversation[0].content`, ...
    #[error("{}: {location}: {message}", path.display())]
    Parse {
        /// The file (or a pseudo-path such as `<stdin>` / `<python>`).
        path: PathBuf,
        /// Line number or JSON path inside the file.
        location: String,
        /// What was expected and what was found.
        message: String,
    },
    /// A configuration key or CLI argument is invalid.
    #[error("invalid configuration '{key}': {message}")]
    Config {
        /// Config key or flag name.
        key: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// A saved artefact (reference, discriminator, checkpoint) was made with another feature set.
    #[error("feature-set mismatch: {what} was built with '{found}', but '{expected}' is in use")]
    FeatureSetMismatch {
        /// Which artefact.
        what: String,
        /// Feature set in the artefact.
        found: String,
        /// Feature set in use.
        expected: String,
    },
    /// Not enough data to do what was asked (e.g. a discriminator with one class).
    #[error("insufficient data: {0}")]
    Insufficient(String),
    /// An LLM endpoint failed after all retries, or answered with something unusable.
    #[error("LLM endpoint '{endpoint}' ({role}): {message}")]
    Llm {
        /// Base URL or provider name.
        endpoint: String,
        /// The role that made the call (user-sim, agent, ...).
        role: String,
        /// What happened.
        message: String,
    },
    /// The run's token or cost budget is spent; no new LLM calls are made.
    #[error("budget exhausted: {0}")]
    BudgetExhausted(String),
    /// A τ² environment problem (unknown domain, missing data, unknown task id).
    #[error("environment '{domain}': {message}")]
    Environment {
        /// Domain name.
        domain: String,
        /// What is wrong.
        message: String,
    },
    /// The sandbox itself (not the program inside it) could not run.
    #[error("sandbox: {0}")]
    Sandbox(String),
    /// A run directory is unusable for the requested operation.
    #[error("run directory '{}': {message}", path.display())]
    Run {
        /// The run directory.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The operation was cancelled (stop handle, Ctrl-C).
    #[error("cancelled: {0}")]
    Cancelled(String),
}

impl Error {
    /// Shorthand for [`Error::Io`].
    pub fn io(action: &'static str, path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.into(),
            error,
        }
    }

    /// A copy of this error (`std::io::Error` is not `Clone`: the copy keeps its kind and
    /// message).
    pub fn duplicate(&self) -> Self {
        match self {
            Error::Io {
                action,
                path,
                error,
            } => Error::Io {
                action,
                path: path.clone(),
                error: std::io::Error::new(error.kind(), error.to_string()),
            },
            Error::Parse {
                path,
                location,
                message,
            } => Error::parse(path.clone(), location.clone(), message.clone()),
            Error::Config { key, message } => Error::config(key.clone(), message.clone()),
            Error::FeatureSetMismatch {
                what,
                found,
                expected,
            } => Error::FeatureSetMismatch {
                what: what.clone(),
                found: found.clone(),
                expected: expected.clone(),
            },
            Error::Insufficient(m) => Error::Insufficient(m.clone()),
            Error::Llm {
                endpoint,
                role,
                message,
            } => Error::Llm {
                endpoint: endpoint.clone(),
                role: role.clone(),
                message: message.clone(),
            },
            Error::BudgetExhausted(m) => Error::BudgetExhausted(m.clone()),
            Error::Environment { domain, message } => Error::Environment {
                domain: domain.clone(),
                message: message.clone(),
            },
            Error::Sandbox(m) => Error::Sandbox(m.clone()),
            Error::Run { path, message } => Error::Run {
                path: path.clone(),
                message: message.clone(),
            },
            Error::Cancelled(m) => Error::Cancelled(m.clone()),
        }
    }

    /// Shorthand for [`Error::Parse`].
    pub fn parse(
        path: impl Into<PathBuf>,
        location: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Error::Parse {
            path: path.into(),
            location: location.into(),
            message: message.into(),
        }
    }

    /// A TOML syntax or schema error in `text` (the contents of `path`), located by line and
    /// column.
    pub fn toml(path: &std::path::Path, text: &str, e: &toml::de::Error) -> Self {
        let location = match e.span() {
            Some(span) => {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!("line {line}, column {column}")
            }
            // an error of the whole document (a recursion limit): the line of its most deeply
            // dotted key, where that is what nests
            None => match deepest_key_line(text) {
                Some((line, depth)) if depth >= 64 => {
                    format!("line {line} (a key {depth} levels deep)")
                }
                _ => "document".to_string(),
            },
        };
        Error::parse(path, location, e.message())
    }

    /// Shorthand for [`Error::Config`].
    pub fn config(key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config {
            key: key.into(),
            message: message.into(),
        }
    }

    /// [`Error::Run`] for a path that is not a run directory at all (missing, or not a
    /// directory): one message for every verb that takes a run directory.
    pub fn no_run_dir(path: &std::path::Path) -> Self {
        let what = if path.exists() {
            "not a directory"
        } else {
            "no such run directory"
        };
        Error::Run {
            path: path.to_path_buf(),
            message: format!("{what} (expected a run directory made by `ppol evolve --out DIR`)"),
        }
    }

    /// A stable short name of the variant, used for the Python exception class and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Io { .. } => "IoError",
            Error::Parse { .. } => "ParseError",
            Error::Config { .. } => "ConfigError",
            Error::FeatureSetMismatch { .. } => "FeatureSetMismatch",
            Error::Insufficient(_) => "InsufficientData",
            Error::Llm { .. } => "LlmError",
            Error::BudgetExhausted(_) => "BudgetExhausted",
            Error::Environment { .. } => "DomainError",
            Error::Sandbox(_) => "SandboxError",
            Error::Run { .. } => "RunError",
            Error::Cancelled(_) => "Cancelled",
        }
    }
}

/// The line (1-based) of the key or table header with the most dots in `text`, and its depth
/// (dots + 1). Dots inside quotes count too: a rough measure, only to point at a line.
fn deepest_key_line(text: &str) -> Option<(usize, usize)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            let key = l.split('=').next().unwrap_or("");
            (i + 1, key.matches('.').count() + 1)
        })
        .max_by_key(|&(line, depth)| (depth, std::cmp::Reverse(line)))
}

#[cfg(test)]
mod toml_error_tests {
    #[test]
    fn a_recursion_limit_names_the_line_of_the_deepest_key() {
        let text = format!("[run]\nname = \"x\"\nx{} = 1\n", ".x".repeat(3000));
        let e = toml::from_str::<toml::Table>(&text).unwrap_err();
        let shown = super::Error::toml(std::path::Path::new("deep.toml"), &text, &e).to_string();
        assert!(
            shown.contains("deep.toml") && shown.contains("line 3"),
            "{shown}"
        );
    }
}
