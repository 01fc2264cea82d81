//! The sandbox that runs untrusted generator programs.
//!
//! Every run is a fresh `python3 -s -S -B harness.py` process in a directory of its own
//! holding the harness, its support modules and the program (`generators/harness.py`,
//! embedded in the binary). The host and the harness talk over one `AF_UNIX` socket pair
//! installed as descriptor 3 (the `protocol` module has the frames; the host trusts none of them).
//!
//! What confines a run is decided once by [`Sandbox::new`], which probes what this kernel
//! allows and reports only what the probe verified ([`SandboxReport`], one line):
//!
//! 1. **minimal root** (mount, pid, IPC, UTS and network namespaces; see the `confine` module): the
//!    program sees a read-only tmpfs root with the interpreter, the system libraries, five
//!    device nodes and a fresh `/proc` of its own pid namespace, and writes only `/work` (and
//!    `/tmp`, a directory of it), a tmpfs capped at [`SandboxConfig::max_disk_bytes`] that
//!    vanishes with the run. Needs root, or unprivileged user namespaces.
//! 2. **no filesystem confinement** (network namespace if available): the program runs in a
//!    host directory of its own and can read every world-readable file.
//! 3. **nothing but limits**: resource limits and the scrubbed environment only.
//!
//! In every mode: a scrubbed environment, resource limits (`setrlimit`), a uid of the run's
//! own when the host is root, the seccomp filter (no sockets, namespaces, mounts, ptrace,
//! bpf, keyrings, `memfd_create`, ...), a new session killed as a whole, capped output, and
//! host-side validation of everything the program sends.

mod confine;
mod launch;
mod probe;
mod protocol;
mod reaper;

use launch::{rlimit_table, Launched, Launcher};

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, Semaphore};

use crate::llm::ChatModel;
use crate::{Error, Result};

use confine::{ChildPlan, Mode, RootLayout, RunFiles};
use protocol::{Session, Verdict};
use reaper::SandboxHome;

/// The harness run by every sandboxed process.
pub const HARNESS_PY: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/generators/harness.py"
));
/// The LLM access module given to programs (`import ppol_llm`).
pub const PPOL_LLM_PY: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/generators/ppol_llm.py"
));
/// The helper module given to programs (`import ppol_personas`): JSON repair, stage-1 profiles,
/// fallback instructions; shared by the LLM seeds and the `ppol.evolution._generator_utils` shim.
pub const PPOL_PERSONAS_PY: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/generators/ppol_personas.py"
));
/// Support files written into every run directory: (relative path, contents).
pub const SUPPORT_FILES: &[(&str, &str)] = &[
    ("harness.py", HARNESS_PY),
    ("ppol_llm.py", PPOL_LLM_PY),
    ("ppol_personas.py", PPOL_PERSONAS_PY),
    (
        "ppol/__init__.py",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/generators/ppol/__init__.py"
        )),
    ),
    (
        "ppol/llm.py",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/generators/ppol/llm.py"
        )),
    ),
    (
        "ppol/evolution/__init__.py",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/generators/ppol/evolution/__init__.py"
        )),
    ),
    (
        "ppol/evolution/_generator_utils.py",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/generators/ppol/evolution/_generator_utils.py"
        )),
    ),
];

/// File name of the program inside the run directory.
pub(crate) const PROGRAM_FILE: &str = "program.py";
/// First uid of the per-slot unprivileged users (used only when the host runs as root).
/// Each sandbox gets its own block of [`MAX_SLOTS`] uids derived from the process id and an
/// instance counter, so concurrent sandboxes (in this or another ppol process) never share a
/// uid and never kill or signal each other's programs.
const SLOT_UID_BASE: u32 = 1_900_000_000;
/// Most concurrent runs per sandbox (size of its uid block).
const MAX_SLOTS: u32 = 64;
/// Bytes of stderr kept for [`Failure::stderr_tail`].
const STDERR_TAIL: usize = 4096;
/// Longest accepted wall-clock timeout (`sandbox.timeout_s`): one day.
pub const MAX_TIMEOUT_S: f64 = 86_400.0;
/// Files and directories a run may create in its `/work` tmpfs.
const MAX_INODES: u64 = 4096;

