//! Per-endpoint state shared by every role (and every clone of an [`super::LlmClient`]) that
//! talks to one base URL (one replica).
//!
//! * **Adaptive concurrency** (AIMD, the default) — requests in flight to the endpoint are
//!   limited by a limit that starts at [`INITIAL_LIMIT`] (or the configured cap, when lower)
//!   and adapts to what the server can take:
//!   - it **grows** while answers succeed, latency stays flat and the limit is what holds
//!     requests back (callers are waiting for a slot): by one per answer at first (doubling
//!     every round trip, like TCP's slow start), by one per round trip after the first
//!     decrease; not past the point where the server last said it was busy (429 / 503) for
//!     [`PROBE_AFTER`], then probing past it eight times slower;
//!   - it **shrinks** on a sign of overload: a 429 or 503 (×0.9, and no growth until the
//!     server's `Retry-After` has passed), an attempt timing out with others in flight (×0.5),
//!     latency above half the attempt timeout (×0.8), or latency above twice its baseline for
//!     a second (`LATENCY_PERSIST`) and a baseline round trip (×0.8; a busy client machine makes
//!     latency jump for a moment, a queue at the server keeps it up; growth waits meanwhile).
//!     One decrease per round: a signal from a request sent before the last decrease does
//!     not count again;
//!   - it never exceeds the configured cap (the smallest `max_concurrency` of the specs using
//!     the endpoint and the client's `max_concurrency`), so `max_concurrency = 1` keeps exactly
//!     one request in flight.
//!
//!   With `adaptive_concurrency = false` the limit is the cap, fixed.
//! * **Health** — a replica whose requests fail several times in a row (connection refused,
//!   broken connections, 5xx) is *benched*: the client sends its requests to the other
//!   replicas of the model for a while (5 s, doubling to 60 s while it keeps failing), then
//!   tries it again. A replica that is the only one left is never skipped.
//! * **Reachability** — when a connection is refused (nothing listens: the server is down or
//!   restarting) and no other replica can answer, the first caller starts a bounded wait of
//!   `endpoint_wait_s`, probing the port with plain TCP connects (0.25 s, doubling to 2 s);
//!   every other caller of the endpoint joins the same wait instead of spending its own
//!   retries. When the endpoint answers, all go on. When the wait runs out, the endpoint is
//!   marked down: later calls make one quick connect check and fail at once if it is still
//!   refused.
//!
//! [`EndpointStats`] reports the limit reached (final, maximum, decreases) per endpoint.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// The limit an adaptive endpoint starts with (or its cap, when lower).
pub const INITIAL_LIMIT: usize = 8;
/// Latency above this multiple of the baseline (plus [`LATENCY_SLACK`]) is a sign of
/// queueing at the server.
const LATENCY_TOLERANCE: f64 = 2.0;
/// Latency differences below this many seconds say nothing about an LLM server (scheduling
/// jitter of a busy client machine).
const LATENCY_SLACK: f64 = 0.05;
/// How long latency must stay high before it lowers the limit (at least; see
/// [`LATENCY_PERSIST_RTTS`]).
const LATENCY_PERSIST: Duration = Duration::from_secs(1);
/// ... and for at least this many baseline round trips.
const LATENCY_PERSIST_RTTS: f64 = 1.0;
/// Growth above the last busy point is this many times slower.
const PROBE_SLOWDOWN: f64 = 8.0;
/// How long the limit stays at or below the point where the server last said it was busy
/// before it probes past it again.
pub const PROBE_AFTER: Duration = Duration::from_secs(30);
/// Weight of the newest answer in the smoothed latency.
const LATENCY_SMOOTHING: f64 = 0.2;
/// How fast the baseline latency creeps up towards the smoothed latency, per answer (so that
/// a workload whose requests grow longer is not taken for congestion forever).
const BASELINE_DRIFT: f64 = 0.002;
/// Failures in a row (5xx, broken connections) before a replica is benched.
const BENCH_AFTER: u32 = 3;
/// First bench of a replica; doubled while it keeps failing, up to [`BENCH_MAX`].
const BENCH_FIRST: Duration = Duration::from_secs(5);
/// Longest bench.
const BENCH_MAX: Duration = Duration::from_secs(60);
/// Longest time one connect probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why an endpoint's limit went down (or would have).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overload {
    /// HTTP 429 or 503: the server says it is busy.
    Busy,
    /// An attempt timed out.
    Timeout,
}

