//! `ppol study make` / `ppol study analyze`: the blinded human-judgement study.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::util::{root, run_ppol};

fn fixture(name: &str) -> String {
    root()
        .join("tests/fixtures/study")
        .join(name)
        .display()
        .to_string()
}

fn close(got: &Value, want: f64) {
    let g = got
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {got}"));
    assert!((g - want).abs() <= 1e-9, "got {g}, want {want}");
}

/// The fixture (tests/fixtures/study): 12 items, 4 per condition, plus attention check
/// item-013 (right answer: bot), P(human) per item in the key. Annotators a1, a3 (page
/// downloads; a3 skipped item-012) and a2 (a Label Studio export) pass the check; a4 answered
/// human on it and is excluded. Expected values computed with numpy/scipy 1.x and the
/// `krippendorff` package on the judgements of a1–a3, "judged human" = 1 for Human, 0 for Bot
/// and Not sure:
///
/// ```python
/// z = stats.norm.ppf(0.975)                         # Wilson: (p + z²/2n)/(1+z²/n) ± z/(1+z²/n)·√(p(1−p)/n + z²/4n²)
/// stats.ttest_ind(J[a], J[b], equal_var=False)      # Welch's t and p; df = (va+vb)²/(va²/(na−1)+vb²/(nb−1))
/// stats.pointbiserialr(judged_human, p_human)       # over all 35 judgements
/// krippendorff.alpha(reliability_data=annotators × items (nan = not answered), level_of_measurement="nominal")
/// ```
#[test]
fn study_analyze_reproduces_hand_computed_shares_t_alpha_and_r() {
    let args = [
        "study",
        "analyze",
        &fixture("answers-a1.json"),
        &fixture("label-studio-export-a2.json"),
        &fixture("answers-a3.json"),
        &fixture("answers-a4.json"),
        "--key",
        &fixture("key.json"),
        "--json",
    ];
    let (code, out, err) = run_ppol(&args);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["n_annotators"], 4);
    assert_eq!(
        v["included"],
        serde_json::json!(["a1", "a3", "label-studio:a2@example.org"])
    );
    assert_eq!(v["excluded"][0]["annotator"], "a4");
    assert!(v["excluded"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("answered human on attention check item-013 (right: bot)"));

    // condition, n, judged human, share, Wilson low, Wilson high
    let want = [
        ("human", 12, 9, 0.75, 0.4676946650664343, 0.9110583316059452),
        (
            "base",
            12,
            2,
            1.0 / 6.0,
            0.04696514218385378,
            0.4480308622529734,
        ),
        (
            "evolved",
            11,
            7,
            7.0 / 11.0,
            0.35380117450784887,
            0.8483352890463243,
        ),
    ];
    for (c, w) in v["conditions"].as_array().unwrap().iter().zip(want) {
        assert_eq!(c["condition"], w.0);
        assert_eq!(
            (c["n"].as_u64(), c["n_human"].as_u64()),
            (Some(w.1), Some(w.2))
        );
        close(&c["judged_human"]["share"], w.3);
        close(&c["judged_human"]["low"], w.4);
        close(&c["judged_human"]["high"], w.5);
    }
    assert_eq!(v["conditions"][1]["n_unsure"], 1);
    // a, b, t, df, p
    let want = [
        (
            "human",
            "base",
            3.3864561279282768,
            21.522586359610273,
            0.002715623982310353,
        ),
        (
            "human",
            "evolved",
            0.5668657344781478,
            20.196060112644478,
            0.5770520149035681,
        ),
        (
            "base",
            "evolved",
            -2.483578932351875,
            18.80126779152699,
            0.022614680833089523,
        ),
    ];
    for (c, w) in v["comparisons"].as_array().unwrap().iter().zip(want) {
        assert_eq!((c["a"].as_str(), c["b"].as_str()), (Some(w.0), Some(w.1)));
        close(&c["welch"]["t"], w.2);
        close(&c["welch"]["df"], w.3);
        close(&c["welch"]["p"], w.4);
    }
    let pb = &v["point_biserial"];
    assert_eq!(pb["n"], 35);
    close(&pb["r"], 0.4671219789338552);
    close(&pb["test"]["p"], 0.004668262341689368);
    close(&pb["test"]["df"], 33.0);
    close(&v["agreement"]["value"], 0.07183908045977017);
    assert!(v["agreement"]["method"]
        .as_str()
        .unwrap()
        .starts_with("Krippendorff's alpha"));

    // The table names the same numbers; --keep-failed-attention keeps a4.
    let (code, table, err) = run_ppol(&args[..args.len() - 1]);
    assert_eq!(code, 0, "{err}");
    assert!(table.contains("75.0%  [46.8%, 91.1%]"), "{table}");
    assert!(
        table.contains("t = 3.386, df = 21.5, p = 0.0027"),
        "{table}"
    );
    assert!(
        table.contains("a4") && table.contains("(excluded)"),
        "{table}"
    );
    let mut keep = args.to_vec();
    keep.push("--keep-failed-attention");
    let (code, out, err) = run_ppol(&keep);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["included"].as_array().unwrap().len(), 4);
    assert_eq!(v["excluded"].as_array().unwrap().len(), 0);
    assert_eq!(v["attention_failures"][0]["annotator"], "a4");
    assert_eq!(v["conditions"][0]["n"], 16);
}

