//! Interoperability with real OpenAI-compatible servers (llama.cpp / llama-cpp-python, vLLM,
//! Ollama, OpenAI), reproduced against the mock server: what ppol sends, what it recovers from
//! weak models, and how it survives servers that refuse, stall, overflow or never stop.
//! See: the issues "Real models in the loop", "Real models (2)" and "Nothing lost, nothing
//! escapes" (LLM client).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ppol::dialogue::{Role, ToolCall, Turn};
use ppol::llm::{CallRole, ChatModel, ChatRequest, LlmClient, LlmConfig, ModelSpec, ToolSpec};
use ppol::simulate::episode::record::EpisodeStatus;
use ppol::simulate::episode::runner::{load_domain, Backend, Tau2Runner};
use ppol::simulate::episode::EpisodeRunner;
use ppol::testing::mock_server::{
    serve, serve_with, MockOptions, MockReply, MockRule, MockScript, MockServer,
};
use ppol::Error;
use serde_json::{json, Value};

use crate::util::{root, run_ppol};

fn mock_config(base_url: &str) -> LlmConfig {
    let mut spec = ModelSpec::openai("mock-model", Some(base_url.to_string()));
    spec.api_key_env = "PPOL_TEST_KEY_THAT_IS_NEVER_SET".to_string();
    spec.timeout_s = 5.0;
    let mut cfg = LlmConfig::with_default(spec);
    cfg.max_retries = 3;
    cfg.backoff_base_ms = 5;
    cfg.backoff_max_ms = 20;
    cfg
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "get_order_details".into(),
        description: "Get an order".into(),
        parameters: json!({"type": "object", "properties": {"order_id": {"type": "string"}}}),
    }]
}

fn agent_request(text: &str) -> ChatRequest {
    let mut r = ChatRequest::new(
        CallRole::Agent,
        vec![
            Turn::new(Role::System, "You are an agent."),
            Turn::new(Role::User, text),
        ],
    );
    r.tools = tools();
    r
}

fn message(e: Error) -> String {
    match e {
        Error::Llm { message, .. } => message,
        other => panic!("expected Error::Llm, got {other:?}"),
    }
}

/// An LLM backend on one client for both sides (the mock tells them apart by `has_tools`).
fn llm_backend(client: &LlmClient) -> Backend {
    let model: Arc<dyn ChatModel> = Arc::new(client.clone());
    Backend::Llm {
        user: model.clone(),
        agent: model,
        user_temperature: Some(0.0),
        agent_temperature: None,
    }
}

// See: "Real models in the loop" — `content: null` beside tool calls is HTTP 500 on
// llama-cpp-python, and without `tool_choice` its function-calling format ignores the tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_turns_carry_empty_content_and_tools_come_with_tool_choice_auto() {
    let server = serve(MockScript::always(MockReply::text("ok")))
        .await
        .unwrap();
    let client = LlmClient::from_config(&mock_config(&server.base_url())).unwrap();
    let mut req = agent_request("Where is #W1?");
    req.messages.push(Turn {
        role: Role::Assistant,
        content: String::new(),
        tool_calls: vec![ToolCall {
            id: "c1".into(),
            name: "get_order_details".into(),
            arguments: json!({"order_id": "#W1"}),
        }],
        tool_call_id: None,
    });
    req.messages.push(Turn {
        role: Role::Tool,
        content: "{\"status\": \"delivered\"}".into(),
        tool_calls: vec![],
        tool_call_id: Some("c1".into()),
    });
    client.chat(&req).await.unwrap();
    let body = server.last_body().unwrap();
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["messages"][2]["content"], "");
    assert!(body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["content"].is_string()));
    // No tools, no tool_choice.
    client
        .chat(&ChatRequest::new(
            CallRole::UserSim,
            vec![Turn::new(Role::User, "hi")],
        ))
        .await
        .unwrap();
    assert!(server.last_body().unwrap().get("tool_choice").is_none());
}

// See: "Real models (2)" — the agent's requests carried no max_tokens and the server filled its
// context; every request is now bounded by the role's default unless the spec says otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_bounded_by_a_role_default_or_the_spec() {
    let server = serve(MockScript::always(MockReply::text("ok")))
        .await
        .unwrap();
    let mut cfg = mock_config(&server.base_url());
    cfg.roles.insert(
        CallRole::Mutator,
        ppol::llm::ModelPatch {
            max_tokens: Some(77),
            ..Default::default()
        },
    );
    let client = LlmClient::from_config(&cfg).unwrap();
    for (role, want) in [
        (CallRole::UserSim, 300),
        (CallRole::Agent, 600),
        (CallRole::Reflection, 2000),
        (CallRole::Mutator, 77),
    ] {
        client
            .chat(&ChatRequest::new(role, vec![Turn::new(Role::User, "hi")]))
            .await
            .unwrap();
        assert_eq!(server.last_body().unwrap()["max_tokens"], want, "{role:?}");
    }
    // A request's own cap wins.
    let mut r = ChatRequest::new(CallRole::Generator, vec![Turn::new(Role::User, "hi")]);
    r.max_tokens = Some(5);
    client.chat(&r).await.unwrap();
    assert_eq!(server.last_body().unwrap()["max_tokens"], 5);
}

