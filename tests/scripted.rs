//! The offline scripted backend: determinism, variety, plan completion, stop tokens, and the
//! direction in which every persona axis moves its fingerprint features.

use std::collections::HashMap;

use futures::executor::block_on;
use ppol::dialogue::{Role, Turn};
use ppol::fitness::features::{
    feature_index, fingerprint_user_texts, FeatureSet, FEATURE_NAMES, N_FEATURES,
};
use ppol::llm::ToolSpec;
use ppol::simulate::episode::scripted::{
    PersonaPlay, PlaySource, ScriptedAgent, ScriptedUser, KNOWN_AXES,
};
use ppol::simulate::episode::{
    AgentSimulator, Plan, PlannedAction, Scenario, Termination, ToolEnv, ToolOutcome,
    UserSimulator, STOP_TOKENS,
};
use serde_json::{json, Map, Value};

// ---------------------------------------------------------------------------------------------
// A fake tool environment

/// Records every call; tools named in `tools` answer from a tiny state map, others are errors
/// unless `accept_any`.
struct FakeEnv {
    tools: Vec<&'static str>,
    accept_any: bool,
    state: HashMap<String, Value>,
    calls: Vec<(String, Value)>,
}

impl FakeEnv {
    fn new() -> Self {
        FakeEnv {
            tools: vec![
                "find_user_id_by_name_zip",
                "find_user_id_by_email",
                "get_user_details",
                "get_order_details",
                "get_product_details",
                "get_reservation_details",
                "exchange_delivered_order_items",
                "return_delivered_order_items",
                "cancel_pending_order",
                "cancel_reservation",
                "update_reservation_flights",
                "transfer_to_human_agents",
            ],
            accept_any: false,
            state: HashMap::new(),
            calls: Vec::new(),
        }
    }

    fn any() -> Self {
        FakeEnv {
            accept_any: true,
            ..FakeEnv::new()
        }
    }
}