/// The concurrency an endpoint reached, for summaries and the run log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EndpointStats {
    /// The base URL (one replica).
    pub url: String,
    /// Whether the limit adapts (false: fixed at `cap`).
    pub adaptive: bool,
    /// The configured cap (`None`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<usize>,
    /// The limit now (at the end of a run: where it settled).
    pub limit: usize,
    /// The highest limit reached.
    pub max_limit: usize,
    /// Times the limit went down.
    pub decreases: u64,
    /// Most requests in flight at once.
    pub max_in_flight: usize,
    /// Requests answered (successful attempts).
    pub answered: u64,
    /// Times the replica was benched after failing repeatedly.
    pub benched: u64,
}

impl std::fmt::Display for EndpointStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.adaptive {
            write!(
                f,
                "{}: concurrency {} (max {}, {} decrease{}",
                self.url,
                self.limit,
                self.max_limit,
                self.decreases,
                if self.decreases == 1 { "" } else { "s" }
            )?;
            if let Some(cap) = self.cap {
                write!(f, ", cap {cap}")?;
            }
            write!(f, ")")?;
        } else {
            match self.cap {
                Some(cap) => write!(f, "{}: concurrency fixed at {cap}", self.url)?,
                None => write!(f, "{}: concurrency unlimited", self.url)?,
            }
        }
        write!(
            f,
            ", {} in flight at most, {} answers",
            self.max_in_flight, self.answered
        )?;
        if self.benched > 0 {
            write!(f, ", benched {} time(s)", self.benched)?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct Gate {
    in_flight: usize,
    /// Callers waiting for a slot (demand the limit holds back), by (priority, arrival): the
    /// first in this order is served first ([`first_come`]).
    waiting: std::collections::BTreeSet<(u64, u64)>,
    /// Just below where the server last answered 429 / 503: no growth past it until
    /// `probe_at`, slow growth after.
    ceiling: Option<f64>,
    probe_at: Option<Instant>,
    /// The limit (fractional: additive growth adds 1/limit per answer).
    limit: f64,
    /// The cap (`usize::MAX`: none).
    cap: usize,
    adaptive: bool,
    /// Growing by one per answer until the first decrease.
    slow_start: bool,
    /// Bumped by every decrease; a slot remembers the epoch it started in.
    epoch: u64,
    /// Smoothed latency of answers, seconds.
    smoothed: Option<f64>,
    /// Baseline latency (the lowest smoothed latency, creeping up slowly), seconds.
    baseline: Option<f64>,
    /// No growth before this instant (a server's `Retry-After`).
    hold_until: Option<Instant>,
    /// Since when the smoothed latency has been high (queueing), if it is (tokio's clock, so
    /// that tests can move it).
    high_since: Option<tokio::time::Instant>,
    max_limit: usize,
    decreases: u64,
    max_in_flight: usize,
    answered: u64,
    /// Failures in a row.
    failures: u32,
    benched_until: Option<Instant>,
    bench_len: Duration,
    benched: u64,
}

impl Gate {
    fn current(&self) -> usize {
        (self.limit.floor() as usize).clamp(1, self.cap)
    }
}

#[derive(Debug, Default)]
struct Health {
    /// When the current outage was first seen.
    down_since: Option<Instant>,
    /// Set once a wait ran out: calls fail fast until a probe succeeds.
    gave_up: bool,
    /// The last connect error.
    last_error: String,
}

/// One endpoint's shared state. See the [module docs](self).
#[derive(Debug)]
pub struct Endpoint {
    url: String,
    addr: Option<(String, u16)>,
    gate: Mutex<Gate>,
    released: Notify,
    health: Mutex<Health>,
}

/// A request slot at an endpoint; frees it when dropped.
#[derive(Debug)]
pub struct Slot<'a> {
    endpoint: &'a Endpoint,
    ticket: Ticket,
}

/// What a slot knew when it was taken, kept after the slot is freed to report the outcome.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    in_flight_at_start: usize,
    epoch: u64,
}

impl Ticket {
    /// Requests in flight at the endpoint when the slot was taken (this one included).
    pub fn in_flight_at_start(&self) -> usize {
        self.in_flight_at_start
    }
}