// See: "Real models in the loop" — tool calls that come back written in the text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_written_in_the_text_are_recovered() {
    let server = serve(MockScript::queue([
        MockReply::text(
            "I will look it up.\n```json\n{\"name\": \"get_order_details\", \"arguments\": {\"order_id\": \"#W1\"}}\n```",
        ),
        MockReply::text("functions.get_order_details:\n{\"order_id\": \"#W2\"}"),
        MockReply::text("Your order {#W3} is on its way."),
    ]))
    .await
    .unwrap();
    let client = LlmClient::from_config(&mock_config(&server.base_url())).unwrap();
    let r = client.chat(&agent_request("Where is #W1?")).await.unwrap();
    assert_eq!(r.message.tool_calls.len(), 1);
    assert_eq!(r.message.tool_calls[0].name, "get_order_details");
    assert_eq!(
        r.message.tool_calls[0].arguments,
        json!({"order_id": "#W1"})
    );
    assert_eq!(r.message.content, "I will look it up.");
    assert!(
        r.notes.iter().any(|n| n.contains("recovered 1 tool call")),
        "{:?}",
        r.notes
    );
    let r = client.chat(&agent_request("And #W2?")).await.unwrap();
    assert_eq!(
        r.message.tool_calls[0].arguments,
        json!({"order_id": "#W2"})
    );
    // Plain text stays text.
    let r = client.chat(&agent_request("And #W3?")).await.unwrap();
    assert!(r.message.tool_calls.is_empty());
    assert!(r.notes.is_empty());
}

// See: "Real models in the loop" — invalid tool-call JSON is answered to the agent as a tool
// error (τ²'s `Error: ...`), the agent tries again, and the episode goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_tool_json_is_a_tool_error_the_agent_can_recover_from() {
    let script = MockScript {
        rules: vec![
            MockRule {
                // The agent's first try: arguments that are not JSON.
                has_tools: Some(true),
                times: Some(1),
                reply: MockReply {
                    tool_calls: vec![ppol::llm::ScriptToolCall {
                        id: Some("bad".into()),
                        name: "find_customer_by_email".into(),
                        arguments: json!("{\"email\": \"ada.moss@example.com\""),
                    }],
                    ..MockReply::default()
                },
                ..Default::default()
            },
            MockRule {
                has_tools: Some(true),
                contains: Some("are not valid JSON".into()),
                times: Some(1),
                reply: MockReply::tool_call(
                    "find_customer_by_email",
                    json!({"email": "ada.moss@example.com"}),
                ),
                ..Default::default()
            },
            MockRule {
                has_tools: Some(true),
                reply: MockReply::text("Found you, Ada. Anything else?"),
                ..Default::default()
            },
            MockRule {
                contains: Some("Anything else".into()),
                reply: MockReply::text("no thanks ###STOP###"),
                ..Default::default()
            },
        ],
        default: MockReply::text("hi, please cancel order #P1001, i'm ada.moss@example.com"),
        ..Default::default()
    };
    let server = serve(script).await.unwrap();
    let client = LlmClient::from_config(&mock_config(&server.base_url())).unwrap();
    let runner = Tau2Runner::new(load_domain("demo", None).unwrap(), llm_backend(&client), 5);
    let ep = runner.run("0", None, 0, 1).await;
    assert_eq!(ep.status, EpisodeStatus::Ok, "{:?}", ep.error);
    let tool_turns: Vec<&Turn> = ep
        .conversation
        .iter()
        .filter(|t| t.role == Role::Tool)
        .collect();
    assert_eq!(tool_turns.len(), 2, "{:#?}", ep.conversation);
    assert!(tool_turns[0]
        .content
        .starts_with("Error: the arguments of find_customer_by_email are not valid JSON"));
    assert_eq!(tool_turns[0].tool_call_id.as_deref(), Some("bad"));
    assert!(
        !tool_turns[1].content.starts_with("Error"),
        "{}",
        tool_turns[1].content
    );
    assert!(
        ep.notes.iter().any(|n| n.contains("not a JSON object")),
        "{:?}",
        ep.notes
    );
    // The invalid call was not retried at the HTTP level: the agent saw the error instead.
    let bodies = server.bodies();
    assert!(bodies.iter().any(|b| b["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["role"] == "tool" && m["content"].as_str().unwrap().starts_with("Error:"))));
}

// See: "Real models in the loop" — a 400 "maximum context length" ended the episode; the window
// is now learned from the error text and the history trimmed, with a note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_length_400_is_learned_and_the_history_trimmed() {
    let too_long = r#"{"error":{"message":"This model's maximum context length is 1024 tokens. However, you requested 2400 tokens (2300 in the messages, 100 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
    let server = serve(
        MockScript::queue([MockReply {
            status: Some(400),
            raw_body: Some(too_long.into()),
            ..MockReply::default()
        }])
        .with_default(MockReply::text("fine")),
    )
    .await
    .unwrap();
    let client = LlmClient::from_config(&mock_config(&server.base_url())).unwrap();
    let mut messages = vec![
        Turn::new(Role::System, "policy"),
        Turn::new(Role::User, "the task: cancel #W1"),
        Turn::new(Role::Assistant, "ok"),
    ];
    for k in 0..10 {
        messages.push(Turn::new(
            Role::User,
            format!("user {k} {}", "x".repeat(800)),
        ));
        messages.push(Turn::new(
            Role::Assistant,
            format!("agent {k} {}", "y".repeat(800)),
        ));
    }
    messages.push(Turn::new(Role::User, "latest question"));
    let mut req = ChatRequest::new(CallRole::Agent, messages.clone());
    req.max_tokens = Some(100);
    let r = client.chat(&req).await.unwrap();
    assert_eq!(r.message.content, "fine");
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("context window (1024 tokens)")),
        "{:?}",
        r.notes
    );
    assert!(
        r.notes.iter().any(|n| n.contains("oldest message")),
        "{:?}",
        r.notes
    );
    assert_eq!(client.context_window(CallRole::Agent), Some(1024));
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 2);
    let sent = bodies[1]["messages"].as_array().unwrap();
    assert!(sent.len() < messages.len());
    assert_eq!(sent[0]["content"], "policy");
    assert_eq!(sent[1]["content"], "the task: cancel #W1");
    assert_eq!(sent.last().unwrap()["content"], "latest question");
    // Known now: the next long request is trimmed before it is sent (no second 400).
    let r = client.chat(&req).await.unwrap();
    assert!(r.notes.iter().any(|n| n.contains("oldest message")));
    assert_eq!(server.requests(), 3);
    // A configured window does the same without any 400.
    let mut cfg = mock_config(&server.base_url());
    cfg.default.context_window = Some(1024);
    let fresh = LlmClient::from_config(&cfg).unwrap();
    fresh.chat(&req).await.unwrap();
    assert!(
        server.last_body().unwrap()["messages"]
            .as_array()
            .unwrap()
            .len()
            < messages.len()
    );
    // What cannot fit says what to change, and nothing is sent.
    let mut huge = ChatRequest::new(
        CallRole::Agent,
        vec![
            Turn::new(Role::System, "p".repeat(20_000)),
            Turn::new(Role::User, "hi"),
        ],
    );
    huge.max_tokens = Some(100);
    let before = server.requests();
    let msg = message(fresh.chat(&huge).await.unwrap_err());
    assert!(
        msg.contains("context window of 1024") && msg.contains("n_ctx"),
        "{msg}"
    );
    assert_eq!(server.requests(), before);
}