impl ToolEnv for FakeEnv {
    fn tools(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|n| ToolSpec {
                name: n.to_string(),
                description: format!("fake {n}"),
                parameters: json!({"type": "object"}),
            })
            .collect()
    }

    fn call(&mut self, name: &str, arguments: &Value) -> ToolOutcome {
        self.calls.push((name.to_string(), arguments.clone()));
        if !self.accept_any && !self.tools.contains(&name) {
            return ToolOutcome {
                content: format!("Error: unknown tool {name}"),
                error: true,
            };
        }
        if !self.is_read_only(name) {
            self.state.insert(name.to_string(), arguments.clone());
        }
        ToolOutcome {
            content: json!({"ok": true, "tool": name, "args": arguments}).to_string(),
            error: false,
        }
    }

    fn is_read_only(&self, name: &str) -> bool {
        ["get_", "find_", "list_", "search_", "calculate", "think"]
            .iter()
            .any(|p| name.starts_with(p))
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios of our own, in the style of τ² retail and airline tasks

fn act(name: &str, arguments: Value) -> PlannedAction {
    PlannedAction {
        name: name.into(),
        arguments,
    }
}

fn scenario(id: &str, domain: &str, reason: &str, known: &str, unknown: &str) -> Scenario {
    Scenario {
        task_id: id.into(),
        domain: domain.into(),
        reason_for_call: reason.into(),
        known_info: known.into(),
        unknown_info: unknown.into(),
        task_instructions: String::new(),
        text: format!("{reason}\n{known}\n{unknown}"),
    }
}

fn tasks() -> Vec<(Scenario, Plan)> {
    vec![
        (
            scenario(
                "exchange",
                "retail",
                "You received your order #W1234567 and want to exchange the wireless mouse for the same model in black. You prefer to pay any price difference with your gift card.",
                "You are Lena Park in zip code 60614.",
                "You do not remember your email address.",
            ),
            Plan {
                actions: vec![
                    act("find_user_id_by_name_zip", json!({"first_name": "Lena", "last_name": "Park", "zip": "60614"})),
                    act("get_order_details", json!({"order_id": "#W1234567"})),
                    act("get_product_details", json!({"product_id": "7000000001"})),
                    act("exchange_delivered_order_items", json!({"order_id": "#W1234567", "item_ids": ["4000000001"], "new_item_ids": ["4000000002"], "payment_method_id": "gift_card_1234567"})),
                ],
                communicate_info: vec![],
            },
        ),
        (
            scenario(
                "return",
                "retail",
                "You want to return the desk lamp from your order #W7654321 because it flickers. You want the refund to go to your original credit card.",
                "Your name is Omar Haddad and your email is omar.haddad55@example.com.",
                "",
            ),
            Plan {
                actions: vec![
                    act("find_user_id_by_email", json!({"email": "omar.haddad55@example.com"})),
                    act("get_order_details", json!({"order_id": "#W7654321"})),
                    act("return_delivered_order_items", json!({"order_id": "#W7654321", "item_ids": ["5000000009"], "payment_method_id": "credit_card_7654321"})),
                ],
                communicate_info: vec![],
            },
        ),
        (
            scenario(
                "cancel_order",
                "retail",
                "You want to cancel your pending order because you no longer need it. You are in a hurry.",
                "You are Ana Silva in zipcode 10001.",
                "You do not remember your email address or your order id.",
            ),
            Plan {
                actions: vec![
                    act("find_user_id_by_name_zip", json!({"first_name": "Ana", "last_name": "Silva", "zip": "10001"})),
                    act("get_user_details", json!({"user_id": "ana_silva_1111"})),
                    act("get_order_details", json!({"order_id": "#W5550001"})),
                    act("cancel_pending_order", json!({"order_id": "#W5550001", "reason": "no longer needed"})),
                ],
                communicate_info: vec![],
            },
        ),
        (
            scenario(
                "cancel_reservation",
                "airline",
                "You want to cancel reservation K7PL2Q because your plans changed. You want a refund to the original payment method.",
                "You are Ravi Menon.\nYour user id is ravi_menon_4821.",
                "",
            ),
            Plan {
                actions: vec![
                    act("get_user_details", json!({"user_id": "ravi_menon_4821"})),
                    act("get_reservation_details", json!({"reservation_id": "K7PL2Q"})),
                    act("cancel_reservation", json!({"reservation_id": "K7PL2Q"})),
                ],
                communicate_info: vec![],
            },
        ),
        (
            scenario(
                "bags",
                "airline",
                "You want to know how many checked bags you can bring on your upcoming trip. You're pretty sure you are a Gold member.",
                "Your user id is zoe_kim_3307. Your confirmation number is 4TQ9ZX.",
                "You do not know the cabin of your flight.",
            ),
            Plan {
                actions: vec![
                    act("get_reservation_details", json!({"reservation_id": "4TQ9ZX"})),
                    act("get_user_details", json!({"user_id": "zoe_kim_3307"})),
                ],
                communicate_info: vec!["3".into()],
            },
        ),
        (
            scenario(
                "change_flight",
                "airline",
                "You want to change your flight from Denver to Boston on May 14 to a later flight on the same day. You want to stay in economy and pay any difference with your credit card ending in 1188.",
                "Your user id is liam_ortiz_7712.",
                "You do not remember your reservation number.",
            ),
            Plan {
                actions: vec![
                    act("get_user_details", json!({"user_id": "liam_ortiz_7712"})),
                    act("get_reservation_details", json!({"reservation_id": "R2DX9A"})),
                    act("update_reservation_flights", json!({"reservation_id": "R2DX9A", "cabin": "economy", "flights": [{"flight_number": "HAT210", "date": "2024-05-14"}], "payment_id": "credit_card_1188000"})),
                ],
                communicate_info: vec![],
            },
        ),
        (
            scenario(
                "policy_refusal",
                "airline",
                "You want a full refund for your basic economy ticket even though it is non-refundable.",
                "Your user id is ivy_chen_5150.",
                "",
            ),
            Plan::default(),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// A test-local episode loop

struct Episode {
    turns: Vec<Turn>,
    user_replies: Vec<(String, Option<Termination>)>,
    calls: Vec<(String, Value)>,
    end: Option<Termination>,
}

impl Episode {
    fn user_texts(&self) -> impl Iterator<Item = &str> {
        self.turns
            .iter()
            .filter(|t| t.role == Role::User)
            .map(|t| t.content.as_str())
    }
}

async fn run_async(
    user: &mut dyn UserSimulator,
    agent: &mut dyn AgentSimulator,
    env: &mut FakeEnv,
) -> Episode {
    let mut turns = vec![Turn::new(Role::Assistant, "Hi! How can I help you today?")];
    let mut user_replies = Vec::new();
    let mut end = None;
    for _ in 0..30 {
        let r = user.respond(&turns).await.expect("user");
        turns.push(Turn::new(Role::User, r.text.clone()));
        user_replies.push((r.text, r.stop));
        if r.stop.is_some() {
            end = r.stop;
            break;
        }
        let a = agent.respond(&turns, env).await.expect("agent");
        let last = a.turns.last().expect("agent says something");
        assert_eq!(last.role, Role::Assistant);
        assert!(!last.content.is_empty() && last.tool_calls.is_empty());
        turns.extend(a.turns);
        if a.transferred {
            end = Some(Termination::Transfer);
            break;
        }
    }
    Episode {
        turns,
        user_replies,
        calls: std::mem::take(&mut env.calls),
        end,
    }
}

fn run(
    s: &Scenario,
    plan: &Plan,
    axes: &Map<String, Value>,
    seed: u64,
    env: &mut FakeEnv,
) -> Episode {
    let mut user = ScriptedUser::new(s, axes, seed);
    let mut agent = ScriptedAgent::new(plan, seed);
    block_on(run_async(&mut user, &mut agent, env))
}

fn axes(on: &[&str], off: &[&str]) -> Map<String, Value> {
    let mut m = Map::new();
    for a in on {
        m.insert(a.to_string(), Value::Bool(true));
    }
    for a in off {
        m.insert(a.to_string(), Value::Bool(false));
    }
    m
}

fn fmt_dialogue(e: &Episode) -> String {
    e.turns
        .iter()
        .filter(|t| t.role != Role::Tool && !t.content.is_empty())
        .map(|t| format!("{:>9}: {}", t.role.as_str(), t.content))
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------------------------
// Basic behaviour

#[tokio::test]
async fn same_seed_same_dialogue_and_seeds_vary() {
    for (s, plan) in tasks() {
        for persona in [Map::new(), axes(&["terse", "frustrated", "ambiguous"], &[])] {
            let a = run(&s, &plan, &persona, 7, &mut FakeEnv::new());
            let b = run(&s, &plan, &persona, 7, &mut FakeEnv::new());
            assert_eq!(a.turns, b.turns, "{}", s.task_id);
            let texts: std::collections::HashSet<String> = (0..10)
                .map(|seed| {
                    let e = run(&s, &plan, &persona, seed, &mut FakeEnv::new());
                    e.user_texts().collect::<Vec<_>>().join("|")
                })
                .collect();
            assert!(
                texts.len() >= 5,
                "{}: only {} distinct dialogues over 10 seeds",
                s.task_id,
                texts.len()
            );
        }
    }
}

#[test]
fn plain_user_completes_every_plan_in_order() {
    for (s, plan) in tasks() {
        for seed in 0..40 {
            for persona in [
                Map::new(),
                axes(&[], &["terse", "skeptical", "frustrated", "ambiguous"]),
            ] {
                let e = run(&s, &plan, &persona, seed, &mut FakeEnv::new());
                let gold: Vec<(String, Value)> = plan
                    .actions
                    .iter()
                    .map(|a| (a.name.clone(), a.arguments.clone()))
                    .collect();
                assert_eq!(
                    e.calls,
                    gold,
                    "{} seed {seed}:\n{}",
                    s.task_id,
                    fmt_dialogue(&e)
                );
                assert_eq!(
                    e.end,
                    Some(Termination::UserStop),
                    "{} seed {seed}:\n{}",
                    s.task_id,
                    fmt_dialogue(&e)
                );
                for info in &plan.communicate_info {
                    assert!(e
                        .turns
                        .iter()
                        .any(|t| t.role == Role::Assistant && t.content.contains(info.as_str())));
                }
            }
        }
    }
}

#[test]
fn stop_tokens_only_in_the_stop_field() {
    let all_axes: Vec<&str> = KNOWN_AXES.iter().map(|(n, _)| *n).collect();
    for (s, plan) in tasks() {
        for seed in 0..30 {
            for persona in [
                Map::new(),
                axes(&all_axes, &[]),
                axes(&["terse", "frustrated"], &[]),
            ] {
                let e = run(&s, &plan, &persona, seed, &mut FakeEnv::new());
                let n = e.user_replies.len();
                for (i, (text, stop)) in e.user_replies.iter().enumerate() {
                    assert!(
                        !STOP_TOKENS.iter().any(|(tok, _)| text.contains(tok))
                            && !text.contains("###"),
                        "{text}"
                    );
                    assert_eq!(
                        stop.is_some(),
                        i + 1 == n && e.end == *stop,
                        "{}",
                        fmt_dialogue(&e)
                    );
                    assert!(
                        !text.contains(|c: char| ('\u{E000}'..='\u{E003}').contains(&c)),
                        "marker left in {text:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn agent_transfers_after_failed_authentication() {
    // The plan needs an email the user does not know.
    let s = scenario(
        "no_email",
        "retail",
        "You want to return a blender from order #W1111111.",
        "You are Kai Berg.",
        "You do not remember your email address or your zip code.",
    );
    let plan = Plan {
        actions: vec![
            act(
                "find_user_id_by_email",
                json!({"email": "kai.berg@example.com"}),
            ),
            act(
                "return_delivered_order_items",
                json!({"order_id": "#W1111111"}),
            ),
        ],
        communicate_info: vec![],
    };
    for seed in 0..20 {
        for persona in [Map::new(), axes(&["terse"], &[])] {
            let e = run(&s, &plan, &persona, seed, &mut FakeEnv::new());
            assert_eq!(e.end, Some(Termination::Transfer), "{}", fmt_dialogue(&e));
            assert_eq!(
                e.calls.last().map(|c| c.0.as_str()),
                Some("transfer_to_human_agents")
            );
            assert!(!e.calls.iter().any(|c| c.0 == "find_user_id_by_email"));
            assert!(
                !e.user_texts().any(|t| t.contains('@')),
                "revealed an unknown email"
            );
            let asks = e
                .turns
                .iter()
                .filter(|t| t.role == Role::Assistant && t.content.contains("email"))
                .count();
            assert!(
                (4..=5).contains(&asks),
                "{asks} asks:\n{}",
                fmt_dialogue(&e)
            );
        }
    }
}

#[test]
fn odd_scenarios_and_plans_never_panic() {
    let weird_plans = vec![
        Plan::default(),
        Plan {
            actions: vec![
                act("mystery_tool", Value::Null),
                act("frobnicate", json!({"x": [1, {"y": null}]})),
            ],
            communicate_info: vec!["".into(), "42".into()],
        },
        Plan {
            actions: vec![act("find_user_id_by_name_zip", json!({}))],
            communicate_info: vec![],
        },
        Plan {
            actions: vec![act("transfer_to_human_agents", json!({"summary": "x"}))],
            communicate_info: vec![],
        },
    ];
    let weird_scenarios = vec![
        Scenario::default(),
        scenario("x", "", "   ", "\n\n", "You do not know anything."),
        scenario(
            "y",
            "retail",
            "If the agent asks, say no.",
            "You are 123.",
            "",
        ),
        scenario(
            "z",
            "airline",
            "ÄÖÜ 漢字 #W12 ABCDEF? You're you.",
            "Your user id is a_1.",
            "email",
        ),
    ];
    let all_axes: Vec<&str> = KNOWN_AXES.iter().map(|(n, _)| *n).collect();
    for s in &weird_scenarios {
        for plan in &weird_plans {
            for persona in [
                Map::new(),
                axes(&all_axes, &[]),
                axes(&["Totally Unknown Axis"], &["terse"]),
            ] {
                for seed in 0..5 {
                    let e = run(s, plan, &persona, seed, &mut FakeEnv::new());
                    assert!(e.end.is_some(), "{}", fmt_dialogue(&e));
                }
            }
        }
    }
}

#[test]
fn typos_and_lowercase_keep_identifiers_intact() {
    for (s, plan) in tasks() {
        for seed in 0..40 {
            let e = run(
                &s,
                &plan,
                &axes(&["typos", "lowercase", "terse"], &[]),
                seed,
                &mut FakeEnv::new(),
            );
            let gold: Vec<(String, Value)> = plan
                .actions
                .iter()
                .map(|a| (a.name.clone(), a.arguments.clone()))
                .collect();
            assert_eq!(e.calls, gold, "{}", fmt_dialogue(&e));
            for t in e.user_texts() {
                let no_ids = t
                    .split_whitespace()
                    .filter(|w| !w.contains(|c: char| c.is_ascii_digit() || c == '@'))
                    .collect::<String>();
                assert!(
                    !no_ids.contains(|c: char| c.is_uppercase()),
                    "not lowercase: {t}"
                );
            }
        }
    }
}

#[test]
fn easy_mode_front_loads_and_ambiguous_withholds_identifiers() {
    let (s, plan) = &tasks()[0];
    for seed in 0..30 {
        let easy = run(s, plan, &Map::new(), seed, &mut FakeEnv::new());
        let first = easy.user_texts().next().unwrap();
        assert!(
            first.contains("#W1234567") && first.contains("60614") && first.contains("Lena"),
            "{first}"
        );
        let amb = run(
            s,
            plan,
            &axes(&["ambiguous"], &[]),
            seed,
            &mut FakeEnv::new(),
        );
        let first = amb.user_texts().next().unwrap();
        assert!(
            !first.contains("#W1234567") && !first.contains("60614"),
            "{first}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Feature directions

const SEEDS: u64 = 40;

/// Mean fingerprint over `SEEDS` seeds × all scenarios; `min_turns` filters dialogues.
fn mean_fp(persona: &Map<String, Value>, min_turns: usize) -> [f64; N_FEATURES] {
    let mut sum = [0.0; N_FEATURES];
    let mut n = 0.0;
    for (s, plan) in tasks() {
        for seed in 0..SEEDS {
            let e = run(&s, &plan, persona, seed * 7919 + 13, &mut FakeEnv::new());
            if e.user_texts().filter(|t| !t.is_empty()).count() < min_turns {
                continue;
            }
            let fp = fingerprint_user_texts(e.user_texts(), FeatureSet::Ppol011);
            for (a, b) in sum.iter_mut().zip(fp.0.iter()) {
                *a += b;
            }
            n += 1.0;
        }
    }
    assert!(n >= 100.0, "too few dialogues ({n})");
    sum.map(|x| x / n)
}

fn f(v: &[f64; N_FEATURES], name: &str) -> f64 {
    v[feature_index(name).expect("feature")]
}

/// (axis, feature, +1 up / -1 down, minimum absolute change)
const DIRECTIONS: &[(&str, &str, f64, f64)] = &[
    ("terse", "words_per_turn", -1.0, 3.0),
    ("terse", "short_utterance_rate", 1.0, 0.15),
    ("terse", "acknowledgment_rate", 1.0, 0.1),
    ("terse", "politeness_rate", -1.0, 0.05),
    ("terse", "opening_length", -1.0, 3.0),
    ("skeptical", "pushback_rate", 1.0, 0.1),
    ("frustrated", "emotional_expression_rate", 1.0, 0.2),
    ("frustrated", "accusatory_rate", 1.0, 0.1),
    ("frustrated", "politeness_rate", -1.0, 0.05),
    ("frustrated", "repetition_rate", 1.0, 0.1),
    ("ambiguous", "uncertainty_rate", 1.0, 0.15),
    ("ambiguous", "front_loading_ratio", -1.0, 0.03),
    ("polite", "politeness_rate", 1.0, 0.15),
    ("incremental_disclosure", "front_loading_ratio", -1.0, 0.03),
    ("incremental_disclosure", "opening_length", -1.0, 2.0),
    ("verbose", "words_per_turn", 1.0, 5.0),
    ("acknowledger", "acknowledgment_rate", 1.0, 0.1),
    ("formal", "formality_rate", 1.0, 0.2),
    ("impatient", "info_seeking_rate", 1.0, 0.15),
    ("emotional", "emotional_expression_rate", 1.0, 0.2),
];

#[test]
fn every_axis_moves_its_features() {
    let none = mean_fp(&Map::new(), 0);
    let none3 = mean_fp(&Map::new(), 3);
    let mut failures = Vec::new();
    let mut axes_seen: Vec<&str> = DIRECTIONS.iter().map(|d| d.0).collect();
    axes_seen.dedup();
    for axis in axes_seen {
        let min_turns = if axis == "ambiguous" || axis == "incremental_disclosure" {
            3
        } else {
            0
        };
        let on = mean_fp(&axes(&[axis], &[]), min_turns);
        let off = mean_fp(&axes(&[], &[axis]), min_turns);
        let none = if min_turns == 3 { none3 } else { none };
        for (_, feat, dir, margin) in DIRECTIONS.iter().filter(|d| d.0 == axis) {
            let (a, b, c) = (f(&none, feat), f(&off, feat), f(&on, feat));
            println!("{axis:>24} {feat:<28} none {a:7.3}  off {b:7.3}  on {c:7.3}");
            if (c - a) * dir < *margin || (c - b) * dir < *margin {
                failures.push(format!(
                    "{axis} {feat}: none {a:.3} off {b:.3} on {c:.3} (want {dir:+} by {margin})"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn easy_mode_is_easy_to_tell_from_humans() {
    let none = mean_fp(&Map::new(), 0);
    println!("no persona:");
    for (i, n) in FEATURE_NAMES.iter().enumerate() {
        println!("  {n:<28} {:7.3}", none[i]);
    }
    assert!(f(&none, "short_utterance_rate") < 0.05);
    assert!(f(&none, "politeness_rate") > 0.3);
    assert!(f(&none, "words_per_turn") > 15.0);
    assert!(f(&none, "opening_length") > 30.0);
    assert!(f(&none, "front_loading_ratio") > 0.5);
    assert!(f(&none, "identifiers_per_turn") > 0.15);
}

/// Print sample dialogues: `cargo test --test integration scripted_dump -- --ignored --nocapture`
/// (`SCRIPTED_AXES=terse,frustrated` picks the persona, `SCRIPTED_SEEDS=3` the number of seeds).
#[test]
#[ignore]
fn scripted_dump() {
    let on: Vec<String> = std::env::var("SCRIPTED_AXES")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let seeds: u64 = std::env::var("SCRIPTED_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let on: Vec<&str> = on.iter().map(String::as_str).collect();
    let persona = if on == ["plain"] {
        axes(&[], &["terse"])
    } else {
        axes(&on, &[])
    };
    for (s, plan) in tasks() {
        for seed in 0..seeds {
            let e = run(&s, &plan, &persona, seed, &mut FakeEnv::new());
            println!(
                "=== {} seed {seed} {:?}\n{}\n",
                s.task_id,
                e.end,
                fmt_dialogue(&e)
            );
        }
    }
}

/// The style and disclosure features (D1 without identity confusion and repetition, D2 without
/// identifiers, which depend on the scenarios) that tell easy-mode simulators from humans.
const STYLE_FEATURES: [&str; 8] = [
    "words_per_turn",
    "short_utterance_rate",
    "politeness_rate",
    "formality_rate",
    "acknowledgment_rate",
    "verbosity_cv",
    "front_loading_ratio",
    "opening_length",
];

/// Root mean square of (mean - human mean) / human std over `features` (std floored at 0.05).
fn human_distance(
    mean: &[f64; N_FEATURES],
    human_mean: &[f64],
    human_std: &[f64],
    features: &[&str],
) -> f64 {
    let sum: f64 = features
        .iter()
        .map(|n| {
            let i = feature_index(n).expect("feature");
            let z = (mean[i] - human_mean[i]) / human_std[i].max(0.05);
            z * z
        })
        .sum();
    (sum / features.len() as f64).sqrt()
}

#[test]
fn human_like_personas_are_closer_to_real_humans() {
    let Some(shared) = crate::util::shared() else {
        return;
    };
    let path = shared.join("human/tau_usi_airline_sample.jsonl");
    let humans =
        ppol::fitness::traces::load(&path, &ppol::fitness::traces::LoadOptions::default()).unwrap();
    let fps = ppol::fitness::features::fingerprint_many(&humans, FeatureSet::Ppol011);
    let rows: Vec<&[f64]> = fps.iter().map(|f| f.values()).collect();
    let (hm, hs) = ppol::fitness::reference::mean_std(&rows);
    let configs: Vec<(&str, Map<String, Value>)> = vec![
        ("no persona", Map::new()),
        (
            "plain persona",
            axes(&[], &["terse", "skeptical", "frustrated", "ambiguous"]),
        ),
        ("terse", axes(&["terse"], &[])),
        ("terse+ambiguous", axes(&["terse", "ambiguous"], &[])),
        (
            "terse+frustrated+ambiguous",
            axes(&["terse", "frustrated", "ambiguous"], &[]),
        ),
        (
            "terse+acknowledger+incremental",
            axes(&["terse", "acknowledger", "incremental_disclosure"], &[]),
        ),
    ];
    let mut dist = Vec::new();
    println!(
        "{:<30} {}",
        "",
        FEATURE_NAMES
            .iter()
            .map(|n| format!("{:>8}", &n[..n.len().min(8)]))
            .collect::<String>()
    );
    println!(
        "{:<30} {}  distance",
        "humans",
        hm.iter().map(|v| format!("{v:8.3}")).collect::<String>()
    );
    for (name, persona) in &configs {
        let m = mean_fp(persona, 0);
        let d = human_distance(&m, &hm, &hs, &STYLE_FEATURES);
        let all = human_distance(&m, &hm, &hs, &FEATURE_NAMES);
        println!(
            "{name:<30} {}  {d:.3} (all features {all:.3})",
            m.iter().map(|v| format!("{v:8.3}")).collect::<String>()
        );
        dist.push(d);
    }
    assert!(
        dist[4] < 0.7 * dist[0],
        "terse+frustrated+ambiguous {:.3} vs easy mode {:.3}",
        dist[4],
        dist[0]
    );
    assert!(dist[2] < 0.7 * dist[0] && dist[5] < 0.6 * dist[0]);
}

/// τ² tasks (`../shared/tau2/{retail,airline}/tasks.json`) as scenarios and plans.
fn tau2_tasks() -> Option<Vec<(Scenario, Plan)>> {
    let Some(dir) = crate::util::shared()
        .map(|d| d.join("tau2"))
        .filter(|d| d.is_dir())
    else {
        println!("skipped: ../shared/tau2 not found");
        return None;
    };
    let mut out = Vec::new();
    for domain in ["retail", "airline"] {
        let text = std::fs::read_to_string(dir.join(domain).join("tasks.json")).unwrap();
        let tasks: Vec<Value> = serde_json::from_str(&text).unwrap();
        for t in tasks {
            let ins = &t["user_scenario"]["instructions"];
            let field = |k: &str| ins[k].as_str().unwrap_or("").to_string();
            let s = Scenario {
                task_id: t["id"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| t["id"].to_string()),
                domain: domain.into(),
                reason_for_call: field("reason_for_call"),
                known_info: field("known_info"),
                unknown_info: field("unknown_info"),
                task_instructions: field("task_instructions"),
                text: [
                    "reason_for_call",
                    "known_info",
                    "unknown_info",
                    "task_instructions",
                ]
                .iter()
                .map(|k| field(k))
                .collect::<Vec<_>>()
                .join("\n"),
            };
            let crit = &t["evaluation_criteria"];
            let actions = crit["actions"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|x| act(x["name"].as_str().unwrap_or(""), x["arguments"].clone()))
                        .collect()
                })
                .unwrap_or_default();
            let communicate_info = crit["communicate_info"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            out.push((
                s,
                Plan {
                    actions,
                    communicate_info,
                },
            ));
        }
    }
    Some(out)
}

#[test]
fn real_tau2_tasks_complete_with_the_plain_user() {
    let Some(tasks) = tau2_tasks() else { return };
    let all_axes: Vec<&str> = KNOWN_AXES.iter().map(|(n, _)| *n).collect();
    let (mut ok, mut total) = (0, 0);
    let mut failed = Vec::new();
    for (s, plan) in &tasks {
        for seed in 0..3 {
            let e = run(s, plan, &Map::new(), seed, &mut FakeEnv::any());
            let gold: Vec<(String, Value)> = plan
                .actions
                .iter()
                .map(|a| (a.name.clone(), a.arguments.clone()))
                .collect();
            total += 1;
            if e.calls == gold {
                ok += 1;
            } else if seed == 0 {
                failed.push(format!("{}/{}", s.domain, s.task_id));
            }
            for persona in [
                axes(&all_axes, &[]),
                axes(&["terse", "frustrated", "ambiguous"], &[]),
            ] {
                let e = run(s, plan, &persona, seed, &mut FakeEnv::any());
                assert!(e.end.is_some());
            }
        }
    }
    println!("τ² tasks completed by the no-persona user: {ok}/{total}; failing: {failed:?}");
    assert!(ok as f64 >= 0.95 * total as f64, "{ok}/{total}: {failed:?}");
}

/// Speed: 10,000 episodes, printed as episodes per second
/// (`cargo test --release --test integration scripted_speed -- --ignored --nocapture`).
#[test]
#[ignore]
fn scripted_speed() {
    let tasks = tasks();
    let personas = [
        Map::new(),
        axes(&["terse", "frustrated", "ambiguous"], &[]),
        axes(&["skeptical", "verbose", "typos"], &["terse"]),
        axes(&["polite", "incremental_disclosure", "acknowledger"], &[]),
    ];
    let n = 10_000u64;
    let start = std::time::Instant::now();
    let mut user_turns = 0usize;
    for i in 0..n {
        let (s, plan) = &tasks[(i as usize) % tasks.len()];
        let persona = &personas[(i as usize / tasks.len()) % personas.len()];
        let e = run(s, plan, persona, i, &mut FakeEnv::new());
        user_turns += e.user_replies.len();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{n} episodes ({user_turns} user turns) in {secs:.2} s: {:.0} episodes/s",
        n as f64 / secs
    );
}

#[test]
fn how_episodes_end() {
    let mut table = Vec::new();
    for (name, persona) in [
        ("no persona", Map::new()),
        ("frustrated", axes(&["frustrated"], &[])),
        (
            "terse+frustrated+ambiguous",
            axes(&["terse", "frustrated", "ambiguous"], &[]),
        ),
        (
            "everything",
            axes(&KNOWN_AXES.iter().map(|(n, _)| *n).collect::<Vec<_>>(), &[]),
        ),
    ] {
        let mut ends: HashMap<String, usize> = HashMap::new();
        let mut complete = 0;
        let mut n = 0;
        for (s, plan) in tasks() {
            for seed in 0..40 {
                let e = run(&s, &plan, &persona, seed, &mut FakeEnv::new());
                *ends.entry(format!("{:?}", e.end)).or_default() += 1;
                let gold: Vec<(String, Value)> = plan
                    .actions
                    .iter()
                    .map(|a| (a.name.clone(), a.arguments.clone()))
                    .collect();
                complete += usize::from(e.calls == gold);
                if e.calls != gold
                    && name == "everything"
                    && std::env::var("SCRIPTED_DEBUG").is_ok()
                {
                    println!("--- {} seed {seed}\n{}", s.task_id, fmt_dialogue(&e));
                }
                n += 1;
            }
        }
        let mut ends: Vec<_> = ends.into_iter().collect();
        ends.sort();
        println!("{name:<28} plan completed {complete}/{n}; ends {ends:?}");
        table.push(complete as f64 / n as f64);
    }
    assert!(
        table[0] == 1.0 && table[1] > 0.7 && table[2] > 0.6,
        "{table:?}"
    );
}

/// Print dialogues on real τ² tasks: `SCRIPTED_TAU2=retail/0,airline/3 cargo test --test
/// integration scripted_tau2_dump -- --ignored --nocapture` (`SCRIPTED_AXES` as for `scripted_dump`).
#[test]
#[ignore]
fn scripted_tau2_dump() {
    let Some(tasks) = tau2_tasks() else { return };
    let want: Vec<String> = std::env::var("SCRIPTED_TAU2")
        .unwrap_or_default()
        .split(',')
        .map(str::to_string)
        .collect();
    let on: Vec<String> = std::env::var("SCRIPTED_AXES")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let on: Vec<&str> = on.iter().map(String::as_str).collect();
    let persona = if on == ["plain"] {
        axes(&[], &["terse"])
    } else {
        axes(&on, &[])
    };
    for (s, plan) in &tasks {
        if want.contains(&format!("{}/{}", s.domain, s.task_id)) {
            let e = run(s, plan, &persona, 1, &mut FakeEnv::any());
            println!(
                "=== {}/{} {:?}\n{}\n",
                s.domain,
                s.task_id,
                e.end,
                fmt_dialogue(&e)
            );
        }
    }
}

/// Mean index (0 = opening) of the first user turn holding an identifier of the scenario.
fn first_id_turn(persona: &Map<String, Value>) -> f64 {
    let (mut sum, mut n) = (0.0, 0.0);
    for (s, plan) in tasks() {
        let f = ppol::simulate::episode::scripted::Facts::from_scenario(&s);
        let ids: Vec<String> = f
            .object_ids()
            .iter()
            .map(|x| x.to_string())
            .chain(f.email.clone())
            .chain(f.user_id.clone())
            .chain(f.zip.clone())
            .collect();
        if ids.is_empty() {
            continue;
        }
        for seed in 0..SEEDS {
            let e = run(&s, &plan, persona, seed, &mut FakeEnv::new());
            let first = e
                .user_texts()
                .position(|t| ids.iter().any(|id| t.contains(id.as_str())));
            if let Some(i) = first {
                sum += i as f64;
                n += 1.0;
            }
        }
    }
    sum / n
}

#[test]
fn ambiguous_and_incremental_users_reveal_identifiers_later() {
    let none = first_id_turn(&Map::new());
    let plain = first_id_turn(&axes(&[], &["ambiguous", "incremental_disclosure"]));
    let amb = first_id_turn(&axes(&["ambiguous"], &[]));
    let inc = first_id_turn(&axes(&["incremental_disclosure"], &[]));
    println!("first identifier at user turn: none {none:.2}, plain {plain:.2}, ambiguous {amb:.2}, incremental {inc:.2}");
    assert!(none < 0.05, "{none}");
    assert!(
        amb > plain + 0.5 && inc > plain + 0.2,
        "plain {plain}, ambiguous {amb}, incremental {inc}"
    );
}

#[test]
fn terse_composes_with_other_axes() {
    let plain = mean_fp(&axes(&[], &["terse"]), 0);
    for (axis, feat) in [
        ("skeptical", "pushback_rate"),
        ("frustrated", "emotional_expression_rate"),
        ("ambiguous", "uncertainty_rate"),
        ("impatient", "info_seeking_rate"),
        ("emotional", "emotional_expression_rate"),
        ("polite", "politeness_rate"),
    ] {
        let both = mean_fp(&axes(&["terse", axis], &[]), 0);
        println!(
            "terse+{axis:<12} words_per_turn {:6.2} (plain {:6.2})  {feat} {:5.3} (plain {:5.3})",
            f(&both, "words_per_turn"),
            f(&plain, "words_per_turn"),
            f(&both, feat),
            f(&plain, feat)
        );
        assert!(
            f(&both, "words_per_turn") < 0.85 * f(&plain, "words_per_turn"),
            "terse+{axis} is not short"
        );
        assert!(
            f(&both, feat) > f(&plain, feat) + 0.1,
            "terse+{axis} lost {feat}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Persona text: the mechanics vocabulary (fitness/mechanics.toml)

fn run_text(
    s: &Scenario,
    plan: &Plan,
    text: &str,
    seed: u64,
    env: &mut FakeEnv,
) -> (Episode, PersonaPlay) {
    let mut user = ScriptedUser::for_persona(s, &Map::new(), text, seed);
    let play = user.persona_play().clone();
    let mut agent = ScriptedAgent::new(plan, seed);
    (block_on(run_async(&mut user, &mut agent, env)), play)
}

/// Mean fingerprint of a persona text over `SEEDS` seeds × all scenarios.
fn mean_fp_text(text: &str) -> [f64; N_FEATURES] {
    let mut sum = [0.0; N_FEATURES];
    let mut n = 0.0;
    for (s, plan) in tasks() {
        for seed in 0..SEEDS {
            let (e, _) = run_text(&s, &plan, text, seed * 7919 + 13, &mut FakeEnv::new());
            let fp = fingerprint_user_texts(e.user_texts(), FeatureSet::Ppol011);
            for (a, b) in sum.iter_mut().zip(fp.0.iter()) {
                *a += b;
            }
            n += 1.0;
        }
    }
    sum.map(|x| x / n)
}

/// Mean words of the user's non-empty messages.
fn mean_words(e: &Episode) -> f64 {
    let lens: Vec<usize> = e
        .user_texts()
        .filter(|t| !t.trim().is_empty())
        .map(|t| t.split_whitespace().count())
        .collect();
    lens.iter().sum::<usize>() as f64 / lens.len().max(1) as f64
}

#[test]
fn a_word_limit_in_the_text_yields_short_turns() {
    let base = "You are a busy parent calling from the car.";
    let limited = format!("{base} Keep every message under ten words.");
    let (mut plain_sum, mut lim_sum, mut over, mut total) = (0.0, 0.0, 0usize, 0usize);
    for (s, plan) in tasks() {
        for seed in 0..SEEDS {
            let (p, _) = run_text(&s, &plan, base, seed, &mut FakeEnv::new());
            let (l, play) = run_text(&s, &plan, &limited, seed, &mut FakeEnv::new());
            assert_eq!(play.source, PlaySource::Text);
            let wl = play.played.iter().find(|m| m.id == "word_limit");
            assert_eq!(wl.and_then(|m| m.n), Some(10), "{play:?}");
            plain_sum += mean_words(&p);
            lim_sum += mean_words(&l);
            for t in l.user_texts().filter(|t| !t.trim().is_empty()) {
                total += 1;
                if t.split_whitespace().count() > 10 {
                    over += 1;
                }
            }
        }
    }
    let n = (tasks().len() as u64 * SEEDS) as f64;
    let (plain, lim) = (plain_sum / n, lim_sum / n);
    println!("words per user turn: plain text {plain:.1}, under ten words {lim:.1}; {over}/{total} turns over ten");
    assert!(
        lim <= 8.0 && lim < 0.6 * plain,
        "plain {plain}, limited {lim}"
    );
    // identifiers and the task's own wording may need a longer message now and then
    assert!(
        (over as f64) < 0.03 * total as f64,
        "{over}/{total} turns over the limit"
    );
}

#[test]
fn unplayable_sentences_are_recorded_and_played_ones_are_not() {
    let (s, plan) = &tasks()[0];
    let text = "You collect vintage stamps from Peru. Type in lowercase. \
                Withhold your order number until the agent asks twice.";
    let (e, play) = run_text(s, plan, text, 3, &mut FakeEnv::new());
    assert_eq!(play.source, PlaySource::Text);
    assert_eq!(
        play.unplayed,
        vec!["You collect vintage stamps from Peru.".to_string()]
    );
    let ids = play.mechanic_ids();
    assert!(ids.contains(&"lowercase"), "{ids:?}");
    assert!(ids.contains(&"withhold_ids"), "{ids:?}");
    let w = play.played.iter().find(|m| m.id == "withhold_ids").unwrap();
    assert_eq!(w.count, Some(2), "{w:?}");
    let first = e.user_texts().next().unwrap();
    assert!(!first.contains("#W1234567"), "{first}");
}

#[test]
fn a_text_that_plays_nothing_falls_back_to_the_axes() {
    let (s, plan) = &tasks()[0];
    let terse = axes(&["terse", "frustrated"], &[]);
    for seed in 0..10 {
        let by_axes = run(s, plan, &terse, seed, &mut FakeEnv::new());
        let mut user = ScriptedUser::for_persona(s, &terse, "You are Ann, a nurse.", seed);
        assert_eq!(user.persona_play().source, PlaySource::Axes);
        assert_eq!(user.persona_play().unplayed, vec!["You are Ann, a nurse."]);
        let mut agent = ScriptedAgent::new(plan, seed);
        let by_text = block_on(run_async(&mut user, &mut agent, &mut FakeEnv::new()));
        assert_eq!(by_axes.turns, by_text.turns);
    }
}

#[test]
fn hard_text_personas_still_complete_every_plan() {
    let texts = [
        "Keep most messages under six words. Type in lowercase. No greeting. Withhold your \
         identifiers until the agent asks twice. Give one detail per turn.",
        "Push back repeatedly on what the agent proposes. Get more frustrated with every \
         refusal and repeat your demand. Sometimes trail off mid-sentence... Make typos.",
        "Reply with just 'ok' or 'yes' when you can. Ask clarifying questions about every \
         step. Sometimes change the subject to something else before coming back.",
    ];
    for (s, plan) in tasks() {
        let gold: Vec<(String, Value)> = plan
            .actions
            .iter()
            .map(|a| (a.name.clone(), a.arguments.clone()))
            .collect();
        for text in texts {
            for seed in 0..20 {
                let (e, play) = run_text(&s, &plan, text, seed, &mut FakeEnv::new());
                assert!(play.unplayed.is_empty(), "{text}: {:?}", play.unplayed);
                assert_eq!(
                    e.calls,
                    gold,
                    "{} seed {seed} {text}:\n{}",
                    s.task_id,
                    fmt_dialogue(&e)
                );
            }
        }
    }
}

/// (persona sentence, feature, +1 up / -1 down, minimum absolute change against a text that
/// plays only `clear_request`)
const TEXT_DIRECTIONS: &[(&str, &str, f64, f64)] = &[
    (
        "Keep messages under eight words.",
        "words_per_turn",
        -1.0,
        3.0,
    ),
    ("Push back on every proposal.", "pushback_rate", 1.0, 0.06),
    (
        "Get angrier with every refusal and blame the agent.",
        "accusatory_rate",
        1.0,
        0.05,
    ),
    (
        "You are very upset and it shows.",
        "emotional_expression_rate",
        1.0,
        0.15,
    ),
    // updates are rare in the fake tasks (one or two per dialogue), hence the small move
    (
        "When the agent gives an update, often reply with just 'ok' or 'got it'.",
        "acknowledgment_rate",
        1.0,
        0.02,
    ),
    (
        "Always sound unsure and hedge.",
        "uncertainty_rate",
        1.0,
        0.1,
    ),
    (
        "Withhold your identifiers until asked twice.",
        "front_loading_ratio",
        -1.0,
        0.03,
    ),
];

#[test]
fn every_text_mechanic_moves_its_features() {
    let anchor = "State your request clearly.";
    let base = mean_fp_text(anchor);
    for (sentence, feat, dir, min) in TEXT_DIRECTIONS {
        let v = mean_fp_text(&format!("{anchor} {sentence}"));
        let d = f(&v, feat) - f(&base, feat);
        println!(
            "{sentence:<55} {feat:<28} {:7.3} -> {:7.3}",
            f(&base, feat),
            f(&v, feat)
        );
        assert!(d * dir >= *min, "{sentence}: {feat} moved {d:+.3}");
    }
}