fn uid_block() -> u32 {
    static INSTANCE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let instance = INSTANCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & 0xF;
    SLOT_UID_BASE + ((std::process::id() & 0xFFFF) << 10) + instance * MAX_SLOTS
}

/// Text from an untrusted program made safe to show on a terminal or in a log
/// ([`crate::io::printable`]).
pub fn neutralise(text: &str) -> String {
    crate::io::printable(text).into_owned()
}

/// Where a generator run failed. A failure is data about the candidate, never an error of ppol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// The interpreter could not be started.
    Spawn,
    /// Importing the program raised (syntax error, import of a missing module, ...).
    Import,
    /// `DIVERSITY_AXES` or `generate_personas_detailed` is missing or malformed.
    Contract,
    /// `generate_personas_detailed` raised.
    Generate,
    /// The wall-clock timeout expired; the process group was killed.
    Timeout,
    /// A resource limit was hit (memory, CPU time, processes, disk, file size, output cap).
    Resource,
    /// The channel carried garbage or forged frames, or the process exited without a result.
    Protocol,
    /// The program returned personas that break the contract.
    Validate,
}

impl Stage {
    /// Lowercase name (`spawn`, `import`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Spawn => "spawn",
            Stage::Import => "import",
            Stage::Contract => "contract",
            Stage::Generate => "generate",
            Stage::Timeout => "timeout",
            Stage::Resource => "resource",
            Stage::Protocol => "protocol",
            Stage::Validate => "validate",
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a generator run produced no personas. Every text field is [`neutralise`]d when the
/// failure is made, so it can be printed as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// Where it failed.
    pub stage: Stage,
    /// What happened, in one or a few lines.
    pub reason: String,
    /// The last few KiB of the program's stderr (its prints and tracebacks).
    pub stderr_tail: String,
    /// The program it is about (file path or source name).
    pub program: String,
}

impl Failure {
    /// A failure with every text [`neutralise`]d.
    pub fn new(stage: Stage, reason: &str, stderr_tail: &str, program: &str) -> Failure {
        Failure {
            stage,
            reason: neutralise(reason),
            stderr_tail: neutralise(stderr_tail),
            program: neutralise(program),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} failed: {}",
            neutralise(&self.program),
            self.stage,
            neutralise(&self.reason)
        )
    }
}

/// A generator program: a file, or source text with a name used in messages.
#[derive(Debug, Clone)]
pub enum Program {
    /// A `.py` file on disk.
    Path(PathBuf),
    /// Source text (e.g. a candidate held in memory by evolution).
    Source {
        /// Name used in messages (`candidate-17`, `seeds/x.py`, ...).
        name: String,
        /// The Python source.
        code: String,
    },
}

impl Program {
    /// The name used in messages.
    pub fn name(&self) -> String {
        match self {
            Program::Path(p) => p.display().to_string(),
            Program::Source { name, .. } => name.clone(),
        }
    }

