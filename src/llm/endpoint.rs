//! Per-endpoint state shared by every role (and every clone of an [`super::LlmClient`]) that
//! talks to one base URL.
//!
//! * **Concurrency** — requests in flight to the endpoint are limited by the smallest
//!   `max_concurrency` of the specs using it (unbounded when none sets one). When an attempt
//!   times out while others were in flight, the limit is halved (down to 1): a server that
//!   answers one request at a time makes queued requests time out, and retrying them only
//!   adds load. After 20 answers in a row without a timeout the limit grows by one again, up
//!   to the configured one.
//! * **Reachability** — when a connection is refused (nothing listens: the server is down or
//!   restarting), the first caller starts a bounded wait of `endpoint_wait_s`, probing the
//!   port with plain TCP connects (0.25 s, doubling to 2 s); every other caller of the endpoint
//!   joins the same wait instead of spending its own retries. When the endpoint answers, all
//!   go on. When the wait runs out, the endpoint is marked down: later calls make one quick
//!   connect check and fail at once if it is still refused.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Answers in a row without a timeout before the concurrency limit grows by one.
const GROW_AFTER: u32 = 20;
/// Longest time one connect probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug)]
struct Gate {
    in_flight: usize,
    limit: usize,
    configured: usize,
    clean_streak: u32,
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
    in_flight_at_start: usize,
}

impl Slot<'_> {
    /// Requests in flight at this endpoint when the slot was taken (this one included).
    pub fn in_flight_at_start(&self) -> usize {
        self.in_flight_at_start
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
    /// State for `url` with at most `max_concurrency` requests in flight (`None`: no limit).
    pub fn new(url: &str, max_concurrency: Option<usize>) -> Self {
        let configured = max_concurrency.unwrap_or(usize::MAX).max(1);
        Endpoint {
            url: url.to_string(),
            addr: host_port(url),
            gate: Mutex::new(Gate {
                in_flight: 0,
                limit: configured,
                configured,
                clean_streak: 0,
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

    /// Lower the configured limit (several specs on one endpoint: the smallest wins).
    pub fn limit_to(&self, max_concurrency: Option<usize>) {
        if let Some(m) = max_concurrency {
            let mut g = self.lock_gate();
            g.configured = g.configured.min(m.max(1));
            g.limit = g.limit.min(g.configured);
        }
    }

    /// The current concurrency limit (`usize::MAX`: none).
    pub fn limit(&self) -> usize {
        self.lock_gate().limit
    }

    /// Wait for a request slot.
    pub async fn slot(&self) -> Slot<'_> {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            {
                let mut g = self.lock_gate();
                if g.in_flight < g.limit {
                    g.in_flight += 1;
                    return Slot {
                        endpoint: self,
                        in_flight_at_start: g.in_flight,
                    };
                }
            }
            released.await;
        }
    }

    /// An attempt timed out; with other requests in flight, halve the limit. Returns the new
    /// limit when it changed.
    pub fn timed_out(&self, in_flight_at_start: usize) -> Option<usize> {
        let mut g = self.lock_gate();
        g.clean_streak = 0;
        if in_flight_at_start <= 1 {
            return None;
        }
        let new = (in_flight_at_start / 2).max(1).min(g.limit);
        if new < g.limit {
            g.limit = new;
            Some(new)
        } else {
            None
        }
    }

    /// An attempt was answered: count towards growing the limit back.
    pub fn answered(&self) {
        let grew = {
            let mut g = self.lock_gate();
            g.clean_streak += 1;
            if g.clean_streak >= GROW_AFTER && g.limit < g.configured {
                g.limit += 1;
                g.clean_streak = 0;
                true
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn slots_follow_the_limit_and_timeouts_halve_it() {
        let e = Arc::new(Endpoint::new("http://127.0.0.1:9/v1", Some(4)));
        let a = e.slot().await;
        let b = e.slot().await;
        let c = e.slot().await;
        assert_eq!(c.in_flight_at_start(), 3);
        assert_eq!(e.timed_out(c.in_flight_at_start()), Some(1));
        assert_eq!(e.limit(), 1);
        // A lone request timing out says nothing about queueing.
        assert_eq!(e.timed_out(1), None);
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
        for _ in 0..GROW_AFTER {
            e.answered();
        }
        assert_eq!(e.limit(), 2);
        e.limit_to(Some(1));
        assert_eq!(e.limit(), 1);
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
