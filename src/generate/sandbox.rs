//! The sandbox that runs untrusted generator programs.
//!
//! Every run is a fresh `python3 -s -S -B harness.py` process in its own temporary directory
//! (see `generators/harness.py`, embedded in the binary and written into each run directory).
//! The host and the harness talk over one `AF_UNIX` socket pair installed as file descriptor 3
//! (newline-delimited JSON frames; the harness moves it to a high close-on-exec descriptor and
//! points the program's `sys.stdout` at stderr, so prints cannot corrupt the protocol):
//!
//! | direction | frame |
//! |---|---|
//! | host → child | `{"type":"init","program":"program.py","task_context":..,"n":..,"seed":..,"llm":bool}` |
//! | child → host | `{"type":"llm","id":k,"requests":[{"prompt","system","temperature","max_tokens"}]}` |
//! | host → child | `{"type":"llm_result","id":k,"results":[{"text":..} or {"error":..}]}` |
//! | child → host | `{"type":"result","axes":[..],"rows":[..],"count":k,"truncated":bool}` |
//! | child → host | `{"type":"error","stage":"import|contract|generate|resource","error_type","message","traceback"}` |
//!
//! Protections (each probed once by [`Sandbox::new`] and reported in [`SandboxReport`]):
//! scrubbed environment, own working directory and `HOME`, resource limits (`setrlimit`),
//! a new process group killed as a whole with `SIGKILL` at the wall-clock deadline,
//! capped stdout/stderr/protocol, a private network namespace (no interfaces but a down
//! loopback), a private mount namespace in which `/` is read-only except the run directory,
//! a per-slot unprivileged uid when the host runs as root (so the program cannot read
//! root-only files, `/proc/<host>/environ` or other runs), and a seccomp-BPF filter that makes
//! `socket()` for every family but `AF_UNIX` (and `io_uring_setup`) fail with `EPERM`.
//! Whatever cannot be set up on the machine is left out and reported, never silently claimed.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Semaphore};

use crate::dialogue::{Role, Turn};
use crate::llm::{CallRole, ChatModel, ChatRequest};
use crate::{Error, Result};

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
/// Support files written into every run directory: (relative path, contents).
pub const SUPPORT_FILES: &[(&str, &str)] = &[
    ("harness.py", HARNESS_PY),
    ("ppol_llm.py", PPOL_LLM_PY),
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
const PROGRAM_FILE: &str = "program.py";
/// First uid of the per-slot unprivileged users (used only when the host runs as root).
/// Each sandbox gets its own block of [`MAX_SLOTS`] uids derived from the process id and an
/// instance counter, so concurrent sandboxes (in this or another ppol process) never share a
/// uid and never kill or signal each other's programs.
const SLOT_UID_BASE: u32 = 1_900_000_000;
/// Most concurrent runs per sandbox (size of its uid block).
const MAX_SLOTS: u32 = 64;

fn uid_block() -> u32 {
    static INSTANCE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let instance = INSTANCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & 0xF;
    SLOT_UID_BASE + ((std::process::id() & 0xFFFF) << 10) + instance * MAX_SLOTS
}
/// Bytes of stderr kept for [`Failure::stderr_tail`].
const STDERR_TAIL: usize = 4096;

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
    /// A resource limit was hit (memory, CPU time, processes, file size, output cap).
    Resource,
    /// The channel carried garbage, or the process exited without a result.
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

/// Why a generator run produced no personas.
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

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} failed: {}",
            self.program, self.stage, self.reason
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

    /// The source text (reads the file).
    pub fn source(&self) -> Result<String> {
        match self {
            Program::Path(p) => crate::io::read_to_string(p),
            Program::Source { code, .. } => Ok(code.clone()),
        }
    }
}

/// Limits and protections of the sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxConfig {
    /// The Python interpreter (resolved to the real executable, e.g. through pyenv shims).
    pub python: PathBuf,
    /// Wall-clock limit of one run; the whole process group is killed when it expires.
    pub timeout: Duration,
    /// CPU-seconds limit (`RLIMIT_CPU`); `None` = the timeout rounded up.
    pub cpu_seconds: Option<u64>,
    /// Address-space limit (`RLIMIT_AS`) in bytes.
    pub memory_bytes: u64,
    /// Process/thread limit (`RLIMIT_NPROC`) of the run's user.
    pub max_processes: u64,
    /// Largest file the program may write (`RLIMIT_FSIZE`), bytes.
    pub max_file_bytes: u64,
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
    /// Use a private mount namespace with a read-only `/` (run directory writable).
    pub readonly_root: bool,
    /// When running as root, run each program under its own unprivileged uid.
    pub drop_privileges: bool,
    /// Install the seccomp filter blocking non-`AF_UNIX` sockets.
    pub seccomp: bool,
    /// Where run directories are created (default: the system temp dir).
    pub work_root: Option<PathBuf>,
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
            max_open_files: 256,
            output_cap: 1 << 20,
            protocol_cap: 32 << 20,
            max_llm_calls: 256,
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

