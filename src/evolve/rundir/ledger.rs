//! The LLM cost ledger of a run (`<run>/costs.jsonl`): money and tokens that survive kill -9.
//!
//! Every process of a run that has an LLM client appends one line when it starts (the run's
//! totals it carries over from earlier processes) and one after every LLM call it makes (the
//! run's totals at that moment), each written whole and synced. Lines are cumulative per role,
//! so the last complete line is the run's total so far, whatever killed the process before:
//!
//! ```text
//! {"process":1,"pid":4242,"time":"...","at":"start","roles":{}}
//! {"process":1,"pid":4242,"time":"...","at":"call","roles":{"user":{"calls":1,...}}}
//! {"process":2,"pid":4300,"time":"...","at":"start","roles":{"user":{"calls":1,...}}}
//! ```
//!
//! A resumed process seeds its client with the run's totals ([`LlmClient::add_prior`]), so the
//! budget caps the run, not each process. The totals are the larger, role by role and counter
//! by counter, of the ledger's last line, the checkpoint's `cost` and the costs the run log
//! recorded ([`recover`]): all are snapshots of the same growing counters. What each process
//! spent is its last line minus its start line ([`process_shares`]).
//!
//! A request in flight when the process dies is paid to the provider but its answer (and so
//! its usage) never reaches ppol: it cannot be counted. Everything answered is.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::evolve::rundir::runlog::{self, Event, ProcessShare};
use crate::evolve::rundir::RunDir;
use crate::llm::client::{Accounting, LlmClient, RoleAccounting};
use crate::llm::{CallRole, ChatModel, ChatRequest, ChatResponse};
use crate::{Error, Result};

/// Per-role counters.
pub type Roles = BTreeMap<CallRole, RoleAccounting>;

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// Which process of the run (1 = `ppol evolve`, then one more per `ppol resume`).
    pub process: u32,
    /// Its pid.
    pub pid: u32,
    /// RFC 3339 UTC time.
    pub time: String,
    /// `start` (the totals carried over) or `call` (after an LLM call).
    pub at: String,
    /// The run's totals per role at that moment.
    pub roles: Roles,
}

/// The ledger file of a run.
pub fn path(dir: &RunDir) -> PathBuf {
    dir.join("costs.jsonl")
}

/// Every complete line of a ledger (none when the file does not exist). A torn last line, from
/// a kill mid-write, is dropped; any other bad line is an error naming it.
pub fn read(path: &Path) -> Result<Vec<Line>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = crate::io::read_to_string(path)?;
    let n = text.lines().count();
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Line>(l) {
            Ok(line) => out.push(line),
            Err(_) if i + 1 == n && !text.ends_with('\n') => break,
            Err(e) => {
                return Err(Error::parse(
                    path,
                    format!("line {}", i + 1),
                    format!("bad cost-ledger line: {e}"),
                ))
            }
        }
    }
    Ok(out)
}

/// The larger of two snapshots, counter by counter.
pub fn max_roles(a: &Roles, b: &Roles) -> Roles {
    let mut out = a.clone();
    for (role, y) in b {
        let x = out.entry(*role).or_default();
        x.calls = x.calls.max(y.calls);
        x.cache_hits = x.cache_hits.max(y.cache_hits);
        x.attempts = x.attempts.max(y.attempts);
        x.retries = x.retries.max(y.retries);
        x.failures = x.failures.max(y.failures);
        x.budget_refusals = x.budget_refusals.max(y.budget_refusals);
        x.prompt_tokens = x.prompt_tokens.max(y.prompt_tokens);
        x.completion_tokens = x.completion_tokens.max(y.completion_tokens);
        x.usd = x.usd.max(y.usd);
        x.latency_s = x.latency_s.max(y.latency_s);
    }
    out
}

/// Sum over roles.
pub fn total(roles: &Roles) -> RoleAccounting {
    let mut t = RoleAccounting::default();
    for r in roles.values() {
        t.add(r);
    }
    t
}

/// The per-role counters of a cost summary written by a run (an [`Accounting`] as JSON), if it
/// has them.
fn roles_of(cost: &Value) -> Option<Roles> {
    serde_json::from_value::<Accounting>(cost.clone())
        .ok()
        .map(|a| a.roles)
}

/// The run's LLM totals so far: the larger, counter by counter, of the ledger's last line, the
/// checkpoint's `cost` and every cost the run log recorded (read the log before it is cut back
/// to the checkpoint, so what was spent after the last commit is kept).
pub fn recover(dir: &RunDir) -> Result<Roles> {
    let mut roles = read(&path(dir))?
        .last()
        .map(|l| l.roles.clone())
        .unwrap_or_default();
    if let Some(v) = dir.read_checkpoint::<Value>()? {
        if let Some(r) = v.get("cost").and_then(roles_of) {
            roles = max_roles(&roles, &r);
        }
    }
    if dir.log_path().exists() {
        for r in runlog::read(&dir.log_path())? {
            let cost = match &r.event {
                Event::CandidateEvaluated { cost, .. }
                | Event::CandidateStopped { cost, .. }
                | Event::RunStopped { cost, .. } => cost,
                _ => continue,
            };
            if let Some(r) = roles_of(&Value::Object(cost.clone().into_iter().collect())) {
                roles = max_roles(&roles, &r);
            }
        }
    }
    Ok(roles)
}

