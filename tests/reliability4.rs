//! Issue "Reliability 4: a budget that holds, an endpoint that cannot be starved, a cluster
//! that fails cleanly": one regression test per numbered item that is fixed.

use std::sync::Arc;

use ppol::llm::config::Price;
use ppol::llm::serve::ModelEndpoint;
use ppol::llm::{ChatModel, LlmClient, LlmConfig, ModelSpec};
use ppol::testing::mock_server::{serve_with, MockOptions, MockReply, MockScript, MockUsage};
use serde_json::json;

/// USD per 1M completion tokens that make one 300-token answer cost 0.6 USD.
const USD_PER_M: f64 = 2000.0;

fn priced_config(base_url: &str, max_usd: f64) -> LlmConfig {
    let mut spec = ModelSpec::openai("mock-model", Some(base_url.to_string()));
    spec.api_key_env = "PPOL_TEST_KEY_THAT_IS_NEVER_SET".to_string();
    spec.timeout_s = 20.0;
    let mut cfg = LlmConfig::with_default(spec);
    cfg.max_retries = 0;
    cfg.prices.insert(
        "mock-model".into(),
        Price {
            prompt: 0.0,
            completion: USD_PER_M,
        },
    );
    cfg.budget.max_usd = Some(max_usd);
    cfg
}

// Item 1: `max_usd = 10` with 80 simulator calls in flight at 0.6 USD each spent 14.4 and
// 21.0 USD: the cap was checked before each call, and every call in flight was paid. Now
// each call reserves its worst case (here its max_tokens of 300 at the role's price, 0.6 USD)
// before it is sent: 80 calls at once through the model endpoint, ten times over, and the
// upstream's own ledger never passes 10 USD. A simulator asking `max_tokens = 2^40` is
// clamped to the role's cap (300 for the user simulator) instead of forwarding 4294967295.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eighty_calls_in_flight_never_pay_past_max_usd() {
    for round in 0..10 {
        let mut reply = MockReply::text("ok");
        reply.delay_ms = 150;
        reply.usage = Some(MockUsage {
            prompt_tokens: 40,
            completion_tokens: 300,
        });
        let server = serve_with(MockScript::always(reply), MockOptions::default())
            .await
            .unwrap();
        let client = LlmClient::from_config(&priced_config(&server.base_url(), 10.0)).unwrap();
        let model: Arc<dyn ChatModel> = Arc::new(client.clone());
        let ep = ModelEndpoint::start(model).await.unwrap();
        let http = reqwest::Client::new();
        let url = format!("{}/chat/completions", ep.base_url());
        let calls = (0..80).map(|i| {
            let (http, url, key) = (http.clone(), url.clone(), ep.api_key().to_string());
            async move {
                let body = json!({
                    "model": "user-sim",
                    "messages": [{"role": "user", "content": format!("hello {i}")}],
                    // every other simulator asks for far more than the role allows
                    "max_tokens": if i % 2 == 0 { 1u64 << 40 } else { 300 },
                });
                let r = http
                    .post(&url)
                    .bearer_auth(key)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                r.status().as_u16()
            }
        });
        let statuses = futures::future::join_all(calls).await;
        let stats = server.stats();
        let paid = stats.usage.completion_tokens as f64 * USD_PER_M / 1e6
            + stats.usage.prompt_tokens as f64 * 0.0;
        assert!(
            paid <= 10.0 + 1e-9,
            "round {round}: the upstream was paid {paid} USD"
        );
        let ok = statuses.iter().filter(|s| **s == 200).count();
        let refused = statuses.iter().filter(|s| **s == 402).count();
        assert_eq!(ok + refused, 80, "round {round}: {statuses:?}");
        assert_eq!(ok, 16, "round {round}: 16 calls of 0.6 fit in 10 USD");
        let acc = client.accounting();
        assert!(acc.total.usd <= 10.0 + 1e-9, "{}", acc.total.usd);
        assert!(acc.total.budget_refusals >= 64);
        assert_eq!(
            client.budget_held(),
            (0.0, 0, 0),
            "every reservation settled"
        );
        for rec in server.records() {
            assert_eq!(rec.max_tokens, Some(300), "clamped to the role's cap");
        }
    }
}

