//! Mutation operators: diff protocol, syntax check, prompts, structural mutation and crossover.

use std::collections::BTreeSet;

use ppol::dialogue::Role;
use ppol::evolve::archive::{Inspiration, InspirationKind};
use ppol::evolve::mutation::prompt::{
    fill_template, DIFF_TEMPLATE, EDITS_TEMPLATE, PLACEHOLDERS, REWRITE_TEMPLATE, SYSTEM_TEMPLATE,
};
use ppol::evolve::mutation::{
    apply_diff, check_python_syntax, crossover, crossover_batch, extract_full_program, parse_diff,
    structural_mutate, structural_mutate_batch, structural_mutate_with, template_hashes, AxisVocab,
    ChildFailure, DiffError, FailureKind, MechanicPhrases, MutationContext, PromptBuilder,
    PromptConfig, StructuralOptions, MUTATION_ANGLES,
};
use ppol::evolve::program::{MutationInfo, MutationKind, Program};
use ppol::llm::CallRole;

use crate::util::root;

const CODE: &str = "import random\n\nAXES = [\"a\", \"b\"]\n\n\ndef f(x):\n    y = x + 1\n    return y\n\n\ndef g(x):\n    y = x + 1\n    return y * 2\n";

// ---------------------------------------------------------------- diff

#[test]
fn diff_applies_several_blocks_in_order() {
    let answer = concat!(
        "I will rename and then extend.\n",
        "<<<<<<< SEARCH\ndef f(x):\n    y = x + 1\n=======\ndef f(x):\n    y = x + 10\n>>>>>>> REPLACE\n",
        "and then\n",
        "<<<<<<< SEARCH\n    y = x + 10\n=======\n    y = x + 100\n>>>>>>> REPLACE\n",
    );
    let out = apply_diff(CODE, answer).unwrap();
    assert_eq!(out.blocks, 2);
    assert!(out.fuzzy_blocks.is_empty());
    assert!(out
        .code
        .contains("def f(x):\n    y = x + 100\n    return y\n"));
    assert!(out.code.contains("def g(x):\n    y = x + 1\n"));
}

