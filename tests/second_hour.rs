//! A new user's second hour (issue #37): from a run to personas for one's own simulator and
//! τ²-bench, and what a run says when it did not evolve, has no rewards or too few tasks.

use std::path::Path;

use crate::util::{root, run_ppol, shared};

/// The first ```sh block of the README section whose heading starts with `heading`, as logical
/// lines (continuations joined, comments and blank lines dropped).
fn readme_commands(heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = &text[text
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading} in README.md"))..];
    let block = section
        .split("```sh\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    for line in block.lines() {
        let line = line.trim_end();
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => cur.push_str(head),
            None => {
                cur.push_str(line);
                out.push(std::mem::take(&mut cur).trim().to_string());
            }
        }
    }
    out
}

/// Run `line` with `sh -c` in `dir`, the built `ppol` first on PATH; panics with its output
/// unless it exits 0.
fn sh(dir: &Path, line: &str, env: &[(&str, &Path)]) {
    let bin = Path::new(env!("CARGO_BIN_EXE_ppol")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c").arg(line).current_dir(dir).env("PATH", path);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "`{line}` exited {:?}:\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A directory with the README's run (2 iterations instead of 10, for time) at `runs/demo` and
/// the README's own simulator as `my_sim.py`.
fn after_the_readme_run() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    sh(
        tmp.path(),
        "ppol evolve --iterations 2 --seed 1 --out runs/demo --quiet",
        &[],
    );
    std::fs::copy(
        root().join("tests/fixtures/worlds/my_sim.py"),
        tmp.path().join("my_sim.py"),
    )
    .unwrap();
    tmp
}

/// The τ² commands of "What next" (they need τ²'s data); the Python line is pytest's
/// (`test_readme.py` parses it with the plug-in's own command line).
fn is_tau2(line: &str) -> bool {
    line.contains("--domain retail")
}

/// "What next" as written: a task file, personas for it in two formats, episodes of the README's
/// simulator with them, and personas for every task of the run's world.
#[test]
fn the_readme_what_next_commands_run_as_written() {
    let commands = readme_commands("## What next");
    assert!(commands.len() >= 7, "{commands:?}");
    let tmp = after_the_readme_run();
    let dir = tmp.path();
    let mut ran = 0;
    for line in &commands {
        if line.starts_with("python ") || is_tau2(line) {
            continue;
        }
        sh(dir, line, &[]);
        ran += 1;
    }
    assert!(ran >= 5, "{commands:?}");
    let personas = lines(&dir.join("personas.jsonl"));
    assert_eq!(personas.len(), 20, "2 tasks x 10");
    assert_eq!(personas[0]["task_id"], "late-parcel");
    assert!(personas
        .iter()
        .all(|p| p["text"].as_str().unwrap().len() > 100));
    let prompt = std::fs::read_to_string(dir.join("personas.txt")).unwrap();
    assert_eq!(
        prompt.matches("# task double-charge / persona ").count(),
        10
    );
    assert_eq!(lines(&dir.join("episodes.jsonl")).len(), 20);
    assert_eq!(
        lines(&dir.join("demo_personas.jsonl")).len(),
        16 * 10,
        "every task of the demo world"
    );
}

/// The τ²-bench commands of "What next", where τ²'s data is (`.ci/shared`).
#[test]
fn shared_the_readme_tau2_personas_commands_run_as_written() {
    let Some(shared) = shared() else { return };
    let data = shared.join("tau2");
    let tmp = after_the_readme_run();
    let dir = tmp.path();
    let tau2: Vec<String> = readme_commands("## What next")
        .into_iter()
        .filter(|l| is_tau2(l) && l.starts_with("ppol "))
        .collect();
    assert_eq!(tau2.len(), 2, "{tau2:?}");
    for line in &tau2 {
        sh(dir, line, &[("PPOL_TAU2_DATA", &data)]);
    }
    let records = lines(&dir.join("retail_personas.jsonl"));
    let per_task = lines(&dir.join("retail_personas.tau2.jsonl"));
    assert_eq!(records.len(), 10 * per_task.len());
    assert!(per_task.len() > 50, "every retail task: {}", per_task.len());
    assert_eq!(per_task[0]["personas"].as_array().unwrap().len(), 10);
    assert!(per_task[0]["personas"][0]["user_scenario"]["persona"].is_string());
}

/// Every `ppol evolve` of the README names its run directory, so `ppol eval DIR` needs no
/// name copied from the output.
#[test]
fn every_readme_evolve_names_its_run_directory() {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut n = 0;
    for block in text.split("```sh\n").skip(1) {
        let block = block.split("```").next().unwrap();
        for line in block.lines().filter(|l| l.contains("ppol evolve ")) {
            n += 1;
            assert!(line.contains(" --out "), "no --out: {line}");
        }
    }
    assert!(n >= 6, "{n}");
    assert!(!text.contains("runs/<run>"), "a placeholder run directory");
}

fn evolve(args: &[&str]) -> (String, String) {
    let (code, out, err) = run_ppol(args);
    assert_eq!(code, 0, "{err}");
    (out, err)
}

/// A run whose mutations never land: the summary and `eval` say that evolved is the seed and
/// why, and `eval` says why there is no evolved − seed line.
#[test]
fn a_run_whose_best_stays_the_seed_says_so_and_why() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let r = run.to_str().unwrap();
    // the scripted model answers every mutation with text that is no edit (episodes offline)
    let cfg = tmp.path().join("run.toml");
    std::fs::write(&cfg, "[episodes]\nbackend = \"scripted\"\n").unwrap();
    let (out, _) = evolve(&[
        "evolve",
        "--config",
        cfg.to_str().unwrap(),
        "--iterations",
        "2",
        "--llm",
        "scripted",
        "--out",
        r,
        "--quiet",
    ]);
    assert!(
        out.contains(
            "evolved = seed: the run's best is still its seed program: no LLM mutation landed: 1 attempted"
        ),
        "{out}"
    );
    let (code, text, err) = run_ppol(&["eval", r, "--n", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("which is still its seed program: no LLM mutation landed"),
        "{text}"
    );
    assert!(
        text.contains("evolved - seed: not shown: evolved is the seed program"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("eval-test.json")).unwrap())
            .unwrap();
    let c = &json["evolved_vs_seed"];
    assert!(c["evolved_is_seed"]
        .as_str()
        .unwrap()
        .contains("no LLM mutation landed"));
    assert!(c["score"].is_null());
}

/// The README's own simulator gives no reward and, on its 12-task file, 4 test tasks: the
/// summary, `eval` and the report say "no reward" and warn that evolved − seed cannot be told
/// from noise; the report shows no protocol stop marker; without `--human` the run says the
/// demo traces stand in.
#[test]
fn a_small_world_without_rewards_says_no_reward_and_warns_about_noise() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let r = run.to_str().unwrap();
    let world = format!(
        "external:python3 {}",
        root().join("tests/fixtures/worlds/my_sim.py").display()
    );
    let tasks = root().join("tests/fixtures/worlds/tasks.jsonl");
    let (out, err) = evolve(&[
        "evolve",
        "--world",
        &world,
        "--task-file",
        tasks.to_str().unwrap(),
        "--iterations",
        "2",
        "--out",
        r,
        "--quiet",
    ]);
    assert!(
        err.contains("human traces: none given, so ppol's shipped demo traces"),
        "{err}"
    );
    assert!(err.contains("pass --human FILE"), "{err}");
    assert!(out.contains(", no reward)"), "{out}");
    assert!(!out.contains("success 0.00"), "{out}");
    assert!(
        out.contains("warning: the test split has 4 task(s): `ppol eval` cannot tell evolved - seed from noise on fewer than 5"),
        "{out}"
    );
    assert!(
        out.contains(&format!("ppol generate --run {r} -n 10")),
        "{out}"
    );
    let (code, text, err) = run_ppol(&["eval", r]);
    assert_eq!(code, 0, "{err}");
    let evolved = text.lines().find(|l| l.starts_with("evolved ")).unwrap();
    assert!(evolved.contains("no reward"), "{text}");
    // (the standard error of a difference is in the line: eval_table's unit tests)
    assert!(
        text.contains("warning: 4 test task(s) are too few to tell evolved - seed"),
        "{text}"
    );
    assert!(text.contains(&format!("next: ppol report {r}")), "{text}");
    let (code, _o, err) = run_ppol(&["report", r]);
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(!html.contains("###STOP###"), "a stop marker in the report");
    assert!(html.contains("no reward, 0 failed"), "dialogues");
    assert!(!html.contains("0 successful"));
    assert!(html.contains("<td>no reward</td>"), "eval table");
    assert!(html.contains("test split (4 tasks)"));
    // the episodes the report shows did end with the marker: it was dropped, not missing
    let eps = std::fs::read_to_string(run.join("best/episodes.jsonl")).unwrap();
    assert!(eps.contains("###STOP###"));
}

