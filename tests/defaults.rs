//! A default exists once. Each verb's defaults live in its request struct
//! (`ppol::front::ops::EpisodesRequest`, `GenerateRequest`, `DiscriminatorRequest`) or in the
//! settings section of the stage that owns them (`[episodes]`, `[fitness]`, ...); the command
//! line (clap), the Python binding (`#[pyo3(signature = ...)]` in `src/front/python/mod.rs`),
//! its stubs (`python/ppol_rs/_core.pyi`) and the package's wrappers
//! (`python/ppol_rs/__init__.py`) must agree with them. The Python files are read as text, so
//! this needs no Python. A unit at the end feeds the comparison fabricated mismatches to show
//! it catches each kind.

use std::collections::BTreeMap;

use clap::CommandFactory;
use ppol::fitness::audit::{AuditOptions, JudgeOptions};
use ppol::fitness::discriminator::ForestParams;
use ppol::fitness::settings::FitnessSection;
use ppol::front::cli::Cli;
use ppol::front::ops::{AuditRequest, EpisodesRequest, GenerateRequest};
use ppol::simulate::settings::EpisodesSection;

/// Parameters of one function: name → default (None: required), in a common notation
/// (`None`, `True`/`False`, numbers and strings as written, strings without quotes).
type Params = BTreeMap<String, Option<String>>;

/// (CLI subcommand path, Python function in `_core` / `__init__`) pairs of the same verb.
const VERBS: [(&str, &str); 10] = [
    ("episodes", "episodes"),
    ("generate", "generate"),
    ("evolve", "evolve"),
    ("resume", "resume"),
    ("eval", "evaluate"),
    ("discriminator train", "train"),
    ("score", "score"),
    ("export sft", "export_sft"),
    ("study make", "study_make"),
    ("audit", "audit"),
];

/// Python parameters whose `None` stands for "the configuration's, else the CLI's default":
/// `llm=None` takes the `[llm]` of `config=`, as `--llm offline` (the CLI's default) does.
const NONE_MEANS_CONFIG: [&str; 1] = ["llm"];

fn src(path: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Split `text` at top-level commas (outside brackets and quotes).
fn split_top(text: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut quote) = (Vec::new(), String::new(), 0i32, None);
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')' | ']' | '}') => depth -= 1,
            (None, ',') if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// A default in the common notation (`True`/`False`, numbers by value, strings unquoted).
fn norm(value: &str) -> String {
    let v = value.trim();
    match v {
        "true" | "True" => "True".into(),
        "false" | "False" => "False".into(),
        // numbers by value (the CLI prints 0 where Python writes 0.0)
        _ if v.starts_with(|c: char| c.is_ascii_digit() || c == '-')
            && v.parse::<f64>().is_ok() =>
        {
            v.parse::<f64>().unwrap_or_default().to_string()
        }
        _ => v.trim_matches('"').trim_matches('\'').to_string(),
    }
}

/// The text between the parenthesis at `open` and its match.
fn parenthesised(text: &str, open: usize) -> &str {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &text[open + 1..open + i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced parentheses after {}", &text[open..]);
}

/// `name=default` items of a pyo3 signature or `name: type = default` items of a Python
/// `def` (`self`, `*`, `*args`, `**kwargs` skipped).
fn params_of(list: &str) -> Params {
    let mut out = Params::new();
    for item in split_top(list) {
        if item == "*" || item == "/" || item.starts_with('*') || item == "self" {
            continue;
        }
        let (head, default) = match split_default(&item) {
            Some((h, d)) => (h, Some(norm(d))),
            None => (item.as_str(), None),
        };
        let name = head.split(':').next().unwrap_or("").trim().to_string();
        out.insert(name, default);
    }
    out
}

/// `head = default` at the top level of one parameter (not inside a type's brackets).
fn split_default(item: &str) -> Option<(&str, &str)> {
    let mut depth = 0;
    for (i, c) in item.char_indices() {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth -= 1,
            '=' if depth == 0 => return Some((&item[..i], &item[i + 1..])),
            _ => {}
        }
    }
    None
}

