//! `ppol report`: a realistic run directory is built from the crate's own types (run log events,
//! a human reference of the demo traces, episodes, personas, an eval table), then the HTML is
//! checked for self-containment, chart contents, lineage order, escaping and missing files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ppol::dialogue::{Dialogue, Role, ToolCall, Turn};
use ppol::evolve::runlog::{
    EvalMetrics, EvalRow, EvalTable, Event, FailureInfo, PersonaOutcome, RunLog,
};
use ppol::fitness::coverage::Dice;
use ppol::fitness::features::FeatureSet;
use ppol::fitness::reference::HumanReference;
use ppol::fitness::traces::{self, LoadOptions};
use ppol::persona::Persona;
use ppol::simulate::episode::record::{Episode, EpisodeStatus};
use ppol::simulate::episode::Termination;
use serde_json::{json, Map, Value};

use crate::util::{root, run_ppol};

/// Iterations of the fixture run.
const ITERATIONS: u64 = 30;
/// Failed candidates in the fixture (iterations 4, 9, 15, 22, 27).
const FAILED: [u64; 5] = [4, 9, 15, 22, 27];
/// Validation events (iterations 10, 20, 30).
const VALIDATIONS: [u64; 3] = [10, 20, 30];
/// The best program's lineage, seed first.
const LINEAGE: [&str; 5] = ["p0001", "p0003", "p0011", "p0019", "p0028"];
/// Dialogue text that must come out escaped.
const NASTY: &str = r#"<script>alert("x")</script> see https://evil.example/?a=1&b=2 <img src=x>"#;

fn demo(name: &str) -> Vec<Dialogue> {
    traces::load(
        &root().join("fitness/demo").join(name),
        &LoadOptions::default(),
    )
    .unwrap()
}

fn metrics(hl: f64, cov: f64, seed: f64) -> EvalMetrics {
    let d = |k: f64| (0.4 + 0.5 * ((seed * k).sin() * 0.5 + 0.5) * hl.max(0.2)).min(1.0);
    let dice = Dice {
        D1: d(1.3),
        D2: d(2.1),
        D3: d(0.7),
        D4: d(1.9),
        overall: 0.0,
    };
    let dice = Dice {
        overall: (dice.D1 + dice.D2 + dice.D3 + dice.D4) / 4.0,
        ..dice
    };
    EvalMetrics {
        combined: 0.5 * hl + 0.5 * cov,
        combined_ramp: None,
        human_likeness: hl,
        coverage: cov,
        lambda_h: 0.5,
        lambda_b: 0.5,
        success_rate: 0.6 + 0.01 * (seed % 20.0),
        n_episodes: 12,
        n_failed_episodes: 0,
        n_tasks: 4,
        n_personas: 3,
        dice,
    }
}

fn episode(d: &Dialogue, persona: &str, trial: u32) -> Episode {
    Episode {
        id: format!(
            "{}:{persona}:{trial}",
            d.task_id.clone().unwrap_or_default()
        ),
        task_id: d.task_id.clone().unwrap_or_default(),
        domain: d.domain.clone().unwrap_or_else(|| "demo".into()),
        conversation: d.turns.clone(),
        persona_id: persona.into(),
        persona: String::new(),
        axis_placement: Map::new(),
        trial,
        seed: 7 + u64::from(trial),
        termination: Termination::UserStop,
        reward: Some(if trial % 3 == 2 { 0.0 } else { 1.0 }),
        reward_info: Value::Null,
        status: EpisodeStatus::Ok,
        error: None,
        backend: "scripted".into(),
        usage: Value::Null,
        persona_play: Some(
            serde_json::from_value(json!({"source": "text",
                "played": [{"id": "word_limit", "n": 12}, {"id": "pushback", "count": 1}],
                "unplayed": ["You are a nurse on night shifts."]}))
            .unwrap(),
        ),
        role_confusion: 0,
        notes: Vec::new(),
        agent: None,
        meta: None,
        tau2_data: None,
    }
}