    /// Check that a program file can hold a program: it exists, is a regular file (not a
    /// directory, nor a device such as `/dev/null`) and is not empty. The error names the
    /// program and says which (a program held as source passes).
    pub fn check(&self) -> Result<()> {
        use std::os::unix::fs::FileTypeExt;
        let Program::Path(p) = self else {
            return Ok(());
        };
        let wrong = |kind, why: String| {
            Error::io(
                "reading generator program",
                p,
                std::io::Error::new(kind, why),
            )
        };
        let meta = match std::fs::metadata(p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(wrong(std::io::ErrorKind::NotFound, "does not exist".into()))
            }
            Err(e) => return Err(Error::io("reading generator program", p, e)),
        };
        let t = meta.file_type();
        if !t.is_file() {
            let what = if t.is_dir() {
                "a directory"
            } else if t.is_char_device() {
                "a character device"
            } else if t.is_block_device() {
                "a block device"
            } else if t.is_fifo() {
                "a FIFO"
            } else if t.is_socket() {
                "a socket"
            } else {
                "not a file"
            };
            return Err(wrong(
                std::io::ErrorKind::InvalidInput,
                format!("not a regular file ({what}); give the path of a Python file"),
            ));
        }
        if meta.len() == 0 {
            return Err(wrong(
                std::io::ErrorKind::InvalidData,
                "the file is empty; a generator program is Python source that defines \
                 DIVERSITY_AXES and generate_personas_detailed (see seeds/README.md)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The source text (reads the file).
    pub fn source(&self) -> Result<String> {
        match self {
            Program::Path(p) => crate::io::read_regular_text(
                p,
                crate::limits::MAX_PROGRAM_BYTES,
                "a generator program",
            ),
            Program::Source { code, .. } => Ok(code.clone()),
        }
    }
}

/// LLM calls one generation may make by default (`[sandbox] max_llm_calls` and
/// [`SandboxConfig::default`]): a two-stage seed program makes a handful; 64 leaves room for a
/// program that asks per persona without letting a looping one spend a budget.
pub const MAX_LLM_CALLS: usize = 64;

/// Limits and protections of the sandbox. [`Sandbox::new`] refuses a configuration that
/// [`SandboxConfig::validate`] rejects; build the timeout from user input with
/// [`SandboxConfig::timeout_from_secs`] (a negative, NaN or infinite number is an
/// [`Error::Config`] naming `sandbox.timeout_s`, never a panic).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxConfig {
    /// The Python interpreter (resolved to the real executable, e.g. through pyenv shims).
    pub python: PathBuf,
    /// Wall-clock limit of one run, counting the program's own time: while it waits on the
    /// model (an LLM request in flight) the clock stops, so a slow model does not kill it (its
    /// calls are bounded by the LLM settings, `max_llm_calls` and the budget). The whole run is
    /// killed when it expires.
    pub timeout: Duration,
    /// CPU-seconds limit (`RLIMIT_CPU`); `None` = the timeout rounded up.
    pub cpu_seconds: Option<u64>,
    /// Address-space limit (`RLIMIT_AS`) in bytes.
    pub memory_bytes: u64,
    /// Process/thread limit (`RLIMIT_NPROC`) of the run's user.
    pub max_processes: u64,
    /// Largest file the program may write (`RLIMIT_FSIZE`), bytes.
    pub max_file_bytes: u64,
    /// Size of the run directory (the `/work` tmpfs of the minimal root), bytes: everything
    /// the program writes, together. Without the minimal root only `max_file_bytes` applies.
    #[serde(default = "default_disk")]
    pub max_disk_bytes: u64,
    /// Open-file limit (`RLIMIT_NOFILE`).
    pub max_open_files: u64,
    /// Bytes kept from each of stdout and stderr; more fails the run (stage `resource`).
    pub output_cap: usize,
    /// Bytes the program may send over the protocol channel in one run.
    pub protocol_cap: usize,
    /// LLM requests one run may make; further requests raise `ppol_llm.LLMError`.
    pub max_llm_calls: usize,
    /// LLM requests of one run in flight at once.
    pub llm_parallel: usize,
    /// Runs at once (default: number of CPUs, at most 64). A run holds its slot while it waits
    /// for the LLM, so for LLM-bound programs a higher value (16–64) keeps the model busy;
    /// CPU-bound offline programs gain nothing above the number of CPUs.
    pub concurrency: usize,
    /// Use a private network namespace.
    pub isolate_network: bool,
    /// Confine the filesystem: the minimal root (the program sees only the interpreter, the
    /// system libraries and its own directory).
    pub readonly_root: bool,
    /// When running as root, run each program under its own unprivileged uid.
    pub drop_privileges: bool,
    /// Install the seccomp filter.
    pub seccomp: bool,
    /// Where the sandbox's directory is created (default: the system temp dir).
    pub work_root: Option<PathBuf>,
}

fn default_disk() -> u64 {
    64 << 20
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            python: PathBuf::from("python3"),
            timeout: Duration::from_secs(120),
            cpu_seconds: None,
            memory_bytes: 1 << 30,
            max_processes: 64,
            max_file_bytes: 64 << 20,
            max_disk_bytes: default_disk(),
            max_open_files: 256,
            output_cap: 1 << 20,
            protocol_cap: 32 << 20,
            max_llm_calls: MAX_LLM_CALLS,
            llm_parallel: 8,
            concurrency: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            isolate_network: true,
            readonly_root: true,
            drop_privileges: true,
            seccomp: true,
            work_root: None,
        }
    }
}

