//! The attempts of one LLM call ([`LlmClient::attempts`]): each fitted to the context window,
//! sent to a replica's slot ([`acquire`]) within what is left of the deadline, a failure handled
//! by its kind (concurrency limits lowered, replicas benched, waiting for an endpoint to accept
//! connections, a prompt trimmed and sent again) and retried after a backoff, a failure of the
//! content with a higher temperature and the next seed.

use std::time::{Duration, Instant};

use super::super::context;
use super::super::endpoint::{Overload, Reachability, Slot, Ticket};
use super::super::{AttemptError, CallRole, ChatRequest, ChatResponse, FailureKind, ModelSpec};
use super::{
    unbounded_tools_hint, LlmClient, Outcome, Replica, Route, MAX_CONTEXT_RESENDS, MAX_RECONNECTS,
    RETRY_TEMPERATURES,
};
use crate::Result;

impl LlmClient {
    /// The attempts of one call, within its deadline: each fitted to the context window,
    /// sent to a replica's slot, and on failure handled by kind ([`LlmClient::after_failure`])
    /// and retried after a backoff ([`LlmClient::retry_delay`]) while retries and the deadline
    /// allow.
    pub(super) async fn attempts(
        &self,
        route: &Route,
        request: ChatRequest,
    ) -> Result<ChatResponse> {
        let role = request.role;
        let deadline_len = route.spec.deadline();
        let mut s = CallState {
            request,
            // The model's endpoint (all replicas) until an attempt names the replica it went to.
            endpoint: route.group.clone(),
            // Moved later by the time spent waiting in ppol's own queue for a request slot.
            deadline: Instant::now() + deadline_len,
            deadline_len,
            retry: 0,
            context_resends: 0,
            reconnects: 0,
            attempts: 0,
            notes: Vec::new(),
            avoid: None,
        };
        loop {
            let (sent, fit_note) = match self.fit(role, &s.request) {
                Ok(x) => x,
                Err(why) => return Err(self.fail(role, &s.endpoint, format!("{why} (not sent)"))),
            };
            let left = s.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let msg = format!(
                    "deadline of {:.1} s (deadline_s) reached after {} attempt(s)",
                    s.deadline_len.as_secs_f64(),
                    s.attempts
                );
                return Err(self.fail(role, &s.endpoint, msg));
            }
            // Waiting for a slot is ppol's own queue, not the server's time: it does not count
            // towards the deadline (the requests ahead have timeouts of their own).
            let queued_at = Instant::now();
            let (index, slot) = acquire(route, s.avoid).await;
            s.deadline += queued_at.elapsed();
            // Every attempt (a retry too) reserves its worst case before it is sent, and holds
            // it until its usage is counted: the calls in flight cannot overspend the cap.
            let reservation = match self.reserve(role, &sent).await {
                Ok(r) => r,
                Err(why) => {
                    drop(slot);
                    return Err(self.refuse(role, &s.endpoint, why));
                }
            };
            let replica = &route.replicas[index];
            s.endpoint = replica.endpoint.url().to_string();
            let left = s.deadline.saturating_duration_since(Instant::now());
            let timeout = route.spec.timeout().min(left.max(Duration::from_millis(1)));
            self.count_attempt(role, s.retry > 0);
            s.attempts += 1;
            let attempt_started = Instant::now();
            let result = attempt_within(replica, &route.spec, &sent, timeout).await;
            let latency = attempt_started.elapsed();
            let ticket = slot.ticket();
            drop(slot);
            let error = match result {
                Ok(mut response) => {
                    replica
                        .endpoint
                        .answered(ticket, latency, route.spec.timeout());
                    response.cached = false;
                    let used = response.usage.prompt_tokens + response.usage.completion_tokens;
                    if used > reservation.worst().tokens {
                        tracing::warn!(
                            role = role.as_str(),
                            endpoint = %s.endpoint,
                            "the answer reports {used} tokens, more than the request's worst \
                             case of {} (does the server ignore max_tokens?): counted as \
                             reported, so the budget cap may be passed by this call",
                            reservation.worst().tokens
                        );
                    }
                    if response.usage.prompt_tokens > 0 {
                        let p = response.usage.prompt_tokens;
                        self.update_window(&route.window_key, |w| w.calibration.observe(&sent, p));
                    }
                    self.record(
                        role,
                        Outcome::Answered(&response, attempt_started.elapsed().as_secs_f64()),
                    );
                    let mut all = std::mem::take(&mut s.notes);
                    all.extend(fit_note);
                    all.append(&mut response.notes);
                    response.notes = all;
                    return Ok(response);
                }
                Err(e) => e,
            };
            // a failed attempt's usage is unknown and not counted: its reservation goes back
            drop(reservation);
            s.avoid = (route.replicas.len() > 1).then_some(index);
            let failed = Failed {
                index,
                ticket,
                sent: &sent,
                started: attempt_started,
            };
            let error = match self.after_failure(route, failed, error, &mut s).await {
                Next::Again => continue,
                Next::Fail(msg) => return Err(self.fail(role, &s.endpoint, msg)),
                Next::Retry(error) => error,
            };
            let delay = match self.retry_delay(&error, &s) {
                Ok(delay) => delay,
                Err(msg) => return Err(self.fail(role, &s.endpoint, msg)),
            };
            if error.kind.is_about_content() {
                s.vary_request(&error);
            }
            tracing::warn!(
                role = role.as_str(),
                endpoint = %s.endpoint,
                attempt = s.attempts,
                max_retries = self.inner.max_retries,
                delay_ms = delay.as_millis() as u64,
                "{} failed: {error}; retrying in {:.1} s (retry {} of {}); if every retry fails, {}",
                purpose(role),
                delay.as_secs_f64(),
                s.retry + 1,
                self.inner.max_retries,
                if_it_fails(role)
            );
            tokio::time::sleep(delay).await;
            s.retry += 1;
        }
    }

    /// What a failed attempt means, by its kind: the endpoint's concurrency limit lowered
    /// (a timeout, busy), a replica benched, another replica or a wait for the endpoint to
    /// accept connections again (unreachable), the request trimmed and sent again (context
    /// length) or the error turned into a truncation (an endpoint that ran away).
    async fn after_failure(
        &self,
        route: &Route,
        failed: Failed<'_>,
        mut error: AttemptError,
        s: &mut CallState,
    ) -> Next {
        let Failed {
            index,
            ticket,
            sent,
            started: attempt_started,
        } = failed;
        let role = s.request.role;
        let replica = &route.replicas[index];
        let endpoint = s.endpoint.clone();
        let in_flight = ticket.in_flight_at_start();
        let several = route.replicas.len() > 1;
        let attempts = s.attempts;
        match error.kind {
            FailureKind::Timeout => {
                if let Some(limit) =
                    replica
                        .endpoint
                        .overloaded(ticket, Overload::Timeout, error.retry_after)
                {
                    tracing::warn!(
                        role = role.as_str(),
                        %endpoint,
                        in_flight,
                        limit,
                        "{} timed out with {in_flight} requests in flight at the endpoint: at \
                         most {limit} from now on (set max_concurrency for this model to \
                         choose); it is tried again",
                        purpose(role)
                    );
                    s.notes.push(format!(
                        "timed out with {in_flight} requests in flight at the endpoint; its \
                         concurrency limit was lowered to {limit}"
                    ));
                }
            }
            FailureKind::RateLimited | FailureKind::Server(503) => {
                if let Some(limit) =
                    replica
                        .endpoint
                        .overloaded(ticket, Overload::Busy, error.retry_after)
                {
                    tracing::info!(
                        %endpoint,
                        in_flight,
                        limit,
                        "the endpoint is busy ({}): at most {limit} requests in flight from \
                         now on",
                        error.kind.label()
                    );
                }
                if error.kind != FailureKind::RateLimited && replica.endpoint.failed(false) {
                    tracing::warn!(%endpoint, "replica benched after failing repeatedly");
                }
            }
            FailureKind::Server(_) | FailureKind::Connection => {
                let benched = replica.endpoint.failed(false);
                if benched && several {
                    tracing::warn!(
                        %endpoint,
                        "replica benched after failing repeatedly: {error}"
                    );
                }
            }
            FailureKind::Unreachable
                if several
                    && s.reconnects < MAX_RECONNECTS * route.replicas.len() as u32
                    && route
                        .replicas
                        .iter()
                        .enumerate()
                        .any(|(i, r)| i != index && !r.endpoint.is_benched()) =>
            {
                // Another replica can answer: bench this one and go there at once.
                replica.endpoint.failed(true);
                s.reconnects += 1;
                tracing::warn!(
                    %endpoint,
                    "replica refuses connections; benched, sending to another: {error}"
                );
                s.notes.push(format!(
                    "{endpoint} refused the connection; sent to another replica"
                ));
                return Next::Again;
            }
            FailureKind::Unreachable => {
                let reconnects = s.reconnects;
                if reconnects >= MAX_RECONNECTS {
                    return Next::Fail(format!(
                        "gave up after {attempts} attempt(s): the endpoint accepted TCP \
                             connections again {reconnects} times but the request still could \
                             not connect; last error: {error}"
                    ));
                }
                match replica
                    .endpoint
                    .wait_until_reachable(&error.message, self.inner.endpoint_wait, s.deadline)
                    .await
                {
                    Reachability::Back(waited) => {
                        s.reconnects += 1;
                        if !waited.is_zero() {
                            tracing::warn!(
                                %endpoint,
                                waited_s = waited.as_secs_f64(),
                                "the endpoint accepts connections again"
                            );
                            s.notes.push(format!(
                                "waited {:.1} s for the endpoint to accept connections",
                                waited.as_secs_f64()
                            ));
                        }
                        return Next::Again;
                    }
                    Reachability::Down(why) => {
                        return Next::Fail(format!("{why} (after {attempts} attempt(s))"));
                    }
                }
            }
            FailureKind::ContextLength => {
                let overflow = context::parse_overflow(&error.message).unwrap_or_default();
                let w = self.window(&route.window_key);
                let estimate = w.calibration.estimate(sent);
                let runaway = overflow.prompt_tokens.is_some_and(|p| {
                    let p = f64::from(p);
                    let e = f64::from(estimate);
                    (w.calibration.measured && p > 1.5 * e + 64.0)
                        || (!w.calibration.measured
                            && attempt_started.elapsed() > Duration::from_secs(15)
                            && p > e)
                });
                if let Some(window) = overflow.window {
                    self.update_window(&route.window_key, |w| w.learned = Some(window));
                }
                if runaway {
                    // The endpoint generated until its context was full (it ignores
                    // max_tokens): a failure of the content, not of the prompt's length.
                    let msg = format!(
                        "the endpoint kept generating until its context{} was full \
                         although max_tokens was {} (it ignores max_tokens: \
                         llama-cpp-python's function calling does); {}",
                        overflow
                            .window
                            .map(|w| format!(" of {w} tokens"))
                            .unwrap_or_default(),
                        sent.max_tokens.unwrap_or(0),
                        error.message
                    );
                    s.notes.push(
                        "the endpoint ran away (generated until its context was full)".to_string(),
                    );
                    error = AttemptError::new(FailureKind::Truncated, msg);
                } else {
                    s.context_resends += 1;
                    if s.context_resends > MAX_CONTEXT_RESENDS {
                        return Next::Fail(format!(
                            "{error} — still too long after trimming {MAX_CONTEXT_RESENDS} \
                                 times (not retried)"
                        ));
                    }
                    if let Some(p) = overflow.prompt_tokens {
                        self.update_window(&route.window_key, |w| {
                            w.calibration.observe(sent, u64::from(p))
                        });
                    }
                    if overflow.window.is_none() {
                        // No number given: aim a quarter below what was sent.
                        let guess = (self.window(&route.window_key).calibration.estimate(sent)
                            + sent.max_tokens.unwrap_or(0))
                            * 3
                            / 4;
                        let guess = guess.max(256);
                        let current = self.context_window(role).unwrap_or(u32::MAX);
                        self.update_window(&route.window_key, |w| {
                            w.learned = Some(guess.min(current))
                        });
                    }
                    let window = self.context_window(role).unwrap_or(0);
                    tracing::warn!(
                        role = role.as_str(),
                        %endpoint,
                        window,
                        "context window exceeded; trimming the history and sending again: {error}"
                    );
                    s.notes.push(format!(
                        "the endpoint rejected the prompt as too long for its context \
                         window ({window} tokens); sent again trimmed"
                    ));
                    return Next::Again;
                }
            }
            _ => {}
        }
        Next::Retry(error)
    }

    /// How long to wait before retrying after `error`, or why not to retry (not retryable,
    /// out of retries, past the deadline).
    fn retry_delay(
        &self,
        error: &AttemptError,
        s: &CallState,
    ) -> std::result::Result<Duration, String> {
        let (attempts, retry) = (s.attempts, s.retry);
        if !error.kind.is_retryable() {
            return Err(format!("{error} (not retried)"));
        }
        if retry >= self.inner.max_retries {
            return Err(format!(
                "gave up after {} attempt(s) ({} retries); last error: {error}",
                attempts, retry
            ));
        }
        let delay = self.backoff(retry, error.retry_after);
        if Instant::now() + delay >= s.deadline {
            return Err(format!(
                "deadline of {:.1} s (deadline_s) reached after {attempts} attempt(s); last \
                 error: {error}",
                s.deadline_len.as_secs_f64()
            ));
        }
        Ok(delay)
    }
}