impl Slot<'_> {
    /// Requests in flight at this endpoint when the slot was taken (this one included).
    pub fn in_flight_at_start(&self) -> usize {
        self.ticket.in_flight_at_start
    }

    /// The slot's ticket, to report the attempt's outcome after freeing the slot.
    pub fn ticket(&self) -> Ticket {
        self.ticket
    }

    /// The endpoint of this slot.
    pub fn endpoint(&self) -> &Endpoint {
        self.endpoint
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        {
            let mut g = self.endpoint.lock_gate();
            g.in_flight = g.in_flight.saturating_sub(1);
        }
        self.endpoint.released.notify_waiters();
    }
}

/// A caller waiting for a slot ([`Endpoint::waiting`]).
#[derive(Debug)]
pub struct Waiting<'a> {
    endpoint: &'a Endpoint,
    key: (u64, u64),
}

impl Waiting<'_> {
    /// The waiter's place in line: (priority, arrival).
    pub fn key(&self) -> (u64, u64) {
        self.key
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut g = self.endpoint.lock_gate();
        g.waiting.remove(&self.key);
        drop(g);
        // a waiter that leaves may have been the one holding the line
        self.endpoint.released.notify_waiters();
    }
}

tokio::task_local! {
    static PRIORITY: u64;
}

/// Order of work started so far (lower started earlier).
static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Run `work` with the priority of work started now: when an endpoint takes fewer requests at
/// once than there are callers, every request made inside `work` gets a slot before those of
/// work started later. An episode is one piece of work, so episodes that started first finish
/// first (and are kept as they finish) instead of all advancing one request at a time.
pub async fn first_come<F: std::future::Future>(work: F) -> F::Output {
    let p = STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    PRIORITY.scope(p, work).await
}

/// The priority of the calling work: its [`first_come`] scope, else a new place at the end.
pub fn current_priority() -> u64 {
    PRIORITY
        .try_with(|p| *p)
        .unwrap_or_else(|_| STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
}

/// A fixed number of permits served in [`first_come`] order (then arrival), unlike a FIFO
/// semaphore, which serves calls in arrival order and so lets every piece of work advance one
/// request at a time.
#[derive(Debug)]
pub struct Line {
    cap: usize,
    state: Mutex<(usize, std::collections::BTreeSet<(u64, u64)>)>,
    released: Notify,
}

/// A permit of a [`Line`], given back when dropped.
#[derive(Debug)]
pub struct LinePermit<'a> {
    line: &'a Line,
}

impl Drop for LinePermit<'_> {
    fn drop(&mut self) {
        self.line.lock().0 -= 1;
        self.line.released.notify_waiters();
    }
}

/// A place in a [`Line`]'s queue, left when dropped (a caller that gives up waiting).
struct Queued<'a> {
    line: &'a Line,
    key: (u64, u64),
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.line.lock().1.remove(&self.key);
        self.line.released.notify_waiters();
    }
}

impl Line {
    /// `cap` permits (at least one).
    pub fn new(cap: usize) -> Self {
        Line {
            cap: cap.max(1),
            state: Mutex::new((0, Default::default())),
            released: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, std::collections::BTreeSet<(u64, u64)>)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait for a permit; the callers ahead in line are served first.
    pub async fn permit(&self) -> LinePermit<'_> {
        let key = line_key();
        let mut queued: Option<Queued<'_>> = None;
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            {
                let mut g = self.lock();
                let ahead = g.1.range(..key).count();
                if g.0 + ahead < self.cap {
                    g.0 += 1;
                    drop(g);
                    drop(queued); // leaves the queue
                    return LinePermit { line: self };
                }
                if queued.is_none() {
                    g.1.insert(key);
                }
            }
            if queued.is_none() {
                queued = Some(Queued { line: self, key });
            }
            released.await;
        }
    }

    /// Permits in use now.
    pub fn in_use(&self) -> usize {
        self.lock().0
    }
}

/// Arrival order of waiters (ties of priority are served in arrival order).
static ARRIVED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A new place in line for the calling work.
pub fn line_key() -> (u64, u64) {
    (
        current_priority(),
        ARRIVED.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
    )
}

/// How a wait for an unreachable endpoint ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reachability {
    /// The endpoint accepts connections again (after this long a wait).
    Back(Duration),
    /// Still refused after the wait (or at once, when an earlier wait had already run out).
    Down(String),
}

