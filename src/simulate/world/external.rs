//! `external:COMMAND` worlds: any user simulator that speaks ppol's JSONL-over-stdio protocol
//! (`python/ppol_rs/EXTERNAL_PROTOCOL.md`), run as several processes at once.
//!
//! - **Version 1** (the default): one request at a time per process, answers in order. ppol
//!   runs `[world] processes` of them and sends each episode to a free one.
//! - **Version 2** (`[world] protocol = 2`): a `hello` handshake, request ids so answers may come
//!   out of order, up to `max_in_flight` episodes per process, the simulator's own task list,
//!   and reward, termination, usage and the agent's view in the answer.
//!
//! A process that crashes, hangs past `[world] episode_timeout_s` (with nothing else in flight),
//! writes a line that is not the protocol, or answers another request is killed; the episodes
//! it had in flight are recorded as failed with that reason, and the next episode starts a new
//! process. A version-2 request left unanswered fails alone: the process keeps its other
//! episodes, gets no new ones, and is stopped once they are done. The seed sent with an episode
//! is the one its caller derived from (task, persona, trial), so a run does not depend on how
//! many processes play it.
//!
//! Every process starts under a supervisor ([`crate::child::Supervisor`]) and dies with ppol,
//! with everything it forks: see "Processes" in `EXTERNAL_PROTOCOL.md`. Its answers are held to
//! the bounds of ppol's own episodes (`answer`), and what it writes on stderr reaches ppol's
//! stderr with control characters escaped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::{oneshot, Semaphore};

use super::answer::{apply_answer, tasks_of_answer, Envelope};
use super::{TaskList, World, WorldSettings};
use crate::child::Supervisor;
use crate::llm::serve::ModelEndpoint;
use crate::llm::ChatModel;
use crate::persona::Persona;
use crate::simulate::episode::record::{Episode, EpisodeStatus};
use crate::simulate::episode::{EpisodeRunner, Termination};
use crate::{Error, Result};

/// Largest line a simulator may write: a `tasks` answer (an episode's answer is held to
/// [`crate::limits::MAX_EPISODE_BYTES`]). A longer line breaks the protocol and kills the
/// process.
pub const MAX_LINE_BYTES: usize = 64 << 20;
/// Bytes of one line of a simulator's stderr shown; the rest of the line is cut.
const MAX_STDERR_LINE: usize = 8 << 10;
/// Bytes of a simulator process's stderr shown in all (about ten thousand lines of logs); the
/// rest is read and dropped, with one line saying so, so that a simulator flooding its stderr
/// neither floods the terminal nor blocks on a full pipe.
pub const MAX_STDERR_SHOWN: usize = 1 << 20;

/// How a pool of simulator processes is run.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// Processes at once.
    pub processes: usize,
    /// Protocol version (1 or 2).
    pub protocol: u32,
    /// One episode's time limit.
    pub timeout: Duration,
    /// Requests per v2 process at most (the lower of this and the simulator's own limit).
    pub max_in_flight: usize,
    /// Extra environment of the processes.
    pub env: Vec<(String, String)>,
    /// The world's label (`external:...`, `tau2:telecom`).
    pub label: String,
    /// The run's model the simulator reaches through ppol's endpoint, as described in
    /// episodes' `backend` (so that a rerun with another model does not reuse their episodes).
    pub model: Option<String>,
    /// Bytes of each process's stderr shown ([`MAX_STDERR_SHOWN`]; more for a process that
    /// gathers the stderr of several simulators, as the Ray bridge does).
    pub stderr_shown: usize,
}

/// The models a simulator reaches through ppol, by name and without their endpoints
/// (`openai:gpt-4o-mini`, or `user=openai:a, agent=openai:b`): what episodes' `backend` says,
/// so that a rerun with other models does not reuse episodes, while a server restarted on
/// another port does not make them stale.
pub fn model_names(model: &dyn crate::llm::ChatModel) -> String {
    model
        .describe()
        .split(", ")
        .map(|part| part.split('@').next().unwrap_or(part))
        .collect::<Vec<_>>()
        .join(", ")
}