// See: "Real models (2)" — a server restarted 20 s later: refused connections burned the retry
// budget in ~6 s. They are now waited out (bounded, shared by all callers), then fail fast.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_that_comes_back_is_waited_for() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let base = format!("http://127.0.0.1:{port}/v1");
    let mut cfg = mock_config(&base);
    cfg.endpoint_wait_s = 20.0;
    cfg.default.deadline_s = Some(30.0);
    let client = LlmClient::from_config(&cfg).unwrap();
    let calls: Vec<_> = (0..3)
        .map(|i| {
            let c = client.clone();
            tokio::spawn(async move {
                c.chat(&ChatRequest::new(
                    CallRole::UserSim,
                    vec![Turn::new(Role::User, format!("hello {i}"))],
                ))
                .await
            })
        })
        .collect();
    // The server comes up 1.5 s later on that port.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let server = serve_with(
        MockScript::default(),
        MockOptions {
            addr: ([127, 0, 0, 1], port).into(),
            ..MockOptions::default()
        },
    )
    .await
    .unwrap();
    for c in calls {
        let r = c.await.unwrap().unwrap();
        assert!(r.message.content.starts_with("echo: hello"));
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("for the endpoint to accept connections")),
            "{:?}",
            r.notes
        );
    }
    let acc = client.accounting();
    assert_eq!(acc.total.failures, 0);
    assert_eq!(acc.total.retries, 0, "a refused connection is not a retry");
    server.stop();

    // Down for longer than endpoint_wait_s: the first call waits and fails, later calls fail
    // at once.
    let mut cfg = mock_config(&base);
    cfg.endpoint_wait_s = 0.8;
    let client = LlmClient::from_config(&cfg).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let msg = message(
        client
            .chat(&ChatRequest::new(
                CallRole::UserSim,
                vec![Turn::new(Role::User, "a")],
            ))
            .await
            .unwrap_err(),
    );
    assert!(msg.contains("refused connections for"), "{msg}");
    assert!(started.elapsed() >= Duration::from_millis(700));
    let started = Instant::now();
    let msg = message(
        client
            .chat(&ChatRequest::new(
                CallRole::UserSim,
                vec![Turn::new(Role::User, "b")],
            ))
            .await
            .unwrap_err(),
    );
    assert!(msg.contains("fails at once"), "{msg}");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
}