fn cost(calls: u64, usd: f64) -> BTreeMap<String, Value> {
    let role = |c: u64, u: f64| {
        json!({"calls": c, "cache_hits": c / 4, "prompt_tokens": c * 900,
               "completion_tokens": c * 120, "usd": u})
    };
    let mut m = BTreeMap::new();
    m.insert(
        "roles".into(),
        json!({"user-sim": role(calls, usd * 0.6), "agent": role(calls, usd * 0.3),
               "mutator": role(1, usd * 0.1)}),
    );
    m.insert("total".into(), role(2 * calls + 1, usd));
    m
}

/// One evaluated candidate of the fixture run.
#[derive(Clone)]
struct Candidate {
    it: u64,
    id: String,
    parent: Option<String>,
    mutation: &'static str,
    hl: f64,
    cov: f64,
}

/// The evaluated candidates: the lineage improves steadily, the others wander below it.
fn candidates() -> Vec<Candidate> {
    let kinds = ["diff", "rewrite", "structural", "crossover"];
    (1..=ITERATIONS)
        .filter(|it| !FAILED.contains(it))
        .map(|it| {
            let id = format!("p{it:04}");
            let t = it as f64 / ITERATIONS as f64;
            let parent = if it == 1 {
                None
            } else if let Some(i) = LINEAGE.iter().position(|l| *l == id) {
                Some(LINEAGE[i - 1].to_string())
            } else {
                Some("p0001".to_string())
            };
            let on_lineage = LINEAGE.contains(&id.as_str());
            let wobble = ((it * 37 % 11) as f64) / 11.0;
            let (hl, cov) = if on_lineage {
                (0.2 + 0.5 * t, 0.4 + 0.35 * t)
            } else {
                (0.15 + 0.35 * t * wobble, 0.35 + 0.3 * t * wobble)
            };
            let mutation = if it == 1 {
                "seed"
            } else {
                kinds[(it as usize) % kinds.len()]
            };
            Candidate {
                it,
                id,
                parent,
                mutation,
                hl,
                cov,
            }
        })
        .collect()
}