impl SandboxConfig {
    /// A wall-clock timeout from seconds as given by a user (`sandbox.timeout_s`,
    /// `--timeout`): finite, above zero and at most [`MAX_TIMEOUT_S`], else [`Error::Config`].
    pub fn timeout_from_secs(secs: f64) -> Result<Duration> {
        if !secs.is_finite() || secs <= 0.0 || secs > MAX_TIMEOUT_S {
            return Err(Error::config(
                "sandbox.timeout_s",
                format!(
                    "{secs} is not a timeout: give seconds above 0 and at most {MAX_TIMEOUT_S}"
                ),
            ));
        }
        Ok(Duration::from_secs_f64(secs))
    }

    /// This configuration with the timeout set from seconds (checked like
    /// [`SandboxConfig::timeout_from_secs`]).
    pub fn with_timeout_secs(mut self, secs: f64) -> Result<SandboxConfig> {
        self.timeout = Self::timeout_from_secs(secs)?;
        Ok(self)
    }

    /// Check every limit; the error names the key (`sandbox.timeout_s`, ...).
    pub fn validate(&self) -> Result<()> {
        let t = self.timeout.as_secs_f64();
        if self.timeout.is_zero() || t > MAX_TIMEOUT_S {
            return Err(Error::config(
                "sandbox.timeout_s",
                format!("{t} s is not a timeout: give seconds above 0 and at most {MAX_TIMEOUT_S}"),
            ));
        }
        let positive = [
            ("sandbox.memory_bytes", self.memory_bytes),
            ("sandbox.max_processes", self.max_processes),
            ("sandbox.max_file_bytes", self.max_file_bytes),
            ("sandbox.max_open_files", self.max_open_files),
            ("sandbox.output_cap", self.output_cap as u64),
            ("sandbox.protocol_cap", self.protocol_cap as u64),
        ];
        for (key, v) in positive {
            if v == 0 {
                return Err(Error::config(key, "must be above 0"));
            }
        }
        if self.max_disk_bytes < 1 << 20 {
            return Err(Error::config(
                "sandbox.max_disk_bytes",
                format!(
                    "{} bytes is too small: the run directory holds the harness (give at least 1 MiB)",
                    self.max_disk_bytes
                ),
            ));
        }
        Ok(())
    }
}

/// How the filesystem of a run is confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confinement {
    /// Mount and pid namespaces with a minimal read-only root and a tmpfs run directory.
    MinimalRoot,
    /// None: the program can read every world-readable file of the host.
    None,
}

/// The protections actually in force, as verified by a probe program at start-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxReport {
    /// The interpreter used.
    pub python: PathBuf,
    /// Its version string.
    pub python_version: String,
    /// How the filesystem is confined (verified: a host file is invisible to the probe).
    pub confinement: Confinement,
    /// What the program can see of the host under [`Confinement::MinimalRoot`] (read-only).
    pub visible: Vec<PathBuf>,
    /// Size cap of the run directory (tmpfs), when confined (verified with `statvfs`).
    pub work_dir_bytes: Option<u64>,
    /// Private pid namespace: the run's processes die with it (verified: the probe is pid 2
    /// and the host's pid is not in its `/proc`).
    pub pid_namespace: bool,
    /// Private network namespace (verified: the probe's `/proc/self/ns/net` differs from the host's).
    pub namespaces: bool,
    /// A user namespace was needed to get the other namespaces (unprivileged host).
    pub user_namespace: bool,
    /// The host's files cannot be written (true under the minimal root).
    pub readonly_root: bool,
    /// Seccomp filter (verified: `socket()` and `memfd_create` fail with `EPERM`, `Seccomp: 2`).
    pub seccomp: bool,
    /// The uid programs run under, when privileges are dropped (verified by `os.getuid()`).
    pub uid: Option<u32>,
    /// Resource limits set on every run: (name, value).
    pub rlimits: Vec<(String, u64)>,
    /// Anything noteworthy (fallbacks taken, protections unavailable).
    pub notes: Vec<String>,
}