/// Every `#[pyo3(signature = (...))]` of the binding, by the name of the `fn` it sits on.
fn pyo3_signatures(rust: &str) -> BTreeMap<String, Params> {
    let mut out = BTreeMap::new();
    let marker = "#[pyo3(signature = ";
    let mut at = 0;
    while let Some(i) = rust[at..].find(marker) {
        let open = at + i + marker.len();
        let list = parenthesised(rust, open);
        let after = &rust[open + list.len()..];
        let f = after.find("fn ").expect("a signature sits on a fn");
        let name: String = after[f + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        out.insert(name, params_of(list));
        at = open + list.len();
    }
    out
}

/// Every `def NAME(...)` of a Python file (stubs or package), by name; a later definition of
/// the same name replaces an earlier one only if the earlier was private-looking.
fn python_defs(py: &str) -> BTreeMap<String, Params> {
    let mut out = BTreeMap::new();
    let mut at = 0;
    while let Some(i) = py[at..].find("def ") {
        let start = at + i + 4;
        let name: String = py[start..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let open = start + name.len();
        if py[open..].starts_with('(') {
            let list = parenthesised(py, open);
            out.entry(name).or_insert_with(|| params_of(list));
            at = open + list.len();
        } else {
            at = open;
        }
    }
    out
}

/// The CLI's arguments of a subcommand path (`"export sft"`): long name in snake case →
/// default (None when it has none).
fn cli_args(path: &str) -> Params {
    let mut cmd = Cli::command();
    cmd.build();
    let mut cur = &cmd;
    for part in path.split(' ') {
        cur = cur
            .find_subcommand(part)
            .unwrap_or_else(|| panic!("no subcommand {path}"));
    }
    let mut out = Params::new();
    for a in cur.get_arguments() {
        let Some(long) = a.get_long() else { continue };
        let default = a
            .get_default_values()
            .first()
            .map(|v| norm(&v.to_string_lossy()));
        out.insert(long.replace('-', "_"), default);
    }
    out
}

/// Where the CLI, the binding, the stubs and the package disagree (empty: they agree).
/// `cli` holds each verb's CLI arguments, `rust`/`pyi`/`init` the three Python texts.
fn disagreements(cli: &BTreeMap<&str, Params>, rust: &str, pyi: &str, init: &str) -> Vec<String> {
    let mut out = Vec::new();
    let core = pyo3_signatures(rust);
    let stubs = python_defs(pyi);
    let package = python_defs(init);
    // the binding and its stubs: the same parameters with the same defaults
    for (name, params) in &core {
        match stubs.get(name) {
            None => out.push(format!("_core.{name}: no stub in _core.pyi")),
            Some(stub) if stub != params => out.push(format!(
                "_core.{name}: the binding says {params:?}, _core.pyi says {stub:?}"
            )),
            Some(_) => {}
        }
        // the package's wrapper of the same name: every parameter both have, the same default
        if let Some(wrapper) = package.get(name) {
            for (p, d) in params {
                if let Some(w) = wrapper.get(p) {
                    if w != d {
                        out.push(format!(
                            "{name}({p}): the binding's default is {d:?}, __init__.py's {w:?}"
                        ));
                    }
                }
            }
        }
    }
    // the CLI and the binding: a parameter both have takes the same default; a CLI flag
    // without one is None in Python (the value then comes from the configuration)
    for (verb, py_name) in VERBS {
        let Some(args) = cli.get(verb) else { continue };
        let Some(params) = core.get(py_name) else {
            continue;
        };
        for (p, py_default) in params {
            let Some(cli_default) = args.get(p) else {
                continue;
            };
            if py_default.is_none() {
                continue; // required in Python: nothing to default
            }
            let expected = match cli_default {
                _ if NONE_MEANS_CONFIG.contains(&p.as_str()) => Some("None".to_string()),
                Some(d) => Some(d.clone()),
                None if py_default.as_deref() == Some("False") => Some("False".to_string()),
                None => Some("None".to_string()),
            };
            if *py_default != expected {
                out.push(format!(
                    "{verb} --{p}: the CLI's default is {cli_default:?}, Python's {py_default:?}"
                ));
            }
        }
    }
    out
}

fn all_cli() -> BTreeMap<&'static str, Params> {
    VERBS.iter().map(|(v, _)| (*v, cli_args(v))).collect()
}

#[test]
fn the_cli_the_binding_the_stubs_and_the_package_agree_on_every_default() {
    let found = disagreements(
        &all_cli(),
        &src("src/front/python/mod.rs"),
        &src("python/ppol_rs/_core.pyi"),
        &src("python/ppol_rs/__init__.py"),
    );
    assert!(found.is_empty(), "defaults disagree:\n{}", found.join("\n"));
}

#[test]
fn the_verbs_defaults_are_their_request_structs() {
    let cli = all_cli();
    let py = pyo3_signatures(&src("src/front/python/mod.rs"));
    let some = |v: &str| Some(v.to_string());
    let e = &cli["episodes"];
    let p = &py["episodes"];
    for (key, value) in [
        ("tasks", EpisodesRequest::TASKS.to_string()),
        ("trials", EpisodesRequest::TRIALS.to_string()),
        ("seed", EpisodesRequest::SEED.to_string()),
        ("concurrency", EpisodesRequest::CONCURRENCY.to_string()),
    ] {
        assert_eq!(e[key], some(&value), "ppol episodes --{key}");
        assert_eq!(p[key], some(&value), "ppol_rs.episodes({key}=)");
    }
    assert_eq!(e["llm"], some(EpisodesRequest::LLM));
    let g = &cli["generate"];
    assert_eq!(g["seed"], some(&GenerateRequest::SEED.to_string()));
    assert_eq!(
        py["generate"]["seed"],
        some(&GenerateRequest::SEED.to_string())
    );
    assert_eq!(g["llm"], some(GenerateRequest::LLM));
    // settings a flag leaves to the configuration have no default of their own
    for key in ["max_turns", "max_tool_rounds", "config"] {
        assert_eq!(e[key], None, "ppol episodes --{key}");
    }
    for (key, value) in [
        ("folds", AuditOptions::FOLDS.to_string()),
        ("bootstrap", AuditOptions::BOOTSTRAP.to_string()),
        ("seed", AuditOptions::SEED.to_string()),
        ("judge_pairs", JudgeOptions::PAIRS.to_string()),
    ] {
        assert_eq!(cli["audit"][key], some(&value), "ppol audit --{key}");
        assert_eq!(py["audit"][key], some(&value), "ppol_rs.audit({key}=)");
    }
    assert_eq!(cli["audit"]["llm"], some(AuditRequest::LLM));
    assert_eq!(
        FitnessSection::default().judge_pairs,
        JudgeOptions::PAIRS,
        "[fitness] judge_pairs"
    );
    assert_eq!(
        FitnessSection::default().audit_bootstrap,
        AuditOptions::BOOTSTRAP,
        "[fitness] audit_bootstrap"
    );
    for key in ["trees", "max_depth", "max_features", "seed", "folds"] {
        assert_eq!(cli["discriminator train"][key], None, "--{key}");
        assert_eq!(
            py["train"][key],
            some("None"),
            "Discriminator.train({key}=)"
        );
    }
}

/// The number (or word) a help text names as its default: `(default 200)`,
/// `(default: the configuration's episodes.max_tool_rounds, 12)`.
fn help_default(help: &str) -> Option<String> {
    let at = help.rfind("(default")?;
    let inner = &help[at + 1..];
    let inner = &inner[..inner.find(')')?];
    let word = inner.rsplit([' ', ',', ':']).next()?.trim();
    (!word.is_empty()).then(|| word.to_string())
}

#[test]
fn defaults_named_in_help_texts_are_the_settings() {
    let forest = ForestParams::default();
    let fitness = FitnessSection::default();
    let episodes = EpisodesSection::default();
    let expected: [(&str, &str, String); 7] = [
        ("discriminator train", "trees", forest.n_trees.to_string()),
        (
            "discriminator train",
            "max_depth",
            forest.max_depth.unwrap_or(0).to_string(),
        ),
        (
            "discriminator train",
            "max_features",
            forest.max_features.to_string(),
        ),
        ("discriminator train", "seed", forest.seed.to_string()),
        ("discriminator train", "folds", fitness.folds.to_string()),
        ("episodes", "max_turns", episodes.val_max_turns.to_string()),
        (
            "episodes",
            "max_tool_rounds",
            episodes.max_tool_rounds.to_string(),
        ),
    ];
    let mut cmd = Cli::command();
    cmd.build();
    for (verb, arg, value) in expected {
        let mut cur = &cmd;
        for part in verb.split(' ') {
            cur = cur.find_subcommand(part).unwrap();
        }
        let a = cur
            .get_arguments()
            .find(|a| a.get_id() == arg)
            .unwrap_or_else(|| panic!("{verb}: no --{arg}"));
        let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
        assert_eq!(
            help_default(&help),
            Some(value.clone()),
            "{verb} --{arg}: the help text says {help:?}, the default is {value}"
        );
    }
}

#[test]
fn the_comparison_catches_each_kind_of_disagreement() {
    let rust = r#"
        #[pyfunction]
        #[pyo3(signature = (domain=None, tasks="all", trials=1, llm=None, concurrency=256))]
        fn episodes<'py>(py: Python<'py>) {}
    "#;
    let pyi = "def episodes(\n    domain: Optional[str] = None,\n    tasks: str = \"all\",\n    trials: int = 1,\n    llm: Optional[str] = None,\n    concurrency: int = 256,\n) -> Dict[str, Any]: ...\n";
    let init = "def episodes(domain: Optional[str] = None, *, tasks: str = \"all\", trials: int = 1, llm: Optional[str] = None, concurrency: int = 256) -> Any:\n    return _core.episodes()\n";
    let cli = |concurrency: &str, llm: &str| {
        BTreeMap::from([(
            "episodes",
            Params::from([
                ("domain".into(), None),
                ("tasks".into(), Some("all".into())),
                ("trials".into(), Some("1".into())),
                ("llm".into(), Some(llm.into())),
                ("concurrency".into(), Some(concurrency.into())),
            ]),
        )])
    };
    assert_eq!(
        disagreements(&cli("256", "offline"), rust, pyi, init),
        Vec::<String>::new()
    );
    // the CLI against the binding
    let d = disagreements(&cli("255", "offline"), rust, pyi, init);
    assert!(
        d.len() == 1 && d[0].contains("episodes --concurrency"),
        "{d:?}"
    );
    // the stubs against the binding
    let d = disagreements(
        &cli("256", "offline"),
        rust,
        &pyi.replace("int = 256", "int = 128"),
        init,
    );
    assert!(d.len() == 1 && d[0].contains("_core.pyi"), "{d:?}");
    // a stub missing
    let d = disagreements(&cli("256", "offline"), rust, "", init);
    assert!(d.len() == 1 && d[0].contains("no stub"), "{d:?}");
    // the package's wrapper against the binding
    let d = disagreements(
        &cli("256", "offline"),
        rust,
        pyi,
        &init.replace("trials: int = 1", "trials: int = 3"),
    );
    assert!(d.len() == 1 && d[0].contains("__init__.py"), "{d:?}");
    // a Python default where the CLI leaves the value to the configuration
    let d = disagreements(
        &cli("256", "offline"),
        &rust.replace("domain=None", "domain=\"demo\""),
        &pyi.replace("str] = None,\n    tasks", "str] = \"demo\",\n    tasks"),
        init,
    );
    assert!(d.iter().any(|x| x.contains("episodes --domain")), "{d:?}");
    assert_eq!(
        help_default("Number of trees (default 200)."),
        Some("200".into())
    );
    assert_eq!(
        help_default("rounds (default: the configuration's episodes.max_tool_rounds, 12)."),
        Some("12".into())
    );
}