#[test]
fn study_analyze_rejects_answers_it_cannot_unblind() {
    let tmp = tempfile::tempdir().unwrap();
    let other = tmp.path().join("other.json");
    std::fs::write(
        &other,
        r#"{"study_id": "ffffffffffffffff", "annotator": "x", "answers": [{"item": "item-001", "judgement": "bot"}]}"#,
    )
    .unwrap();
    let (code, _, err) = run_ppol(&[
        "study",
        "analyze",
        other.to_str().unwrap(),
        "--key",
        &fixture("key.json"),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("other.json") && err.contains("ffffffffffffffff"),
        "{err}"
    );
    std::fs::write(
        &other,
        r#"{"annotator": "x", "answers": [{"item": "item-099", "judgement": "bot"}]}"#,
    )
    .unwrap();
    let (code, _, err) = run_ppol(&[
        "study",
        "analyze",
        other.to_str().unwrap(),
        "--key",
        &fixture("key.json"),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("item-099") && err.contains("no such item"),
        "{err}"
    );
    std::fs::write(
        &other,
        r#"{"annotator": "x", "answers": [{"item": "item-001", "judgement": "maybe"}]}"#,
    )
    .unwrap();
    let (code, _, err) = run_ppol(&[
        "study",
        "analyze",
        other.to_str().unwrap(),
        "--key",
        &fixture("key.json"),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("answers[0].judgement"), "{err}");
    // Only a4, who failed the attention check: nobody left.
    let (code, _, err) = run_ppol(&[
        "study",
        "analyze",
        &fixture("answers-a4.json"),
        "--key",
        &fixture("key.json"),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no annotator left") && err.contains("--keep-failed-attention"),
        "{err}"
    );
}

fn demo_episodes(dir: &Path) -> PathBuf {
    let eps = dir.join("eps.jsonl");
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--domain",
        "demo",
        "--tasks",
        "0,1,2,3,4,5,6,7",
        "--trials",
        "2",
        "--quiet",
        "-o",
        eps.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    eps
}

#[test]
fn study_make_blinds_samples_and_keeps_the_key_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let eps = demo_episodes(tmp.path());
    let disc = tmp.path().join("disc.json");
    let (code, _, err) = run_ppol(&[
        "discriminator",
        "train",
        "--human",
        "fitness/demo/human.jsonl",
        "--baseline",
        "fitness/demo/baseline.jsonl",
        "--trees",
        "20",
        "-o",
        disc.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let make = |out: &Path, seed: &str| {
        run_ppol(&[
            "study",
            "make",
            "--condition",
            "humanTracesQ=fitness/demo/human.jsonl",
            "--condition",
            &format!("episodesQ={}", eps.display()),
            "--condition",
            "baselineQ=fitness/demo/baseline.jsonl",
            "--per-condition",
            "6",
            "--attention-checks",
            "2",
            "--seed",
            seed,
            "--discriminator",
            disc.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
    };
    let out = tmp.path().join("study");
    let (code, stdout, err) = make(&out, "3");
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("study.html"), "{stdout}");
    let page = std::fs::read_to_string(out.join("study.html")).unwrap();
    let tasks = std::fs::read_to_string(out.join("label_studio_tasks.json")).unwrap();
    let config = std::fs::read_to_string(out.join("label_studio_config.xml")).unwrap();
    let key: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("key.json")).unwrap()).unwrap();

    // The key: 3 × 6 items + 2 attention checks, each condition 6, P(human) for every item.
    let items = key["items"].as_array().unwrap();
    assert_eq!(items.len(), 20);
    for c in ["humanTracesQ", "episodesQ", "baselineQ"] {
        let mine: Vec<&Value> = items.iter().filter(|i| i["condition"] == c).collect();
        assert_eq!(mine.len(), 6, "{c}");
        assert!(mine.iter().all(|i| i["p_human"]
            .as_f64()
            .is_some_and(|p| (0.0..=1.0).contains(&p))));
    }
    let checks: Vec<&Value> = items
        .iter()
        .filter(|i| i["condition"] == "attention-check")
        .collect();
    assert_eq!(checks.len(), 2);
    assert_eq!(
        (
            checks[0]["expected"].as_str(),
            checks[1]["expected"].as_str()
        ),
        (Some("bot"), Some("human"))
    );
    assert_ne!(
        items[0]["condition"], "attention-check",
        "an attention check never comes first"
    );
    // Shuffled: the conditions are interleaved, not in blocks.
    let order: Vec<&str> = items
        .iter()
        .map(|i| i["condition"].as_str().unwrap())
        .collect();
    let switches = order.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(switches > 6, "{order:?}");

    // Blinding: no condition name, file name, dialogue or persona id anywhere annotators look.
    let mut labels: BTreeSet<String> = [
        "humanTracesQ",
        "episodesQ",
        "baselineQ",
        "human.jsonl",
        "baseline.jsonl",
        "eps.jsonl",
        "fitness/demo",
        "persona_id",
        "dialogue_id",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    labels.insert(tmp.path().display().to_string());
    for i in items {
        for k in ["dialogue_id", "persona_id"] {
            // ("none", the plain simulator's persona id, is an ordinary word of the page)
            if let Some(s) = i[k].as_str().filter(|s| *s != "none") {
                labels.insert(s.to_string());
            }
        }
    }
    for l in &labels {
        for (name, text) in [
            ("study.html", &page),
            ("label_studio_tasks.json", &tasks),
            ("label_studio_config.xml", &config),
        ] {
            assert!(!text.contains(l.as_str()), "{name} leaks '{l}'");
        }
    }
    // Tool traffic is hidden: no tool result text of the episodes reaches the page.
    let tool_texts: Vec<String> = std::fs::read_to_string(&eps)
        .unwrap()
        .lines()
        .flat_map(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            e["conversation"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["role"] == "tool")
                .map(|t| t["content"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|t| t.len() > 12)
        .collect();
    assert!(!tool_texts.is_empty(), "the demo episodes call tools");
    for t in &tool_texts {
        let in_json = serde_json::to_string(t).unwrap();
        assert!(
            !page.contains(in_json.trim_matches('"')),
            "tool result shown: {t}"
        );
    }
    // Self-contained: no external asset, no URL.
    for bad in [
        "http://", "https://", "src=\"", "href=\"", "@import", "url(",
    ] {
        assert!(!page.contains(bad), "page contains {bad}");
    }
    assert!(page.contains(key["study_id"].as_str().unwrap()));
    // Label Studio: one task per item with a Paragraphs dialogue; the config names it.
    let tasks: Value = serde_json::from_str(&tasks).unwrap();
    assert_eq!(tasks.as_array().unwrap().len(), 20);
    assert_eq!(tasks[0]["data"]["item"], "item-001");
    assert!(
        config.contains("value=\"$dialogue\"") && config.contains("<Choice value=\"Not sure\"/>")
    );

    // Seeded: the same seed gives the same files, another seed another order.
    let again = tmp.path().join("again");
    assert_eq!(make(&again, "3").0, 0);
    assert_eq!(
        std::fs::read_to_string(again.join("study.html")).unwrap(),
        page
    );
    let other = tmp.path().join("other");
    assert_eq!(make(&other, "4").0, 0);
    assert_ne!(
        std::fs::read_to_string(other.join("study.html")).unwrap(),
        page
    );
}

#[test]
fn study_make_rejects_bad_conditions_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("study");
    let o = out.to_str().unwrap();
    for (args, want) in [
        (vec!["--condition", "human"], "is not NAME=FILE"),
        (
            vec!["--condition", "human=fitness/demo/human.jsonl"],
            "at least two conditions",
        ),
        (
            vec![
                "--condition",
                "human=fitness/demo/human.jsonl",
                "--condition",
                "attention-check=fitness/demo/baseline.jsonl",
            ],
            "reserved",
        ),
        (
            vec![
                "--condition",
                "human=fitness/demo/human.jsonl",
                "--condition",
                "base=fitness/demo/baseline.jsonl",
                "--per-condition",
                "500",
            ],
            "condition 'human' (fitness/demo/human.jsonl) has 25 dialogues with user text",
        ),
        (
            vec![
                "--condition",
                "human=fitness/demo/human.jsonl",
                "--condition",
                "base=fitness/demo/nope.jsonl",
            ],
            "fitness/demo/nope.jsonl",
        ),
        (
            vec![
                "--condition",
                "human=fitness/demo/human.jsonl",
                "--condition",
                "base=fitness/demo/baseline.jsonl",
                "--agent-turns",
                "loud",
            ],
            "--agent-turns",
        ),
        (
            vec![
                "--condition",
                "human=fitness/demo/human.jsonl",
                "--condition",
                "base=fitness/demo/baseline.jsonl",
                "--domain",
                "airline",
            ],
            "condition 'human' (fitness/demo/human.jsonl) has 0 dialogues with user text",
        ),
    ] {
        let mut a = vec!["study", "make", "-o", o];
        a.extend(args);
        let (code, _, err) = run_ppol(&a);
        assert_eq!(code, 2, "{a:?}");
        assert!(err.contains(want), "{a:?}: {err}");
        assert!(!out.exists(), "{a:?} wrote something");
    }
}