/// The state of one call's attempts.
struct CallState {
    /// The request as the role's settings complete it (a content retry varies it).
    request: ChatRequest,
    /// Where the last attempt went (the model's endpoint before the first).
    endpoint: String,
    /// The call's deadline, and how long it was when the call started.
    deadline: Instant,
    deadline_len: Duration,
    retry: u32,
    context_resends: u32,
    reconnects: u32,
    attempts: u32,
    /// What happened on the way, for the answer's notes.
    notes: Vec<String>,
    /// The replica that failed the last attempt (a retry prefers another one).
    avoid: Option<usize>,
}

impl CallState {
    /// Before retrying after a failure of the content: a higher temperature and the next seed.
    fn vary_request(&mut self, error: &AttemptError) {
        let retry = self.retry;
        let request = &mut self.request;
        let t = RETRY_TEMPERATURES[(retry as usize).min(RETRY_TEMPERATURES.len() - 1)];
        request.temperature = Some(request.temperature.unwrap_or(0.0).max(t));
        if let Some(seed) = request.seed.as_mut() {
            *seed = seed.wrapping_add(1);
        }
        self.notes.push(format!(
            "retried after '{}' with temperature {t}{}",
            error.kind.label(),
            request
                .seed
                .map(|s| format!(" and seed {s}"))
                .unwrap_or_default()
        ));
    }
}

