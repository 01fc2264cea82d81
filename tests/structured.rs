//! Structured LLM edits (issue #26): the mutator's answer is JSON constrained to a schema of the
//! parent's own editable data, sent in the shape the endpoint takes (learned from refusals),
//! and text diffs where the endpoint constrains nothing. Against the mock server, each
//! endpoint capability: schema honoured, schema refused (llama-cpp-python's 500, a plain 400),
//! schema accepted but ignored.

use std::path::{Path, PathBuf};

use ppol::evolve::runlog::{read, Event};
use ppol::testing::mock_server::{
    serve_with, MockOptions, MockReply, MockResponseFormat, MockRule, MockScript, MockStrictness,
};

use crate::util::{root, run_ppol};

/// The structured prompt's heading (the diff prompt has none of it).
const EDITS_PROMPT: &str = "What you can edit";

fn config(dir: &Path, base_url: &str, iterations: u32, extra: &str) -> PathBuf {
    let seed = root().join("seeds/offline_templates.py");
    let text = format!(
        "[run]\nname = \"structured\"\n[search]\niterations = {iterations}\nseed = 2\nseed_program = \"{}\"\n\
         [episodes]\nbackend = \"scripted\"\n[mutation]\nreflection = false\n{extra}\
         [llm]\nmax_retries = 2\nbackoff_base_ms = 1\nbackoff_max_ms = 5\n[llm.default]\nprovider = \"openai\"\n\
         model = \"mock-model\"\nbase_url = \"{base_url}\"\n",
        seed.display(),
    );
    let p = dir.join("llm.toml");
    std::fs::write(&p, text).unwrap();
    p
}

struct Ran {
    log: Vec<ppol::evolve::runlog::Record>,
    stdout: String,
    records: Vec<ppol::testing::mock_server::MockRequestRecord>,
    bodies: Vec<serde_json::Value>,
    _tmp: tempfile::TempDir,
}

/// Run `attempts` mutations (the seed's evaluation is iteration 1); the k-th structured
/// request is answered with `edits_replies[k]` (the last one from then on).
async fn run(
    format: MockResponseFormat,
    edits_replies: &[String],
    attempts: u32,
    extra: &str,
) -> Ran {
    let (last, first) = edits_replies.split_last().unwrap();
    let mut rules: Vec<MockRule> = first
        .iter()
        .map(|r| MockRule {
            contains: Some(EDITS_PROMPT.into()),
            reply: MockReply::text(r),
            times: Some(1),
            ..Default::default()
        })
        .collect();
    rules.push(MockRule {
        contains: Some(EDITS_PROMPT.into()),
        reply: MockReply::text(last),
        ..Default::default()
    });
    rules.push(MockRule {
        contains: Some("<<<<<<< SEARCH".into()),
        reply: MockReply::text(
            "More mechanics per axis.\n<<<<<<< SEARCH\nMECHANICS_PER_AXIS = 2\n=======\nMECHANICS_PER_AXIS = 3\n>>>>>>> REPLACE\n",
        ),
        ..Default::default()
    });
    let options = MockOptions {
        strict: MockStrictness {
            response_format: format,
            ..MockStrictness::default()
        },
        ..MockOptions::default()
    };
    run_script(rules, options, attempts + 1, extra).await
}

/// Run `iterations` iterations against a mock server answering by `rules` ("fine" otherwise).
async fn run_script(
    rules: Vec<MockRule>,
    options: MockOptions,
    iterations: u32,
    extra: &str,
) -> Ran {
    let script = MockScript {
        rules,
        default: MockReply::text("fine"),
        ..Default::default()
    };
    let server = serve_with(script, options).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), &server.base_url(), iterations, extra);
    let out = tmp.path().join("run");
    let (cfg_s, out_s) = (
        cfg.to_str().unwrap().to_string(),
        out.to_str().unwrap().to_string(),
    );
    let res = tokio::task::spawn_blocking(move || {
        run_ppol(&["evolve", "--config", &cfg_s, "--out", &out_s, "--quiet"])
    })
    .await
    .unwrap();
    assert_eq!(res.0, 0, "{}", res.2);
    let ran = Ran {
        log: read(&out.join("log.jsonl")).unwrap(),
        stdout: res.1,
        records: server.records(),
        bodies: server.bodies(),
        _tmp: tmp,
    };
    server.stop();
    ran
}