/// An endpoint in front of an always-"ok" mock, with `[llm.serve]` limits set by `limits`.
async fn endpoint_with(
    limits: impl FnOnce(&mut ppol::llm::ServeLimits),
) -> (ppol::testing::mock_server::MockServer, ModelEndpoint) {
    let server = serve_with(
        MockScript::always(MockReply::text("ok")),
        MockOptions::default(),
    )
    .await
    .unwrap();
    let mut cfg = priced_config(&server.base_url(), 1000.0);
    limits(&mut cfg.serve);
    let client = LlmClient::from_config(&cfg).unwrap();
    let ep = ModelEndpoint::start(Arc::new(client)).await.unwrap();
    (server, ep)
}

/// One authorised chat call through `ep`: its status.
async fn one_call(ep: &ModelEndpoint) -> u16 {
    reqwest::Client::new()
        .post(format!("{}/chat/completions", ep.base_url()))
        .bearer_auth(ep.api_key())
        .json(&json!({"model": "user-sim", "messages": [{"role": "user", "content": "hi"}]}))
        .timeout(std::time::Duration::from_secs(20))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// Read what the server sends on `s` until it closes the connection (or `within` passes):
/// the bytes, and whether it closed.
async fn read_until_closed(
    s: &mut tokio::net::TcpStream,
    within: std::time::Duration,
) -> (String, bool) {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&got).into(), false),
        }
    }
}

// Item 2 (connections): 300 idle connections without a token held 256 fds for as long as the
// client liked, `accept` then failed with EMFILE in a busy loop and the simulators' own calls
// timed out. Now connections are bounded (`[llm.serve] max_connections`, the longest idle
// closed to make room) and a connection that sends no headers in `header_timeout_s` is
// closed: with 1000 idle and half-sent connections against a cap of 64, a simulator's call is
// still answered, the endpoint never holds more than 64, and the idle ones are gone after the
// header timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_sent_connections_cannot_starve_the_endpoint() {
    use tokio::io::AsyncWriteExt;
    let (_server, ep) = endpoint_with(|s| {
        s.max_connections = 64;
        s.header_timeout_s = 2.0;
    })
    .await;
    let mut idle = Vec::new();
    for i in 0..1000 {
        let mut s = tokio::net::TcpStream::connect(ep.addr()).await.unwrap();
        if i % 2 == 0 {
            // half a request line, then nothing
            s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
                .await
                .unwrap();
        }
        idle.push(s);
    }
    assert_eq!(one_call(&ep).await, 200, "a simulator's call is answered");
    assert!(ep.connections() <= 64, "{} open", ep.connections());
    assert!(ep.evicted() >= 1000 - 64, "{} evicted", ep.evicted());
    // the last connections, still open, are closed by the header timeout
    let mut last = idle.split_off(idle.len() - 8);
    for s in &mut last {
        let (_, closed) = read_until_closed(s, std::time::Duration::from_secs(15)).await;
        assert!(closed, "an idle connection outlived the header timeout");
    }
    assert!(ep.timed_out() >= 1, "header timeouts are counted");
    assert_eq!(ep.accept_errors(), 0);
    assert_eq!(one_call(&ep).await, 200);
    drop(idle);
}

// Item 2 (connections, the issue's measure): 1000 idle connections under the default cap of
// 1024 are all held, a simulator's call is still answered, and holding them costs (nearly) no
// CPU: the process's CPU time over 1.5 s is printed (run alone, it is the endpoint's) and must
// stay far from the busy loop the issue saw (both cores).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_held_connections_cost_no_cpu() {
    let (_server, ep) = endpoint_with(|s| s.header_timeout_s = 60.0).await;
    let mut idle = Vec::new();
    for _ in 0..1000 {
        idle.push(tokio::net::TcpStream::connect(ep.addr()).await.unwrap());
    }
    assert_eq!(one_call(&ep).await, 200, "a simulator's call is answered");
    let ticks = || {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let f: Vec<u64> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        // utime + stime (fields 14 and 15 of stat; 12 and 13 after the name and state)
        f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)
    };
    let (c0, t0) = (ticks(), std::time::Instant::now());
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let share = (ticks() - c0) as f64 / 100.0 / t0.elapsed().as_secs_f64();
    eprintln!(
        "process CPU while {} connections are held: {:.1}% of a core",
        ep.connections(),
        100.0 * share
    );
    assert!(ep.connections() >= 1000, "{}", ep.connections());
    assert!(share < 0.5, "{:.0}% of a core", 100.0 * share);
    assert_eq!(one_call(&ep).await, 200);
    drop(idle);
}