impl PoolOptions {
    /// What episodes played with these options record as their `backend`: the world's label,
    /// and the run's models by name when the simulator reaches them.
    pub fn backend(&self) -> String {
        match &self.model {
            Some(m) => format!("{} with {m}", self.label),
            None => self.label.clone(),
        }
    }

    /// Options from `[world]` for a command.
    pub fn from_settings(s: &WorldSettings, argv: Vec<String>) -> Self {
        PoolOptions {
            label: format!("external:{}", super::join_command(&argv)),
            argv,
            processes: s.processes,
            protocol: s.protocol,
            timeout: crate::limits::duration(s.episode_timeout_s),
            max_in_flight: s.max_in_flight,
            env: Vec::new(),
            model: None,
            stderr_shown: MAX_STDERR_SHOWN,
        }
    }
}

/// What a v2 simulator said of itself.
#[derive(Debug, Clone, Default)]
pub struct Hello {
    /// Its name.
    pub name: Option<String>,
    /// The domain it plays.
    pub domain: Option<String>,
    /// Episodes it takes at once.
    pub max_in_flight: usize,
    /// Whether it lists its own tasks.
    pub tasks: bool,
}

/// An answer's line, or why the request failed.
type Answer = std::result::Result<Vec<u8>, String>;

/// One running simulator process (under its supervisor).
struct Proc {
    stdin: tokio::sync::Mutex<ChildStdin>,
    pending: Mutex<HashMap<String, oneshot::Sender<Answer>>>,
    /// v1: the request ids in the order sent (answers come in that order).
    order: Mutex<std::collections::VecDeque<String>>,
    dead: AtomicBool,
    /// Takes no new request: one of its requests hung while others were in flight.
    retiring: AtomicBool,
    /// The supervisor's pid.
    supervisor: u32,
    child: Mutex<Option<tokio::process::Child>>,
    next: AtomicU64,
    protocol: u32,
}

impl Proc {
    /// Stop the process and everything it started, and fail every pending request with `why`.
    fn kill(&self, why: &str) {
        if !self.dead.swap(true, Ordering::SeqCst) {
            Supervisor::stop(self.supervisor);
        }
        if let Some(mut c) = self.child.lock().expect("child lock").take() {
            // reap in the background; a supervisor that does not leave (it takes up to 5 s to
            // kill a tree that resists) is killed with its group
            let pid = self.supervisor;
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    if tokio::time::timeout(Duration::from_secs(10), c.wait())
                        .await
                        .is_err()
                    {
                        crate::child::kill_group(pid);
                        let _ = c.kill().await;
                    }
                });
            }
        }
        let pending: Vec<_> = self.pending.lock().expect("pending lock").drain().collect();
        for (_, tx) in pending {
            let _ = tx.send(Err(why.to_string()));
        }
    }

    fn take_pending(&self, key: &str) -> Option<oneshot::Sender<Answer>> {
        self.pending.lock().expect("pending lock").remove(key)
    }

    fn in_flight(&self) -> usize {
        self.pending.lock().expect("pending lock").len()
    }

    /// Whether new requests may go to it.
    fn usable(&self) -> bool {
        !self.dead.load(Ordering::SeqCst) && !self.retiring.load(Ordering::SeqCst)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.dead.swap(true, Ordering::SeqCst) {
            Supervisor::stop(self.supervisor);
        }
    }
}

/// A pool of simulator processes speaking the protocol.
pub struct Pool {
    opts: PoolOptions,
    slots: Vec<tokio::sync::Mutex<Option<Arc<Proc>>>>,
    in_flight: Mutex<Vec<usize>>,
    permits: Semaphore,
    per_process: AtomicUsize,
    hello: Mutex<Option<Hello>>,
    /// Every process started and not yet known dead (retiring ones included).
    all: Mutex<Vec<Arc<Proc>>>,
    /// Processes started so far (restarts included).
    pub started: AtomicU64,
    /// Most processes alive at once.
    pub max_alive: AtomicUsize,
    alive: Arc<AtomicUsize>,
}