impl std::fmt::Display for SandboxReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let yn = |b: bool| if b { "yes" } else { "NO" };
        let confinement = match self.confinement {
            Confinement::MinimalRoot => format!(
                "minimal root ({} read-only paths, run dir tmpfs {} MiB)",
                self.visible.len(),
                self.work_dir_bytes.unwrap_or(0) >> 20
            ),
            Confinement::None => "NONE (world-readable host files are readable)".into(),
        };
        write!(
            f,
            "sandbox: python {} ({}); confinement: {confinement}; pid namespace: {}; network namespace: {}{}; seccomp filter: {}; uid: {}; rlimits: {}",
            self.python.display(),
            self.python_version,
            yn(self.pid_namespace),
            yn(self.namespaces),
            if self.user_namespace { " (via user namespace)" } else { "" },
            yn(self.seccomp),
            self.uid.map(|u| u.to_string()).unwrap_or_else(|| "inherited".into()),
            self.rlimits
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        )?;
        for n in &self.notes {
            write!(f, "; {n}")?;
        }
        Ok(())
    }
}

/// What a run returned before validation.
#[derive(Debug, Clone)]
pub struct RawResult {
    /// The program's axis names, in order.
    pub axes: Vec<String>,
    /// The rows as sent by the harness (JSON-safe copies of the program's dicts).
    pub rows: Vec<Value>,
    /// How many items the program's iterable yielded (up to the harness's cap).
    pub count: usize,
    /// The harness stopped iterating at its cap (10·n + 10 items).
    pub truncated: bool,
    /// The last few KiB of stderr ([`neutralise`]d).
    pub stderr_tail: String,
}

/// One sandboxed run.
#[derive(Debug, Clone)]
pub struct RawRun {
    /// The result, or where and why it failed.
    pub outcome: std::result::Result<RawResult, Failure>,
    /// LLM requests forwarded to the model.
    pub llm_calls: usize,
    /// Wall time of the run.
    pub elapsed: Duration,
}

/// The sandbox: configuration, verified protections and the concurrency limit.
pub struct Sandbox {
    launcher: Launcher,
    report: SandboxReport,
    permits: Arc<Semaphore>,
    slots: Mutex<Vec<u32>>,
    uid_base: u32,
    support: Vec<(&'static str, Arc<[u8]>)>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("cfg", &self.launcher.cfg)
            .field("report", &self.report)
            .finish()
    }
}

impl Sandbox {
    /// Check the configuration, resolve the interpreter, probe which protections work on this
    /// machine and build the sandbox. Fails on an invalid configuration or if Python cannot
    /// run at all.
    pub async fn new(cfg: SandboxConfig) -> Result<Sandbox> {
        cfg.validate()?;
        let (launcher, report, uid_base) = probe::choose(cfg).await?;
        let cfg = &launcher.cfg;
        let slots = (0..cfg.concurrency as u32).rev().collect();
        Ok(Sandbox {
            uid_base,
            permits: Arc::new(Semaphore::new(cfg.concurrency)),
            slots: Mutex::new(slots),
            support: SUPPORT_FILES
                .iter()
                .map(|(p, t)| (*p, Arc::<[u8]>::from(t.as_bytes())))
                .collect(),
            launcher,
            report,
        })
    }

