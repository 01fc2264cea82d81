//! One test per defect fixed, named `r<issue>_<slug>` after the issue that reported it.

use super::util::{root, run_ppol};

fn write(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Run `ppol evolve --config C --out DIR --print-config` style checks: the error names `key`,
/// exits 2, does not panic, and writes nothing.
fn config_rejected(toml: &str, key: &str) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "c.toml", toml);
    let out = dir.path().join("run");
    let (code, _, err) = run_ppol(&[
        "evolve",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 2, "{toml}: {err}");
    assert!(
        err.contains(&format!("'{key}'")),
        "{toml}: error does not name {key}: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists(), "{toml}: the run directory was created");
}

// See: issue 10 ("fitness.lambda_h = 2 is reported as 'fitness.lambda_b'").
#[test]
fn r10_lambda_h_out_of_range_names_lambda_h() {
    config_rejected("[fitness]\nlambda_h = 2\n", "fitness.lambda_h");
    config_rejected("[fitness]\nlambda_b = -0.5\n", "fitness.lambda_b");
}

// See: issue 10 ("a NaN timeout in the config panics (exit 101, backtrace)") and issue 12
// ("[sandbox] timeout_s = -1 or nan panics").
#[test]
fn r10_r12_nan_or_negative_timeout_is_a_config_error() {
    config_rejected("[sandbox]\ntimeout_s = nan\n", "sandbox.timeout_s");
    config_rejected("[sandbox]\ntimeout_s = -1\n", "sandbox.timeout_s");
    config_rejected("[sandbox]\ntimeout_s = inf\n", "sandbox.timeout_s");
    let (code, _, err) = run_ppol(&[
        "generate",
        "--program",
        root().join("seeds/offline_templates.py").to_str().unwrap(),
        "--task",
        "x",
        "--timeout",
        "nan",
    ]);
    assert_eq!(code, 2, "{err}");
    // the flag's own check names the flag (#34 item 5)
    assert!(err.contains("'--timeout <TIMEOUT>'"), "{err}");
}

// See: issue 12 ("Accepted without a word and producing all-zero scores", "validated only after
// files were written").
#[test]
fn r12_bad_values_are_rejected_before_anything_is_written() {
    for (toml, key) in [
        ("[episodes]\nmax_turns = 0\n", "episodes.max_turns"),
        (
            "[fitness]\nn_personas_schedule = [[1, 0]]\n",
            "fitness.n_personas_schedule[0]",
        ),
        (
            "[fitness]\nlambda_h = 0.0\nlambda_b = 0.0\n",
            "fitness.lambda_h",
        ),
        (
            "[mutation]\ncrossover_rate = -0.1\n",
            "mutation.crossover_rate",
        ),
        ("[mutation]\ntemperature = -3\n", "mutation.temperature"),
        ("[budget]\nmax_usd = -1\n", "budget.max_usd"),
        (
            "[search]\nmax_wall_clock_s = -5\n",
            "search.max_wall_clock_s",
        ),
        (
            "[fitness.discriminator]\nn_trees = 0\n",
            "fitness.discriminator.n_trees",
        ),
        ("[run]\ndomain = \"nowhere\"\n", "run.domain"),
        (
            "[run]\nhuman = [\"/no/such/humans.jsonl\"]\n",
            "run.human[0]",
        ),
    ] {
        config_rejected(toml, key);
    }
}

// See: issue 10 ("OS errors are printed twice").
#[test]
fn r10_os_error_is_printed_once() {
    let (code, _, err) = run_ppol(&["traces", "stats", "/no/such/file.jsonl"]);
    assert_eq!(code, 2);
    assert_eq!(
        err.matches("No such file or directory").count(),
        1,
        "printed more than once: {err}"
    );
    assert!(err.contains("/no/such/file.jsonl"), "{err}");
}

// See: issue 10 (`scripted` meant the offline simulator in `episodes` and the canned-text
// provider in `generate`): one --llm grammar for every verb.
#[test]
fn r10_one_llm_grammar_for_every_verb() {
    use ppol::front::ops::parse_llm;
    assert!(parse_llm("offline").unwrap().is_none());
    assert!(parse_llm("none").unwrap().is_none());
    let scripted = parse_llm("scripted").unwrap().unwrap();
    assert_eq!(scripted.default.provider, ppol::llm::ProviderKind::Scripted);
    let dir = tempfile::tempdir().unwrap();
    let rules = write(
        dir.path(),
        "rules.json",
        r#"{"rules": [{"contains": "refund", "reply": "R"}], "default": "D"}"#,
    );
    // `script:FILE` and `scripted:FILE` are the same provider
    let a = parse_llm(&format!("script:{}", rules.display()))
        .unwrap()
        .unwrap();
    let b = parse_llm(&format!("scripted:{}", rules.display()))
        .unwrap()
        .unwrap();
    assert_eq!(a, b);
    let e = parse_llm("nonsense-value").unwrap_err().to_string();
    assert!(e.contains("'--llm'"), "{e}");
}

// See: issue 12 ("`ppol generate` truncates an existing `-o` file to 0 bytes when the program
// fails").
#[test]
fn r12_generate_never_replaces_output_with_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = write(dir.path(), "personas.jsonl", "{\"keep\": true}\n");
    let (code, _, err) = run_ppol(&[
        "generate",
        "--program",
        root()
            .join("tests/fixtures/generators/hostile/raises.py")
            .to_str()
            .unwrap(),
        "--task",
        "x",
        "-n",
        "1",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is unchanged"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "{\"keep\": true}\n");
}

// See: issue 12 ("`export sft` and `generate --task-file` on an empty input overwrite `-o`
// with nothing and exit 0").
#[test]
fn r12_empty_inputs_do_not_overwrite_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let out = write(dir.path(), "out.jsonl", "precious\n");
    let empty = write(dir.path(), "empty.jsonl", "\n");
    let (code, _, err) = run_ppol(&[
        "export",
        "sft",
        empty.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    let (code2, _, err2) = run_ppol(&[
        "generate",
        "--program",
        root().join("seeds/offline_templates.py").to_str().unwrap(),
        "--task-file",
        empty.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code2, 2, "{err2}");
    assert!(err2.contains("holds no task lines"), "{err2}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "precious\n");
}

// See: issue 12 ("Exit 0 when every episode failed (401 included)").
#[test]
fn r12_episodes_exit_code_says_whether_they_ran() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("eps.jsonl");
    // A closed port: every episode fails on connection errors, quickly (no retries).
    let cfg = write(
        dir.path(),
        "llm.toml",
        "max_retries = 0\n[default]\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9/v1\"\ntimeout_s = 2\n",
    );
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--tasks",
        "0",
        "--llm",
        cfg.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("1 of 1 episodes failed"), "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("\"status\":\"failed\""), "{text}");
    // offline episodes succeed: exit 0
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--tasks",
        "0",
        "-o",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
}

// See: issue 12 ("`ppol episodes` writes its output only at the end: killed after 120 paid LLM
// requests, it kept nothing").
#[test]
fn r12_episodes_resume_from_the_partial_file() {
    use ppol::front::ops::{episodes, load_domain, EpisodesRequest};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("eps.jsonl");
    let domain = load_domain("demo", None).unwrap();
    let ids: Vec<String> = ["0", "1", "2"].iter().map(|s| s.to_string()).collect();
    let request = |output: Option<std::path::PathBuf>| EpisodesRequest {
        world: ppol::front::ops::WorldChoice::builtin(&domain.name, None).unwrap(),
        tasks: ids.join(","),
        personas: None,
        trials: 2,
        llm: None,
        max_turns: None,
        max_tool_rounds: None,
        user_temperature: None,
        seed: 3,
        concurrency: 4,
        output,
        stop: None,
    };
    let rt = ppol::front::ops::runtime().unwrap();
    let full = rt.block_on(episodes(request(None), &|_| {})).unwrap();
    assert_eq!(full.episodes.len(), 6);
    // an interrupted run left three finished episodes (and a torn line) in the partial file
    let partial = dir.path().join("eps.jsonl.partial");
    let mut text = String::new();
    for e in &full.episodes[..3] {
        text.push_str(&serde_json::to_string(e).unwrap());
        text.push('\n');
    }
    text.push_str("{\"id\": \"torn");
    std::fs::write(&partial, text).unwrap();
    let resumed = rt
        .block_on(episodes(request(Some(out.clone())), &|_| {}))
        .unwrap();
    assert_eq!(resumed.resumed, 3);
    assert_eq!(
        resumed.episodes, full.episodes,
        "resumed run differs from an uninterrupted one"
    );
    assert!(!partial.exists(), "the partial file is removed at the end");
    let written = ppol::simulate::episode::record::load_episodes(&out).unwrap();
    assert_eq!(written, full.episodes);
}

// See: issue 12 ("A UTF-8 BOM is accepted in trace files but rejected ... in episodes,
// personas, discriminator JSON, task files, checkpoints and TOML").
#[test]
fn r12_bom_accepted_in_toml_personas_and_task_files() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "c.toml", "\u{feff}[search]\niterations = 2\n");
    let (code, out, err) = run_ppol(&[
        "evolve",
        "--config",
        cfg.to_str().unwrap(),
        "--print-config",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("iterations = 2"), "{out}");
    let tasks = write(
        dir.path(),
        "tasks.jsonl",
        "\u{feff}{\"task_id\": 7, \"context\": \"refund a kettle\"}\n",
    );
    let (code, out, err) = run_ppol(&[
        "generate",
        "--program",
        root().join("seeds/offline_templates.py").to_str().unwrap(),
        "--task-file",
        tasks.to_str().unwrap(),
        "-n",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"task_id\":\"7\""), "{out}");
    let (code, out, err) = run_ppol(&[
        "generate",
        "--program",
        root().join("seeds/offline_templates.py").to_str().unwrap(),
        "--domain",
        "demo",
        "--task",
        "0",
        "-n",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    let personas = write(dir.path(), "p.jsonl", &format!("\u{feff}{out}"));
    let eps = dir.path().join("eps.jsonl");
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--tasks",
        "0",
        "--personas",
        personas.to_str().unwrap(),
        "-o",
        eps.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
}

// See: issue 12 ("Coverage against a human cloud is O(N_h²) per call (the mean pairwise
// distance is recomputed on every build, also from a saved reference)").
#[test]
fn r12_reference_distance_is_computed_once_and_saved() {
    use ppol::fitness::coverage::{CoverageOptions, HumanCloud};
    use ppol::fitness::reference::HumanReference;
    let ds = ppol::fitness::traces::parse(
        ppol::shipped::DEMO_HUMANS,
        std::path::Path::new("demo.jsonl"),
        &Default::default(),
    )
    .unwrap();
    let r = HumanReference::build(&ds, Default::default(), vec![]).unwrap();
    let stored = r
        .d_ref
        .expect("built references carry their reference distances");
    let points: Vec<_> = r.cloud().iter().map(|f| f.0).collect();
    for standardize in [false, true] {
        let opts = CoverageOptions {
            standardize,
            n_clusters: 0,
            seed: 0,
        };
        let fresh = HumanCloud::from_points(points.clone(), opts).unwrap().d_ref;
        let expect = if standardize {
            stored.standardized
        } else {
            stored.raw
        };
        assert!((fresh - expect).abs() < 1e-12, "{fresh} vs {expect}");
    }
    // a saved reference's value is used as it is (not recomputed) ...
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ref.json");
    let mut tampered = r.clone();
    tampered.d_ref.as_mut().unwrap().raw = 123.0;
    tampered.save(&path).unwrap();
    let loaded = HumanReference::load(&path).unwrap();
    let raw = CoverageOptions {
        standardize: false,
        n_clusters: 0,
        seed: 0,
    };
    assert_eq!(HumanCloud::new(&loaded, raw).unwrap().d_ref, 123.0);
    // ... except for a clustered cloud, whose centroids have their own distance
    let clustered = CoverageOptions {
        n_clusters: 3,
        ..raw
    };
    assert_ne!(HumanCloud::new(&loaded, clustered).unwrap().d_ref, 123.0);
    // and an older file without the field still works (computed on demand)
    let mut old = r.clone();
    old.d_ref = None;
    let d = HumanCloud::new(&old, raw).unwrap().d_ref;
    assert!((d - stored.raw).abs() < 1e-12);
}

// See: issue 15 ("`ppol episodes --trials 45` prints 45 pass^k values on one line").
#[test]
fn r15_pass_k_is_summarised_and_the_full_curve_is_in_the_json() {
    assert_eq!(ppol::front::ops::summary_ks(1), vec![1]);
    assert_eq!(ppol::front::ops::summary_ks(8), vec![1, 2, 4, 8]);
    assert_eq!(
        ppol::front::ops::summary_ks(45),
        vec![1, 2, 4, 8, 16, 32, 45]
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("e.jsonl");
    let (code, stdout, err) = run_ppol(&[
        "episodes",
        "--tasks",
        "0",
        "--trials",
        "10",
        "-o",
        out.to_str().unwrap(),
        "--quiet",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let line = err.lines().find(|l| l.starts_with("pass^k")).unwrap();
    assert_eq!(line.matches("pass^").count() - 1, 5, "{line}"); // 1 2 4 8 10
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["pass_hat_k"].as_object().unwrap().len(), 10);
    assert_eq!(v["episodes"], 10);
}