impl Pool {
    /// A pool; no process starts until it is needed.
    pub fn new(opts: PoolOptions) -> Arc<Self> {
        let n = opts.processes.max(1);
        Arc::new(Pool {
            slots: (0..n).map(|_| tokio::sync::Mutex::new(None)).collect(),
            in_flight: Mutex::new(vec![0; n]),
            permits: Semaphore::new(n),
            per_process: AtomicUsize::new(1),
            hello: Mutex::new(None),
            all: Mutex::new(Vec::new()),
            started: AtomicU64::new(0),
            max_alive: AtomicUsize::new(0),
            alive: Arc::new(AtomicUsize::new(0)),
            opts,
        })
    }

    /// The options.
    pub fn options(&self) -> &PoolOptions {
        &self.opts
    }

    /// What the (first) v2 process said of itself.
    pub fn hello(&self) -> Option<Hello> {
        self.hello.lock().expect("hello lock").clone()
    }

    /// Start process 0 now (v2: to learn its limits and tasks); returns its hello.
    pub async fn start_first(self: &Arc<Self>) -> Result<Option<Hello>> {
        let mut slot = self.slots[0].lock().await;
        let p = self.spawn().await.map_err(|m| self.error(m))?;
        *slot = Some(p);
        Ok(self.hello())
    }

    fn error(&self, message: String) -> Error {
        Error::Environment {
            domain: self.opts.label.clone(),
            message,
        }
    }

    async fn spawn(self: &Arc<Self>) -> std::result::Result<Arc<Proc>, String> {
        let argv = &self.opts.argv;
        let sup = Supervisor::new();
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (k, v) in &self.opts.env {
            cmd.env(k, v);
        }
        // SAFETY: `Supervisor::enter` runs between fork and exec and only makes raw system
        // calls on data prepared above (see `crate::child`).
        unsafe {
            cmd.pre_exec(move || sup.enter());
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the simulator {:?}: {e}", argv[0]))?;
        let supervisor = child.id().unwrap_or(0);
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(forward_stderr(stderr, self.opts.stderr_shown));
        }
        self.started.fetch_add(1, Ordering::SeqCst);
        let alive = self.alive.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_alive.fetch_max(alive, Ordering::SeqCst);
        let proc = Arc::new(Proc {
            stdin: tokio::sync::Mutex::new(stdin),
            pending: Mutex::new(HashMap::new()),
            order: Mutex::new(Default::default()),
            dead: AtomicBool::new(false),
            retiring: AtomicBool::new(false),
            supervisor,
            child: Mutex::new(Some(child)),
            next: AtomicU64::new(0),
            protocol: self.opts.protocol,
        });
        {
            let mut all = self.all.lock().expect("process list lock");
            all.retain(|p| !p.dead.load(Ordering::SeqCst));
            all.push(proc.clone());
        }
        let (hello_tx, hello_rx) = oneshot::channel();
        if self.opts.protocol >= 2 {
            proc.pending
                .lock()
                .expect("pending lock")
                .insert("hello".into(), hello_tx);
        }
        let reader_proc = proc.clone();
        let alive_count = self.alive.clone();
        tokio::spawn(async move {
            read_answers(stdout, &reader_proc).await;
            alive_count.fetch_sub(1, Ordering::SeqCst);
        });
        if self.opts.protocol >= 2 {
            let hello = json!({"type": "hello", "protocol": 2, "ppol": env!("CARGO_PKG_VERSION")});
            if let Err(e) = write_line(&proc, &hello).await {
                proc.kill(&e);
                return Err(e);
            }
            let answer = tokio::time::timeout(self.opts.timeout, hello_rx).await;
            let line = match answer {
                Ok(Ok(Ok(line))) => line,
                Ok(Ok(Err(e))) => return Err(format!("during the hello handshake: {e}")),
                Ok(Err(_)) => return Err("the simulator ended during the hello handshake".into()),
                Err(_) => {
                    proc.kill("no hello");
                    return Err(format!(
                        "no hello answer within {:?} (is it a version-2 simulator? a \
                         version-1 one needs [world] protocol = 1)",
                        self.opts.timeout
                    ));
                }
            };
            let v: Value = serde_json::from_slice(&line).map_err(|e| e.to_string())?;
            let hello = parse_hello(&v).inspect_err(|e| proc.kill(e))?;
            let k = hello.max_in_flight.min(self.opts.max_in_flight).max(1);
            let first = self.hello.lock().expect("hello lock").is_none();
            if first {
                *self.hello.lock().expect("hello lock") = Some(hello);
                let old = self.per_process.swap(k, Ordering::SeqCst);
                if k > old {
                    self.permits.add_permits((k - old) * self.slots.len());
                }
            }
        }
        Ok(proc)
    }