#[test]
fn diff_reports_not_found_and_ambiguous() {
    let answer = "<<<<<<< SEARCH\nimport random\n=======\nimport random as r\n>>>>>>> REPLACE\n\
<<<<<<< SEARCH\ndef h(x):\n    pass\n=======\ndef h(x):\n    return 0\n>>>>>>> REPLACE\n";
    let e = apply_diff(CODE, answer).unwrap_err();
    assert_eq!(
        e,
        DiffError::SearchNotFound {
            block: 2,
            snippet: "def h(x):\n    pass".into()
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains("block 2") && msg.contains("exactly") && msg.contains("def h(x):"),
        "{msg}"
    );

    let answer = "<<<<<<< SEARCH\n    y = x + 1\n=======\n    y = x + 2\n>>>>>>> REPLACE\n";
    let e = apply_diff(CODE, answer).unwrap_err();
    assert_eq!(e, DiffError::Ambiguous { block: 1, count: 2 });
    assert!(e.to_string().contains("2 times"));
}

#[test]
fn diff_tolerates_fences_crlf_and_chatter() {
    let answer = "Here is my change:\r\n\r\n```diff\r\n<<<<<<< SEARCH\r\ndef g(x):\r\n    y = x + 1\r\n=======\r\ndef g(x):\r\n    y = x - 1\r\n>>>>>>> REPLACE\r\n```\r\nThis should help.";
    let out = apply_diff(CODE, answer).unwrap();
    assert!(out
        .code
        .contains("def g(x):\n    y = x - 1\n    return y * 2"));
    assert!(!out.code.contains('\r'));
    // A fence just inside the block sections, and longer markers.
    let answer = "<<<<<<<< SEARCH\n```python\nAXES = [\"a\", \"b\"]\n```\n========\n```python\nAXES = [\"a\", \"b\", \"c\"]\n```\n>>>>>>>> REPLACE";
    let out = apply_diff(CODE, answer).unwrap();
    assert!(out.code.contains("AXES = [\"a\", \"b\", \"c\"]\n"));
    // CRLF program text is normalised too.
    let crlf = CODE.replace('\n', "\r\n");
    let out = apply_diff(
        &crlf,
        "<<<<<<< SEARCH\nimport random\n=======\nimport random  # rng\n>>>>>>> REPLACE",
    )
    .unwrap();
    assert!(out.code.starts_with("import random  # rng\n\nAXES"));
}

#[test]
fn diff_whitespace_fallback_reindents_when_unique() {
    // Dedented SEARCH with trailing spaces; the replacement is re-indented like the program.
    let answer = "<<<<<<< SEARCH\ny = x + 1   \nreturn y * 2\n=======\ny = x + 1\nif y > 3:\n    y = 3\nreturn y * 2\n>>>>>>> REPLACE";
    let out = apply_diff(CODE, answer).unwrap();
    assert_eq!(out.fuzzy_blocks, vec![1]);
    assert!(
        out.code.ends_with(
            "def g(x):\n    y = x + 1\n    if y > 3:\n        y = 3\n    return y * 2\n"
        ),
        "{}",
        out.code
    );
    // Over-indented SEARCH that matches twice after normalisation is ambiguous, not guessed.
    let answer = "<<<<<<< SEARCH\n        y = x + 1\n=======\n        y = 0\n>>>>>>> REPLACE";
    assert_eq!(
        apply_diff(CODE, answer).unwrap_err(),
        DiffError::Ambiguous { block: 1, count: 2 }
    );
    // Whitespace inside a line is not normalised.
    let answer =
        "<<<<<<< SEARCH\n    y = x+1\n    return y\n=======\n    return x\n>>>>>>> REPLACE";
    assert!(matches!(
        apply_diff(CODE, answer),
        Err(DiffError::SearchNotFound { block: 1, .. })
    ));
}

#[test]
fn diff_protocol_errors() {
    assert_eq!(
        apply_diff(CODE, "I would rewrite everything."),
        Err(DiffError::NoBlocks)
    );
    assert_eq!(
        parse_diff("<<<<<<< SEARCH\nimport random\n=======\nimport os\n"),
        Err(DiffError::Unterminated { block: 1 })
    );
    assert_eq!(
        apply_diff(CODE, "<<<<<<< SEARCH\n\n=======\nx\n>>>>>>> REPLACE"),
        Err(DiffError::EmptySearch { block: 1 })
    );
    assert_eq!(
        apply_diff(
            CODE,
            "<<<<<<< SEARCH\nimport random\n=======\nimport random\n>>>>>>> REPLACE"
        ),
        Err(DiffError::NoChange)
    );
    assert_eq!(
        apply_diff("x = 1\n", "<<<<<<< SEARCH\nx = 1\n=======\n>>>>>>> REPLACE"),
        Err(DiffError::EmptyResult)
    );
    // A block may delete lines.
    let out = apply_diff(
        CODE,
        "<<<<<<< SEARCH\nimport random\n\n=======\n>>>>>>> REPLACE",
    )
    .unwrap();
    assert!(out.code.starts_with("AXES"));
    let f = ppol::evolve::mutation::failure_from_diff_error(&DiffError::NoBlocks);
    assert_eq!(f.kind, FailureKind::Unparsable);
    assert_eq!(
        ppol::evolve::mutation::failure_from_diff_error(&DiffError::NoProgram).kind,
        FailureKind::NoProgram
    );
}

#[test]
fn full_program_extraction() {
    let answer = "Plan: simplify.\n```python\nprint('helper')\n```\nThe program:\n```python\nDIVERSITY_AXES = []\n\ndef generate_personas_detailed(task_context, axes, n):\n    return []\n```\nDone.";
    let code = extract_full_program(answer).unwrap();
    assert!(code.starts_with("DIVERSITY_AXES = []"));
    assert!(code.ends_with("return []\n"));
    let bare = "DIVERSITY_AXES = []\ndef generate_personas_detailed(task_context, axes, n):\n    return []";
    assert!(extract_full_program(bare)
        .unwrap()
        .contains("def generate_personas_detailed"));
    assert_eq!(
        extract_full_program("No code today."),
        Err(DiffError::NoProgram)
    );
    assert_eq!(
        extract_full_program("```json\n{}\n```"),
        Err(DiffError::NoProgram)
    );
}

#[test]
fn syntax_check_reports_line() {
    assert_eq!(check_python_syntax(CODE).unwrap(), Ok(()));
    let e = check_python_syntax("x = 1\n\ndef f(:\n    pass\n")
        .unwrap()
        .unwrap_err();
    assert!(e.starts_with("line 3"), "{e}");
    let e = check_python_syntax("def f():\n    return 1\n  return 2\n")
        .unwrap()
        .unwrap_err();
    assert!(e.contains("line 3") && e.contains("indent"), "{e}");
    // compile() catches what ast.parse accepts, and nothing is executed.
    let e = check_python_syntax("return 5\n").unwrap().unwrap_err();
    assert!(
        e.contains("line 1") && e.contains("outside function"),
        "{e}"
    );
    assert_eq!(
        check_python_syntax("import os\nos._exit(9)\n").unwrap(),
        Ok(())
    );
}

// ---------------------------------------------------------------- prompts

fn parent() -> Program {
    let mut p = Program::seed("parent", "DIVERSITY_AXES = []\n\ndef generate_personas_detailed(task_context, axes, n):\n    return PARENT_MARKER\n")
        .with_metrics([("combined", 0.41), ("human_likeness", 0.3), ("coverage", 0.52), ("n_valid", 10.0)]);
    p.reflection = Some("REFLECTION_MARKER: personas are too polite.".into());
    p.descriptors = vec![0.3, 0.52];
    p
}

fn inspiration(id: &str, kind: InspirationKind, code: String) -> Inspiration {
    let mut p = Program::seed(id, code).with_metrics([
        ("combined", 0.5),
        ("human_likeness", 0.4),
        ("coverage", 0.6),
    ]);
    p.mutation = MutationInfo::new(MutationKind::Diff, format!("summary of {id}"));
    Inspiration { program: p, kind }
}

fn failures() -> Vec<ChildFailure> {
    vec![
        ppol::evolve::mutation::failure_from_diff_error(&DiffError::SearchNotFound {
            block: 1,
            snippet: "FAILED_SNIPPET".into(),
        }),
        ChildFailure {
            kind: FailureKind::Sandbox,
            stage: Some("generate".into()),
            message: "returned 7 personas, expected 10".into(),
            stderr_tail: Some("Traceback ...\nKeyError: 'STDERR_MARKER'".into()),
            angle: Some("new-approach".into()),
            summary: Some("over-generate".into()),
            operator: Some("diff".into()),
            raw_reply: None,
            prompt_fit: None,
        },
    ]
}

#[test]
fn diff_prompt_contains_everything() {
    let parent = parent();
    let ins = vec![
        inspiration("top1", InspirationKind::Top, "TOP_CODE = 1\n".into()),
        inspiration(
            "div1",
            InspirationKind::Diverse,
            "DIVERSE_CODE = 2\n".into(),
        ),
    ];
    let mut attempt = Program::child(
        &parent,
        "kid",
        "x",
        3,
        MutationInfo::new(MutationKind::Diff, "ATTEMPT_SUMMARY"),
    );
    attempt.metrics.insert("combined".into(), 0.45);
    let attempts = vec![attempt];
    let fails = failures();
    let ctx = MutationContext {
        parent: &parent,
        inspirations: &ins,
        previous_attempts: &attempts,
        failures: &fails,
        stagnation: 0,
    };
    let b = PromptBuilder::new(PromptConfig::default()).unwrap();
    let p = b.diff_request(&ctx, 17).unwrap();
    assert_eq!(p.request.role, CallRole::Mutator);
    assert_eq!(p.request.temperature, Some(1.0));
    assert_eq!(p.request.max_tokens, Some(8192));
    assert_eq!(p.request.messages.len(), 2);
    assert_eq!(p.request.messages[0].role, Role::System);
    assert!(p.request.messages[0].content.contains("DIVERSITY_AXES"));
    assert!(p.request.messages[0]
        .content
        .contains("generate_personas_detailed(task_context, axes, n)"));
    let user = &p.request.messages[1].content;
    for needle in [
        "PARENT_MARKER",
        "REFLECTION_MARKER",
        "FAILED_SNIPPET",
        "STDERR_MARKER",
        "returned 7 personas",
        "stage `generate`",
        "TOP_CODE = 1",
        "DIVERSE_CODE = 2",
        "summary of top1",
        "ATTEMPT_SUMMARY",
        "+0.0400 vs the current program",
        "0.4100",
        "human_likeness = 0.3000, coverage = 0.5200",
        "n_valid: 10.0000",
        "<<<<<<< SEARCH",
        ">>>>>>> REPLACE",
        "FITNESS SCORE",
        "Do not rewrite the whole program",
        p.angle.text,
    ] {
        assert!(user.contains(needle), "missing {needle:?} in:\n{user}");
    }
    assert!(p.reductions.is_empty());
    assert_eq!(p.prompt_chars, user.chars().count());
    // Same seed, same angle; the angle is one of the five.
    assert_eq!(b.diff_request(&ctx, 17).unwrap().request, p.request);
    assert!(MUTATION_ANGLES.iter().any(|a| a.id == p.angle.id));
}

#[test]
fn rewrite_prompt_asks_for_whole_program() {
    let parent = parent();
    let fails = failures();
    let ctx = MutationContext {
        parent: &parent,
        inspirations: &[],
        previous_attempts: &[],
        failures: &fails,
        stagnation: 7,
    };
    let b = PromptBuilder::new(PromptConfig::default()).unwrap();
    let p = b.rewrite_request(&ctx, 1).unwrap();
    let user = &p.request.messages[1].content;
    assert!(user.contains("complete program") && user.contains("```python"));
    assert!(user.contains("PARENT_MARKER") && user.contains("STDERR_MARKER"));
    assert!(!user.contains("<<<<<<< SEARCH"));
    assert!(user.contains("None yet."));
    assert!(user.contains("has not improved for 7 iterations"));
}

#[test]
fn templates_fill_every_placeholder() {
    let values = PLACEHOLDERS
        .iter()
        .map(|k| (*k, format!("<{k}>")))
        .collect();
    // what a template does not show: the code-level templates have no target list; the
    // structured-edit template shows the targets instead of the program and its history
    let code_level: &[&str] = &["targets"];
    let edits: &[&str] = &["program", "history", "inspirations", "feature_names"];
    for (name, t, unused) in [
        ("diff_user.md", DIFF_TEMPLATE, code_level),
        ("rewrite_user.md", REWRITE_TEMPLATE, code_level),
        ("edits_user.md", EDITS_TEMPLATE, edits),
        ("system.md", SYSTEM_TEMPLATE, code_level),
    ] {
        let out = fill_template(name, t, &values).unwrap();
        if name == "edits_user.md" {
            // its only braces are the answer's example, which is JSON
            let example = out.lines().find(|l| l.starts_with('{')).unwrap();
            let v: serde_json::Value = serde_json::from_str(example).unwrap();
            assert_eq!(v["edits"].as_array().unwrap().len(), 3);
            assert_eq!(
                out.matches(['{', '}']).count(),
                example.matches(['{', '}']).count()
            );
        } else {
            assert!(
                !out.contains('{') && !out.contains('}'),
                "{name} has brace leftovers"
            );
        }
        if name != "system.md" {
            for k in PLACEHOLDERS.iter().filter(|k| !unused.contains(k)) {
                assert!(
                    out.contains(&format!("<{k}>")),
                    "{name} does not use {{{k}}}"
                );
            }
        }
    }
    // A built prompt whose inputs carry no braces has none either.
    let mut p = parent();
    p.code = "DIVERSITY_AXES = []\n".into();
    let ins = vec![inspiration("t", InspirationKind::Top, "X = 1\n".into())];
    let fails = failures();
    let ctx = MutationContext {
        parent: &p,
        inspirations: &ins,
        previous_attempts: &[],
        failures: &fails,
        stagnation: 0,
    };
    let b = PromptBuilder::new(PromptConfig::default()).unwrap();
    for seed in 0..10 {
        for req in [
            b.diff_request(&ctx, seed).unwrap(),
            b.rewrite_request(&ctx, seed).unwrap(),
        ] {
            for m in &req.request.messages {
                assert!(
                    !m.content.contains('{') && !m.content.contains('}'),
                    "{}",
                    m.content
                );
            }
        }
    }
    let e = fill_template("x.md", "{fitness} {unknown_key}", &values)
        .unwrap_err()
        .to_string();
    assert!(e.contains("x.md") && e.contains("unknown_key"), "{e}");
}

#[test]
fn prompt_budget_drops_inspirations_first() {
    let parent = parent();
    let big: String = (0..400).map(|i| format!("LINE_{i} = {i}\n")).collect();
    let ins = vec![
        inspiration("top1", InspirationKind::Top, big.clone()),
        inspiration("div1", InspirationKind::Diverse, big.clone()),
    ];
    let fails = failures();
    let ctx = MutationContext {
        parent: &parent,
        inspirations: &ins,
        previous_attempts: &[],
        failures: &fails,
        stagnation: 0,
    };
    let cfg = PromptConfig {
        max_prompt_chars: 6_000,
        ..PromptConfig::default()
    };
    let p = PromptBuilder::new(cfg)
        .unwrap()
        .diff_request(&ctx, 2)
        .unwrap();
    let user = &p.request.messages[1].content;
    assert!(p.prompt_chars <= 6_000, "{}", p.prompt_chars);
    assert_eq!(p.reductions[0], "code of diverse inspirations");
    assert!(
        user.contains("PARENT_MARKER")
            && user.contains("REFLECTION_MARKER")
            && user.contains("STDERR_MARKER")
    );
    assert!(!user.contains("LINE_200"));
    // Inspiration code is clipped (head and tail) even when it fits.
    let p = PromptBuilder::new(PromptConfig::default())
        .unwrap()
        .diff_request(&ctx, 2)
        .unwrap();
    let user = &p.request.messages[1].content;
    assert!(
        user.contains("LINE_0 = 0")
            && user.contains("LINE_399 = 399")
            && user.contains("lines omitted")
    );
    assert!(PromptConfig {
        temperature: 5.0,
        ..PromptConfig::default()
    }
    .validate()
    .unwrap_err()
    .to_string()
    .contains("mutation.temperature"));
}

#[test]
fn template_hashes_cover_every_embedded_text() {
    let h = template_hashes();
    let keys: Vec<_> = h.keys().copied().collect();
    assert_eq!(
        keys,
        [
            "diff_user.md",
            "edits_user.md",
            "mutate_ast.py",
            "mutation_angles",
            "rewrite_user.md",
            "system.md"
        ]
    );
    for v in h.values() {
        assert_eq!(v.len(), 64);
        assert!(v.chars().all(|c| c.is_ascii_hexdigit()));
    }
    assert_eq!(
        h["system.md"],
        ppol::evolve::program::code_hash(SYSTEM_TEMPLATE)
    );
}

// ---------------------------------------------------------------- structural

const MARKER: &str = "# --- code below is never touched by structural mutation ---";

fn sample() -> String {
    std::fs::read_to_string(root().join("tests/fixtures/generators/structural_sample.py")).unwrap()
}

fn vocab() -> Vec<AxisVocab> {
    let v = |name: &str, d: &str, on: &str, off: &str| AxisVocab {
        name: name.into(),
        definition: d.into(),
        on: on.into(),
        off: off.into(),
    };
    vec![
        v(
            "typos",
            "Makes spelling and typing mistakes.",
            "Misspell words, skip capitals, drop apostrophes.",
            "Type carefully.",
        ),
        v(
            "impatient",
            "Wants things done immediately.",
            "Push for speed and ask how long it takes.",
            "Let the agent take its time.",
        ),
        v(
            "terse",
            "Says as little as possible.",
            "One short line per message, no greetings.",
            "Chatty, several sentences per message.",
        ),
        v(
            "skeptical",
            "Distrusts the agent.",
            "Ask for proof of every claim.",
            "Trust the agent.",
        ),
        v(
            "Topic Drift",
            "Wanders off topic.",
            "Mention unrelated things now and then.",
            "Stay on topic.",
        ),
    ]
}

/// Compile many programs in one Python process (independently of the mutation script):
/// "ok" or the error per program.
fn compile_all(codes: &[&str]) -> Vec<String> {
    use std::io::Write;
    let script = "import json, sys\nout = []\nfor c in json.load(sys.stdin):\n    try:\n        compile(c, '<m>', 'exec', dont_inherit=True)\n        out.append('ok')\n    except SyntaxError as e:\n        out.append(f'line {e.lineno}: {e.msg}')\nprint(json.dumps(out))\n";
    let mut child = std::process::Command::new("python3")
        .args(["-I", "-S", "-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(codes).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

fn after_marker(code: &str) -> &str {
    &code[code.find(MARKER).expect("marker kept")..]
}

fn before_axes(code: &str) -> &str {
    &code[..code.find("DIVERSITY_AXES = [").expect("axes kept")]
}

#[test]
fn structural_mutations_are_valid_local_and_deterministic() {
    let code = sample();
    let vocab = vocab();
    let mut kinds = BTreeSet::new();
    let mut distinct = BTreeSet::new();
    let seeds: Vec<u64> = (0..200).collect();
    let results =
        structural_mutate_batch(&StructuralOptions::default(), &code, &vocab, &seeds).unwrap();
    let mutants: Vec<(String, String)> = results
        .into_iter()
        .enumerate()
        .map(|(seed, r)| r.unwrap_or_else(|e| panic!("seed {seed}: {e}")))
        .collect();
    let syntax = compile_all(&mutants.iter().map(|(c, _)| c.as_str()).collect::<Vec<_>>());
    for (seed, (new, summary)) in mutants.into_iter().enumerate() {
        assert_ne!(new, code, "seed {seed} changed nothing");
        assert_eq!(syntax[seed], "ok", "seed {seed}: {summary}\n{new}");
        assert_eq!(
            after_marker(&new),
            after_marker(&code),
            "seed {seed} touched code: {summary}"
        );
        assert_eq!(
            before_axes(&new),
            before_axes(&code),
            "seed {seed} touched the header"
        );
        assert!(
            new.contains("\"behavior\":"),
            "seed {seed} removed every axis"
        );
        for part in summary.split("; ") {
            let kind = part.split_whitespace().next().unwrap().to_string();
            if part.starts_with("weight PLACEMENT_WEIGHTS") {
                let v: f64 = part.rsplit('→').next().unwrap().parse().unwrap();
                assert!((0.0..=1.0).contains(&v), "probability out of range: {part}");
            }
            kinds.insert(kind);
        }
        distinct.insert(new);
    }
    for k in [
        "added",
        "dropped",
        "rephrased",
        "weight",
        "duplicated",
        "swapped",
        "recombined",
    ] {
        assert!(kinds.contains(k), "operator {k} never used: {kinds:?}");
    }
    assert!(
        distinct.len() > 120,
        "only {} distinct mutants",
        distinct.len()
    );
    // Deterministic per seed, and a single call equals the batch element.
    for seed in [0u64, 7, 123] {
        let one = structural_mutate(&code, &vocab, seed).unwrap();
        assert_eq!(one, structural_mutate(&code, &vocab, seed).unwrap());
        assert!(distinct.contains(&one.0));
    }
    let again = structural_mutate_batch(&StructuralOptions::default(), &code, &vocab, &seeds[..20])
        .unwrap();
    let first = structural_mutate_batch(&StructuralOptions::default(), &code, &vocab, &seeds[..20])
        .unwrap();
    assert_eq!(again, first);
}

#[test]
fn structural_added_axis_has_the_reference_shape() {
    let code = sample();
    let vocab = vocab();
    let seeds: Vec<u64> = (0..60).collect();
    let (new, summary) =
        structural_mutate_batch(&StructuralOptions::default(), &code, &vocab, &seeds)
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .find(|(_, s)| s.contains("added axis 'typos'"))
            .expect("some seed adds 'typos'");
    assert!(
        new.contains("    {\n        \"behavior\": \"typos\",\n        \"definition\": \"Makes spelling and typing mistakes.\",\n        \"presence\": {\n            \"true\": \"Misspell words, skip capitals, drop apostrophes.\",\n            \"false\": \"Type carefully.\",\n        },\n    }"),
        "{summary}\n{new}"
    );
    // The comment inside the list survives.
    assert!(new.contains("{  # frustration is common in support chats"));
}

fn parent_b() -> String {
    sample()
        .replace("\"skeptical\": 0.35", "\"skeptical\": 0.8")
        .replace("\"ambiguous\": 0.25", "\"ambiguous\": 0.05")
        .replace("TEMPERATURE = 0.8", "TEMPERATURE = 0.6")
        .replace("OPENERS = [\"hi\", \"hello, I need help\", \"quick question\"]", "OPENERS = [\"hey\", \"B_OPENER\"]")
        .replace(
            "    {\n        \"behavior\": \"ambiguous\",",
            "    {\n        \"behavior\": \"typos\",\n        \"definition\": \"B_TYPOS\",\n        \"presence\": {\"true\": \"x\", \"false\": \"y\"},\n    },\n    {\n        \"behavior\": \"ambiguous\",",
        )
        .replace("Gives vague or partial answers.", "B_AMBIGUOUS_DEFINITION")
}

#[test]
fn crossover_mixes_both_parents() {
    let a = sample();
    let b = parent_b();
    assert_ne!(a, b);
    let from_b = [
        "\"skeptical\": 0.8",
        "\"ambiguous\": 0.05",
        "TEMPERATURE = 0.6",
        "B_OPENER",
        "B_TYPOS",
        "B_AMBIGUOUS_DEFINITION",
    ];
    let from_a = [
        "\"skeptical\": 0.35",
        "\"ambiguous\": 0.25",
        "TEMPERATURE = 0.8",
        "quick question",
        "Gives vague or partial answers.",
    ];
    let mut seen_b = BTreeSet::new();
    let mut mixed = 0;
    let seeds: Vec<u64> = (0..40).collect();
    let children: Vec<(String, String)> =
        crossover_batch(&StructuralOptions::default(), &a, &b, &seeds)
            .unwrap()
            .into_iter()
            .enumerate()
            .map(|(seed, r)| r.unwrap_or_else(|e| panic!("seed {seed}: {e}")))
            .collect();
    let syntax = compile_all(&children.iter().map(|(c, _)| c.as_str()).collect::<Vec<_>>());
    for (seed, (child, summary)) in children.iter().enumerate() {
        assert!(summary.starts_with("crossover: "), "{summary}");
        assert_eq!(syntax[seed], "ok", "seed {seed}: {summary}");
        assert_eq!(after_marker(child), after_marker(&a));
        assert_ne!(child, &a);
        let nb = from_b.iter().filter(|s| child.contains(**s)).count();
        let na = from_a.iter().filter(|s| child.contains(**s)).count();
        assert!(nb >= 1, "seed {seed}: nothing from B ({summary})");
        if na >= 1 {
            mixed += 1;
        }
        seen_b.extend(from_b.iter().filter(|s| child.contains(**s)).copied());
    }
    for seed in [3u64, 11] {
        assert_eq!(crossover(&a, &b, seed).unwrap(), children[seed as usize]);
    }
    assert!(mixed >= 30, "children rarely keep parts of A: {mixed}/40");
    assert_eq!(
        seen_b.len(),
        from_b.len(),
        "never inherited some of B: {seen_b:?}"
    );
    let e = crossover(&a, &a, 1).unwrap_err();
    assert!(e.contains("identical"), "{e}");
}

/// One evolution iteration the way the loop drives these APIs, with a scripted mutator.
#[test]
fn end_to_end_iteration_with_a_scripted_mutator() {
    use ppol::evolve::archive::{Archive, ArchiveConfig};
    let seed_code = sample();
    let metrics =
        |c: f64, h: f64, v: f64| [("combined", c), ("human_likeness", h), ("coverage", v)];
    let mut archive = Archive::new(ArchiveConfig::default(), 42).unwrap();
    archive
        .add(
            Program::seed("seed", seed_code.clone()).with_metrics(metrics(0.4, 0.3, 0.5)),
            0,
        )
        .unwrap();
    let builder = PromptBuilder::new(PromptConfig::for_archive(archive.config())).unwrap();

    // 1. A failed diff is recorded against the parent and shown in the next prompt.
    let island = archive.next_island();
    let parent = archive.sample_parent(island).unwrap().program;
    let bad = "<<<<<<< SEARCH\nTEMPERATURE = 0.9\n=======\nTEMPERATURE = 1.0\n>>>>>>> REPLACE";
    let err = apply_diff(&parent.code, bad).unwrap_err();
    let mut failure = ppol::evolve::mutation::failure_from_diff_error(&err);
    failure.angle = Some("axes".into());
    archive.record_failure(&parent.id, failure);

    // 2. The next prompt for this parent carries the failure; the answer applies and compiles.
    let failures = archive.recent_failures(&parent.id);
    let attempts: Vec<Program> = archive
        .recent_children(&parent.id, 5)
        .into_iter()
        .cloned()
        .collect();
    let inspirations = archive.inspirations(&parent, island).unwrap();
    let ctx = MutationContext {
        parent: &parent,
        inspirations: &inspirations,
        previous_attempts: &attempts,
        failures: &failures,
        stagnation: 0,
    };
    let prompt = builder.diff_request(&ctx, 1).unwrap();
    assert!(prompt.request.messages[1]
        .content
        .contains("TEMPERATURE = 0.9"));
    let answer = "Raise terse.\n<<<<<<< SEARCH\nPLACEMENT_WEIGHTS = {\"terse\": 0.5, \"skeptical\": 0.35, \"frustrated\": 0.3, \"ambiguous\": 0.25}\n=======\nPLACEMENT_WEIGHTS = {\"terse\": 0.7, \"skeptical\": 0.35, \"frustrated\": 0.3, \"ambiguous\": 0.25}\n>>>>>>> REPLACE";
    let child_code = apply_diff(&parent.code, answer).unwrap().code;
    assert_eq!(check_python_syntax(&child_code).unwrap(), Ok(()));
    let mut info = MutationInfo::new(MutationKind::Diff, "Raise terse.");
    info.angle = Some(prompt.angle.id.to_string());
    let child =
        Program::child(&parent, "it1", child_code, 1, info).with_metrics(metrics(0.5, 0.45, 0.5));
    let out = archive.add(child, island).unwrap();
    assert!(out.new_best && out.new_cell);
    assert_eq!(archive.consecutive_failures(&parent.id), 0);

    // 3. Offline children: a structural mutant and a crossover of the two programs.
    let (mutant, summary) = structural_mutate(&seed_code, &vocab(), 5).unwrap();
    let m = Program::child(
        &parent,
        "it2",
        mutant,
        2,
        MutationInfo::new(MutationKind::Structural, summary),
    )
    .with_metrics(metrics(0.3, 0.9, 0.1));
    let isl = archive.next_island();
    archive.add(m, isl).unwrap();
    let best = archive.best().unwrap().clone();
    let (kid, summary) = crossover(&seed_code, &best.code, 3).unwrap();
    assert!(kid.contains("\"terse\": 0.7"), "{summary}");
    let mut c = Program::child(
        &parent,
        "it3",
        kid,
        3,
        MutationInfo::new(MutationKind::Crossover, summary),
    );
    c.second_parent_id = Some(best.id.clone());
    let isl = archive.next_island();
    archive
        .add(c.with_metrics(metrics(0.45, 0.2, 0.8)), isl)
        .unwrap();
    assert_eq!(archive.len(), 4);
    assert_eq!(archive.best().unwrap().id.as_str(), "it1");
}

// ---------------------------------------------------------------- dispatch

fn mutation_cfg(mode: ppol::evolve::config::MutationMode) -> ppol::evolve::config::MutationSection {
    ppol::evolve::config::MutationSection {
        mode,
        ..Default::default()
    }
}

fn scripted(answers: &[&str]) -> std::sync::Arc<dyn ppol::llm::ChatModel> {
    use ppol::llm::scripted::{ScriptedModel, ScriptedReply};
    std::sync::Arc::new(ScriptedModel::from_replies(
        answers.iter().map(|a| ScriptedReply::text(*a)),
    ))
}

/// The mode is checked when the run starts: `llm` without a model, or prompt settings out of
/// range, name their `[mutation]` key (a run with `mode = "llm"` and no `[llm]` used to panic
/// at its first mutation).
#[test]
fn mutator_settings_errors_name_the_mutation_key() {
    use ppol::evolve::archive::ArchiveConfig;
    use ppol::evolve::config::MutationMode;
    use ppol::evolve::mutation::Mutator;
    let archive = ArchiveConfig::default();
    let e = Mutator::new(&mutation_cfg(MutationMode::Llm), &archive, None)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("mutation.mode"), "{e}");
    let hot = ppol::evolve::config::MutationSection {
        temperature: 5.0,
        ..mutation_cfg(MutationMode::Auto)
    };
    let e = Mutator::new(&hot, &archive, None)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("mutation.temperature"), "{e}");
    // auto: structural offline, LLM diffs with a model; structural stays structural
    let m = Mutator::new(&mutation_cfg(MutationMode::Auto), &archive, None).unwrap();
    assert_eq!(m.mode_name(), "structural");
    let m = Mutator::new(
        &mutation_cfg(MutationMode::Auto),
        &archive,
        Some(scripted(&[])),
    )
    .unwrap();
    assert_eq!(m.mode_name(), "diff");
    let m = Mutator::new(
        &mutation_cfg(MutationMode::Structural),
        &archive,
        Some(scripted(&[])),
    )
    .unwrap();
    assert!(!m.uses_llm());
}

fn archive_with_two_programs() -> (ppol::evolve::archive::Archive, Program) {
    use ppol::evolve::archive::{Archive, ArchiveConfig};
    let cfg = ArchiveConfig {
        num_islands: 1,
        ..ArchiveConfig::default()
    };
    let mut archive = Archive::new(cfg, 9).unwrap();
    let metrics =
        |c: f64, h: f64, v: f64| [("combined", c), ("human_likeness", h), ("coverage", v)];
    let a = Program::seed("a", sample()).with_metrics(metrics(0.4, 0.3, 0.5));
    let b = Program::seed("b", parent_b()).with_metrics(metrics(0.6, 0.9, 0.1));
    archive.add(a, 0).unwrap();
    archive.add(b, 0).unwrap();
    let parent = archive.get(&"a".into()).unwrap().clone();
    (archive, parent)
}

/// Offline, the crossover rate decides between crossover (with an inspiration other than the
/// parent) and a structural edit; with a model, diffs until the parent's children failed
/// `rewrite_after_failures` times in a row, then a full rewrite.
#[test]
fn dispatch_chooses_the_operator() {
    use ppol::evolve::config::{MutationMode, MutationSection};
    use ppol::evolve::mutation::{Mutator, Operator};
    let (mut archive, parent) = archive_with_two_programs();
    let insps = archive.inspirations(&parent, 0).unwrap();
    assert!(insps.iter().any(|i| i.program.id.as_str() == "b"));
    let with_rate = |rate: f64| {
        Mutator::new(
            &MutationSection {
                crossover_rate: rate,
                ..mutation_cfg(MutationMode::Structural)
            },
            archive.config(),
            None,
        )
        .unwrap()
    };
    for seed in 0..20 {
        match with_rate(1.0).choose(&archive, &parent, &insps, seed) {
            Operator::Crossover { other } => assert_eq!(other.id.as_str(), "b"),
            op => panic!("rate 1 chose {op:?}"),
        }
        assert_eq!(
            with_rate(0.0).choose(&archive, &parent, &insps, seed),
            Operator::Structural
        );
    }
    // no other program to cross with: structural even at rate 1
    let own: Vec<_> = insps
        .iter()
        .filter(|i| i.program.id == parent.id)
        .cloned()
        .collect();
    assert_eq!(
        with_rate(1.0).choose(&archive, &parent, &own, 3),
        Operator::Structural
    );

    let llm = Mutator::new(
        &MutationSection {
            rewrite_after_failures: 2,
            ..mutation_cfg(MutationMode::Llm)
        },
        archive.config(),
        Some(scripted(&[])),
    )
    .unwrap();
    assert_eq!(llm.choose(&archive, &parent, &insps, 1), Operator::Diff);
    for _ in 0..2 {
        archive.record_failure(
            &parent.id,
            ChildFailure::new(FailureKind::DiffNotApplied, "no match"),
        );
    }
    assert_eq!(llm.choose(&archive, &parent, &insps, 1), Operator::Rewrite);
}

/// An LLM answer that applies becomes a child with its angle and summary; one that does not is
/// a recorded failure (kind, angle), never an error of the run.
#[tokio::test(flavor = "multi_thread")]
async fn dispatch_makes_llm_children_and_failures() {
    use ppol::evolve::config::MutationMode;
    use ppol::evolve::mutation::Mutator;
    let (archive, parent) = archive_with_two_programs();
    let good = "Make users terser.\n<<<<<<< SEARCH\nPLACEMENT_WEIGHTS = {\"terse\": 0.5, \"skeptical\": 0.35, \"frustrated\": 0.3, \"ambiguous\": 0.25}\n=======\nPLACEMENT_WEIGHTS = {\"terse\": 0.9, \"skeptical\": 0.35, \"frustrated\": 0.3, \"ambiguous\": 0.25}\n>>>>>>> REPLACE\n";
    let bad = "<<<<<<< SEARCH\nNOT IN THE PROGRAM\n=======\nx = 1\n>>>>>>> REPLACE\n";
    let m = Mutator::new(
        &mutation_cfg(MutationMode::Llm),
        archive.config(),
        Some(scripted(&[good, bad])),
    )
    .unwrap();
    let child = m
        .propose(&archive, &parent, &[], 0, 11)
        .await
        .unwrap()
        .expect("the diff applies");
    assert!(child.code.contains("\"terse\": 0.9"));
    assert_eq!(child.mutation.kind, MutationKind::Diff);
    assert_eq!(child.mutation.summary, "Make users terser.");
    assert!(child.mutation.angle.is_some());
    let failure = m
        .propose(&archive, &parent, &[], 0, 12)
        .await
        .unwrap()
        .expect_err("the diff does not apply");
    assert_eq!(failure.kind, FailureKind::DiffNotApplied);
    assert!(failure.angle.is_some());
}

// ---------------------------------------------------------------- mechanics-level operators

/// Options with every structural operator off except `only`.
fn only_op(only: &str) -> StructuralOptions {
    let mut o = StructuralOptions {
        mechanics: MechanicPhrases::vocabulary(),
        ..StructuralOptions::default()
    };
    for op in [
        "add-axis",
        "drop-axis",
        "edit-axis",
        "perturb",
        "fragment",
        "add-mechanic",
        "tune-mechanic",
        "steer-axis",
    ] {
        o.op_weights
            .insert(op.into(), if op == only { 1.0 } else { 0.0 });
    }
    o
}

/// `steer-axis` moves an axis's placement probability toward the state whose personas were
/// more human in the parent's own evaluation (up for a positive effect, down for a negative
/// one, never past 0 or 1), and does not apply without evidence.
#[test]
fn steer_axis_follows_the_parents_axis_evidence() {
    let seed = offline_seed();
    let weight = |code: &str, axis: &str| -> f64 {
        let line = code
            .lines()
            .find(|l| l.starts_with("PLACEMENT_WEIGHTS = {"))
            .unwrap();
        let re = regex::Regex::new(&format!(r#""{axis}": ([0-9.]+)"#)).unwrap();
        re.captures(line).unwrap()[1].parse().unwrap()
    };
    assert_eq!(weight(&seed, "terse"), 0.5);
    let mut o = only_op("steer-axis");
    o.axis_evidence = [("terse".to_string(), 0.3), ("skeptical".to_string(), -0.25)]
        .into_iter()
        .collect();
    let (mut up, mut down) = (0, 0);
    for s in 0..16 {
        let (code, summary) = structural_mutate_with(&o, &seed, &vocab(), s).unwrap();
        assert!(
            summary.starts_with("steered PLACEMENT_WEIGHTS['"),
            "{summary}"
        );
        let (t, k) = (weight(&code, "terse"), weight(&code, "skeptical"));
        assert!(
            (0.5..=1.0).contains(&t) && (0.0..=0.5).contains(&k),
            "{summary}"
        );
        assert_eq!(weight(&code, "frustrated"), 0.5, "{summary}");
        up += usize::from(t > 0.5);
        down += usize::from(k < 0.5);
    }
    assert!(up > 0 && down > 0, "up {up}, down {down}");
    // no evidence (or too little): the operator does not apply, another one is used
    o.axis_evidence = [("terse".to_string(), 0.01)].into_iter().collect();
    let (_, summary) = structural_mutate_with(&o, &seed, &vocab(), 3).unwrap();
    assert!(!summary.contains("steered"), "{summary}");
}

/// The evidence behind `steer-axis`: per axis, mean P(human) with the axis on minus with it
/// off, over the scored personas; axes with fewer than two personas on either side get none.
#[test]
fn axis_evidence_is_the_p_human_gap_between_on_and_off() {
    use ppol::evolve::mutation::structural::axis_evidence;
    use ppol::evolve::runlog::PersonaOutcome;
    let p = |axes: &[&str], p_human: Option<f64>| PersonaOutcome {
        task_id: "t".into(),
        persona_id: "p".into(),
        axes: axes.iter().map(|a| a.to_string()).collect(),
        p_human,
        reward: None,
    };
    let personas = [
        p(&["terse", "rare"], Some(0.9)),
        p(&["terse"], Some(0.7)),
        p(&[], Some(0.2)),
        p(&["frustrated"], Some(0.4)),
        p(&["frustrated"], Some(0.6)),
        p(&["terse", "frustrated"], None),
    ];
    let e = axis_evidence(&personas);
    assert_eq!(e.len(), 2, "{e:?}");
    // terse: on 0.9, 0.7; off 0.2, 0.4, 0.6 (the unscored persona does not count)
    assert!(
        (e["axis_effect:terse"] - (0.8 - 0.4)).abs() < 1e-12,
        "{e:?}"
    );
    // frustrated: on 0.4, 0.6; off 0.9, 0.7, 0.2
    assert!(
        (e["axis_effect:frustrated"] - (0.5 - 0.6)).abs() < 1e-12,
        "{e:?}"
    );
    // one persona has 'rare' on: no entry
    assert!(!e.contains_key("axis_effect:rare"), "{e:?}");
}

fn offline_seed() -> String {
    std::fs::read_to_string(root().join("seeds/offline_templates.py")).unwrap()
}

/// The string literals of a program, in order.
fn strings_of(code: &str) -> Vec<String> {
    let re = regex::Regex::new(r#""((?:[^"\\]|\\.)*)""#).unwrap();
    re.captures_iter(code).map(|c| c[1].to_string()).collect()
}

#[test]
fn every_mechanic_phrase_plays_its_own_mechanic() {
    use ppol::simulate::episode::scripted::read_persona;
    use ppol::simulate::episode::Scenario;
    let vocab = MechanicPhrases::vocabulary();
    assert!(vocab.len() >= 30, "{}", vocab.len());
    for m in &vocab {
        for p in &m.phrases {
            let play = read_persona(p, &Scenario::default());
            assert!(
                play.mechanic_ids().contains(&m.id.as_str()),
                "'{p}' plays {:?}, not {}",
                play.mechanic_ids(),
                m.id
            );
            assert!(play.unplayed.is_empty(), "'{p}': {:?}", play.unplayed);
        }
    }
}

#[test]
fn add_mechanic_appends_a_vocabulary_sentence_to_a_mechanics_list() {
    let seed = offline_seed();
    let phrases: BTreeSet<String> = MechanicPhrases::vocabulary()
        .into_iter()
        .flat_map(|m| m.phrases)
        .collect();
    let before = strings_of(&seed);
    let opts = only_op("add-mechanic");
    let mut ids = BTreeSet::new();
    for s in 0..12 {
        let (code, summary) = structural_mutate_with(&opts, &seed, &[], s).unwrap();
        assert!(summary.starts_with("added mechanic '"), "{summary}");
        assert!(summary.contains("to MECHANICS["), "{summary}");
        ids.insert(summary.split('\'').nth(1).unwrap().to_string());
        // one string more than the seed per edit (one to three), each a vocabulary sentence
        let n = summary.matches("added mechanic '").count();
        assert!((1..=3).contains(&n), "{summary}");
        let mut left = strings_of(&code);
        assert_eq!(left.len(), before.len() + n, "{summary}");
        for b in &before {
            let i = left
                .iter()
                .position(|x| x == b)
                .expect("a seed string vanished");
            left.remove(i);
        }
        for a in &left {
            assert!(phrases.contains(a), "{a} is not a vocabulary sentence");
        }
        assert_eq!(
            structural_mutate_with(&opts, &seed, &[], s).unwrap().0,
            code,
            "not deterministic"
        );
    }
    assert!(ids.len() >= 6, "{ids:?}");
}

#[test]
fn tune_mechanic_moves_one_intensity_along_its_scale() {
    let seed = offline_seed();
    let opts = only_op("tune-mechanic");
    let before = strings_of(&seed);
    let mut kinds = BTreeSet::new();
    for s in 0..30 {
        let (code, summary) = structural_mutate_with(&opts, &seed, &[], s).unwrap();
        assert!(summary.starts_with("tuned "), "{summary}");
        let after = strings_of(&code);
        assert_eq!(after.len(), before.len(), "{summary}");
        let changed: Vec<(&String, &String)> = before
            .iter()
            .zip(after.iter())
            .filter(|(a, b)| a != b)
            .collect();
        assert!(
            !changed.is_empty() && changed.len() <= 2,
            "{summary}: {changed:?}"
        );
        kinds.insert(
            summary
                .rsplit(' ')
                .next()
                .unwrap()
                .split('→')
                .next()
                .unwrap()
                .to_string(),
        );
    }
    // word limits, frequencies and strengths are all reached from the seed's sentences
    assert!(kinds.len() >= 4, "{kinds:?}");
}
