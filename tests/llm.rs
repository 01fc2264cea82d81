//! LLM layer: client wrapper against the mock OpenAI-compatible server, config parsing,
//! scripted provider, response cache.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ppol::dialogue::{Role, ToolCall, Turn};
use ppol::llm::scripted::ScriptedReply;
use ppol::llm::{
    BaseUrl, CallRole, ChatModel, ChatModelProvider, ChatRequest, LlmClient, LlmConfig, ModelSpec,
    OpenAiProvider, Price, ProviderKind, ScriptedModel, ToolSpec,
};
use ppol::testing::mock_server::{
    serve, serve_with, MockOptions, MockOutage, MockReply, MockRule, MockScript,
};
use ppol::Error;
use serde_json::json;

/// A config pointing every role at `base_url` with short backoffs and no API key.
fn mock_config(base_url: &str) -> LlmConfig {
    let mut spec = ModelSpec::openai("mock-model", Some(base_url.to_string()));
    spec.api_key_env = "PPOL_TEST_KEY_THAT_IS_NEVER_SET".to_string();
    spec.timeout_s = 2.0;
    let mut cfg = LlmConfig::with_default(spec);
    cfg.max_concurrency = 4;
    cfg.max_retries = 3;
    cfg.backoff_base_ms = 5;
    cfg.backoff_max_ms = 20;
    cfg
}

fn user(role: CallRole, text: &str) -> ChatRequest {
    ChatRequest::new(
        role,
        vec![
            Turn::new(Role::System, "You are a helpful agent."),
            Turn::new(Role::User, text),
        ],
    )
}