    /// The verified protections.
    pub fn report(&self) -> &SandboxReport {
        &self.report
    }

    /// The configuration in use (with the resolved interpreter).
    pub fn config(&self) -> &SandboxConfig {
        &self.launcher.cfg
    }

    /// Run `program` once: `generate_personas_detailed(task_context, DIVERSITY_AXES, n)`.
    /// Waits for a concurrency slot first. Never fails: problems of the program are a
    /// [`Failure`] in the outcome, problems of the host are a [`Stage::Spawn`] failure.
    pub async fn run(
        &self,
        program: &Program,
        task_context: &str,
        n: usize,
        llm: Option<Arc<dyn ChatModel>>,
        seed: u64,
    ) -> RawRun {
        let name = program.name();
        let started = Instant::now();
        let fail = |stage, reason: String| RawRun {
            outcome: Err(Failure::new(stage, &reason, "", &name)),
            llm_calls: 0,
            elapsed: started.elapsed(),
        };
        let code = match program.source() {
            Ok(c) => c,
            Err(e) => return fail(Stage::Spawn, e.to_string()),
        };
        let _permit = match self.permits.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => return fail(Stage::Spawn, "sandbox closed".into()),
        };
        let slot = self.slots.lock().expect("slot lock").pop().unwrap_or(0);
        let uid = self.uid_base + slot;
        let mut run = self
            .run_in_slot(&name, code, task_context, n, llm, seed, uid)
            .await;
        if self.launcher.mode.drop_uid {
            reaper::wait_uid_gone(uid).await;
        }
        self.slots.lock().expect("slot lock").push(slot);
        run.elapsed = started.elapsed();
        run
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_in_slot(
        &self,
        name: &str,
        code: String,
        task_context: &str,
        n: usize,
        llm: Option<Arc<dyn ChatModel>>,
        seed: u64,
        uid: u32,
    ) -> RawRun {
        let started = Instant::now();
        let cfg = &self.launcher.cfg;
        let mut files = self.support.clone();
        files.push((PROGRAM_FILE, Arc::from(code.into_bytes())));
        let Launched {
            mut child,
            sock,
            dir,
        } = match self.launcher.spawn("harness.py", &files, uid, seed) {
            Ok(l) => l,
            Err(e) => {
                return RawRun {
                    outcome: Err(Failure::new(Stage::Spawn, &e.to_string(), "", name)),
                    llm_calls: 0,
                    elapsed: started.elapsed(),
                }
            }
        };
        // Without a pid namespace or a uid of its own, the run's private network namespace
        // identifies all of its processes, even those that left the process group.
        let run_netns = match (self.launcher.mode.netns, child.id()) {
            (true, Some(p)) => std::fs::read_link(format!("/proc/{p}/ns/net"))
                .ok()
                .filter(|ns| std::fs::read_link("/proc/self/ns/net").ok().as_ref() != Some(ns)),
            _ => None,
        };
        let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<&'static str>();
        let out_task = tokio::spawn(capture(
            child.stdout.take(),
            cfg.output_cap,
            "stdout",
            ev_tx.clone(),
        ));
        let err_task = tokio::spawn(capture(
            child.stderr.take(),
            cfg.output_cap,
            "stderr",
            ev_tx,
        ));

        let mut llm_calls = 0usize;
        let verdict = {
            let (waiting, mut waiting_rx) = tokio::sync::watch::channel(false);
            let session = Session {
                cfg,
                llm,
                seed,
                calls: &mut llm_calls,
                waiting,
            };
            let conversation = session.talk(sock, task_context, n);
            tokio::pin!(conversation);
            // the program's own time: the clock stops while it waits on the model
            let mut clock = OwnClock::new(cfg.timeout);
            let deadline = tokio::time::sleep(cfg.timeout);
            tokio::pin!(deadline);
            let (mut events_open, mut watching) = (true, true);
            loop {
                tokio::select! {
                    v = &mut conversation => break v,
                    ev = ev_rx.recv(), if events_open => match ev {
                        Some(stream) => break Verdict::Fail(Stage::Resource, format!(
                            "{stream} exceeded the {} byte output cap", cfg.output_cap)),
                        None => events_open = false,
                    },
                    changed = waiting_rx.changed(), if watching => match changed {
                        Ok(()) => {
                            if let Some(left) = clock.set_waiting(*waiting_rx.borrow_and_update()) {
                                deadline.as_mut().reset(tokio::time::Instant::now() + left);
                            }
                        }
                        Err(_) => watching = false,
                    },
                    _ = &mut deadline, if !clock.waiting => break Verdict::Fail(Stage::Timeout, format!(
                        "no result within the {:.1} s timeout (the program's own time; {:.1} s \
                         waiting on the model not counted); the run was killed",
                        cfg.timeout.as_secs_f64(), clock.waited.as_secs_f64())),
                }
            }
        };
        let settle = matches!(verdict, Verdict::Eof(_));
        let status = self.launcher.reap(&mut child, uid, run_netns, settle).await;
        // A descendant that escaped everything (only possible without a pid namespace or a
        // uid of its own) may still hold the pipes open: do not wait for it.
        let grace = Duration::from_secs(2);
        let out_abort = out_task.abort_handle();
        let err_abort = err_task.abort_handle();
        if tokio::time::timeout(grace, out_task).await.is_err() {
            out_abort.abort();
        }
        let stderr_tail = match tokio::time::timeout(grace, err_task).await {
            Ok(Ok(tail)) => tail,
            _ => {
                err_abort.abort();
                String::new()
            }
        };
        let outcome = match verdict {
            Verdict::Result(mut r) => {
                r.stderr_tail = neutralise(&stderr_tail);
                Ok(r)
            }
            Verdict::Fail(stage, reason) => Err(Failure::new(stage, &reason, &stderr_tail, name)),
            Verdict::Eof(detail) => {
                let (stage, reason) = self.exit_reason(status, &detail);
                Err(Failure::new(stage, &reason, &stderr_tail, name))
            }
        };
        drop(dir);
        RawRun {
            outcome,
            llm_calls,
            elapsed: started.elapsed(),
        }
    }

