//! The `ppol` command line. Each verb lives in its own file and is a thin adapter over one
//! function of the operations layer ([`crate::front::ops`]); this module owns argument
//! parsing, logging setup and the exit codes:
//!
//! * **0** — the work succeeded;
//! * **1** — the work ran and its output was written, but part of it failed (some episodes or
//!   tasks failed, a run stopped for infrastructure reasons); the message says what;
//! * **2** — an error: bad input or configuration (the message names the file, line or key),
//!   or nothing could be done;
//! * **130** — interrupted (Ctrl-C); what was finished is kept.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod audit;
mod bench;
mod bench_evolve;
mod bench_llm;
mod bench_reach;
mod bench_recover;
mod bench_world;
mod config;
mod episodes;
mod evolve;
mod export;
mod fingerprint;
mod generate;
mod mock_server;
mod reference;
mod report;
mod score;
mod study;
mod traces;
mod world;

/// ppol: evolve persona policies for LLM user simulators.
#[derive(Debug, Parser)]
#[command(name = "ppol", version, about, long_about = None)]
pub struct Cli {
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// All commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Evolve generator programs (the main job; offline by default).
    Evolve(evolve::EvolveArgs),
    /// Continue a run from its last checkpoint.
    Resume(evolve::ResumeArgs),
    /// Compare base, direct, seed and evolved personas on held-out tasks (Table 1).
    #[command(after_help = crate::evolve::heldout::text::TABLE_LEGEND)]
    Eval(evolve::EvalArgs),
    /// Inspect trace files.
    Traces(traces::TracesArgs),
    /// Compute behavioural fingerprints (JSONL, one line per dialogue).
    Fingerprint(fingerprint::FingerprintArgs),
    /// Build the human reference (fingerprints, mean, std) from human traces.
    Reference(reference::ReferenceArgs),
    /// Train the human-vs-simulator discriminator.
    Discriminator(score::DiscriminatorArgs),
    /// Score simulated dialogues: P(human), coverage, combined, Dice D1–D4.
    Score(score::ScoreArgs),
    /// Audit human-likeness independently of any run: fresh classifiers, humans vs each file,
    /// cross-validated by task, AUC with 95% intervals (and an optional LLM judge).
    Audit(audit::AuditArgs),
    /// Play episodes (user simulator ↔ agent ↔ τ² environment) and write them as JSONL.
    Episodes(episodes::EpisodesArgs),
    /// Export episodes as agent-hardening training data.
    Export(export::ExportArgs),
    /// A blinded human-judgement study: make the annotation page, analyze the answers.
    Study(study::StudyArgs),
    /// Measure speed.
    Bench(bench::BenchArgs),
    /// Write a self-contained HTML report of an evolution run from its run directory.
    Report(report::ReportArgs),
    /// The run configuration's JSON Schema (`ppol config schema`), for editors.
    Config(config::ConfigArgs),
    /// Run a generator program in the sandbox and write persona policies.
    Generate(generate::GenerateArgs),
    /// Serve the mock OpenAI-compatible server on 127.0.0.1 (for tests of integrations).
    #[command(hide = true)]
    MockServer(mock_server::MockServerArgs),
}

/// Entry point of the binary (and of `python -m ppol_rs`).
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// Run the CLI with explicit arguments (the first is the program name).
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    ExitCode::from(run_from(args))
}

/// Run the CLI with explicit arguments; returns the exit code (see the module docs).
pub fn run_from<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match parse(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    init_logging(cli.verbose);
    let ran = match stdout_guarded(|| run(cli.command)) {
        Ok(r) => r,
        Err(why) => {
            eprintln!("error: could not write to standard output: {why}");
            return 2;
        }
    };
    match ran {
        Ok(Outcome::Done) => 0,
        Ok(Outcome::Partial(why)) => {
            eprintln!("ppol: {}", crate::io::printable(&why));
            1
        }
        Ok(Outcome::Interrupted) => 130,
        Err(e) => {
            eprintln!("error: {}", crate::io::printable(&format!("{e:#}")));
            2
        }
    }
}

/// Run `f`, turning the panic of `print!`/`println!` on a standard output that cannot be
/// written (a full disk, `/dev/full`, a closed pipe) into an error with its reason: what was
/// computed and saved stays saved, and the exit code is 2, not a panic's 101. Any other panic
/// is a bug and goes on unwinding with its own message.
fn stdout_guarded<R>(f: impl FnOnce() -> R) -> std::result::Result<R, String> {
    const STDOUT: &str = "failed printing to stdout";
    let message = |p: &(dyn std::any::Any + Send)| -> Option<String> {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
    };
    let default = std::sync::Arc::new(std::panic::take_hook());
    let inner = default.clone();
    std::panic::set_hook(Box::new(move |info| {
        let quiet = message(info.payload()).is_some_and(|m| m.starts_with(STDOUT));
        if !quiet {
            inner(info);
        }
    }));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let _ = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| default(info)));
    match out {
        Ok(r) => Ok(r),
        Err(p) => match message(&*p) {
            Some(m) if m.starts_with(STDOUT) => Err(m
                .trim_start_matches(STDOUT)
                .trim_start_matches(':')
                .trim()
                .to_string()),
            _ => std::panic::resume_unwind(p),
        },
    }
}