#[test]
fn generate_from_a_run_takes_its_best_program_and_its_world() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let r = run.to_str().unwrap();
    evolve(&["evolve", "--iterations", "1", "--out", r, "--quiet"]);
    // every task of the run's world (demo: 16), the run's N unless -n
    let (code, out, err) = run_ppol(&["generate", "--run", r, "-n", "1"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 16, "{out}");
    let (code, out, err) = run_ppol(&["generate", "--run", r, "--split", "test", "-n", "2"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 7 * 2);
    let (code, out, err) = run_ppol(&["generate", "--run", r, "--task", "3", "--format", "tau2"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["task_id"], "3");
    assert_eq!(
        v["personas"].as_array().unwrap().len(),
        10,
        "the run's n_personas"
    );
    // the same personas as the program file itself
    let program = run.join("best/program.py");
    let (_, by_path, _) = run_ppol(&[
        "generate",
        "--program",
        program.to_str().unwrap(),
        "--domain",
        "demo",
        "--task",
        "3",
        "--format",
        "tau2",
    ]);
    assert_eq!(by_path, out);
    // errors name the run directory; --program and --run do not go together
    let (code, _o, err) = run_ppol(&["generate", "--run", "no-such-run", "-n", "1"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no-such-run") && err.contains("no such run directory"),
        "{err}"
    );
    let (code, _o, err) = run_ppol(&["generate", "--run", r, "--program", "x.py"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot be used with"), "{err}");
    std::fs::remove_file(&program).unwrap();
    let (code, _o, err) = run_ppol(&["generate", "--run", r, "-n", "1"]);
    assert_eq!(code, 2);
    assert!(err.contains("no best/program.py"), "{err}");
}

/// A call that times out is retried with a warning a user can read without knowing ppol's
/// roles: which role, what its call was doing, and what happens next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_call_warns_with_what_it_was_doing_and_what_happens_next() {
    use ppol::testing::mock_server::{serve, MockReply, MockScript};
    // the first answer comes after the timeout; the second says goodbye at once
    let server = serve(
        MockScript::queue(vec![MockReply::text("late").with_delay(2000)])
            .with_default(MockReply::text("Thanks, bye ###STOP###")),
    )
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let llm = tmp.path().join("llm.toml");
    std::fs::write(
        &llm,
        format!(
            "max_concurrency = 1\nmax_retries = 2\nbackoff_base_ms = 1\nbackoff_max_ms = 10\n\
             [default]\nprovider = \"openai\"\nmodel = \"mock\"\nbase_url = \"{}\"\n\
             timeout_s = 0.3\n",
            server.base_url()
        ),
    )
    .unwrap();
    let out = tmp.path().join("eps.jsonl");
    let (code, _o, err) = tokio::task::spawn_blocking(move || {
        run_ppol(&[
            "episodes",
            "--tasks",
            "0",
            "--llm",
            llm.to_str().unwrap(),
            "--max-turns",
            "1",
            "--quiet",
            "-o",
            out.to_str().unwrap(),
        ])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let warn = err
        .lines()
        .find(|l| l.contains("WARN") && l.contains("failed"))
        .unwrap_or_else(|| panic!("no warning:\n{err}"));
    assert!(
        warn.contains("the user simulator's call (writing a user turn) failed: ")
            || warn.contains("the agent's call (writing an agent turn) failed: "),
        "which role and what it was doing: {warn}"
    );
    assert!(
        warn.contains("retrying in") && warn.contains("(retry 1 of 2)"),
        "{warn}"
    );
    assert!(
        warn.contains("if every retry fails, the episode is recorded as failed"),
        "what happens next: {warn}"
    );
}

/// The report's slips: an eval on task ids is titled by them (not "3 split"), seeds are one a
/// line (a long seed wrapped mid-number in one joined line), and the running best of the
/// human-likeness and coverage charts says it follows the combined score.
#[test]
fn the_report_titles_evals_keeps_seeds_whole_and_labels_the_running_best() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let r = run.to_str().unwrap();
    evolve(&["evolve", "--iterations", "2", "--out", r, "--quiet"]);
    let (code, _o, err) = run_ppol(&["eval", r, "--split", "3", "--n", "1"]);
    assert_eq!(code, 0, "{err}");
    let (code, _o, err) = run_ppol(&["report", r]);
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(
        html.contains("task 3, eval-3.json"),
        "the D1–D4 chart's title"
    );
    assert!(
        html.contains("<h3>task 3 <span"),
        "the eval table's heading"
    );
    assert!(!html.contains("3 split"));
    assert!(
        html.contains("root: 1<br>") || html.contains("<br>root: 1<"),
        "one seed a line"
    );
    assert!(!html.contains("root=1"));
    assert!(html.contains("dl.facts dd{margin:0;font-weight:500;overflow-wrap:break-word}"));
    assert!(html.contains("running best (by combined score)"));
}