/// Write a complete fixture run directory into `dir`.
pub fn write_fixture_run(dir: &Path) {
    std::fs::create_dir_all(dir.join("baseline")).unwrap();
    std::fs::create_dir_all(dir.join("best")).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        "name = \"fixture\"\nseed = 42\n[evolution]\niterations = 30\n",
    )
    .unwrap();
    // human reference
    let human = demo("human.jsonl");
    let reference = HumanReference::build(
        &human,
        FeatureSet::Ppol011,
        vec!["fitness/demo/human.jsonl".into()],
    )
    .unwrap();
    reference.save(&dir.join("human_ref.json")).unwrap();
    std::fs::write(dir.join("discriminator.json"), "{\"trees\": []}\n").unwrap();
    // baseline and best episodes
    let jsonl = |eps: &[Episode]| {
        eps.iter()
            .map(|e| serde_json::to_string(e).unwrap() + "\n")
            .collect::<String>()
    };
    let base: Vec<Episode> = demo("baseline.jsonl")
        .iter()
        .enumerate()
        .map(|(i, d)| episode(d, "none", i as u32 % 3))
        .collect();
    std::fs::write(dir.join("baseline/episodes.jsonl"), jsonl(&base)).unwrap();
    let mut best: Vec<Episode> = demo("candidates.jsonl")
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let p = d.meta["persona_id"].as_str().unwrap_or("p").to_string();
            episode(d, &p, i as u32 % 3)
        })
        .collect();
    // the first sampled dialogue gets untrusted text and a tool call
    best[0].conversation.insert(1, Turn::new(Role::User, NASTY));
    let mut call = Turn::new(Role::Assistant, "");
    call.tool_calls.push(ToolCall {
        id: "call_1".into(),
        name: "get_order_details".into(),
        arguments: json!({"order_id": "W2371", "note": "<b>&</b>"}),
    });
    let mut result = Turn::new(Role::Tool, "{\"status\": \"delivered\"}");
    result.tool_call_id = Some("call_1".into());
    best[0].conversation.insert(2, call);
    best[0].conversation.insert(3, result);
    let mut failed = best[1].clone();
    failed.id = "demo_return:terse:9".into();
    failed.status = EpisodeStatus::Failed;
    failed.termination = Termination::Error;
    failed.error = Some("agent endpoint timed out".into());
    failed.reward = None;
    best.push(failed);
    std::fs::write(dir.join("best/episodes.jsonl"), jsonl(&best)).unwrap();
    // personas
    let personas: Vec<Persona> = ["terse", "skeptical", "frustrated", "ambiguous", "chatty"]
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let mut axes = Map::new();
            axes.insert("terse".into(), json!(i % 2 == 0));
            axes.insert("pushback".into(), json!(i % 3 == 0));
            axes.insert("emotional".into(), json!(i >= 2));
            Persona {
                task_id: Some("demo_return".into()),
                persona_id: (*id).into(),
                description: format!("A {id} customer & a <busy> person."),
                axis_placement: axes,
                text: format!("You are {id}. Type short lines & never say <please>."),
                reasoning: Some("covers the terse corner of the human cloud".into()),
                source: None,
            }
        })
        .collect();
    let text: String = personas
        .iter()
        .map(|p| serde_json::to_string(p).unwrap() + "\n")
        .collect();
    std::fs::write(dir.join("best/personas.jsonl"), text).unwrap();
    // the best program
    let cands = candidates();
    let best_cand = cands.iter().find(|c| c.id == LINEAGE[4]).unwrap();
    let best_metrics = metrics(best_cand.hl, best_cand.cov, 28.0);
    std::fs::write(
        dir.join("best/program.py"),
        "def generate(task, n):\n    # keep turns short & terse <3\n    return [persona(task, i) for i in range(n)]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("best/program.json"),
        serde_json::to_string_pretty(&json!({
            "program_id": LINEAGE[4],
            "metrics": best_metrics,
            "lineage": LINEAGE,
        }))
        .unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("checkpoint.json"), "{}").unwrap();
    // the log
    let mut log = RunLog::open(&dir.join("log.jsonl")).unwrap();
    let splits: BTreeMap<String, Vec<String>> = [("train", 4), ("val", 2), ("test", 2)]
        .iter()
        .map(|(s, n)| {
            (
                s.to_string(),
                (0..*n).map(|i| format!("demo_task_{s}_{i}")).collect(),
            )
        })
        .collect();
    log.append(Event::RunStarted {
        schema_version: ppol::evolve::runlog::SCHEMA_VERSION,
        ppol_version: "0.1.0".into(),
        name: "fixture-run".into(),
        config: json!({"seed": 42}),
        seeds: [("root", 42), ("sandbox", 43), ("episodes", 44)]
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        offline: true,
        models: [("user-sim", "scripted"), ("agent", "scripted")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        hashes: BTreeMap::new(),
        feature_set: "ppol-0.1.1".into(),
        domain: "demo".into(),
        world: "demo".into(),
        splits,
        human: json!({"sources": ["fitness/demo/human.jsonl"], "n": 25}),
    })
    .unwrap();
    log.append(Event::DiscriminatorTrained {
        n_human: 25,
        n_baseline: 18,
        grouped_auc: Some(0.912),
        top_features: vec![
            ("words_per_turn".into(), 0.31),
            ("politeness_rate".into(), 0.22),
        ],
        baseline: metrics(0.12, 0.3, 0.0),
    })
    .unwrap();
    for it in 1..=ITERATIONS {
        if FAILED.contains(&it) {
            let stage = ["syntax", "sandbox:generate", "validation"][(it % 3) as usize];
            log.append(Event::CandidateFailed {
                iteration: it,
                program_id: Some(format!("p{it:04}")),
                parent_id: Some("p0001".into()),
                mutation: "diff".into(),
                failure: FailureInfo {
                    stage: stage.into(),
                    reason: format!("generator raised ValueError <{it}>"),
                    stderr_tail: "Traceback ...".into(),
                    raw_reply: if stage == "syntax" {
                        format!("RAW_REPLY_MARKER <{it}> def broken(:")
                    } else {
                        String::new()
                    },
                    prompt_fit: if stage == "syntax" {
                        "context window 4096 tokens: PROMPT_FIT_MARKER".into()
                    } else {
                        String::new()
                    },
                },
                requeued: false,
            })
            .unwrap();
        } else {
            let Candidate {
                id,
                parent,
                mutation,
                hl,
                cov,
                ..
            } = cands.iter().find(|c| c.it == it).unwrap().clone();
            let m = metrics(hl, cov, it as f64);
            log.append(Event::CandidateEvaluated {
                iteration: it,
                program_id: id.clone(),
                parent_id: parent,
                second_parent_id: None,
                island: (it % 2) as usize,
                mutation: mutation.into(),
                prompt_fit: None,
                mutation_summary: format!("step {it}: shorter turns & more <pushback>"),
                epoch: 1 + it / 10,
                batch_in_epoch: it % 10,
                tasks: vec!["demo_return".into()],
                metrics: m,
                new_elite: LINEAGE.contains(&id.as_str()),
                new_best: LINEAGE.contains(&id.as_str()),
                stage_score: None,
                bar: None,
                personas: vec![PersonaOutcome {
                    task_id: "demo_return".into(),
                    persona_id: "terse".into(),
                    axes: vec!["terse".into()],
                    p_human: Some(hl),
                    reward: Some(1.0),
                }],
                reflection: "ok".into(),
                code_hash: format!("{it:064x}"),
                code: "def generate(): pass".into(),
                seconds: 2.5 + it as f64 * 0.1,
                cost: cost(12, 0.02),
            })
            .unwrap();
        }
        if VALIDATIONS.contains(&it) {
            let best_so_far = cands
                .iter()
                .rev()
                .find(|c| c.it <= it && LINEAGE.contains(&c.id.as_str()))
                .unwrap();
            log.append(Event::Validation {
                iteration: it,
                program_id: best_so_far.id.clone(),
                metrics: metrics(best_so_far.hl - 0.03, best_so_far.cov - 0.02, it as f64),
            })
            .unwrap();
            log.append(Event::Checkpoint { iteration: it }).unwrap();
        }
    }
    log.append(Event::RunStopped {
        reason: "iterations".into(),
        iterations: ITERATIONS,
        best_program_id: Some(LINEAGE[4].into()),
        best_metrics: Some(best_metrics.clone()),
        best_validation: None,
        cost: cost(12 * ITERATIONS, 0.55),
        mutations: BTreeMap::new(),
        new_bests: BTreeMap::new(),
        episodes: None,
    })
    .unwrap();
    drop(log);
    // spread the events over time, one minute apart, as a real run would
    let path = dir.join("log.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let timed: String = text
        .lines()
        .map(|l| {
            let mut r: ppol::evolve::runlog::Record = serde_json::from_str(l).unwrap();
            r.time = ppol::io::rfc3339(1_795_417_200 + (r.seq - 1) * 60);
            serde_json::to_string(&r).unwrap() + "\n"
        })
        .collect();
    std::fs::write(&path, timed).unwrap();
    // the eval table
    let row = |name: &str, hl: f64, cov: f64, seed: f64, skipped: Option<&str>| {
        let m = metrics(hl, cov, seed);
        EvalRow {
            name: name.into(),
            human_likeness: hl,
            coverage: cov,
            score: 0.5 * hl + 0.5 * cov,
            dice: m.dice,
            success_rate: if name == "human" { None } else { Some(0.7) },
            n_dialogues: 24,
            skipped: skipped.map(str::to_string),
            personas_generated: None,
            failures: Vec::new(),
            per_task: Default::default(),
            audit: None,
            dialogues: Vec::new(),
        }
    };
    // the audit of two rows: the base told apart, the evolved with too few dialogues
    let audited = |mut r: EvalRow, auc: Option<(f64, f64, f64)>| {
        use ppol::fitness::audit::{AucInterval, AuditRow};
        let interval = auc.map(|(auc, low, high)| AucInterval { auc, low, high });
        r.audit = Some(AuditRow {
            name: r.name.clone(),
            n_human: 12,
            n_candidate: if auc.is_some() { 24 } else { 6 },
            n_groups_human: 4,
            n_groups_candidate: 2,
            dropped_human: 0,
            dropped_candidate: 0,
            grouped_by: "task".into(),
            folds: 2,
            resamples: 200,
            random_forest: interval,
            logistic: interval,
            top_features: Vec::new(),
            too_few: auc
                .is_none()
                .then(|| "too few: candidate: 6 dialogue(s) in 2 group(s)".into()),
            judge: None,
        });
        r
    };
    let table = EvalTable {
        audit: Some(ppol::fitness::audit::AuditSetup {
            method: ppol::fitness::audit::AuditOptions::default().method(),
            human: ppol::fitness::audit::HumanSide {
                source: vec!["fitness/demo/human.jsonl".into()],
                n: 12,
                n_groups: 4,
                dropped: 0,
            },
            judge: "skipped: offline".into(),
        }),
        split: "test".into(),
        tasks: vec!["demo_task_test_0".into(), "demo_task_test_1".into()],
        human_source: vec!["fitness/demo/human.jsonl".into()],
        best_program_id: Some(LINEAGE[4].into()),
        rows: vec![
            row("human", 0.81, 0.93, 1.0, None),
            audited(row("base", 0.1, 0.31, 2.0, None), Some((0.987, 0.94, 1.0))),
            row(
                "direct",
                0.0,
                0.0,
                3.0,
                Some("needs an LLM endpoint (offline run)"),
            ),
            row("seed", 0.22, 0.45, 4.0, None),
            audited(row("evolved", 0.58, 0.71, 5.0, None), None),
        ],
    };
    std::fs::write(
        dir.join("eval-test.json"),
        serde_json::to_string_pretty(&table).unwrap(),
    )
    .unwrap();
}

fn fixture() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fixture-run");
    write_fixture_run(&dir);
    (tmp, dir)
}