/// Host and port of an `http(s)://` URL.
fn host_port(url: &str) -> Option<(String, u16)> {
    let u = reqwest::Url::parse(url).ok()?;
    let host = u.host_str()?.to_string();
    let port = u.port_or_known_default()?;
    Some((host, port))
}

impl Endpoint {
    /// State for `url` with an adaptive limit capped at `max_concurrency` (`None`: no cap).
    pub fn new(url: &str, max_concurrency: Option<usize>) -> Self {
        Endpoint::with_mode(url, max_concurrency, true)
    }

    /// State for `url`; `adaptive` false fixes the limit at `max_concurrency` (`None`: no
    /// limit).
    pub fn with_mode(url: &str, max_concurrency: Option<usize>, adaptive: bool) -> Self {
        let cap = max_concurrency.unwrap_or(usize::MAX).max(1);
        let start = if adaptive {
            INITIAL_LIMIT.min(cap)
        } else {
            cap
        };
        Endpoint {
            url: url.to_string(),
            addr: host_port(url),
            gate: Mutex::new(Gate {
                in_flight: 0,
                waiting: Default::default(),
                ceiling: None,
                probe_at: None,
                limit: start as f64,
                cap,
                adaptive,
                slow_start: true,
                epoch: 0,
                smoothed: None,
                baseline: None,
                high_since: None,
                hold_until: None,
                max_limit: start,
                decreases: 0,
                max_in_flight: 0,
                answered: 0,
                failures: 0,
                benched_until: None,
                bench_len: BENCH_FIRST,
                benched: 0,
            }),
            released: Notify::new(),
            health: Mutex::new(Health::default()),
        }
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn lock_gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lower the cap (several specs on one endpoint: the smallest wins).
    pub fn limit_to(&self, max_concurrency: Option<usize>) {
        if let Some(m) = max_concurrency {
            let mut g = self.lock_gate();
            g.cap = g.cap.min(m.max(1));
            g.limit = g.limit.min(g.cap as f64);
            if !g.adaptive {
                g.limit = g.cap as f64;
            }
            g.max_limit = g.max_limit.min(g.cap);
        }
    }

    /// The current concurrency limit (`usize::MAX`: none).
    pub fn limit(&self) -> usize {
        self.lock_gate().current()
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.lock_gate().in_flight
    }

    /// What the endpoint reached so far.
    pub fn stats(&self) -> EndpointStats {
        let g = self.lock_gate();
        EndpointStats {
            url: self.url.clone(),
            adaptive: g.adaptive,
            cap: (g.cap != usize::MAX).then_some(g.cap),
            limit: g.current(),
            max_limit: g.max_limit,
            decreases: g.decreases,
            max_in_flight: g.max_in_flight,
            answered: g.answered,
            benched: g.benched,
        }
    }

    /// A slot, if one is free now (whoever waits for it).
    pub fn try_slot(&self) -> Option<Slot<'_>> {
        self.try_slot_as((0, 0))
    }