/// (operator, outcome) of every attempted child, in order.
fn attempts(log: &[ppol::evolve::runlog::Record]) -> Vec<(String, String)> {
    log.iter()
        .filter_map(|r| match &r.event {
            Event::CandidateEvaluated { mutation, .. } if mutation != "seed" => {
                Some((mutation.clone(), "applied".into()))
            }
            // landed too: the child passed the contract; the cascade stopped it after a stage
            Event::CandidateStopped { mutation, .. } => Some((mutation.clone(), "applied".into())),
            Event::CandidateFailed {
                mutation, failure, ..
            } => Some((
                mutation.clone(),
                format!("{}: {}", failure.stage, failure.reason),
            )),
            _ => None,
        })
        .collect()
}

fn mutator_formats(ran: &Ran) -> Vec<(Option<String>, Option<u16>)> {
    ran.bodies
        .iter()
        .zip(&ran.records)
        .filter(|(b, _)| b.to_string().contains(EDITS_PROMPT))
        .map(|(_, r)| (r.response_format.clone(), r.status))
        .collect()
}

/// Structured answers that always change what they name: the k-th sets the terse weight to
/// 0.9 − 0.1·k and the second terse mechanic to a k-word limit.
fn good(n: usize) -> Vec<String> {
    (0..n)
        .map(|k| {
            format!(
                r#"{{"idea": "curt users", "edits": [{{"op": "number", "target": "PLACEMENT_WEIGHTS['terse']", "value": {:.1}}}, {{"op": "set", "target": "MECHANICS['terse']['true'][1]", "text": "Keep every message under {} words."}}]}}"#,
                0.9 - 0.1 * k as f64,
                k + 4
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_that_takes_json_schema_gets_structured_edits_and_they_land() {
    let ran = run(MockResponseFormat::Any, &good(3), 3, "").await;
    let a = attempts(&ran.log);
    assert_eq!(a.len(), 3, "{a:?}");
    assert!(
        a.iter()
            .all(|(op, out)| op == "structured" && out == "applied"),
        "{a:?}"
    );
    let child = ran
        .log
        .iter()
        .find_map(|r| match &r.event {
            Event::CandidateEvaluated {
                mutation,
                code,
                mutation_summary,
                ..
            } if mutation == "structured" => Some((code.clone(), mutation_summary.clone())),
            _ => None,
        })
        .unwrap();
    assert!(child.0.contains("\"terse\": 0.9"), "{}", child.0);
    assert!(child.0.contains("Keep every message under 4 words."));
    assert!(child.1.starts_with("curt users: "), "{}", child.1);
    // every structured request carried OpenAI's json_schema, with an enum of real targets
    let formats = mutator_formats(&ran);
    assert!(!formats.is_empty());
    assert!(
        formats
            .iter()
            .all(|(f, s)| f.as_deref() == Some("json_schema") && *s == Some(200)),
        "{formats:?}"
    );
    let body = ran
        .bodies
        .iter()
        .find(|b| b.to_string().contains(EDITS_PROMPT))
        .unwrap();
    let schema = &body["response_format"]["json_schema"]["schema"];
    let variants = schema["properties"]["edits"]["items"]["anyOf"]
        .as_array()
        .unwrap();
    let ids: Vec<&str> = variants
        .iter()
        .flat_map(|v| v["properties"]["target"]["enum"].as_array().unwrap())
        .filter_map(|x| x.as_str())
        .collect();
    assert!(ids.contains(&"PLACEMENT_WEIGHTS['terse']"), "{ids:?}");
    let counts = ran
        .log
        .iter()
        .find_map(|r| match &r.event {
            Event::RunStopped { mutations, .. } => Some(mutations.clone()),
            _ => None,
        })
        .unwrap();
    let landed = counts.get("structured:applied").unwrap_or(&0)
        + counts.get("structured:stopped-early").unwrap_or(&0);
    assert_eq!(landed, 3, "{counts:?}");
    assert!(
        ran.stdout.contains("mutations: structured: "),
        "{}",
        ran.stdout
    );
}

/// llama-cpp-python answers OpenAI's `json_schema` with HTTP 500: a capability answer. The
/// request is resent at once as `json_object` with the schema, remembered for every later
/// request, and never retried as a server fault.
#[tokio::test(flavor = "multi_thread")]
async fn llama_cpp_pythons_refusal_is_learned_once_and_not_retried() {
    let ran = run(MockResponseFormat::LlamaCppPython, &good(3), 3, "").await;
    let a = attempts(&ran.log);
    assert!(
        a.iter()
            .all(|(op, out)| op == "structured" && out == "applied"),
        "{a:?}"
    );
    let formats = mutator_formats(&ran);
    assert_eq!(
        formats[0],
        (Some("json_schema".to_string()), Some(500)),
        "{formats:?}"
    );
    assert!(
        formats[1..]
            .iter()
            .all(|(f, s)| f.as_deref() == Some("json_object+schema") && *s == Some(200)),
        "one refusal, then json_object for every request: {formats:?}"
    );
    assert_eq!(
        formats.len(),
        4,
        "3 mutations + the one refused shape: {formats:?}"
    );
}

/// An endpoint that takes no schema at all (400 on both shapes): the first structured request
/// is answered unconstrained, and later mutations are text diffs.
#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_without_schemas_falls_back_to_text_diffs() {
    let ran = run(MockResponseFormat::None, &good(1), 2, "").await;
    let formats = mutator_formats(&ran);
    assert_eq!(
        formats,
        vec![
            (Some("json_schema".to_string()), Some(400)),
            (Some("json_object+schema".to_string()), Some(400)),
            (None, Some(200)),
        ],
        "{formats:?}"
    );
    let a = attempts(&ran.log);
    let ops: Vec<&str> = a.iter().map(|(op, _)| op.as_str()).collect();
    assert_eq!(ops, ["structured", "diff"], "{a:?}");
    assert!(a.iter().all(|(_, out)| out == "applied"), "{a:?}");
}

/// An endpoint that takes the schema but answers outside it: each such answer is a recorded
/// failure with the reason, and after two the run goes back to text diffs.
#[tokio::test(flavor = "multi_thread")]
async fn answers_that_ignore_the_schema_are_recorded_and_diffs_take_over() {
    let ran = run(
        MockResponseFormat::Any,
        &["Sure! I would make the users terser.".to_string()],
        3,
        "rewrite_after_failures = 5\n",
    )
    .await;
    let a = attempts(&ran.log);
    let ops: Vec<&str> = a.iter().map(|(op, _)| op.as_str()).collect();
    assert_eq!(ops, ["structured", "structured", "diff"], "{a:?}");
    for (_, out) in &a[..2] {
        assert!(
            out.starts_with("mutation:unparsable: the structured answer is unusable although the endpoint was asked to constrain it: not JSON"),
            "{out}"
        );
    }
    assert_eq!(a[2].1, "applied", "{a:?}");
}

/// `edit_format = "diff"` keeps text diffs whatever the endpoint takes.
#[tokio::test(flavor = "multi_thread")]
async fn edit_format_diff_keeps_text_diffs() {
    let ran = run(
        MockResponseFormat::Any,
        &good(1),
        2,
        "edit_format = \"diff\"\n",
    )
    .await;
    let a = attempts(&ran.log);
    assert!(a.iter().all(|(op, _)| op == "diff"), "{a:?}");
    assert!(mutator_formats(&ran).is_empty());
    assert!(ran
        .bodies
        .iter()
        .all(|b| b.get("response_format").is_none()));
}

/// Issue #26's comparison with a scripted strong model. Its text diffs fail the way strong
/// models' diffs do: aider's published benchmark runs count malformed edit responses in 1–9% of
/// cases (claude-3.5-sonnet 99.2% well formed, gpt-5 91.1%); here one diff in ten quotes a
/// line as it was in an earlier version (`MECHANICS_PER_AXIS = 3`), which no parent has. Under a
/// schema the same model can only name targets the parent has. Over 10 mutations each, the
/// run with structured edits lands every one; the diff run loses its stale diff, a paid call
/// that produced no child. The mutator's tokens per landed edit are printed for the
/// note (`--nocapture`).
#[tokio::test(flavor = "multi_thread")]
async fn a_scripted_strong_model_loses_no_calls_to_edits_that_do_not_apply() {
    const N: usize = 10;
    let diff_answers: Vec<String> = (0..N)
        .map(|k| {
            let search = if k % 10 == 4 {
                "MECHANICS_PER_AXIS = 3"
            } else {
                "MECHANICS_PER_AXIS = 2"
            };
            format!(
                "Idea {k}: note the mechanics budget.\n<<<<<<< SEARCH\n{search}\n=======\nMECHANICS_PER_AXIS = 2\n# strong-model idea {k}\n>>>>>>> REPLACE\n"
            )
        })
        .collect();
    let edits_answers: Vec<String> = (0..N)
        .map(|k| {
            format!(
                r#"{{"idea": "curt users {k}", "edits": [{{"op": "number", "target": "PLACEMENT_WEIGHTS['terse']", "value": {:.2}}}, {{"op": "set", "target": "MECHANICS['terse']['true'][1]", "text": "Keep every message under {} words."}}]}}"#,
                0.3 + 0.03 * k as f64,
                k + 4
            )
        })
        .collect();
    let run_mode = |format: &'static str| {
        let mut rules: Vec<MockRule> = Vec::new();
        if format == "auto" {
            rules.extend(edits_answers.iter().map(|r| MockRule {
                contains: Some(EDITS_PROMPT.into()),
                reply: MockReply::text(r),
                times: Some(1),
                ..Default::default()
            }));
        }
        rules.extend(diff_answers.iter().map(|r| MockRule {
            contains: Some("<<<<<<< SEARCH".into()),
            reply: MockReply::text(r),
            times: Some(1),
            ..Default::default()
        }));
        async move {
            let extra = format!("edit_format = \"{format}\"\n");
            let ran = run_script(rules, MockOptions::default(), N as u32 + 1, &extra).await;
            let (log, records) = (ran.log, ran.records);
            let a = attempts(&log);
            let landed = a.iter().filter(|(_, o)| o == "applied").count();
            let failed: Vec<&String> = a
                .iter()
                .filter(|(_, o)| o != "applied")
                .map(|(_, o)| o)
                .collect();
            let calls = records.len();
            let tokens: u64 = records
                .iter()
                .map(|r| r.prompt_tokens + r.completion_tokens.unwrap_or(0))
                .sum();
            eprintln!(
                "{format}: {} mutations, {landed} landed, {} failed ({failed:?}), {calls} mutator calls, \
                 {tokens} tokens, {} tokens per landed edit",
                a.len(),
                failed.len(),
                tokens / landed.max(1) as u64
            );
            let n_failed = failed.len();
            (a, landed, n_failed, calls)
        }
    };
    let (diff_a, diff_landed, diff_failed, diff_calls) = run_mode("diff").await;
    let (edit_a, edit_landed, edit_failed, edit_calls) = run_mode("auto").await;
    assert_eq!(diff_a.len(), N, "{diff_a:?}");
    assert_eq!(edit_a.len(), N, "{edit_a:?}");
    assert!(diff_a.iter().all(|(op, _)| op == "diff"), "{diff_a:?}");
    assert!(
        edit_a.iter().all(|(op, _)| op == "structured"),
        "{edit_a:?}"
    );
    // the stale diffs fail on the parent's text, with the reason recorded
    assert_eq!((diff_landed, diff_failed), (N - 1, 1), "{diff_a:?}");
    assert!(
        diff_a
            .iter()
            .filter(|(_, o)| o != "applied")
            .all(|(_, o)| o.contains("MECHANICS_PER_AXIS = 3")),
        "{diff_a:?}"
    );
    assert_eq!((edit_landed, edit_failed), (N, 0), "{edit_a:?}");
    // one call per mutation either way: the lost diffs were paid for and produced nothing
    assert_eq!((diff_calls, edit_calls), (N, N));
}