/// A server whose every answer comes a minute late.
async fn server_that_never_answers() -> MockServer {
    serve(MockScript::always(
        MockReply::text("late").with_delay(60_000),
    ))
    .await
    .unwrap()
}

// See: "Nothing lost, nothing escapes" — a server that never answers cost 5 × 60 s per call;
// the per-call deadline bounds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_deadline_bounds_a_server_that_never_answers() {
    let server = server_that_never_answers().await;
    let mut cfg = mock_config(&server.base_url());
    cfg.default.timeout_s = 1.0;
    cfg.default.deadline_s = Some(2.5);
    cfg.max_retries = 10;
    let client = LlmClient::from_config(&cfg).unwrap();
    let started = Instant::now();
    let msg = message(
        client
            .chat(&ChatRequest::new(
                CallRole::UserSim,
                vec![Turn::new(Role::User, "a")],
            ))
            .await
            .unwrap_err(),
    );
    let took = started.elapsed();
    assert!(msg.contains("deadline of 2.5 s"), "{msg}");
    assert!(took < Duration::from_millis(3500), "{took:?}");
    assert!(client.accounting().total.attempts <= 3);
}

// See: "Real models in the loop" — on stock llama-cpp-python a tool call ignores max_tokens and
// SmolLM2 wrote one argument for 352 s; the timeout of a request with tools says what bounds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_request_that_times_out_names_the_bound_to_set() {
    let server = server_that_never_answers().await;
    let mut cfg = mock_config(&server.base_url());
    cfg.default.timeout_s = 0.3;
    cfg.max_retries = 0;
    let client = LlmClient::from_config(&cfg).unwrap();
    let msg = message(client.chat(&agent_request("a")).await.unwrap_err());
    assert!(msg.contains("no answer within 0.300 s"), "{msg}");
    assert!(
        msg.contains("tool_argument_max_chars (and stop) under [llm.roles.agent]"),
        "{msg}"
    );
    // without tools, or with the bound set, the timeout is only a timeout
    let plain = ChatRequest::new(CallRole::Agent, vec![Turn::new(Role::User, "a")]);
    let msg = message(client.chat(&plain).await.unwrap_err());
    assert!(
        msg.contains("no answer within") && !msg.contains("tool_argument_max_chars"),
        "{msg}"
    );
    cfg.default.tool_argument_max_chars = Some(200);
    let bounded = LlmClient::from_config(&cfg).unwrap();
    let msg = message(bounded.chat(&agent_request("a")).await.unwrap_err());
    assert!(
        msg.contains("no answer within") && !msg.contains("tool_argument_max_chars"),
        "{msg}"
    );
}

// See: "Real models (2)" — at temperature 0 with a fixed seed every retry was identical; a retry
// after a failure of the content changes seed and temperature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_after_empty_answers_change_seed_and_temperature() {
    let server = serve(
        MockScript::queue([MockReply::empty(), MockReply::empty()])
            .with_default(MockReply::text("now")),
    )
    .await
    .unwrap();
    let client = LlmClient::from_config(&mock_config(&server.base_url())).unwrap();
    let mut req = ChatRequest::new(CallRole::UserSim, vec![Turn::new(Role::User, "a")]);
    req.seed = Some(7);
    req.temperature = Some(0.0);
    let r = client.chat(&req).await.unwrap();
    assert_eq!(r.message.content, "now");
    let b = server.bodies();
    let seeds: Vec<&Value> = b.iter().map(|b| &b["seed"]).collect();
    let temps: Vec<f64> = b
        .iter()
        .map(|b| b["temperature"].as_f64().unwrap())
        .collect();
    assert_eq!(seeds, [&json!(7), &json!(8), &json!(9)]);
    assert_eq!(temps[0], 0.0);
    assert!(temps[1] >= 0.39 && temps[2] >= 0.69, "{temps:?}");
    assert_eq!(r.notes.len(), 2, "{:?}", r.notes);
}