/// The command line: every flag that takes a value also takes one that looks like a negative
/// number, so that `--trials -1` meets the flag's own check (an error naming the flag) instead
/// of clap's "unexpected argument '-1'".
pub fn command() -> clap::Command {
    fn negative_values(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| {
            if a.get_action().takes_values() {
                a.allow_negative_numbers(true)
            } else {
                a
            }
        })
        .mut_subcommands(negative_values)
    }
    negative_values(<Cli as clap::CommandFactory>::command())
}

/// Subcommand path (`"export sft"`) → long flag in snake case (`max_turns`) → its default
/// (None: it has none).
pub type FlagDefaults =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, Option<String>>>;

/// Every subcommand's flags with their defaults, read from clap itself. Python's
/// `_core._cli_defaults()` returns it, so that a test compares the CLI's defaults with the
/// binding's signatures by introspection (`python/tests/test_defaults.py`).
pub fn defaults() -> FlagDefaults {
    fn walk(cmd: &clap::Command, path: &str, out: &mut FlagDefaults) {
        if !path.is_empty() {
            let flags = cmd
                .get_arguments()
                .filter_map(|a| {
                    let long = a.get_long()?;
                    let default = a
                        .get_default_values()
                        .first()
                        .map(|v| v.to_string_lossy().into_owned());
                    Some((long.replace('-', "_"), default))
                })
                .collect();
            out.insert(path.to_string(), flags);
        }
        for sub in cmd.get_subcommands().filter(|c| c.get_name() != "help") {
            let sub_path = if path.is_empty() {
                sub.get_name().to_string()
            } else {
                format!("{path} {}", sub.get_name())
            };
            walk(sub, &sub_path, out);
        }
    }
    let mut cmd = command();
    cmd.build();
    let mut out = FlagDefaults::new();
    walk(&cmd, "", &mut out);
    out
}

/// Parse the arguments with [`command`].
pub fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut cmd = command();
    let mut matches = cmd.try_get_matches_from_mut(args)?;
    <Cli as clap::FromArgMatches>::from_arg_matches_mut(&mut matches)
        .map_err(|e| e.format(&mut cmd))
}

/// How a verb ended (see the module docs for the exit codes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The work succeeded (exit 0).
    Done,
    /// The work ran and its output was written, but part of it failed (exit 1).
    Partial(String),
    /// Stopped by the user (exit 130).
    Interrupted,
}

impl From<()> for Outcome {
    fn from(_: ()) -> Self {
        Outcome::Done
    }
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| Eprint)
        // colour codes only for a terminal, not in log files, notebooks or CI logs
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Where log lines go: stderr. In test builds (feature `testing`) through `eprint!`, which the
/// test harness captures with the test's output: a plain stderr writer bypasses it, and once a
/// test ran the CLI in-process, the warnings of passing fault-injection tests buried the
/// results.
struct Eprint;

impl std::io::Write for Eprint {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if cfg!(feature = "testing") {
            eprint!("{}", String::from_utf8_lossy(buf));
            Ok(buf.len())
        } else {
            std::io::stderr().write(buf)
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn run(command: Command) -> anyhow::Result<Outcome> {
    Ok(match command {
        Command::Evolve(a) => evolve::run_evolve(a)?,
        Command::Resume(a) => evolve::run_resume(a)?,
        Command::Eval(a) => evolve::run_eval(a)?,
        Command::Traces(a) => traces::run(a)?.into(),
        Command::Fingerprint(a) => fingerprint::run(a)?.into(),
        Command::Reference(a) => reference::run(a)?.into(),
        Command::Discriminator(a) => score::run_discriminator(a)?.into(),
        Command::Score(a) => score::run_score(a)?.into(),
        Command::Audit(a) => audit::run(a)?,
        Command::Episodes(a) => episodes::run(a)?,
        Command::Export(a) => export::run(a)?,
        Command::Study(a) => study::run(a)?.into(),
        Command::Bench(a) => bench::run(a)?.into(),
        Command::Report(a) => report::run(a)?.into(),
        Command::Config(a) => config::run(a)?.into(),
        Command::Generate(a) => generate::run(a)?,
        Command::MockServer(a) => mock_server::run(a)?.into(),
    })
}

/// Warn on stderr about each dialogue a load left out (`warning: FILE: line N: ...`).
pub(crate) fn warn_skipped(skipped: &[crate::fitness::traces::Skipped]) {
    for s in skipped {
        eprintln!("warning: {}", crate::io::printable(&s.to_string()));
    }
}

/// The parser of a count flag: a whole number in `min..=max` (bounds from [`crate::limits`]),
/// else clap's error naming the flag (exit 2). Flags that use it also set
/// `allow_negative_numbers`, so that `-n -1` is told the value must be at least `min` instead
/// of being taken for an unknown flag `-1`.
pub(crate) fn count<T>(
    min: T,
    max: T,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: Copy + std::fmt::Display + TryFrom<i128> + Send + Sync + 'static,
    i128: TryFrom<T>,
{
    move |text: &str| {
        let wide = |x: T| i128::try_from(x).unwrap_or(i128::MAX);
        let t = text.trim();
        let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
        let v: i128 = match t.parse() {
            Ok(v) => v,
            // too many digits for any count: the sign says which bound it is beyond
            Err(_) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                if t.starts_with('-') {
                    i128::MIN
                } else {
                    i128::MAX
                }
            }
            Err(_) => return Err(format!("expected a whole number from {min} to {max}")),
        };
        crate::limits::in_range(&v, &wide(min), &wide(max))?;
        T::try_from(v).map_err(|_| format!("expected a whole number from {min} to {max}"))
    }
}

/// The parser of a seed flag: a whole number from 0 to 2^64 - 1 (see [`count`]).
pub(crate) fn seed() -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    count(0u64, u64::MAX)
}

/// The parser of a duration flag (`--episode-timeout-s`, ...): seconds above 0 and at most
/// [`crate::limits::MAX_SECONDS`], else clap's error naming the flag.
pub(crate) fn seconds(text: &str) -> Result<f64, String> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| "expected a number of seconds".to_string())?;
    crate::limits::check_seconds("", v).map_err(|_| crate::limits::seconds_message(v))?;
    Ok(v)
}