    /// Why a process that sent no result ended.
    fn exit_reason(
        &self,
        status: Option<std::process::ExitStatus>,
        detail: &str,
    ) -> (Stage, String) {
        use std::os::unix::process::ExitStatusExt;
        let code = status.and_then(|s| s.code());
        // Under the minimal root the supervisor passes a signal on as 128 + its number.
        let signal = status.and_then(|s| s.signal()).or_else(|| {
            code.filter(|_| self.launcher.mode.minimal_root)
                .and_then(crate::child::decoded_signal)
        });
        match signal {
            Some(libc::SIGXCPU) => (
                Stage::Resource,
                format!(
                    "CPU time limit of {} s exceeded",
                    cpu_seconds(&self.launcher.cfg)
                ),
            ),
            Some(libc::SIGXFSZ) => (Stage::Resource, "file size limit exceeded".into()),
            Some(sig) => (
                Stage::Protocol,
                format!("killed by signal {sig} before sending a result{detail}"),
            ),
            None => (
                Stage::Protocol,
                format!(
                    "exited with status {} before sending a result{detail}",
                    code.unwrap_or(-1)
                ),
            ),
        }
    }
}

/// A run's wall clock that stops while the program waits on the model.
struct OwnClock {
    /// Own time left when the clock last stopped (or at the start).
    left: Duration,
    /// When the clock last started again.
    since: Instant,
    waiting: bool,
    /// Time spent waiting on the model.
    waited: Duration,
}

impl OwnClock {
    fn new(limit: Duration) -> OwnClock {
        OwnClock {
            left: limit,
            since: Instant::now(),
            waiting: false,
            waited: Duration::ZERO,
        }
    }