// See: "Nothing lost, nothing escapes" — an endless chunked body was buffered without a cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_response_body_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ = s.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = format!("{:x}\r\n{}\r\n", 65536, " ".repeat(65536));
                loop {
                    if s.write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                    counter.fetch_add(65536, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    let mut cfg = mock_config(&format!("http://{addr}/v1"));
    cfg.max_response_bytes = 1 << 20;
    let client = LlmClient::from_config(&cfg).unwrap();
    let started = Instant::now();
    let msg = message(
        client
            .chat(&ChatRequest::new(
                CallRole::UserSim,
                vec![Turn::new(Role::User, "a")],
            ))
            .await
            .unwrap_err(),
    );
    assert!(
        msg.contains("exceeded 1048576 bytes") && msg.contains("not retried"),
        "{msg}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(client.accounting().total.attempts, 1);
    // The server was stopped reading long before a gigabyte.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(sent.load(std::sync::atomic::Ordering::Relaxed) < 64 << 20);
}

// See: "Real models (2)" — the 135M user simulator answered as the agent and the episode was
// fingerprinted like any other. It is asked once more, then flagged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_that_speaks_as_the_agent_is_retried_then_flagged() {
    let agent = MockRule {
        has_tools: Some(true),
        reply: MockReply::text("Could you give me your email?"),
        ..Default::default()
    };
    let script = MockScript {
        rules: vec![agent.clone()],
        queue: vec![
            // Turn 1: agent voice, then a customer's reply on the retry.
            MockReply::text("As a customer service representative, I can help you."),
            MockReply::text("hi, cancel #P1001 please"),
            // Turn 2: agent voice twice: kept and flagged.
            MockReply::text("How can I assist you today?"),
            MockReply::text("Is there anything else I can help you with?"),
        ],
        default: MockReply::text("ok bye ###STOP###"),
    };
    let server = serve(script).await.unwrap();
    let client = LlmClient::from_config(&mock_config(&server.base_url())).unwrap();
    let runner = Tau2Runner::new(load_domain("demo", None).unwrap(), llm_backend(&client), 5);
    let ep = runner.run("0", None, 0, 3).await;
    assert_eq!(ep.status, EpisodeStatus::Ok, "{:?}", ep.error);
    let users: Vec<&str> = ep
        .conversation
        .iter()
        .filter(|t| t.role == Role::User)
        .map(|t| t.content.as_str())
        .collect();
    assert_eq!(
        users,
        [
            "hi, cancel #P1001 please",
            "Is there anything else I can help you with?",
            "ok bye"
        ]
    );
    assert_eq!(ep.role_confusion, 1);
    assert!(ep.role_confused());
    assert!(
        ep.notes.iter().any(|n| n.contains("asked again once")),
        "{:?}",
        ep.notes
    );
    assert!(
        ep.notes.iter().any(|n| n.contains("flagged")),
        "{:?}",
        ep.notes
    );
    // The retry reminded the model of its role, with another seed.
    let retry = &server.bodies()[1];
    assert!(retry["messages"][0]["content"]
        .as_str()
        .unwrap()
        .ends_with("Write only the customer's next message."));
    assert_ne!(retry["seed"], server.bodies()[0]["seed"]);
    let line = serde_json::to_value(&ep).unwrap();
    assert_eq!(line["role_confusion"], 1);
}

// See: "Real models (2)" — an agent that only calls tools (or answers empty) is asked once
// without tools for its message; the episode does not end in error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_stuck_in_tool_calls_is_asked_without_tools() {
    let script = MockScript {
        rules: vec![
            MockRule {
                has_tools: Some(true),
                reply: MockReply::tool_call("get_order_details", json!({"order_id": "#P1001"})),
                ..Default::default()
            },
            MockRule {
                contains: Some("Tools are not available".into()),
                times: Some(1),
                reply: MockReply::text("Your order #P1001 is pending."),
                ..Default::default()
            },
            MockRule {
                contains: Some("Tools are not available".into()),
                reply: MockReply::empty(),
                ..Default::default()
            },
        ],
        queue: vec![MockReply::text("status of #P1001?")],
        default: MockReply::text("thanks ###STOP###"),
    };
    let server = serve(script).await.unwrap();
    let mut cfg = mock_config(&server.base_url());
    cfg.max_retries = 0;
    let client = LlmClient::from_config(&cfg).unwrap();
    let runner = Tau2Runner::new(load_domain("demo", None).unwrap(), llm_backend(&client), 5);
    let ep = runner.run("0", None, 0, 3).await;
    assert_eq!(ep.status, EpisodeStatus::Ok, "{:?}", ep.error);
    let texts: Vec<&str> = ep
        .conversation
        .iter()
        .filter(|t| t.role == Role::Assistant && t.tool_calls.is_empty())
        .map(|t| t.content.as_str())
        .collect();
    assert!(
        texts.contains(&"Your order #P1001 is pending."),
        "{texts:?}"
    );
    // The identical call is made once, not twelve times.
    let calls = ep
        .conversation
        .iter()
        .filter(|t| !t.tool_calls.is_empty())
        .count();
    assert_eq!(calls, 1, "{:#?}", ep.conversation);
    assert!(
        ep.notes
            .iter()
            .any(|n| n.contains("repeated the identical call")),
        "{:?}",
        ep.notes
    );
    // The fallback request offered no tools and kept the tool result in its system prompt.
    let fallback = server
        .bodies()
        .into_iter()
        .find(|b| {
            b["messages"][0]["content"]
                .as_str()
                .unwrap()
                .contains("Tools are not available")
        })
        .unwrap();
    assert!(fallback.get("tools").is_none());
    assert!(fallback["messages"][0]["content"]
        .as_str()
        .unwrap()
        .contains("get_order_details:"));
}

