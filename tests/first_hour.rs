//! A new user's first hour (issue #25): messages and outputs a newcomer meets first.

use crate::util::run_ppol;

#[test]
fn eval_of_a_missing_run_directory_says_so() {
    let (code, _o, err) = run_ppol(&["eval", "runs/no-such-run-dir"]);
    assert_eq!(code, 2);
    assert!(err.contains("no such run directory"), "{err}");
    assert!(!err.contains("restore it"), "{err}");
}

#[test]
fn print_config_prints_every_key_with_comments_and_reads_back() {
    let (code, text, err) = run_ppol(&[
        "evolve",
        "--print-config",
        "--llm",
        "openai:small@http://127.0.0.1:9/v1",
    ]);
    assert_eq!(code, 0, "{err}");
    for key in [
        "# max_wall_clock_s =",
        "# seed_program =",
        "# generation_size =",
        "# max_tokens =",
        "# max_usd =",
        "n_personas_schedule = [[1, 5], [2, 8], [3, 10]]",
        "[llm",
        "# Iterations",
    ] {
        assert!(text.contains(key), "{key} missing:\n{text}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("printed.toml");
    std::fs::write(&f, &text).unwrap();
    let (code, again, err) =
        run_ppol(&["evolve", "--print-config", "--config", f.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        again, text,
        "the printed configuration reads back as itself"
    );
}

#[test]
fn progress_is_printed_as_lines_when_stderr_is_not_a_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let (code, _o, err) = run_ppol(&[
        "evolve",
        "--iterations",
        "2",
        "--out",
        run.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("evolve: iteration 2/2"), "{err}");
    assert!(
        err.contains("episodes") && err.contains("baseline: "),
        "{err}"
    );
    assert!(!err.contains("Some("), "{err}");
    let out = tmp.path().join("eps.jsonl");
    let (code, _o, err) = run_ppol(&["episodes", "--tasks", "0,1", "-o", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("episodes: 2/2"), "{err}");
    let (_, _o, err) = run_ppol(&[
        "episodes",
        "--tasks",
        "0",
        "--quiet",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(
        !err.contains("episodes: 1/1"),
        "--quiet prints no progress: {err}"
    );
}

/// The README's main job (`evolve --iterations 10 --seed 1`, then `eval`) shows evolution on
/// the held-out tasks: evolved ahead of the seed by at least 3 points, with the per-task spread
/// printed under the table.
#[test]
fn the_readme_main_job_shows_evolved_above_seed_on_held_out_tasks() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("demo");
    let run = run.to_str().unwrap();
    let (code, _o, err) = run_ppol(&[
        "evolve",
        "--iterations",
        "10",
        "--seed",
        "1",
        "--out",
        run,
        "--quiet",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, text, err) = run_ppol(&["eval", run]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("split: test (7 tasks)"), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("evolved - seed: "))
        .unwrap_or_else(|| panic!("no spread line:\n{text}"));
    assert!(
        line.contains("of 7 tasks: 5 "),
        "tasks in numeric order: {line}"
    );
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("demo/eval-test.json")).unwrap(),
    )
    .unwrap();
    let score = |name: &str| {
        json["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap()["score"]
            .as_f64()
            .unwrap()
    };
    let gain = score("evolved") - score("seed");
    assert!(gain >= 0.03, "evolved - seed = {gain:.3} < 0.03:\n{text}");
}