/// Before a resume cuts the run log back to its checkpoint: when the log (or the checkpoint)
/// recorded more spending than the ledger's last line — a ledger lost or written by an older
/// ppol — append a `recovered` line with those totals, attributed to the last process, so the
/// cut loses no money.
pub fn absorb(dir: &RunDir) -> Result<()> {
    let path = path(dir);
    let lines = read(&path)?;
    let last = lines.last().map(|l| l.roles.clone()).unwrap_or_default();
    let all = recover(dir)?;
    if all == last || all.is_empty() {
        return Ok(());
    }
    let line = Line {
        process: lines.last().map_or(1, |l| l.process),
        pid: lines.last().map_or(0, |l| l.pid),
        time: crate::io::now_rfc3339(),
        at: "recovered".into(),
        roles: all,
    };
    let mut text = crate::io::read_to_string(&path).unwrap_or_default();
    if !text.is_empty() && !text.ends_with('\n') {
        text.truncate(text.rfind('\n').map_or(0, |i| i + 1));
    }
    text.push_str(&serde_json::to_string(&line).expect("serialisable"));
    text.push('\n');
    crate::io::write_atomic(&path, text.as_bytes())
}

/// What each process of the run spent, from the ledger (empty without one).
pub fn process_shares(path: &Path) -> Result<Vec<ProcessShare>> {
    let lines = read(path)?;
    let mut out: Vec<ProcessShare> = Vec::new();
    let mut start: BTreeMap<u32, RoleAccounting> = BTreeMap::new();
    for l in &lines {
        let t = total(&l.roles);
        let before = start.entry(l.process).or_insert_with(|| t.clone()).clone();
        let share = ProcessShare {
            process: l.process,
            pid: l.pid,
            started: out
                .iter()
                .find(|p| p.process == l.process)
                .map_or(l.time.clone(), |p| p.started.clone()),
            last: l.time.clone(),
            calls: t.calls.saturating_sub(before.calls),
            attempts: t.attempts.saturating_sub(before.attempts),
            prompt_tokens: t.prompt_tokens.saturating_sub(before.prompt_tokens),
            completion_tokens: t.completion_tokens.saturating_sub(before.completion_tokens),
            usd: (t.usd - before.usd).max(0.0),
        };
        match out.iter_mut().find(|p| p.process == l.process) {
            Some(p) => *p = share,
            None => out.push(share),
        }
    }
    Ok(out)
}

/// The writer of a run's ledger, for one process.
pub struct Ledger {
    path: PathBuf,
    process: u32,
    client: LlmClient,
    file: Mutex<std::fs::File>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("path", &self.path)
            .field("process", &self.process)
            .finish_non_exhaustive()
    }
}

impl Ledger {
    /// Carry the run's totals so far ([`recover`]) into `client`, and open the ledger for this
    /// process (the next process number), writing its `start` line.
    pub fn open(dir: &RunDir, client: &LlmClient) -> Result<Ledger> {
        let path = path(dir);
        let lines = read(&path)?;
        let prior = recover(dir)?;
        client.add_prior(&prior);
        let process = lines.iter().map(|l| l.process).max().unwrap_or(0) + 1;
        if path.exists() {
            // cut a torn tail so the next line starts on its own line
            let text = crate::io::read_to_string(&path)?;
            if !text.is_empty() && !text.ends_with('\n') {
                let keep = text.rfind('\n').map(|i| &text[..=i]).unwrap_or("");
                crate::io::write_atomic(&path, keep.as_bytes())?;
            }
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::io("opening", &path, e))?;
        let ledger = Ledger {
            path,
            process,
            client: client.clone(),
            file: Mutex::new(file),
        };
        ledger.append("start")?;
        Ok(ledger)
    }

    /// This process's number in the run.
    pub fn process(&self) -> u32 {
        self.process
    }

    /// Append the client's current totals (snapshot and write under one lock, so lines grow).
    fn append(&self, at: &str) -> Result<()> {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let line = Line {
            process: self.process,
            pid: std::process::id(),
            time: crate::io::now_rfc3339(),
            at: at.into(),
            roles: self
                .client
                .accounting()
                .roles
                .into_iter()
                .filter(|(_, r)| r.calls > 0 || r.attempts > 0)
                .collect(),
        };
        let mut text = serde_json::to_string(&line).expect("serialisable");
        text.push('\n');
        file.write_all(text.as_bytes())
            .and_then(|_| file.sync_data())
            .map_err(|e| Error::io("appending to", &self.path, e))
    }
}

/// The run's model: the LLM client, with the ledger written after every call.
pub struct Metered {
    client: LlmClient,
    ledger: Arc<Ledger>,
}