/// The parser of a share or weight flag: a number in [0, 1].
pub(crate) fn share(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        Ok(v) => Err(format!(
            "must be in [0, 1], got {}",
            crate::limits::shown(v)
        )),
        Err(_) => Err("expected a number in [0, 1]".into()),
    }
}

/// The parser of a rate flag: a finite number above 0.
pub(crate) fn positive_number(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(v) => Err(format!("must be a number above 0, got {v}")),
        Err(_) => Err("expected a number".into()),
    }
}

/// A progress bar on stderr (hidden with `quiet` or when stderr is not a terminal).
pub(crate) fn progress(len: u64, what: &str, quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {pos}/{len} ({per_sec}, eta {eta})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// Whether progress goes to a log, not a terminal: `ppol` is not `--quiet` and stderr is a
/// file, a pipe or a notebook's capture, where a progress bar draws nothing. Plain progress
/// lines are printed there instead.
pub(crate) fn plain_progress(quiet: bool) -> bool {
    use std::io::IsTerminal;
    !quiet && !std::io::stderr().is_terminal()
}

/// The progress of a batch of episodes ([`crate::simulate::batch::Progress`]) on stderr: on a
/// terminal a bar whose message says what is in flight and for how long (redrawn at least
/// every [`HEARTBEAT`](crate::simulate::batch::HEARTBEAT)); elsewhere (a log, a pipe, a
/// notebook) a line at most every 5 s while episodes finish and at least every 20 s while
/// they do not, so no stage is silent. Nothing with `quiet`.
pub(crate) fn batch_progress(
    quiet: bool,
) -> (
    indicatif::ProgressBar,
    impl Fn(&crate::simulate::batch::Progress) + Sync,
) {
    let bar = progress(0, "", quiet);
    let b = bar.clone();
    let plain = plain_progress(quiet);
    let last = std::sync::Mutex::new(None::<std::time::Instant>);
    let report = move |p: &crate::simulate::batch::Progress| {
        b.set_length(p.total as u64);
        b.set_position(p.done as u64);
        b.set_message(p.line());
        if !plain {
            return;
        }
        let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
        let since = last.map(|t| t.elapsed());
        let gap = if p.heartbeat { 20 } else { 5 };
        if since.is_none_or(|s| s >= std::time::Duration::from_secs(gap)) || p.done == p.total {
            eprintln!("{}", crate::io::printable(&p.line()));
            *last = Some(std::time::Instant::now());
        }
    };
    (bar, report)
}

/// Run `future` with Ctrl-C handling: the first Ctrl-C sets `stop` (and says `message`), a
/// second one exits at once (130).
pub(crate) fn with_ctrl_c<F: std::future::Future>(
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    message: &'static str,
    future: F,
) -> anyhow::Result<F::Output> {
    Ok(crate::front::ops::block_on(async move {
        let watcher = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\n{message} (Ctrl-C again to abort)...");
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
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

/// Write to a file (atomically) or to stdout when `path` is `None` or `-`.
pub(crate) fn write_output(path: Option<&std::path::Path>, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    match path {
        Some(p) if p != std::path::Path::new("-") => crate::io::write_atomic(p, bytes)?,
        _ => {
            let mut out = std::io::stdout().lock();
            match out.write_all(bytes).and_then(|_| out.flush()) {
                Ok(()) => {}
                // a closed pipe (`| head`) is a normal end
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}