// Item 2 (bodies): a body that announces 40 MiB and stops after one byte was held open
// forever. Now a body larger than `max_body_bytes` is answered 413 before it is read, and a
// body that stops coming is answered 408 after `body_timeout_s`, its connection closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_stalled_bodies_are_answered_and_closed() {
    use tokio::io::AsyncWriteExt;
    let (server, ep) = endpoint_with(|s| s.body_timeout_s = 1.0).await;
    let head = |len: u64| {
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {len}\r\n\r\n{{",
            ep.api_key()
        )
    };
    let mut s = tokio::net::TcpStream::connect(ep.addr()).await.unwrap();
    s.write_all(head(40 << 20).as_bytes()).await.unwrap();
    let (answer, closed) = read_until_closed(&mut s, std::time::Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("max_body_bytes"), "{answer}");
    assert!(closed, "the connection of a refused body is closed");

    let mut s = tokio::net::TcpStream::connect(ep.addr()).await.unwrap();
    s.write_all(head(1000).as_bytes()).await.unwrap();
    let (answer, closed) = read_until_closed(&mut s, std::time::Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout_s"), "{answer}");
    assert!(closed, "the connection of a stalled body is closed");
    assert_eq!(server.requests(), 0, "nothing reached the model");
    assert_eq!(one_call(&ep).await, 200);
}

/// The process's peak resident memory (`VmHWM`), in bytes, after resetting it to the current
/// resident size when `reset`.
fn peak_rss(reset: bool) -> u64 {
    if reset {
        let _ = std::fs::write("/proc/self/clear_refs", "5");
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

// Item 2 (memory): each concurrent 30 MiB body cost ~140 MB, with no bound on how many (32 at
// once: 4.2-4.9 GB). Now request bytes in flight are bounded (`bodies_in_flight_bytes`, 64 MiB
// by default): 32 clients sending 30 MiB bodies at once are all answered, one or two read at a
// time, and the process's peak memory grows by less than 500 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_large_bodies_are_read_within_a_memory_bound() {
    let (server, ep) = endpoint_with(|_| {}).await;
    // one shared buffer for every client: the clients' side costs 30 MiB, not 960
    let mut body = br#"{"model": "user-sim", "messages": "#.to_vec();
    body.push(b'"');
    body.resize(30 << 20, b'x');
    body.extend_from_slice(b"\"}");
    let body = bytes::Bytes::from(body);
    let before = peak_rss(true);
    let http = reqwest::Client::new();
    let url = format!("{}/chat/completions", ep.base_url());
    let calls = (0..32).map(|_| {
        let (http, url, key, body) = (http.clone(), url.clone(), ep.api_key(), body.clone());
        async move {
            http.post(&url)
                .bearer_auth(key)
                .header("content-type", "application/json")
                .body(body)
                .timeout(std::time::Duration::from_secs(120))
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        }
    });
    let statuses = futures::future::join_all(calls).await;
    let grew = peak_rss(false).saturating_sub(before);
    // `messages` is no list: every body is read, parsed and refused 400
    assert!(statuses.iter().all(|s| *s == 400), "{statuses:?}");
    assert_eq!(server.requests(), 0);
    if before > 0 {
        assert!(grew < 500 << 20, "peak memory grew by {} MB", grew >> 20);
    }
}

// Item 6: `episodes -o OUT` interrupted after 24 episodes, then rerun with another seed into
// the same OUT, rewrote `OUT.partial` with the new plan's episodes: the 24 were gone without a
// word. Now finished episodes of another plan are moved aside (`OUT.partial.1`) with a
// warning that says what differs and how to go back to them.
#[test]
fn a_partial_output_of_another_plan_is_moved_aside_not_discarded() {
    use crate::util::run_ppol;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("eps.jsonl");
    let partial = tmp.path().join("eps.jsonl.partial");
    let out_s = out.display().to_string();
    let play = |seed: &str| {
        run_ppol(&[
            "episodes", "--domain", "demo", "--tasks", "0,1,2", "--trials", "8", "--seed", seed,
            "-o", &out_s,
        ])
    };
    let (code, _, err) = play("1");
    assert_eq!(code, 0, "{err}");
    // what an interrupted run leaves: its finished episodes in OUT.partial, no OUT
    std::fs::rename(&out, &partial).unwrap();
    let earlier = std::fs::read_to_string(&partial).unwrap();
    assert_eq!(earlier.lines().count(), 24);
    let (code, _, err) = play("2");
    assert_eq!(code, 0, "{err}");
    let aside = tmp.path().join("eps.jsonl.partial.1");
    assert_eq!(
        std::fs::read_to_string(&aside).unwrap(),
        earlier,
        "kept as it was"
    );
    assert!(err.contains("24 finished episode(s)"), "{err}");
    assert!(err.contains("other seeds"), "{err}");
    assert!(err.contains("eps.jsonl.partial.1"), "{err}");
    // moved back, the first plan resumes from it and plays nothing again
    std::fs::rename(&aside, &partial).unwrap();
    let (code, _, err) = play("1");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("24 episodes were taken from"), "{err}");
}

// Item 5: a panic inside the evolution thread left `ppol_rs.evolve` waiting forever (nothing
// ever reached the handle). Now a panic there reaches `wait()` as an error naming the run
// directory, here from a progress callback that panics on its first call.
#[test]
fn a_panic_inside_a_background_evolution_reaches_wait_as_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = ppol::evolve::config::RunConfig::quick();
    cfg.run.out = Some(tmp.path().join("run"));
    cfg.search.iterations = 2;
    let control = ppol::evolve::run::RunControl {
        progress: Some(std::sync::Arc::new(|_: &ppol::evolve::run::Progress| {
            panic!("a callback that breaks")
        })),
        ..Default::default()
    };
    let handle = ppol::front::ops::spawn_evolution(
        ppol::front::ops::EvolveStart::New(Box::new(cfg)),
        control,
    )
    .unwrap();
    let outcome = handle
        .wait(Some(std::time::Duration::from_secs(120)))
        .expect("the handle is told, not left waiting");
    let e = outcome.unwrap_err().to_string();
    assert!(
        e.contains("internal error") && e.contains("a callback that breaks"),
        "{e}"
    );
    assert!(e.contains("run"), "{e}");
}

