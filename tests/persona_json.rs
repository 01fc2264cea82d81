//! Generator programs ask for JSON answers (issue #26, part 2): a `schema` given to `ppol_llm`
//! reaches the model's endpoint in the shape it takes (OpenAI's `json_schema`, then
//! llama-cpp-python's `json_object` with a schema, then none), the program learns how its
//! answer was constrained, and the LLM seeds record in each persona's `source` whether it is
//! the model's JSON, a repair of a malformed answer or the program's own fallback.

use std::path::Path;

use ppol::persona::Persona;
use ppol::testing::mock_server::{
    serve_with, MockOptions, MockReply, MockResponseFormat, MockRule, MockScript, MockStrictness,
};
use serde_json::{json, Value};

use crate::util::{root, run_ppol};

/// A program that asks one schema-constrained question (`Q?`) and one plain one, and reports
/// what `complete_json` said in its persona.
const PROGRAM: &str = r#"
import json
import ppol_llm

DIVERSITY_AXES = []
SCHEMA = {"type": "object", "properties": {"colour": {"type": "string", "maxLength": 20}},
          "required": ["colour"], "additionalProperties": False}

def generate_personas_detailed(task_context, axes, n):
    ans = ppol_llm.complete_json("Q? name a colour", SCHEMA, max_tokens=50)
    plain = ppol_llm.complete("plain question")
    assert isinstance(plain, str)
    return [{"persona_id": "p", "text": json.dumps(ans.value),
             "reasoning": "%s %s" % (ans.mode, ans.constrained), "source": "model-json"}]
"#;

struct Generated {
    personas: Vec<Persona>,
    records: Vec<ppol::testing::mock_server::MockRequestRecord>,
    bodies: Vec<Value>,
}

async fn generate(
    format: MockResponseFormat,
    rules: Vec<MockRule>,
    program: &Path,
    n: usize,
) -> Generated {
    let script = MockScript {
        rules,
        default: MockReply::text("fine"),
        ..Default::default()
    };
    let options = MockOptions {
        strict: MockStrictness {
            response_format: format,
            ..MockStrictness::default()
        },
        ..MockOptions::default()
    };
    let server = serve_with(script, options).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let llm = tmp.path().join("llm.toml");
    std::fs::write(
        &llm,
        format!(
            "[llm]\nmax_retries = 2\nbackoff_base_ms = 1\nbackoff_max_ms = 5\n[llm.default]\n\
             provider = \"openai\"\nmodel = \"mock-model\"\nbase_url = \"{}\"\n",
            server.base_url()
        ),
    )
    .unwrap();
    let out = tmp.path().join("out.jsonl");
    let args: Vec<String> = vec![
        "generate".into(),
        "--program".into(),
        program.display().to_string(),
        "--task".into(),
        "Exchange the t-shirt of order #W7209932 for a blue one.".into(),
        "-n".into(),
        n.to_string(),
        "--llm".into(),
        llm.display().to_string(),
        "-o".into(),
        out.display().to_string(),
    ];
    let res = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_ppol(&args)
    })
    .await
    .unwrap();
    assert_eq!(res.0, 0, "{}", res.2);
    let personas = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let g = Generated {
        personas,
        records: server.records(),
        bodies: server.bodies(),
    };
    server.stop();
    g
}

/// (response_format, status) of the requests whose body contains `marker`, in order.
fn formats(g: &Generated, marker: &str) -> Vec<(Option<String>, Option<u16>)> {
    g.bodies
        .iter()
        .zip(&g.records)
        .filter(|(b, _)| b.to_string().contains(marker))
        .map(|(_, r)| (r.response_format.clone(), r.status))
        .collect()
}

fn rule(contains: &str, reply: &str) -> MockRule {
    MockRule {
        contains: Some(contains.into()),
        reply: MockReply::text(reply),
        ..Default::default()
    }
}