/// The protections actually in force, as verified by a probe program at start-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxReport {
    /// The interpreter used.
    pub python: PathBuf,
    /// Its version string.
    pub python_version: String,
    /// Private network namespace (verified: the probe's `/proc/self/ns/net` differs from the host's).
    pub namespaces: bool,
    /// A user namespace was needed to get the other namespaces (unprivileged host).
    pub user_namespace: bool,
    /// Private mount namespace with read-only `/` (verified: writing `/tmp` fails with `EROFS`).
    pub readonly_root: bool,
    /// Seccomp socket filter (verified: `socket(AF_INET)` fails with `EPERM`, `Seccomp: 2`).
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
        write!(
            f,
            "sandbox: python {} ({}); network namespace: {}{}; read-only root: {}; seccomp socket filter: {}; uid: {}; rlimits: {}",
            self.python.display(),
            self.python_version,
            yn(self.namespaces),
            if self.user_namespace { " (via user namespace)" } else { "" },
            yn(self.readonly_root),
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
    /// The last few KiB of stderr.
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

/// How the child is confined (decided by the probe).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mode {
    netns: bool,
    userns: bool,
    mountns: bool,
    drop_uid: bool,
    seccomp: bool,
}

/// The sandbox: configuration, verified protections and the concurrency limit.
pub struct Sandbox {
    cfg: SandboxConfig,
    mode: Mode,
    report: SandboxReport,
    permits: Arc<Semaphore>,
    slots: Mutex<Vec<u32>>,
    uid_base: u32,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("cfg", &self.cfg)
            .field("report", &self.report)
            .finish()
    }
}

const PROBE_PY: &str = r#"
import json, os, socket, sys, errno
out = {"uid": os.getuid(), "version": sys.version.split()[0]}
try:
    out["net"] = os.readlink("/proc/self/ns/net")
except OSError as e:
    out["net"] = "error:%s" % e
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM); s.close(); out["inet"] = "ok"
except OSError as e:
    out["inet"] = errno.errorcode.get(e.errno, str(e.errno))
try:
    with open("/proc/self/status") as f:
        out["seccomp"] = [l.split()[1] for l in f if l.startswith("Seccomp:")][0]
except Exception as e:
    out["seccomp"] = "?"
try:
    with open("/tmp/.ppol-probe-%d" % os.getpid(), "w") as f:
        f.write("x")
    os.unlink("/tmp/.ppol-probe-%d" % os.getpid()); out["tmp"] = "writable"
except OSError as e:
    out["tmp"] = errno.errorcode.get(e.errno, str(e.errno))
with open("here.txt", "w") as f:
    f.write("ok")
print(json.dumps(out))
"#;

impl Sandbox {
    /// Resolve the interpreter, probe which protections work on this machine and build the
    /// sandbox. Fails only if Python cannot run at all.
    pub async fn new(cfg: SandboxConfig) -> Result<Sandbox> {
        let mut cfg = cfg;
        cfg.concurrency = cfg.concurrency.clamp(1, MAX_SLOTS as usize);
        let uid_base = uid_block();
        cfg.llm_parallel = cfg.llm_parallel.max(1);
        let (python, _version) = resolve_python(&cfg.python).await?;
        cfg.python = python;
        let root = unsafe { libc::geteuid() } == 0;
        let mut notes = Vec::new();
        let full = Mode {
            netns: cfg.isolate_network,
            userns: !root && (cfg.isolate_network || cfg.readonly_root),
            mountns: cfg.readonly_root,
            drop_uid: root && cfg.drop_privileges,
            seccomp: cfg.seccomp,
        };
        let mut candidates = vec![full];
        if root && (full.netns || full.mountns) {
            candidates.push(Mode {
                userns: true,
                drop_uid: false,
                ..full
            });
        }
        candidates.push(Mode {
            mountns: false,
            ..candidates[candidates.len() - 1]
        });
        candidates.push(Mode {
            netns: false,
            userns: false,
            mountns: false,
            ..full
        });
        candidates.push(Mode {
            netns: false,
            userns: false,
            mountns: false,
            drop_uid: false,
            seccomp: false,
        });
        let host_net = std::fs::read_link("/proc/self/ns/net")
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let mut chosen = None;
        for mode in candidates {
            let mut pythons = vec![cfg.python.clone()];
            if mode.drop_uid && Path::new("/usr/bin/python3").exists() {
                pythons.push(PathBuf::from("/usr/bin/python3"));
            }
            for py in pythons {
                match probe(&cfg, mode, &py, uid_base).await {
                    Ok(v) => {
                        if py != cfg.python {
                            notes.push(format!(
                                "{} is not usable by the unprivileged run uid; using {}",
                                cfg.python.display(),
                                py.display()
                            ));
                            cfg.python = py;
                        }
                        chosen = Some((mode, v));
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(?mode, python = %py.display(), "sandbox probe failed: {e}")
                    }
                }
            }
            if chosen.is_some() {
                break;
            }
        }
        let Some((mode, v)) = chosen else {
            return Err(Error::Sandbox(format!(
                "cannot run {} even without protections",
                cfg.python.display()
            )));
        };
        if mode != full {
            notes.push(format!(
                "fell back from the requested protections: {mode:?}"
            ));
        }
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let namespaces = mode.netns && !s("net").is_empty() && s("net") != host_net;
        let seccomp = mode.seccomp && s("inet") == "EPERM" && s("seccomp") == "2";
        let readonly_root = mode.mountns && s("tmp") == "EROFS";
        let uid = v.get("uid").and_then(Value::as_u64).map(|u| u as u32);
        let uid = if mode.drop_uid && uid != Some(0) {
            uid
        } else {
            None
        };
        if mode.netns && !namespaces {
            notes.push("network namespace requested but not verified".into());
        }
        if !root {
            notes.push(
                "host is not root: RLIMIT_NPROC counts all processes of the host user".into(),
            );
        }
        let report = SandboxReport {
            python: cfg.python.clone(),
            python_version: s("version"),
            namespaces,
            user_namespace: mode.userns,
            readonly_root,
            seccomp,
            uid,
            rlimits: rlimit_table(&cfg, 0)
                .into_iter()
                .map(|(n, _, v)| (n.to_string(), v))
                .collect(),
            notes,
        };
        let slots = (0..cfg.concurrency as u32).rev().collect();
        Ok(Sandbox {
            uid_base,
            permits: Arc::new(Semaphore::new(cfg.concurrency)),
            slots: Mutex::new(slots),
            cfg,
            mode,
            report,
        })
    }

