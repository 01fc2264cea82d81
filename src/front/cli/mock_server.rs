//! `ppol mock-server` (hidden; needs a build with `--features testing`): serve the mock
//! OpenAI-compatible server of `ppol::testing::mock_server` on 127.0.0.1 and print one ready
//! line per replica on stdout, `{"addr": "127.0.0.1:PORT", "base_url":
//! "http://127.0.0.1:PORT/v1", "replica": 0}`. Tests in other processes (Python, external
//! simulators) read those lines, talk to `base_url`, inspect `GET /mock/requests` and
//! `GET /mock/stats`, and kill the process (or let `--lifetime-s` end it). Script files: see
//! the module docs of `ppol::testing::mock_server` (a JSON object `{"queue", "rules",
//! "default"}` or JSONL replies); without one, every request is echoed. A build without the
//! feature says so in one line and exits with 2.

use std::path::PathBuf;

use clap::Args;

/// Arguments of `ppol mock-server`.
#[derive(Debug, Args)]
#[command(after_help = "\
Faults per reply (script keys): status, retry_after, raw_body, delay_ms, hang_up, stall \
(never answer), endless_body (headers, then a body that never ends), usage, model.
Control routes: GET /mock/stats, GET /mock/requests, POST /mock/replies, POST /mock/default, \
POST /mock/outage {\"for_s\": S}.
Reference: the module docs of src/testing/mock_server/mod.rs.")]
pub struct MockServerArgs {
    /// Script file (JSON object with queue/rules/default, or JSONL replies); default: echo.
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// Port on 127.0.0.1 (0: an ephemeral port, reported in the ready line); replica i
    /// binds port + i.
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Stop by itself after this many seconds (default: run until killed or Ctrl-C).
    #[arg(long, value_parser = super::seconds)]
    pub lifetime_s: Option<f64>,
    /// Start K independent servers (own port, script copy and counters); one ready line each.
    #[arg(long, default_value_t = 1, value_name = "K", value_parser = super::count(1usize, 64))]
    pub replicas: usize,
    /// Fixed latency added to every chat request that reaches processing.
    #[arg(long, default_value_t = 0, value_name = "MS", value_parser = super::count(0u64, 3_600_000))]
    pub latency_ms: u64,
    /// Answer 429 (with Retry-After) when N chat requests are in flight already.
    #[arg(long, value_name = "N",
          value_parser = super::count(1, crate::limits::MAX_CONCURRENCY))]
    pub max_in_flight: Option<usize>,
    /// Retry-After seconds of the --max-in-flight 429s.
    #[arg(long, default_value_t = 1.0, value_name = "S", value_parser = super::seconds)]
    pub busy_retry_after_s: f64,
    /// Compute at most K requests at once (llama.cpp slots); the others wait in a queue.
    #[arg(long, value_name = "K", conflicts_with = "serial",
          value_parser = super::count(1, crate::limits::MAX_CONCURRENCY))]
    pub slots: Option<usize>,
    /// One request at a time, like llama.cpp's server (--slots 1).
    #[arg(long)]
    pub serial: bool,
    /// Stop computing a request whose client went away (default: compute it to the end).
    #[arg(long)]
    pub cancel_abandoned: bool,
    /// Generation speed: a completion takes completion_tokens / T seconds.
    #[arg(long, value_name = "T", value_parser = super::positive_number)]
    pub tokens_per_s: Option<f64>,
    /// Context window in tokens: longer prompts get 400, max_tokens is clamped to the rest.
    #[arg(long, value_name = "N", value_parser = super::count(1u64, u64::MAX))]
    pub n_ctx: Option<u64>,
    /// A text reply to a request without max_tokens grows until the context window is full.
    #[arg(long, requires = "n_ctx")]
    pub fill_context: bool,
    /// llama.cpp strictness: --reject-null-content and --tools-need-tool-choice.
    #[arg(long)]
    pub strict: bool,
    /// HTTP 500 when an assistant message has "content": null.
    #[arg(long)]
    pub reject_null_content: bool,
    /// Ignore tools (answer in plain text) unless the request has a tool_choice.
    #[arg(long)]
    pub tools_need_tool_choice: bool,
    /// The response_format shapes taken: any (OpenAI), llama-cpp-python (json_object with a
    /// schema; json_schema gets its HTTP 500; the default under --strict) or none (HTTP 400).
    /// (A string here so that a build without the feature still parses its arguments.)
    #[arg(long, value_name = "WHICH", value_parser = ["any", "llama-cpp-python", "none"])]
    pub response_format: Option<String>,
    /// After N chat requests, the next one kills the server (see --down-for-s).
    #[arg(long, value_name = "N", requires = "down_for_s", value_parser = super::count(0u64, u64::MAX))]
    pub down_after_requests: Option<u64>,
    /// How long the killed server refuses connections before listening again on its port.
    #[arg(long, value_name = "S", requires = "down_after_requests", value_parser = super::seconds)]
    pub down_for_s: Option<f64>,
}