    /// Send one request and wait for its answer's line (the request's `request_id` is set here
    /// for v2). Errors are the reason the episode failed.
    pub async fn request(self: &Arc<Self>, mut req: Map<String, Value>, key: &str) -> Answer {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| "the world is shut down".to_string())?;
        let k = self.per_process.load(Ordering::SeqCst);
        let idx = {
            let mut f = self.in_flight.lock().expect("in-flight lock");
            let i = (0..f.len())
                .filter(|&i| f[i] < k)
                .min_by_key(|&i| (f[i], i))
                .ok_or("no free simulator process (internal error)")?;
            f[i] += 1;
            i
        };
        let result = self.request_on(idx, &mut req, key).await;
        self.in_flight.lock().expect("in-flight lock")[idx] -= 1;
        result
    }

    /// The live process of slot `idx`, started when there is none (or it retires).
    async fn proc_of_slot(self: &Arc<Self>, idx: usize) -> std::result::Result<Arc<Proc>, String> {
        let mut slot = self.slots[idx].lock().await;
        match slot.as_ref() {
            Some(p) if p.usable() => Ok(p.clone()),
            _ => {
                let p = self.spawn().await?;
                *slot = Some(p.clone());
                Ok(p)
            }
        }
    }

    async fn request_on(
        self: &Arc<Self>,
        idx: usize,
        req: &mut Map<String, Value>,
        key: &str,
    ) -> Answer {
        let proc = self.proc_of_slot(idx).await?;
        let rid = if proc.protocol >= 2 {
            let rid = format!("r{}", proc.next.fetch_add(1, Ordering::SeqCst));
            req.insert("request_id".into(), Value::String(rid.clone()));
            rid
        } else {
            key.to_string()
        };
        let (tx, rx) = oneshot::channel();
        proc.pending
            .lock()
            .expect("pending lock")
            .insert(rid.clone(), tx);
        if proc.protocol < 2 {
            proc.order
                .lock()
                .expect("order lock")
                .push_back(rid.clone());
        }
        if let Err(e) = write_line(&proc, &Value::Object(req.clone())).await {
            proc.kill(&e);
            return Err(e);
        }
        let answer = match tokio::time::timeout(self.opts.timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err("the simulator process went away".into()),
            Err(_) => Err(self.hung(&proc, &rid, key)),
        };
        if proc.retiring.load(Ordering::SeqCst) && proc.in_flight() == 0 {
            proc.kill("retired after a request of it hung");
        }
        answer
    }

    /// A request that got no answer in time: the reason it failed. Alone on its process, the
    /// process is killed (and restarted for the next episode); with other requests in flight
    /// (v2), only this one fails and the process retires once the others are answered.
    fn hung(&self, proc: &Proc, rid: &str, key: &str) -> String {
        let secs = self.opts.timeout.as_secs_f64();
        if proc.take_pending(rid).is_none() {
            // answered at the last moment, or the process already died
            return format!("no answer within {secs} s ([world] episode_timeout_s)");
        }
        let others = proc.in_flight();
        if proc.protocol >= 2 && others > 0 {
            proc.retiring.store(true, Ordering::SeqCst);
            format!(
                "no answer within {secs} s ([world] episode_timeout_s): this episode failed; \
                 the simulator process keeps its {others} other episode(s) in flight, gets no \
                 new ones and is stopped once they are answered"
            )
        } else {
            proc.kill(&format!("killed because request {key} hung"));
            format!(
                "no answer within {secs} s ([world] episode_timeout_s): the simulator process \
                 was killed and is restarted for the next episode"
            )
        }
    }

    /// v2: ask process 0 for the simulator's task list.
    pub async fn list_tasks(self: &Arc<Self>) -> Result<Vec<super::WorldTask>> {
        let proc = self.proc_of_slot(0).await.map_err(|m| self.error(m))?;
        let (tx, rx) = oneshot::channel();
        proc.pending
            .lock()
            .expect("pending lock")
            .insert("list_tasks".into(), tx);
        write_line(&proc, &json!({"type": "list_tasks"}))
            .await
            .map_err(|m| self.error(m))?;
        let line = match tokio::time::timeout(self.opts.timeout, rx).await {
            Ok(Ok(Ok(line))) => line,
            Ok(Ok(Err(e))) => return Err(self.error(format!("list_tasks: {e}"))),
            _ => {
                proc.kill("list_tasks unanswered");
                return Err(self.error("list_tasks: no answer".into()));
            }
        };
        tasks_of_answer(&line).map_err(|m| self.error(format!("list_tasks: {m}")))
    }

    /// Send `shutdown` to every process, give them a moment, then stop what is left (with
    /// everything it started).
    pub async fn shutdown(&self) {
        for s in &self.slots {
            s.lock().await.take();
        }
        let procs: Vec<Arc<Proc>> = std::mem::take(&mut *self.all.lock().expect("list lock"));
        for p in &procs {
            if !p.dead.load(Ordering::SeqCst) {
                let _ = write_line(p, &json!({"type": "shutdown"})).await;
                let mut stdin = p.stdin.lock().await;
                let _ = stdin.shutdown().await;
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        for p in &procs {
            let child = p.child.lock().expect("child lock").take();
            if let Some(mut c) = child {
                if tokio::time::timeout_at(deadline, c.wait()).await.is_err() {
                    *p.child.lock().expect("child lock") = Some(c);
                    p.kill("shut down");
                } else {
                    p.dead.store(true, Ordering::SeqCst);
                }
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let procs = match self.all.lock() {
            Ok(mut all) => std::mem::take(&mut *all),
            Err(_) => return,
        };
        for p in procs {
            p.kill("ppol is done");
        }
    }
}

async fn write_line(proc: &Proc, msg: &Value) -> std::result::Result<(), String> {
    let mut line = serde_json::to_string(msg).expect("serialisable");
    line.push('\n');
    let mut stdin = proc.stdin.lock().await;
    stdin
        .write_all(line.as_bytes())
        .await
        .and(stdin.flush().await)
        .map_err(|e| format!("the simulator closed its stdin ({e}): it exited or crashed"))
}

/// Read one line of at most `cap` bytes; `Ok(None)` at end of output.
async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::result::Result<Option<()>, String> {
    buf.clear();
    loop {
        let chunk = r.fill_buf().await.map_err(|e| e.to_string())?;
        if chunk.is_empty() {
            return Ok(if buf.is_empty() { None } else { Some(()) });
        }
        let (take, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if buf.len() + take > cap {
            return Err(format!(
                "a stdout line longer than {} (the protocol's limit)",
                crate::limits::bytes(cap as u64)
            ));
        }
        buf.extend_from_slice(&chunk[..take]);
        r.consume(take);
        if done {
            return Ok(Some(()));
        }
    }
}

/// A simulator's stderr to ppol's, line by line, control characters escaped (as sandbox
/// stderr is), each line cut at [`MAX_STDERR_LINE`] bytes, at most `limit` bytes shown (the
/// rest read and dropped).
async fn forward_stderr(stderr: ChildStderr, limit: usize) {
    let mut r = BufReader::new(stderr);
    let mut line: Vec<u8> = Vec::new();
    let mut cut = 0usize;
    let mut shown = 0usize;
    loop {
        let chunk = match r.fill_buf().await {
            Ok(c) if !c.is_empty() => c,
            _ => break,
        };
        if shown >= limit {
            // past the limit: read and dropped
            let n = chunk.len();
            r.consume(n);
            continue;
        }
        let (take, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let room = MAX_STDERR_LINE.saturating_sub(line.len()).min(take);
        line.extend_from_slice(&chunk[..room]);
        cut += take - room;
        r.consume(take);
        if done {
            shown += line.len();
            show_stderr_line(&line, cut);
            line.clear();
            cut = 0;
            if shown >= limit {
                eprintln!(
                    "ppol: a simulator process wrote more than {} MiB on stderr; the rest of \
                     its stderr is not shown (run its command by hand to read it)",
                    limit >> 20
                );
            }
        }
    }
    if !line.is_empty() && shown < limit {
        show_stderr_line(&line, cut);
    }
}

fn show_stderr_line(line: &[u8], cut: usize) {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches(['\n', '\r']);
    let shown = crate::io::printable(text);
    if cut > 0 {
        eprintln!("{shown}... ({cut} more bytes of this line cut)");
    } else {
        eprintln!("{shown}");
    }
}

/// The reader of one process: route each answer to its request; anything that is not the
/// protocol kills the process with the reason.
async fn read_answers(stdout: ChildStdout, proc: &Proc) {
    let mut r = BufReader::new(stdout);
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    loop {
        let got = read_line_bounded(&mut r, &mut buf, MAX_LINE_BYTES).await;
        line_no += 1;
        let at = format!("stdout line {line_no}");
        match got {
            Err(e) => return proc.kill(&format!("{at}: {e}")),
            Ok(None) => {
                let child = proc.child.lock().expect("child lock").take();
                let status = match child {
                    Some(mut c) => {
                        let s = tokio::time::timeout(Duration::from_secs(2), c.wait()).await;
                        *proc.child.lock().expect("child lock") = Some(c);
                        match s {
                            Ok(Ok(status)) => status.to_string(),
                            _ => "still running".to_string(),
                        }
                    }
                    None => "killed".to_string(),
                };
                return proc.kill(&format!(
                    "the simulator ended its output ({status}) without answering"
                ));
            }
            Ok(Some(())) => {}
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let shown = || {
            let text = String::from_utf8_lossy(&buf[..buf.len().min(400)]);
            crate::io::printable(text.trim().chars().take(200).collect::<String>().as_str())
                .into_owned()
        };
        let envelope = match Envelope::parse(&buf) {
            Ok(e) => e,
            Err(why) => return proc.kill(&format!("{at} {why}: {}", shown())),
        };
        let kind = envelope.kind();
        let key = if proc.protocol >= 2 {
            match kind.as_str() {
                "hello" => "hello".to_string(),
                "tasks" => "list_tasks".to_string(),
                _ => match envelope.request_id() {
                    Some(r) => r,
                    None => {
                        return proc.kill(&format!(
                            "{at}: a version-2 answer without request_id: {}",
                            shown()
                        ))
                    }
                },
            }
        } else {
            let expected = proc.order.lock().expect("order lock").pop_front();
            match expected {
                Some(id) => {
                    let got = envelope.id();
                    if got != id {
                        return proc.kill(&format!(
                            "{at} answers id '{}' while request '{id}' is pending (a \
                             version-1 simulator answers in request order)",
                            crate::io::printable(&got)
                        ));
                    }
                    id
                }
                None => {
                    return proc.kill(&format!("{at}: an answer nobody asked for: {}", shown()))
                }
            }
        };
        match proc.take_pending(&key) {
            Some(tx) => {
                // the line goes to its request whole; this reader starts a fresh buffer
                let _ = tx.send(Ok(std::mem::take(&mut buf)));
            }
            None if proc.protocol >= 2 => {
                // the request timed out already, or an id nobody sent
                tracing::warn!(
                    "{at}: an answer for request '{}', which is not pending",
                    crate::io::printable(&key)
                );
            }
            None => {}
        }
        if buf.capacity() > 1 << 20 {
            buf = Vec::new();
        }
    }
}

fn parse_hello(v: &Value) -> std::result::Result<Hello, String> {
    if v.get("type").and_then(Value::as_str) != Some("hello") {
        return Err(format!("expected a hello answer, got {v}"));
    }
    if let Some(why) = v.get("error").and_then(Value::as_str) {
        return Err(format!("the simulator cannot start: {why}"));
    }
    match v.get("protocol").and_then(Value::as_u64) {
        Some(2) => {}
        other => {
            return Err(format!(
                "the simulator speaks protocol {other:?}; ppol asked for 2"
            ))
        }
    }
    let k = match v.get("max_in_flight") {
        None | Some(Value::Null) => 1,
        Some(x) => match x.as_u64() {
            Some(k) if (1..=super::MAX_IN_FLIGHT as u64).contains(&k) => k as usize,
            _ => {
                return Err(format!(
                    "hello: max_in_flight must be an integer in 1..={}, got {x}",
                    super::MAX_IN_FLIGHT
                ))
            }
        },
    };
    Ok(Hello {
        name: v.get("name").and_then(Value::as_str).map(str::to_string),
        domain: v.get("domain").and_then(Value::as_str).map(str::to_string),
        max_in_flight: k,
        tasks: v.get("tasks").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// The executable a command's first word names (a path, or a name looked up in `PATH`), or
/// why there is none: checked before anything starts, so that a wrong command is one error.
pub fn find_program(name: &str) -> std::result::Result<std::path::PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let shown = crate::io::printable(name);
    if name.contains('/') {
        let p = std::path::PathBuf::from(name);
        return match std::fs::metadata(&p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(format!("'{shown}': no such file"))
            }
            _ if runnable(&p) => Ok(p),
            _ => Err(format!("'{shown}' is not an executable file")),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| runnable(p))
        .ok_or_else(|| format!("'{shown}' is not found in PATH"))
}

/// A world of external simulator processes.
pub struct ExternalWorld {
    pool: Arc<Pool>,
    tasks: TaskList,
    domain: String,
    /// The endpoint simulators reach the run's model through (kept alive with the world).
    _endpoint: Option<ModelEndpoint>,
}

impl ExternalWorld {
    /// Open the world: offer the run's model on a local endpoint (when there is one), start
    /// the first v2 process for its limits (and its tasks when no task list is given: listed
    /// tasks without a split get a seeded one, `test_fraction` of them `test`).
    pub async fn open(
        mut opts: PoolOptions,
        tasks: Option<TaskList>,
        model: Option<Arc<dyn ChatModel>>,
        split_seed: u64,
        test_fraction: f64,
    ) -> Result<Arc<dyn World>> {
        find_program(&opts.argv[0]).map_err(|m| {
            Error::config("run.world", format!("{}: cannot start: {m}", opts.label))
        })?;
        let endpoint = match model {
            Some(m) => {
                opts.model.get_or_insert_with(|| model_names(m.as_ref()));
                let ep = ModelEndpoint::start(m).await?;
                opts.env.extend(ep.env());
                Some(ep)
            }
            None => None,
        };
        let pool = Pool::new(opts);
        let mut domain = "external".to_string();
        let tasks = if pool.options().protocol >= 2 {
            let hello = pool.start_first().await?.unwrap_or_default();
            if let Some(d) = &hello.domain {
                domain = d.clone();
            }
            match tasks {
                Some(t) => t,
                None if hello.tasks => {
                    TaskList::new(pool.list_tasks().await?, test_fraction, split_seed)
                }
                None => {
                    return Err(Error::config(
                        "world.task_file",
                        format!(
                            "the simulator of {} does not list its tasks (hello: tasks is \
                             not true): give --task-file FILE",
                            pool.options().label
                        ),
                    ))
                }
            }
        } else {
            tasks.expect("a v1 world is opened with a task file")
        };
        if tasks.all().is_empty() {
            return Err(Error::config(
                "world.task_file",
                format!("{} has no tasks", pool.options().label),
            ));
        }
        Ok(Arc::new(ExternalWorld {
            pool,
            tasks,
            domain,
            _endpoint: endpoint,
        }))
    }

    /// The pool (for counters).
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }
}

#[async_trait]
impl World for ExternalWorld {
    fn label(&self) -> String {
        self.pool.options().label.clone()
    }

    fn domain(&self) -> String {
        self.domain.clone()
    }

    fn tasks(&self) -> &TaskList {
        &self.tasks
    }

    fn backend(&self) -> String {
        self.pool.options().backend()
    }

    fn runner(&self, max_turns: usize) -> Arc<dyn EpisodeRunner> {
        Arc::new(ExternalRunner {
            pool: self.pool.clone(),
            tasks: self.tasks.clone(),
            domain: self.domain.clone(),
            max_turns,
        })
    }

    async fn shutdown(&self) {
        self.pool.shutdown().await;
    }
}

/// Plays episodes of an external world with a turn limit.
pub struct ExternalRunner {
    pool: Arc<Pool>,
    tasks: TaskList,
    domain: String,
    max_turns: usize,
}

impl ExternalRunner {
    fn record(&self, task_id: &str, persona: Option<&Persona>, trial: u32, seed: u64) -> Episode {
        let mut e = Episode::failed(
            task_id,
            persona,
            trial,
            seed,
            &self.domain,
            &self.pool.options().backend(),
            String::new(),
        );
        e.error = None;
        e
    }
}

/// The episode request of the protocol for the episode `e` (its id, task, seed and trial).
pub fn episode_request(
    protocol: u32,
    e: &Episode,
    context: &str,
    persona: Option<&Persona>,
    max_turns: usize,
) -> Map<String, Value> {
    let (id, task_id, seed, trial) = (&e.id, &e.task_id, e.seed, e.trial);
    let persona_v = match persona {
        Some(p) => serde_json::to_value(p).expect("serialisable"),
        None => {
            json!({"task_id": task_id, "persona_id": "none", "description": "", "axis_placement": {}, "text": ""})
        }
    };
    let block = persona
        .filter(|p| !p.text.trim().is_empty())
        .map(|p| crate::persona::persona_block(&p.text))
        .unwrap_or_default();
    let mut m = Map::new();
    m.insert("type".into(), json!("episode"));
    m.insert("protocol".into(), json!(protocol));
    m.insert("id".into(), json!(id));
    m.insert("task_id".into(), json!(task_id));
    m.insert("task_context".into(), json!(context));
    m.insert("persona".into(), persona_v);
    m.insert("persona_block".into(), json!(block));
    m.insert("seed".into(), json!(seed));
    m.insert("trial".into(), json!(trial));
    if protocol >= 2 {
        m.insert("max_turns".into(), json!(max_turns));
    }
    m
}

#[async_trait]
impl EpisodeRunner for ExternalRunner {
    async fn run(
        &self,
        task_id: &str,
        persona: Option<&Persona>,
        trial: u32,
        seed: u64,
    ) -> Episode {
        let mut e = self.record(task_id, persona, trial, seed);
        let Some(task) = self.tasks.get(task_id) else {
            e.error = Some(format!("no task with id '{task_id}' in this world"));
            return e;
        };
        let req = episode_request(
            self.pool.options().protocol,
            &e,
            &task.context,
            persona,
            self.max_turns,
        );
        match self.pool.request(req, &e.id).await {
            Ok(line) => {
                if let Err(why) = apply_answer(&mut e, &line, self.max_turns) {
                    e.status = EpisodeStatus::Failed;
                    e.termination = Termination::Error;
                    e.error = Some(why);
                }
            }
            Err(why) => e.error = Some(why),
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_is_checked() {
        let h = parse_hello(
            &json!({"type": "hello", "protocol": 2, "max_in_flight": 3, "tasks": true}),
        )
        .unwrap();
        assert_eq!((h.max_in_flight, h.tasks), (3, true));
        assert!(parse_hello(&json!({"type": "hello", "protocol": 1})).is_err());
        assert!(parse_hello(&json!({"type": "hello", "protocol": 2, "max_in_flight": 0})).is_err());
        assert!(parse_hello(&json!({"type": "dialogue"})).is_err());
        let e =
            parse_hello(&json!({"type": "hello", "protocol": 2, "error": "no ray"})).unwrap_err();
        assert!(e.contains("cannot start: no ray"), "{e}");
    }

    #[test]
    fn programs_are_found_before_anything_starts() {
        assert!(find_program("sh").is_ok());
        let e = find_program("/nonexistent/sim").unwrap_err();
        assert!(
            e.contains("/nonexistent/sim") && e.contains("no such file"),
            "{e}"
        );
        let e = find_program("no-such-simulator-ppol").unwrap_err();
        assert!(e.contains("PATH"), "{e}");
        let e = find_program("/").unwrap_err();
        assert!(e.contains("not an executable file"), "{e}");
    }
}