// See: "Real models in the loop" — the record's backend repeated the role list twice.
#[test]
fn the_backend_names_each_role_once() {
    let mut cfg = mock_config("http://127.0.0.1:9/v1");
    let mut agent = cfg.default.clone();
    agent.model = "tools-model".into();
    agent.base_url = Some("http://127.0.0.1:10/v1".into());
    cfg.set_role(CallRole::Agent, &agent);
    let client = LlmClient::from_config(&cfg).unwrap();
    let d = llm_backend(&client).describe();
    assert_eq!(
        d,
        "user=openai:mock-model@http://127.0.0.1:9/v1 agent=openai:tools-model@http://127.0.0.1:10/v1"
    );
    let same = LlmClient::from_config(&mock_config("http://127.0.0.1:9/v1")).unwrap();
    assert_eq!(
        llm_backend(&same).describe(),
        "openai:mock-model@http://127.0.0.1:9/v1"
    );
}

// See: "One path through the code" — `--llm FILE` rejected the `[llm]`-wrapped form the README
// shows for `--config`, and its unknown-key error did not name the key.
#[test]
fn llm_files_take_the_run_config_form_and_name_unknown_keys() {
    let dir = tempfile::tempdir().unwrap();
    let wrapped = dir.path().join("run.toml");
    std::fs::write(
        &wrapped,
        r#"
[search]
iterations = 3

[llm]
max_concurrency = 1

[llm.default]
provider = "openai"
model = "smollm2-chat"
base_url = "http://127.0.0.1:8000/v1"
context_window = 8192

[llm.roles.agent]
model = "smollm2-tools"
base_url = "http://127.0.0.1:8001/v1"

[budget]
max_usd = 2.5
"#,
    )
    .unwrap();
    let cfg = LlmConfig::from_cli_value(wrapped.to_str().unwrap()).unwrap();
    assert_eq!(cfg.max_concurrency, 1);
    assert_eq!(cfg.spec(CallRole::Agent).model, "smollm2-tools");
    assert_eq!(cfg.spec(CallRole::UserSim).context_window, Some(8192));
    assert_eq!(cfg.budget.max_usd, Some(2.5));

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[llm.default]\nmodel = \"m\"\ntemprature = 0.2\n").unwrap();
    match LlmConfig::from_cli_value(bad.to_str().unwrap()).unwrap_err() {
        Error::Config { key, message } => {
            assert_eq!(key, "llm.default.temprature");
            assert!(message.contains("temperature"), "{message}");
        }
        e => panic!("{e:?}"),
    }
    // Through the command line: the key is named and the exit code says it failed.
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--llm",
        bad.to_str().unwrap(),
        "-o",
        dir.path().join("o.jsonl").to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("llm.default.temprature"), "{err}");
    // The local server's printed section (python/ppol_rs/local_server.py) loads as is.
    let section = dir.path().join("local.toml");
    std::fs::write(
        &section,
        "[llm]\nmax_concurrency = 1\nmax_retries = 2\n\n[llm.default]\nprovider = \"openai\"\nmodel = \"smollm2-chat\"\nbase_url = \"http://127.0.0.1:1/v1\"\ncontext_window = 8192\nmax_concurrency = 1\ntimeout_s = 180\n\n[llm.roles.agent]\nmodel = \"smollm2-tools\"\nbase_url = \"http://127.0.0.1:2/v1\"\ntool_argument_max_chars = 200\nstop = [\"functions.\"]\n",
    )
    .unwrap();
    let cfg = LlmConfig::from_toml_file(&section).unwrap();
    assert_eq!(cfg.spec(CallRole::Agent).max_concurrency, Some(1));
    assert_eq!(cfg.spec(CallRole::Agent).tool_argument_max_chars, Some(200));
    assert_eq!(
        cfg.spec(CallRole::Agent).stop,
        vec!["functions.".to_string()]
    );
    assert_eq!(cfg.spec(CallRole::UserSim).tool_argument_max_chars, None);
    assert!(cfg.spec(CallRole::UserSim).stop.is_empty());
    // `tool_argument_max_chars = 0` lifts every bound (unset bounds identifier-like ones).
    let lifted = dir.path().join("lifted.toml");
    std::fs::write(
        &lifted,
        "[llm.default]\nmodel = \"m\"\n[llm.roles.agent]\ntool_argument_max_chars = 0\n",
    )
    .unwrap();
    let cfg = LlmConfig::from_toml_file(&lifted).unwrap();
    assert_eq!(
        cfg.spec(CallRole::Agent).tool_argument_bound(),
        ppol::llm::config::ToolArgumentBound::Unbounded
    );
    assert!(matches!(
        cfg.spec(CallRole::UserSim).tool_argument_bound(),
        ppol::llm::config::ToolArgumentBound::Identifiers(_)
    ));
    // A bad value names its key.
    let f = dir.path().join("bad-bound.toml");
    std::fs::write(
        &f,
        "[llm.default]\nmodel = \"m\"\n[llm.roles.agent]\nstop = [\"\"]\n",
    )
    .unwrap();
    let err = LlmConfig::from_toml_file(&f).unwrap_err().to_string();
    assert!(err.contains("llm.roles.agent.stop"), "{err}");
    assert!(root().join("python/ppol_rs/local_server.py").is_file());
}