    /// The verified protections.
    pub fn report(&self) -> &SandboxReport {
        &self.report
    }

    /// The configuration in use (with the resolved interpreter).
    pub fn config(&self) -> &SandboxConfig {
        &self.cfg
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
            outcome: Err(Failure {
                stage,
                reason,
                stderr_tail: String::new(),
                program: name.clone(),
            }),
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
            .run_in_slot(&name, &code, task_context, n, llm, seed, uid)
            .await;
        if self.mode.drop_uid {
            kill_uid(uid);
            wait_uid_gone(uid).await;
        }
        self.slots.lock().expect("slot lock").push(slot);
        run.elapsed = started.elapsed();
        run
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_in_slot(
        &self,
        name: &str,
        code: &str,
        task_context: &str,
        n: usize,
        llm: Option<Arc<dyn ChatModel>>,
        seed: u64,
        uid: u32,
    ) -> RawRun {
        let started = Instant::now();
        let failure = |stage, reason: String, stderr_tail: String| Failure {
            stage,
            reason,
            stderr_tail,
            program: name.to_string(),
        };
        let dir = match self.prepare_dir(code, uid) {
            Ok(d) => d,
            Err(e) => {
                return RawRun {
                    outcome: Err(failure(Stage::Spawn, e.to_string(), String::new())),
                    llm_calls: 0,
                    elapsed: started.elapsed(),
                }
            }
        };
        let (host_sock, child_sock) = match socket_pair() {
            Ok(p) => p,
            Err(e) => {
                return RawRun {
                    outcome: Err(failure(Stage::Spawn, e.to_string(), String::new())),
                    llm_calls: 0,
                    elapsed: started.elapsed(),
                }
            }
        };
        let mut cmd = self.command(&self.cfg.python, dir.path(), "harness.py", seed);
        let conf = match ChildConf::new(&self.cfg, self.mode, dir.path(), uid, &child_sock) {
            Ok(c) => c,
            Err(e) => {
                return RawRun {
                    outcome: Err(failure(Stage::Spawn, e.to_string(), String::new())),
                    llm_calls: 0,
                    elapsed: started.elapsed(),
                }
            }
        };
        // SAFETY: the closure only calls async-signal-safe libc functions on data prepared
        // before the fork (no allocation, no locks).
        unsafe {
            cmd.pre_exec(move || conf.apply());
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return RawRun {
                    outcome: Err(failure(
                        Stage::Spawn,
                        format!("cannot start {}: {e}", self.cfg.python.display()),
                        String::new(),
                    )),
                    llm_calls: 0,
                    elapsed: started.elapsed(),
                }
            }
        };
        drop(child_sock);
        let pgid = child.id().map(|p| p as i32);
        // The run's private network namespace identifies all of its processes, even those
        // that left the process group (used for the sweep when no uid of its own is available).
        let run_netns = match (self.mode.netns, pgid) {
            (true, Some(p)) => std::fs::read_link(format!("/proc/{p}/ns/net"))
                .ok()
                .filter(|ns| std::fs::read_link("/proc/self/ns/net").ok().as_ref() != Some(ns)),
            _ => None,
        };
        let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<&'static str>();
        let out_task = tokio::spawn(capture(
            child.stdout.take(),
            self.cfg.output_cap,
            "stdout",
            ev_tx.clone(),
        ));
        let err_task = tokio::spawn(capture(
            child.stderr.take(),
            self.cfg.output_cap,
            "stderr",
            ev_tx,
        ));

        let mut llm_calls = 0usize;
        let verdict = {
            let session = Session {
                cfg: &self.cfg,
                llm,
                seed,
                calls: &mut llm_calls,
            };
            let conversation = session.talk(host_sock, task_context, n);
            tokio::pin!(conversation);
            let deadline = tokio::time::sleep(self.cfg.timeout);
            tokio::pin!(deadline);
            let mut events_open = true;
            loop {
                tokio::select! {
                    v = &mut conversation => break v,
                    ev = ev_rx.recv(), if events_open => match ev {
                        Some(stream) => break Verdict::Fail(Stage::Resource, format!(
                            "{stream} exceeded the {} byte output cap", self.cfg.output_cap)),
                        None => events_open = false,
                    },
                    _ = &mut deadline => break Verdict::Fail(Stage::Timeout, format!(
                        "no result within the {:.1} s timeout; process group killed",
                        self.cfg.timeout.as_secs_f64())),
                }
            }
        };
        if let Some(p) = pgid {
            unsafe {
                libc::kill(-p, libc::SIGKILL);
            }
        }
        if self.mode.drop_uid {
            kill_uid(uid);
        } else if let Some(ns) = run_netns.clone() {
            let _ = tokio::task::spawn_blocking(move || kill_netns(&ns)).await;
        }
        let status = match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
            Ok(Ok(s)) => Some(s),
            _ => {
                let _ = child.start_kill();
                None
            }
        };
        // A descendant that escaped the process group (only possible without a dropped uid)
        // may still hold the pipes open: do not wait for it.
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
                r.stderr_tail = stderr_tail;
                Ok(r)
            }
            Verdict::Fail(stage, reason) => Err(failure(stage, reason, stderr_tail)),
            Verdict::Eof(detail) => {
                use std::os::unix::process::ExitStatusExt;
                let (stage, reason) = match status.and_then(|s| s.signal()) {
                    Some(libc::SIGXCPU) => (
                        Stage::Resource,
                        format!("CPU time limit of {} s exceeded", self.cpu_seconds()),
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
                            status.and_then(|s| s.code()).unwrap_or(-1)
                        ),
                    ),
                };
                Err(failure(stage, reason, stderr_tail))
            }
        };
        drop(dir);
        RawRun {
            outcome,
            llm_calls,
            elapsed: started.elapsed(),
        }
    }

    fn cpu_seconds(&self) -> u64 {
        self.cfg
            .cpu_seconds
            .unwrap_or_else(|| self.cfg.timeout.as_secs_f64().ceil() as u64)
            .max(1)
    }

    fn command(
        &self,
        python: &Path,
        dir: &Path,
        script: &str,
        seed: u64,
    ) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(python);
        cmd.arg("-s")
            .arg("-S")
            .arg("-B")
            .arg(script)
            .current_dir(dir)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .env("LC_ALL", "C.UTF-8")
            .env("PYTHONHASHSEED", "0")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONIOENCODING", "utf-8")
            .env("MALLOC_ARENA_MAX", "2")
            .env("HOME", dir)
            .env("TMPDIR", dir)
            .env("PPOL_SEED", seed.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    fn prepare_dir(&self, code: &str, uid: u32) -> Result<tempfile::TempDir> {
        let root = self
            .cfg
            .work_root
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&root).map_err(|e| Error::io("creating directory", &root, e))?;
        let dir = tempfile::Builder::new()
            .prefix("ppol-gen-")
            .tempdir_in(&root)
            .map_err(|e| Error::io("creating run directory in", &root, e))?;
        for (rel, text) in SUPPORT_FILES
            .iter()
            .copied()
            .chain(std::iter::once((PROGRAM_FILE, code)))
        {
            let path = dir.path().join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| Error::io("creating directory", parent, e))?;
            }
            std::fs::write(&path, text).map_err(|e| Error::io("writing", &path, e))?;
        }
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
                .map_err(|e| Error::io("chmod", dir.path(), e))?;
        }
        if self.mode.drop_uid {
            let c = cstring(dir.path())?;
            // Only the run directory itself becomes the run user's; the support files stay root's.
            if unsafe { libc::chown(c.as_ptr(), uid, uid) } != 0 {
                return Err(Error::io(
                    "chown",
                    dir.path(),
                    std::io::Error::last_os_error(),
                ));
            }
        }
        Ok(dir)
    }
}