/// The SVG element of the chart whose title is `title`.
fn svg_with_title<'a>(html: &'a str, title: &str) -> &'a str {
    let at = html
        .find(&format!("<title>{title}</title>"))
        .unwrap_or_else(|| panic!("no chart titled {title}"));
    let start = html[..at].rfind("<svg").unwrap();
    let end = at + html[at..].find("</svg>").unwrap();
    &html[start..end]
}

#[test]
fn report_is_self_contained_and_complete() {
    let (_tmp, dir) = fixture();
    let html = ppol::report::render(&dir).unwrap();
    // self-contained: no URL, no script, no external resource
    assert!(!html.contains("http://") && !html.contains("https://"));
    assert!(!html.to_lowercase().contains("<script"));
    assert!(!html.contains("<link") && !html.contains("<img") && !html.contains("@import"));
    assert!(!html.contains("url("));
    // header
    for s in [
        "fixture-run",
        "iterations",
        "0.912",
        "demo",
        "ppol-0.1.1",
        "root: 42",
    ] {
        assert!(html.contains(s), "header lacks {s}");
    }
    assert!(html.contains("train 4 · val 2 · test 2"));
    // mutation outcomes over the run, and the raw reply of the latest unusable answer
    assert!(
        html.contains("mutations (whole run)") && html.contains("applied"),
        "no mutation outcomes in the summary"
    );
    assert!(
        html.contains("the model&#39;s raw reply (first 2 KB)")
            || html.contains("the model's raw reply (first 2 KB)")
    );
    assert!(
        html.contains(
            "the mutator prompt was cut to fit: context window 4096 tokens: PROMPT_FIT_MARKER"
        ),
        "the prompt fit of a failed mutation is shown"
    );
    assert!(
        html.contains("RAW_REPLY_MARKER &lt;"),
        "the raw reply is shown escaped"
    );
    // score curves: one point per evaluated candidate, × per failure, ◆ per validation
    let n_eval = ITERATIONS as usize - FAILED.len();
    for title in [
        "Combined score (λh·HL + λb·coverage)",
        "Human-likeness (mean P(human))",
        "Coverage (Chamfer)",
    ] {
        let svg = svg_with_title(&html, title);
        assert_eq!(
            svg.matches(r#"class="pt train""#).count(),
            n_eval,
            "{title}"
        );
        assert_eq!(svg.matches(r#"class="pt failed""#).count(), FAILED.len());
        assert_eq!(svg.matches(r#"class="pt val""#).count(), VALIDATIONS.len());
        assert_eq!(svg.matches(r#"class="hline baseline""#).count(), 1);
        assert_eq!(svg.matches(r#"class="step best""#).count(), 1);
        assert!(svg.contains(">iteration</text>"));
    }
    // fingerprint map: 25 humans, 18 base episodes, 24+1 evolved episodes of which 1 failed
    let map = svg_with_title(
        &html,
        "Dialogues on the human fingerprints&#39; first two principal components",
    );
    assert_eq!(map.matches(r#"class="pt human""#).count(), 25);
    assert_eq!(map.matches(r#"class="pt base""#).count(), 18);
    assert_eq!(map.matches(r#"class="pt evolved""#).count(), 24);
    assert!(map.contains("PC1 (") && map.contains("% of human variance)"));
    // D1–D4 bars: 4 computed rows × 5 groups (the skipped "direct" row has none)
    let bars = svg_with_title(&html, "test split (2 tasks), eval-test.json");
    assert_eq!(bars.matches(r#"class="bar "#).count(), 4 * 5);
    assert_eq!(bars.matches(r#"class="bar evolved""#).count(), 5);
    // eval table, with the skipped reason
    assert!(html.contains("skipped: needs an LLM endpoint (offline run)"));
    // the audit next to HL, with its interval, and a row with too few dialogues says so
    assert!(html.contains("audit: forest AUC [95%]") && html.contains("0.987 [0.94, 1.00]"));
    assert!(html.contains("evolved: too few: candidate: 6 dialogue(s) in 2 group(s)"));
    assert!(html.contains("Judge: skipped: offline."));
    assert!(html.contains(
        "<td>evolved</td><td>0.580</td><td>too few</td><td>too few</td><td>–</td><td>0.710</td><td>0.645</td>"
    ));
    // lineage in order, each with its iteration and mutation
    let lineage = &html[html.find(r#"<ol class="lineage">"#).unwrap()..];
    let lineage = &lineage[..lineage.find("</ol>").unwrap()];
    let pos: Vec<usize> = LINEAGE
        .iter()
        .map(|id| lineage.find(&format!(">{id}</b>")).expect(id))
        .collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "{pos:?}");
    assert!(lineage.contains(r#"<span class="tag">seed</span> iteration 1"#));
    assert!(lineage.contains("step 28: shorter turns &amp; more &lt;pushback&gt;"));
    // failures by stage
    assert!(html.contains("<td>syntax</td><td>3</td><td>0</td>"));
    assert!(html.contains("<td>sandbox:generate</td><td>2</td>"));
    // personas and dialogues, escaped
    assert_eq!(html.matches(r#"class="card persona""#).count(), 4);
    assert!(html.contains("never say &lt;please&gt;"));
    assert_eq!(html.matches(r#"class="dialogue""#).count(), 3);
    assert!(html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"));
    assert!(html.contains("see https&#58;//evil.example/?a=1&amp;b=2 &lt;img src=x&gt;"));
    assert!(html.contains(r#"<summary>tool call: get_order_details</summary>"#));
    assert!(html.contains("&lt;b&gt;&amp;&lt;/b&gt;"));
    // costs
    assert!(html.contains("<td>user-sim</td><td>360</td><td>90</td><td>324,000</td>"));
    // 39 events one minute apart
    assert!(html.contains("<dd>38 min 00 s</dd>"), "wall time");
    assert!(html.contains("2026-11-23T07:00:00Z"));
    assert!(html.contains("<td><b>total</b></td>"));
    assert!(html.contains("0.550"));
    // no notice: every file is there
    assert!(!html.contains(r#"class="notice""#), "unexpected notice");
}

#[test]
fn missing_optional_files_give_notices() {
    let (_tmp, dir) = fixture();
    for f in [
        "config.toml",
        "human_ref.json",
        "discriminator.json",
        "baseline/episodes.jsonl",
        "best/program.py",
        "best/program.json",
        "best/personas.jsonl",
        "best/episodes.jsonl",
        "eval-test.json",
    ] {
        std::fs::remove_file(dir.join(f)).unwrap();
    }
    let html = ppol::report::render(&dir).unwrap();
    for n in [
        "config.toml not found",
        "human_ref.json not found",
        "best/personas.jsonl not found",
        "best/episodes.jsonl not found",
        "No eval-&lt;split&gt;.json",
        "best/program.json not found: the lineage is reconstructed",
    ] {
        assert!(html.contains(n), "no notice '{n}'");
    }
    // the lineage is rebuilt from parent ids in the log, in order
    let lineage = &html[html.find(r#"<ol class="lineage">"#).unwrap()..];
    let pos: Vec<usize> = LINEAGE
        .iter()
        .map(|id| lineage.find(&format!(">{id}</b>")).expect(id))
        .collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]));
    // the D1–D4 section falls back to baseline vs best train metrics
    let bars = svg_with_title(&html, "Dice D1–D4 on the train tasks");
    assert_eq!(bars.matches(r#"class="bar base""#).count(), 5);
    assert_eq!(bars.matches(r#"class="bar evolved""#).count(), 5);

    // a log alone (no run_stopped yet) still renders; costs are summed from the candidates
    let text = std::fs::read_to_string(dir.join("log.jsonl")).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| !l.contains("\"run_stopped\""))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("log.jsonl"), kept).unwrap();
    let html = ppol::report::render(&dir).unwrap();
    assert!(html.contains("no run_stopped event"));
    assert!(html.contains("the sum of candidate_evaluated costs"));
    // 25 evaluations × 12 calls
    assert!(html.contains("<td>user-sim</td><td>300</td>"));
}

#[test]
fn malformed_files_are_errors_naming_the_file() {
    let (_tmp, dir) = fixture();
    // a bad line in the middle of the log (not a torn tail)
    let log = dir.join("log.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(3, "{\"seq\": 4, \"event\": \"nonsense\"}");
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let err = ppol::report::render(&dir).unwrap_err().to_string();
    assert!(
        err.contains("log.jsonl: line 4: bad run-log record"),
        "{err}"
    );
    std::fs::write(&log, text).unwrap();

    std::fs::write(dir.join("best/program.json"), "{\"program_id\": 3}").unwrap();
    let err = ppol::report::render(&dir).unwrap_err().to_string();
    assert!(err.contains("program.json: line 1"), "{err}");
    std::fs::remove_file(dir.join("best/program.json")).unwrap();

    std::fs::write(dir.join("best/personas.jsonl"), "{}\nnot json\n").unwrap();
    let err = ppol::report::render(&dir).unwrap_err().to_string();
    assert!(err.contains("personas.jsonl: line 1"), "{err}");
    std::fs::remove_file(dir.join("best/personas.jsonl")).unwrap();

    // no log at all: not a run directory
    std::fs::remove_file(&log).unwrap();
    let err = ppol::report::render(&dir).unwrap_err().to_string();
    assert!(err.contains("no log.jsonl"), "{err}");
}

#[test]
fn cli_writes_the_report_and_prints_its_path() {
    let (tmp, dir) = fixture();
    let (code, out, err) = run_ppol(&["report", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), dir.join("report.html").display().to_string());
    assert!(std::fs::read_to_string(dir.join("report.html"))
        .unwrap()
        .starts_with("<!DOCTYPE html>"));
    let other = tmp.path().join("out/r.html");
    let (code, out, err) = run_ppol(&[
        "report",
        dir.to_str().unwrap(),
        "-o",
        other.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), other.display().to_string());
    assert!(other.is_file());
    std::fs::write(dir.join("log.jsonl"), "{\"seq\":1}\n{}\n").unwrap();
    let (code, _, err) = run_ppol(&["report", dir.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("log.jsonl: line 1"), "{err}");
}

/// Writes the fixture run to `$PPOL_REPORT_FIXTURE` (default `target/report-fixture`) for
/// `tests/report_screenshot.sh`: `cargo test --test integration -- --ignored write_report_fixture`.
#[test]
#[ignore]
fn write_report_fixture() {
    let dir = std::env::var_os("PPOL_REPORT_FIXTURE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/report-fixture"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
    write_fixture_run(&dir);
    eprintln!("fixture run written to {}", dir.display());
}

#[test]
fn report_lists_the_mechanics_played_and_unplayed() {
    let (_tmp, dir) = fixture();
    let path = dir.join("best/episodes.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    // episodes without a persona play (an LLM run's) get a notice
    let bare: Vec<String> = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("persona_play");
            v.to_string()
        })
        .collect();
    std::fs::write(&path, bare.join("\n") + "\n").unwrap();
    let html = ppol::report::render(&dir).unwrap();
    assert!(html.contains(r#"<section id="mechanics">"#));
    assert!(html.contains("No episode records how its persona was played"));

    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        let play = if i % 2 == 0 {
            json!({"source": "text",
                   "played": [{"id": "word_limit", "n": 8}, {"id": "lowercase", "level": 0.9},
                              {"id": "word_limit", "n": 12}],
                   "unplayed": ["You collect <stamps> from Peru."], "task_sentences": 1})
        } else {
            json!({"source": "axes", "unplayed": ["You collect <stamps> from Peru.", "You hum."]})
        };
        v["persona_play"] = play;
        lines.push(v.to_string());
    }
    let n = lines.len();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let html = ppol::report::render(&dir).unwrap();
    let sec = &html[html.find(r#"<section id="mechanics">"#).unwrap()..];
    let sec = &sec[..sec.find("</section>").unwrap()];
    let n_text = n.div_ceil(2);
    assert!(
        sec.contains(&format!(
            "{n_text} of {n} validation episodes were driven by the text"
        )),
        "{sec}"
    );
    // counted once per episode, with the vocabulary's dimension and summary
    assert!(
        sec.contains(&format!(
            r#"<td class="mono">word_limit</td><td>D1</td><td>keeps messages under a word limit (short, fragments)</td><td>{n_text} ("#
        )),
        "{sec}"
    );
    assert!(sec.contains(r#"<td class="mono">lowercase</td>"#));
    // never-played mechanics of the vocabulary, framing left out
    assert!(sec.contains(r#"<span class="tag">give_up</span>"#), "{sec}");
    assert!(
        !sec.contains(r#"<span class="tag">keep_goal</span>"#),
        "{sec}"
    );
    // unplayed sentences, escaped, most frequent first
    let stamps = sec
        .find(&format!(
            "<td>You collect &lt;stamps&gt; from Peru.</td><td>{n}</td>"
        ))
        .expect("stamps");
    let hum = sec.find("<td>You hum.</td>").expect("hum");
    assert!(stamps < hum);
}