impl Metered {
    /// Wrap `client`, recording to `ledger`.
    pub fn new(client: LlmClient, ledger: Arc<Ledger>) -> Metered {
        Metered { client, ledger }
    }
}

#[async_trait]
impl ChatModel for Metered {
    fn describe(&self) -> String {
        self.client.describe()
    }

    fn describe_for(&self, role: CallRole) -> String {
        self.client.describe_for(role)
    }

    fn context_budget(&self, role: CallRole) -> Option<crate::llm::ContextBudget> {
        self.client.context_budget(role)
    }

    fn schema_support(&self, role: CallRole) -> Option<bool> {
        self.client.schema_support(role)
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse> {
        let out = self.client.chat(request).await;
        if let Err(e) = self.ledger.append("call") {
            tracing::warn!("the cost ledger could not be written: {e}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(calls: u64, usd: f64) -> RoleAccounting {
        RoleAccounting {
            calls,
            attempts: calls,
            prompt_tokens: 10 * calls,
            usd,
            ..RoleAccounting::default()
        }
    }

    #[test]
    fn shares_are_last_minus_start_and_a_torn_tail_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("costs.jsonl");
        let line = |process: u32, at: &str, calls: u64, usd: f64| {
            let l = Line {
                process,
                pid: 100 + process,
                time: format!("t{process}{at}{calls}"),
                at: at.into(),
                roles: BTreeMap::from([(CallRole::UserSim, acc(calls, usd))]),
            };
            serde_json::to_string(&l).unwrap() + "\n"
        };
        let text = [
            line(1, "start", 0, 0.0),
            line(1, "call", 1, 0.5),
            line(1, "call", 2, 1.0),
            line(2, "start", 2, 1.0),
            line(2, "call", 5, 2.5),
        ]
        .concat()
            + "{\"process\":2,\"pid\"";
        std::fs::write(&p, text).unwrap();
        assert_eq!(read(&p).unwrap().len(), 5);
        let s = process_shares(&p).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].calls, s[0].usd), (2, 1.0));
        assert_eq!((s[1].calls, s[1].usd), (3, 1.5));
        assert_eq!(s[1].prompt_tokens, 30);
        // a bad line that is not the last is an error naming it
        std::fs::write(&p, "garbage\n".to_string() + &line(1, "start", 0, 0.0)).unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains("costs.jsonl") && e.contains("line 1"), "{e}");
    }

    #[test]
    fn a_resume_keeps_the_money_the_log_and_checkpoint_recorded_beyond_the_ledger() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RunDir::open(tmp.path());
        let snapshot = |calls: u64, usd: f64| Accounting {
            roles: BTreeMap::from([(CallRole::UserSim, acc(calls, usd))]),
            ..Accounting::default()
        };
        // the ledger saw 2 calls; the log's tail (after the checkpoint) 5; the checkpoint 3
        let line = Line {
            process: 1,
            pid: 7,
            time: "t".into(),
            at: "call".into(),
            roles: snapshot(2, 0.4).roles,
        };
        std::fs::write(path(&dir), serde_json::to_string(&line).unwrap() + "\n").unwrap();
        let mut log = runlog::RunLog::open(&dir.log_path()).unwrap();
        let cost = match serde_json::to_value(snapshot(5, 1.0)).unwrap() {
            Value::Object(m) => m.into_iter().collect(),
            _ => unreachable!(),
        };
        log.append(Event::RunStopped {
            reason: "x".into(),
            iterations: 0,
            best_program_id: None,
            best_metrics: None,
            best_validation: None,
            cost,
            mutations: BTreeMap::new(),
            new_bests: BTreeMap::new(),
            episodes: None,
        })
        .unwrap();
        std::fs::write(
            dir.checkpoint_path(),
            serde_json::json!({"cost": snapshot(3, 2.0)}).to_string(),
        )
        .unwrap();
        absorb(&dir).unwrap();
        std::fs::remove_file(dir.log_path()).unwrap(); // as if cut back to the checkpoint
        let lines = read(&path(&dir)).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1].at, "recovered");
        let r = &lines[1].roles[&CallRole::UserSim];
        assert_eq!((r.calls, r.usd), (5, 2.0));
        assert_eq!(recover(&dir).unwrap()[&CallRole::UserSim].calls, 5);
        // nothing more to absorb: no second line
        absorb(&dir).unwrap();
        assert_eq!(read(&path(&dir)).unwrap().len(), 2);
    }

    #[test]
    fn max_roles_takes_the_later_snapshot_counter_by_counter() {
        let a = BTreeMap::from([(CallRole::UserSim, acc(3, 1.0))]);
        let b = BTreeMap::from([
            (CallRole::UserSim, acc(2, 2.0)),
            (CallRole::Agent, acc(1, 0.1)),
        ]);
        let m = max_roles(&a, &b);
        assert_eq!(m[&CallRole::UserSim].calls, 3);
        assert_eq!(m[&CallRole::UserSim].usd, 2.0);
        assert_eq!(m[&CallRole::Agent].calls, 1);
    }
}
