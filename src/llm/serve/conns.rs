//! The model endpoint's open connections, bounded: at most `max_connections` at once; a new
//! connection past the bound closes the one idle the longest (a request in progress is never
//! cut), and when every connection has a request in progress the accept loop waits for one to
//! end instead of accepting more. Idle and slow connections are also closed by hyper's header
//! read timeout; this bound is what holds when clients open connections faster than that.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{oneshot, Notify};

struct Entry {
    /// Requests in progress on the connection.
    busy: Arc<AtomicUsize>,
    /// Milliseconds since the endpoint started at the connection's last activity.
    last: Arc<AtomicU64>,
    /// Closes the connection (its serving task drops it).
    close: oneshot::Sender<()>,
}

/// The open connections.
pub(super) struct Conns {
    cap: usize,
    start: Instant,
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, Entry>>,
    closed: Notify,
    evicted: AtomicU64,
}

/// One open connection; unregisters itself when dropped.
pub(super) struct Conn {
    conns: Arc<Conns>,
    id: u64,
    busy: Arc<AtomicUsize>,
    last: Arc<AtomicU64>,
}

/// A request in progress on a connection (the connection is not idle while it lives).
pub(super) struct Busy {
    busy: Arc<AtomicUsize>,
    last: Arc<AtomicU64>,
    start: Instant,
}

impl Conns {
    pub(super) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Conns {
            cap: cap.max(1),
            start: Instant::now(),
            next: AtomicU64::new(0),
            open: Mutex::new(BTreeMap::new()),
            closed: Notify::new(),
            evicted: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Connections open now.
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Idle connections closed to make room for new ones.
    pub(super) fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::SeqCst)
    }

    /// Wait until one more connection fits: at once while below the cap; at the cap, the
    /// connection idle the longest is closed; when none is idle, until one closes.
    pub(super) async fn room(&self) {
        loop {
            let closed = self.closed.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            {
                let mut open = self.lock();
                if open.len() < self.cap {
                    return;
                }
                let idlest = open
                    .iter()
                    .filter(|(_, e)| e.busy.load(Ordering::SeqCst) == 0)
                    .min_by_key(|(id, e)| (e.last.load(Ordering::SeqCst), **id))
                    .map(|(id, _)| *id);
                if let Some(id) = idlest {
                    if let Some(e) = open.remove(&id) {
                        let _ = e.close.send(());
                        self.evicted.fetch_add(1, Ordering::SeqCst);
                    }
                    return;
                }
            }
            closed.await;
        }
    }

    /// Register a new connection; the receiver fires when it is to be closed.
    pub(super) fn open(self: &Arc<Self>) -> (Conn, oneshot::Receiver<()>) {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        let busy = Arc::new(AtomicUsize::new(0));
        let last = Arc::new(AtomicU64::new(self.now_ms()));
        self.lock().insert(
            id,
            Entry {
                busy: busy.clone(),
                last: last.clone(),
                close: tx,
            },
        );
        let conn = Conn {
            conns: self.clone(),
            id,
            busy,
            last,
        };
        (conn, rx)
    }
}

impl Conn {
    /// A request starts on this connection.
    pub(super) fn busy(&self) -> Busy {
        self.busy.fetch_add(1, Ordering::SeqCst);
        Busy {
            busy: self.busy.clone(),
            last: self.last.clone(),
            start: self.conns.start,
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.last
            .store(self.start.elapsed().as_millis() as u64, Ordering::SeqCst);
        self.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.conns.lock().remove(&self.id);
        self.conns.closed.notify_waiters();
    }
}

/// Raise this process's soft open-file limit so that `connections` fit beside what it already
/// uses (never above the hard limit; a failure leaves it as it was and is only logged).
pub(super) fn make_room_for(connections: usize) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let want = connections as u64 + 256;
    let mut lim = getrlimit(Resource::Nofile);
    let soft = lim.current.unwrap_or(u64::MAX);
    if soft >= want {
        return;
    }
    let hard = lim.maximum.unwrap_or(u64::MAX);
    lim.current = Some(want.min(hard));
    if let Err(e) = setrlimit(Resource::Nofile, lim) {
        tracing::warn!("could not raise the open-file limit from {soft} to {want}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_idlest_connection_makes_room_and_busy_ones_never_do() {
        let conns = Conns::new(2);
        conns.room().await;
        let (a, mut ra) = conns.open();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        conns.room().await;
        let (b, mut rb) = conns.open();
        // a is idle the longest: it is closed for the third
        conns.room().await;
        assert!(ra.try_recv().is_ok());
        assert!(rb.try_recv().is_err());
        assert_eq!(conns.evicted(), 1);
        drop(a);
        let (c, _rc) = conns.open();
        // both busy: no room until one ends
        let (_bb, _bc) = (b.busy(), c.busy());
        let wait = tokio::time::timeout(std::time::Duration::from_millis(50), conns.room()).await;
        assert!(wait.is_err(), "a busy connection was closed");
        drop(b);
        tokio::time::timeout(std::time::Duration::from_secs(5), conns.room())
            .await
            .expect("a closed connection makes room");
        assert_eq!(conns.len(), 1);
    }
}