/// Run `ppol mock-server`: print the ready lines, serve until the lifetime ends or Ctrl-C,
/// then print the final statistics on stderr.
#[cfg(feature = "testing")]
pub fn run(args: MockServerArgs) -> anyhow::Result<()> {
    use std::net::SocketAddr;
    use std::time::Duration;

    use crate::testing::mock_server::{self, MockOptions, MockOutage, MockScript, MockStrictness};

    let seconds =
        |flag: &str, s: f64| -> anyhow::Result<Duration> { Ok(crate::limits::seconds(flag, s)?) };
    let script = match &args.script {
        Some(p) => MockScript::from_file(p)?,
        None => MockScript::default(),
    };
    let max_lifetime = args
        .lifetime_s
        .map(|s| seconds("--lifetime-s", s))
        .transpose()?;
    if args.replicas == 0 {
        anyhow::bail!("--replicas must be at least 1");
    }
    if args.max_in_flight == Some(0) {
        anyhow::bail!("--max-in-flight must be at least 1");
    }
    if args.slots == Some(0) {
        anyhow::bail!("--slots must be at least 1");
    }
    if !(args.busy_retry_after_s.is_finite() && args.busy_retry_after_s >= 0.0) {
        anyhow::bail!(
            "--busy-retry-after-s must be a non-negative number of seconds, got {}",
            args.busy_retry_after_s
        );
    }
    if let Some(t) = args.tokens_per_s {
        if !(t.is_finite() && t > 0.0) {
            anyhow::bail!("--tokens-per-s must be a positive number, got {t}");
        }
    }
    if args.n_ctx == Some(0) {
        anyhow::bail!("--n-ctx must be at least 1");
    }
    let outage = match (args.down_after_requests, args.down_for_s) {
        (Some(after_requests), Some(s)) => Some(MockOutage {
            after_requests,
            down_for: seconds("--down-for-s", s)?,
        }),
        _ => None,
    };
    let options = MockOptions {
        addr: SocketAddr::from(([127, 0, 0, 1], args.port)),
        max_lifetime,
        latency: Duration::from_millis(args.latency_ms),
        max_in_flight: args.max_in_flight,
        busy_retry_after: args.busy_retry_after_s,
        slots: if args.serial { Some(1) } else { args.slots },
        cancel_abandoned: args.cancel_abandoned,
        tokens_per_s: args.tokens_per_s,
        fill_context: args.fill_context,
        n_ctx: args.n_ctx,
        strict: MockStrictness {
            reject_null_content: args.strict || args.reject_null_content,
            tools_need_tool_choice: args.strict || args.tools_need_tool_choice,
            response_format: match &args.response_format {
                Some(which) => which.parse().map_err(|e: String| anyhow::anyhow!(e))?,
                None if args.strict => {
                    crate::testing::mock_server::MockResponseFormat::LlamaCppPython
                }
                None => crate::testing::mock_server::MockResponseFormat::Any,
            },
        },
        outage,
        ..MockOptions::default()
    };
    let stats = crate::front::ops::runtime()?.block_on(mock_server::run_replicas(
        args.replicas,
        script,
        options,
        std::io::stdout(),
    ))?;
    let many = stats.len() > 1;
    for (i, s) in stats.iter().enumerate() {
        let who = if many {
            format!("mock-server replica {i}")
        } else {
            "mock-server".to_string()
        };
        eprintln!(
            "{who} stopped: {} chat requests, {} other requests; {}",
            s.requests,
            s.other_requests,
            serde_json::to_string(s)?
        );
    }
    Ok(())
}

/// Without the `testing` feature there is no mock server: say so (exit code 2).
#[cfg(not(feature = "testing"))]
pub fn run(args: MockServerArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!(
        "ppol mock-server is test support: this ppol was built without it; rebuild with `--features testing` (cargo build --features testing, or maturin develop --features testing)"
    )
}