    /// Stop (waiting) or start the clock; on a start, the own time left (to reset the deadline).
    fn set_waiting(&mut self, waiting: bool) -> Option<Duration> {
        if waiting == self.waiting {
            return None;
        }
        let now = Instant::now();
        let span = now.duration_since(self.since);
        self.since = now;
        self.waiting = waiting;
        if waiting {
            self.left = self.left.saturating_sub(span);
            None
        } else {
            self.waited += span;
            Some(self.left)
        }
    }
}

fn cpu_seconds(cfg: &SandboxConfig) -> u64 {
    cfg.cpu_seconds
        .unwrap_or_else(|| cfg.timeout.as_secs_f64().ceil() as u64)
        .max(1)
}

/// Read a stream, keeping at most `cap` bytes (the tail, for stderr). Signals once when the cap
/// is exceeded and keeps draining so the child never blocks on a full pipe.
async fn capture<R: AsyncRead + Unpin>(
    stream: Option<R>,
    cap: usize,
    name: &'static str,
    events: mpsc::UnboundedSender<&'static str>,
) -> String {
    let Some(mut stream) = stream else {
        return String::new();
    };
    let mut total = 0usize;
    let mut tail: VecDeque<u8> = VecDeque::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut flagged = false;
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(k) => {
                total += k;
                tail.extend(&buf[..k]);
                while tail.len() > STDERR_TAIL {
                    tail.pop_front();
                }
                if total > cap && !flagged {
                    flagged = true;
                    let _ = events.send(name);
                }
            }
        }
    }
    let bytes: Vec<u8> = tail.into_iter().collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Remove the sandbox directories (`ppol-gen-<pid>-*`) under `root` left by ppol processes
/// that no longer exist, as [`Sandbox::new`] does at start; returns how many were removed.
/// Directories of live processes, of other users, or without a well-formed owner file are
/// never touched.
pub fn sweep_stale_dirs(root: &Path) -> usize {
    reaper::sweep_stale(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neutralise_escapes_control_characters_but_keeps_lines_and_tabs() {
        assert_eq!(neutralise("a\tb\nc"), "a\tb\nc");
        assert_eq!(
            neutralise("x\u{1b}[31my\r\u{7}"),
            "x\\u{1b}[31my\\u{d}\\u{7}"
        );
        assert_eq!(neutralise("\u{9b}2J \u{202e}abc"), "\\u{9b}2J \\u{202e}abc");
        assert_eq!(neutralise("é 😀"), "é 😀");
    }

    #[test]
    fn timeouts_are_checked_and_name_the_key() {
        for bad in [-1.0, 0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e9] {
            let e = SandboxConfig::timeout_from_secs(bad).unwrap_err();
            assert!(e.to_string().contains("sandbox.timeout_s"), "{bad}: {e}");
        }
        assert_eq!(
            SandboxConfig::timeout_from_secs(2.5).unwrap(),
            Duration::from_millis(2500)
        );
        let cfg = SandboxConfig::default().with_timeout_secs(-3.0);
        assert!(matches!(cfg, Err(Error::Config { ref key, .. }) if key == "sandbox.timeout_s"));
        let zero = SandboxConfig {
            timeout: Duration::ZERO,
            ..SandboxConfig::default()
        };
        assert!(zero
            .validate()
            .unwrap_err()
            .to_string()
            .contains("sandbox.timeout_s"));
        let tiny_disk = SandboxConfig {
            max_disk_bytes: 10,
            ..SandboxConfig::default()
        };
        assert!(tiny_disk
            .validate()
            .unwrap_err()
            .to_string()
            .contains("sandbox.max_disk_bytes"));
    }

    #[test]
    fn failures_are_neutralised_when_made() {
        let f = Failure::new(
            Stage::Generate,
            "bad\u{1b}]0;title\u{7}",
            "tail\u{1b}[2J",
            "p\u{8}.py",
        );
        let shown = format!("{f}\n{}", f.stderr_tail);
        assert!(
            !shown.chars().any(|c| c.is_control() && c != '\n'),
            "{shown:?}"
        );
    }
}