// Item 7 (files): a judge prompt of 100 MB was accepted; `/dev/zero` as judge prompt, as
// `best/program.py` or as `config.toml` was read to 1 GiB before a wrong message ("no
// best/program.py", "config.toml is missing"); a FIFO as judge prompt blocked forever. Now a
// prompt, a program and a run's own files must be regular files, checked before a byte is
// read, and each has its cap: one error naming the file and its kind, exit 2, at once.
#[test]
fn inputs_are_checked_for_kind_and_size_before_they_are_read() {
    use crate::util::run_ppol;
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("prompt.fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let big = tmp.path().join("big.md");
    let mut text = "{user_a} {user_b}\n".to_string();
    text.push_str(&"x".repeat(2 << 20));
    std::fs::write(&big, text).unwrap();
    let human = format!("{}/fitness/demo/human.jsonl", env!("CARGO_MANIFEST_DIR"));
    let base = format!("{}/fitness/demo/baseline.jsonl", env!("CARGO_MANIFEST_DIR"));
    for (prompt, says) in [
        (fifo.display().to_string(), "is a FIFO (named pipe)"),
        ("/dev/zero".to_string(), "is a device"),
        (big.display().to_string(), "larger than 1 MiB"),
    ] {
        let started = std::time::Instant::now();
        let (code, _, err) = run_ppol(&[
            "audit",
            "--human",
            &human,
            &base,
            "--llm",
            "scripted",
            "--judge-pairs",
            "2",
            "--judge-prompt",
            &prompt,
        ]);
        assert_eq!(code, 2, "{prompt}: {err}");
        assert!(
            err.contains(says) && err.contains(&prompt),
            "{prompt}: {err}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
    }

    // a run whose best program and configuration are devices
    let run = tmp.path().join("run");
    let (code, _, err) = run_ppol(&[
        "evolve",
        "--iterations",
        "1",
        "--seed",
        "3",
        "--out",
        run.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
    let best = run.join("best/program.py");
    std::fs::remove_file(&best).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &best).unwrap();
    let (code, _, err) = run_ppol(&["generate", "--run", run.to_str().unwrap(), "-n", "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("program.py") && err.contains("is a device"),
        "{err}"
    );
    let config = run.join("config.toml");
    std::fs::remove_file(&config).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &config).unwrap();
    let (code, _, err) = run_ppol(&["eval", run.to_str().unwrap(), "--n", "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("config.toml") && err.contains("is a device"),
        "{err}"
    );
    assert!(!err.contains("missing"), "{err}");
}

// Item 9: `evolve` against an unreachable Ray address left `config.toml` and a `run.lock` in a
// run directory that holds no run. Now a run that fails before it made anything takes back
// what starting it wrote (the directory too, when it made it); a directory with anything
// else in it is kept whole for `ppol resume`.
#[test]
fn a_run_that_fails_before_it_starts_leaves_no_half_made_run_directory() {
    use crate::util::run_ppol;
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks.jsonl");
    std::fs::write(
        &tasks,
        "{\"task_id\": \"t1\", \"context\": \"a customer\", \"split\": \"train\"}\n",
    )
    .unwrap();
    let cfg = tmp.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[run]\nworld = \"external:python3 -c pass\"\n[world]\ntask_file = \"{}\"\n\
             executor = \"ray\"\n[world.ray]\naddress = \"127.0.0.1:1\"\nstart_timeout_s = 5\n",
            tasks.display()
        ),
    )
    .unwrap();
    let run = tmp.path().join("run");
    let start = || {
        let (cfg, run) = (cfg.to_str().unwrap(), run.to_str().unwrap());
        run_ppol(&[
            "evolve",
            "--config",
            cfg,
            "--out",
            run,
            "--iterations",
            "1",
            "--quiet",
        ])
    };
    let (code, _, err) = start();
    assert_eq!(code, 2, "{err}");
    assert!(
        !run.exists(),
        "nothing is left of a run that never started: {err}"
    );
    // a directory the user made is kept, emptied of what ppol wrote in it
    std::fs::create_dir(&run).unwrap();
    let (code, _, err) = start();
    assert_eq!(code, 2, "{err}");
    assert!(run.is_dir());
    assert_eq!(std::fs::read_dir(&run).unwrap().count(), 0);
}

// Item 4 (in part): `eval` and `resume` of a Ray run whose cluster is gone offered no way to
// point it at another cluster or the local executor but editing config.toml. Now both take
// `--executor` and `--ray-address` (Python `executor=`, `ray_address=`), over the run's own
// `[world]`, without changing its config.toml.
#[test]
fn eval_and_resume_play_a_ray_run_elsewhere() {
    use crate::util::run_ppol;
    let fixture = |f: &str| format!("{}/tests/fixtures/worlds/{f}", env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let run_s = run.to_str().unwrap();
    let world = format!("external:python3 {}", fixture("my_sim.py"));
    let (code, _, err) = run_ppol(&[
        "evolve",
        "--world",
        &world,
        "--task-file",
        &fixture("tasks.jsonl"),
        "--iterations",
        "2",
        "--seed",
        "1",
        "--out",
        run_s,
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
    // the run was made on a Ray cluster that is gone now
    let cfg_path = run.join("config.toml");
    let cfg = std::fs::read_to_string(&cfg_path).unwrap();
    let gone = cfg
        .replace("executor = \"local\"", "executor = \"ray\"")
        .replace("address = \"auto\"", "address = \"127.0.0.1:1\"");
    assert_ne!(
        gone, cfg,
        "the test rewrites the run's executor and address"
    );
    std::fs::write(&cfg_path, &gone).unwrap();
    let (code, _, _) = run_ppol(&["eval", run_s, "--n", "1", "--quiet"]);
    assert_eq!(code, 2, "the cluster is gone");
    let (code, out, err) = run_ppol(&["eval", run_s, "--n", "1", "--executor", "local", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"rows\""), "{out}");
    let (code, _, err) = run_ppol(&[
        "resume",
        run_s,
        "--iterations",
        "3",
        "--executor",
        "local",
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(&cfg_path).unwrap(),
        gone,
        "config.toml unchanged"
    );
    let (code, _, err) = run_ppol(&[
        "eval",
        run_s,
        "--n",
        "1",
        "--executor",
        "local",
        "--ray-address",
        "auto",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("ray_address"), "{err}");
}

// Item 9: a 10 MB `run.name` was accepted and `evolve` then failed with a 10 MB error line
// that did not name the key. Now the name is bounded (100 characters) and the error names the
// key and the length, never the name.
#[test]
fn a_huge_run_name_is_one_short_error_naming_the_key() {
    use crate::util::run_ppol;
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!("[run]\nname = \"{}\"\n", "n".repeat(10 << 20)),
    )
    .unwrap();
    let (code, _, err) = run_ppol(&[
        "evolve",
        "--config",
        cfg.to_str().unwrap(),
        "--print-config",
    ]);
    assert_eq!(code, 2, "{}", &err[..err.len().min(500)]);
    assert!(err.len() < 2000, "a short error, got {} bytes", err.len());
    assert!(
        err.contains("run.name") && err.contains("at most 100"),
        "{err}"
    );
}