/// The attempt that just failed.
struct Failed<'a> {
    /// Which replica it went to, and its slot's ticket.
    index: usize,
    ticket: Ticket,
    /// What was sent, and when.
    sent: &'a ChatRequest,
    started: Instant,
}

/// What to do after a failed attempt.
enum Next {
    /// Send again at once (another replica, the endpoint back, a trimmed prompt).
    Again,
    /// Give up with this message.
    Fail(String),
    /// Retry after a backoff, if retries and the deadline allow.
    Retry(AttemptError),
}

/// One attempt at a replica, within `timeout`.
async fn attempt_within(
    replica: &Replica,
    spec: &ModelSpec,
    sent: &ChatRequest,
    timeout: Duration,
) -> std::result::Result<ChatResponse, AttemptError> {
    match tokio::time::timeout(timeout, replica.provider.attempt(sent)).await {
        Ok(r) => r,
        Err(_) => Err(AttemptError::new(
            FailureKind::Timeout,
            if timeout < spec.timeout() {
                format!(
                    "no answer within {:.3} s (what was left of the call's deadline)",
                    timeout.as_secs_f64()
                )
            } else {
                format!(
                    "no answer within {:.3} s{}",
                    timeout.as_secs_f64(),
                    unbounded_tools_hint(sent, spec)
                )
            },
        )),
    }
}

