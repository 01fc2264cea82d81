//! The server behaviours over real HTTP (reqwest against a server on 127.0.0.1). Timing
//! checks use lower bounds, which load on the machine cannot break.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::*;

fn chat_url(server: &MockServer) -> String {
    format!("{}/chat/completions", server.base_url())
}

fn ask(text: &str) -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": text}]})
}

/// POST a chat request; (status, Retry-After, JSON body).
async fn post(http: &reqwest::Client, url: &str, body: &Value) -> (u16, Option<String>, Value) {
    let r = http.post(url).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (status, retry, r.json().await.unwrap())
}

fn content(v: &Value) -> &str {
    v["choices"][0]["message"]["content"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_applies_to_every_reply_whatever_the_script() {
    let server = serve_with(
        MockScript::queue([
            MockReply::text("a"),
            MockReply::status(503),
            MockReply::garbage("{"),
        ]),
        MockOptions {
            latency: Duration::from_millis(150),
            ..MockOptions::default()
        },
    )
    .await
    .unwrap();
    let http = reqwest::Client::new();
    for want in [200, 503, 200, 200] {
        let t = Instant::now();
        let r = http.post(chat_url(&server)).json(&ask("x")).send().await;
        assert_eq!(r.unwrap().status().as_u16(), want);
        assert!(
            t.elapsed() >= Duration::from_millis(150),
            "{:?}",
            t.elapsed()
        );
    }
    // A rejection on arrival is immediate: it is not computed.
    let t = Instant::now();
    let r = http
        .post(chat_url(&server))
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(
        t.elapsed() < Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_answers_429_with_retry_after() {
    let server = serve_with(
        MockScript::queue(["A", "B", "C"].map(|t| MockReply::text(t).with_delay(400))),
        MockOptions {
            max_in_flight: Some(2),
            busy_retry_after: 0.5,
            ..MockOptions::default()
        },
    )
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let url = chat_url(&server);
    // Two requests take the capacity; the next three, sent while they are computing, are
    // turned away at once.
    let first: Vec<_> = (0..2)
        .map(|_| tokio::spawn(post_owned(http.clone(), url.clone())))
        .collect();
    server
        .wait_for_stats(Duration::from_secs(5), |s| s.in_flight == 2)
        .await
        .unwrap();
    for _ in 0..3 {
        let (status, retry, body) = post(&http, &url, &ask("x")).await;
        assert_eq!(status, 429);
        assert_eq!(retry.as_deref(), Some("0.5"));
        assert_eq!(body["error"]["type"], "rate_limit_exceeded");
    }
    for f in first {
        assert_eq!(f.await.unwrap(), 200);
    }
    let s = server.stats();
    assert_eq!((s.requests, s.rejected_busy, s.max_in_flight), (5, 3, 2));
    assert_eq!((s.status_count(429), s.status_count(200)), (3, 2));
    let outcomes: Vec<MockOutcome> = server.records().iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == MockOutcome::Busy).count(),
        3
    );
    assert_eq!(s.answered, 5);
    // The rejected requests used no reply: the third queued one is still there.
    let (_, _, body) = post(&http, &url, &ask("x")).await;
    assert_eq!(content(&body), "C");
}

async fn post_owned(http: reqwest::Client, url: String) -> u16 {
    post(&http, &url, &ask("x")).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_mode_computes_one_request_at_a_time_and_reports_the_wait() {
    let server = serve_with(
        MockScript::default(),
        MockOptions {
            slots: Some(1),
            latency: Duration::from_millis(200),
            ..MockOptions::default()
        },
    )
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let url = chat_url(&server);
    let t = Instant::now();
    let all: Vec<_> = (0..3)
        .map(|_| tokio::spawn(post_owned(http.clone(), url.clone())))
        .collect();
    for f in all {
        assert_eq!(f.await.unwrap(), 200);
    }
    assert!(
        t.elapsed() >= Duration::from_millis(600),
        "{:?}",
        t.elapsed()
    );
    let s = server.stats();
    assert_eq!(s.max_computing, 1);
    assert_eq!(s.max_in_flight, 3);
    assert!(s.max_waiting >= 2, "{s:?}");
    // Two were queued at once, so the last one waited at least one whole computation (the
    // one queued ahead of it); how much more depends on when the scheduler let it arrive.
    assert!(s.queue_wait_ms_max >= 190, "{s:?}");
    assert!(s.queue_wait_ms_total >= 190, "{s:?}");
    let mut waits: Vec<u64> = server.records().iter().map(|r| r.queue_wait_ms).collect();
    waits.sort_unstable();
    assert!(waits[0] < 100 && waits[2] >= 190, "{waits:?}");

    // Two slots: two at once.
    let server = serve_with(
        MockScript::default(),
        MockOptions {
            slots: Some(2),
            latency: Duration::from_millis(100),
            ..MockOptions::default()
        },
    )
    .await
    .unwrap();
    let url = chat_url(&server);
    let all: Vec<_> = (0..4)
        .map(|_| tokio::spawn(post_owned(http.clone(), url.clone())))
        .collect();
    for f in all {
        assert_eq!(f.await.unwrap(), 200);
    }
    assert_eq!(server.stats().max_computing, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_speed_and_a_context_window_filled_by_unbounded_replies() {
    let server = serve_with(
        MockScript::always(MockReply::text("Sure.")),
        MockOptions {
            tokens_per_s: Some(1000.0),
            n_ctx: Some(400),
            fill_context: true,
            ..MockOptions::default()
        },
    )
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let url = chat_url(&server);
    // Without max_tokens the reply runs to the end of the window: 400 - 3 prompt tokens.
    let t = Instant::now();
    let (status, _, body) = post(&http, &url, &ask("hello")).await;
    let took = t.elapsed();
    assert_eq!(status, 200);
    assert_eq!(body["usage"]["prompt_tokens"], 3);
    assert_eq!(body["usage"]["completion_tokens"], 397);
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(content(&body).chars().count(), 397 * 4);
    assert!(content(&body).starts_with("Sure."));
    assert!(took >= Duration::from_millis(397), "{took:?}");

    // With max_tokens it is the scripted reply, generated in 2 / 1000 s.
    let mut b = ask("hello");
    b["max_tokens"] = json!(1000);
    let t = Instant::now();
    let (_, _, body) = post(&http, &url, &b).await;
    assert_eq!(content(&body), "Sure.");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert!(
        t.elapsed() < Duration::from_millis(397),
        "{:?}",
        t.elapsed()
    );
    let r = server.records();
    assert_eq!(r[1].max_tokens, Some(1000));
    // Clamped to what the window leaves.
    assert_eq!(r[1].effective_max_tokens, Some(397));
    assert_eq!(
        (r[0].max_tokens, r[0].effective_max_tokens),
        (None, Some(397))
    );
    assert_eq!(r[0].completion_tokens, Some(397));

    // A prompt over the window: 400, in OpenAI's and llama.cpp's words.
    let (status, _, body) = post(&http, &url, &ask(&"x".repeat(1600))).await;
    assert_eq!(status, 400);
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("maximum context length is 400 tokens")
            && msg.contains("requested 401 tokens")
            && msg.contains("exceeds the available context size"),
        "{msg}"
    );
    assert_eq!(body["error"]["n_ctx"], 400);
    assert_eq!(server.records()[2].outcome, MockOutcome::Invalid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_requests_hold_the_worker_unless_cancelled() {
    for cancel in [false, true] {
        let server = serve_with(
            MockScript::default(),
            MockOptions {
                slots: Some(1),
                latency: Duration::from_millis(1000),
                cancel_abandoned: cancel,
                ..MockOptions::default()
            },
        )
        .await
        .unwrap();
        let url = chat_url(&server);
        let impatient = reqwest::Client::builder()
            .timeout(Duration::from_millis(100))
            .build()
            .unwrap();
        assert!(impatient.post(&url).json(&ask("a")).send().await.is_err());
        server
            .wait_for_stats(Duration::from_secs(5), |s| s.abandoned == 1)
            .await
            .unwrap();
        // The next request waits for the abandoned one unless it was cancelled.
        let http = reqwest::Client::new();
        let (status, _, body) = post(&http, &url, &ask("b")).await;
        assert_eq!((status, content(&body)), (200, "echo: b"));
        let wait = server.records()[1].queue_wait_ms;
        let s = if cancel {
            assert!(wait < 300, "{wait}");
            server.stats()
        } else {
            assert!(wait >= 300, "{wait}");
            server
                .wait_for_stats(Duration::from_secs(5), |s| s.abandoned_computed == 1)
                .await
                .unwrap()
        };
        assert_eq!(
            (s.abandoned, s.abandoned_computed, s.abandoned_cancelled),
            (1, u64::from(!cancel), u64::from(cancel)),
            "cancel = {cancel}"
        );
        assert_eq!(server.records()[0].outcome, MockOutcome::Abandoned);
        assert_eq!(s.in_flight, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strictness_like_llama_cpp() {
    let call = MockReply {
        content: None,
        ..MockReply::tool_call("lookup", json!({"id": 7}))
    };
    let server = serve_with(
        MockScript::always(call),
        MockOptions {
            strict: MockStrictness::llama_cpp(),
            ..MockOptions::default()
        },
    )
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let url = chat_url(&server);
    let tools = json!([{"type": "function", "function": {"name": "lookup", "parameters": {}}}]);

    // Tools without tool_choice are ignored: the call comes back as text.
    let mut b = ask("find 7");
    b["tools"] = tools.clone();
    let (status, _, body) = post(&http, &url, &b).await;
    assert_eq!(status, 200);
    let message = &body["choices"][0]["message"];
    assert!(message.get("tool_calls").is_none(), "{body}");
    assert_eq!(content(&body), r#"{"name":"lookup","arguments":{"id":7}}"#);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");

    // With tool_choice the tools are used.
    b["tool_choice"] = json!("auto");
    b["max_tokens"] = json!(64);
    let (_, _, body) = post(&http, &url, &b).await;
    assert_eq!(
        body["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "lookup"
    );

    // An assistant message with null content: 500, as llama.cpp's template code.
    let b = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "found"},
    ]});
    let (status, _, body) = post(&http, &url, &b).await;
    assert_eq!(status, 500);
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("messages[1]") && msg.contains("got null"),
        "{msg}"
    );

    let r = server.records();
    assert_eq!(
        (r[0].tools, r[0].tools_ignored, r[0].tool_choice.clone()),
        (1, true, None)
    );
    assert_eq!(
        (
            r[1].tools_ignored,
            r[1].tool_choice.clone(),
            r[1].max_tokens
        ),
        (false, Some(json!("auto")), Some(64))
    );
    assert_eq!(
        (r[2].outcome, r[2].status),
        (MockOutcome::Invalid, Some(500))
    );
    // The rejected request used no reply; without strictness the same request is served.
    let lenient = serve(MockScript::default()).await.unwrap();
    let (status, _, _) = post(&http, &chat_url(&lenient), &b).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outages_refuse_connections_then_the_server_comes_back_on_its_port() {
    let server = serve(MockScript::default()).await.unwrap();
    let addr = server.addr();
    let http = reqwest::Client::new();
    let url = chat_url(&server);
    assert_eq!(post(&http, &url, &ask("1")).await.0, 200);

    // A request in flight when the server goes down is cut.
    server.push_replies([MockReply::text("slow").with_delay(2_000)]);
    let slow = tokio::spawn({
        let (http, url) = (http.clone(), url.clone());
        async move { http.post(&url).json(&ask("2")).send().await }
    });
    server
        .wait_for_stats(Duration::from_secs(5), |s| s.in_flight == 1)
        .await
        .unwrap();
    server.pause().await;
    assert!(server.is_down());
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    assert!(slow.await.unwrap().is_err());
    // Pausing a paused server is the same outage.
    server.pause().await;
    assert_eq!(server.stats().outages, 1);
    server.resume().await.unwrap();
    assert!(!server.is_down());
    assert_eq!(server.addr(), addr);
    // (A new client: the old one's pooled connection was cut with the rest.)
    let http = reqwest::Client::new();
    let (_, _, body) = post(&http, &url, &ask("3")).await;
    assert_eq!(content(&body), "echo: 3");

    // A timed outage ends by itself.
    server.pause_for(Duration::from_millis(300)).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    let back = server
        .wait_for_stats(Duration::from_secs(5), |s| !s.down)
        .await
        .unwrap();
    assert_eq!(back.outages, 2);
    let http = reqwest::Client::new();
    assert_eq!(post(&http, &url, &ask("4")).await.0, 200);

    // The control route answers, then goes down.
    let root = format!("http://{addr}");
    let r: Value = http
        .post(format!("{root}/mock/outage"))
        .body(r#"{"for_s": 0.3}"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["down_for_s"], 0.3);
    server
        .wait_for_stats(Duration::from_secs(5), |s| s.down)
        .await
        .unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    server
        .wait_for_stats(Duration::from_secs(5), |s| !s.down)
        .await
        .unwrap();
    let bad = http
        .post(format!("{root}/mock/outage"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    let s = server.stats();
    assert_eq!((s.outages, s.cut, s.requests), (3, 1, 4));
    assert_eq!(server.records()[1].outcome, MockOutcome::Cut);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_outage_kills_the_server_after_n_requests() {
    let server = serve_with(
        MockScript::default(),
        MockOptions {
            outage: Some(MockOutage {
                after_requests: 2,
                down_for: Duration::from_millis(400),
            }),
            ..MockOptions::default()
        },
    )
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let url = chat_url(&server);
    assert_eq!(post(&http, &url, &ask("1")).await.0, 200);
    assert_eq!(post(&http, &url, &ask("2")).await.0, 200);
    let t = Instant::now();
    assert!(http.post(&url).json(&ask("3")).send().await.is_err());
    server
        .wait_for_stats(Duration::from_secs(5), |s| s.down)
        .await
        .unwrap();
    assert!(tokio::net::TcpStream::connect(server.addr()).await.is_err());
    server
        .wait_for_stats(Duration::from_secs(5), |s| !s.down)
        .await
        .unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    // Once: the server stays up from now on.
    let http = reqwest::Client::new();
    for i in 4..8 {
        assert_eq!(post(&http, &url, &ask(&i.to_string())).await.0, 200);
    }
    let s = server.stats();
    assert_eq!((s.outages, s.cut, s.requests, s.answered), (1, 1, 7, 6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalls_never_answer_and_endless_bodies_never_end() {
    let server = serve(MockScript::queue([
        MockReply::stall(),
        MockReply::endless_body(),
    ]))
    .await
    .unwrap();
    let url = chat_url(&server);
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let err = impatient
        .post(&url)
        .json(&ask("a"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    let s = server
        .wait_for_stats(Duration::from_secs(5), |s| s.abandoned == 1)
        .await
        .unwrap();
    assert_eq!((s.stalled, s.in_flight), (1, 0));

    let http = reqwest::Client::new();
    let mut r = http.post(&url).json(&ask("b")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.content_length().is_none());
    let mut read = 0usize;
    while read < 4 << 20 {
        read += r.chunk().await.unwrap().expect("the body goes on").len();
    }
    drop(r);
    let s = server.stats();
    assert!(s.endless_bytes >= 4 << 20, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_counted_per_model_and_in_total() {
    let server = serve(
        MockScript::default()
            .with_rule(MockRule {
                model: Some("big".into()),
                reply: MockReply::text("x").with_usage(100, 10),
                ..MockRule::default()
            })
            .with_rule(MockRule {
                model: Some("fail".into()),
                reply: MockReply::status(500),
                ..MockRule::default()
            }),
    )
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let url = chat_url(&server);
    for model in ["big", "big", "small", "fail"] {
        let b = json!({"model": model, "messages": [{"role": "user", "content": "12345678"}]});
        post(&http, &url, &b).await;
    }
    let s = server.stats();
    let counts = |m: &str| s.models[m];
    assert_eq!(
        counts("big"),
        MockTokenCounts {
            requests: 2,
            completions: 2,
            prompt_tokens: 200,
            completion_tokens: 20
        }
    );
    // "echo: 12345678" is 14 characters: 4 tokens; the prompt 8 characters + 1: 3.
    assert_eq!(
        counts("small"),
        MockTokenCounts {
            requests: 1,
            completions: 1,
            prompt_tokens: 3,
            completion_tokens: 4
        }
    );
    assert_eq!(
        (counts("fail").requests, counts("fail").completions),
        (1, 0)
    );
    assert_eq!(
        s.usage,
        MockTokenCounts {
            requests: 4,
            completions: 3,
            prompt_tokens: 203,
            completion_tokens: 24
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_are_independent_servers() {
    let servers = serve_replicas(
        3,
        MockScript::queue([MockReply::text("first")]),
        MockOptions::default(),
    )
    .await
    .unwrap();
    let ports: std::collections::BTreeSet<u16> = servers.iter().map(|s| s.addr().port()).collect();
    assert_eq!(ports.len(), 3);
    let http = reqwest::Client::new();
    // Each has its own copy of the script.
    for s in &servers {
        let (_, _, body) = post(&http, &chat_url(s), &ask("x")).await;
        assert_eq!(content(&body), "first");
    }
    post(&http, &chat_url(&servers[1]), &ask("x")).await;
    let counts: Vec<u64> = servers.iter().map(|s| s.stats().requests).collect();
    assert_eq!(counts, [1, 2, 1]);
    assert!(
        serve_replicas(0, MockScript::default(), MockOptions::default())
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_options_and_replies_are_named() {
    let key = |o: MockOptions| match o.validate().unwrap_err() {
        Error::Config { key, .. } => key,
        e => panic!("{e:?}"),
    };
    assert_eq!(
        key(MockOptions {
            fill_context: true,
            ..MockOptions::default()
        }),
        "MockOptions.fill_context"
    );
    assert_eq!(
        key(MockOptions {
            addr: "0.0.0.0:0".parse().unwrap(),
            ..MockOptions::default()
        }),
        "MockOptions.addr"
    );
    assert_eq!(
        key(MockOptions {
            tokens_per_s: Some(0.0),
            ..MockOptions::default()
        }),
        "MockOptions.tokens_per_s"
    );
    let two_ways = MockReply {
        stall: true,
        ..MockReply::hang_up()
    };
    let err = serve(MockScript::queue([MockReply::text("ok"), two_ways]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Config { key, message } if key == "MockScript.queue[1]" && message.contains("hang_up and stall")),
        "{err:?}"
    );
    let err = MockScript::parse(
        r#"{"default": {"status": 42}}"#,
        std::path::Path::new("s.json"),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::Parse { location, message, .. } if location == "default" && message.contains("status 42")),
        "{err:?}"
    );
    let err = MockScript::parse(
        "{\"content\": \"a\"}\n{\"endless_body\": true, \"raw_body\": \"x\"}\n",
        std::path::Path::new("s.jsonl"),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::Parse { location, .. } if location == "line 2"),
        "{err:?}"
    );
    // The control route refuses an invalid reply and keeps the queue as it was.
    let server = serve(MockScript::default()).await.unwrap();
    let r = reqwest::Client::new()
        .post(format!("http://{}/mock/replies", server.addr()))
        .body(r#"[{"content": "a"}, {"status": 1000}]"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(server.queued(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_llama_cpp_preset_is_serial_strict_and_fills_its_window() {
    let options = MockOptions::llama_cpp(64, 200.0);
    let server = serve_with(MockScript::always(MockReply::text("ok")), options)
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let url = chat_url(&server);
    let all: Vec<_> = (0..3)
        .map(|_| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move { post(&http, &url, &ask("hi")).await })
        })
        .collect();
    for f in all {
        let (status, _, body) = f.await.unwrap();
        assert_eq!(status, 200);
        // 64 - 2 prompt tokens, at 200 tokens a second: 310 ms each, one after the other.
        assert_eq!(body["usage"]["completion_tokens"], 62);
    }
    let null = json!({"model": "m", "messages": [{"role": "assistant"}]});
    let (status, _, body) = post(&http, &url, &null).await;
    assert_eq!(status, 500);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Missing 'content' in messages[0]"));
    let s = server.stats();
    assert_eq!(s.max_computing, 1);
    assert!(s.queue_wait_ms_max >= 250, "{s:?}");
}
