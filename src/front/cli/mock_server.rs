//! `ppol mock-server [--script FILE] [--port 0] [--lifetime-s N]` (hidden): serve the mock
//! OpenAI-compatible server of [`crate::testing::mock_server`] on 127.0.0.1 and print one ready line
//! `{"addr": "127.0.0.1:PORT", "base_url": "http://127.0.0.1:PORT/v1"}` on stdout. Tests in other
//! processes (Python, external simulators) read that line, talk to `base_url`, inspect
//! `GET /mock/requests` and `GET /mock/stats`, and kill the process (or let `--lifetime-s` end
//! it). Script files: see the module docs of `ppol::testing::mock_server` (a JSON object
//! `{"queue", "rules", "default"}` or JSONL replies); without one, every request is echoed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::testing::mock_server::{self, MockOptions, MockScript};

/// Arguments of `ppol mock-server`.
#[derive(Debug, Args)]
pub struct MockServerArgs {
    /// Script file (JSON object with queue/rules/default, or JSONL replies); default: echo.
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// Port on 127.0.0.1 (0: an ephemeral port, reported in the ready line).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Stop by itself after this many seconds (default: run until killed or Ctrl-C).
    #[arg(long)]
    pub lifetime_s: Option<f64>,
}

/// Run `ppol mock-server`: print the ready line, serve until the lifetime ends or Ctrl-C, then
/// print the final statistics on stderr.
pub fn run(args: MockServerArgs) -> anyhow::Result<()> {
    let script = match &args.script {
        Some(p) => MockScript::from_file(p)?,
        None => MockScript::default(),
    };
    let max_lifetime = match args.lifetime_s {
        Some(s) if !(s.is_finite() && s > 0.0) => {
            anyhow::bail!("--lifetime-s must be a positive number of seconds, got {s}")
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let options = MockOptions {
        addr: SocketAddr::from(([127, 0, 0, 1], args.port)),
        max_lifetime,
        ..MockOptions::default()
    };
    let stats = super::runtime()?.block_on(mock_server::run(script, options, std::io::stdout()))?;
    eprintln!(
        "mock-server stopped: {} chat requests, {} other requests",
        stats.requests, stats.other_requests
    );
    Ok(())
}
