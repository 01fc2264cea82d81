//! A default exists once. Each verb's defaults live in its request struct
//! (`ppol::front::ops::EpisodesRequest`, `GenerateRequest`, `AuditRequest`, ...) or in the
//! settings section of the stage that owns them (`[episodes]`, `[fitness]`, ...); the command
//! line (clap, read by introspection: `ppol::front::cli::defaults`) must say the same. The
//! Python side — the binding's signatures, its stubs and the package's wrappers against the
//! CLI — is checked by introspection in `python/tests/test_defaults.py`, and
//! `python/tests/test_resolve.py` resolves the same requests through both front ends.

use std::collections::BTreeMap;

use clap::CommandFactory;
use ppol::fitness::audit::{AuditOptions, JudgeOptions};
use ppol::fitness::discriminator::ForestParams;
use ppol::fitness::settings::FitnessSection;
use ppol::front::cli::Cli;
use ppol::front::ops::{AuditRequest, EpisodesRequest, GenerateRequest};
use ppol::simulate::settings::EpisodesSection;

/// A subcommand's flags: long name in snake case → default (None: the flag has none), in a
/// common notation (`True`/`False`, numbers by value, strings without quotes).
type Params = BTreeMap<String, Option<String>>;

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

/// The CLI's flags and defaults (`ppol::front::cli::defaults`: clap's own), by subcommand
/// path, defaults in the common notation.
fn all_cli() -> BTreeMap<String, Params> {
    ppol::front::cli::defaults()
        .into_iter()
        .map(|(verb, flags)| {
            let flags = flags
                .into_iter()
                .map(|(k, v)| (k, v.map(|v| norm(&v))))
                .collect();
            (verb, flags)
        })
        .collect()
}

#[test]
fn the_verbs_defaults_are_their_request_structs() {
    let cli = all_cli();
    let some = |v: &str| Some(v.to_string());
    let e = &cli["episodes"];
    for (key, value) in [
        ("tasks", EpisodesRequest::TASKS.to_string()),
        ("trials", EpisodesRequest::TRIALS.to_string()),
        ("seed", EpisodesRequest::SEED.to_string()),
        ("concurrency", EpisodesRequest::CONCURRENCY.to_string()),
    ] {
        assert_eq!(e[key], some(&value), "ppol episodes --{key}");
    }
    assert_eq!(e["llm"], some(EpisodesRequest::LLM));
    let g = &cli["generate"];
    assert_eq!(g["seed"], some(&GenerateRequest::SEED.to_string()));
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
fn help_default_reads_the_default_a_help_text_names() {
    assert_eq!(
        help_default("Number of trees (default 200)."),
        Some("200".into())
    );
    assert_eq!(
        help_default("rounds (default: the configuration's episodes.max_tool_rounds, 12)."),
        Some("12".into())
    );
}