fn llm_error(e: Error) -> (String, String, String) {
    match e {
        Error::Llm {
            endpoint,
            role,
            message,
        } => (endpoint, role, message),
        other => panic!("expected Error::Llm, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_requests_respect_the_limit() {
    let server = serve(MockScript::always(MockReply::echo().with_delay(10)))
        .await
        .unwrap();
    let mut cfg = mock_config(&server.base_url());
    cfg.max_concurrency = 8;
    let client = LlmClient::from_config(&cfg).unwrap();

    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let role = CallRole::ALL[i % CallRole::ALL.len()];
            let r = client.chat(&user(role, &format!("message {i}"))).await;
            (i, r)
        }));
    }
    for t in tasks {
        let (i, r) = t.await.unwrap();
        let r = r.unwrap();
        assert_eq!(r.message.content, format!("echo: message {i}"));
        assert!(!r.cached);
        assert_eq!(r.model, "mock-model");
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    }
    let elapsed = started.elapsed();
    eprintln!(
        "200 concurrent requests: {:.0} ms, server max in flight {}",
        elapsed.as_secs_f64() * 1e3,
        server.max_in_flight()
    );

    assert_eq!(server.requests(), 200);
    assert!(
        server.max_in_flight() <= 8,
        "max in flight {} > limit 8",
        server.max_in_flight()
    );
    assert!(server.max_in_flight() >= 2, "requests were not concurrent");
    let acc = client.accounting();
    assert_eq!(acc.total.calls, 200);
    assert_eq!(acc.total.attempts, 200);
    assert_eq!(acc.total.retries, 0);
    assert_eq!(acc.total.failures, 0);
    assert_eq!(acc.roles[&CallRole::Agent].calls, 40);
    assert!(acc.total.prompt_tokens > 0 && acc.total.completion_tokens > 0);
    // 200 × 10 ms at 8 wide is 250 ms of server time; allow slack for a loaded machine.
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_are_retried_and_counted() {
    let server = serve(
        MockScript::queue([
            MockReply::status(429).with_retry_after(0.01),
            MockReply::status(500),
            MockReply::status(503),
            MockReply::garbage("<html>bad gateway</html>"),
            MockReply::empty(),
            MockReply::truncated(),
            // (Tool calls with invalid JSON arguments are no longer a retryable failure: the
            // agent loop answers them with a tool error; see tests/interop.rs.)
            MockReply::hang_up(),
            MockReply::text("too slow").with_delay(800),
        ])
        .with_default(MockReply::text("finally")),
    )
    .await
    .unwrap();
    let mut cfg = mock_config(&server.base_url());
    cfg.max_retries = 9;
    cfg.default.timeout_s = 0.3;
    let client = LlmClient::from_config(&cfg).unwrap();

    let r = client.chat(&user(CallRole::UserSim, "hi")).await.unwrap();
    assert_eq!(r.message.content, "finally");
    assert_eq!(server.requests(), 9);
    let acc = client.accounting();
    let s = &acc.roles[&CallRole::UserSim];
    assert_eq!(s.calls, 1);
    assert_eq!(s.attempts, 9);
    assert_eq!(s.retries, 8);
    assert_eq!(s.failures, 0);
    assert_eq!(acc.total.retries, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gives_up_after_max_retries_with_a_clear_error() {
    let server = serve(MockScript::always(MockReply::status(500)))
        .await
        .unwrap();
    let cfg = mock_config(&server.base_url());
    let client = LlmClient::from_config(&cfg).unwrap();
    let err = client.chat(&user(CallRole::Agent, "hi")).await.unwrap_err();
    let (endpoint, role, message) = llm_error(err);
    assert_eq!(endpoint, server.base_url());
    assert_eq!(role, "agent");
    assert!(message.contains("gave up after 4 attempt(s)"), "{message}");
    assert!(message.contains("500"), "{message}");
    assert_eq!(server.requests(), 4);
    let acc = client.accounting();
    assert_eq!(acc.roles[&CallRole::Agent].failures, 1);
    assert_eq!(acc.roles[&CallRole::Agent].retries, 3);

    // Timeouts too.
    let slow = serve(MockScript::always(MockReply::text("late").with_delay(300)))
        .await
        .unwrap();
    let mut cfg = mock_config(&slow.base_url());
    cfg.max_retries = 1;
    cfg.default.timeout_s = 0.05;
    let client = LlmClient::from_config(&cfg).unwrap();
    let (_, role, message) = llm_error(
        client
            .chat(&user(CallRole::Mutator, "hi"))
            .await
            .unwrap_err(),
    );
    assert_eq!(role, "mutator");
    assert!(message.contains("timeout"), "{message}");
    assert!(message.contains("gave up after 2 attempt(s)"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_are_not_retried() {
    let server = serve(MockScript::always(MockReply::status(400)))
        .await
        .unwrap();
    let client = LlmClient::from_config(&mock_config(&server.base_url())).unwrap();
    let (endpoint, role, message) = llm_error(
        client
            .chat(&user(CallRole::Reflection, "hi"))
            .await
            .unwrap_err(),
    );
    assert_eq!(endpoint, server.base_url());
    assert_eq!(role, "reflection");
    assert!(
        message.contains("400") && message.contains("not retried"),
        "{message}"
    );
    assert!(message.contains("mock error 400"), "{message}");
    assert_eq!(server.requests(), 1);
    assert_eq!(client.accounting().total.retries, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured() {
    let server = serve(
        MockScript::queue([MockReply::status(429).with_retry_after(0.2)])
            .with_default(MockReply::text("ok")),
    )
    .await
    .unwrap();
    let client = LlmClient::from_config(&mock_config(&server.base_url())).unwrap();
    let t = Instant::now();
    let r = client.chat(&user(CallRole::Agent, "hi")).await.unwrap();
    assert_eq!(r.message.content, "ok");
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(server.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_budget_stops_new_calls() {
    let server = serve(MockScript::always(
        MockReply::text("ok").with_usage(100, 50),
    ))
    .await
    .unwrap();
    let mut cfg = mock_config(&server.base_url());
    // Each call reserves its worst case first (its prompt at a token per byte plus 16 per
    // message, and its role's max_tokens: ~374 for the user simulator, ~674 for the agent) and
    // settles on the 150 it reports: two user-simulator calls fit in 700, then the agent's
    // worst case no longer fits beside the 300 spent.
    cfg.budget.max_tokens = Some(700);
    let client = LlmClient::from_config(&cfg).unwrap();
    for i in 0..2 {
        let r = client
            .chat(&user(CallRole::UserSim, &format!("q{i}")))
            .await
            .unwrap();
        assert_eq!(r.usage.prompt_tokens, 100);
    }
    let err = client.chat(&user(CallRole::Agent, "q3")).await.unwrap_err();
    match &err {
        Error::BudgetExhausted(why) => assert!(why.contains("token budget of 700"), "{why}"),
        other => panic!("expected BudgetExhausted, got {other:?}"),
    }
    assert_eq!(server.requests(), 2);
    let acc = client.accounting();
    assert_eq!(acc.total.tokens(), 300);
    assert_eq!(acc.roles[&CallRole::Agent].budget_refusals, 1);
    assert!(acc.budget_exhausted.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usd_budget_is_never_passed_by_calls_in_flight() {
    let server = serve(MockScript::always(
        MockReply::text("ok").with_usage(1000, 1000).with_delay(50),
    ))
    .await
    .unwrap();
    let mut cfg = mock_config(&server.base_url());
    cfg.max_concurrency = 5;
    // 1000 × $2/M + 1000 × $8/M = $0.01 per call, reported; each call reserves its worst
    // case first (its prompt and the generator's max_tokens at these prices, ~$0.0165).
    cfg.prices.insert(
        "mock-model".into(),
        Price {
            prompt: 2.0,
            completion: 8.0,
        },
    );
    cfg.budget.max_usd = Some(0.035);
    let client = LlmClient::from_config(&cfg).unwrap();

    // Five at once: two worst cases fit in $0.035 and are sent; the other three wait for
    // them to settle ($0.02 spent), and then one more worst case would pass the cap with
    // nothing left in flight, so they are refused. What was paid never passes the cap.
    let requests: Vec<ChatRequest> = (0..5)
        .map(|i| user(CallRole::Generator, &format!("p{i}")))
        .collect();
    let answers = futures::future::join_all(requests.iter().map(|r| client.chat(r))).await;
    let ok = answers.iter().filter(|a| a.is_ok()).count();
    for a in &answers {
        match a {
            Ok(r) => assert_eq!(r.message.content, "ok"),
            Err(Error::BudgetExhausted(why)) => assert!(why.contains("USD budget"), "{why}"),
            Err(e) => panic!("expected an answer or BudgetExhausted, got {e:?}"),
        }
    }
    assert_eq!(ok, 2);
    let err = client
        .chat(&user(CallRole::Generator, "one more"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::BudgetExhausted(why) if why.contains("USD budget")),
        "{err:?}"
    );
    assert_eq!(server.requests(), 2);
    let acc = client.accounting();
    assert!((acc.total.usd - 0.02).abs() < 1e-9, "{}", acc.total.usd);
    assert!(acc.total.usd <= 0.035);
    assert_eq!(acc.roles[&CallRole::Generator].budget_refusals, 4);
    assert_eq!(
        client.budget_held(),
        (0.0, 0, 0),
        "every reservation settled"
    );
    let json = serde_json::to_value(&acc).unwrap();
    assert_eq!(json["roles"]["generator"]["calls"], 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_hits_skip_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(MockScript::always(MockReply::echo().with_usage(10, 5)))
        .await
        .unwrap();
    let mut cfg = mock_config(&server.base_url());
    cfg.cache_dir = Some(dir.path().join("cache"));
    // Same effective settings for every role (the per-role default max_tokens differ).
    cfg.default.max_tokens = Some(256);
    cfg.prices.insert(
        "mock-model".into(),
        Price {
            prompt: 1.0,
            completion: 1.0,
        },
    );
    let client = LlmClient::from_config(&cfg).unwrap();

    let first = client.chat(&user(CallRole::Agent, "same")).await.unwrap();
    assert!(!first.cached);
    assert_eq!(server.requests(), 1);
    let usd = client.accounting().total.usd;

    let second = client.chat(&user(CallRole::Agent, "same")).await.unwrap();
    assert!(second.cached);
    assert_eq!(second.message, first.message);
    assert_eq!(second.usage, first.usage);
    // The role is not part of the key.
    let third = client.chat(&user(CallRole::UserSim, "same")).await.unwrap();
    assert!(third.cached);
    assert_eq!(server.requests(), 1);

    let acc = client.accounting();
    assert_eq!(acc.total.cache_hits, 2);
    assert_eq!(acc.total.calls, 3);
    assert_eq!(acc.total.attempts, 1);
    assert_eq!(acc.total.usd, usd);

    // Different sampling settings or content miss.
    let mut hot = user(CallRole::Agent, "same");
    hot.temperature = Some(1.0);
    assert!(!client.chat(&hot).await.unwrap().cached);
    assert!(!cached(&client, "other").await);
    assert_eq!(server.requests(), 3);
    assert_eq!(client.cache().unwrap().len(), 3);

    // A new client over the same directory hits.
    let again = LlmClient::from_config(&cfg).unwrap();
    assert!(cached(&again, "same").await);
    assert_eq!(server.requests(), 3);

    // Entries are sha256-named files in two-character shards; a corrupt one is a miss.
    // (The key is made from the request as sent: the role's settings filled in.)
    let key = ppol::llm::ResponseCache::key(
        "openai",
        "mock-model",
        &server.base_url(),
        &again.effective(&user(CallRole::Agent, "other")),
    );
    assert_eq!(key.len(), 64);
    let entry = again.cache().unwrap().path(&key);
    assert!(entry.starts_with(dir.path().join("cache").join(&key[..2])));
    std::fs::write(&entry, "{ not json").unwrap();
    assert!(!cached(&again, "other").await);
    assert_eq!(server.requests(), 4);
    assert!(cached(&again, "other").await);

    // Cache hits are served even once the budget is spent.
    cfg.budget.max_tokens = Some(0);
    let broke = LlmClient::from_config(&cfg).unwrap();
    assert!(cached(&broke, "same").await);
    assert!(matches!(
        broke.chat(&user(CallRole::Agent, "new")).await,
        Err(Error::BudgetExhausted(_))
    ));

    // Stop sequences or bounded tool arguments change what is sent, so they miss too; and
    // the shaped client hits its own entries.
    cfg.budget.max_tokens = None;
    cfg.default.stop = vec!["functions.".into()];
    let shaped = LlmClient::from_config(&cfg).unwrap();
    let before = server.requests();
    assert!(!cached(&shaped, "same").await);
    assert!(cached(&shaped, "same").await);
    cfg.default.tool_argument_max_chars = Some(100);
    let bounded = LlmClient::from_config(&cfg).unwrap();
    assert!(!cached(&bounded, "same").await);
    assert_eq!(server.requests(), before + 2);
    let last = server.bodies().pop().unwrap();
    assert_eq!(last["stop"], json!(["functions."]));
}

/// Whether the agent's answer to `text` came from the cache.
async fn cached(client: &LlmClient, text: &str) -> bool {
    client
        .chat(&user(CallRole::Agent, text))
        .await
        .unwrap()
        .cached
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_call_round_trip() {
    let server = serve(
        MockScript::default()
            .with_rule(MockRule {
                contains: Some("order A1".into()),
                has_tools: Some(true),
                times: Some(1),
                reply: MockReply::tool_call("get_order", json!({"order_id": "A1", "n": 2})),
                ..MockRule::default()
            })
            .with_default(MockReply::text("Your order A1 has shipped.")),
    )
    .await
    .unwrap();
    let client = LlmClient::from_config(&mock_config(&server.base_url())).unwrap();
    let tools = vec![ToolSpec {
        name: "get_order".into(),
        description: "Look up an order".into(),
        parameters: json!({"type": "object", "properties": {"order_id": {"type": "string"}}}),
    }];
    let mut req = user(CallRole::Agent, "Where is my order A1?");
    req.tools = tools.clone();
    req.seed = Some(7);
    let r = client.chat(&req).await.unwrap();
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(r.message.role, Role::Assistant);
    assert_eq!(r.message.tool_calls.len(), 1);
    let call = &r.message.tool_calls[0];
    assert_eq!(call.name, "get_order");
    assert_eq!(call.arguments, json!({"order_id": "A1", "n": 2}));
    assert!(!call.id.is_empty());

    let body = server.last_body().unwrap();
    assert_eq!(body["model"], "mock-model");
    assert_eq!(body["seed"], 7);
    assert_eq!(body["stream"], false);
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "get_order");
    assert_eq!(body["messages"][0]["role"], "system");

    // Send the tool result back.
    let mut follow = req.clone();
    follow.messages.push(r.message.clone());
    follow.messages.push(Turn {
        role: Role::Tool,
        content: "{\"status\": \"shipped\"}".into(),
        tool_calls: Vec::new(),
        tool_call_id: Some(call.id.clone()),
    });
    let r2 = client.chat(&follow).await.unwrap();
    assert_eq!(r2.message.content, "Your order A1 has shipped.");
    assert!(r2.message.tool_calls.is_empty());
    let body = server.last_body().unwrap();
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[2]["role"], "assistant");
    // A string, never null: llama-cpp-python answers null with HTTP 500.
    assert_eq!(msgs[2]["content"], "");
    assert_eq!(msgs[2]["tool_calls"][0]["id"], call.id.as_str());
    assert_eq!(msgs[2]["tool_calls"][0]["function"]["name"], "get_order");
    let args: serde_json::Value = serde_json::from_str(
        msgs[2]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(args, json!({"order_id": "A1", "n": 2}));
    assert_eq!(msgs[3]["role"], "tool");
    assert_eq!(msgs[3]["tool_call_id"], call.id.as_str());

    // A tool turn without its call id is a clear, non-retried error.
    let mut bad = follow.clone();
    bad.messages[3].tool_call_id = None;
    let (_, _, message) = llm_error(client.chat(&bad).await.unwrap_err());
    assert!(message.contains("without tool_call_id"), "{message}");
    assert_eq!(server.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_defaults_and_provider_direct_use() {
    let server = serve(MockScript::default()).await.unwrap();
    let mut cfg = mock_config(&server.base_url());
    cfg.default.temperature = Some(0.25);
    cfg.default.max_tokens = Some(64);
    cfg.default
        .headers
        .insert("X-Ppol-Test".into(), "yes".into());
    let mut agent = cfg.default.clone();
    agent.model = "agent-model".into();
    cfg.set_role(CallRole::Agent, &agent);
    let client = LlmClient::from_config(&cfg).unwrap();
    assert!(client.describe().contains("agent=openai:agent-model@"));

    client.chat(&user(CallRole::UserSim, "a")).await.unwrap();
    let h = server.headers().pop().unwrap();
    assert_eq!(h["x-ppol-test"], "yes");
    assert!(h["authorization"].starts_with("Bearer"));
    assert_eq!(h["content-type"], "application/json");
    let b = server.last_body().unwrap();
    assert_eq!(b["model"], "mock-model");
    assert_eq!(b["temperature"], 0.25);
    assert_eq!(b["max_tokens"], 64);

    let mut req = user(CallRole::Agent, "b");
    req.temperature = Some(0.9);
    let r = client.chat(&req).await.unwrap();
    assert_eq!(r.model, "agent-model");
    let b = server.last_body().unwrap();
    assert_eq!(b["model"], "agent-model");
    assert!((b["temperature"].as_f64().unwrap() - 0.9).abs() < 1e-6);

    // Newer OpenAI models reject max_tokens / temperature: adapt once and remember.
    let reject_max_tokens = MockReply {
        status: Some(400),
        raw_body: Some(
            r#"{"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", "type": "invalid_request_error"}}"#
                .into(),
        ),
        ..MockReply::default()
    };
    let reject_temperature = MockReply {
        status: Some(400),
        raw_body: Some(
            r#"{"error": {"message": "Unsupported value: 'temperature' does not support 0.25 with this model.", "type": "invalid_request_error"}}"#
                .into(),
        ),
        ..MockReply::default()
    };
    server.push_replies([reject_max_tokens, reject_temperature]);
    let r = client.chat(&user(CallRole::Generator, "e")).await.unwrap();
    assert_eq!(r.message.content, "echo: e");
    let b = server.last_body().unwrap();
    assert_eq!(b["max_completion_tokens"], 64);
    assert!(b.get("max_tokens").is_none() && b.get("temperature").is_none());
    client.chat(&user(CallRole::Generator, "f")).await.unwrap();
    let b = server.last_body().unwrap();
    assert_eq!(b["max_completion_tokens"], 64);
    assert!(b.get("temperature").is_none());
    assert_eq!(server.requests(), 6);
    assert_eq!(client.accounting().total.retries, 0);

    // A provider used directly makes exactly one attempt.
    let p = OpenAiProvider::new("direct", server.base_url()).unwrap();
    assert_eq!(p.describe(), format!("openai:direct@{}", server.base_url()));
    let r = p.chat(&user(CallRole::Agent, "c")).await.unwrap();
    assert_eq!(r.message.content, "echo: c");
    server.push_replies([MockReply::status(503)]);
    assert!(p.chat(&user(CallRole::Agent, "d")).await.is_err());
    assert_eq!(server.requests(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_server_routes_script_files_and_stop() {
    let dir = tempfile::tempdir().unwrap();
    let json_script = dir.path().join("script.json");
    std::fs::write(
        &json_script,
        r#"{"queue": [{"status": 429, "retry_after": 0.01}],
            "rules": [{"contains": "refund", "times": 1, "reply": {"content": "no refunds", "model": "m2"}}],
            "default": {"content": "hello"}}"#,
    )
    .unwrap();
    let script = MockScript::from_file(&json_script).unwrap();
    assert_eq!(script.queue.len(), 1);
    assert_eq!(script.rules.len(), 1);

    let jsonl = dir.path().join("script.jsonl");
    std::fs::write(
        &jsonl,
        "# comment\n{\"content\": \"one\"}\n\n{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"x\": 1}}]}\n",
    )
    .unwrap();
    let s2 = MockScript::from_file(&jsonl).unwrap();
    assert_eq!(s2.queue.len(), 2);
    assert_eq!(s2.default, MockReply::echo());

    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"content\": \"x\"}\n{\"contnet\": \"y\"}\n").unwrap();
    match MockScript::from_file(&bad).unwrap_err() {
        Error::Parse {
            location, message, ..
        } => {
            assert_eq!(location, "line 2");
            assert!(message.contains("contnet"), "{message}");
        }
        e => panic!("{e:?}"),
    }

    let server = serve_with(
        script,
        MockOptions {
            max_lifetime: Some(Duration::from_secs(30)),
            ..MockOptions::default()
        },
    )
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let base = format!("http://{}", server.addr());
    let models: serde_json::Value = http
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"mock") && ids.contains(&"m2"), "{ids:?}");
    let missing = http.get(format!("{base}/nope")).send().await.unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    let garbage = http
        .post(format!("{base}/chat/completions"))
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(garbage.status().as_u16(), 400);

    let client = LlmClient::from_config(&mock_config(&server.base_url())).unwrap();
    let r = client
        .chat(&user(CallRole::Agent, "I want a refund"))
        .await
        .unwrap();
    // The rule matched first; the queued 429 is still waiting.
    assert_eq!(r.message.content, "no refunds");
    assert_eq!(r.model, "m2");
    let r = client
        .chat(&user(CallRole::Agent, "I want a refund"))
        .await
        .unwrap();
    assert_eq!(r.message.content, "hello");
    assert_eq!(client.accounting().total.retries, 1);
    assert_eq!(server.queued(), 0);
    let stats = server.stats();
    assert_eq!(stats.requests, 1 + 3);
    assert_eq!(stats.other_requests, 2);

    // Control routes for out-of-process tests.
    let pushed: serde_json::Value = http
        .post(format!("{base}/mock/replies"))
        .body(r#"[{"content": "pushed 1"}, {"status": 502}]"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pushed["queued"], 2);
    let r = client.chat(&user(CallRole::Agent, "x")).await.unwrap();
    assert_eq!(r.message.content, "pushed 1");
    let stats: serde_json::Value = http
        .get(format!("{base}/mock/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["requests"], 5);
    let log: serde_json::Value = http
        .get(format!("{base}/mock/requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(log["bodies"].as_array().unwrap().len(), 4); // the non-JSON body is not recorded
    assert_eq!(log["headers"].as_array().unwrap().len(), 4);

    let addr = server.addr();
    let url = server.base_url();
    server.stop();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    // A stopped server refuses connections: waited for (endpoint_wait_s), not retried,
    // then reported.
    let mut cfg = mock_config(&url);
    cfg.endpoint_wait_s = 0.3;
    let client = LlmClient::from_config(&cfg).unwrap();
    let (endpoint, _, message) =
        llm_error(client.chat(&user(CallRole::Agent, "x")).await.unwrap_err());
    assert_eq!(endpoint, url);
    assert!(message.contains("refused connections"), "{message}");
    assert_eq!(client.accounting().total.attempts, 1);

    // Dropping stops too; a lifetime stops by itself.
    let mut short = serve_with(
        MockScript::default(),
        MockOptions {
            max_lifetime: Some(Duration::from_millis(50)),
            ..MockOptions::default()
        },
    )
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(5), short.wait())
        .await
        .unwrap();
    assert!(short.is_finished());
}

#[test]
fn config_errors_name_the_key() {
    let file = Path::new("llm.toml");
    let key_of = |text: &str| match LlmConfig::from_toml_str(text, file).unwrap_err() {
        Error::Config { key, .. } => key,
        e => panic!("expected Error::Config, got {e:?}"),
    };
    assert_eq!(key_of("max_concurency = 3\n"), "max_concurency");
    assert_eq!(
        key_of("[roles.agent]\nmodel = \"x\"\ntempreature = 0.1\n"),
        "roles.agent.tempreature"
    );
    assert_eq!(
        key_of("[roles.customer]\nmodel = \"x\"\n"),
        "roles.customer"
    );
    assert_eq!(key_of("[budget]\nmax_dollars = 3\n"), "budget.max_dollars");
    assert_eq!(key_of("[default]\nmdoel = \"x\"\n"), "default.mdoel");
    assert_eq!(
        key_of("[prices.\"gpt-4o\"]\ninput = 1.0\n"),
        "prices.\"gpt-4o\".input"
    );
    assert_eq!(key_of("max_concurrency = 0\n"), "max_concurrency");
    assert_eq!(
        key_of("[default]\nbase_url = \"localhost:8000\"\n"),
        "default.base_url"
    );
    assert_eq!(
        key_of("[roles.agent]\ntimeout_s = -1\n"),
        "roles.agent.timeout_s"
    );

    // Type errors point at the line.
    match LlmConfig::from_toml_str("max_retries = 2\nmax_concurrency = \"many\"\n", file)
        .unwrap_err()
    {
        Error::Parse { location, .. } => assert_eq!(location, "line 2, column 19"),
        e => panic!("expected Error::Parse, got {e:?}"),
    }
    match LlmConfig::from_toml_str("[default]\nprovider = \"anthropic\"\n", file).unwrap_err() {
        Error::Parse { message, .. } => assert!(message.contains("anthropic"), "{message}"),
        e => panic!("expected Error::Parse, got {e:?}"),
    }

    // --llm values.
    match LlmConfig::from_cli_value("gpt-4o").unwrap_err() {
        Error::Config { key, message } => {
            assert_eq!(key, "--llm");
            assert!(message.contains("openai:MODEL"), "{message}");
        }
        e => panic!("{e:?}"),
    }
    match LlmConfig::from_cli_value("openai:m@http//x").unwrap_err() {
        Error::Config { key, message } => {
            assert_eq!(key, "--llm");
            assert!(message.contains("http//x"), "{message}");
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn config_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("llm.toml");
    std::fs::write(
        &path,
        r#"
max_concurrency = 3
max_retries = 2
backoff_base_ms = 10
backoff_max_ms = 40
cache_dir = "cache"

[budget]
max_usd = 1.5

[default]
provider = "openai"
model = "gpt-4o-mini"
base_url = "http://127.0.0.1:9/v1/"
temperature = 0.7
headers = { "X-Title" = "ppol" }

[roles.user-sim]
model = "gpt-4o"
timeout_s = 5

[roles.mutator]
provider = "scripted"
script = "mutator.jsonl"

[prices."gpt-4o-mini"]
prompt = 0.15
completion = 0.6
"#,
    )
    .unwrap();
    let cfg = LlmConfig::from_cli_value(path.to_str().unwrap()).unwrap();
    assert_eq!(cfg.max_concurrency, 3);
    assert_eq!(
        cfg.cache_dir.as_deref(),
        Some(dir.path().join("cache").as_path())
    );
    assert_eq!(cfg.budget.max_usd, Some(1.5));
    assert_eq!(cfg.budget.max_tokens, None);
    let us = cfg.spec(CallRole::UserSim);
    assert_eq!(us.model, "gpt-4o");
    assert_eq!(us.temperature, Some(0.7));
    assert_eq!(us.timeout_s, 5.0);
    assert_eq!(us.resolved_base_url(), "http://127.0.0.1:9/v1");
    assert_eq!(us.headers["X-Title"], "ppol");
    let m = cfg.spec(CallRole::Mutator);
    assert_eq!(m.provider, ProviderKind::Scripted);
    assert_eq!(
        m.script.as_deref(),
        Some(dir.path().join("mutator.jsonl").as_path())
    );
    assert_eq!(cfg.spec(CallRole::Agent).model, "gpt-4o-mini");
    assert_eq!(cfg.price("gpt-4o-mini").completion, 0.6);
    assert_eq!(cfg.price("unknown"), Price::default());
    // Round trip through TOML.
    let text = toml::to_string(&cfg).unwrap();
    assert_eq!(LlmConfig::from_toml_str(&text, &path).unwrap(), cfg);

    // The mutator's script does not exist yet: building names the file.
    match LlmClient::from_config(&cfg).unwrap_err() {
        Error::Io { path, .. } => assert!(path.ends_with("mutator.jsonl")),
        e => panic!("{e:?}"),
    }
    std::fs::write(
        dir.path().join("mutator.jsonl"),
        "{\"content\": \"mutated\"}\n",
    )
    .unwrap();
    let client = LlmClient::from_config(&cfg).unwrap();
    assert!(client
        .describe_role(CallRole::Mutator)
        .starts_with("scripted:"));
    assert_eq!(
        client.describe_role(CallRole::Agent),
        "openai:gpt-4o-mini@http://127.0.0.1:9/v1"
    );

    let c = LlmConfig::from_cli_value("openai:llama3:8b@http://localhost:11434/v1").unwrap();
    assert_eq!(c.default.model, "llama3:8b");
    assert_eq!(
        c.default.base_url,
        Some(BaseUrl::One("http://localhost:11434/v1".into()))
    );
    let c = LlmConfig::from_cli_value("openai:gpt-4o-mini").unwrap();
    assert_eq!(c.default.model, "gpt-4o-mini");
    assert_eq!(c.default.base_url, None);
    let c = LlmConfig::from_cli_value("scripted").unwrap();
    assert_eq!(c.spec(CallRole::Agent).provider, ProviderKind::Scripted);
    let c = LlmConfig::from_cli_value("scripted:replies.jsonl").unwrap();
    assert_eq!(
        c.default.script.as_deref(),
        Some(Path::new("replies.jsonl"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_provider_is_deterministic_and_replays_by_role() {
    let hash = ScriptedModel::new();
    let a = hash.chat(&user(CallRole::UserSim, "hello")).await.unwrap();
    let b = ScriptedModel::new()
        .chat(&user(CallRole::UserSim, "hello"))
        .await
        .unwrap();
    let c = hash.chat(&user(CallRole::UserSim, "bye")).await.unwrap();
    assert_eq!(a, b);
    assert_ne!(a.message.content, c.message.content);
    assert!(a.message.content.starts_with("Okay. (scripted user-sim "));
    assert_eq!(a.model, "scripted");
    assert!(a.usage.prompt_tokens > 0);

    let replay = ScriptedModel::from_replies([
        ScriptedReply {
            role: Some(CallRole::Agent),
            tool_calls: vec![ppol::llm::ScriptToolCall {
                id: None,
                name: "get_user".into(),
                arguments: json!({"id": 1}),
            }],
            ..ScriptedReply::default()
        },
        ScriptedReply::text("any role"),
        ScriptedReply {
            role: Some(CallRole::UserSim),
            content: "###STOP###".into(),
            ..ScriptedReply::default()
        },
    ]);
    let u = replay.chat(&user(CallRole::UserSim, "x")).await.unwrap();
    assert_eq!(u.message.content, "###STOP###");
    let g = replay.chat(&user(CallRole::Agent, "x")).await.unwrap();
    assert_eq!(
        g.message.tool_calls,
        vec![ToolCall {
            id: "call_2_0".into(),
            name: "get_user".into(),
            arguments: json!({"id": 1})
        }]
    );
    assert_eq!(g.finish_reason.as_deref(), Some("tool_calls"));
    let any = replay.chat(&user(CallRole::Agent, "x")).await.unwrap();
    assert_eq!(any.message.content, "any role");
    assert_eq!(replay.remaining(), 0);

    // Exhausted scripts fail without retries, naming the role.
    let client = LlmClient::builder(LlmConfig::scripted(None))
        .provider(CallRole::Agent, Arc::new(replay))
        .build()
        .unwrap();
    let (endpoint, role, message) =
        llm_error(client.chat(&user(CallRole::Agent, "x")).await.unwrap_err());
    assert_eq!(endpoint, "scripted");
    assert_eq!(role, "agent");
    assert!(
        message.contains("no reply left for role agent"),
        "{message}"
    );
    assert_eq!(client.accounting().total.retries, 0);
    // Other roles use the hash mode.
    assert!(client.chat(&user(CallRole::Mutator, "m")).await.is_ok());

    // Any ChatModel can answer a role through the client.
    let custom = ScriptedModel::from_replies([ScriptedReply::text("from a custom model")]);
    let client = LlmClient::builder(LlmConfig::scripted(None))
        .provider(
            CallRole::UserSim,
            Arc::new(ChatModelProvider::new(Arc::new(custom))),
        )
        .build()
        .unwrap();
    let r = client.chat(&user(CallRole::UserSim, "x")).await.unwrap();
    assert_eq!(r.message.content, "from a custom model");
    assert_eq!(client.describe_role(CallRole::UserSim), "scripted");
    assert_eq!(client.accounting().roles[&CallRole::UserSim].calls, 1);

    // Script file errors name the line.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.jsonl");
    std::fs::write(&p, "{\"content\": \"a\"}\n{\"role\": \"customer\"}\n").unwrap();
    match ScriptedModel::from_file(&p).unwrap_err() {
        Error::Parse { location, .. } => assert_eq!(location, "line 2"),
        e => panic!("{e:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_server_run_prints_its_address() {
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    struct Sink(std::sync::mpsc::Sender<Vec<u8>>);
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.0.send(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let task = tokio::spawn(ppol::testing::mock_server::run(
        MockScript::always(MockReply::text("pong")),
        MockOptions {
            max_lifetime: Some(Duration::from_millis(500)),
            ..MockOptions::default()
        },
        Sink(tx),
    ));
    let line = tokio::task::spawn_blocking(move || {
        let mut line = Vec::new();
        while !line.ends_with(b"\n") {
            line.extend(rx.recv_timeout(Duration::from_secs(5)).unwrap());
        }
        line
    })
    .await
    .unwrap();
    let ready: serde_json::Value = serde_json::from_slice(&line).unwrap();
    let base_url = ready["base_url"].as_str().unwrap().to_string();
    assert!(base_url.starts_with("http://127.0.0.1:"));
    let client = LlmClient::from_config(&mock_config(&base_url)).unwrap();
    let r = client.chat(&user(CallRole::Agent, "ping")).await.unwrap();
    assert_eq!(r.message.content, "pong");
    let stats = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(stats.requests, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_server_speaks_plain_http() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = serve(MockScript::default()).await.unwrap();
    let mut s = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let body = format!(
        r#"{{"model": "m", "messages": [{{"role": "user", "content": "{}"}}]}}"#,
        "x".repeat(2000)
    );
    // Expect: 100-continue (as curl sends for large bodies), then keep-alive reuse.
    s.write_all(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Expect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 25];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(body.as_bytes()).await.unwrap();
    let first = read_http_response(&mut s).await;
    assert!(first.starts_with("HTTP/1.1 200 OK"), "{first}");
    assert!(first.contains("Connection: keep-alive"));
    assert!(first.contains(&format!("echo: {}", "x".repeat(2000))));

    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut rest = String::new();
    s.read_to_string(&mut rest).await.unwrap();
    assert!(
        rest.starts_with("HTTP/1.1 200 OK") && rest.contains("\"ok\""),
        "{rest}"
    );
    let stats = server.stats();
    assert_eq!(
        (stats.requests, stats.other_requests, stats.connections),
        (1, 1, 1)
    );

    // A scripted provider bypasses the cache (replays must not be short-cut).
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = LlmConfig::scripted(None);
    cfg.cache_dir = Some(dir.path().to_path_buf());
    let client = LlmClient::from_config(&cfg).unwrap();
    client.chat(&user(CallRole::Agent, "a")).await.unwrap();
    client.chat(&user(CallRole::Agent, "a")).await.unwrap();
    let acc = client.accounting();
    assert_eq!(acc.total.cache_hits, 0);
    assert!(client.cache().unwrap().is_empty());
    let text = acc.to_string();
    assert!(
        text.contains("agent") && text.contains("2 calls (0 cached)"),
        "{text}"
    );
    let mut merged = acc.clone();
    merged.merge(&acc);
    assert_eq!(merged.total.calls, 4);
    assert_eq!(merged.roles[&CallRole::Agent].calls, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_rides_out_a_server_killed_and_restarted() {
    // The second request kills the server; it listens again 300 ms later on the same port.
    let server = serve_with(
        MockScript::default(),
        MockOptions {
            outage: Some(MockOutage {
                after_requests: 1,
                down_for: Duration::from_millis(300),
            }),
            ..MockOptions::default()
        },
    )
    .await
    .unwrap();
    let mut cfg = mock_config(&server.base_url());
    cfg.max_retries = 8;
    cfg.backoff_base_ms = 50;
    cfg.backoff_max_ms = 200;
    let client = LlmClient::from_config(&cfg).unwrap();
    let r = client.chat(&user(CallRole::Agent, "one")).await.unwrap();
    assert_eq!(r.message.content, "echo: one");
    let t = Instant::now();
    let r = client.chat(&user(CallRole::Agent, "two")).await.unwrap();
    assert_eq!(r.message.content, "echo: two");
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    let acc = client.accounting();
    assert!(acc.total.retries >= 1, "{acc:?}");
    assert_eq!((acc.total.calls, acc.total.failures), (2, 0));
    let s = server.stats();
    assert_eq!((s.outages, s.cut, s.answered), (1, 1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_costs_match_what_the_server_was_asked_for() {
    let server = serve(
        MockScript::default()
            .with_rule(MockRule {
                model: Some("agent-model".into()),
                reply: MockReply::text("agent says").with_usage(120, 30),
                ..MockRule::default()
            })
            .with_rule(MockRule {
                model: Some("user-model".into()),
                times: Some(1),
                reply: MockReply::status(500),
                ..MockRule::default()
            }),
    )
    .await
    .unwrap();
    let mut cfg = mock_config(&server.base_url());
    cfg.default.model = "agent-model".into();
    cfg.roles.insert(
        CallRole::UserSim,
        ppol::llm::ModelPatch {
            model: Some("user-model".into()),
            ..Default::default()
        },
    );
    for (model, prompt, completion) in [("agent-model", 2.0, 8.0), ("user-model", 1.0, 4.0)] {
        cfg.prices
            .insert(model.into(), Price { prompt, completion });
    }
    let client = LlmClient::from_config(&cfg).unwrap();
    for i in 0..3 {
        client
            .chat(&user(CallRole::Agent, &format!("a{i}")))
            .await
            .unwrap();
        // The first user-sim call meets a 500 and is retried: two requests, one completion.
        client
            .chat(&user(CallRole::UserSim, &format!("u{i}")))
            .await
            .unwrap();
    }
    let acc = client.accounting();
    let s = server.stats();
    let (agent, usersim) = (&acc.roles[&CallRole::Agent], &acc.roles[&CallRole::UserSim]);
    let (a, u) = (s.models["agent-model"], s.models["user-model"]);
    assert_eq!((a.requests, a.completions), (3, 3));
    assert_eq!((u.requests, u.completions), (4, 3));
    assert_eq!(
        (agent.prompt_tokens, agent.completion_tokens),
        (a.prompt_tokens, a.completion_tokens)
    );
    assert_eq!((a.prompt_tokens, a.completion_tokens), (360, 90));
    assert_eq!(
        (usersim.prompt_tokens, usersim.completion_tokens),
        (u.prompt_tokens, u.completion_tokens)
    );
    assert_eq!(
        acc.total.tokens(),
        s.usage.prompt_tokens + s.usage.completion_tokens
    );
    assert_eq!(acc.total.attempts, s.requests);
    let usd = (a.prompt_tokens as f64 * 2.0
        + a.completion_tokens as f64 * 8.0
        + u.prompt_tokens as f64 * 1.0
        + u.completion_tokens as f64 * 4.0)
        / 1e6;
    assert!(
        (acc.total.usd - usd).abs() < 1e-12,
        "{} vs {usd}",
        acc.total.usd
    );
}

/// Read one HTTP response with a Content-Length body.
async fn read_http_response(s: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut data = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed early");
        data.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&data).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len: usize = text[..end]
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            if data.len() >= end + 4 + len {
                return text;
            }
        }
    }
}