/// A request slot at one of the route's replicas: among those not benched (all, when every
/// one is), the one with the fewest requests in flight that has a free slot, preferring any
/// but `avoid` (the replica that just failed); ties rotate. Waits for a slot to free up.
async fn acquire(route: &Route, avoid: Option<usize>) -> (usize, Slot<'_>) {
    use std::sync::atomic::Ordering;
    let n = route.replicas.len();
    if n == 1 {
        return (0, route.replicas[0].endpoint.slot().await);
    }
    // Counted as demand at every replica while waiting (lets their limits grow), each at the
    // caller's place in line.
    let key = super::super::endpoint::line_key();
    let mut waiting = Vec::new();
    loop {
        let mut released: Vec<_> = route
            .replicas
            .iter()
            .map(|r| Box::pin(r.endpoint.released()))
            .collect();
        for r in released.iter_mut() {
            r.as_mut().enable();
        }
        let mut candidates: Vec<usize> = (0..n)
            .filter(|i| !route.replicas[*i].endpoint.is_benched())
            .collect();
        if candidates.is_empty() {
            candidates = (0..n).collect();
        }
        if candidates.len() > 1 {
            if let Some(a) = avoid {
                candidates.retain(|i| *i != a);
            }
        }
        let start = route.next.fetch_add(1, Ordering::Relaxed);
        candidates.sort_by_key(|i| {
            (
                route.replicas[*i].endpoint.in_flight(),
                (i + n - start % n) % n,
            )
        });
        for i in candidates {
            if let Some(slot) = route.replicas[i].endpoint.try_slot_as(key) {
                return (i, slot);
            }
        }
        if waiting.is_empty() {
            waiting = route
                .replicas
                .iter()
                .map(|r| r.endpoint.waiting_as(key))
                .collect();
        }
        futures::future::select_all(released).await;
    }
}

/// What a call of `role` was doing, for warnings a user reads without knowing the roles.
fn purpose(role: CallRole) -> &'static str {
    match role {
        CallRole::Mutator => "the mutator's call (writing an edit of a parent program)",
        CallRole::Reflection => "the reflection call (a critique of an evaluation for the mutator)",
        CallRole::Generator => "a generator program's call (writing personas)",
        CallRole::UserSim => "the user simulator's call (writing a user turn)",
        CallRole::Agent => "the agent's call (writing an agent turn)",
    }
}

/// What happens when a call of `role` fails for good.
fn if_it_fails(role: CallRole) -> &'static str {
    match role {
        CallRole::Mutator => {
            "this child is recorded as a failed mutation (mutator-call) and the run goes on"
        }
        CallRole::Reflection => "the mutator gets the computed critique alone",
        CallRole::Generator => "the program gets an LLMError (its generation may fail)",
        CallRole::UserSim | CallRole::Agent => "the episode is recorded as failed with this reason",
    }
}