async fn resolve_python(python: &Path) -> Result<(PathBuf, String)> {
    let out = tokio::process::Command::new(python)
        .args([
            "-s",
            "-S",
            "-c",
            "import sys; print(sys.executable); print(sys.version.split()[0])",
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| Error::Sandbox(format!("cannot run '{}': {e}", python.display())))?;
    if !out.status.success() {
        return Err(Error::Sandbox(format!(
            "'{}' failed: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let exe = lines.next().unwrap_or("").trim();
    let version = lines.next().unwrap_or("").trim().to_string();
    let exe = if exe.is_empty() {
        python.to_path_buf()
    } else {
        PathBuf::from(exe)
    };
    Ok((exe, version))
}

async fn probe(cfg: &SandboxConfig, mode: Mode, python: &Path, uid: u32) -> Result<Value> {
    let sb = Sandbox {
        cfg: SandboxConfig {
            python: python.to_path_buf(),
            ..cfg.clone()
        },
        mode,
        report: SandboxReport {
            python: python.to_path_buf(),
            python_version: String::new(),
            namespaces: false,
            user_namespace: false,
            readonly_root: false,
            seccomp: false,
            uid: None,
            rlimits: Vec::new(),
            notes: Vec::new(),
        },
        permits: Arc::new(Semaphore::new(1)),
        slots: Mutex::new(vec![0]),
        uid_base: uid,
    };
    let dir = sb.prepare_dir("", uid)?;
    std::fs::write(dir.path().join("probe.py"), PROBE_PY)
        .map_err(|e| Error::io("writing", dir.path().join("probe.py"), e))?;
    let (_host, child_sock) = socket_pair()?;
    let mut cmd = sb.command(python, dir.path(), "probe.py", 0);
    let conf = ChildConf::new(&sb.cfg, mode, dir.path(), uid, &child_sock)?;
    // SAFETY: see `run_in_slot`.
    unsafe {
        cmd.pre_exec(move || conf.apply());
    }
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .map_err(|_| Error::Sandbox("probe timed out".into()))?
        .map_err(|e| Error::Sandbox(format!("probe spawn: {e}")))?;
    if mode.drop_uid {
        kill_uid(uid);
    }
    if !out.status.success() {
        return Err(Error::Sandbox(format!(
            "probe failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let here = std::fs::read_to_string(dir.path().join("here.txt")).unwrap_or_default();
    if here != "ok" {
        return Err(Error::Sandbox(
            "probe could not write its run directory".into(),
        ));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::Sandbox(format!("probe printed garbage: {e}")))
}

/// What the conversation with the harness came to.
enum Verdict {
    Result(RawResult),
    Fail(Stage, String),
    /// The channel closed without a result (detail appended to the exit message).
    Eof(String),
}

struct Session<'a> {
    cfg: &'a SandboxConfig,
    llm: Option<Arc<dyn ChatModel>>,
    seed: u64,
    calls: &'a mut usize,
}

type Pending = std::pin::Pin<Box<dyn std::future::Future<Output = (Value, Vec<Value>)> + Send>>;

impl Session<'_> {
    async fn talk(
        mut self,
        sock: std::os::unix::net::UnixStream,
        task_context: &str,
        n: usize,
    ) -> Verdict {
        let stream = match sock
            .set_nonblocking(true)
            .and_then(|_| tokio::net::UnixStream::from_std(sock))
        {
            Ok(s) => s,
            Err(e) => return Verdict::Fail(Stage::Spawn, format!("channel: {e}")),
        };
        let (rd, mut wr) = stream.into_split();
        let init = json!({
            "type": "init", "program": PROGRAM_FILE, "task_context": task_context,
            "n": n, "seed": self.seed, "llm": self.llm.is_some(),
        });
        if write_frame(&mut wr, &init).await.is_err() {
            return Verdict::Eof(" (could not send init)".into());
        }
        let mut reader = BufReader::new(rd);
        let mut budget = self.cfg.protocol_cap;
        let mut pending: FuturesUnordered<Pending> = FuturesUnordered::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = {
                let mut limited = (&mut reader).take(budget as u64 + 1);
                let fut = limited.read_until(b'\n', &mut line);
                tokio::pin!(fut);
                loop {
                    tokio::select! {
                        r = &mut fut => break r,
                        Some((id, results)) = pending.next(), if !pending.is_empty() => {
                            let frame = json!({"type": "llm_result", "id": id, "results": results});
                            let _ = write_frame(&mut wr, &frame).await;
                        }
                    }
                }
            };
            match read {
                Ok(0) => return Verdict::Eof(String::new()),
                Ok(k) => {
                    if k > budget || line.last() != Some(&b'\n') {
                        if k > budget {
                            return Verdict::Fail(
                                Stage::Resource,
                                format!(
                                    "protocol output exceeded the {} byte cap",
                                    self.cfg.protocol_cap
                                ),
                            );
                        }
                        return Verdict::Eof(" (exited mid-frame)".into());
                    }
                    budget -= k;
                }
                Err(e) => return Verdict::Fail(Stage::Protocol, format!("channel read: {e}")),
            }
            let frame: Value = match serde_json::from_slice(&line) {
                Ok(v) => v,
                Err(e) => {
                    return Verdict::Fail(
                        Stage::Protocol,
                        format!("garbage on the protocol channel ({e}): {}", preview(&line)),
                    )
                }
            };
            match frame.get("type").and_then(Value::as_str) {
                Some("llm") => {
                    let id = frame.get("id").cloned().unwrap_or(Value::Null);
                    let reqs = frame
                        .get("requests")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    pending.push(self.answer(id, reqs));
                }
                Some("result") => return Verdict::Result(parse_result(&frame)),
                Some("error") => {
                    let stage = match frame.get("stage").and_then(Value::as_str) {
                        Some("import") => Stage::Import,
                        Some("contract") => Stage::Contract,
                        Some("resource") => Stage::Resource,
                        _ => Stage::Generate,
                    };
                    let ty = frame
                        .get("error_type")
                        .and_then(Value::as_str)
                        .unwrap_or("Error");
                    let msg = frame.get("message").and_then(Value::as_str).unwrap_or("");
                    let stage = if stage == Stage::Generate
                        && (ty == "BlockingIOError" || msg.contains("File too large"))
                    {
                        Stage::Resource
                    } else {
                        stage
                    };
                    return Verdict::Fail(stage, format!("{ty}: {msg}"));
                }
                other => {
                    return Verdict::Fail(
                        Stage::Protocol,
                        format!("unknown frame type {other:?}: {}", preview(&line)),
                    )
                }
            }
        }
    }

    /// Answer one `llm` frame: budget check, then the model (in parallel, order kept).
    fn answer(&mut self, id: Value, reqs: Vec<Value>) -> Pending {
        let mut jobs = Vec::with_capacity(reqs.len());
        for r in reqs {
            if self.llm.is_none() {
                jobs.push(Err(
                    "no LLM is attached to this run (--llm none)".to_string()
                ));
            } else if *self.calls >= self.cfg.max_llm_calls {
                jobs.push(Err(format!(
                    "LLM call cap of {} per run reached",
                    self.cfg.max_llm_calls
                )));
            } else {
                *self.calls += 1;
                jobs.push(Ok(r));
            }
        }
        let llm = self.llm.clone();
        let seed = self.seed;
        let parallel = self.cfg.llm_parallel;
        Box::pin(async move {
            let results = futures::stream::iter(jobs.into_iter().map(|job| {
                let llm = llm.clone();
                async move {
                    let req = match job {
                        Ok(r) => r,
                        Err(e) => return json!({ "error": e }),
                    };
                    let Some(llm) = llm else {
                        return json!({"error": "no LLM"});
                    };
                    let mut messages = Vec::new();
                    if let Some(sys) = req.get("system").and_then(Value::as_str) {
                        messages.push(Turn::new(Role::System, sys));
                    }
                    let prompt = req.get("prompt").and_then(Value::as_str).unwrap_or("");
                    messages.push(Turn::new(Role::User, prompt));
                    let mut cr = ChatRequest::new(CallRole::Generator, messages);
                    cr.temperature = req
                        .get("temperature")
                        .and_then(Value::as_f64)
                        .map(|t| t as f32);
                    cr.max_tokens = req
                        .get("max_tokens")
                        .and_then(Value::as_u64)
                        .map(|t| t.min(u32::MAX as u64) as u32);
                    cr.seed = Some(seed);
                    match llm.chat(&cr).await {
                        Ok(resp) => json!({ "text": resp.message.content }),
                        Err(e) => json!({ "error": e.to_string() }),
                    }
                }
            }))
            .buffered(parallel)
            .collect::<Vec<_>>()
            .await;
            (id, results)
        })
    }
}

fn parse_result(frame: &Value) -> RawResult {
    RawResult {
        axes: frame
            .get("axes")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
        rows: frame
            .get("rows")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        count: frame.get("count").and_then(Value::as_u64).unwrap_or(0) as usize,
        truncated: frame
            .get("truncated")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        stderr_tail: String::new(),
    }
}

async fn write_frame(wr: &mut tokio::net::unix::OwnedWriteHalf, v: &Value) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(v).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    wr.write_all(&bytes).await?;
    wr.flush().await
}

fn preview(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(&bytes[..bytes.len().min(120)]);
    s.trim().to_string()
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

fn socket_pair() -> Result<(std::os::unix::net::UnixStream, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(Error::Sandbox(format!(
            "socketpair: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    unsafe {
        Ok((
            std::os::unix::net::UnixStream::from_raw_fd(fds[0]),
            OwnedFd::from_raw_fd(fds[1]),
        ))
    }
}

fn cstring(p: &Path) -> Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::Sandbox(format!("path with NUL byte: {}", p.display())))
}

/// Kill every process owned by `uid`, including descendants that escaped the process group
/// with `setsid`. A short-lived helper becomes `uid` and calls `kill(-1, SIGKILL)`, which the
/// kernel applies to every process of that uid at once (a fork racing with it is aborted).
fn kill_uid(uid: u32) {
    // One round suffices: the kernel signals every process of the uid under the task-list
    // lock, and a fork racing with it fails because its parent has a fatal signal pending.
    for _ in 0..1 {
        // SAFETY: the child only calls async-signal-safe functions and `_exit`s.
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(uid) != 0
                    || libc::setuid(uid) != 0
                {
                    libc::_exit(1);
                }
                libc::kill(-1, libc::SIGKILL);
                libc::_exit(0);
            }
            if pid > 0 {
                let mut status = 0;
                while libc::waitpid(pid, &mut status, 0) < 0
                    && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                {
                }
            }
        }
    }
}

/// Killed processes count against RLIMIT_NPROC until they are reaped: wait (briefly) until
/// the uid owns nothing, so the next run in its slot starts with a clean count. Call after the
/// direct child has been reaped.
async fn wait_uid_gone(uid: u32) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let busy = tokio::task::spawn_blocking(move || uid_has_processes(uid))
            .await
            .unwrap_or(false);
        if !busy {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tracing::warn!(
        uid,
        "processes of a sandbox uid still alive 2 s after SIGKILL"
    );
}

/// Kill every process (other than ppol itself) whose network namespace is `ns` — the run's
/// private namespace — a few rounds, to catch forks racing with the sweep.
fn kill_netns(ns: &Path) {
    let me = std::process::id();
    for _ in 0..3 {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        let mut found = false;
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if pid != me && std::fs::read_link(e.path().join("ns/net")).is_ok_and(|l| l == ns) {
                found = true;
                unsafe {
                    libc::kill(pid as i32, libc::SIGKILL);
                }
            }
        }
        if !found {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn uid_has_processes(uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        e.file_name()
            .to_str()
            .is_some_and(|s| s.parse::<u32>().is_ok())
            && std::fs::metadata(e.path()).is_ok_and(|md| md.uid() == uid)
    })
}

fn rlimit_table(
    cfg: &SandboxConfig,
    extra_procs: u64,
) -> Vec<(&'static str, libc::__rlimit_resource_t, u64)> {
    let cpu = cfg
        .cpu_seconds
        .unwrap_or_else(|| cfg.timeout.as_secs_f64().ceil() as u64)
        .max(1);
    vec![
        ("RLIMIT_CPU", libc::RLIMIT_CPU, cpu),
        ("RLIMIT_AS", libc::RLIMIT_AS, cfg.memory_bytes),
        (
            "RLIMIT_NPROC",
            libc::RLIMIT_NPROC,
            cfg.max_processes + extra_procs,
        ),
        ("RLIMIT_FSIZE", libc::RLIMIT_FSIZE, cfg.max_file_bytes),
        (
            "RLIMIT_NOFILE",
            libc::RLIMIT_NOFILE,
            cfg.max_open_files.max(210),
        ),
        ("RLIMIT_CORE", libc::RLIMIT_CORE, 0),
    ]
}

/// Everything the child needs after `fork`, prepared (allocated) before it.
struct ChildConf {
    mode: Mode,
    uid: u32,
    sock_fd: libc::c_int,
    dir: std::ffi::CString,
    limits: Vec<(libc::__rlimit_resource_t, u64)>,
    filter: Vec<libc::sock_filter>,
}

impl ChildConf {
    fn new(cfg: &SandboxConfig, mode: Mode, dir: &Path, uid: u32, sock: &OwnedFd) -> Result<Self> {
        // A dropped uid is used by this run only; otherwise RLIMIT_NPROC counts every task of
        // the host user, so the allowance is added on top of what already runs.
        let extra = if mode.drop_uid { 0 } else { count_own_tasks() };
        Ok(ChildConf {
            mode,
            uid,
            sock_fd: sock.as_raw_fd(),
            dir: cstring(dir)?,
            limits: rlimit_table(cfg, extra)
                .into_iter()
                .map(|(_, r, v)| (r, v))
                .collect(),
            filter: seccomp_filter(),
        })
    }

    /// Runs in the child between `fork` and `exec`: async-signal-safe calls only.
    fn apply(&self) -> std::io::Result<()> {
        let err = std::io::Error::last_os_error;
        unsafe {
            if libc::setpgid(0, 0) != 0 {
                return Err(err());
            }
            if self.mode.netns || self.mode.mountns {
                let mut flags = 0;
                if self.mode.userns {
                    flags |= libc::CLONE_NEWUSER;
                }
                if self.mode.netns {
                    flags |= libc::CLONE_NEWNET;
                }
                if self.mode.mountns {
                    flags |= libc::CLONE_NEWNS;
                }
                if libc::unshare(flags) != 0 {
                    return Err(err());
                }
            }
            if self.mode.mountns {
                let root = c"/".as_ptr();
                if libc::mount(
                    std::ptr::null(),
                    root,
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(err());
                }
                if libc::mount(
                    self.dir.as_ptr(),
                    self.dir.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(err());
                }
                let ro = MountAttr {
                    attr_set: MOUNT_ATTR_RDONLY,
                    attr_clr: 0,
                    propagation: 0,
                    userns_fd: 0,
                };
                if libc::syscall(
                    libc::SYS_mount_setattr,
                    libc::AT_FDCWD,
                    root,
                    AT_RECURSIVE,
                    &ro as *const MountAttr,
                    std::mem::size_of::<MountAttr>(),
                ) != 0
                {
                    return Err(err());
                }
                let rw = MountAttr {
                    attr_set: 0,
                    attr_clr: MOUNT_ATTR_RDONLY,
                    propagation: 0,
                    userns_fd: 0,
                };
                if libc::syscall(
                    libc::SYS_mount_setattr,
                    libc::AT_FDCWD,
                    self.dir.as_ptr(),
                    0,
                    &rw as *const MountAttr,
                    std::mem::size_of::<MountAttr>(),
                ) != 0
                {
                    return Err(err());
                }
                if libc::chdir(self.dir.as_ptr()) != 0 {
                    return Err(err());
                }
            }
            for &(res, v) in &self.limits {
                let lim = libc::rlimit {
                    rlim_cur: v,
                    rlim_max: if res == libc::RLIMIT_CPU { v + 1 } else { v },
                };
                if libc::setrlimit(res, &lim) != 0 {
                    return Err(err());
                }
            }
            if self.mode.drop_uid
                && (libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(self.uid) != 0
                    || libc::setuid(self.uid) != 0)
            {
                return Err(err());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(err());
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(err());
            }
            if self.mode.seccomp {
                let prog = libc::sock_fprog {
                    len: self.filter.len() as u16,
                    filter: self.filter.as_ptr() as *mut libc::sock_filter,
                };
                if libc::prctl(
                    libc::PR_SET_SECCOMP,
                    SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog,
                    0,
                    0,
                ) != 0
                {
                    return Err(err());
                }
            }
            if self.sock_fd == 3 {
                let fl = libc::fcntl(3, libc::F_GETFD);
                if fl < 0 || libc::fcntl(3, libc::F_SETFD, fl & !libc::FD_CLOEXEC) != 0 {
                    return Err(err());
                }
            } else if libc::dup2(self.sock_fd, 3) != 3 {
                return Err(err());
            }
        }
        Ok(())
    }
}

fn count_own_tasks() -> u64 {
    use std::os::unix::fs::MetadataExt;
    let me = unsafe { libc::getuid() };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0u64;
    for e in entries.flatten() {
        if e.file_name()
            .to_str()
            .is_some_and(|s| s.parse::<u32>().is_ok())
        {
            if let Ok(md) = std::fs::metadata(e.path()) {
                if md.uid() == me {
                    n += std::fs::read_dir(e.path().join("task"))
                        .map(|d| d.count() as u64)
                        .unwrap_or(1);
                }
            }
        }
    }
    n
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: libc::c_int = 0x8000;
const SECCOMP_MODE_FILTER: libc::c_int = 2;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// The seccomp-BPF program: foreign-ABI syscalls, `io_uring_setup` and `socket()` of any
/// family but `AF_UNIX` fail with `EPERM`; everything else is allowed.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn seccomp_filter() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let eperm = SECCOMP_RET_ERRNO | libc::EPERM as u32;
    #[cfg(target_arch = "x86_64")]
    let foreign_abi_floor: u32 = 0x4000_0000; // x32 syscalls
    #[cfg(not(target_arch = "x86_64"))]
    let foreign_abi_floor: u32 = u32::MAX;
    vec![
        /* 0 */ ins(LD_W_ABS, 0, 0, 4), // arch
        /* 1 */ ins(JEQ_K, 1, 0, AUDIT_ARCH),
        /* 2 */ ins(RET_K, 0, 0, eperm),
        /* 3 */ ins(LD_W_ABS, 0, 0, 0), // nr
        /* 4 */ ins(JGE_K, 0, 1, foreign_abi_floor),
        /* 5 */ ins(RET_K, 0, 0, eperm),
        /* 6 */ ins(JEQ_K, 0, 1, libc::SYS_io_uring_setup as u32),
        /* 7 */ ins(RET_K, 0, 0, eperm),
        /* 8 */ ins(JEQ_K, 0, 3, libc::SYS_socket as u32),
        /* 9 */ ins(LD_W_ABS, 0, 0, 16), // args[0] (low 32 bits)
        /* 10 */ ins(JEQ_K, 1, 0, libc::AF_UNIX as u32),
        /* 11 */ ins(RET_K, 0, 0, eperm),
        /* 12 */ ins(RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn seccomp_filter() -> Vec<libc::sock_filter> {
    Vec::new()
}