/// An agent that calls tools forever is made to answer after `max_tool_rounds` rounds
/// (`episodes.max_tool_rounds`, `ppol episodes --max-tool-rounds`): each round is a request, so
/// the bound is what a slow model costs per turn.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_only_calls_tools_answers_after_max_tool_rounds() {
    let rounds_of = |max_tool_rounds: usize| async move {
        // a different call every round (an identical call repeated ends the round early)
        let rules = (0..40)
            .map(|i| MockRule {
                has_tools: Some(true),
                times: Some(1),
                reply: MockReply::tool_call(
                    "find_customer_by_email",
                    json!({"email": format!("user{i}@example.com")}),
                ),
                ..Default::default()
            })
            .collect();
        let script = MockScript {
            rules,
            // the user's turns, and the agent's answer once it must answer without tools
            default: MockReply::text("please cancel order #P1001, i'm ada.moss@example.com"),
            ..Default::default()
        };
        let server = serve(script).await.unwrap();
        let client = LlmClient::from_config(&mock_config(&server.base_url())).unwrap();
        let runner = Tau2Runner::new(load_domain("demo", None).unwrap(), llm_backend(&client), 2)
            .with_max_tool_rounds(max_tool_rounds);
        let ep = runner.run("0", None, 0, 1).await;
        assert_eq!(ep.status, EpisodeStatus::Ok, "{:?}", ep.error);
        let tool_turns = ep
            .conversation
            .iter()
            .filter(|t| t.role == Role::Tool)
            .count();
        (tool_turns, ep.notes)
    };
    let (two, notes) = rounds_of(2).await;
    let (twelve, _) = rounds_of(12).await;
    assert!(
        two < twelve,
        "{two} tool turns with 2 rounds, {twelve} with 12"
    );
    assert!(
        notes.iter().any(|n| n.contains("3 rounds of tool calls")),
        "{notes:?}"
    );
}

/// A mutator that answers every diff request with one SEARCH/REPLACE edit of
/// `seeds/offline_templates.py` (terser users), and everything else with a short critique.
fn terser_users_mutator() -> MockScript {
    let diff = "Terser users.\n<<<<<<< SEARCH\nPLACEMENT_WEIGHTS = {\"terse\": 0.5, \"skeptical\": 0.5, \"frustrated\": 0.5, \"ambiguous\": 0.5}\n=======\nPLACEMENT_WEIGHTS = {\"terse\": 0.8, \"skeptical\": 0.2, \"frustrated\": 0.4, \"ambiguous\": 0.5}\n>>>>>>> REPLACE\n";
    MockScript {
        rules: vec![MockRule {
            contains: Some("<<<<<<< SEARCH".into()),
            reply: MockReply::text(diff),
            ..Default::default()
        }],
        default: MockReply::text("The terse personas read as human."),
        ..Default::default()
    }
}