fn some(s: &str) -> Option<String> {
    Some(s.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_program_schema_reaches_the_endpoint_in_the_shape_it_takes() {
    let tmp = tempfile::tempdir().unwrap();
    let program = tmp.path().join("asks_json.py");
    std::fs::write(&program, PROGRAM).unwrap();
    let answer = || vec![rule("Q?", r#"{"colour": "blue"}"#)];
    let cases = [
        (
            MockResponseFormat::Any,
            vec![(some("json_schema"), Some(200))],
            "json_schema True",
        ),
        (
            MockResponseFormat::LlamaCppPython,
            vec![
                (some("json_schema"), Some(500)),
                (some("json_object+schema"), Some(200)),
            ],
            "json_object True",
        ),
        (
            MockResponseFormat::None,
            vec![
                (some("json_schema"), Some(400)),
                (some("json_object+schema"), Some(400)),
                (None, Some(200)),
            ],
            "unconstrained False",
        ),
    ];
    for (format, expected, told) in cases {
        let g = generate(format, answer(), &program, 1).await;
        assert_eq!(formats(&g, "Q?"), expected, "{format:?}");
        // a request without a schema carries no response_format
        assert_eq!(
            formats(&g, "plain question"),
            vec![(None, Some(200))],
            "{format:?}"
        );
        let p = &g.personas[0];
        assert_eq!(p.reasoning.as_deref(), Some(told), "{format:?}");
        assert_eq!(p.text, r#"{"colour": "blue"}"#);
        assert_eq!(p.source.as_deref(), Some("model-json"));
        // the program's schema is what the endpoint got
        let body = g
            .bodies
            .iter()
            .zip(&g.records)
            .find(|(b, r)| b.to_string().contains("Q?") && r.status == Some(200))
            .unwrap()
            .0;
        let sent = match format {
            MockResponseFormat::Any => &body["response_format"]["json_schema"]["schema"],
            MockResponseFormat::LlamaCppPython => &body["response_format"]["schema"],
            MockResponseFormat::None => &Value::Null,
        };
        if format != MockResponseFormat::None {
            assert_eq!(sent["properties"]["colour"]["maxLength"], 20, "{body}");
        } else {
            assert!(body.get("response_format").is_none(), "{body}");
        }
    }
}

fn population(n: usize) -> String {
    let names = ["terse", "skeptical", "frustrated", "ambiguous"];
    json!({"personas": (0..n).map(|i| json!({
        "persona_id": format!("p{i}"),
        "description": format!("Person {i} is in a hurry."),
        "axis_placement": names.iter().enumerate().map(|(j, k)| (k.to_string(), json!((i >> j) & 1 == 1))).collect::<serde_json::Map<_, _>>(),
        "reasoning": "Plausible.",
    })).collect::<Vec<_>>()})
    .to_string()
}

const INSTRUCTION: &str =
    "You are in a hurry and type short messages without greetings or punctuation.";

#[tokio::test(flavor = "multi_thread")]
async fn two_stage_personas_say_whether_they_are_model_json_or_repaired() {
    let seed = root().join("seeds/two_stage_llm.py");
    let instruction = json!({ "instruction": INSTRUCTION }).to_string();
    // valid JSON from both stages, on an endpoint that constrains (llama-cpp-python's shape)
    let g = generate(
        MockResponseFormat::LlamaCppPython,
        vec![
            rule("Invent exactly", &population(2)),
            rule("roleplay instruction", &instruction),
        ],
        &seed,
        2,
    )
    .await;
    let sources: Vec<_> = g.personas.iter().map(|p| p.source.as_deref()).collect();
    assert_eq!(sources, [Some("model-json"); 2]);
    assert_eq!(g.personas[0].text, INSTRUCTION);
    assert_eq!(
        formats(&g, "Invent exactly"),
        [
            (some("json_schema"), Some(500)),
            (some("json_object+schema"), Some(200))
        ]
    );
    assert!(formats(&g, "roleplay instruction")
        .iter()
        .all(|f| *f == (some("json_object+schema"), Some(200))));
    let body = g
        .bodies
        .iter()
        .find(|b| {
            b.to_string().contains("Invent exactly")
                && b["response_format"]["type"] == "json_object"
        })
        .unwrap();
    let people = &body["response_format"]["schema"]["properties"]["personas"];
    assert_eq!(people["maxItems"], 2);
    assert_eq!(
        people["items"]["properties"]["axis_placement"]["properties"]["terse"],
        json!({"type": "boolean"})
    );

    // prose and a malformed population on an endpoint that takes no schema: repaired
    let malformed = format!(
        "Sure! Here they are:\n```json\n{}\n```",
        population(2).replace('"', "'")
    );
    let g = generate(
        MockResponseFormat::None,
        vec![
            rule("Invent exactly", &malformed),
            rule("roleplay instruction", INSTRUCTION),
        ],
        &seed,
        2,
    )
    .await;
    let sources: Vec<_> = g.personas.iter().map(|p| p.source.as_deref()).collect();
    assert_eq!(sources, [Some("repaired"); 2]);
    assert_eq!(g.personas[1].persona_id, "p1");
    assert_eq!(g.personas[1].text, INSTRUCTION);
}

#[tokio::test(flavor = "multi_thread")]
async fn direct_prompt_personas_say_where_they_came_from() {
    let seed = root().join("seeds/direct_prompt.py");
    let persona = |id: &str| {
        json!({"persona_id": id, "description": "Busy.", "reasoning": "Differs.",
               "text": format!("{INSTRUCTION} {id}")})
    };
    let good = json!({"personas": [persona("a"), persona("b")]}).to_string();
    let g = generate(
        MockResponseFormat::Any,
        vec![rule("different personas for this customer", &good)],
        &seed,
        3,
    )
    .await;
    let sources: Vec<_> = g.personas.iter().map(|p| p.source.as_deref()).collect();
    assert_eq!(
        sources,
        [Some("model-json"), Some("model-json"), Some("fallback")]
    );
    assert_eq!(
        formats(&g, "different personas for this customer"),
        [(some("json_schema"), Some(200))]
    );
    let prose = format!("1. {INSTRUCTION} She checks every detail twice before agreeing to anything the agent says.\n\n2. {INSTRUCTION} He is calm and polite, and answers every question the agent asks precisely.");
    let g = generate(
        MockResponseFormat::Any,
        vec![rule("different personas for this customer", &prose)],
        &seed,
        2,
    )
    .await;
    let sources: Vec<_> = g.personas.iter().map(|p| p.source.as_deref()).collect();
    assert_eq!(sources, [Some("repaired"); 2]);
}