    /// A slot, if one is free now for a caller at place `key` in line: the callers waiting
    /// ahead of it are served first.
    pub fn try_slot_as(&self, key: (u64, u64)) -> Option<Slot<'_>> {
        let mut g = self.lock_gate();
        let ahead = g.waiting.range(..key).count();
        if g.in_flight + ahead < g.current() {
            g.in_flight += 1;
            g.max_in_flight = g.max_in_flight.max(g.in_flight);
            Some(Slot {
                endpoint: self,
                ticket: Ticket {
                    in_flight_at_start: g.in_flight,
                    epoch: g.epoch,
                },
            })
        } else {
            None
        }
    }

    /// A future that completes when a slot is freed (or the limit grows). Create it (and
    /// `enable` it) *before* trying for a slot, so that no release is missed.
    pub fn released(&self) -> tokio::sync::futures::Notified<'_> {
        self.released.notified()
    }

    /// Wait for a request slot; callers are served by [`first_come`] priority, then arrival.
    pub async fn slot(&self) -> Slot<'_> {
        let key = line_key();
        let mut waiting = None;
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Some(slot) = self.try_slot_as(key) {
                return slot;
            }
            waiting.get_or_insert_with(|| self.waiting_as(key));
            released.await;
        }
    }

    /// Count a caller as waiting for a slot here until the guard is dropped (the demand that
    /// lets the limit grow), with a new place in line.
    pub fn waiting(&self) -> Waiting<'_> {
        self.waiting_as(line_key())
    }

    /// [`Endpoint::waiting`] at a given place in line.
    pub fn waiting_as(&self, key: (u64, u64)) -> Waiting<'_> {
        self.lock_gate().waiting.insert(key);
        Waiting {
            endpoint: self,
            key,
        }
    }

    /// Whether the replica is benched now (failed repeatedly; others should answer).
    pub fn is_benched(&self) -> bool {
        self.lock_gate()
            .benched_until
            .is_some_and(|t| Instant::now() < t)
    }

    /// When the bench of this replica ends (`None`: not benched).
    pub fn benched_until(&self) -> Option<Instant> {
        self.lock_gate()
            .benched_until
            .filter(|t| Instant::now() < *t)
    }

    /// A request failed in a way that says something about the replica's health (refused or
    /// broken connections, 5xx). `at_once` benches it without waiting for more failures
    /// (a refused connection when other replicas can answer). Returns whether it was benched
    /// now.
    pub fn failed(&self, at_once: bool) -> bool {
        let mut g = self.lock_gate();
        g.failures += 1;
        let now = Instant::now();
        let benched_now = g.benched_until.is_some_and(|t| now < t);
        if benched_now || !(at_once || g.failures >= BENCH_AFTER) {
            return false;
        }
        let len = g.bench_len;
        g.benched_until = Some(now + len);
        g.bench_len = (len * 2).min(BENCH_MAX);
        g.benched += 1;
        g.failures = 0;
        true
    }

    /// An attempt was answered after `latency`; `timeout` is the attempt timeout (the limit
    /// does not grow towards latencies that would come close to it).
    pub fn answered(&self, ticket: Ticket, latency: Duration, timeout: Duration) {
        let grew = {
            let mut g = self.lock_gate();
            g.answered += 1;
            g.failures = 0;
            g.benched_until = None;
            g.bench_len = BENCH_FIRST;
            if g.adaptive {
                adapt_on_answer(&mut g, ticket, latency.as_secs_f64(), timeout.as_secs_f64())
            } else {
                false
            }
        };
        if grew {
            self.released.notify_waiters();
        }
        let mut h = self.lock_health();
        h.down_since = None;
        h.gave_up = false;
    }

    /// A sign of overload from an attempt with `ticket`; `retry_after` is the server's
    /// `Retry-After`. Returns the new limit when it went down.
    pub fn overloaded(
        &self,
        ticket: Ticket,
        why: Overload,
        retry_after: Option<Duration>,
    ) -> Option<usize> {
        let mut g = self.lock_gate();
        if let Some(ra) = retry_after {
            let until = Instant::now() + ra;
            g.hold_until = Some(g.hold_until.map_or(until, |t| t.max(until)));
        }
        if !g.adaptive {
            return None;
        }
        let factor = match why {
            Overload::Busy => {
                let below = ticket.in_flight_at_start.saturating_sub(1).max(1) as f64;
                g.ceiling = Some(g.ceiling.map_or(below, |c| c.min(below)));
                g.probe_at = Some(Instant::now() + PROBE_AFTER);
                0.9
            }
            // A lone request timing out says nothing about queueing.
            Overload::Timeout if ticket.in_flight_at_start <= 1 => return None,
            Overload::Timeout => 0.5,
        };
        decrease(&mut g, ticket, factor)
    }

    /// One TCP connect to the endpoint's host and port.
    async fn probe(&self) -> Result<(), String> {
        let Some((host, port)) = &self.addr else {
            return Err(format!("cannot tell host and port of '{}'", self.url));
        };
        match tokio::time::timeout(
            PROBE_TIMEOUT,
            tokio::net::TcpStream::connect((host.as_str(), *port)),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no connection within {PROBE_TIMEOUT:?}")),
        }
    }

    /// A connection to the endpoint could not be made (`error`): wait, at most `wait` from the
    /// start of the outage and not past `deadline`, until it accepts connections again.
    pub async fn wait_until_reachable(
        &self,
        error: &str,
        wait: Duration,
        deadline: Instant,
    ) -> Reachability {
        let since = {
            let mut h = self.lock_health();
            h.last_error = error.to_string();
            if h.gave_up {
                None
            } else {
                Some(*h.down_since.get_or_insert_with(Instant::now))
            }
        };
        let Some(since) = since else {
            // An earlier wait ran out: one quick check, then fail fast.
            return match self.probe().await {
                Ok(()) => {
                    let mut h = self.lock_health();
                    h.gave_up = false;
                    h.down_since = None;
                    Reachability::Back(Duration::ZERO)
                }
                Err(e) => Reachability::Down(format!(
                    "{} still refuses connections ({e}); it was given up on after a wait of \
                     {:.0} s, so this call fails at once",
                    self.url,
                    wait.as_secs_f64()
                )),
            };
        };
        let started = Instant::now();
        let give_up_at = (since + wait).min(deadline);
        let mut pause = Duration::from_millis(250);
        loop {
            match self.probe().await {
                Ok(()) => {
                    let mut h = self.lock_health();
                    h.down_since = None;
                    h.gave_up = false;
                    return Reachability::Back(started.elapsed());
                }
                Err(e) => {
                    self.lock_health().last_error = e;
                }
            }
            let now = Instant::now();
            if now >= give_up_at {
                break;
            }
            tokio::time::sleep(pause.min(give_up_at - now)).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
        let mut h = self.lock_health();
        let out_for = since.elapsed();
        if Instant::now() >= since + wait {
            h.gave_up = true;
        }
        Reachability::Down(format!(
            "{} refused connections for {:.1} s (last error: {}); is the server running?",
            self.url,
            out_for.as_secs_f64(),
            h.last_error
        ))
    }
}

