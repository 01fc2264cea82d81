//! What a user reads in `--help` (every verb and subverb, hidden ones included) and in
//! `ppol evolve --print-config` is written for users (issue #37): no Rust doc markup
//! (intra-doc links, `Self::`, paths), no internal names (the crate's types and constants) and
//! no reference to a file that is not in the repository.

use std::collections::BTreeSet;

use clap::CommandFactory;

use crate::util::{root, run_ppol};

/// Every command path: `[]` (ppol itself), `["evolve"]`, `["traces", "stats"]`, ...
fn command_paths() -> Vec<Vec<String>> {
    fn walk(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<Vec<String>>) {
        out.push(path.clone());
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            let mut p = path.clone();
            p.push(sub.get_name().to_string());
            walk(sub, p, out);
        }
    }
    let mut out = Vec::new();
    walk(&ppol::front::cli::Cli::command(), Vec::new(), &mut out);
    out
}

/// The names a reader must not meet: the crate's types with two or more capitals
/// (`RunConfig`, `MutationSection`; one-capital names are English words) and its constants
/// (`MUTATION_MAX_TOKENS`).
fn internal_names() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut stack = vec![root().join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines() {
                let t = line.trim_start().trim_start_matches("pub(crate) ");
                let t = t
                    .trim_start_matches("pub(super) ")
                    .trim_start_matches("pub ");
                for kw in ["struct ", "enum ", "trait ", "type ", "const ", "static "] {
                    let Some(rest) = t.strip_prefix(kw) else {
                        continue;
                    };
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    let capitals = name.chars().filter(char::is_ascii_uppercase).count();
                    let lower = name.chars().any(|c| c.is_lowercase());
                    let constant = name.contains('_') && !lower;
                    let camel = !name.contains('_') && lower && capitals >= 2;
                    if constant || camel {
                        names.insert(name);
                    }
                }
            }
        }
    }
    names
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// What is wrong with a text a user reads (empty: nothing).
fn problems(text: &str, names: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for markup in [
        "[`",
        "`]",
        "](",
        "Self::",
        "crate::",
        "super::",
        "ppol-spec",
        "§",
    ] {
        if text.contains(markup) {
            out.push(format!("doc markup or an outside reference: {markup:?}"));
        }
    }
    // a Rust path (`a::b`), not a URL's `://`
    for (i, _) in text.match_indices("::") {
        let before = text[..i].chars().next_back();
        let after = text[i + 2..].chars().next();
        if before.is_some_and(is_word_char) && after.is_some_and(is_word_char) {
            let start = text[..i]
                .rfind(|c: char| !is_word_char(c))
                .map_or(0, |s| s + 1);
            out.push(format!(
                "a Rust path: {:?}",
                &text[start..(i + 20).min(text.len())]
            ));
        }
    }
    // clap's value placeholders (`--max-turns <MAX_TURNS>`) are named after the flag
    let words: String = text
        .split('<')
        .enumerate()
        .map(|(i, part)| match part.split_once('>') {
            Some((inside, rest)) if i > 0 && !inside.contains(char::is_whitespace) => rest,
            _ => part,
        })
        .collect::<Vec<_>>()
        .join(" ");
    for word in words.split(|c: char| !is_word_char(c)) {
        if names.contains(word) {
            out.push(format!("an internal name: {word}"));
        }
    }
    // every file of the repository a text names exists
    for token in text.split(|c: char| c.is_whitespace() || "()`'\",;[]".contains(c)) {
        let token = token.trim_end_matches(['.', ':']);
        let top = token.split('/').next().unwrap_or("");
        if token.contains('/')
            && [
                "src",
                "seeds",
                "fitness",
                "generators",
                "python",
                "tests",
                ".ci",
            ]
            .contains(&top)
            && !root().join(token).exists()
        {
            out.push(format!("a file that is not in the repository: {token}"));
        }
    }
    out
}

#[test]
fn every_help_and_the_printed_configuration_are_plain_text_for_users() {
    let names = internal_names();
    assert!(
        names.contains("RunConfig") && names.contains("MUTATION_MAX_TOKENS"),
        "the name list is read from src/"
    );
    let mut texts: Vec<(String, String)> = Vec::new();
    let paths = command_paths();
    assert!(paths.len() > 20, "{paths:?}");
    for path in &paths {
        for flag in ["--help", "-h"] {
            let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
            args.push(flag);
            let (code, out, err) = run_ppol(&args);
            assert_eq!(code, 0, "ppol {}: {err}", args.join(" "));
            texts.push((format!("ppol {}", args.join(" ")), out));
        }
    }
    for extra in [
        &[][..],
        &["--llm", "openai:small@http://127.0.0.1:9/v1"][..],
    ] {
        let mut args = vec!["evolve", "--print-config"];
        args.extend_from_slice(extra);
        let (code, out, err) = run_ppol(&args);
        assert_eq!(code, 0, "{err}");
        texts.push((format!("ppol {}", args.join(" ")), out));
    }
    let mut failures = BTreeSet::new();
    for (what, text) in &texts {
        for p in problems(text, &names) {
            failures.insert(format!("{what}: {p}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{}",
        failures.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// The checker catches each kind of slip it is there for.
#[test]
fn the_help_text_checker_catches_each_kind_of_slip() {
    let names: BTreeSet<String> = ["RunConfig".to_string(), "MUTATION_MAX_TOKENS".into()].into();
    for (bad, kind) in [
        ("One [`Persona`] per line.", "doc markup"),
        ("see MutationSection::completion_cap", "a Rust path"),
        ("the RunConfig defaults", "an internal name"),
        ("else MUTATION_MAX_TOKENS", "an internal name"),
        ("as ppol-spec §10 item 7 says", "outside reference"),
        ("see src/no/such/file.rs", "not in the repository"),
    ] {
        let found = problems(bad, &names);
        assert!(found.iter().any(|p| p.contains(kind)), "{bad}: {found:?}");
    }
    for good in [
        "in [0, 1]; in (0, 1]",
        "see seeds/README.md and http://127.0.0.1:8000/v1",
        "a Persona record",
    ] {
        assert!(
            problems(good, &names).is_empty(),
            "{good}: {:?}",
            problems(good, &names)
        );
    }
}