/// A mutator prompt that would not fit the model's context window is cut to fit — inspirations
/// and history first, the parent program never — and the log says so on every attempt. Before,
/// the whole prompt was sent: the server refused it (400, maximum context length) or clamped
/// the answer to what the window left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutator_prompts_are_cut_to_the_models_context_window() {
    use ppol::evolve::runlog::{read, Event};
    const WINDOW: u32 = 6000;
    let script = terser_users_mutator();
    let options = MockOptions {
        n_ctx: Some(u64::from(WINDOW)),
        ..Default::default()
    };
    let server = serve_with(script, options).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("run.toml");
    std::fs::write(
        &cfg,
        format!(
            "[run]\nname = \"window\"\n[search]\niterations = 6\nseed = 3\nseed_program = \"{}\"\n\
             [episodes]\nbackend = \"scripted\"\n[mutation]\nmode = \"llm\"\nedit_format = \"diff\"\nrewrite_after_failures = 99\n\
             [llm]\nmax_retries = 1\nbackoff_base_ms = 1\nbackoff_max_ms = 5\n\
             [llm.default]\nprovider = \"openai\"\nmodel = \"mock-model\"\nbase_url = \"{}\"\ncontext_window = {WINDOW}\n",
            root().join("seeds/offline_templates.py").display(),
            server.base_url()
        ),
    )
    .unwrap();
    let out = tmp.path().join("run");
    let (cfg_s, out_s) = (cfg.display().to_string(), out.display().to_string());
    let res = tokio::task::spawn_blocking(move || {
        run_ppol(&["evolve", "--config", &cfg_s, "--out", &out_s, "--quiet"])
    })
    .await
    .unwrap();
    assert_eq!(res.0, 0, "{}", res.2);
    let log = read(&out.join("log.jsonl")).unwrap();
    let mut fits = Vec::new();
    let mut failures = Vec::new();
    for r in &log {
        match &r.event {
            Event::CandidateEvaluated {
                mutation,
                prompt_fit,
                ..
            } if mutation == "diff" => fits.push(prompt_fit.clone().unwrap_or_default()),
            // a diff the program no longer matches (a parent that already has it) still
            // records how its prompt was fitted
            Event::CandidateFailed { failure, .. }
                if failure.stage == "mutation:diff-not-applied" =>
            {
                fits.push(failure.prompt_fit.clone())
            }
            Event::CandidateFailed { failure, .. } => failures.push(failure.clone()),
            _ => {}
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
    let stats = server.stats();
    assert_eq!(stats.statuses.get(&400), None, "{:?}", stats.statuses);
    // every mutator request left the answer its share of the window (the client lowers
    // `max_tokens` to what an over-long prompt leaves: a diff cut off mid-block)
    let reserve = ppol::evolve::mutation::completion_reserve(WINDOW, 8192);
    let mutator: Vec<u64> = server
        .bodies()
        .iter()
        .filter(|b| b.to_string().contains("<<<<<<< SEARCH"))
        .map(|b| b["max_tokens"].as_u64().unwrap_or(0))
        .collect();
    assert!(mutator.len() >= 4, "{mutator:?}");
    assert!(
        mutator.iter().all(|m| *m >= u64::from(reserve)),
        "{mutator:?} < {reserve}"
    );
    assert!(fits.len() >= 4, "{fits:?}");
    assert!(
        fits.iter().all(|f| f.starts_with(&format!(
            "context window {WINDOW} tokens: user prompt capped at"
        ))),
        "{fits:?}"
    );
    // once the archive offers inspirations, they are what gives way
    assert!(fits.iter().any(|f| f.contains("left out: ")), "{fits:?}");
    assert!(
        !fits.iter().any(|f| f.contains("still over")),
        "the parent fits in this window: {fits:?}"
    );
}

/// The mutator's completion cap: `[mutation] max_tokens` when set, else the mutator role's own
/// `[llm.roles.mutator] max_tokens`, else 8,192 — never `[llm.default] max_tokens` (sized for
/// chat turns). Before, `[mutation] max_tokens` always applied, with its default of 8,192,
/// so `[llm.roles.mutator] max_tokens` was silently ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mutator_role_caps_mutation_answers_unless_the_mutation_section_does() {
    let script = terser_users_mutator();
    let server = serve(script).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    for (name, mutation, role) in [
        ("role", "", "[llm.roles.mutator]\nmax_tokens = 321\n"),
        (
            "section",
            "max_tokens = 222\n",
            "[llm.roles.mutator]\nmax_tokens = 321\n",
        ),
        ("neither", "", ""),
    ] {
        let cfg = tmp.path().join(format!("{name}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "[run]\nname = \"{name}\"\n[search]\niterations = 2\nseed = 3\nseed_program = \"{}\"\n\
                 [episodes]\nbackend = \"scripted\"\n[mutation]\nmode = \"llm\"\nedit_format = \"diff\"\nreflection = false\n{mutation}\
                 [llm]\nmax_retries = 1\nbackoff_base_ms = 1\nbackoff_max_ms = 5\n\
                 [llm.default]\nprovider = \"openai\"\nmodel = \"mock-model\"\nbase_url = \"{}\"\nmax_tokens = 64\n{role}",
                root().join("seeds/offline_templates.py").display(),
                server.base_url()
            ),
        )
        .unwrap();
        let out = tmp.path().join(name);
        let (cfg_s, out_s) = (cfg.display().to_string(), out.display().to_string());
        let before = server.bodies().len();
        let res = tokio::task::spawn_blocking(move || {
            run_ppol(&["evolve", "--config", &cfg_s, "--out", &out_s, "--quiet"])
        })
        .await
        .unwrap();
        assert_eq!(res.0, 0, "{name}: {}", res.2);
        let caps: Vec<u64> = server.bodies()[before..]
            .iter()
            .filter(|b| b.to_string().contains("<<<<<<< SEARCH"))
            .map(|b| b["max_tokens"].as_u64().unwrap_or(0))
            .collect();
        assert!(!caps.is_empty(), "{name}: no mutation request");
        seen.push((name, caps));
    }
    assert_eq!(
        seen,
        [
            ("role", vec![321]),
            ("section", vec![222]),
            ("neither", vec![8192]),
        ]
    );
}