/// Lower the limit by `factor`, once per epoch. Returns the new limit when it changed.
fn decrease(g: &mut Gate, ticket: Ticket, factor: f64) -> Option<usize> {
    g.slow_start = false;
    if ticket.epoch != g.epoch {
        return None;
    }
    let before = g.current();
    // Never above what was in flight when the signal was sent, nor below one.
    let base = g.limit.min(ticket.in_flight_at_start.max(1) as f64);
    g.limit = (base * factor).floor().max(1.0);
    g.epoch += 1;
    let after = g.current();
    if after < before {
        g.decreases += 1;
        Some(after)
    } else {
        None
    }
}

/// The AIMD step after an answer. Returns whether the limit grew.
fn adapt_on_answer(g: &mut Gate, ticket: Ticket, latency: f64, timeout: f64) -> bool {
    let smoothed = match g.smoothed {
        None => latency,
        Some(s) => s + LATENCY_SMOOTHING * (latency - s),
    };
    g.smoothed = Some(smoothed);
    let baseline = match g.baseline {
        None => smoothed,
        Some(b) if smoothed < b => smoothed,
        Some(b) => b + BASELINE_DRIFT * (smoothed - b),
    };
    g.baseline = Some(baseline);
    let queueing =
        ticket.in_flight_at_start > 1 && smoothed > LATENCY_TOLERANCE * baseline + LATENCY_SLACK;
    if smoothed > timeout / 2.0 {
        g.high_since = None;
        decrease(g, ticket, 0.8);
        return false;
    }
    if queueing {
        // Latency is a soft signal: on a busy client machine (sandboxed programs starting, a
        // local server sharing its cores) it jumps for a moment with no queue at the server.
        // Only latency that stays high lowers the limit; growth waits meanwhile.
        let now = tokio::time::Instant::now();
        let since = *g.high_since.get_or_insert(now);
        let persist = LATENCY_PERSIST.max(Duration::from_secs_f64(LATENCY_PERSIST_RTTS * baseline));
        if now.duration_since(since) >= persist {
            g.high_since = None;
            decrease(g, ticket, 0.8);
        }
        return false;
    }
    g.high_since = None;
    let before = g.current();
    let held = g.hold_until.is_some_and(|t| Instant::now() < t);
    if g.waiting.is_empty() || held || smoothed > timeout / 4.0 || before >= g.cap {
        return false;
    }
    let step = if g.slow_start {
        1.0
    } else {
        1.0 / g.limit.max(1.0)
    };
    let probing = g.probe_at.is_none_or(|t| Instant::now() >= t);
    match g.ceiling {
        Some(c) if g.limit + step > c && !probing => {
            if g.limit >= c {
                return false;
            }
            g.limit = c;
        }
        // Probing above the last busy point: slowly, and the point moves up with it.
        Some(c) if g.limit + step > c => {
            let slow = step / PROBE_SLOWDOWN;
            g.limit = g.limit.max(c) + slow;
            g.ceiling = Some(c + slow);
        }
        _ => g.limit += step,
    }
    g.limit = g.limit.min(g.cap as f64);
    let after = g.current();
    g.max_limit = g.max_limit.max(after);
    after > before
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const T: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn slots_follow_the_limit_and_timeouts_halve_it() {
        let e = Arc::new(Endpoint::new("http://127.0.0.1:9/v1", Some(4)));
        assert_eq!(
            e.limit(),
            4,
            "an adaptive limit starts at its cap when that is lower"
        );
        let a = e.slot().await;
        let b = e.slot().await;
        let c = e.slot().await;
        assert_eq!(c.in_flight_at_start(), 3);
        assert_eq!(e.overloaded(c.ticket(), Overload::Timeout, None), Some(1));
        assert_eq!(e.limit(), 1);
        // Another signal from a request sent before that decrease does not count again.
        assert_eq!(e.overloaded(b.ticket(), Overload::Timeout, None), None);
        drop((a, b));
        // Still one in flight (c) at a limit of 1: the next slot waits for c.
        let waiter = {
            let e = e.clone();
            tokio::spawn(async move {
                let s = e.slot().await;
                s.in_flight_at_start()
            })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished());
        drop(c);
        assert_eq!(waiter.await.unwrap(), 1);
        // A lone request timing out says nothing about queueing.
        let s = e.slot().await;
        assert_eq!(e.overloaded(s.ticket(), Overload::Timeout, None), None);
        let stats = e.stats();
        assert_eq!((stats.limit, stats.max_limit, stats.decreases), (1, 4, 1));
        assert_eq!(stats.max_in_flight, 3);
    }

    /// Answers at a flat latency with the limit in use: the limit doubles every round until the
    /// cap; a 429 lowers it by a tenth once, and `Retry-After` holds growth back.
    #[tokio::test]
    async fn the_limit_grows_on_flat_latency_and_backs_off_on_429() {
        let e = Endpoint::new("http://127.0.0.1:9/v1", Some(40));
        assert_eq!(e.limit(), INITIAL_LIMIT);
        // Without callers waiting for a slot the limit is not what holds anything back.
        let s = e.try_slot().unwrap();
        let t = s.ticket();
        drop(s);
        e.answered(t, Duration::from_millis(200), T);
        assert_eq!(e.limit(), INITIAL_LIMIT);
        let demand = e.waiting();
        for _ in 0..200 {
            let slots: Vec<Slot<'_>> = std::iter::from_fn(|| e.try_slot()).collect();
            let tickets: Vec<Ticket> = slots.iter().map(Slot::ticket).collect();
            drop(slots);
            for t in tickets {
                e.answered(t, Duration::from_millis(200), T);
            }
        }
        assert_eq!(e.limit(), 40, "{:?}", e.stats());
        let slots: Vec<Slot<'_>> = std::iter::from_fn(|| e.try_slot()).collect();
        let t = slots.last().unwrap().ticket();
        drop(slots);
        assert_eq!(
            e.overloaded(t, Overload::Busy, Some(Duration::from_secs(30))),
            Some(36)
        );
        // Held back by Retry-After: full use at flat latency does not grow it.
        for _ in 0..100 {
            let slots: Vec<Slot<'_>> = std::iter::from_fn(|| e.try_slot()).collect();
            let tickets: Vec<Ticket> = slots.iter().map(Slot::ticket).collect();
            drop(slots);
            for t in tickets {
                e.answered(t, Duration::from_millis(200), T);
            }
        }
        assert_eq!(e.limit(), 36);
        let stats = e.stats();
        assert_eq!((stats.max_limit, stats.decreases), (40, 1));
        drop(demand);
    }

    /// A server answering one request at a time: latency grows with what is in flight, and the
    /// limit comes down to a few instead of growing.
    #[tokio::test(start_paused = true)]
    async fn rising_latency_lowers_the_limit() {
        let e = Endpoint::new("http://127.0.0.1:9/v1", None);
        let _demand = e.waiting();
        for _ in 0..30 {
            let slots: Vec<Slot<'_>> = std::iter::from_fn(|| e.try_slot()).collect();
            let tickets: Vec<Ticket> = slots.iter().map(Slot::ticket).collect();
            drop(slots);
            // Served one after the other: the k-th waits for the k-1 before it.
            for (k, t) in tickets.into_iter().enumerate() {
                tokio::time::advance(Duration::from_secs(2)).await;
                e.answered(t, Duration::from_secs(2 * (k as u64 + 1)), T);
            }
        }
        // It settles at 5 here (3 when a single late answer counted): latency has to stay
        // high for a round trip before it lowers the limit.
        let stats = e.stats();
        assert!(stats.limit < INITIAL_LIMIT, "{stats:?}");
        assert!(stats.decreases >= 5, "{stats:?}");
        assert!(stats.max_limit < 2 * INITIAL_LIMIT, "{stats:?}");
    }

    /// A busy client machine: answers come late for a moment, then on time again. The limit
    /// does not come down.
    #[tokio::test(start_paused = true)]
    async fn a_brief_latency_spike_does_not_lower_the_limit() {
        let e = Endpoint::new("http://127.0.0.1:9/v1", None);
        let _demand = e.waiting();
        let round = |latency_ms: u64| {
            let slots: Vec<Slot<'_>> = std::iter::from_fn(|| e.try_slot()).collect();
            let tickets: Vec<Ticket> = slots.iter().map(Slot::ticket).collect();
            drop(slots);
            for t in tickets {
                e.answered(t, Duration::from_millis(latency_ms), T);
            }
        };
        for _ in 0..3 {
            tokio::time::advance(Duration::from_millis(200)).await;
            round(200);
        }
        let before = e.stats();
        tokio::time::advance(Duration::from_millis(300)).await;
        round(900);
        tokio::time::advance(Duration::from_millis(300)).await;
        round(900);
        let during = e.stats();
        assert!(
            during.limit >= before.limit && during.decreases == 0,
            "{during:?}"
        );
        for _ in 0..10 {
            tokio::time::advance(Duration::from_millis(200)).await;
            round(200);
        }
        let after = e.stats();
        assert_eq!(after.decreases, 0, "{after:?}");
        assert!(after.limit > before.limit, "{after:?}");
    }

    #[tokio::test]
    async fn a_fixed_limit_does_not_move() {
        let e = Endpoint::with_mode("http://127.0.0.1:9/v1", Some(1), false);
        let s = e.try_slot().unwrap();
        assert!(e.try_slot().is_none());
        let t = s.ticket();
        drop(s);
        e.answered(t, Duration::from_millis(1), T);
        assert_eq!(e.overloaded(t, Overload::Busy, None), None);
        assert_eq!(e.limit(), 1);
    }

    #[tokio::test]
    async fn a_replica_failing_repeatedly_is_benched() {
        let e = Endpoint::new("http://127.0.0.1:9/v1", None);
        assert!(!e.failed(false));
        assert!(!e.failed(false));
        assert!(e.failed(false));
        assert!(e.is_benched());
        assert_eq!(e.stats().benched, 1);
        let s = e.try_slot().unwrap();
        let t = s.ticket();
        drop(s);
        e.answered(t, Duration::from_millis(1), T);
        assert!(!e.is_benched(), "an answer ends the bench");
        assert!(e.failed(true), "a refused connection benches at once");
    }

    #[tokio::test]
    async fn a_refusing_endpoint_is_waited_for_then_failed_fast() {
        // A port with nothing listening.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let e = Endpoint::new(&format!("http://127.0.0.1:{port}/v1"), None);
        let started = Instant::now();
        let far = Instant::now() + Duration::from_secs(60);
        let r = e
            .wait_until_reachable("refused", Duration::from_millis(600), far)
            .await;
        assert!(
            matches!(&r, Reachability::Down(m) if m.contains("refused connections")),
            "{r:?}"
        );
        assert!(started.elapsed() >= Duration::from_millis(550));
        // Given up: the next caller fails at once.
        let started = Instant::now();
        let r = e
            .wait_until_reachable("refused", Duration::from_millis(600), far)
            .await;
        assert!(
            matches!(&r, Reachability::Down(m) if m.contains("fails at once")),
            "{r:?}"
        );
        assert!(started.elapsed() < Duration::from_millis(300));
        // It comes back: the quick check lets the call through.
        let _listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        let r = e
            .wait_until_reachable("refused", Duration::from_millis(600), far)
            .await;
        assert_eq!(r, Reachability::Back(Duration::ZERO));
    }
}
